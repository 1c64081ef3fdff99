"""Training: stage 1 ``simforcing pretrain`` and stage 2 ``simforcing train`` (SPEC §3, §4, §7).

    simforcing pretrain --preset demo --data DIR --out RUN1 [--resume] [--section.field=value ...]
    simforcing train --method simforcing --teacher RUN1 --data DIR --out RUN2 [--resume] [overrides]
    torchrun --nproc_per_node=N -m simforcing train ...          (FSDP2, see simforcing.parallel)
    train_run(cfg, out_dir, stage, teacher_run=None, resume=False, progress=True, method=None) -> dict

Stage 1 trains the action-conditioned simulation world model with method ``sim_pretrain`` on the sim windows of
splits train + sim_pool; it starts from Wan2.2 weights when ``model.weights`` is set (video expert; the action expert
from ``model.action_expert_weights`` when set), else from the model's own init. Stage 2: config = the teacher run's
config + ``method_preset(cfg, M)`` + overrides; the student starts from the teacher run's newest valid checkpoint and
the teacher is a frozen copy of the same weights (never updated; built only when the method has a distillation
term). Architecture fields that differ from the teacher's config are refused (ConfigError naming the field) before
any work starts. Windows: split train, domains sim + real. Normalisation statistics come from the dataset in stage 1
and from the teacher's checkpoint in stage 2; every checkpoint stores them.

Each batch: pixels -> frozen VAE encode (no grad) -> latents ``z_sim``/``z_real``, or latents read from the cache
when ``data.latent_cache`` is set (simforcing.data.latent_cache) -> the method's step function.

Recipe (SPEC §7): AdamW(lr, betas (beta1, beta2), weight_decay) over the trainable parameters only, in two groups:
weight decay on matrices/kernels (``ndim >= 2``), none on biases, norm weights and other vectors (``ndim < 2``, or a
name containing "norm"); linear warm-up over ``warmup_frac`` of the total steps, then cosine decay to 0 (factor at
update i (0-based): (i+1)/W while i < W, else ½(1 + cos(π (i−W)/(T−W)))); gradient clipping at ``train.grad_clip``
(global norm; ≤ 0 disables clipping but the norm is still logged); bf16 autocast when ``train.mixed_precision`` is
"bf16" (CUDA with bf16 support, or CPU autocast; the demo uses "no"); gradient checkpointing per layer from
``model.gradient_checkpointing``; total steps = ``train.max_steps`` if set else epochs × ceil(windows / global batch);
one optimizer update per batch; seeded from ``train.seed``.

Randomness: the step function's generator is re-seeded at every step from (seed, step, rank), the data order of
epoch e comes from (seed, e) (simforcing.parallel.GlobalBatchSampler) and the windows from (seed, e); the global
RNGs (torch, CUDA, numpy, random) are saved in every checkpoint and restored on resume. So on CPU a run interrupted
and resumed logs exactly the losses of an uninterrupted one.

Run folder: ``.lock`` and ``run.json`` (the writer's lock and the run's identity, simforcing.checkpoint),
``config.json`` (written once the run has started: data built, model built, checkpoint restored), ``metrics.jsonl``
(per logged step: step, epoch, lr, every loss term, grad_norm, samples_per_s, time), ``tb/`` (TensorBoard),
``checkpoints/`` (simforcing.checkpoint), ``status.json`` ({"state": "running" | "finished" | "stopped" | "diverged"
| "failed", "step", "reason", "pid", "host"}), ``loss_curves.png`` at the end, and for stage 2 ``teacher.json``
(which teacher checkpoint was used; resume reuses it).

One writer per run folder: the run holds ``RUN/.lock`` (simforcing.locking, an ``flock`` the kernel drops when the
process dies in any way) from the moment it is known to be startable until it returns; a second writer is refused
(config error, exit 2) and touches nothing. Before the lock every check is read-only, so a refused run — a bad config,
an architecture change on ``--resume``, a stage-2 run resumed with ``pretrain``, a teacher that is a stage-2 run, a
folder holding someone else's files — writes nothing: no folder, no config.json, no status.json. A status.json that
says "running" while nobody holds the lock belongs to a dead process (``simforcing.locking.is_locked``).

Resume (``--resume``): the reference is the config the checkpoint was trained with (its own copy in the checkpoint
folder; for older checkpoints RUN/config.json, whose hash must equal meta.json's ``config_hash``). Architecture fields
(``runs.architecture_fields``) cannot change (config error naming the field). The optimizer hyperparameters
(``train.lr``, ``beta1``, ``beta2``, ``weight_decay``, and the schedule's ``warmup_frac``/``max_steps``/``epochs``)
may: after the optimizer and scheduler state are restored, the config's values are written into them and the lr of
the next update is recomputed from the new schedule — one line says what changed, and config.json records the values
the run trains with. Any other changed field is trained with as given, with a warning naming it.

The loop machinery (run folder, checkpoints, resume, signals, faults, NaN stop, FSDP2) is :class:`Trainer`'s; a
subclass overrides the hooks ``_check_method``, ``_check_resume``, ``_build_data``, ``_build_models``, ``_latents``,
``_step_function`` and ``_describe`` (the downstream policy: ``simforcing.policy.train``).

Exit codes: 0 finished; 1 failed (data, checkpoint or other error; status "failed"); 2 config error; 3 diverged (a
non-finite loss term or gradient norm: the message names the step and the term, no checkpoint is written after it, the
last good checkpoint is untouched); 75 stopped by SIGTERM/SIGINT (the current step is finished, a checkpoint is
written at it, status "stopped"; continue with ``--resume``).

Fault injection for tests and debugging, read only by :meth:`FaultPlan.from_env`: ``SIMFORCING_FAULT`` holds
comma-separated faults: ``nan_loss@N`` (the loss of step N becomes NaN), ``nan_batch@N`` (the latents of step N become
NaN, so the method reports the first non-finite term), ``sleep@N:S`` (hold S seconds in the middle of step N, after
backward and before the optimizer update, e.g. to SIGKILL or SIGTERM the run there) and ``ckpt_sleep@N:S`` (hold S
seconds in the middle of writing checkpoint N, after the weights and before the folder is finalised).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
import signal
import socket
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Optional

import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from simforcing import parallel
from simforcing.checkpoint import (RUN_RECORD, capture_rng, check_not_foreign, find_resumable, list_checkpoints,
                                   load_checkpoint, load_model_state, new_run_record, read_meta, read_run_record,
                                   remove_stale_temp, restore_rng, save_checkpoint, trained_config)
from simforcing.config import STAGE1_METHOD, STAGE2_METHODS, Config, ConfigError, config_diff
from simforcing.data.latent_cache import LatentWindowDataset
from simforcing.data.paired import PairedWindowDataset
from simforcing.errors import EXIT_DIVERGED, EXIT_OK, EXIT_STOPPED, CheckpointError, OutputError, os_cause
from simforcing.locking import FolderLock, lock_folder
from simforcing.losses import NonFiniteLoss
from simforcing.methods import METHODS, method_preset, needs_teacher, own_first_frames, rollout_windows
from simforcing.models.vae import load_vae
from simforcing.models.weights import frozen_copy, load_configured_weights
from simforcing.models.world_model import build_world_model
from simforcing.plots import plot_loss_curves
from simforcing.runs import architecture_fields, check_teacher_architecture, differing_fields
from simforcing.threads import configure_threads
from simforcing.utils import (append_jsonl, atomic_write_json, atomic_write_text, autocast_context, read_jsonl,
                              seed_everything)

# what the steps read ("states": the second chunk's first state when training on own rollouts)
_BATCH_KEYS = ("sim", "real", "z_sim", "z_real", "actions", "state0", "text", "text_mask", "states")


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from any tuple of parts (stable across processes and platforms)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


# ----------------------------------------------------------------------------------------------------------------------
# Signals and faults
# ----------------------------------------------------------------------------------------------------------------------


class StopFlag:
    """SIGTERM/SIGINT set ``requested``; the loop finishes the current step, checkpoints and exits with 75."""

    def __init__(self) -> None:
        self.requested: Optional[str] = None
        self._previous: dict = {}

    def install(self) -> "StopFlag":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = signal.Signals(signum).name

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


@dataclasses.dataclass
class FaultPlan:
    """Faults from SIMFORCING_FAULT (see the module docstring); empty when the variable is unset."""

    ENV = "SIMFORCING_FAULT"
    nan_loss: set = dataclasses.field(default_factory=set)
    nan_batch: set = dataclasses.field(default_factory=set)
    sleep: dict = dataclasses.field(default_factory=dict)
    ckpt_sleep: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_env(cls) -> "FaultPlan":
        plan = cls()
        spec = os.environ.get(cls.ENV, "").strip()
        for item in filter(None, (s.strip() for s in spec.split(","))):
            try:
                kind, at = item.split("@", 1)
                if kind in ("nan_loss", "nan_batch"):
                    getattr(plan, kind).add(int(at))
                elif kind in ("sleep", "ckpt_sleep"):
                    step, seconds = at.split(":", 1)
                    getattr(plan, kind)[int(step)] = float(seconds)
                else:
                    raise ValueError(kind)
            except ValueError:
                raise ConfigError(f"{cls.ENV}: cannot read {item!r}; expected nan_loss@STEP, nan_batch@STEP, "
                                  "sleep@STEP:SECONDS or ckpt_sleep@STEP:SECONDS (comma-separated)") from None
        return plan

    @staticmethod
    def hold(seconds: float, stop: Optional[StopFlag] = None, what: str = "") -> None:
        """Sleep ``seconds`` (announced on stderr so a test can act), returning early on a stop request."""
        print(f"SIMFORCING_FAULT: holding {what} for {seconds:g} s", file=sys.stderr, flush=True)
        end = time.monotonic() + seconds
        while time.monotonic() < end and not (stop is not None and stop.requested):
            time.sleep(0.02)


# ----------------------------------------------------------------------------------------------------------------------
# Recipe pieces
# ----------------------------------------------------------------------------------------------------------------------


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Trainable parameters only: decay on ndim >= 2 (not norms), none on biases, norm weights and other vectors."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "norm" in name.lower() else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def lr_factor(i: int, total: int, warmup: int) -> float:
    """Multiplier of the base lr at update i (0-based): linear warm-up over ``warmup`` updates, then cosine to 0."""
    if i < warmup:
        return (i + 1) / warmup
    progress = (i - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def build_optimizer(model: torch.nn.Module, cfg: Config, total_steps: int):
    t = cfg.train
    opt = torch.optim.AdamW(param_groups(model, t.weight_decay), lr=t.lr, betas=(t.beta1, t.beta2))
    warmup = int(round(t.warmup_frac * total_steps))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_factor(i, total_steps, warmup))
    return opt, sched


def apply_optimizer_settings(optimizer: torch.optim.Optimizer, scheduler: Any, cfg: Config) -> list[str]:
    """After a restore: the config's lr, betas and weight decay into the optimizer's parameter groups and the
    scheduler's base lrs, and the lr of the next update recomputed from the schedule ``scheduler`` was built with
    (the config's warm-up and total steps). Returns "what: old -> new" for every value that changed.

    With an unchanged config this rewrites the restored values with equal ones (the lr by the scheduler's own
    formula), so an interrupted-and-resumed run stays bit-identical to an uninterrupted one."""
    t = cfg.train
    groups = optimizer.param_groups
    decay = [t.weight_decay] + [0.0] * (len(groups) - 1)  # param_groups: [decayed, not decayed]
    changed = []

    def note(name: str, old: Any, new: Any) -> None:
        if old != new:
            changed.append(f"{name} {old!r} -> {new!r}")

    note("train.lr", float(scheduler.base_lrs[0]), float(t.lr))
    note("train.beta1, train.beta2", tuple(groups[0]["betas"]), (t.beta1, t.beta2))
    note("train.weight_decay", float(groups[0]["weight_decay"]), float(t.weight_decay))
    before = [float(g["lr"]) for g in groups]
    scheduler.base_lrs = [float(t.lr)] * len(groups)
    lrs = [base * fn(scheduler.last_epoch) for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
    for g, lr, wd in zip(groups, lrs, decay):
        g["initial_lr"], g["lr"], g["betas"], g["weight_decay"] = float(t.lr), lr, (t.beta1, t.beta2), wd
    scheduler._last_lr = list(lrs)
    note(f"lr of update {scheduler.last_epoch + 1}", before[0], lrs[0])
    return changed


# ----------------------------------------------------------------------------------------------------------------------
# The run log: metrics.jsonl, TensorBoard, status.json
# ----------------------------------------------------------------------------------------------------------------------


class RunLog:
    """Everything a run writes besides checkpoints (rank 0 only; other ranks get a silent instance)."""

    def __init__(self, run_dir: Path, active: bool):
        self.run_dir, self.active = run_dir, active
        self.metrics = run_dir / "metrics.jsonl"
        self._tb = None
        self.facts: dict = {}  # written into every status.json from now on (e.g. the skipped episodes)
        self.wrote_status = False  # this process has written status.json (so it must leave a final state there)

    def status(self, state: str, step: int, reason: str = "", **extra: Any) -> None:
        if self.active:
            self.wrote_status = True
            atomic_write_json(self.run_dir / "status.json", {"state": state, "step": step, "reason": reason,
                                                            "time": time.time(), "pid": os.getpid(),
                                                            "host": socket.gethostname(), **self.facts, **extra})

    def final_status(self, state: str, step: int, reason: str, **extra: Any) -> Optional[str]:
        """Record the end of the run even when writing is what failed: status.json must never keep saying "running"
        for a process that has ended. If it cannot be written (a full disk), it is removed (an unlink needs no
        space); returns what went wrong then, else None."""
        if not self.active:
            return None
        try:
            self.status(state, step, reason, **extra)
            return None
        except Exception as e:  # noqa: BLE001 - any failure here must not hide the run's own error
            try:
                (self.run_dir / "status.json").unlink(missing_ok=True)
                return f"status.json could not be written ({os_cause(e.__cause__ or e)}) and was removed"
            except OSError as e2:
                return f"status.json could not be written or removed ({os_cause(e2)})"

    def truncate_after(self, step: int) -> float:
        """Keep metrics of steps <= ``step`` (a resumed run re-logs later ones); returns the last kept ``time``."""
        if not self.active or not self.metrics.exists():
            return 0.0
        kept = [r for r in read_jsonl(self.metrics) if int(r.get("step", 0)) <= step]
        atomic_write_text(self.metrics, "".join(json.dumps(r) + "\n" for r in kept))
        return float(kept[-1].get("time", 0.0)) if kept else 0.0

    def reset(self) -> None:
        if self.active:
            self.metrics.unlink(missing_ok=True)

    def log(self, record: dict) -> None:
        if not self.active:
            return
        append_jsonl(self.metrics, record)
        tb = self.run_dir / "tb"
        try:
            if self._tb is None:
                self._tb = SummaryWriter(log_dir=str(tb), purge_step=record["step"])
            for k, v in record.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    self._tb.add_scalar(f"train/{k}", v, record["step"])
            self._tb.flush()  # the event writer is a thread: flushing here surfaces its write errors at this step
        except OSError as e:
            self._tb = None  # a broken writer is not closed again
            raise OutputError(f"cannot write the TensorBoard log ({os_cause(e)})", tb, e) from e

    def close(self) -> None:
        if self._tb is not None:
            tb, self._tb = self._tb, None
            try:
                tb.close()
            except OSError as e:
                raise OutputError(f"cannot write the TensorBoard log ({os_cause(e)})", self.run_dir / "tb",
                                  e) from e

    def plot(self) -> Optional[Path]:
        if not self.active or not self.metrics.exists() or not self.metrics.stat().st_size:
            return None
        try:
            return plot_loss_curves(self.metrics, self.run_dir / "loss_curves.png", title=self.run_dir.name)
        except ValueError:
            return None


class Diverged(Exception):
    def __init__(self, step: int, term: str, value: float):
        self.step, self.term, self.value = step, term, value
        super().__init__(f"training diverged at step {step}: non-finite {term} ({value})")


# ----------------------------------------------------------------------------------------------------------------------
# Resume checks
# ----------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _MetaOnly:
    """A checkpoint known by its folder and meta.json only (what the read-only preflight needs)."""

    path: Path
    meta: dict


def check_resume_config(cfg: Config, theirs: Config, stage: str, run_dir: Path) -> None:
    """ConfigError naming the field when ``cfg`` cannot continue a run trained with ``theirs``: another stage
    (``pretrain --resume`` on a stage-2 run, or the reverse) or another architecture."""
    recorded = theirs.train.method
    if (stage == "pretrain") != (recorded == STAGE1_METHOD):
        fix = (f"`simforcing train --method {recorded} --resume --out {run_dir}`" if recorded in STAGE2_METHODS
               else f"`simforcing pretrain --resume --out {run_dir}`")
        raise ConfigError(f"train.method: {run_dir} is a {'stage-1' if recorded == STAGE1_METHOD else 'stage-2'} "
                          f"run (train.method {recorded!r}); `simforcing {stage} --resume` cannot continue it — use "
                          f"{fix}")
    for name, was, now in differing_fields(theirs, cfg, architecture_fields(cfg))[:1]:
        raise ConfigError(f"{name}: {run_dir} was trained with {was!r}, the resumed config asks {now!r}; "
                          "architecture fields cannot change on --resume (start a new run, or stage 2 from it)")


# ----------------------------------------------------------------------------------------------------------------------
# The trainer
# ----------------------------------------------------------------------------------------------------------------------


class Trainer:
    """One training run (stage "pretrain" or "train"); ``run()`` returns the result dict of :func:`train_run`.

    After ``run()``, ``student``/``teacher`` hold the final models (the test of the frozen teacher reads them).
    """

    STAGES = ("pretrain", "train")  # a subclass (the policy's trainer) names its own

    def __init__(self, cfg: Config, out_dir: str | Path, stage: str, teacher_run: str | Path | None = None,
                 resume: bool = False, progress: bool = True):
        if stage not in self.STAGES:
            raise ValueError(f"stage: got {stage!r}; expected one of {', '.join(map(repr, self.STAGES))}")
        self.cfg, self.run_dir, self.stage = cfg, Path(out_dir), stage
        self.teacher_run = Path(teacher_run) if teacher_run is not None else None
        self.resume, self.progress = resume, progress
        self.student: Optional[torch.nn.Module] = None
        self.teacher: Optional[torch.nn.Module] = None
        self.faults = FaultPlan.from_env()
        self.log: Optional[RunLog] = None  # exists once the run folder is ours (locked): then failures are recorded
        self.lock: Optional[FolderLock] = None
        self.run_id: Optional[str] = None

    # -- checks before any work (read-only: a refused run writes nothing) ------------------------------------------
    def _preflight(self) -> None:
        cfg = self.cfg.validate()
        self._check_method(cfg)
        if cfg.data.latent_cache is None and not cfg.data.root:
            raise ConfigError("data.root: not set; pass --data DIR (or --data.latent_cache=CACHE)")
        self._check_run_folder()
        self.teacher_ckpt = None
        if self.stage == "train":
            self._resolve_teacher()

    def _check_run_folder(self) -> None:
        """What ``--out`` holds decides whether the run may start: someone else's files (never overwritten),
        checkpoints without --resume (refused), or on --resume the run it continues (same stage, same
        architecture as the config its newest checkpoint was trained with). Read-only; run again under the lock."""
        self.has_checkpoints = bool(list_checkpoints(self.run_dir))
        check_not_foreign(self.run_dir)
        if self.has_checkpoints and not self.resume:
            raise ConfigError(f"--out: {self.run_dir} already holds checkpoints; pass --resume to continue it or "
                              "choose another folder")
        if self.resume and self.has_checkpoints:
            self._check_resume_compatible()

    def _check_resume_compatible(self) -> None:
        """The newest checkpoint whose metadata reads is the reference (``checkpoint.trained_config``)."""
        ref = None
        for _, path in reversed(list_checkpoints(self.run_dir)):
            try:
                ref = _MetaOnly(path, read_meta(path))
                break
            except CheckpointError:
                continue  # damaged: find_resumable will warn about it and fall back the same way
        if ref is None:
            return  # every checkpoint is damaged: _restore fails with the named error
        theirs, differs = trained_config(self.run_dir, ref)
        if differs:
            warnings.warn(f"{self.run_dir / 'config.json'} differs from the config {ref.path.name} was trained with "
                          f"in {', '.join(differs[:8])}; the resume is checked against the checkpoint's own config",
                          stacklevel=4)
        self._check_resume(theirs)

    def _check_resume(self, theirs: Config) -> None:
        """Whether this config may continue a run trained with ``theirs`` (hook: a subclass has its own rule)."""
        check_resume_config(self.cfg, theirs, self.stage, self.run_dir)

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

    def _resolve_teacher(self) -> None:
        recorded = self.run_dir / "teacher.json"
        ckpt_path = None
        if self.resume and recorded.exists():
            try:
                rec = json.loads(recorded.read_text())
                run, checkpoint = Path(rec["run"]), Path(rec["checkpoint"])
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise CheckpointError(f"cannot read the stage-2 teacher record ({e}); expected {{run, checkpoint, "
                                      "step}} as written by `simforcing train`", recorded) from e
            if self.teacher_run is None:
                self.teacher_run = run
            if checkpoint.is_dir():
                ckpt_path = checkpoint
        if self.teacher_run is None:
            raise ConfigError("--teacher: stage 2 needs the stage-1 run folder (RUN1)")
        teacher_cfg_path = self.teacher_run / "config.json"
        if not teacher_cfg_path.exists():
            raise ConfigError(f"--teacher: {teacher_cfg_path} is missing; expected a run folder of `simforcing "
                              "pretrain`")
        teacher_cfg = Config.load(teacher_cfg_path)
        if teacher_cfg.train.method != STAGE1_METHOD or (self.teacher_run / "teacher.json").exists():
            raise ConfigError(f"--teacher: {self.teacher_run} is a stage-2 run (train.method "
                              f"{teacher_cfg.train.method!r}); stage 2 starts from a stage-1 run of `simforcing "
                              "pretrain`")
        check_teacher_architecture(self.cfg, teacher_cfg, str(self.teacher_run))
        ckpt = load_checkpoint(ckpt_path, train_state=False) if ckpt_path else \
            find_resumable(self.teacher_run, train_state=False)
        if ckpt is None:
            raise CheckpointError("no valid checkpoint to start stage 2 from", self.teacher_run / "checkpoints")
        self.teacher_ckpt = ckpt

    # -- setup ----------------------------------------------------------------------------------------------------------
    def _claim(self) -> None:
        """Take the run folder's lock (rank 0; the others learn the outcome), check the folder again now that no
        other writer can change it, remove a crashed writer's temporary checkpoint folders, and record the run."""
        error = None
        if self.dist.is_main:
            try:
                self.lock = lock_folder(self.run_dir, f"simforcing {self.stage}")
                self._check_run_folder()
                record = read_run_record(self.run_dir) if self.resume else None
                if record is None:
                    record = new_run_record(self.stage)
                    atomic_write_json(self.run_dir / RUN_RECORD, record)
                self.run_id = record["run_id"]
                remove_stale_temp(self.run_dir)
            except Exception as e:  # noqa: BLE001 - every rank must learn rank 0's outcome, whatever it is
                error = e
        error = parallel.broadcast_object(error)
        self.run_id = parallel.broadcast_object(self.run_id)
        if error is not None:
            raise error
        self.log = RunLog(self.run_dir, self.dist.is_main)

    def _setup(self) -> None:
        cfg = self.cfg
        self.dist = parallel.init_distributed(cfg.train.device)
        self.device = self.dist.device
        self._claim()
        if not self.resume:
            self.log.status("running", 0, "setting up")
        parallel.barrier()
        seed_everything(cfg.train.seed)  # identical model init on every rank and in every run of this config
        self._build_data()
        self._build_models()
        self.spe = -(-len(self.dataset) // (cfg.train.batch_size * self.dist.world_size))  # steps per epoch
        self.total = cfg.train.max_steps if cfg.train.max_steps else cfg.train.epochs * self.spe
        self.optimizer, self.scheduler = build_optimizer(self.student, cfg, self.total)
        self.params = [p for p in self.student.parameters() if p.requires_grad]
        self.step_fn = self._step_function()
        self.gen = torch.Generator(device=self.device)
        self.start_step, self.time_offset = 0, 0.0
        restored = self._restore() if self.resume else None
        if self.dist.is_main:  # the run has started: now its config is recorded
            cfg.save(self.run_dir / "config.json")
            if self.teacher_ckpt is not None:
                atomic_write_json(self.run_dir / "teacher.json",
                                  {"run": str(self.teacher_run.resolve()), "checkpoint": str(self.teacher_ckpt.path),
                                   "step": self.teacher_ckpt.step})
        if restored is None:
            self.log.reset()
        else:
            self.time_offset = self.log.truncate_after(restored)

    def _build_data(self) -> None:
        cfg = self.cfg
        splits, domains = (("train", "sim_pool"), ("sim",)) if self.stage == "pretrain" else \
            (("train",), ("sim", "real"))
        stats = self.teacher_ckpt.meta.get("stats") if self.teacher_ckpt is not None else None
        self.vae = None
        if cfg.data.latent_cache:
            self.dataset = LatentWindowDataset(cfg, cfg.data.latent_cache, splits, domains, 0, stats)
        else:
            self.dataset = PairedWindowDataset(rollout_windows(cfg), cfg.data.root, splits, domains, 0, stats)
            self.vae = load_vae(cfg, self.device)
        self.stats = self.dataset.stats
        self.domains = domains
        skipped = getattr(self.dataset, "skipped", [])  # data.skip_bad: each one was logged; the total goes here
        self.log.facts["skipped_episodes"] = len(skipped)
        self.log.facts["skipped"] = [{"episode": eid, "reason": why} for eid, why in skipped]

    def _build_models(self) -> None:
        cfg = self.cfg
        # rank 0 builds and loads the full model; the other ranks of a sharded run build it on the meta device and
        # receive their shards from rank 0 (parallel.shard_from_rank0): one full copy in host memory, not one per rank
        full = self.dist.mesh is None or self.dist.is_main
        student = build_world_model(cfg, device="cpu", meta=not full)
        if full and self.stage == "pretrain":
            if not (self.resume and self.has_checkpoints):
                _load_start_weights(student, cfg)
        elif full:
            load_model_state(self.teacher_ckpt, student)
        teacher = frozen_copy(student) if self.stage == "train" and needs_teacher(cfg) else None
        self.student = parallel.shard_from_rank0(student, cfg, self.dist.mesh, self.device).train()
        if teacher is not None:
            self.teacher = parallel.shard_from_rank0(teacher, cfg, self.dist.mesh, self.device)

    def _restore(self) -> Optional[int]:
        """Continue from the newest valid checkpoint; returns its step (None: nothing to resume, start at 0)."""
        if not self.has_checkpoints:
            warnings.warn(f"--resume: no valid checkpoint in {self.run_dir / 'checkpoints'}; starting from step 0",
                          stacklevel=3)
            return None
        ckpt = find_resumable(self.run_dir)
        if ckpt is None:
            raise CheckpointError("--resume: every checkpoint is damaged; nothing to resume from",
                                  self.run_dir / "checkpoints")
        theirs, _ = trained_config(self.run_dir, ckpt)
        self._check_resume(theirs)  # the one actually restored
        changed = config_diff(theirs, self.cfg)
        if changed:
            warnings.warn(f"resuming {self.run_dir} with changed config fields: {', '.join(changed)}", stacklevel=3)
        state = ckpt.train_state
        # any world size resumes any checkpoint: DCP reshards (N -> M, and N -> 1 read without a process group);
        # a single-process checkpoint is broadcast into the shards of a multi-process run (1 -> N)
        if ckpt.sharded:
            parallel.load_sharded(ckpt.path / "dcp", self.student, self.optimizer)
        elif self.dist.world_size > 1:
            parallel.load_full_into_sharded(self.student, self.optimizer, ckpt.model_state, state["optimizer"])
        else:
            load_model_state(ckpt, self.student)
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        applied = apply_optimizer_settings(self.optimizer, self.scheduler, self.cfg)
        restore_rng(state["rng"])
        data = state["data"]
        if data.get("windows") != len(self.dataset) or data.get("global_batch") != self._global_batch():
            warnings.warn("resume: the number of windows or the global batch changed; the data order differs from "
                          "the interrupted run", stacklevel=3)
        self.start_step = ckpt.step
        if self.dist.is_main:
            print(f"resuming {self.run_dir} from {ckpt.path.name} (step {ckpt.step})", flush=True)
            if applied:
                print(f"resume: applied to the restored optimizer and scheduler: {'; '.join(applied)}", flush=True)
        self.log.facts["resumed_with"] = applied
        return ckpt.step

    def _global_batch(self) -> int:
        return self.cfg.train.batch_size * self.dist.world_size

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
        if self.vae is not None:
            with torch.no_grad():
                for d in self.domains:
                    video = out.pop(d)  # (B, 3, F, H, W) (two chunks: 2F - 1 frames)
                    if self.cfg.train.rollout_prob > 0:
                        f = self.cfg.data.frames
                        out[f"z_{d}_prev"] = self.vae.encode(video[:, :, :f])
                        video = video[:, :, f - 1:]
                    out[f"z_{d}"] = self.vae.encode(video)  # (B, 3, F, H, W) -> (B, C, L+1, h, w)
            if self.cfg.train.rollout_prob > 0:
                a = self.cfg.data.actions_per_window
                out["actions_prev"], out["actions"] = out["actions"][:, :a], out["actions"][:, a:]
                out["state0_prev"], out["state0"] = out["state0"], states[:, self.cfg.data.frames - 1]
        if step in self.faults.nan_batch:
            for d in self.domains:
                out[f"z_{d}"] = torch.full_like(out[f"z_{d}"], float("nan"))
        return out

    def _train_step(self, batch: dict, step: int) -> tuple[dict, float]:
        """One optimizer update; raises Diverged (on every rank) on a non-finite loss term or gradient norm."""
        z = self._latents(batch, step)
        self.gen.manual_seed(derive_seed(self.cfg.train.seed, "step", step, self.dist.rank))
        if self.cfg.train.rollout_prob > 0:
            z = own_first_frames(self.student, self.vae, z, self.cfg, self.gen,
                                 "sim" if self.stage == "pretrain" else "real")
        bad: Optional[tuple[str, float]] = None
        loss, logs = None, {}
        try:
            with autocast_context(self.cfg, self.device):
                loss, logs = self.step_fn(self.student, self.teacher, z, self.cfg, self.gen)
                if "rollout_frac" in z:
                    logs["rollout_frac"] = float(z["rollout_frac"])
            if step in self.faults.nan_loss:
                loss = loss * float("nan")
            if not torch.isfinite(loss.detach()).item():
                raise NonFiniteLoss("loss", float(loss.detach()))
        except NonFiniteLoss as e:
            bad = (e.term, e.value)
        if parallel.any_rank(bad is not None, self.device):
            self.optimizer.zero_grad(set_to_none=True)
            raise Diverged(step, *(bad or ("loss (on another rank)", float("nan"))))
        loss.backward()
        if step in self.faults.sleep:
            FaultPlan.hold(self.faults.sleep[step], self.stop, f"step {step}")
        grad_norm = parallel.clip_grad_norm(self.params, self.cfg.train.grad_clip)
        if not math.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            raise Diverged(step, "grad_norm", grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
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
                               run_id=self.run_id)
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
              resume: bool = False, progress: bool = True, method: str | None = None) -> dict:
    """Run (or resume) one training stage; returns {"state", "step", "exit_code", "reason", "run_dir",
    "checkpoint", "total_steps", "last_logs", "loss_curves"}.

    stage "pretrain": the method is forced to sim_pretrain. stage "train": ``method`` (if given) is applied with
    ``method_preset`` on a copy of ``cfg``; ``teacher_run`` is the stage-1 run folder (on resume it may be omitted:
    teacher.json records it). Raises ConfigError, DataError or CheckpointError (status "failed" once the run folder
    exists); divergence and stop requests are results (exit codes 3 and 75), not exceptions.
    """
    cfg = copy.deepcopy(cfg)
    if stage == "pretrain":
        method_preset(cfg, STAGE1_METHOD)
    elif method is not None:
        if method not in STAGE2_METHODS:
            raise ConfigError(f"--method: got {method!r}; expected one of {', '.join(STAGE2_METHODS)}")
        method_preset(cfg, method)
    return Trainer(cfg, out_dir, stage, teacher_run, resume, progress).run()
