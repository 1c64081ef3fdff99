"""Tiny random datasets in the simforcing format for tests, and corruptions that make each kind of bad episode.

    root = make_dataset(tmp_path / "ds", num_train=2, num_val=1, num_pool=1, length=25)
    corrupt(root, "train_000", "truncated_video")   # then check_dataset(...) raises DataError(kind="truncated_video")

Episode ids: ``train_000 …``, ``val_000 …``, ``pool_000 …`` (the pool is sim-only, has_real False).
Content, chosen so tests can check alignment after resizing and normalisation:
- frame t of episode e: red channel uniform ``frame_code(t, e)``; green: a bright square moving with t over a dark
  background (real adds a texture); blue: 60 in sim, 180 in real. The arm mask is the square.
- actions[t, 0] = t (the transition index), states[t, 0] = t (the frame index); other dims random,
  except states[:, -1] which is constant 0.5 (a degenerate dimension, as a fixed gripper would be).
- instructions cycle over INSTRUCTIONS; the text cache holds random embeddings for all of them.
- meta/stats.json is written with simforcing.data.stats.write_stats.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from simforcing.data.format import (EpisodeInfo, episode_dir, meta_dir, read_episodes, write_episode, write_meta,
                                    write_video)
from simforcing.data.text_cache import embedding_path, save_embedding, write_cache_info

INSTRUCTIONS = ("put the red block in the bowl", "open the drawer", "move the cup to the left")

# corrupt() kinds; each equals the DataError.kind that simforcing.data.check reports for it.
EPISODE_CORRUPTIONS = (
    "missing_video", "unreadable_video", "truncated_video", "length_mismatch", "frame_count_mismatch",
    "resolution_mismatch", "bad_resolution", "missing_file", "unreadable_file", "missing_field", "bad_action_shape",
    "bad_state_shape", "non_finite", "video_shorter_than_actions", "missing_text_embedding", "bad_arm_mask",
    "unknown_episode", "duplicate_episode", "unpaired_episode",
)
DATASET_CORRUPTIONS = ("missing_stats", "bad_stats")
CORRUPTIONS = EPISODE_CORRUPTIONS + DATASET_CORRUPTIONS


def frame_code(t: int | np.ndarray, episode_index: int) -> np.ndarray:
    """The uniform red value of frame t of episode e (adjacent frames differ by 5 levels)."""
    return (5 * np.asarray(t) + 23 * episode_index) % 256


def make_frames(length: int, h: int, w: int, episode_index: int, real: bool, seed: int = 0) -> np.ndarray:
    """uint8 (T, H, W, 3) test frames, see the module docstring."""
    rng = np.random.default_rng([seed, episode_index, int(real)])
    t = np.arange(length)
    frames = np.zeros((length, h, w, 3), np.uint8)
    frames[..., 0] = frame_code(t, episode_index)[:, None, None]
    green = np.full((length, h, w), 30, np.int32)
    if real:
        green += rng.integers(0, 40, (1, h, w))
    mask = square_masks(length, h, w, episode_index)
    green[mask] = 220
    frames[..., 1] = green.clip(0, 255)
    frames[..., 2] = 180 if real else 60
    return frames


def square_masks(length: int, h: int, w: int, episode_index: int) -> np.ndarray:
    """bool (T, H, W): a square of side ~H/3 moving left to right and back."""
    side = max(2, h // 3)
    mask = np.zeros((length, h, w), bool)
    span = max(1, w - side)
    for t in range(length):
        x = (2 * t + 3 * episode_index) % (2 * span)
        x = x if x < span else 2 * span - x
        y = (h - side) // 2
        mask[t, y:y + side, x:x + side] = True
    return mask


def make_lowdim(length: int, episode_index: int, action_dim: int = 7, state_dim: int = 7,
                seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """actions float32 (T-1, A) with actions[t, 0] = t; states float32 (T, S) with states[t, 0] = t."""
    rng = np.random.default_rng([seed, episode_index, 7])
    actions = rng.uniform(-1, 1, (length - 1, action_dim)).astype(np.float32)
    actions[:, 0] = np.arange(length - 1)
    states = rng.uniform(-2, 2, (length, state_dim)).astype(np.float32)
    states[:, 0] = np.arange(length)
    if state_dim > 1:
        states[:, -1] = 0.5
    return actions, states


def view_frames(sim: np.ndarray, real: np.ndarray | None, mask: np.ndarray | None, k: int):
    """View k > 0 of an episode (``make_dataset(views=...)``): the first view's frames mirrored left to right, blue
    100 + 40·k in sim and 220 − 40·k in real, the mask mirrored."""
    from simforcing.data.format import ViewVideos

    def recolour(x: np.ndarray | None, blue: int) -> np.ndarray | None:
        if x is None:
            return None
        y = x[:, :, ::-1].copy()
        y[..., 2] = blue
        return y
    return ViewVideos(recolour(sim, 100 + 40 * k), recolour(real, 220 - 40 * k),
                      None if mask is None else np.ascontiguousarray(mask[:, :, ::-1]))


def write_text_cache(root: Path, instructions: Sequence[str], text_dim: int, max_tokens: int, seed: int = 0) -> Path:
    """Random (n, text_dim) embeddings, n in 3..8 tokens, for each instruction; returns the cache folder."""
    cache = Path(root) / "text_cache"
    gen = torch.Generator().manual_seed(seed)
    for i, text in enumerate(sorted(set(instructions))):
        n = 3 + i % 6
        save_embedding(cache, text, torch.randn(n, text_dim, generator=gen))
    write_cache_info(cache, "random-test", text_dim, max_tokens)
    return cache


def make_dataset(root: str | Path, num_train: int = 2, num_val: int = 1, num_pool: int = 1,
                 length: int | Sequence[int] = 25, h: int = 32, w: int = 48, text_dim: int = 64,
                 layout: str = "separate", with_masks: bool = True, seed: int = 0, action_dim: int = 7,
                 state_dim: int = 7, text_max_tokens: int = 16, stats: bool = True,
                 views: Sequence[str] = ()) -> Path:
    """Write a tiny dataset; ``length`` is one length or a sequence cycled over train, val, pool episodes.
    ``views``: a multi-view dataset's cameras (info.json ``views``); view k > 0 is view 0's frames with the blue
    channel at 100 + 40·k (sim) / 220 − 40·k (real) and the mask mirrored left to right (:func:`view_frames`)."""
    root = Path(root)
    lengths = [length] if isinstance(length, int) else list(length)
    plan = ([("train", f"train_{i:03d}") for i in range(num_train)] + [("val", f"val_{i:03d}") for i in range(num_val)]
            + [("sim_pool", f"pool_{i:03d}") for i in range(num_pool)])
    episodes, splits = [], {"train": [], "val": [], "sim_pool": []}
    for e, (split, ep_id) in enumerate(plan):
        T = int(lengths[e % len(lengths)])
        paired = split != "sim_pool"
        actions, states = make_lowdim(T, e, action_dim, state_dim, seed)
        sim = make_frames(T, h, w, e, False, seed)
        real = make_frames(T, h, w, e, True, seed) if paired else None
        mask = square_masks(T, h, w, e).astype(np.uint8) if (with_masks and paired) else None
        extra = {v: view_frames(sim, real, mask, k) for k, v in enumerate(views) if k > 0}
        write_episode(root, ep_id, sim, real, actions, states, mask, layout=layout, views=extra)
        episodes.append(EpisodeInfo(ep_id, T, INSTRUCTIONS[e % len(INSTRUCTIONS)], paired))
        splits[split].append(ep_id)
    info = {"fps": 10, "height": h, "width": w, "action_dim": action_dim, "state_dim": state_dim,
            "video_layout": layout, "sim_background": "black", "source": "tests.datagen",
            **({"views": list(views)} if views else {})}
    write_meta(root, info, episodes, splits)
    write_text_cache(root, [e.instruction for e in episodes], text_dim, text_max_tokens, seed)
    if stats:
        from simforcing.data.stats import write_stats

        write_stats(root)
    return root


def make_policy_dataset(root: Path, n: int = 3, length: int | Sequence[int] = 12, h: int = 32, w: int = 48,
                        cameras: int = 2, states: bool = True, seed: int = 0) -> Path:
    """Random-content policy dataset: ``n`` train episodes (``length`` frames, or a sequence cycled over them),
    ``cameras`` side by side, the demo preset's text embeddings."""
    from simforcing.config import load_config
    from simforcing.policy.data import write_policy_episode, write_policy_meta
    from simforcing.data.stats import write_stats

    root = Path(root)
    lengths = [length] if isinstance(length, int) else list(length)
    rng = np.random.default_rng(seed)
    episodes = []
    for i in range(n):
        eid, T = f"ep_{i:03d}", int(lengths[i % len(lengths)])
        frames = rng.integers(0, 255, (T, h, cameras * w, 3), dtype=np.uint8)
        actions, st = make_lowdim(T, i, seed=seed)
        write_policy_episode(root, eid, frames, actions, st)
        if not states:
            with open(root / "episodes" / eid / "lowdim.npz", "wb") as f:
                np.savez_compressed(f, actions=actions)
        episodes.append({"episode_id": eid, "length": T, "instruction": INSTRUCTIONS[i % len(INSTRUCTIONS)]})
    write_policy_meta(root, {"fps": 10, "height": h, "width": w, "cameras": ["external", "wrist", "top"][:cameras],
                             "action_dim": 7, "state_dim": 7}, episodes,
                      {"train": [e["episode_id"] for e in episodes], "val": []})
    if states:
        write_stats(root, splits=("train",))
    else:  # stats of the actions only would fail; write plausible ones by hand
        (root / "meta" / "stats.json").write_text(json.dumps(
            {"action": {"min": [-1] * 7, "max": [1] * 7}, "state": {"min": [-1] * 7, "max": [1] * 7}}))
    demo = load_config("demo")
    write_text_cache(root, INSTRUCTIONS, demo.model.text_dim, demo.data.text_max_tokens)
    return root


