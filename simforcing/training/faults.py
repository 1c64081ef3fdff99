"""Stop requests and injected faults: what makes a run stop early, on purpose or for a test.

``StopFlag``: SIGTERM/SIGINT set a flag; the loop finishes the current step, checkpoints and exits with 75.
``FaultPlan``: the ``SIMFORCING_FAULT`` variable, read once per run: comma-separated ``nan_loss@N`` (the loss of step
N becomes NaN), ``nan_batch@N`` (the latents of step N become NaN, so the method names the first non-finite term),
``sleep@N:S`` (hold S seconds in the middle of step N, after backward and before the optimizer update) and
``ckpt_sleep@N:S`` (hold S seconds in the middle of writing checkpoint N, after the weights, before the folder is
finalised) — e.g. to SIGKILL or SIGTERM a run there.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
import time
from typing import Any, Optional

from simforcing.errors import ConfigError


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
