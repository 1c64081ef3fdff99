"""The on-disk paired sim/real dataset format (see docs/GUIDE.md "Dataset format").

    DATASET/
      meta/info.json         {"format": "simforcing-paired", "version": 1, "fps", "height", "width",
                              "action_dim", "state_dim", "video_layout": "separate" | "side_by_side",
                              "sim_background": "black" | "R,G,B", "pairing": "arm" | "scene", "source",
                              "views": [names] (optional: the cameras, the first one's files named as below)}
      meta/episodes.jsonl    one line per episode: {"episode_id", "length" (frames T), "instruction", "has_real"}
                             (+ "failure": "<task>/<mode>" for an episode whose operator failed the task on purpose)
      meta/splits.json       {"train": [ids], "val": [ids], "sim_pool": [ids]}  (sim_pool: sim-only, stage 1)
      meta/stats.json        {"action": {"min": [A], "max": [A]}, "state": {"min": [S], "max": [S]},
                              "computed_on": [split names], "num_episodes": n}
      episodes/<id>/sim.mp4 + real.mp4   (video_layout "separate"; sim-only episodes have sim.mp4 alone)
      episodes/<id>/pair.mp4             (video_layout "side_by_side": width 2W, [sim | real], the authors' layout)
      episodes/<id>/lowdim.npz           actions float32 (T-1, A), states float32 (T, S)
      episodes/<id>/arm_mask.npz         optional: mask uint8 (T, H, W), 1 = robot arm in the real frame
      episodes/<id>/sim_<view>.mp4, real_<view>.mp4, pair_<view>.mp4, arm_mask_<view>.npz
                                         every view after the first (info.json "views"), the same frames, size and
                                         fps as the first view's, one file set per view
      text_cache/                        instruction embeddings, see simforcing.data.text_cache

Views (cameras): a dataset without "views" holds one, named ``external`` (:data:`DEFAULT_VIEW`); a multi-view one
lists its cameras, e.g. ``["external", "wrist"]``, and its first view keeps the one-view file names, so every reader
of one view reads a multi-view dataset's first view unchanged. Each view's files follow the dataset's video layout;
the arm mask of a view marks the robot's pixels in that camera (the fingers, in a wrist camera).

Videos are read and written with PyAV (H.264, yuv444p, constant QP: near-lossless at small sizes).

Metadata is data, validated on read (DataError naming the file and field):
- text files are UTF-8 (``unreadable_meta`` "not UTF-8 text" naming the byte otherwise); JSON files are objects;
- info.json: ``fps``, ``height``, ``width``, ``action_dim``, ``state_dim`` positive integers, ``video_layout`` one of
  the two layouts, ``sim_background`` "black" or "R,G,B", ``pairing`` (optional, "arm" when absent) "arm" — the
  simulation videos show the arm alone on ``sim_background`` (BridgeData V2's pairs) — or "scene" — they show the whole
  scene as the simulator sees it (InternData-A1's) (``bad_meta``);
- episodes.jsonl: ``episode_id`` a string, ``length`` an integer >= 0, ``instruction`` a string, ``has_real`` a
  boolean (``bad_meta``); an episode of fewer than 2 frames is an episode-level ``too_short_episode``;
- splits.json: each split a list of strings;
- episode ids are plain names (:func:`is_plain_id`: no ``/`` or ``\\``, not ``.``/``..``, no control characters;
  ``bad_episode_id``), and every file read for an episode must stay inside the dataset once symbolic links are
  resolved — a symlinked episode folder or a file linking out of the dataset is refused (``unsafe_path``). A dataset
  spread over several disks can symlink the whole dataset folder, not its parts. :func:`inside` is the one check,
  also used for the paths LeRobot metadata builds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from simforcing.config import ConfigError, is_view_name, parse_color
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
    failure: str | None = None  # "<task>/<mode>": the operator failed the task on purpose (``data synth --failures``)

    def to_json(self) -> dict:
        """Its episodes.jsonl line (``failure`` only where there is one)."""
        out = {"episode_id": self.episode_id, "length": self.length, "instruction": self.instruction,
               "has_real": self.has_real}
        if self.failure is not None:
            out["failure"] = self.failure
        return out


PAIRINGS = ("arm", "scene")  # info.json "pairing": what the simulation videos show (module docstring)
DEFAULT_VIEW = "external"  # the one view of a dataset whose info.json names none


def dataset_views(info: dict) -> tuple[str, ...]:
    """The cameras of a dataset (its validated info.json ``views``; one, :data:`DEFAULT_VIEW`, when it names none)."""
    return tuple(info.get("views") or (DEFAULT_VIEW,))


def view_file(stem: str, view: Optional[str], views: tuple[str, ...], suffix: str = ".mp4") -> str:
    """The file of ``view`` of an episode: ``<stem><suffix>`` for the dataset's first view (and ``view`` None),
    ``<stem>_<view><suffix>`` for the others (``stem``: sim, real, pair, arm_mask)."""
    return f"{stem}{suffix}" if view is None or view == views[0] else f"{stem}_{view}{suffix}"


def read_views(cfg_views: tuple[str, ...], info: dict, root: str | Path, flag: str = "data.views") -> tuple[str, ...]:
    """The views a config reads from a dataset: ``cfg_views`` (``data.view_names``) or, for a one-view model (()),
    the dataset's first view; a view the dataset lacks is a ConfigError naming it, the dataset's views and the fix."""
    have = dataset_views(info)
    if not cfg_views:
        return have[:1]
    missing = [v for v in cfg_views if v not in have]
    if missing:
        raise ConfigError(f"{flag}: asks for the view {missing[0]!r}, but the dataset {root} holds the views "
                          f"{', '.join(have)} (meta/info.json \"views\"); give {flag}={','.join(have)} (or a subset), "
                          "or a dataset with that camera (`simforcing data synth --views external,wrist`)")
    return tuple(cfg_views)


def dataset_pairing(info: dict) -> str:
    """The pairing of a dataset (its validated info.json): "arm" (also when it says nothing) or "scene"."""
    return str(info.get("pairing", "arm"))


def generator_version(info: dict) -> Optional[int]:
    """The version of `data synth`'s generator that made a dataset (its info.json ``synth.version``; None for a
    dataset that does not say: imported, your own, or one written by hand)."""
    synth = info.get("synth")
    version = synth.get("version") if isinstance(synth, dict) else None
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def meta_dir(root: str | Path) -> Path:
    return Path(root) / "meta"


def is_dataset(folder: str | Path) -> bool:
    """A folder holding a simforcing dataset (what an ``--overwrite`` of `data synth`/`import-lerobot` may replace)."""
    return (Path(folder) / "meta" / "info.json").exists() or (Path(folder) / "episodes").is_dir()


# ----------------------------------------------------------------------------------------------------------------------
# Paths from metadata
# ----------------------------------------------------------------------------------------------------------------------


def is_plain_id(episode_id: object) -> bool:
    """A plain file name: a non-empty string without path separators, not '.' or '..', no control characters."""
    return (isinstance(episode_id, str) and 0 < len(episode_id) <= 255 and episode_id not in (".", "..")
            and not any(c in episode_id for c in "/\\") and all(ord(c) >= 32 and ord(c) != 127 for c in episode_id))


def check_episode_id(episode_id: object, source: str | Path | None = None) -> str:
    """``episode_id`` when it is a plain name (:func:`is_plain_id`), else DataError kind ``bad_episode_id``."""
    if not is_plain_id(episode_id):
        raise DataError(f"episode id {episode_id!r} is not a plain name (no '/', '\\', '..', absolute paths or "
                        "control characters)", repr(episode_id), source, kind="bad_episode_id")
    return episode_id  # type: ignore[return-value]


def inside(base: str | Path, path: str | Path, episode: str | None = None, what: str = "file") -> Path:
    """``path`` when it stays inside ``base`` after resolving symbolic links (both sides), else DataError kind
    ``unsafe_path``. A path that does not exist is checked as far as it resolves (its missing part cannot link)."""
    base_real, real = Path(base).resolve(), Path(path).resolve()
    if real != base_real and base_real not in real.parents:
        raise DataError(f"{what} resolves to {real}, outside {base_real}; paths from dataset metadata must stay "
                        "inside the dataset", episode, path, kind="unsafe_path")
    return Path(path)


def episode_dir(root: str | Path, episode_id: str) -> Path:
    """``ROOT/episodes/<id>``: the id must be a plain name and the folder a real folder inside the dataset."""
    check_episode_id(episode_id, meta_dir(root) / "episodes.jsonl")
    d = Path(root) / "episodes" / episode_id
    if d.is_symlink():
        raise DataError(f"episode folder is a symbolic link (to {d.resolve()}); episode folders must be real "
                        "folders inside the dataset", episode_id, d, kind="unsafe_path")
    return inside(root, d, episode_id, "episode folder")


def episode_file(root: str | Path, episode_id: str, name: str) -> Path:
    """``ROOT/episodes/<id>/<name>``, refused (``unsafe_path``) when it links out of the dataset."""
    return inside(root, episode_dir(root, episode_id) / name, episode_id)


def read_text_utf8(path: Path, what: str, episode: str | None = None) -> str:
    """The file's text; DataError ``unreadable_meta`` when it cannot be read or is not UTF-8 (naming the byte)."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise DataError(f"{what} cannot be read ({e})", episode, path, kind="unreadable_meta") from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{what} is not UTF-8 text (byte {e.start}: {data[e.start:e.start + 4]!r})", episode, path,
                        kind="unreadable_meta") from e


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
            # one decoding thread and one colour converter for the whole video: a converter per frame (PyAV's
            # to_ndarray(format=...)) and frame threads cost ~5x the decode itself at the demo's 32x48 (same pixels)
            stream = container.streams.video[0]
            stream.thread_type, stream.codec_context.thread_count = "NONE", 1
            rgb = VideoReformatter()
            frames = [rgb.reformat(f, format="rgb24").to_ndarray() for f in container.decode(stream)]
    except (av.error.FFmpegError, ValueError, IndexError, OSError) as e:
        raise DataError(f"video cannot be decoded ({type(e).__name__}: {e})", episode, path,
                        kind="unreadable_video") from e
    if not frames:
        raise DataError("video has no decodable frames", episode, path, kind="unreadable_video")
    return np.stack(frames)


