"""Dataset-level min–max statistics of actions and states, and the normaliser built from them (SPEC §1).

    stats = write_stats(root)            # meta/stats.json over splits train + sim_pool
    norm = Normalizer(stats)
    a = norm.normalize("action", actions)   # min -> -1, max -> +1
    actions = norm.denormalize("action", a)

The statistics are computed once (on the training episodes: ``train`` and the sim-only ``sim_pool``) and stored with
every checkpoint, so a model always sees the normalisation it was trained with. Values outside the training range
(e.g. on the validation split) map outside [-1, 1]; they are not clipped. A degenerate dimension (max == min) maps to 0
and back to its constant value.

Command: ``simforcing data stats DIR [--splits train,sim_pool]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from simforcing.data.format import DataError, episode_file, meta_dir, read_episodes, read_lowdim, read_splits
from simforcing.utils import atomic_write_json

STATS_KEYS = ("action", "state")


def compute_stats(root: str | Path, splits: Sequence[str] = ("train", "sim_pool"), skip_bad: bool = False) -> dict:
    """Min and max of every action and state dimension over the episodes of ``splits``.

    Returns ``{"action": {"min": [A], "max": [A]}, "state": {"min": [S], "max": [S]}, "computed_on": [splits],
    "num_episodes": n}``. A non-finite value or an unreadable lowdim.npz raises DataError (``skip_bad``: the episode
    is left out instead, and ``"skipped"`` lists it).
    """
    root = Path(root)
    split_lists = read_splits(root)
    known = read_episodes(root)
    ids: list[str] = []
    for s in splits:
        if s not in split_lists:
            raise DataError(f"split {s!r} is unknown; expected one of {sorted(split_lists)}",
                            path=meta_dir(root) / "splits.json", kind="bad_meta")
        ids += [e for e in split_lists[s] if e not in ids]
    lo: dict[str, np.ndarray | None] = {k: None for k in STATS_KEYS}
    hi: dict[str, np.ndarray | None] = {k: None for k in STATS_KEYS}
    used, skipped = 0, []
    for ep in ids:
        try:
            if ep not in known:
                raise DataError("listed in splits.json but absent from episodes.jsonl", ep,
                                meta_dir(root) / "episodes.jsonl", kind="unknown_episode")
            arrays = dict(zip(STATS_KEYS, read_lowdim(root, ep)))
            for key, x in arrays.items():
                if x.ndim != 2 or x.shape[0] == 0:
                    raise DataError(f"field {key}s has shape {x.shape}; expected a non-empty 2-D array", ep,
                                    episode_file(root, ep, "lowdim.npz"), kind=f"bad_{key}_shape")
                if not np.all(np.isfinite(x)):
                    raise DataError(f"field {key}s holds NaN/inf", ep, episode_file(root, ep, "lowdim.npz"),
                                    kind="non_finite")
                if lo[key] is not None and lo[key].shape[0] != x.shape[1]:
                    raise DataError(f"field {key}s has {x.shape[1]} dimensions; earlier episodes have "
                                    f"{lo[key].shape[0]}", ep, episode_file(root, ep, "lowdim.npz"),
                                    kind=f"bad_{key}_shape")
        except DataError as e:
            if not skip_bad:
                raise
            skipped.append((ep, str(e)))
            continue
        for key, x in arrays.items():
            x = x.astype(np.float64)
            lo[key] = x.min(0) if lo[key] is None else np.minimum(lo[key], x.min(0))
            hi[key] = x.max(0) if hi[key] is None else np.maximum(hi[key], x.max(0))
        used += 1
    if used == 0:
        raise DataError(f"no usable episode in splits {list(splits)}; cannot compute statistics",
                        path=meta_dir(root) / "splits.json", kind="empty_split")
    out = {k: {"min": lo[k].tolist(), "max": hi[k].tolist()} for k in STATS_KEYS}
    out.update(computed_on=list(splits), num_episodes=used)
    if skipped:
        out["skipped"] = [list(s) for s in skipped]
    return out


def write_stats(root: str | Path, splits: Sequence[str] = ("train", "sim_pool"), skip_bad: bool = False) -> dict:
    """compute_stats + an atomic write of meta/stats.json; returns the stats dict."""
    stats = compute_stats(root, splits, skip_bad=skip_bad)
    atomic_write_json(meta_dir(root) / "stats.json", stats)
    return stats


class Normalizer:
    """Min–max to [-1, 1] and back, per dimension, from a stats dict (``read_stats`` / ``compute_stats``).

    Works on numpy arrays and torch tensors of shape (..., D); the output has the input's type, float32.
    """

    def __init__(self, stats: dict):
        self.stats = stats
        self._lo, self._span = {}, {}
        for key in STATS_KEYS:
            try:
                lo = np.asarray(stats[key]["min"], np.float64)
                hi = np.asarray(stats[key]["max"], np.float64)
            except (KeyError, TypeError, ValueError) as e:
                raise DataError(f"stats field {key}.min/{key}.max is missing or not numeric ({e})",
                                kind="bad_stats") from e
            if lo.shape != hi.shape or lo.ndim != 1 or np.any(hi < lo):
                raise DataError(f"stats field {key}: min {lo.tolist()} and max {hi.tolist()} must be equal-length "
                                f"lists with min <= max", kind="bad_stats")
            self._lo[key], self._span[key] = lo, hi - lo

    def dim(self, key: str) -> int:
        return int(self._lo[key].shape[0])

    def check_dims(self, action_dim: int, state_dim: int, source: str = "stats") -> None:
        """Raise DataError (kind bad_stats) when the stats do not match data.action_dim / data.state_dim."""
        for key, want, field in (("action", action_dim, "data.action_dim"), ("state", state_dim, "data.state_dim")):
            if self.dim(key) != want:
                raise DataError(f"{source}: field {key} has {self.dim(key)} dimensions; expected {want} ({field})",
                                kind="bad_stats")

    def normalize(self, key: str, x):
        lo, span = self._lo[key], self._span[key]
        safe = np.where(span > 0, span, 1.0)
        scale = np.where(span > 0, 2.0 / safe, 0.0)  # degenerate dims -> 0
        return self._affine(x, scale, -lo * scale - np.where(span > 0, 1.0, 0.0), key)

    def denormalize(self, key: str, y):
        lo, span = self._lo[key], self._span[key]
        return self._affine(y, span / 2.0, lo + span / 2.0, key)

    def _affine(self, x, scale: np.ndarray, shift: np.ndarray, key: str):
        """x * scale + shift over the last dimension, keeping numpy/torch and returning float32."""
        if x.shape[-1] != scale.shape[0]:
            raise DataError(f"{key} has {x.shape[-1]} dimensions; the stats have {scale.shape[0]}", kind="bad_stats")
        if isinstance(x, torch.Tensor):
            s = torch.as_tensor(scale, dtype=torch.float64, device=x.device)
            b = torch.as_tensor(shift, dtype=torch.float64, device=x.device)
            return (x.double() * s + b).float()
        return (np.asarray(x, np.float64) * scale + shift).astype(np.float32)

    def to_dict(self) -> dict:
        return self.stats
