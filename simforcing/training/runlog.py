"""What a run writes besides checkpoints: ``metrics.jsonl`` (one row per logged step), TensorBoard (``tb/``) and
``status.json`` (the run's state; never "running" for a process that has ended).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Optional

from torch.utils.tensorboard import SummaryWriter

from simforcing.errors import OutputError, os_cause
from simforcing.plots import plot_loss_curves
from simforcing.runs.folder import LOSS_PLOT, METRICS_FILE, STATUS_FILE, TB_DIR
from simforcing.utils import append_jsonl, atomic_write_json, atomic_write_text, read_jsonl


class RunLog:
    """Everything a run writes besides checkpoints (rank 0 only; other ranks get a silent instance)."""

    def __init__(self, run_dir: Path, active: bool):
        self.run_dir, self.active = run_dir, active
        self.metrics = run_dir / METRICS_FILE
        self._tb = None
        self.facts: dict = {}  # written into every status.json from now on (e.g. the skipped episodes)
        self.wrote_status = False  # this process has written status.json (so it must leave a final state there)

    def status(self, state: str, step: int, reason: str = "", **extra: Any) -> None:
        if self.active:
            self.wrote_status = True
            atomic_write_json(self.run_dir / STATUS_FILE, {"state": state, "step": step, "reason": reason,
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
                (self.run_dir / STATUS_FILE).unlink(missing_ok=True)
                return f"status.json could not be written ({os_cause(e.__cause__ or e)}) and was removed"
            except OSError as e2:
                return f"status.json could not be written or removed ({os_cause(e2)})"

    def truncate_after(self, step: int) -> tuple[float, float]:
        """Keep metrics of steps <= ``step`` (a resumed run re-logs later ones); returns the last kept ``time`` and
        ``core_s`` (0 where not recorded)."""
        if not self.active or not self.metrics.exists():
            return 0.0, 0.0
        kept = [r for r in read_jsonl(self.metrics) if int(r.get("step", 0)) <= step]
        atomic_write_text(self.metrics, "".join(json.dumps(r) + "\n" for r in kept))
        return (float(kept[-1].get("time", 0.0)), float(kept[-1].get("core_s", 0.0))) if kept else (0.0, 0.0)

    def reset(self) -> None:
        if self.active:
            self.metrics.unlink(missing_ok=True)

    def log(self, record: dict) -> None:
        if not self.active:
            return
        append_jsonl(self.metrics, record)
        tb = self.run_dir / TB_DIR
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
                raise OutputError(f"cannot write the TensorBoard log ({os_cause(e)})", self.run_dir / TB_DIR,
                                  e) from e

    def plot(self) -> Optional[Path]:
        if not self.active or not self.metrics.exists() or not self.metrics.stat().st_size:
            return None
        try:
            return plot_loss_curves(self.metrics, self.run_dir / LOSS_PLOT, title=self.run_dir.name)
        except ValueError:
            return None