# ----------------------------------------------------------------------------------------------------------------------
# Corruptions
# ----------------------------------------------------------------------------------------------------------------------


def _episode_lines(root: Path) -> list[dict]:
    return [json.loads(x) for x in (meta_dir(root) / "episodes.jsonl").read_text().splitlines() if x.strip()]


def _write_episode_lines(root: Path, lines: list[dict]) -> None:
    (meta_dir(root) / "episodes.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))


def _index(root: Path, episode_id: str) -> int:
    return [d["episode_id"] for d in _episode_lines(root)].index(episode_id)


def _rewrite_videos(root: Path, episode_id: str, sim_len: int, real_len: int | None,
                    real_hw: tuple[int, int] | None = None, sim_hw: tuple[int, int] | None = None) -> None:
    info = json.loads((meta_dir(root) / "info.json").read_text())
    if info["video_layout"] != "separate":
        raise ValueError("this corruption needs video_layout 'separate'")
    h, w, e = info["height"], info["width"], _index(root, episode_id)
    d = episode_dir(root, episode_id)
    sh, sw = sim_hw or (h, w)
    write_video(d / "sim.mp4", make_frames(sim_len, sh, sw, e, False))
    if real_len is not None:
        rh, rw = real_hw or (sh, sw)
        write_video(d / "real.mp4", make_frames(real_len, rh, rw, e, True))


def corrupt(root: str | Path, episode_id: str, kind: str) -> None:
    """Break ``episode_id`` (or, for DATASET_CORRUPTIONS, the dataset) so that validation reports ``kind``."""
    root = Path(root)
    eps = read_episodes(root)
    ep = eps.get(episode_id)
    if ep is None:
        raise KeyError(f"{episode_id} is not in {root}/meta/episodes.jsonl")
    d, T = episode_dir(root, episode_id), ep.length
    lowdim = d / "lowdim.npz"
    if kind == "missing_video":
        next(p for p in (d / "real.mp4", d / "pair.mp4", d / "sim.mp4") if p.exists()).unlink()
    elif kind == "unreadable_video":
        next(p for p in (d / "sim.mp4", d / "pair.mp4") if p.exists()).write_bytes(b"not a video" * 50)
    elif kind == "truncated_video":
        _rewrite_videos(root, episode_id, T - 3, T - 3 if ep.has_real else None)
    elif kind == "length_mismatch":
        _rewrite_videos(root, episode_id, T + 2, T + 2 if ep.has_real else None)
    elif kind == "frame_count_mismatch":
        _rewrite_videos(root, episode_id, T, T - 2)
    elif kind in ("resolution_mismatch", "bad_resolution"):
        info = json.loads((meta_dir(root) / "info.json").read_text())
        h, w = info["height"], info["width"]
        if kind == "resolution_mismatch":
            _rewrite_videos(root, episode_id, T, T, real_hw=(h + 2, w + 2))
        else:  # a strip 8x wider than the target aspect: the centre crop would keep 1/8 of the width
            _rewrite_videos(root, episode_id, T, T if ep.has_real else None, sim_hw=(h, 8 * w))
    elif kind == "missing_file":
        lowdim.unlink()
    elif kind == "unreadable_file":
        lowdim.write_bytes(b"PK\x03\x04 broken zip")
    elif kind in ("missing_field", "bad_action_shape", "bad_state_shape", "non_finite", "video_shorter_than_actions"):
        with np.load(lowdim) as z:
            arrays = {k: z[k] for k in z.files}
        a, s = arrays["actions"], arrays["states"]
        if kind == "missing_field":
            del arrays["states"]
        elif kind == "bad_action_shape":
            arrays["actions"] = np.concatenate([a, a[:, :1]], axis=1)
        elif kind == "bad_state_shape":
            arrays["states"] = s[:-1]
        elif kind == "non_finite":
            a = a.copy()
            a[min(3, len(a) - 1), 2] = np.nan
            arrays["actions"] = a
        else:
            arrays["actions"] = np.concatenate([a, a[:3]], axis=0)
        np.savez_compressed(lowdim, **arrays)
    elif kind == "missing_text_embedding":
        lines = _episode_lines(root)
        lines[_index(root, episode_id)]["instruction"] = f"an instruction nobody embedded ({episode_id})"
        _write_episode_lines(root, lines)
    elif kind == "bad_arm_mask":
        np.savez_compressed(d / "arm_mask.npz", mask=np.zeros((T, 3, 5), np.uint8))
    elif kind == "unknown_episode":
        splits = json.loads((meta_dir(root) / "splits.json").read_text())
        split = next(s for s, ids in splits.items() if episode_id in ids)
        splits[split].append(episode_id + "_ghost")
        (meta_dir(root) / "splits.json").write_text(json.dumps(splits))
    elif kind == "duplicate_episode":
        lines = _episode_lines(root)
        _write_episode_lines(root, lines + [lines[_index(root, episode_id)]])
    elif kind == "unpaired_episode":
        lines = _episode_lines(root)
        lines[_index(root, episode_id)]["has_real"] = False
        _write_episode_lines(root, lines)
    elif kind == "missing_stats":
        (meta_dir(root) / "stats.json").unlink()
    elif kind == "bad_stats":
        p = meta_dir(root) / "stats.json"
        stats = json.loads(p.read_text())
        stats["action"]["min"] = stats["action"]["min"][:-1]
        stats["action"]["max"] = stats["action"]["max"][:-1]
        p.write_text(json.dumps(stats))
    else:
        raise ValueError(f"unknown corruption {kind!r}; expected one of {CORRUPTIONS}")


def embedding_file(root: str | Path, instruction: str) -> Path:
    """Where the random embedding of ``instruction`` lives."""
    return embedding_path(Path(root) / "text_cache", instruction)


# the file each corruption should be blamed on (a substring of the message)
BLAMED_FILE = {
    "missing_video": "real.mp4", "unreadable_video": "sim.mp4", "truncated_video": ".mp4", "length_mismatch": ".mp4",
    "frame_count_mismatch": "real.mp4", "resolution_mismatch": "real.mp4", "bad_resolution": "sim.mp4",
    "missing_file": "lowdim.npz", "unreadable_file": "lowdim.npz", "missing_field": "lowdim.npz",
    "bad_action_shape": "lowdim.npz", "bad_state_shape": "lowdim.npz", "non_finite": "lowdim.npz",
    "video_shorter_than_actions": "lowdim.npz", "missing_text_embedding": ".safetensors",
    "bad_arm_mask": "arm_mask.npz", "unknown_episode": "splits.json", "duplicate_episode": "episodes.jsonl",
    "unpaired_episode": "episodes.jsonl", "missing_stats": "stats.json", "bad_stats": "stats.json",
}
