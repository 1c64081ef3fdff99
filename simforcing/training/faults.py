"""Stop requests and injected faults: what makes a run stop early, on purpose or for a test.

``StopFlag``: SIGTERM/SIGINT set a flag; the loop finishes the current step, checkpoints and exits with 75.
``FaultPlan``: the ``SIMFORCING_FAULT`` variable, read once per run: comma-separated ``nan_loss@N`` (the loss of step
N becomes NaN), ``nan_batch@N`` (the latents of step N become NaN, so the method names the first non-finite term),
``sleep@N:S`` (hold S seconds in the middle of step N, after backward and before the optimizer update) and
``ckpt_sleep@N:S`` (hold S seconds in the middle of writing checkpoint N, after the weights, before the folder is
finalised) — e.g. to SIGKILL or SIGTERM a run there.

The faults reach a run through wrappers around what the loop calls — the batch's latents (``around_latents``), the
step's hooks (``around_hooks``) and the checkpoint writer (``around_writer``) — each the function itself when the
plan holds no fault of its kind: the production path never asks for one.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Optional

import torch

from simforcing.errors import ConfigError
from simforcing.training.step import StepHooks


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

    def around_latents(self, latents: Callable[[dict, int], dict],
                       keys: tuple[str, ...]) -> Callable[[dict, int], dict]:
        """``latents(batch, step)`` whose ``keys`` are NaN at the ``nan_batch`` steps."""
        if not self.nan_batch:
            return latents

        def faulty(batch: dict, step: int) -> dict:
            out = latents(batch, step)
            if step in self.nan_batch:
                for key in keys:
                    out[key] = torch.full_like(out[key], float("nan"))
            return out

        return faulty

    def around_hooks(self, hooks: Callable[[int], StepHooks], stop: StopFlag) -> Callable[[int], StepHooks]:
        """``hooks(step)`` with a NaN loss at the ``nan_loss`` steps and a hold after backward at the ``sleep``
        steps (ended early by a stop request)."""
        if not (self.nan_loss or self.sleep):
            return hooks

        def faulty(step: int) -> StepHooks:
            out = hooks(step)
            if step in self.nan_loss:
                out = dataclasses.replace(out, corrupt_loss=lambda loss: loss * float("nan"))
            seconds = self.sleep.get(step)
            if seconds:
                out = dataclasses.replace(out, after_backward=lambda: self.hold(seconds, stop, f"step {step}"))
            return out

        return faulty

    def around_writer(self, write: Callable[..., Any]) -> Callable[..., Any]:
        """``write(run_dir, step, ...)`` (``runs.checkpoint.save_checkpoint``) holding in the middle of writing the
        ``ckpt_sleep`` checkpoints."""
        if not self.ckpt_sleep:
            return write

        def faulty(run_dir: Any, step: int, *args: Any, **kwargs: Any) -> Any:
            seconds = self.ckpt_sleep.get(step)
            if seconds:
                kwargs["on_partial"] = lambda: self.hold(seconds, what=f"checkpoint {step}")
            return write(run_dir, step, *args, **kwargs)

        return faulty
