"""The on-disk paired sim/real dataset format (see README "Dataset format").

    DATASET/
      meta/info.json         {"format": "simforcing-paired", "version": 1, "fps", "height", "width",
                              "action_dim", "state_dim", "video_layout": "separate" | "side_by_side",
                              "sim_background": "black" | "R,G,B", "source"}
      meta/episodes.jsonl    one line per episode: {"episode_id", "length" (frames T), "instruction", "has_real"}
      meta/splits.json       {"train": [ids], "val": [ids], "sim_pool": [ids]}  (sim_pool: sim-only, stage 1)
      meta/stats.json        {"action": {"min": [A], "max": [A]}, "state": {"min": [S], "max": [S]},
                              "computed_on": [split names], "num_episodes": n}
      episodes/<id>/sim.mp4 + real.mp4   (video_layout "separate"; sim-only episodes have sim.mp4 alone)
      episodes/<id>/pair.mp4             (video_layout "side_by_side": width 2W, [sim | real], the authors' layout)
      episodes/<id>/lowdim.npz           actions float32 (T-1, A), states float32 (T, S)
      episodes/<id>/arm_mask.npz         optional: mask uint8 (T, H, W), 1 = robot arm in the real frame
      text_cache/                        instruction embeddings, see simforcing.data.text_cache

Videos are read and written with PyAV (H.264, yuv444p, constant QP: near-lossless at small sizes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import av
import numpy as np

from simforcing.errors import DataError
from simforcing.utils import atomic_write, atomic_write_json

FORMAT_NAME = "simforcing-paired"
FORMAT_VERSION = 1
SPLITS = ("train", "val", "sim_pool")


@dataclass
class EpisodeInfo:
    episode_id: str
    length: int
    instruction: str
    has_real: bool = True


def meta_dir(root: str | Path) -> Path:
    return Path(root) / "meta"


def episode_dir(root: str | Path, episode_id: str) -> Path:
    return Path(root) / "episodes" / episode_id


# ----------------------------------------------------------------------------------------------------------------------
# Video IO (PyAV)
# ----------------------------------------------------------------------------------------------------------------------


def write_video(path: str | Path, frames: np.ndarray, fps: int = 10, codec: str = "libx264",
                qp: int = 0) -> None:
    """Write uint8 frames (T, H, W, 3) atomically. H and W must be even for H.264."""
    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be uint8 (T, H, W, 3), got {frames.dtype} {tuple(frames.shape)}")

    def _write(tmp: Path) -> None:
        with av.open(str(tmp), mode="w", format="mp4") as container:
            stream = container.add_stream(codec, rate=fps)
            stream.width, stream.height = frames.shape[2], frames.shape[1]
            if codec == "libx264":
                stream.pix_fmt = "yuv444p"
                stream.options = {"qp": str(qp), "preset": "veryfast"}
            else:
                stream.pix_fmt = "yuv420p"
            for fr in frames:
                for packet in stream.encode(av.VideoFrame.from_ndarray(fr, format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)

    atomic_write(path, _write)


def read_video(path: str | Path, episode: str | None = None) -> np.ndarray:
    """Decode every frame of a video into uint8 (T, H, W, 3). Raises DataError naming the file when unreadable."""
    path = Path(path)
    if not path.exists():
        raise DataError("video file is missing", episode, path, kind="missing_video")
    try:
        with av.open(str(path)) as container:
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    except (av.error.FFmpegError, ValueError, IndexError, OSError) as e:
        raise DataError(f"video cannot be decoded ({type(e).__name__}: {e})", episode, path,
                        kind="unreadable_video") from e
    if not frames:
        raise DataError("video has no decodable frames", episode, path, kind="unreadable_video")
    return np.stack(frames)


def read_episode_videos(root: str | Path, info: dict, ep: EpisodeInfo) -> tuple[np.ndarray, np.ndarray | None]:
    """(sim, real) uint8 (T, H, W, 3) each; real is None for sim-only episodes."""
    d = episode_dir(root, ep.episode_id)
    layout = info.get("video_layout", "separate")
    if layout == "side_by_side" and ep.has_real:
        pair = read_video(d / "pair.mp4", ep.episode_id)
        if pair.shape[2] % 2:
            raise DataError(f"side-by-side video width {pair.shape[2]} is odd; expected 2·W", ep.episode_id,
                            d / "pair.mp4", kind="bad_layout")
        w = pair.shape[2] // 2
        return pair[:, :, :w], pair[:, :, w:]
    sim = read_video(d / "sim.mp4", ep.episode_id)
    real = read_video(d / "real.mp4", ep.episode_id) if ep.has_real else None
    return sim, real


# ----------------------------------------------------------------------------------------------------------------------
# Episodes and metadata
# ----------------------------------------------------------------------------------------------------------------------


def write_episode(root: str | Path, episode_id: str, sim: np.ndarray, real: np.ndarray | None,
                  actions: np.ndarray, states: np.ndarray, arm_mask: np.ndarray | None = None,
                  layout: str = "separate", fps: int = 10) -> None:
    """Write one episode: videos uint8 (T, H, W, 3), actions (T-1, A), states (T, S), arm_mask (T, H, W)."""
    d = episode_dir(root, episode_id)
    d.mkdir(parents=True, exist_ok=True)
    if layout == "side_by_side" and real is not None:
        write_video(d / "pair.mp4", np.concatenate([sim, real], axis=2), fps)
    else:
        write_video(d / "sim.mp4", sim, fps)
        if real is not None:
            write_video(d / "real.mp4", real, fps)
    _save_npz(d / "lowdim.npz", actions=np.asarray(actions, np.float32), states=np.asarray(states, np.float32))
    if arm_mask is not None:
        _save_npz(d / "arm_mask.npz", mask=np.asarray(arm_mask, np.uint8))


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    def _w(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **arrays)

    atomic_write(path, _w)


def load_npz_field(path: Path, field: str, episode: str | None = None) -> np.ndarray:
    if not path.exists():
        raise DataError("file is missing", episode, path, kind="missing_file")
    try:
        with np.load(path, allow_pickle=False) as z:
            if field not in z.files:
                raise DataError(f"field {field!r} is missing (found {sorted(z.files)})", episode, path,
                                kind="missing_field")
            return z[field]
    except DataError:
        raise
    except Exception as e:  # zipfile.BadZipFile, ValueError, OSError, EOFError ...
        raise DataError(f"cannot read ({type(e).__name__}: {e})", episode, path, kind="unreadable_file") from e


def read_lowdim(root: str | Path, episode_id: str) -> tuple[np.ndarray, np.ndarray]:
    p = episode_dir(root, episode_id) / "lowdim.npz"
    return load_npz_field(p, "actions", episode_id), load_npz_field(p, "states", episode_id)


def read_arm_mask(root: str | Path, episode_id: str) -> np.ndarray | None:
    p = episode_dir(root, episode_id) / "arm_mask.npz"
    return load_npz_field(p, "mask", episode_id) if p.exists() else None


def write_meta(root: str | Path, info: dict, episodes: Iterable[EpisodeInfo], splits: dict[str, list[str]]) -> None:
    m = meta_dir(root)
    m.mkdir(parents=True, exist_ok=True)
    info = {"format": FORMAT_NAME, "version": FORMAT_VERSION, **info}
    atomic_write_json(m / "info.json", info)
    lines = "".join(json.dumps(e.__dict__) + "\n" for e in episodes)
    atomic_write(m / "episodes.jsonl", lambda p: p.write_text(lines))
    atomic_write_json(m / "splits.json", {k: list(splits.get(k, [])) for k in SPLITS})


def read_json(path: Path, what: str) -> dict:
    if not path.exists():
        raise DataError(f"{what} is missing", path=path, kind="missing_meta")
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{what} cannot be read ({e})", path=path, kind="unreadable_meta") from e


def read_info(root: str | Path) -> dict:
    info = read_json(meta_dir(root) / "info.json", "dataset info")
    if info.get("format") != FORMAT_NAME:
        raise DataError(f"field 'format' is {info.get('format')!r}; expected {FORMAT_NAME!r}",
                        path=meta_dir(root) / "info.json", kind="bad_meta")
    return info


def read_episodes(root: str | Path) -> dict[str, EpisodeInfo]:
    path = meta_dir(root) / "episodes.jsonl"
    if not path.exists():
        raise DataError("episode index is missing", path=path, kind="missing_meta")
    out: dict[str, EpisodeInfo] = {}
    for i, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            ep = EpisodeInfo(episode_id=str(d["episode_id"]), length=int(d["length"]),
                             instruction=str(d["instruction"]), has_real=bool(d.get("has_real", True)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise DataError(f"line {i + 1}: expected {{episode_id, length, instruction, has_real}} ({e})",
                            path=path, kind="bad_meta") from e
        out[ep.episode_id] = ep
    return out


def read_splits(root: str | Path) -> dict[str, list[str]]:
    d = read_json(meta_dir(root) / "splits.json", "split lists")
    return {k: list(d.get(k, [])) for k in SPLITS}


def read_stats(root: str | Path) -> dict:
    path = meta_dir(root) / "stats.json"
    if not path.exists():
        raise DataError("min-max statistics are missing; run `simforcing data stats DIR`", path=path,
                        kind="missing_stats")
    d = read_json(path, "min-max statistics")
    for key in ("action", "state"):
        for b in ("min", "max"):
            try:
                v = np.asarray(d[key][b], np.float64)
            except (KeyError, TypeError, ValueError) as e:
                raise DataError(f"field {key}.{b} is missing or not numeric; re-run `simforcing data stats`",
                                path=path, kind="bad_stats") from e
            if not np.all(np.isfinite(v)):
                raise DataError(f"field {key}.{b} holds NaN/inf", path=path, kind="bad_stats")
    return d
