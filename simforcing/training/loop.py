"""The training loop every stage shares: stage 0 (``prior.VIDEO_PRIOR``), stages 1 and 2 (``train.SIM_PRETRAIN``,
``train.STAGE2``) and the policy (``policy.train.POLICY``).

    result = Trainer(stage, cfg, out_dir, resume=False, progress=True, start=Start(...)).run()

The trainer composes the parts a run owns, each an object of its own file with explicit inputs: the run folder
(``folder.RunFolder``: checks, claim, run record, config/teacher/init files), resume (``resume``), the step
(``step.TrainStep``), the log (``runlog.RunLog``), checkpoints (``checkpointer.Checkpointer``) and stop requests
(``faults.StopFlag``); with SIMFORCING_FAULT set, the fault plan wraps the step's latents and hooks and the checkpoint
writer (``faults.FaultPlan``). Order: read-only checks (a refused run writes nothing) → the lock and the checks again →
data, models, restore → config.json → steps, logged and checkpointed → the final status. ``run`` returns {"state",
"step", "exit_code", "reason", "run_dir", "checkpoint", "total_steps", "last_logs", "loss_curves"}; divergence and
stop requests are results (exit codes 3 and 75), not exceptions.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
from tqdm import tqdm

import simforcing.parallel as parallel
from simforcing.config import Config, ConfigError
from simforcing.errors import EXIT_DIVERGED, EXIT_OK, EXIT_STOPPED, OutputError
from simforcing.models.vae import load_vae
from simforcing.runs.checkpoint import Checkpoint, list_checkpoints, save_checkpoint
from simforcing.runs.folder import inputs_record
from simforcing.threads import configure_threads
from simforcing.training.checkpointer import Checkpointer
from simforcing.training.checks import data_record
from simforcing.training.compiled import check_sharded_run
from simforcing.training.faults import FaultPlan, StopFlag
from simforcing.training.folder import RunFolder
from simforcing.training.optim import build_optimizer
from simforcing.training.resume import find_checkpoint, restore
from simforcing.training.runlog import RunLog
from simforcing.training.stage import Models, Stage, Start
from simforcing.training.step import Diverged, StepHooks, TrainStep
from simforcing.models.weights import store_teacher_for_autocast
from simforcing.utils import check_output_path, derive_seed, resolve_device, seed_everything


@dataclass
class Setup:
    """What a run trains with, built once its folder is claimed: the loop's inputs."""

    dist: parallel.DistInfo
    dataset: Any
    models: Models
    optimizer: torch.optim.Optimizer
    scheduler: Any
    step: TrainStep
    checkpointer: Checkpointer
    steps_per_epoch: int
    total: int
    global_batch: int
    start_step: int = 0
    time_offset: float = 0.0  # the resumed run's logged time at its checkpoint
    core_offset: float = 0.0  # and its logged core-seconds


