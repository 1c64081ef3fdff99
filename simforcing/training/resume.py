"""Resuming a training run (a mixin of ``simforcing.train.Trainer``): the checkpoint to continue from, its config
checked, its weights, optimizer, schedule, RNGs and data position restored, and what changed said.

The methods read the trainer's ``cfg``, ``stage``, ``run_dir``, ``has_checkpoints``, ``resume_ckpt``, ``student``,
``optimizer``, ``scheduler``, ``dataset``, ``data_record``, ``dist`` and ``log``.
"""

from __future__ import annotations

import sys
import warnings

from simforcing import parallel
from simforcing.checkpoint import find_resumable, load_model_state, restore_rng
from simforcing.config import Config, config_diff
from simforcing.errors import CheckpointError
from simforcing.runfolder import CHECKPOINTS_DIR, trained_config
from simforcing.training.checks import check_resume_config, data_changes
from simforcing.training.optim import apply_optimizer_settings


class ResumeMixin:
    """``_find_resume_checkpoint``, ``_restore`` (and its parts ``_check_resume``, ``_load_state``)."""

    def _find_resume_checkpoint(self):
        """The newest valid checkpoint to continue from (None: nothing to resume, start at 0)."""
        if not self.has_checkpoints:
            warnings.warn(f"--resume: no valid checkpoint in {self.run_dir / CHECKPOINTS_DIR}; starting from step 0",
                          stacklevel=4)
            return None
        ckpt = find_resumable(self.run_dir)
        if ckpt is None:
            raise CheckpointError("--resume: every checkpoint is damaged; nothing to resume from",
                                  self.run_dir / CHECKPOINTS_DIR)
        return ckpt

    def _restore(self) -> int:
        """Continue from ``resume_ckpt``: its config checked, weights, optimizer, schedule, RNGs and data position
        restored, what changed (optimizer settings, the data) said; returns its step."""
        ckpt = self.resume_ckpt
        theirs, _ = trained_config(self.run_dir, ckpt)
        self._check_resume(theirs)  # the one actually restored
        changed = config_diff(theirs, self.cfg)
        if changed:
            warnings.warn(f"resuming {self.run_dir} with changed config fields: {', '.join(changed)}", stacklevel=3)
        self._load_state(ckpt)
        applied = apply_optimizer_settings(self.optimizer, self.scheduler, self.cfg)
        restore_rng(ckpt.train_state["rng"])
        data = ckpt.train_state["data"]
        if data.get("windows") != len(self.dataset) or data.get("global_batch") != self._global_batch():
            warnings.warn("resume: the number of windows or the global batch changed; the data order differs from "
                          "the interrupted run", stacklevel=3)
        self.start_step = ckpt.step
        data_changed = data_changes(ckpt.meta, self._dataset_stats(), self.data_record)
        if self.dist.is_main:
            print(f"resuming {self.run_dir} from {ckpt.path.name} (step {ckpt.step})", flush=True)
            if applied:
                print(f"resume: applied to the restored optimizer and scheduler: {'; '.join(applied)}", flush=True)
            if data_changed:
                print(f"resume: the data differs from what {ckpt.path.name} was trained on: {'; '.join(data_changed)}"
                      "; training continues with the checkpoint's normalisation statistics (its weights were trained "
                      "with them) — start a new run to train with the data's own", file=sys.stderr, flush=True)
        self.log.facts["resumed_with"] = applied
        self.log.facts["resume_data_changes"] = data_changed
        return ckpt.step

    def _check_resume(self, theirs: Config) -> None:
        """Whether this config may continue a run trained with ``theirs`` (``training.checks``)."""
        check_resume_config(self.cfg, theirs, self.stage, self.run_dir)

    def _load_state(self, ckpt) -> None:
        """Weights and optimizer of ``ckpt`` into this run's (any world size resumes any checkpoint: DCP reshards
        N -> M, and N -> 1 without a process group; a single-process checkpoint is broadcast into the shards of a
        multi-process run, 1 -> N); then the schedule."""
        state = ckpt.train_state
        if ckpt.sharded:
            parallel.load_sharded(ckpt.path / "dcp", self.student, self.optimizer)
        elif self.dist.world_size > 1:
            parallel.load_full_into_sharded(self.student, self.optimizer, ckpt.model_state, state["optimizer"])
        else:
            load_model_state(ckpt, self.student)
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    def _global_batch(self) -> int:
        return self.cfg.train.batch_size * self.dist.world_size
