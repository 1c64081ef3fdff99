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


def summarize_latency(per_sample: list[float], warmup: int = 1) -> dict:
    """Mean/median/min/max seconds per sample over ``per_sample[warmup:]`` (all samples if that leaves none)."""
    if not per_sample:
        return {"mean_s": None, "median_s": None, "min_s": None, "max_s": None, "num_timed": 0,
                "warmup_excluded": 0, "note": "no samples"}
    timed = per_sample[warmup:] if len(per_sample) > warmup else list(per_sample)
    excluded = len(per_sample) - len(timed)
    out = {"mean_s": statistics.fmean(timed), "median_s": statistics.median(timed), "min_s": min(timed),
           "max_s": max(timed), "num_timed": len(timed), "warmup_excluded": excluded}
    if excluded < warmup:
        out["note"] = f"only {len(per_sample)} sample(s): the warm-up sample could not be excluded"
    return out