class Trainer:
    """One run of ``stage`` into ``out_dir``. ``start``: the teacher run and/or the run or file the weights start
    from (what the stage reads of it). After ``run()``, ``models`` holds the final models (the test of the frozen
    teacher reads them)."""

    def __init__(self, stage: Stage, cfg: Config, out_dir: str | Path, resume: bool = False, progress: bool = True,
                 start: Start = Start()):
        self.stage, self.cfg, self.resume, self.progress, self.start = stage, cfg, resume, progress, start
        self.folder = RunFolder(Path(out_dir), stage, resume)
        self.faults = FaultPlan.from_env()
        self.log: Optional[RunLog] = None  # exists once the run folder is ours (locked): then failures are recorded
        self.models: Optional[Models] = None
        self.step = 0  # the last step taken: where a failure is recorded

    def run(self) -> dict:
        self._preflight()
        stop = StopFlag().install()
        try:
            return self._loop(self._setup(stop), stop)
        except ConfigError as e:
            if self.log is not None and self.log.wrote_status:  # refused after "setting up" was recorded
                self.log.final_status("failed", 0, f"ConfigError: {e}")
            raise  # a refusal before that: the run did not start and its folder's status is left as it was
        except Exception as e:
            if self.log is not None:
                problem = self.log.final_status("failed", self.step, f"{type(e).__name__}: {e}")
                if problem:
                    print(f"{self.folder.label}: {problem}", file=sys.stderr, flush=True)
            raise
        finally:
            stop.restore()
            if self.log is not None:
                try:
                    self.log.close()
                except OutputError:
                    pass  # already failing (or recorded by _loop); the first error is the one reported
            self.folder.release()

    # -- before any work ------------------------------------------------------------------------------------------------
    def _preflight(self) -> None:
        """Read-only: the config, the stage's own checks, the data, the device, ``--out`` and the run's start."""
        cfg = self.cfg.validate()
        self.stage.check(cfg)
        if cfg.data.latent_cache is None and not cfg.data.root:
            raise ConfigError("data.root: not set; pass --data DIR (or --data.latent_cache=CACHE)")
        resolve_device(cfg.train.device)  # a device this machine has, before anything is built
        check_sharded_run("train.compile", cfg.train.compile, int(os.environ.get("WORLD_SIZE", "1")))
        check_output_path(self.folder.path, "--out")
        self.folder.check(cfg)
        self.start = self.stage.start(cfg, self.folder, self.start)

    # -- setup ----------------------------------------------------------------------------------------------------------
    def _setup(self, stop: StopFlag) -> Setup:
        cfg, folder = self.cfg, self.folder
        dist = parallel.init_distributed(cfg.train.device)
        self.log = log = folder.claim(cfg, dist)
        if not self.resume:
            log.status("running", 0, "setting up")
        parallel.barrier()
        seed_everything(cfg.train.seed)  # identical model init on every rank and in every run of this config
        ckpt = find_checkpoint(folder) if self.resume else None
        dataset = self.stage.dataset(cfg, _train_stats(ckpt, self.start))
        vae = load_vae(cfg, dist.device) if self.stage.encodes(cfg) else None
        log.facts.update(self.stage.facts(dataset))
        data = _note_left_out(dataset, cfg, folder.label, log, dist.is_main)
        self.models = models = self._models(dist, fresh=not (self.resume and folder.has_checkpoints))
        global_batch = cfg.train.batch_size * dist.world_size
        spe = -(-len(dataset) // global_batch)  # steps per epoch
        total = cfg.train.max_steps if cfg.train.max_steps else cfg.train.epochs * spe
        log.facts["total_steps"] = total
        optimizer, scheduler = build_optimizer(models.student, cfg, total)
        step = self._step(models, vae, dist, optimizer, scheduler, stop)
        checkpointer = Checkpointer(folder.path, cfg, dataset.stats, folder.run_id, data, spe, len(dataset),
                                    global_batch, write=self.faults.around_writer(save_checkpoint),
                                    inputs=inputs_record(cfg))
        setup = Setup(dist, dataset, models, optimizer, scheduler, step, checkpointer, spe, total, global_batch)
        if ckpt is not None:
            restored = restore(ckpt, folder, cfg, dist, models.student, optimizer, scheduler, dataset, data)
            setup.start_step = restored.step
            log.facts["resumed_with"] = restored.applied
            log.facts["resume_data_changes"] = restored.data_changes
        if dist.is_main:  # the run has started: now its config is recorded
            folder.write_started(cfg, self.start)
        if ckpt is None:
            log.reset()
        else:
            setup.time_offset, setup.core_offset = log.truncate_after(setup.start_step)
        return setup

    def _models(self, dist: parallel.DistInfo, fresh: bool) -> Models:
        """The stage's models: rank 0 builds and loads them in full, the other ranks of a sharded run on the meta
        device, receiving their shards from rank 0 (``parallel.shard_from_rank0``: one full copy in host memory,
        not one per rank). A fresh start's report goes to RUN/init.json and stdout."""
        built = self.stage.models(self.cfg, self.start, not (dist.mesh is None or dist.is_main), fresh)
        if built.report is not None and dist.is_main:
            self.folder.write_init(built.report)
            print(built.report.summary(), flush=True)
        student = parallel.shard_from_rank0(built.student, self.cfg, dist.mesh, dist.device,
                                            forward_methods=self.stage.forward_methods).train()
        teacher = None if built.teacher is None else \
            parallel.shard_from_rank0(built.teacher, self.cfg, dist.mesh, dist.device)
        if teacher is not None and dist.mesh is None:
            store_teacher_for_autocast(teacher, self.cfg, dist.device)
        return Models(student, teacher, built.report)

    def _step(self, models: Models, vae: Any, dist: parallel.DistInfo, optimizer: torch.optim.Optimizer,
              scheduler: Any, stop: StopFlag) -> TrainStep:
        """The stage's step with this run's device and ranks (every rank agrees on a non-finite loss), wrapped by
        the fault plan when one is given."""
        cfg, stage, device = self.cfg, self.stage, dist.device

        def latents(batch: dict, step: int) -> dict:
            return stage.latents(batch, cfg, device, vae)

        def hooks(step: int) -> StepHooks:
            return StepHooks(any_rank=lambda bad: parallel.any_rank(bad, device))

        return TrainStep(self.faults.around_latents(latents, stage.latent_keys), stage.step(cfg), models.student,
                         models.teacher, vae, cfg, device, dist.rank, optimizer, scheduler,
                         self.faults.around_hooks(hooks, stop), stage.rollout_domain, stage.forward_methods)

    # -- the loop -------------------------------------------------------------------------------------------------------
    def _loop(self, run: Setup, stop: StopFlag) -> dict:
        cfg, log, device = self.cfg, self.log, run.dist.device
        governor = configure_threads(cfg.train.threads, device.type)
        self.step = step = run.start_step
        log.status("running", step)
        bar = tqdm(total=run.total, initial=step, desc=self.stage.describe(cfg), dynamic_ncols=True,
                   disable=not (self.progress and run.dist.is_main))
        t_start = t_prev = time.perf_counter()
        self._core_start = time.process_time()
        last_logs: dict = {}
        state, reason, code = "finished", "", EXIT_OK
        try:
            while step < run.total and state == "finished":
                for batch in self._loader(run, *divmod(step, run.steps_per_epoch)):
                    lr = run.scheduler.get_last_lr()[0]
                    logs, grad_norm = run.step(batch, step + 1)
                    step = self.step = step + 1
                    now = time.perf_counter()
                    dt, t_prev = now - t_prev, now  # one iteration, data loading included
                    bar.update(1)
                    if governor is not None:
                        governor.update()
                    if step % cfg.train.log_every == 0 or step in (1, run.total):
                        last_logs = self._log(run, step, lr, logs, grad_norm, dt, t_start)
                        bar.set_postfix(loss=f"{logs.get('loss', float('nan')):.4g}")
                    stopping = parallel.any_rank(stop.requested is not None, device)
                    if step % cfg.train.ckpt_every == 0 or step == run.total or stopping:
                        path = run.checkpointer.save(step, run.models.student, run.optimizer, run.scheduler)
                        log.status("running", step, f"checkpoint {path.name}")
                    if step >= run.total:
                        break
                    if stopping:
                        state, code = "stopped", EXIT_STOPPED
                        reason = f"{stop.requested or 'signal on another rank'}: checkpoint written at step {step}"
                        break
        except Diverged as e:
            state, code, reason = "diverged", EXIT_DIVERGED, str(e)
            good = list_checkpoints(self.folder.path)
            reason += f"; the last good checkpoint is {good[-1][1] if good else 'none'}"
            print(f"{self.folder.label}: {reason}", file=sys.stderr, flush=True)
        finally:
            bar.close()
        log.close()  # TensorBoard flushed and the loss plot written before the final status: a failed write of
        plot = log.plot()  # either is the run's failure, not a "finished" run with missing files
        log.status(state, step, reason, exit_code=code, total_steps=run.total)
        ckpts = [p for _, p in list_checkpoints(self.folder.path)]
        return {"state": state, "step": step, "exit_code": code, "reason": reason, "run_dir": str(self.folder.path),
                "checkpoint": str(ckpts[-1]) if ckpts else None, "total_steps": run.total, "last_logs": last_logs,
                "loss_curves": str(plot) if plot else None}

    def _loader(self, run: Setup, epoch: int, start: int) -> torch.utils.data.DataLoader:
        """Epoch ``epoch``'s batches from batch ``start`` on (its order from (seed, epoch); this rank's share)."""
        run.dataset.set_epoch(epoch)
        order_seed = derive_seed(self.cfg.train.seed, "order", epoch)
        sampler = parallel.GlobalBatchSampler(len(run.dataset), self.cfg.train.batch_size, order_seed, run.dist.rank,
                                              run.dist.world_size, start)
        return torch.utils.data.DataLoader(run.dataset, batch_sampler=sampler, num_workers=self.cfg.data.num_workers,
                                           generator=torch.Generator().manual_seed(order_seed & 0xFFFFFFFF),
                                           pin_memory=run.dist.device.type == "cuda")

    def _log(self, run: Setup, step: int, lr: float, logs: dict, grad_norm: float, dt: float, t_start: float) -> dict:
        """One metrics row (the loss terms averaged over the ranks)."""
        # core_s: the process CPU time of every rank since the start (kept across resumes): what training cost in
        # core-seconds, whatever the thread count (docs/ROLLOUTS.md's fidelity-compute curve reads it)
        logs = parallel.all_reduce_mean({**{k: float(v) for k, v in logs.items()},
                                         "core_s": time.process_time() - self._core_start}, run.dist.device)
        core_s = logs.pop("core_s") * run.dist.world_size
        record = {"step": step, "epoch": (step - 1) // run.steps_per_epoch, "lr": lr, **logs, "grad_norm": grad_norm,
                  "samples_per_s": run.global_batch / max(dt, 1e-9), "threads": torch.get_num_threads(),
                  "time": round(run.time_offset + time.perf_counter() - t_start, 4),
                  "core_s": round(run.core_offset + core_s, 3)}
        self.log.log(record)
        return record


def _train_stats(ckpt: Optional[Checkpoint], start: Start) -> Optional[dict]:
    """The normalisation statistics to train with: the resumed checkpoint's (its weights were trained with them),
    else the teacher's, else None (the dataset's own)."""
    if ckpt is not None and ckpt.meta.get("stats") is not None:
        return ckpt.meta["stats"]
    return start.teacher.meta.get("stats") if start.teacher is not None else None


def _note_left_out(dataset: Any, cfg: Config, label: str, log: RunLog, is_main: bool) -> dict:
    """status.json and one line each: bad episodes skipped (data.skip_bad, each logged when found) and episodes
    shorter than one window (left out by every dataset, named here). Returns what checkpoints record about the
    data (``checks.data_record``)."""
    skipped = getattr(dataset, "skipped", [])
    short = getattr(dataset, "dropped", [])
    log.facts["skipped_episodes"] = len(skipped)
    log.facts["skipped"] = [{"episode": eid, "reason": why} for eid, why in skipped]
    log.facts["too_short_episodes"] = len(short)
    log.facts["too_short"] = [{"episode": eid, "length": n} for eid, n in short]
    if short and is_main:
        names = ", ".join(eid for eid, _ in short[:6]) + (f", … (+{len(short) - 6})" if len(short) > 6 else "")
        print(f"{label}: {len(short)} episode(s) shorter than one window ({cfg.data.window_steps} steps) left out "
              f"[too_short_for_window]: {names}", flush=True)
    return data_record(cfg, dataset)
