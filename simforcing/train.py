"""Training: stage 1 ``simforcing pretrain``, stage 2 ``simforcing train`` (SPEC §3, §4, §7) and the loop a policy run
shares (``simforcing.policy.train``).

    simforcing pretrain --preset demo --data DIR --out RUN1 [--init RUN0] [--resume] [--section.field=value ...]
    simforcing train --method simforcing --teacher RUN1 --data DIR --out RUN2 [--resume] [overrides]
    torchrun --nproc_per_node=N -m simforcing train ...          (FSDP2, see simforcing.parallel)
    train_run(cfg, out_dir, stage, teacher_run=None, resume=False, progress=True, method=None, init=None) -> dict

:class:`Trainer` is the loop: it claims the run folder, builds data and models, restores a checkpoint, takes steps
(``training.step``), logs (``training.runlog``), checkpoints, and stops on a signal, a fault or a NaN
(``training.faults``); what may start or continue a run is checked first (``training.checks``), the run folder is
checked and claimed by ``training.folder`` and a run is resumed by ``training.resume`` (the trainer's two mixins). The recipe, the
run folder's life cycle, resume and the exit codes are in docs/DESIGN.md ("Training").
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path
from typing import Optional

import torch
from tqdm import tqdm

from simforcing import parallel
from simforcing.checkpoint import capture_rng, list_checkpoints, load_model_state, save_checkpoint
from simforcing.config import STAGE1_METHOD, STAGE2_METHODS, Config, ConfigError
from simforcing.data.format import read_stats
from simforcing.data.latent_cache import LatentWindowDataset
from simforcing.data.paired import PairedWindowDataset
from simforcing.errors import EXIT_DIVERGED, EXIT_OK, EXIT_STOPPED, OutputError
from simforcing.locking import FolderLock
from simforcing.losses import NonFiniteLoss
from simforcing.methods import (METHODS, method_preset, needs_previous_chunk, needs_teacher, own_first_frames,
                                rollout_windows)
from simforcing.models.vae import load_vae
from simforcing.models.weights import frozen_copy, load_configured_weights
from simforcing.models.world_model import build_world_model
from simforcing.runfolder import CONFIG_FILE, INIT_FILE, TEACHER_FILE
from simforcing.threads import configure_threads
from simforcing.training.checks import data_record
from simforcing.training.faults import FaultPlan, StopFlag
from simforcing.training.folder import RunFolderMixin
from simforcing.training.optim import build_optimizer, lr_factor, param_groups
from simforcing.training.resume import ResumeMixin
from simforcing.training.runlog import RunLog
from simforcing.training.step import StepHooks, train_step
from simforcing.utils import atomic_write_json, atomic_write_text, derive_seed, seed_everything
from simforcing.warmstart import init_from_run

__all__ = ["Diverged", "Trainer", "derive_seed", "lr_factor", "param_groups", "train_run"]

# what the steps read ("states": the second chunk's first state when training on own rollouts)
_BATCH_KEYS = ("sim", "real", "z_sim", "z_real", "actions", "state0", "text", "text_mask", "states", "arm_mask",
               "has_arm_mask")


class Diverged(Exception):
    def __init__(self, step: int, term: str, value: float):
        self.step, self.term, self.value = step, term, value
        super().__init__(f"training diverged at step {step}: non-finite {term} ({value})")


class Trainer(RunFolderMixin, ResumeMixin):
    """One training run (stage "pretrain" or "train"); ``run()`` returns the result dict of :func:`train_run`.

    A subclass overrides the hooks ``_check_method``, ``_build_data``, ``_build_models``, ``_latents``,
    ``_step_function`` and ``_describe`` (the policy: ``simforcing.policy.train``). After ``run()``,
    ``student``/``teacher`` hold the final models (the test of the frozen teacher reads them).
    """

    STAGES = ("pretrain", "train")  # a subclass (the policy's trainer) names its own

    def __init__(self, cfg: Config, out_dir: str | Path, stage: str, teacher_run: str | Path | None = None,
                 resume: bool = False, progress: bool = True, init: str | Path | None = None):
        if stage not in self.STAGES:
            raise ValueError(f"stage: got {stage!r}; expected one of {', '.join(map(repr, self.STAGES))}")
        self.cfg, self.run_dir, self.stage = cfg, Path(out_dir), stage
        self.teacher_run = Path(teacher_run) if teacher_run is not None else None
        self.resume, self.progress = resume, progress
        self.start_from = Path(init) if init is not None else None  # stage 1: `pretrain --init RUN0` (warmstart)
        self.student: Optional[torch.nn.Module] = None
        self.teacher: Optional[torch.nn.Module] = None
        self.faults = FaultPlan.from_env()
        self.log: Optional[RunLog] = None  # exists once the run folder is ours (locked): then failures are recorded
        self.lock: Optional[FolderLock] = None
        self.run_id: Optional[str] = None
        self.teacher_ckpt = None
        self.resume_ckpt = None

    def _check_method(self, cfg: Config) -> None:
        """The stage's method (hook: a subclass trains something else)."""
        if self.stage == "pretrain" and cfg.train.method != STAGE1_METHOD:
            raise ConfigError(f"train.method: stage 1 trains 'sim_pretrain', got {cfg.train.method!r}")
        if self.stage == "train" and cfg.train.method not in STAGE2_METHODS:
            raise ConfigError(f"train.method: got {cfg.train.method!r}; stage 2 expects one of "
                              f"{', '.join(STAGE2_METHODS)}")

    def _step_function(self):
        """``step(student, teacher, batch, cfg, gen) -> (loss, logs)`` (hook: the method's step by default)."""
        return METHODS[self.cfg.train.method]

    def _describe(self) -> str:
        """The progress bar's label."""
        return f"{self.stage} {self.cfg.train.method}"

    # -- setup ----------------------------------------------------------------------------------------------------------
    def _setup(self) -> None:
        cfg = self.cfg
        self.dist = parallel.init_distributed(cfg.train.device)
        self.device = self.dist.device
        self._claim()
        if not self.resume:
            self.log.status("running", 0, "setting up")
        parallel.barrier()
        seed_everything(cfg.train.seed)  # identical model init on every rank and in every run of this config
        if self.resume:
            self.resume_ckpt = self._find_resume_checkpoint()
        self._build_data()
        self._note_left_out()
        self._build_models()
        self.spe = -(-len(self.dataset) // (cfg.train.batch_size * self.dist.world_size))  # steps per epoch
        self.total = cfg.train.max_steps if cfg.train.max_steps else cfg.train.epochs * self.spe
        self.log.facts["total_steps"] = self.total
        self.optimizer, self.scheduler = build_optimizer(self.student, cfg, self.total)
        self.params = [p for p in self.student.parameters() if p.requires_grad]
        self.step_fn = self._step_function()
        self.gen = torch.Generator(device=self.device)
        self.start_step, self.time_offset = 0, 0.0
        restored = self._restore() if self.resume_ckpt is not None else None
        if self.dist.is_main:  # the run has started: now its config is recorded
            cfg.save(self.run_dir / CONFIG_FILE)
            if self.teacher_ckpt is not None:
                atomic_write_json(self.run_dir / TEACHER_FILE,
                                  {"run": str(self.teacher_run.resolve()), "checkpoint": str(self.teacher_ckpt.path),
                                   "step": self.teacher_ckpt.step})
        if restored is None:
            self.log.reset()
        else:
            self.time_offset = self.log.truncate_after(restored)

    def _train_stats(self) -> Optional[dict]:
        """The normalisation statistics to train with: the resumed checkpoint's (its weights were trained with them),
        else stage 2's teacher's, else None (the dataset's own)."""
        if self.resume_ckpt is not None and self.resume_ckpt.meta.get("stats") is not None:
            return self.resume_ckpt.meta["stats"]
        return self.teacher_ckpt.meta.get("stats") if self.teacher_ckpt is not None else None

    def _build_data(self) -> None:
        cfg = self.cfg
        splits, domains = (("train", "sim_pool"), ("sim",)) if self.stage == "pretrain" else \
            (("train",), ("sim", "real"))
        stats = self._train_stats()
        self.vae = None
        if cfg.data.latent_cache:
            self.dataset = LatentWindowDataset(cfg, cfg.data.latent_cache, splits, domains, 0, stats)
        else:
            self.dataset = PairedWindowDataset(rollout_windows(cfg), cfg.data.root, splits, domains, 0, stats)
            self.vae = load_vae(cfg, self.device)
        self.stats = self.dataset.stats
        self.domains = domains

    def _dataset_stats(self) -> Optional[dict]:
        """The statistics the dataset itself holds now (meta/stats.json; a latent cache's index)."""
        if self.cfg.data.latent_cache:
            return self.dataset.stats
        try:
            return read_stats(self.cfg.data.root)
        except ValueError:
            return None

    def _note_left_out(self) -> None:
        """status.json and one line each: bad episodes skipped (data.skip_bad, each logged when found) and episodes
        shorter than one window (left out by every dataset, named here)."""
        skipped = getattr(self.dataset, "skipped", [])
        short = getattr(self.dataset, "dropped", [])
        self.log.facts["skipped_episodes"] = len(skipped)
        self.log.facts["skipped"] = [{"episode": eid, "reason": why} for eid, why in skipped]
        self.log.facts["too_short_episodes"] = len(short)
        self.log.facts["too_short"] = [{"episode": eid, "length": n} for eid, n in short]
        if short and self.dist.is_main:
            names = ", ".join(eid for eid, _ in short[:6]) + (f", … (+{len(short) - 6})" if len(short) > 6 else "")
            print(f"simforcing {self.stage}: {len(short)} episode(s) shorter than one window "
                  f"({self.cfg.data.window_steps} steps) left out [too_short_for_window]: {names}", flush=True)
        self.data_record = data_record(self.cfg, self.dataset)

    def _build_models(self) -> None:
        cfg = self.cfg
        # rank 0 builds and loads the full model; the other ranks of a sharded run build it on the meta device and
        # receive their shards from rank 0 (parallel.shard_from_rank0): one full copy in host memory, not one per rank
        full = self.dist.mesh is None or self.dist.is_main
        student = build_world_model(cfg, device="cpu", meta=not full)
        if full and self.stage == "pretrain":
            if not (self.resume and self.has_checkpoints) and self.start_from is not None:
                report = init_from_run(student, cfg, self.start_from)
                if self.dist.is_main:
                    atomic_write_text(self.run_dir / INIT_FILE, report.to_json() + "\n")
                    print(report.summary(), flush=True)
            elif not (self.resume and self.has_checkpoints):
                _load_start_weights(student, cfg)
        elif full:
            load_model_state(self.teacher_ckpt, student)
        teacher = frozen_copy(student) if self.stage == "train" and needs_teacher(cfg) else None
        self.student = parallel.shard_from_rank0(student, cfg, self.dist.mesh, self.device).train()
        if teacher is not None:
            self.teacher = parallel.shard_from_rank0(teacher, cfg, self.dist.mesh, self.device)

    # -- the loop -------------------------------------------------------------------------------------------------------
    def run(self) -> dict:
        self._preflight()
        stop = StopFlag().install()
        self.stop = stop
        try:
            self._setup()
            return self._loop()
        except ConfigError as e:
            if self.log is not None and self.log.wrote_status:  # refused after "setting up" was recorded
                self.log.final_status("failed", 0, f"ConfigError: {e}")
            raise  # a refusal before that: the run did not start and its folder's status is left as it was
        except Exception as e:
            if self.log is not None:
                problem = self.log.final_status("failed", getattr(self, "step", 0), f"{type(e).__name__}: {e}")
                if problem:
                    print(f"simforcing {self.stage}: {problem}", file=sys.stderr, flush=True)
            raise
        finally:
            stop.restore()
            if self.log is not None:
                try:
                    self.log.close()
                except OutputError:
                    pass  # already failing (or recorded by _loop); the first error is the one reported
            if self.lock is not None:
                self.lock.release()

    def _loop(self) -> dict:
        cfg = self.cfg
        governor = configure_threads(cfg.train.threads, self.device.type)
        self.step = step = self.start_step
        self.log.status("running", step)
        bar = tqdm(total=self.total, initial=step, desc=self._describe(), dynamic_ncols=True,
                   disable=not (self.progress and self.dist.is_main))
        t_start = t_prev = time.perf_counter()
        last_logs: dict = {}
        state, reason, code = "finished", "", EXIT_OK
        try:
            while step < self.total and state == "finished":
                epoch, pos = divmod(step, self.spe)
                loader = self._loader(epoch, pos)
                for batch in loader:
                    lr = self.scheduler.get_last_lr()[0]
                    logs, grad_norm = self._train_step(batch, step + 1)
                    step = self.step = step + 1
                    now = time.perf_counter()
                    dt, t_prev = now - t_prev, now  # one iteration, data loading included
                    bar.update(1)
                    if governor is not None:
                        governor.update()
                    if step % cfg.train.log_every == 0 or step in (1, self.total):
                        last_logs = self._log(step, lr, logs, grad_norm, dt, t_start)
                        bar.set_postfix(loss=f"{logs.get('loss', float('nan')):.4g}")
                    stopping = parallel.any_rank(self.stop.requested is not None, self.device)
                    if step % cfg.train.ckpt_every == 0 or step == self.total or stopping:
                        self._save(step)
                    if step >= self.total:
                        break
                    if stopping:
                        state, code = "stopped", EXIT_STOPPED
                        reason = f"{self.stop.requested or 'signal on another rank'}: checkpoint written at step {step}"
                        break
        except Diverged as e:
            state, code, reason = "diverged", EXIT_DIVERGED, str(e)
            good = list_checkpoints(self.run_dir)
            reason += f"; the last good checkpoint is {good[-1][1] if good else 'none'}"
            print(f"simforcing {self.stage}: {reason}", file=sys.stderr, flush=True)
        finally:
            bar.close()
        self.log.close()  # TensorBoard flushed and the loss plot written before the final status: a failed write
        plot = self.log.plot()  # of either is the run's failure, not a "finished" run with missing files
        self.log.status(state, step, reason, exit_code=code, total_steps=self.total)
        ckpts = [p for _, p in list_checkpoints(self.run_dir)]
        return {"state": state, "step": step, "exit_code": code, "reason": reason, "run_dir": str(self.run_dir),
                "checkpoint": str(ckpts[-1]) if ckpts else None, "total_steps": self.total, "last_logs": last_logs,
                "loss_curves": str(plot) if plot else None}

    def _loader(self, epoch: int, start: int):
        self.dataset.set_epoch(epoch)
        order_seed = derive_seed(self.cfg.train.seed, "order", epoch)
        sampler = parallel.GlobalBatchSampler(len(self.dataset), self.cfg.train.batch_size, order_seed,
                                              self.dist.rank, self.dist.world_size, start)
        return torch.utils.data.DataLoader(self.dataset, batch_sampler=sampler, num_workers=self.cfg.data.num_workers,
                                           generator=torch.Generator().manual_seed(order_seed & 0xFFFFFFFF),
                                           pin_memory=self.device.type == "cuda")

    def _latents(self, batch: dict, step: int) -> dict:
        """Move to the device; pixels -> latents with the frozen VAE (no grad). With ``train.rollout_prob`` the
        windows hold two chunks: the second is the training window, the first its ``*_prev`` (own_first_frames)."""
        out = {k: batch[k].to(self.device, non_blocking=True) for k in _BATCH_KEYS if k in batch}
        states = out.pop("states", None)
        own = needs_previous_chunk(self.cfg)
        if self.vae is not None:
            with torch.no_grad():
                for d in self.domains:
                    video = out.pop(d)  # (B, 3, F, H, W); two chunks (2F - 1 frames) when training on own rollouts
                    if own:
                        f = self.cfg.data.frames
                        out[f"z_{d}_prev"] = self.vae.encode(video[:, :, :f])
                        video = video[:, :, f - 1:]
                    out[f"z_{d}"] = self.vae.encode(video)  # (B, 3, F, H, W) -> (B, C, L+1, h, w)
            if own:
                if "arm_mask" in out:
                    out["arm_mask"] = out["arm_mask"][:, self.cfg.data.frames - 1:]
                a = self.cfg.data.actions_per_window
                out["actions_prev"], out["actions"] = out["actions"][:, :a], out["actions"][:, a:]
                out["state0_prev"], out["state0"] = out["state0"], states[:, self.cfg.data.frames - 1]
        if step in self.faults.nan_batch:
            for d in self.domains:
                out[f"z_{d}"] = torch.full_like(out[f"z_{d}"], float("nan"))
        return out

    def _hooks(self, step: int) -> StepHooks:
        """This step's faults and the ranks' agreement on a non-finite loss."""
        nan = (lambda loss: loss * float("nan")) if step in self.faults.nan_loss else None
        hold = self.faults.sleep.get(step)
        return StepHooks(corrupt_loss=nan, any_rank=lambda bad: parallel.any_rank(bad, self.device),
                         after_backward=(lambda: FaultPlan.hold(hold, self.stop, f"step {step}")) if hold else None)

    def _train_step(self, batch: dict, step: int) -> tuple[dict, float]:
        """One optimizer update (``training.step.train_step``); raises Diverged (on every rank) on a non-finite loss
        term or gradient norm."""
        z = self._latents(batch, step)
        self.gen.manual_seed(derive_seed(self.cfg.train.seed, "step", step, self.dist.rank))
        if self.cfg.train.rollout_prob > 0:  # training on its own rollouts: some windows start from its own frame
            z = own_first_frames(self.student, self.vae, z, self.cfg, self.gen,
                                 "sim" if self.stage == "pretrain" else "real")
        try:
            _, logs, grad_norm = train_step(self.step_fn, self.student, self.teacher, z, self.cfg, self.gen,
                                            self.device, self.params, self.optimizer, self.scheduler,
                                            self._hooks(step))
        except NonFiniteLoss as e:
            self.optimizer.zero_grad(set_to_none=True)
            raise Diverged(step, e.term, e.value) from None
        if "rollout_frac" in z:
            logs["rollout_frac"] = float(z["rollout_frac"])
        return logs, grad_norm

    def _log(self, step: int, lr: float, logs: dict, grad_norm: float, dt: float, t_start: float) -> dict:
        logs = parallel.all_reduce_mean({k: float(v) for k, v in logs.items()}, self.device)
        record = {"step": step, "epoch": (step - 1) // self.spe, "lr": lr, **logs, "grad_norm": grad_norm,
                  "samples_per_s": self._global_batch() / max(dt, 1e-9), "threads": torch.get_num_threads(),
                  "time": round(self.time_offset + time.perf_counter() - t_start, 4)}
        self.log.log(record)
        return record

    def _save(self, step: int) -> Path:
        epoch, pos = divmod(step, self.spe)
        data_state = {"epoch": epoch, "position": pos, "steps_per_epoch": self.spe, "windows": len(self.dataset),
                      "global_batch": self._global_batch()}
        hold = self.faults.ckpt_sleep.get(step)
        path = save_checkpoint(self.run_dir, step, self.student, self.optimizer, self.scheduler, capture_rng(),
                               data_state, self.stats, self.cfg,
                               on_partial=(lambda: FaultPlan.hold(hold, what=f"checkpoint {step}")) if hold else None,
                               run_id=self.run_id, data=self.data_record)
        self.log.status("running", step, f"checkpoint {path.name}")
        return path



def _load_start_weights(model: torch.nn.Module, cfg: Config) -> None:
    """Stage 1 start: Wan2.2 video-expert weights (model.weights) and action-expert weights
    (model.action_expert_weights) when configured; otherwise keep the model's own init (demo)."""
    if cfg.model.weights or cfg.model.action_expert_weights:
        try:
            load_configured_weights(model, cfg)
        except (OSError, ValueError, KeyError, RuntimeError) as e:
            field = "model.weights" if cfg.model.weights and str(cfg.model.weights) in str(e) else \
                "model.weights / model.action_expert_weights"
            raise ConfigError(f"{field}: cannot load the start weights ({type(e).__name__}: {e}); expected a "
                              "diffusers transformer folder, an original Wan2.2 safetensors checkpoint, or the "
                              "safetensors file written by `simforcing model init-action-expert`") from e


# ----------------------------------------------------------------------------------------------------------------------
# Library entry
# ----------------------------------------------------------------------------------------------------------------------


def train_run(cfg: Config, out_dir: str | Path, stage: str, teacher_run: str | Path | None = None,
              resume: bool = False, progress: bool = True, method: str | None = None,
              init: str | Path | None = None) -> dict:
    """Run (or resume) one training stage; returns {"state", "step", "exit_code", "reason", "run_dir",
    "checkpoint", "total_steps", "last_logs", "loss_curves"}.

    stage "pretrain": the method is forced to sim_pretrain. stage "train": ``method`` (if given) is applied with
    ``method_preset`` on a copy of ``cfg``; ``teacher_run`` is the stage-1 run folder (on resume it may be omitted:
    teacher.json records it); ``init`` (stage 1): a video-base run to start from instead of ``model.weights`` (every
    tensor it trained, ``simforcing.warmstart``; the report goes to ``RUN/init.json``). Raises ConfigError, DataError
    or CheckpointError (status "failed" once the run folder exists); divergence and stop requests are results (exit
    codes 3 and 75), not exceptions.
    """
    cfg = copy.deepcopy(cfg)
    if stage == "pretrain":
        method_preset(cfg, STAGE1_METHOD)
    elif method is not None:
        if method not in STAGE2_METHODS:
            raise ConfigError(f"--method: got {method!r}; expected one of {', '.join(STAGE2_METHODS)}")
        method_preset(cfg, method)
    return Trainer(cfg, out_dir, stage, teacher_run, resume, progress, init).run()
