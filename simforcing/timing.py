"""Wall-clock timing that counts queued device work: the one place that synchronises CUDA before a clock read.

    sw = Stopwatch(device)
    with sw.phase("real"):          # CUDA is synchronised on entry and exit, so queued kernels count where they run
        ...
    sw.times                        # {"real": seconds, ...}

Used by the sampler (per-phase latency, SPEC §8: see ``simforcing.evaluate.latency`` for the protocol) and by the
benchmark's clocks.
"""

from __future__ import annotations

import time

import torch


def synchronize(device: torch.device | str | None) -> None:
    """Wait for queued CUDA work on ``device`` (no-op on CPU and for None)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class Stopwatch:
    """Accumulates named wall-clock phases of one sample: ``with sw.phase("real"): ...``; ``sw.times`` in seconds."""

    def __init__(self, device: torch.device | str | None = None):
        self.device = device
        self.times: dict[str, float] = {}

    def phase(self, name: str) -> "_Phase":
        return _Phase(self, name)

    def add(self, name: str, seconds: float) -> None:
        self.times[name] = self.times.get(name, 0.0) + seconds

    @property
    def total(self) -> float:
        return sum(self.times.values())


class _Phase:
    def __init__(self, sw: Stopwatch, name: str):
        self.sw, self.name = sw, name

    def __enter__(self) -> "_Phase":
        synchronize(self.sw.device)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        synchronize(self.sw.device)
        self.sw.add(self.name, time.perf_counter() - self.t0)
