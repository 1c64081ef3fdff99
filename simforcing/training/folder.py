"""The run folder's side of a training run (a mixin of ``simforcing.train.Trainer``): the checks before any work
(read-only: a refused run writes nothing) and the claim of the folder (its lock, the checks again under it, the run
record).

The methods read the trainer's ``cfg``, ``stage``, ``run_dir``, ``resume``, ``teacher_run``, ``start_from`` and
``dist``; ``_check_method`` is the trainer's hook.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from simforcing import parallel
from simforcing.checkpoint import list_checkpoints, remove_stale_temp
from simforcing.config import ConfigError
from simforcing.locking import lock_folder
from simforcing.runfolder import (CONFIG_FILE, INIT_FILE, RUN_RECORD, STAGE_KIND, check_not_foreign, is_run_folder,
                                  new_run_record, newest_readable, read_run_record, recorded_init, require_kind,
                                  trained_config)
from simforcing.training.checks import check_resume_config, resolve_teacher
from simforcing.training.runlog import RunLog
from simforcing.utils import atomic_write_json, check_output_path, resolve_device
from simforcing.warmstart import check_init_run


class RunFolderMixin:
    """``_preflight`` (before any work), ``_check_run_folder``, ``_claim`` (the lock, then the run record)."""

    def _preflight(self) -> None:
        cfg = self.cfg.validate()
        self._check_method(cfg)
        if cfg.data.latent_cache is None and not cfg.data.root:
            raise ConfigError("data.root: not set; pass --data DIR (or --data.latent_cache=CACHE)")
        resolve_device(cfg.train.device)  # a device this machine has, before anything is built
        check_output_path(self.run_dir, "--out")
        self._check_run_folder()
        if self.stage == "train":
            self.teacher_run, teacher = resolve_teacher(self.run_dir, self.teacher_run, self.resume, self.cfg)
            self.teacher_ckpt = teacher.checkpoint
        if self.resume and self.stage == "pretrain":
            self._resume_start()
        if self.start_from is not None:
            if self.stage != "pretrain":
                raise ConfigError(f"--init: {self.stage} does not start from another run's weights (stage 1 does: "
                                  "`simforcing pretrain --init RUN0`)")
            if cfg.model.weights or cfg.model.action_expert_weights:
                raise ConfigError(f"--init {self.start_from} and model.weights / model.action_expert_weights are two "
                                  "starts; choose one")
            if not (self.resume and self.has_checkpoints):
                check_init_run(cfg, self.start_from)

    def _resume_start(self) -> None:
        """A resumed stage 1 keeps the start it recorded (RUN/init.json): before its first checkpoint the weights
        still come from it, so `pretrain --resume` without --init uses the recorded run, and an --init naming
        another run is refused (two starts for one run)."""
        recorded = recorded_init(self.run_dir)
        if recorded is None:
            if self.start_from is not None and self.has_checkpoints:
                raise ConfigError(f"--init {self.start_from}: {self.run_dir} did not start from another run (its "
                                  f"{INIT_FILE} records none) and already holds checkpoints; resume it without --init")
            return
        if self.start_from is None:
            self.start_from = Path(recorded)
            if not self.has_checkpoints:
                print(f"simforcing pretrain: resuming {self.run_dir} before its first checkpoint: starting again "
                      f"from {recorded} (its {INIT_FILE})", flush=True)
        elif Path(self.start_from).resolve() != Path(recorded).resolve():
            raise ConfigError(f"--init {self.start_from}: {self.run_dir} started from {recorded} "
                              f"({self.run_dir / INIT_FILE}); resume it without --init, or start a new run in "
                              "another --out")

    def _check_run_folder(self) -> None:
        """What ``--out`` holds decides whether the run may start: someone else's files (never overwritten),
        checkpoints without --resume (refused), or on --resume the run it continues (same kind, same architecture as
        the config its newest checkpoint was trained with). Read-only; run again under the lock."""
        self.has_checkpoints = bool(list_checkpoints(self.run_dir))
        check_not_foreign(self.run_dir)
        if self.has_checkpoints and not self.resume:
            raise ConfigError(f"--out: {self.run_dir} already holds checkpoints; pass --resume to continue it or "
                              "choose another folder")
        if self.resume and is_run_folder(self.run_dir):
            require_kind(self.run_dir, (STAGE_KIND[self.stage],), "--out", f"resume_{self.stage}")
        if self.resume and self.has_checkpoints:
            self._check_resume_compatible()

    def _check_resume_compatible(self) -> None:
        """The newest checkpoint whose metadata reads is the reference (``runfolder.trained_config``)."""
        ref = newest_readable(self.run_dir)
        if ref is None:
            return  # every checkpoint is damaged: _find_resume_checkpoint fails with the named error
        theirs, differs = trained_config(self.run_dir, ref)
        if differs:
            warnings.warn(f"{self.run_dir / CONFIG_FILE} differs from the config {ref.path.name} was trained with "
                          f"in {', '.join(differs[:8])}; the resume is checked against the checkpoint's own config",
                          stacklevel=4)
        check_resume_config(self.cfg, theirs, self.stage, self.run_dir)

    def _claim(self) -> None:
        """Take the run folder's lock (rank 0; the others learn the outcome), check the folder again now that no
        other writer can change it, remove a crashed writer's temporary checkpoint folders, and record the run."""
        error = None
        if self.dist.is_main:
            try:
                self.lock = lock_folder(self.run_dir, f"simforcing {self.stage}")
                self._check_run_folder()
                self.run_id = self._record_run()
                remove_stale_temp(self.run_dir)
            except Exception as e:  # noqa: BLE001 - every rank must learn rank 0's outcome, whatever it is
                error = e
        error = parallel.broadcast_object(error)
        self.run_id = parallel.broadcast_object(self.run_id)
        if error is not None:
            raise error
        self.log = RunLog(self.run_dir, self.dist.is_main)

    def _record_run(self) -> str:
        """RUN/run.json: a new record, or on --resume the run's own (its kind added when it predates kinds)."""
        record = read_run_record(self.run_dir) if self.resume else None
        if record is None or "kind" not in record:
            record = {**new_run_record(self.stage), **(record or {})}
            atomic_write_json(self.run_dir / RUN_RECORD, record)
        return record["run_id"]
