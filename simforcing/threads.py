"""CPU threads that stay fast when the machine is shared (``train.threads``).

torch's intra-op threads meet at a barrier after every operation. When another program keeps one of the cores busy,
the thread that shares that core arrives late at every barrier and the others spin waiting for it: on a 2-core
machine a 2-thread training step of the demo model went from 0.09 s to 0.36 s beside one busy-looping process, while
a 1-thread step went to 0.14 s. On a quiet machine 2 threads are the faster choice (0.09 s against 0.13 s).

``train.threads``:
- an integer N: torch uses N threads, always (reproducible to the bit for a given N);
- "auto" (default): start with every core the process may use (at most ``AUTO_MAX``) and let a
  :class:`ThreadGovernor` watch how busy the *other* processes keep the machine (``/proc/stat`` minus this
  process's own CPU time, over a few seconds): when they take a core or more, drop to one thread per free core
  (at least 1); when they leave, go back up. A quiet machine never changes the count. The count used for each step
  range is logged (``threads`` in metrics.jsonl), as a different count changes float rounding.
"""

from __future__ import annotations

import os
import time
from typing import Optional

import torch

AUTO_MAX = 8


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def parse_threads(value) -> Optional[int]:
    """"auto" -> None; an integer >= 1 -> itself; anything else -> ValueError."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise ValueError(f"train.threads: got {value!r}; expected 'auto' or an integer >= 1")
    return n


def _busy_seconds() -> Optional[float]:
    """Busy CPU time of the whole machine so far (seconds, all cores), from /proc/stat; None off Linux."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()[1:]
    except OSError:
        return None
    vals = [int(x) for x in fields]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    return (sum(vals[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class ThreadGovernor:
    """Chooses torch's thread count from the load other processes put on the machine (module docstring).

    ``update()`` once per training step; it samples at most every ``interval`` seconds and returns the new count
    when it changed it (None otherwise). ``others`` is the last measured load of other processes, in cores.
    """

    def __init__(self, max_threads: int, interval: float = 3.0, clock=time.perf_counter, busy=_busy_seconds,
                 own=time.process_time, apply=torch.set_num_threads):
        self.max_threads = max(1, int(max_threads))
        self.interval, self.clock, self.busy, self.own, self.apply = interval, clock, busy, own, apply
        self.threads = self.max_threads
        self.others = 0.0
        self._last = None
        self.apply(self.threads)

    def _sample(self):
        b = self.busy()
        return None if b is None else (self.clock(), b, self.own())

    def update(self) -> Optional[int]:
        now = self.clock()
        if self._last is not None and now - self._last[0] < self.interval:
            return None
        cur = self._sample()
        if cur is None:
            return None
        prev, self._last = self._last, cur
        if prev is None:
            return None
        wall = cur[0] - prev[0]
        if wall <= 0:
            return None
        self.others = max(0.0, ((cur[1] - prev[1]) - (cur[2] - prev[2])) / wall)
        # cores the others leave us, rounded with a margin: 0.6 of a core taken counts as taken
        free = max(1, min(self.max_threads, int(self.max_threads - self.others + 0.4)))
        if free != self.threads:
            self.threads = free
            self.apply(free)
            return free
        return None


def configure_threads(value, device_type: str = "cpu") -> Optional[ThreadGovernor]:
    """Apply ``train.threads``: a fixed count (returns None) or a governor for "auto" on CPU (returns it)."""
    n = parse_threads(value)
    if device_type != "cpu":
        return None
    if n is not None:
        torch.set_num_threads(n)
        return None
    env = os.environ.get("OMP_NUM_THREADS")
    cap = int(env) if env and env.isdigit() and int(env) > 0 else min(AUTO_MAX, available_cores())
    return ThreadGovernor(cap)