def split_pair(pair: np.ndarray, eid: str, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A side-by-side video (T, H, 2W, 3) -> (sim, real) halves; DataError ``bad_layout`` for an odd width."""
    if pair.shape[2] % 2:
        raise DataError(f"side-by-side video width {pair.shape[2]} is odd; expected 2·W", eid, path, kind="bad_layout")
    w = pair.shape[2] // 2
    return pair[:, :, :w], pair[:, :, w:]


def read_episode_videos(root: str | Path, info: dict, ep: EpisodeInfo,
                        view: Optional[str] = None) -> tuple[np.ndarray, np.ndarray | None]:
    """(sim, real) uint8 (T, H, W, 3) each of ``view`` (None: the first); real is None for sim-only episodes."""
    eid, views = ep.episode_id, dataset_views(info)
    layout = info.get("video_layout", "separate")
    if layout == "side_by_side" and ep.has_real:
        path = episode_file(root, eid, view_file("pair", view, views))
        return split_pair(read_video(path, eid), eid, path)
    sim = read_video(episode_file(root, eid, view_file("sim", view, views)), eid)
    real = read_video(episode_file(root, eid, view_file("real", view, views)), eid) if ep.has_real else None
    return sim, real


# ----------------------------------------------------------------------------------------------------------------------
# Episodes and metadata
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class ViewVideos:
    """One camera of an episode to write: videos uint8 (T, H, W, 3) (``real`` None for a sim-only episode) and the
    arm mask uint8 (T, H, W) of the real video (optional)."""

    sim: np.ndarray
    real: np.ndarray | None = None
    arm_mask: np.ndarray | None = None


def write_episode(root: str | Path, episode_id: str, sim: np.ndarray, real: np.ndarray | None,
                  actions: np.ndarray, states: np.ndarray, arm_mask: np.ndarray | None = None,
                  layout: str = "separate", fps: int = 10, views: Optional[dict[str, ViewVideos]] = None) -> None:
    """Write one episode: videos uint8 (T, H, W, 3), actions (T-1, A), states (T, S), arm_mask (T, H, W) — the
    dataset's first view — and every later view of ``views`` ({name: ViewVideos}, in info.json's order after the
    first) under its own file names (:func:`view_file`)."""
    d = episode_dir(root, episode_id)
    d.mkdir(parents=True, exist_ok=True)
    cams = [(None, ViewVideos(sim, real, arm_mask))] + list((views or {}).items())
    for name, v in cams:
        def file(stem: str, suffix: str = ".mp4") -> Path:
            return d / (f"{stem}{suffix}" if name is None else f"{stem}_{name}{suffix}")
        if layout == "side_by_side" and v.real is not None:
            write_video(file("pair"), np.concatenate([v.sim, v.real], axis=2), fps)
        else:
            write_video(file("sim"), v.sim, fps)
            if v.real is not None:
                write_video(file("real"), v.real, fps)
        if v.arm_mask is not None:
            _save_npz(file("arm_mask", ".npz"), mask=np.asarray(v.arm_mask, np.uint8))
    _save_npz(d / "lowdim.npz", actions=np.asarray(actions, np.float32), states=np.asarray(states, np.float32))


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
    p = episode_file(root, episode_id, "lowdim.npz")
    return load_npz_field(p, "actions", episode_id), load_npz_field(p, "states", episode_id)


def read_arm_mask(root: str | Path, episode_id: str, view: Optional[str] = None,
                  views: tuple[str, ...] = (DEFAULT_VIEW,)) -> np.ndarray | None:
    """The arm mask of ``view`` (None: the first of ``views``), or None when the episode has none."""
    p = episode_file(root, episode_id, view_file("arm_mask", view, views, ".npz"))
    return load_npz_field(p, "mask", episode_id) if p.exists() else None


TWIN_FILE = "twin.json"


def write_twin_record(root: str | Path, episode_id: str, record: dict) -> None:
    """``episodes/<id>/twin.json``: what the robot's digital twin needs to render this episode's simulation video
    again (``simforcing.twin``): ``{"camera": {...}}``, the camera of the episode in the renderer's own terms (the
    synthetic benchmark's: lookat, distance, azimuth, elevation), and for a full-scene pairing ``"scene"``, the
    episode's simulated scene (the synthetic benchmark's: ``scene.SimScene.to_record``: objects with the simulation's
    own physics, servo gains). Optional in a dataset; read by the ``render`` condition and ``data check-twin``. The
    record names its episode (``episode_id``), so a record copied to another episode is refused on read."""
    atomic_write_json(episode_file(root, episode_id, TWIN_FILE), {"episode_id": episode_id, **record})


def read_twin_record(root: str | Path, episode_id: str) -> dict:
    """The episode's twin record (:func:`write_twin_record`), checked (``data.twin_episode.check_twin_record``: an
    object holding a ``camera`` object, every number finite, the episode it names this one); DataError
    ``missing_file`` naming the file when the dataset has none, ``bad_twin`` when it is malformed."""
    path = episode_file(root, episode_id, TWIN_FILE)
    if not path.exists():
        raise DataError(f"has no {TWIN_FILE}: the render condition renders the episode with the robot's digital twin "
                        "from the camera recorded there (datasets of `simforcing data synth` since generator version "
                        "3 have it: synthesize again; your own data: write {\"camera\": {...}} per episode, "
                        "docs/GUIDE.md \"The twin in the loop\")", episode_id, path, kind="missing_file")
    from simforcing.data.twin_episode import check_twin_record

    record = read_json(path, TWIN_FILE)
    try:
        return check_twin_record(record, episode_id)
    except ValueError as e:
        raise DataError(f"{TWIN_FILE}: {e}", episode_id, path, kind="bad_twin") from None


def write_meta(root: str | Path, info: dict, episodes: Iterable[EpisodeInfo], splits: dict[str, list[str]]) -> None:
    m = meta_dir(root)
    m.mkdir(parents=True, exist_ok=True)
    info = {"format": FORMAT_NAME, "version": FORMAT_VERSION, **info}
    atomic_write_json(m / "info.json", info)
    lines = "".join(json.dumps(e.to_json()) + "\n" for e in episodes)
    atomic_write(m / "episodes.jsonl", lambda p: p.write_text(lines))
    atomic_write_json(m / "splits.json", {k: list(splits.get(k, [])) for k in SPLITS})


def read_json(path: Path, what: str) -> dict:
    """A JSON object from a UTF-8 file (DataError ``missing_meta`` / ``unreadable_meta`` / ``bad_meta`` naming the
    file)."""
    if not path.exists():
        raise DataError(f"{what} is missing", path=path, kind="missing_meta")
    text = read_text_utf8(path, what)
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{what} cannot be read ({e})", path=path, kind="unreadable_meta") from e
    if not isinstance(d, dict):
        raise DataError(f"{what} is a JSON {type(d).__name__}; expected an object", path=path, kind="bad_meta")
    return d


def _positive_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


INFO_INT_FIELDS = ("fps", "height", "width", "action_dim", "state_dim")
VIDEO_LAYOUTS = ("separate", "side_by_side")


def validate_info(info: dict, path: Path) -> dict:
    """The types and ranges of info.json (module docstring); DataError ``bad_meta`` naming the field."""
    if info.get("format") != FORMAT_NAME:
        raise DataError(f"field 'format' is {info.get('format')!r}; expected {FORMAT_NAME!r}", path=path,
                        kind="bad_meta")
    for name in INFO_INT_FIELDS:
        if not _positive_int(info.get(name)):
            raise DataError(f"field {name!r} is {info.get(name)!r}; expected a positive integer", path=path,
                            kind="bad_meta")
    if info.get("video_layout", "separate") not in VIDEO_LAYOUTS:
        raise DataError(f"field 'video_layout' is {info.get('video_layout')!r}; expected 'separate' or "
                        "'side_by_side'", path=path, kind="bad_meta")
    views = info.get("views")
    if views is not None:
        if (not isinstance(views, list) or not views or not all(is_view_name(v) for v in views)
                or len(set(views)) != len(views)):
            raise DataError(f"field 'views' is {views!r}; expected a non-empty list of distinct camera names (letters, "
                            "digits, '_' or '-'), the first one's files named sim.mp4 / real.mp4", path=path,
                            kind="bad_meta")
    if info.get("pairing", "arm") not in PAIRINGS:
        raise DataError(f"field 'pairing' is {info.get('pairing')!r}; expected 'arm' (the simulation videos show the "
                        "arm alone) or 'scene' (they show the whole scene)", path=path, kind="bad_meta")
    background = info.get("sim_background", "black")
    try:
        if not isinstance(background, str):
            raise ConfigError(f"got {background!r}")
        parse_color(background, "sim_background")
    except ConfigError:
        raise DataError(f"field 'sim_background' is {background!r}; expected 'black' or 'R,G,B' with integers in "
                        "0..255", path=path, kind="bad_meta") from None
    return info


def read_info(root: str | Path) -> dict:
    path = meta_dir(root) / "info.json"
    return validate_info(read_json(path, "dataset info"), path)


def _episode_lines(root: str | Path) -> list[tuple[int, dict]]:
    """(line number, object) of every non-empty line of episodes.jsonl, each checked for the stated types."""
    path = meta_dir(root) / "episodes.jsonl"
    if not path.exists():
        raise DataError("episode index is missing", path=path, kind="missing_meta")
    out = []
    for i, line in enumerate(read_text_utf8(path, "episode index").splitlines()):
        if not line.strip():
            continue
        want = "expected {episode_id: str, length: int >= 0, instruction: str, has_real: bool, failure: str (optional)}"
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"line {i + 1}: not JSON ({e}); {want}", path=path, kind="bad_meta") from e
        if not isinstance(d, dict):
            raise DataError(f"line {i + 1}: a JSON {type(d).__name__}; {want}", path=path, kind="bad_meta")
        for key, ok in (("episode_id", isinstance(d.get("episode_id"), str)),
                        ("length", isinstance(d.get("length"), int) and not isinstance(d.get("length"), bool)
                         and d.get("length") >= 0),
                        ("instruction", isinstance(d.get("instruction"), str)),
                        ("has_real", isinstance(d.get("has_real", True), bool)),
                        ("failure", isinstance(d.get("failure", ""), str))):
            if not ok:
                raise DataError(f"line {i + 1}: field {key!r} is {d.get(key)!r}; {want}", path=path, kind="bad_meta")
        out.append((i + 1, d))
    return out


def read_episodes(root: str | Path) -> dict[str, EpisodeInfo]:
    """The episode index by id (the last line wins for a duplicated id; ``episode_id_counts`` counts them). Ids are
    not checked here: a bad id is an episode-level error of the split that lists it (``bad_episode_id``)."""
    return {d["episode_id"]: EpisodeInfo(episode_id=d["episode_id"], length=d["length"], instruction=d["instruction"],
                                         has_real=d.get("has_real", True),
                                         failure=d.get("failure"))
            for _, d in _episode_lines(root)}


def episode_id_counts(root: str | Path) -> dict[str, int]:
    """How often each id appears in episodes.jsonl (read_episodes keeps only the last copy)."""
    counts: dict[str, int] = {}
    for _, d in _episode_lines(root):
        counts[d["episode_id"]] = counts.get(d["episode_id"], 0) + 1
    return counts


def read_splits(root: str | Path) -> dict[str, list[str]]:
    """{split: [ids]} for train, val, sim_pool (absent ones empty); each a list of strings (``bad_meta``)."""
    path = meta_dir(root) / "splits.json"
    d = read_json(path, "split lists")
    out = {}
    for k in SPLITS:
        ids = d.get(k, [])
        if not isinstance(ids, list) or not all(isinstance(x, str) for x in ids):
            raise DataError(f"field {k!r} is {ids!r:.80}; expected a list of episode-id strings", path=path,
                            kind="bad_meta")
        out[k] = list(ids)
    return out


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
