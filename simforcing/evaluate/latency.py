"""Latency protocol (SPEC §8, paper App. "quality–latency trade-off").

Latency per sample = first-frame preparation (VAE encode of the real first frame and, when a simulation rollout runs,
masking + encode of the masked frame) + simulation generation + real generation + decoding of the real video. Model
loading, metric computation and file writing are outside the clock. On CUDA the device is synchronised before every
clock read, so queued kernels are counted where they run. The reported mean excludes the first sample of each
configuration (the warm-up); with a single sample nothing can be excluded and the report says so.

When a sweep reuses a simulation rollout computed for another configuration (same sample, same N_s, same seed), the
reused rollout's measured time is added to that configuration's latency: every configuration pays for its own
simulation, as the paper reports it.

The clock itself (phases, CUDA synchronisation) is ``simforcing.timing.Stopwatch``.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Optional

from simforcing.result_files import typed


@dataclass(frozen=True)
class LatencySummary:
    """Seconds per sample over the timed samples (``num_timed``; ``warmup_excluded`` left out as the warm-up): mean,
    median, min, max (None without samples) and a ``note`` where the warm-up could not be excluded."""

    mean_s: Optional[float]
    median_s: Optional[float]
    min_s: Optional[float]
    max_s: Optional[float]
    num_timed: int
    warmup_excluded: int
    note: Optional[str] = None

    def to_json(self) -> dict:
        """eval.json's ``latency`` (``note`` only where there is one)."""
        return {k: v for k, v in asdict(self).items() if v is not None or k != "note"}

    @classmethod
    def from_json(cls, d: dict) -> "LatencySummary":
        """From ``to_json``'s dict (a key an older file lacks reads as None, or 0 for the counts)."""
        num, opt = ("number", "null"), {"default": None}
        return cls(*(typed(d, k, *num, **opt) for k in ("mean_s", "median_s", "min_s", "max_s")),
                   typed(d, "num_timed", "int", default=0), typed(d, "warmup_excluded", "int", default=0),
                   typed(d, "note", "str", "null", **opt))


def summarize_latency(per_sample: list[float], warmup: int = 1) -> LatencySummary:
    """Mean/median/min/max seconds per sample over ``per_sample[warmup:]`` (all samples if that leaves none)."""
    if not per_sample:
        return LatencySummary(None, None, None, None, 0, 0, "no samples")
    timed = per_sample[warmup:] if len(per_sample) > warmup else list(per_sample)
    excluded = len(per_sample) - len(timed)
    note = (f"only {len(per_sample)} sample(s): the warm-up sample could not be excluded" if excluded < warmup
            else None)
    return LatencySummary(statistics.fmean(timed), statistics.median(timed), min(timed), max(timed), len(timed),
                          excluded, note)
