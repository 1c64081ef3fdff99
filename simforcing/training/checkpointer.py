"""A run's checkpoints as the loop writes them: at a step, the model, optimizer, schedule, RNGs and the position in
the data, with what the run trains with (its normalisation statistics, config, run id, data record and the VAE and probe
it reads).

    checkpointer = Checkpointer(run_dir, cfg, stats, run_id, data_record, steps_per_epoch, windows, global_batch)
    path = checkpointer.save(step, student, optimizer, scheduler)

``write`` is ``runs.checkpoint.save_checkpoint`` (the format, atomic writes, pruning); a fault plan wraps it
(``FaultPlan.around_writer``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import torch

from simforcing.config import Config
from simforcing.runs.checkpoint import capture_rng, save_checkpoint


class Checkpointer:
    """Writes the checkpoints of one run (every rank calls ``save``: a sharded model is written by all)."""

    def __init__(self, run_dir: Path, cfg: Config, stats: Optional[dict], run_id: Optional[str], data_record: dict,
                 steps_per_epoch: int, windows: int, global_batch: int,
                 write: Callable[..., Path] = save_checkpoint, inputs: Optional[dict] = None):
        self.run_dir, self.cfg, self.stats, self.run_id, self.data_record = run_dir, cfg, stats, run_id, data_record
        self.inputs = inputs  # the VAE and probe the run trains with (runs.folder.inputs_record)
        self.steps_per_epoch, self.windows, self.global_batch = steps_per_epoch, windows, global_batch
        self.write = write

    def save(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any) -> Path:
        """Checkpoint ``step`` (the data position: epoch and batch within it, so a resume continues the order)."""
        epoch, position = divmod(step, self.steps_per_epoch)
        data_state = {"epoch": epoch, "position": position, "steps_per_epoch": self.steps_per_epoch,
                      "windows": self.windows, "global_batch": self.global_batch}
        return self.write(self.run_dir, step, model, optimizer, scheduler, capture_rng(), data_state, self.stats,
                          self.cfg, run_id=self.run_id, data=self.data_record, inputs=self.inputs)
