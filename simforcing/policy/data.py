"""The policy dataset: real-only episodes with two cameras side by side, actions, states, instructions (a policy
reads the first ``policy.cameras`` of them: both, or the external camera alone).

    DATASET/
      meta/info.json         {"format": "simforcing-policy", "version": 1, "fps", "height", "width" (per camera),
                              "cameras": [external, wrist], "action_dim", "state_dim", "source"}
      meta/episodes.jsonl    {"episode_id", "length" (frames T), "instruction", "task" (optional)}
      meta/splits.json       {"train": [ids], "val": [ids]}
      meta/stats.json        min–max of actions and states over train (``simforcing.data.stats``)
      episodes/<id>/obs.mp4  (T, height, 2·width, 3): [external | wrist]
      episodes/<id>/lowdim.npz  actions float32 (T−1, A), states float32 (T, S)
      text_cache/            instruction embeddings (``simforcing data embed-text``)

Written by ``simforcing data synth-policy`` (the synthetic benchmark's scripted expert) and by
``simforcing data import-lerobot --real DIR --camera KEY --wrist-camera KEY`` (e.g. LIBERO in LeRobot format).
:class:`PolicyWindowDataset` gives windows like ``PairedWindowDataset`` (same window rule, same frame transform per
camera, same normalisation), one video ``obs`` instead of the sim/real pair. A dataset with one camera, or without
states, is a DataError (kinds ``missing_camera``, ``missing_states``) naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from simforcing.config import Config, ConfigError
from simforcing.data.check import check_text_cache
from simforcing.data.format import (DataError, EpisodeInfo, episode_dir, is_dataset, load_npz_field, meta_dir,
                                    read_episodes, read_json, read_splits, read_stats, read_video, write_video)
from simforcing.data.paired import draw_window_starts, frames_to_target, to_unit_range, window_frame_indices
from simforcing.data.stats import Normalizer, write_stats
from simforcing.data.text_cache import cache_dir, load_embedding
from simforcing.utils import atomic_write, atomic_write_json, check_output_folder, staged_folder

FORMAT = "simforcing-policy"
VERSION = 1
VIDEO = "obs.mp4"


def write_policy_episode(root: str | Path, episode_id: str, frames: np.ndarray, actions: np.ndarray,
                         states: np.ndarray, fps: int = 10) -> None:
    """frames uint8 (T, H, 2W, 3) [external | wrist], actions (T−1, A), states (T, S)."""
    d = episode_dir(root, episode_id)
    d.mkdir(parents=True, exist_ok=True)
    write_video(d / VIDEO, frames, fps)

    def save(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, actions=np.asarray(actions, np.float32), states=np.asarray(states, np.float32))

    atomic_write(d / "lowdim.npz", save)


def write_policy_meta(root: str | Path, info: dict, episodes: list[dict], splits: dict[str, list[str]]) -> None:
    m = meta_dir(root)
    m.mkdir(parents=True, exist_ok=True)
    atomic_write_json(m / "info.json", {"format": FORMAT, "version": VERSION, **info})
    text = "".join(json.dumps(e) + "\n" for e in episodes)
    atomic_write(m / "episodes.jsonl", lambda p: p.write_text(text))
    atomic_write_json(m / "splits.json", {"train": list(splits.get("train", [])), "val": list(splits.get("val", [])),
                                          "sim_pool": []})


def read_policy_info(root: str | Path, cameras: int = 2) -> dict:
    """meta/info.json of a policy dataset; DataError when it is another format or has fewer than ``cameras`` cameras
    (a policy reads the first ``policy.cameras`` of them: external, then wrist)."""
    path = meta_dir(root) / "info.json"
    info = read_json(path, "dataset info")
    if info.get("format") != FORMAT:
        hint = (" (a paired sim/real world-model dataset: a policy needs real episodes with two cameras; write one "
                "with `simforcing data synth-policy` or `data import-lerobot --real DIR --camera KEY --wrist-camera "
                "KEY`)") if info.get("format") == "simforcing-paired" else ""
        raise DataError(f"field 'format' is {info.get('format')!r}; expected {FORMAT!r}{hint}", path=path,
                        kind="bad_meta")
    cams = info.get("cameras") or []
    if len(cams) < cameras:
        what = "two cameras (external + wrist) side by side" if cameras == 2 else f"{cameras} camera(s)"
        raise DataError(f"field 'cameras' is {cams!r}; the policy observes {what}; import the wrist camera too "
                        "(--wrist-camera), or train on the external camera alone (--policy.cameras=1)", path=path,
                        kind="missing_camera")
    return info


def read_policy_lowdim(root: str | Path, episode_id: str) -> tuple[np.ndarray, np.ndarray]:
    """(actions (T−1, A), states (T, S)); a missing states column is DataError kind ``missing_states``."""
    p = episode_dir(root, episode_id) / "lowdim.npz"
    actions = load_npz_field(p, "actions", episode_id)
    try:
        states = load_npz_field(p, "states", episode_id)
    except DataError as e:
        if e.kind != "missing_field":
            raise
        raise DataError("field 'states' is missing: the policy needs the proprio state of every frame (the state "
                        "token); import it with --state-key", episode_id, p, kind="missing_states") from e
    return actions, states


class PolicyWindowDataset(torch.utils.data.Dataset):
    """Windows of a policy dataset (module docstring): item = {"obs" (3, F, H, W) in [−1, 1] with W = cameras ×
    camera width, "actions" (A_w, action_dim), "states" (F, state_dim), "state0", "text", "text_mask", "episode_id",
    "start"}; windows drawn as ``PairedWindowDataset`` draws them (``set_epoch``)."""

    def __init__(self, cfg: Config, root: str | Path, split: str = "train", stats: dict | None = None):
        self.cfg, self.root = cfg, Path(root)
        d = cfg.data
        self.used = cfg.policy.cameras  # the first `used` cameras of the video: external (, wrist)
        self.info = read_policy_info(self.root, self.used)
        if d.width % self.used:
            raise ConfigError(f"data.width: got {d.width}; expected a multiple of the {self.used} cameras side by side")
        self.cam_width = d.width // self.used
        self.frames, self.stride, self.window_steps = d.frames, d.frame_stride, d.window_steps
        self.stats = stats if stats is not None else read_stats(self.root)
        self.normalizer = Normalizer(self.stats)
        self.normalizer.check_dims(d.action_dim, d.state_dim, "normalisation stats")
        self.text_cache = cache_dir(self.root, d.text_cache)
        check_text_cache(self.text_cache, cfg)
        splits, known = read_splits(self.root), read_episodes(self.root)
        self.episodes: list[EpisodeInfo] = []
        self.dropped: list[tuple[str, int]] = []
        for eid in splits.get(split, []):
            if eid not in known:
                raise DataError("listed in splits.json but absent from episodes.jsonl", eid,
                                meta_dir(self.root) / "episodes.jsonl", kind="unknown_episode")
            ep = known[eid]
            if not (episode_dir(self.root, eid) / VIDEO).exists():
                raise DataError("video file is missing", eid, episode_dir(self.root, eid) / VIDEO,
                                kind="missing_video")
            read_policy_lowdim(self.root, eid)  # states present (named error otherwise)
            (self.episodes if ep.length >= self.window_steps else self.dropped).append(
                ep if ep.length >= self.window_steps else (eid, ep.length))
        if not self.episodes:
            raise DataError(f"no episode of split {split!r} spans a window of {self.window_steps} steps",
                            path=meta_dir(self.root) / "splits.json", kind="empty_split")
        self._cache: dict = {}
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        self.windows = draw_window_starts([e.length for e in self.episodes], self.window_steps,
                                          self.cfg.data.windows_per_episode, self.cfg.train.seed, int(epoch),
                                          fixed=self.cfg.data.fixed_window)

    def __len__(self) -> int:
        return len(self.windows)

    def _episode(self, i: int) -> dict:
        if i not in self._cache:
            ep = self.episodes[i]
            path = episode_dir(self.root, ep.episode_id) / VIDEO
            video = read_video(path, ep.episode_id)  # (T, h, cams·w, 3)
            cams = len(self.info["cameras"])
            if video.shape[0] != ep.length or video.shape[2] % cams:
                raise DataError(f"video is {video.shape[:3]} (T, H, W); expected {ep.length} frames of {cams} "
                                "cameras side by side", ep.episode_id, path, kind="truncated_video")
            w = video.shape[2] // cams
            halves = [frames_to_target(video[:, :, k * w:(k + 1) * w], self.cfg.data.height, self.cam_width)
                      for k in range(self.used)]  # each (3, T, H, cam_width)
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


def import_lerobot_policy(real_dir: str | Path, out: str | Path, camera: str | None, wrist_camera: str,
                          action_key: str = "action", state_key: str = "observation.state", val_fraction: float = 0.1,
                          seed: int = 0, height: int | None = None, width: int | None = None,
                          progress: bool = True, overwrite: bool = False) -> dict:
    """A real-only LeRobot v3.0 dataset (e.g. LIBERO) with two cameras -> a policy dataset (module docstring): each
    episode's two camera videos resized to one camera size and put side by side; the first T−1 per-frame actions
    kept as transitions (as ``data import-lerobot`` does); then the statistics of the train split. Written into a
    temporary sibling that appears at ``out`` only when complete (``utils.staged_folder``); an existing dataset
    there is refused unless ``overwrite``."""
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
    episodes, splits = [], {"train": [], "val": []}
    with staged_folder(out, overwrite, "dataset", replaceable=is_dataset) as tmp:
        for idx in tqdm(ids, desc="import-lerobot (policy)", disable=not progress):
            ep = ext.episodes[idx]
            actions, states, task = ext.lowdim(ep)
            frames = np.concatenate([fit_frames(ext.frames(ep), height, width),
                                     fit_frames(wrist.frames(wrist.episodes[idx]), height, width)], axis=2)
            eid = f"ep{idx:06d}"
            write_policy_episode(tmp, eid, frames, actions[: ep.length - 1], states[: ep.length],
                                 int(round(ext.fps)))
            episodes.append({"episode_id": eid, "length": int(ep.length), "instruction": task, "has_real": True})
            splits["val" if idx in val else "train"].append(eid)
        write_policy_meta(tmp, {"fps": int(round(ext.fps)), "height": height, "width": width,
                                "cameras": [ext.camera, wrist.camera], "action_dim": int(actions.shape[1]),
                                "state_dim": int(states.shape[1]), "source": "lerobot-v3.0",
                                "lerobot": {"real": str(ext.root), "action_key": action_key,
                                            "state_key": state_key}},
                          episodes, splits)
        write_stats(tmp, splits=("train",))
    return {"out": str(out), "train": len(splits["train"]), "val": len(splits["val"]), "height": height,
            "width": width}
