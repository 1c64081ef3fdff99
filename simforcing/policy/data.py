"""The policy dataset's training windows and its LeRobot import (the format itself: ``simforcing.data.policy_format``).
A policy reads the first ``policy.cameras`` of the dataset's cameras: both, or the external camera alone.

Written by ``simforcing data synth-policy`` (the synthetic benchmark's scripted expert) and by
``simforcing data import-lerobot --real DIR --camera KEY --wrist-camera KEY`` (e.g. LIBERO in LeRobot format).
:class:`PolicyWindowDataset` gives windows like ``PairedWindowDataset`` (same window rule, same frame transform per
camera, same normalisation), one video ``obs`` instead of the sim/real pair. Every episode passes the checks of
``data check`` first (``data.check.validate_policy_episode``: paths inside the dataset, shapes of actions, states
and frames, the cameras against the video, finite values); ``data.skip_bad`` skips and names the bad ones
(``ds.skipped``), episodes shorter than one window are left out (``ds.dropped``, named by the trainer).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from simforcing.config import Config, ConfigError
from simforcing.data.check import (check_policy_cameras, check_text_cache, resolve_split_episodes, skip_or_raise,
                                   validate_policy_episode)
from simforcing.data.format import DataError, EpisodeInfo, episode_file, is_dataset, meta_dir, read_stats, read_video
from simforcing.data.policy_format import (FORMAT, VERSION, VIDEO, read_policy_info, read_policy_lowdim,
                                           write_policy_episode, write_policy_meta)
from simforcing.data.paired import draw_window_starts, frames_to_target, to_unit_range, window_frame_indices
from simforcing.data.stats import Normalizer, write_stats
from simforcing.data.text_cache import cache_dir, load_embedding
from simforcing.utils import check_output_folder, staged_folder

__all__ = ["FORMAT", "VERSION", "PolicyWindowDataset", "import_lerobot_policy", "read_policy_info",
           "read_policy_lowdim", "write_policy_episode", "write_policy_meta"]  # the format: data.policy_format

class PolicyWindowDataset(torch.utils.data.Dataset):
    """Windows of a policy dataset (module docstring): item = {"obs" (3, F, H, W) in [−1, 1] with W = cameras ×
    camera width, "actions" (A_w, action_dim), "states" (F, state_dim), "state0", "text", "text_mask", "episode_id",
    "start"}; windows drawn as ``PairedWindowDataset`` draws them (``set_epoch``)."""

    def __init__(self, cfg: Config, root: str | Path, split: str = "train", stats: dict | None = None):
        self.cfg, self.root = cfg, Path(root)
        d = cfg.data
        self.info = read_policy_info(self.root, cfg.policy.cameras)
        used = check_policy_cameras(self.info, cfg, meta_dir(self.root) / "info.json")  # the first `used` of them
        if d.width % used:
            raise ConfigError(f"data.width: got {d.width}; expected a multiple of the {used} cameras side by side")
        self.used, self.cam_width = used, d.width // used
        self.frames, self.stride, self.window_steps = d.frames, d.frame_stride, d.window_steps
        self.text_cache = cache_dir(self.root, d.text_cache)
        check_text_cache(self.text_cache, cfg)
        self.skipped: list[tuple[str, str]] = []  # (episode, reason): bad ones, with data.skip_bad
        self.dropped: list[tuple[str, int]] = []  # (episode, length): shorter than one window
        self.episodes = self._select_episodes(split)
        self.stats = stats if stats is not None else read_stats(self.root)  # after the episodes: they name a bad one
        self.normalizer = Normalizer(self.stats)
        self.normalizer.check_dims(d.action_dim, d.state_dim, "normalisation stats")
        self._cache: dict = {}
        self.set_epoch(0)

    def _select_episodes(self, split: str) -> list[EpisodeInfo]:
        """The split's episodes that pass every check of ``data check`` (``check.validate_policy_episode``, headers
        only) and span a window; a bad one raises its DataError, or with ``data.skip_bad`` is logged and skipped."""
        order, index, problems = resolve_split_episodes(self.root, (split,))
        for e in problems:
            self._bad(e)
        kept = []
        for _, eid in order:
            ep = index[eid]
            try:
                validate_policy_episode(self.root, self.info, ep, self.cfg, self.cam_width, text_cache=self.text_cache)
            except DataError as e:
                self._bad(e)
                continue
            (kept.append(ep) if ep.length >= self.window_steps else self.dropped.append((eid, ep.length)))
        if not kept:
            raise DataError(f"no usable episode of split {split!r} spans a window of {self.window_steps} steps "
                            f"({len(self.skipped)} skipped as bad, {len(self.dropped)} too short)",
                            path=meta_dir(self.root) / "splits.json", kind="empty_split")
        return kept

    def _bad(self, e: DataError) -> None:
        eid, kind, message = skip_or_raise(e, self.cfg.data.skip_bad)
        self.skipped.append((eid, f"[{kind}] {message}"))  # (episode, "[kind] message")

    def set_epoch(self, epoch: int) -> None:
        self.windows = draw_window_starts([e.length for e in self.episodes], self.window_steps,
                                          self.cfg.data.windows_per_episode, self.cfg.train.seed, int(epoch),
                                          fixed=self.cfg.data.fixed_window)

    def __len__(self) -> int:
        return len(self.windows)

    def _episode(self, i: int) -> dict:
        if i not in self._cache:
            ep = self.episodes[i]
            path = episode_file(self.root, ep.episode_id, VIDEO)
            video = read_video(path, ep.episode_id)  # (T, h, cams·w, 3)
            cams = len(self.info["cameras"])
            if video.shape[0] != ep.length or video.shape[2] % cams:
                raise DataError(f"video is {video.shape[:3]} (T, H, W); expected {ep.length} frames of {cams} "
                                "cameras side by side", ep.episode_id, path, kind="truncated_video")
            w = video.shape[2] // cams
            halves = [frames_to_target(video[:, :, k * w:(k + 1) * w], self.cfg.data.height, self.cam_width)
                      for k in range(self.used)]  # each (3, T, H, cam_width): the cameras the policy reads
            actions, states = read_policy_lowdim(self.root, ep.episode_id)
            self._cache[i] = {"obs": torch.cat(halves, dim=3),
                              "actions": torch.from_numpy(self.normalizer.normalize("action", actions)),
                              "states": torch.from_numpy(self.normalizer.normalize("state", states))}
        return self._cache[i]

    def __getitem__(self, index: int) -> dict:
        i, start = self.windows[index]
        ep, rec = self.episodes[i], self._episode(i)
        idx = torch.from_numpy(window_frame_indices(start, self.frames, self.stride))
        item = {"obs": to_unit_range(rec["obs"].index_select(1, idx)),
                "actions": rec["actions"][start:start + (self.frames - 1) * self.stride].clone(),
                "states": rec["states"].index_select(0, idx)}
        item["state0"] = item["states"][0].clone()
        d = self.cfg.data
        text, mask = load_embedding(self.text_cache, ep.instruction, d.text_max_tokens, self.cfg.model.text_dim,
                                    ep.episode_id)
        item["text"], item["text_mask"] = torch.from_numpy(text), torch.from_numpy(mask)
        item["episode_id"], item["start"] = ep.episode_id, int(start)
        return item


def _lerobot_episode(ext, wrist, idx: int, eid: str, height: int, width: int, fit_frames) -> tuple:
    """(frames uint8 (T, H, 2W, 3), actions (T−1, A), states (T, S), task) of one LeRobot episode; DataError
    naming what is wrong (too short, the cameras' frame counts, missing or non-finite rows)."""
    ep, w_ep = ext.episodes[idx], wrist.episodes.get(idx)
    if w_ep is None:
        raise DataError(f"the wrist camera {wrist.camera!r} has no episode {idx}", eid, ext.root,
                        kind="missing_camera")
    if ep.length < 2:
        raise DataError(f"length is {ep.length}; an episode needs at least 2 frames", eid, ep.data_file,
                        kind="too_short_episode")
    actions, states, task = ext.lowdim(ep)
    T = ep.length
    if len(actions) < T - 1 or len(states) < T:
        raise DataError(f"{len(actions)} action and {len(states)} state rows for {T} frames; expected at least "
                        f"{T - 1} and {T}", eid, ep.data_file, kind="bad_action_shape")
    for name, x in (("actions", actions[:T - 1]), ("states", states[:T])):
        if not np.isfinite(x).all():
            raise DataError(f"{name} hold NaN/inf values", eid, ep.data_file, kind="non_finite")
    cams = [fit_frames(ext.frames(ep), height, width), fit_frames(wrist.frames(w_ep), height, width)]
    if any(len(c) != T for c in cams):
        raise DataError(f"the cameras have {[len(c) for c in cams]} frames; expected {T} each (the episode's "
                        "length)", eid, ep.video_file or ep.data_file, kind="frame_count_mismatch")
    return np.concatenate(cams, axis=2), actions[:T - 1], states[:T], task


def import_lerobot_policy(real_dir: str | Path, out: str | Path, camera: str | None, wrist_camera: str,
                          action_key: str = "action", state_key: str = "observation.state", val_fraction: float = 0.1,
                          seed: int = 0, height: int | None = None, width: int | None = None,
                          progress: bool = True, overwrite: bool = False, skip_bad: bool = False) -> dict:
    """A real-only LeRobot v3.0 dataset (e.g. LIBERO) with two cameras -> a policy dataset (module docstring): each
    episode's two camera videos resized to one camera size and put side by side; the first T−1 per-frame actions
    kept as transitions (as ``data import-lerobot`` does); then the statistics of the train split. Written into a
    temporary sibling that appears at ``out`` only when complete (``utils.staged_folder``); an existing dataset
    there is refused unless ``overwrite``. A bad episode raises its DataError, or with ``skip_bad`` is left out and
    listed (``skipped``: [(episode, kind, message)])."""
    from simforcing.data.lerobot import LeRobotV3, fit_frames  # pyarrow, loaded by the import command alone

    if not 0.0 <= val_fraction < 1.0:
        raise ConfigError(f"--val-fraction: got {val_fraction}; expected a fraction in [0, 1)")
    check_output_folder(Path(out), overwrite, "dataset", is_dataset)  # before any decoding
    ext = LeRobotV3(real_dir, camera, action_key, state_key)
    wrist = LeRobotV3(real_dir, wrist_camera, action_key, state_key)
    if ext.camera == wrist.camera:
        raise ConfigError(f"--wrist-camera: {wrist.camera!r} is the external camera too; expected a second camera")
    ids = sorted(ext.episodes)
    if height is None or width is None:
        shape = ext.info["features"][ext.camera].get("shape", [])
        h, w = (int(shape[0]), int(shape[1])) if len(shape) == 3 else ext.frames(ext.episodes[ids[0]]).shape[1:3]
        height, width = height or h - h % 2, width or w - w % 2
    rng = np.random.default_rng(seed)
    n_val = int(round(len(ids) * val_fraction)) if len(ids) > 1 else 0
    val = {ids[i] for i in rng.permutation(len(ids))[:n_val]}
    out = Path(out)
    episodes, splits, skipped, dims = [], {"train": [], "val": []}, [], None
    with staged_folder(out, overwrite, "dataset", replaceable=is_dataset) as tmp:
        for idx in tqdm(ids, desc="import-lerobot (policy)", disable=not progress):
            eid = f"ep{idx:06d}"
            try:
                frames, actions, states, task = _lerobot_episode(ext, wrist, idx, eid, height, width, fit_frames)
            except DataError as e:
                skipped.append(skip_or_raise(e, skip_bad, eid))
                continue
            write_policy_episode(tmp, eid, frames, actions, states, int(round(ext.fps)))
            dims = (int(actions.shape[1]), int(states.shape[1]))
            episodes.append({"episode_id": eid, "length": len(frames), "instruction": task, "has_real": True})
            splits["val" if idx in val else "train"].append(eid)
        if not splits["train"]:
            raise DataError(f"no training episode left to import ({len(skipped)} skipped)", kind="empty_split")
        write_policy_meta(tmp, {"fps": int(round(ext.fps)), "height": height, "width": width,
                                "cameras": [ext.camera, wrist.camera], "action_dim": dims[0], "state_dim": dims[1],
                                "source": "lerobot-v3.0",
                                "lerobot": {"real": str(ext.root), "action_key": action_key, "state_key": state_key,
                                            "skipped": [{"episode": e, "kind": k, "reason": r}
                                                        for e, k, r in skipped]}},
                          episodes, splits)
        write_stats(tmp, splits=("train",))
    return {"out": str(out), "train": len(splits["train"]), "val": len(splits["val"]), "height": height,
            "width": width, "skipped": skipped}
