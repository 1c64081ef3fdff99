"""Resuming a training run: the checkpoint to continue from, its config checked, its weights, optimizer, schedule and
RNGs restored, and what changed said.

    ckpt = find_checkpoint(folder)                      # None: nothing to resume, the run starts at step 0
    restored = restore(ckpt, folder, cfg, dist, ...)    # -> Restored(step, applied, data_changes)

The checkpoint is found before the data and the models are built: its normalisation statistics are the ones the run
trains with (its weights were trained with them).
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from typing import Any, Optional

import torch

import simforcing.parallel as parallel
from simforcing.config import Config, config_diff
from simforcing.data.format import read_stats
from simforcing.errors import CheckpointError
from simforcing.runs.checkpoint import Checkpoint, find_resumable, load_model_state, restore_rng
from simforcing.runs.folder import CHECKPOINTS_DIR, trained_config
from simforcing.training.checks import check_resume_config, data_changes
from simforcing.training.folder import RunFolder
from simforcing.training.optim import apply_optimizer_settings


@dataclass(frozen=True)
class Restored:
    """What a restore did: the step the run continues from, the optimizer settings the config changed, and what
    differs in the data (status.json ``resumed_with``, ``resume_data_changes``)."""

    step: int
    applied: list[str]
    data_changes: list[str]


def find_checkpoint(folder: RunFolder) -> Optional[Checkpoint]:
    """The newest valid checkpoint of ``folder`` to continue from (None: nothing to resume, start at 0)."""
    if not folder.has_checkpoints:
        warnings.warn(f"--resume: no valid checkpoint in {folder.path / CHECKPOINTS_DIR}; starting from step 0",
                      stacklevel=4)
        return None
    ckpt = find_resumable(folder.path)
    if ckpt is None:
        raise CheckpointError("--resume: every checkpoint is damaged; nothing to resume from",
                              folder.path / CHECKPOINTS_DIR)
    return ckpt


def dataset_stats(cfg: Config, dataset: Any) -> Optional[dict]:
    """The statistics the data itself holds now (meta/stats.json; a latent cache's index), to compare with a
    checkpoint's."""
    if cfg.data.latent_cache:
        return dataset.stats
    try:
        return read_stats(cfg.data.root)
    except ValueError:
        return None


def restore(ckpt: Checkpoint, folder: RunFolder, cfg: Config, dist: parallel.DistInfo, student: torch.nn.Module,
            optimizer: torch.optim.Optimizer, scheduler: Any, dataset: Any, data_record: dict) -> Restored:
    """Continue from ``ckpt``: its config checked (the one actually restored), weights, optimizer, schedule and RNGs
    restored, the config's optimizer settings applied, and what changed said (against ``dataset`` and its
    ``checks.data_record``)."""
    theirs, _ = trained_config(folder.path, ckpt)
    check_resume_config(cfg, theirs, folder.stage, folder.path)
    changed = config_diff(theirs, cfg)
    if changed:
        warnings.warn(f"resuming {folder.path} with changed config fields: {', '.join(changed)}", stacklevel=3)
    _load_state(ckpt, dist, student, optimizer, scheduler)
    applied = apply_optimizer_settings(optimizer, scheduler, cfg)
    restore_rng(ckpt.train_state["rng"])
    data = ckpt.train_state["data"]
    if data.get("windows") != len(dataset) or data.get("global_batch") != cfg.train.batch_size * dist.world_size:
        warnings.warn("resume: the number of windows or the global batch changed; the data order differs from "
                      "the interrupted run", stacklevel=3)
    data_changed = data_changes(ckpt.meta, dataset_stats(cfg, dataset), data_record)
    if dist.is_main:
        print(f"resuming {folder.path} from {ckpt.path.name} (step {ckpt.step})", flush=True)
        if applied:
            print(f"resume: applied to the restored optimizer and scheduler: {'; '.join(applied)}", flush=True)
        if data_changed:
            print(f"resume: the data differs from what {ckpt.path.name} was trained on: {'; '.join(data_changed)}"
                  "; training continues with the checkpoint's normalisation statistics (its weights were trained "
                  "with them) — start a new run to train with the data's own", file=sys.stderr, flush=True)
    return Restored(ckpt.step, applied, data_changed)


def _load_state(ckpt: Checkpoint, dist: parallel.DistInfo, student: torch.nn.Module,
                optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
    """Weights and optimizer of ``ckpt`` into this run's (any world size resumes any checkpoint: DCP reshards
    N -> M, and N -> 1 without a process group; a single-process checkpoint is broadcast into the shards of a
    multi-process run, 1 -> N); then the schedule."""
    state = ckpt.train_state
    if ckpt.sharded:
        parallel.load_sharded(ckpt.path / "dcp", student, optimizer)
    elif dist.world_size > 1:
        parallel.load_full_into_sharded(student, optimizer, ckpt.model_state, state["optimizer"])
    else:
        load_model_state(ckpt, student)
        optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
