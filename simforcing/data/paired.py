"""Paired sim/real training windows (SPEC §1; DESIGN.md "Batches").

    ds = PairedWindowDataset(cfg, root, splits=("train",), domains=("sim", "real"), epoch=0, stats=None)
    ds.set_epoch(3)            # redraw windows, reproducible from (cfg.train.seed, 3)
    item = ds[0]               # dict: sim, real, actions, states, state0, text, text_mask, arm_mask, ...

Windows. A window keeps F = data.frames frames, every data.frame_stride-th step, so it spans
``window_steps = (F - 1)·stride + 1`` raw steps starting at ``start``; ALL actions inside are kept:
``actions[start : start + (F - 1)·stride]`` (Bridge: 21 frames, 20 actions; InternData-A1: 129 steps, 33 frames,
128 actions = 4 per frame transition); states are taken at the kept frames. Episodes shorter than one window are
dropped (``ds.dropped``). Each epoch draws ``data.windows_per_episode`` starts per episode uniformly (with replacement)
from a generator seeded by ``(train.seed, epoch)``; ``data.fixed_window`` instead keeps ONE window per episode, the
centre one (``start = (T - window_steps) // 2``), every epoch. ``len(ds)`` = episodes × windows.

Frames. Aspect-preserving resize so the frame covers (data.height, data.width) (bilinear, antialiased when
shrinking; nearest for arm masks), then a centre crop; uint8 -> float in [-1, 1]. The same transform for sim, real and
masks. A source whose crop would keep < 25 % of an axis is rejected (DataError kind "bad_resolution").

Episodes are decoded and resized once and kept (uint8, at the target size) in a per-process LRU cache of
``cache_episodes`` episodes, so the 30 windows of one trajectory do not decode it 30 times. DataLoader workers each
hold their own cache (it is dropped when the dataset is pickled for a worker and rebuilt after a fork).

Validation at construction reads every lowdim.npz and the video headers (``check.validate_episode`` without
decoding). ``data.skip_bad``: bad episodes are logged once each and listed in ``ds.skipped`` as (episode, reason);
otherwise the first one raises DataError. A problem only decoding can reveal (a file whose header promises more
frames than it decodes) raises DataError when its item is loaded. With "real" in domains, sim-only episodes of
``sim_pool`` are left out (``ds.excluded``); a train/val episode without a real video is a DataError (kind
"unpaired_episode").
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from simforcing.config import Config, ConfigError
from simforcing.data.check import (PAIRED_SPLITS, check_resolution, check_text_cache, resolve_split_episodes,
                                   skip_or_raise, validate_episode)
from simforcing.data.format import (DataError, EpisodeInfo, dataset_views, episode_file, read_arm_mask, read_info,
                                    read_lowdim, read_stats, read_video, read_views, split_pair, view_file)
from simforcing.data.stats import Normalizer
from simforcing.data.text_cache import cache_dir, load_embedding

log = logging.getLogger("simforcing.data")

DOMAINS = ("sim", "real")
RESIZE_CHUNK = 16  # frames resized at once (bounds the float32 peak memory of long episodes)


# ----------------------------------------------------------------------------------------------------------------------
# Frame transform
# ----------------------------------------------------------------------------------------------------------------------


def resize_center_crop(x: torch.Tensor, height: int, width: int, nearest: bool = False) -> torch.Tensor:
    """x (N, C, h, w) float -> (N, C, height, width): aspect-preserving resize to cover, then a centre crop."""
    h, w = x.shape[-2:]
    if (h, w) == (height, width):
        return x
    scale = max(height / h, width / w)
    rh, rw = max(height, round(h * scale)), max(width, round(w * scale))
    if (rh, rw) != (h, w):
        if nearest:
            x = F.interpolate(x, size=(rh, rw), mode="nearest-exact")
        else:
            x = F.interpolate(x, size=(rh, rw), mode="bilinear", align_corners=False, antialias=scale < 1)
    top, left = (rh - height) // 2, (rw - width) // 2
    return x[..., top:top + height, left:left + width]


def frames_to_target(frames: np.ndarray, height: int, width: int) -> torch.Tensor:
    """uint8 (T, h, w, 3) -> uint8 (3, T, height, width), resized in chunks of RESIZE_CHUNK frames."""
    x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2)  # (T, 3, h, w)
    if tuple(x.shape[-2:]) != (height, width):
        parts = [resize_center_crop(x[i:i + RESIZE_CHUNK].float(), height, width).round_().clamp_(0, 255)
                 .to(torch.uint8) for i in range(0, x.shape[0], RESIZE_CHUNK)]
        x = torch.cat(parts)
    return x.permute(1, 0, 2, 3).contiguous()  # (3, T, H, W)


def masks_to_target(mask: np.ndarray, height: int, width: int) -> torch.Tensor:
    """uint8/bool (T, h, w) -> bool (T, height, width) with nearest resize + the same centre crop."""
    m = torch.from_numpy(np.ascontiguousarray(mask)).bool()
    if tuple(m.shape[-2:]) != (height, width):
        m = resize_center_crop(m[:, None].float(), height, width, nearest=True)[:, 0] > 0.5  # (T, H, W)
    return m


def compose_views(parts: Sequence[torch.Tensor], layout: str = "width") -> torch.Tensor:
    """The views of one frame (or video, or mask) side by side: tensors (..., H, W) -> (..., H, V·W) for ``layout``
    "width", (..., V·H, W) for "height" (``data.view_layout``). One view is returned as it is."""
    if len(parts) == 1:
        return parts[0]
    return torch.cat(list(parts), dim=-1 if layout == "width" else -2)


def split_views(x: torch.Tensor, views: int, layout: str = "width") -> list[torch.Tensor]:
    """The inverse of :func:`compose_views`: (..., H, V·W) or (..., V·H, W) -> V tensors (..., H, W)."""
    if views == 1:
        return [x]
    dim = -1 if layout == "width" else -2
    size = x.shape[dim]
    if size % views:
        raise ValueError(f"split_views: a frame of {size} pixels along its {layout} cannot hold {views} views alike")
    return list(torch.split(x, size // views, dim=dim))


def to_unit_range(x: torch.Tensor) -> torch.Tensor:
    """uint8 -> float32 in [-1, 1] (a float input holding 0..255 is converted in place). Inverse: :func:`to_uint8`."""
    return x.float().div_(127.5).sub_(1.0)


def to_uint8(x: torch.Tensor) -> torch.Tensor:
    """float in [-1, 1] (clamped) -> uint8 of the same shape, on the CPU. Inverse: :func:`to_unit_range`."""
    return ((x.detach().float().cpu().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)


# ----------------------------------------------------------------------------------------------------------------------
# Windows
# ----------------------------------------------------------------------------------------------------------------------


def window_frame_indices(start: int, frames: int, stride: int) -> np.ndarray:
    """Raw step indices of the kept frames: start, start + stride, ..., start + (F - 1)·stride."""
    return start + stride * np.arange(frames)


def draw_window_starts(lengths: Sequence[int], window_steps: int, windows: int, seed: int, epoch: int,
                       fixed: bool = False) -> list[tuple[int, int]]:
    """[(episode_index, start)], episode-major. ``fixed``: one centre window per episode, independent of the epoch."""
    if fixed:
        return [(i, (T - window_steps) // 2) for i, T in enumerate(lengths)]
    rng = np.random.default_rng([int(seed), int(epoch), 0x5F1D])
    out = []
    for i, T in enumerate(lengths):
        out += [(i, int(s)) for s in rng.integers(0, T - window_steps + 1, size=windows)]
    return out


@dataclass
class _Episode:
    info: EpisodeInfo
    split: str
    has_mask: bool


# ----------------------------------------------------------------------------------------------------------------------
# Dataset
# ----------------------------------------------------------------------------------------------------------------------


class PairedWindowDataset(torch.utils.data.Dataset):
    """Windows of paired (or sim-only) episodes; see the module docstring for every rule."""

    def __init__(self, cfg: Config, root: str | Path, splits: Sequence[str] = ("train",),
                 domains: Sequence[str] = ("sim", "real"), epoch: int = 0, stats: dict | None = None,
                 cache_episodes: int | None = None, validate: bool = True):
        domains = tuple(domains)
        if not domains or any(d not in DOMAINS for d in domains):
            raise ValueError(f"domains: got {domains}; expected a non-empty subset of {DOMAINS}")
        self.cfg, self.root, self.splits, self.domains = cfg, Path(root), tuple(splits), domains
        self.cache_episodes = max(1, int(cfg.data.cache_episodes if cache_episodes is None else cache_episodes))
        d = cfg.data
        self.frames, self.stride, self.window_steps = d.frames, d.frame_stride, d.window_steps
        self.info = read_info(self.root)
        self.views = read_views(d.view_names, self.info, self.root)  # the cameras read, side by side in one frame
        self.stats = stats if stats is not None else read_stats(self.root)
        self.normalizer = Normalizer(self.stats)
        self.normalizer.check_dims(d.action_dim, d.state_dim, "normalisation stats")
        self.text_cache = cache_dir(self.root, d.text_cache)
        check_text_cache(self.text_cache, cfg)
        self.skipped: list[tuple[str, str]] = []
        self.dropped: list[tuple[str, int]] = []  # (episode, length) shorter than one window
        self.excluded: list[str] = []  # sim-only episodes left out because "real" is in domains
        self.episodes = self._select_episodes(validate)
        self.epoch = int(epoch)
        self.windows: list[tuple[int, int]] = []
        self.set_epoch(epoch)
        self._reset_cache()

    # -- construction ---------------------------------------------------------------------------------------------
    def _select_episodes(self, validate: bool) -> list[_Episode]:
        order, index, problems = resolve_split_episodes(self.root, self.splits)
        for e in problems:
            self._bad(e)
        want_real = "real" in self.domains
        kept: list[_Episode] = []
        for split, eid in order:
            ep = index[eid]
            if want_real and not ep.has_real and split not in PAIRED_SPLITS:
                self.excluded.append(eid)
                continue
            try:
                if validate:
                    summ = validate_episode(self.root, self.info, ep, self.cfg, need_real=want_real,
                                            text_cache=self.text_cache, views=self.views)
                    has_mask = summ.has_mask
                else:
                    if want_real and not ep.has_real:
                        raise DataError("has_real is false but domains include 'real'", eid,
                                        kind="unpaired_episode")
                    has_mask = ep.has_real and episode_file(
                        self.root, eid, view_file("arm_mask", self.views[0], dataset_views(self.info), ".npz")).exists()
            except DataError as e:
                self._bad(e)
                continue
            if ep.length < self.window_steps:
                self.dropped.append((eid, ep.length))
                continue
            kept.append(_Episode(ep, split, has_mask))
        if self.dropped:
            log.info("dropped %d episodes shorter than one window (%d steps)", len(self.dropped), self.window_steps)
        if not kept:
            if self.dropped:
                longest = max(n for _, n in self.dropped)
                raise ConfigError(f"data.frames={self.frames}, data.frame_stride={self.stride}: a window spans "
                                  f"{self.window_steps} steps but the longest episode of splits {list(self.splits)} "
                                  f"has {longest} frames; no episode is long enough")
            raise DataError(f"no usable episode in splits {list(self.splits)} for domains {list(self.domains)}",
                            path=self.root / "meta" / "splits.json", kind="empty_split")
        return kept

    def _bad(self, e: DataError) -> None:
        eid, kind, message = skip_or_raise(e, self.cfg.data.skip_bad)
        self.skipped.append((eid, f"[{kind}] {message}"))  # (episode, "[kind] message")

    # -- epochs ---------------------------------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Redraw the windows of every episode from (cfg.train.seed, epoch)."""
        self.epoch = int(epoch)
        self.windows = draw_window_starts([e.info.length for e in self.episodes], self.window_steps,
                                          self.cfg.data.windows_per_episode, self.cfg.train.seed, self.epoch,
                                          fixed=self.cfg.data.fixed_window)

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> dict:
        ep_index, start = self.windows[index]
        return self.item_at(ep_index, start)

    # -- items ----------------------------------------------------------------------------------------------------
    def item_at(self, ep_index: int, start: int) -> dict:
        """The item of the window of episode number ``ep_index`` starting at raw step ``start``."""
        ep = self.episodes[ep_index]
        T = ep.info.length
        if not 0 <= start <= T - self.window_steps:
            raise IndexError(f"window start {start} outside [0, {T - self.window_steps}] for episode "
                             f"{ep.info.episode_id} of length {T}")
        rec = self._episode(ep_index)
        idx = torch.from_numpy(window_frame_indices(start, self.frames, self.stride))
        n_act = self.frames - 1
        item: dict = {}
        for dom in self.domains:
            item[dom] = to_unit_range(rec[dom].index_select(1, idx))  # (3, F, H, W)
        item["actions"] = rec["actions"][start:start + n_act * self.stride].clone()  # (A_w, action_dim)
        item["states"] = rec["states"].index_select(0, idx)  # (F, state_dim)
        item["state0"] = item["states"][0].clone()
        item["text"], item["text_mask"] = self._text(ep.info)
        if rec["mask"] is not None:
            item["arm_mask"], item["has_arm_mask"] = rec["mask"].index_select(0, idx), True
        else:
            H, W = self.cfg.data.frame_hw
            item["arm_mask"], item["has_arm_mask"] = torch.zeros(self.frames, H, W, dtype=torch.bool), False
        item["episode_id"], item["start"] = ep.info.episode_id, int(start)
        return item

    def _text(self, ep: EpisodeInfo) -> tuple[torch.Tensor, torch.Tensor]:
        got = self._text_cache.get(ep.instruction)
        if got is None:
            d = self.cfg.data
            text, mask = load_embedding(self.text_cache, ep.instruction, d.text_max_tokens, self.cfg.model.text_dim,
                                        ep.episode_id)
            got = self._text_cache[ep.instruction] = (torch.from_numpy(text), torch.from_numpy(mask))
        return got[0].clone(), got[1].clone()

    # -- the decoded-episode LRU cache ----------------------------------------------------------------------------
    def _reset_cache(self) -> None:
        self._cache: OrderedDict[int, dict] = OrderedDict()
        self._text_cache: dict = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for k in ("_cache", "_text_cache", "_lock", "_pid"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset_cache()

    def _episode(self, ep_index: int) -> dict:
        if self._pid != os.getpid():  # forked DataLoader worker: start from an empty cache of its own
            self._reset_cache()
        with self._lock:
            rec = self._cache.get(ep_index)
            if rec is not None:
                self._cache.move_to_end(ep_index)
                return rec
        rec = self._load_episode(self.episodes[ep_index])
        with self._lock:
            self._cache[ep_index] = rec
            self._cache.move_to_end(ep_index)
            while len(self._cache) > self.cache_episodes:
                self._cache.popitem(last=False)
        return rec

    def _load_episode(self, ep: _Episode) -> dict:
        """Decode, check and resize one episode: videos uint8 (3, T, H, W) — every view read brought to data.height ×
        data.width, then side by side along ``data.view_layout`` (:func:`compose_views`) —, normalised actions and
        states, the arm masks likewise."""
        info = ep.info
        eid, H, W = info.episode_id, self.cfg.data.height, self.cfg.data.width
        rec: dict = {dom: [] for dom in self.domains}
        shapes = []
        for view in self.views:
            videos = self._read_videos(info, view)
            for dom, (frames, path) in videos.items():
                if frames.shape[0] != info.length:
                    raise DataError(f"decoded {frames.shape[0]} frames; expected {info.length} (field length in "
                                    f"episodes.jsonl)", eid, path, kind="truncated_video")
                check_resolution(frames.shape[1], frames.shape[2], H, W, eid, path)
                rec[dom].append(frames_to_target(frames, H, W))
            shapes.append(videos[self.domains[-1]][0].shape[:3])
        layout = self.cfg.data.view_layout
        for dom in self.domains:
            rec[dom] = compose_views(rec[dom], layout)
        actions, states = read_lowdim(self.root, eid)
        rec["actions"] = torch.from_numpy(self.normalizer.normalize("action", actions))
        rec["states"] = torch.from_numpy(self.normalizer.normalize("state", states))
        rec["mask"] = None
        if ep.has_mask and "real" in self.domains:
            masks = []
            for view, shape in zip(self.views, shapes):
                mask = read_arm_mask(self.root, eid, view, dataset_views(self.info))
                if mask is None or mask.shape != shape:
                    path = episode_file(self.root, eid, view_file("arm_mask", view, dataset_views(self.info), ".npz"))
                    raise DataError(f"field mask has shape {None if mask is None else mask.shape}; expected {shape} "
                                    "(T, H, W of the real video)", eid, path, kind="bad_arm_mask")
                masks.append(masks_to_target(mask, H, W))
            rec["mask"] = compose_views(masks, layout)
        return rec

    def _read_videos(self, info: EpisodeInfo, view: str) -> dict[str, tuple[np.ndarray, Path]]:
        """The domains asked for of one view, decoded (both halves of a side-by-side video come together)."""
        eid, views = info.episode_id, dataset_views(self.info)
        if self.info.get("video_layout", "separate") == "side_by_side" and info.has_real:
            path = episode_file(self.root, eid, view_file("pair", view, views))
            halves = dict(zip(("sim", "real"), split_pair(read_video(path, eid), eid, path)))
            return {dom: (halves[dom], path) for dom in self.domains}
        paths = {dom: episode_file(self.root, eid, view_file(dom, view, views)) for dom in self.domains}
        return {dom: (read_video(path, eid), path) for dom, path in paths.items()}
