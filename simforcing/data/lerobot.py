"""Import paired sim/real LeRobot v3.0 datasets into the simforcing format (pyarrow + PyAV; no `lerobot` package).

    simforcing data import-lerobot --sim SIM_DIR --real REAL_DIR --out OUT [--sim-camera KEY] [--real-camera KEY]
        [--action-key action] [--state-key observation.state] [--val-fraction 0.1]
    simforcing data import-lerobot ... --sim-camera KEY1 KEY2 --real-camera KEY1 KEY2 [--views head wrist]

Several cameras (a head camera and wrist cameras, as InternData-A1 and DROID record them) make a multi-view dataset:
the k-th sim camera pairs with the k-th real camera as one view (info.json ``views``, each view's files beside the
first's: ``simforcing.data.format``), every camera brought to the first real camera's size; a camera missing an
episode or of another frame count is that episode's error.

LeRobot v3.0 layout read here:
    meta/info.json                        codebase_version "v3.0", fps, features {key: {dtype, shape}}, data_path and
                                          video_path templates ("data/chunk-{chunk_index:03d}/file-{file_index:03d}
                                          .parquet", "videos/{video_key}/chunk-{chunk_index:03d}/file-...mp4")
    meta/episodes/chunk-*/file-*.parquet  one row per episode: episode_index, length, tasks, data/chunk_index,
                                          data/file_index, dataset_from_index, dataset_to_index,
                                          videos/<key>/{chunk_index, file_index, from_timestamp, to_timestamp}
    meta/tasks.parquet                    task_index + the task string (pandas index column "task")
    data/...parquet                       many episodes per file: index, episode_index, frame_index, timestamp,
                                          task_index, action, observation.state
    videos/<key>/...mp4                   many episodes concatenated (AV1); an episode's frames are those with
                                          from_timestamp <= t < to_timestamp (half a frame of tolerance)
    image-only datasets (``use_videos=False``): a camera feature of dtype "image" is a column of the data parquet
                                          holding each frame as an encoded image ({"bytes", "path"}, PNG/JPEG);
                                          there are no videos/ and no videos/<key>/ episode columns

Metadata is checked as data: info.json must hold ``codebase_version``, a positive ``fps``, a ``features`` object and
the ``data_path`` (and, for a video camera, ``video_path``) templates — a missing or ill-typed key is a DataError
naming it; every path a template (or an image's ``path``) produces must stay inside the dataset folder once symbolic
links are resolved (``format.inside``; kind ``unsafe_path``).

Pairing: sim and real episodes with the same episode_index form a paired episode; sim episodes without a real
partner go to ``sim_pool`` (sim-only); real episodes without a sim partner are skipped with a warning. Paired
episodes are split into train/val (a seeded permutation; ``--val-fraction``). LeRobot stores one action per frame
(T rows); our format stores transitions, so the first T-1 actions are kept (the last one leads out of the episode).
Actions and states come from the real dataset (``--lowdim-from sim`` to change that). Both videos are written at the
real camera's resolution (rounded down to even) or ``--height/--width``; a sim camera of another size gets the same
aspect-preserving resize + centre crop as training. Then meta/stats.json is computed; fill the text cache with
``simforcing data embed-text OUT``.

Output: written into a temporary sibling of OUT that becomes OUT by a rename once everything (episodes, meta, stats)
is written (``utils.staged_folder``): a failed import leaves nothing at OUT, and an existing dataset there is refused
unless ``overwrite`` (``--overwrite``). A per-episode problem (sim and real of different lengths, a truncated video,
missing data rows) stops the import naming the episode, or with ``skip_bad`` (``--skip-bad``) skips that episode with
one log line and counts it (info.json ``lerobot.skipped``). The source folders are recorded as resolved absolute paths.
"""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from PIL import Image, UnidentifiedImageError
from tqdm import tqdm

from simforcing.config import ConfigError, check_views, parse_color
from simforcing.data.check import skip_or_raise
from simforcing.data.format import (DEFAULT_VIEW, DataError, EpisodeInfo, ViewVideos, inside, is_dataset,
                                    read_text_utf8, write_episode, write_meta)
from simforcing.data.paired import frames_to_target
from simforcing.data.stats import write_stats
from simforcing.utils import check_output_folder, staged_folder

log = logging.getLogger("simforcing.data")


@dataclass
class LeRobotEpisode:
    index: int
    length: int
    task: str
    data_file: Path
    video_file: Path | None  # None for an image camera (frames in the data parquet)
    from_ts: float
    to_ts: float


def _read_table(path: Path, what: str):
    if not path.exists():
        raise DataError(f"{what} is missing", path=path, kind="missing_file")
    try:
        return pq.read_table(path)
    except Exception as e:  # pyarrow.ArrowInvalid, OSError
        raise DataError(f"{what} cannot be read ({type(e).__name__}: {e})", path=path, kind="unreadable_file") from e


def _column_2d(table, name: str, path: Path) -> np.ndarray:
    """A list/fixed-size-list (or scalar) column -> float32 (N, D)."""
    if name not in table.column_names:
        raise DataError(f"column {name!r} is missing (found {table.column_names})", path=path, kind="missing_field")
    col = table.column(name).combine_chunks()
    n = len(col)
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type) or pa.types.is_fixed_size_list(col.type):
        flat = col.flatten().to_numpy(zero_copy_only=False).astype(np.float32)
        if n and flat.size % n:
            raise DataError(f"column {name!r} has rows of different lengths", path=path, kind="bad_meta")
        return flat.reshape(n, -1 if n else 0)
    return col.to_numpy(zero_copy_only=False).astype(np.float32).reshape(n, 1)


class LeRobotV3:
    """Read access to one LeRobot v3.0 dataset folder: episodes, per-episode lowdim, per-episode camera frames."""

    def __init__(self, root: str | Path, camera: str | None = None, action_key: str = "action",
                 state_key: str = "observation.state"):
        self.root = Path(root)
        info_path = self.root / "meta" / "info.json"
        self.info_path = info_path
        if not info_path.exists():
            raise DataError("LeRobot info is missing; expected a LeRobot v3.0 dataset folder", path=info_path,
                            kind="missing_meta")
        try:
            self.info = json.loads(read_text_utf8(info_path, "LeRobot info"))
        except json.JSONDecodeError as e:
            raise DataError(f"cannot read ({e})", path=info_path, kind="unreadable_meta") from e
        if not isinstance(self.info, dict):
            raise DataError("expected a JSON object", path=info_path, kind="bad_meta")
        version = self._field("codebase_version", str, "a version string such as 'v3.0'")
        if not version.startswith("v3."):
            raise DataError(f"field codebase_version is {version!r}; expected 'v3.0' (convert older datasets with "
                            f"lerobot's v2.1 -> v3.0 script)", path=info_path, kind="bad_meta")
        fps = self._field("fps", (int, float), "a positive number of frames per second")
        if isinstance(fps, bool) or not fps > 0:
            raise DataError(f"field 'fps' is {fps!r}; expected a positive number of frames per second",
                            path=info_path, kind="bad_meta")
        self.fps = float(fps)
        features = self._field("features", dict, "an object {feature: {dtype, shape}}")
        if not all(isinstance(f, dict) for f in features.values()):
            raise DataError("field 'features' must map each feature to an object {dtype, shape, ...}",
                            path=info_path, kind="bad_meta")
        self.data_path = self._field("data_path", str, "a template such as 'data/chunk-{chunk_index:03d}/"
                                     "file-{file_index:03d}.parquet'")
        cameras = sorted(k for k, f in features.items() if f.get("dtype") in ("video", "image"))
        for key, flag in ((action_key, "--action-key"), (state_key, "--state-key")):
            if key not in features:
                raise DataError(f"feature {key!r} ({flag}) is not in features {sorted(features)}", path=info_path,
                                kind="missing_field")
        if camera is None:
            if len(cameras) != 1:
                raise DataError(f"{len(cameras)} camera features {cameras}; choose one with --sim-camera/"
                                "--real-camera", path=info_path, kind="missing_field")
            camera = cameras[0]
        elif camera not in cameras:
            raise DataError(f"camera {camera!r} is not a video or image feature; found {cameras}", path=info_path,
                            kind="missing_field")
        self.camera, self.action_key, self.state_key = camera, action_key, state_key
        self.images = features[camera].get("dtype") == "image"  # frames stored in the data parquet
        self.video_path = None if self.images else self._field(
            "video_path", str, "a template such as 'videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}"
            ".mp4' (the dataset has video cameras)")
        self.tasks = self._read_tasks()
        self.episodes = self._read_episodes()
        self._table_cache: tuple[Path, object] | None = None

    def _field(self, name: str, types, expected: str):
        """info.json's ``name``, of one of ``types``; DataError naming the field when missing or ill-typed."""
        if name not in self.info:
            raise DataError(f"field {name!r} is missing; expected {expected}", path=self.info_path,
                            kind="missing_field")
        value = self.info[name]
        if not isinstance(value, types):
            raise DataError(f"field {name!r} is {value!r:.80}; expected {expected}", path=self.info_path,
                            kind="bad_meta")
        return value

    def _path(self, template: str, field: str, episode: int, **values) -> Path:
        """A file of the dataset from an info.json template; it must stay inside the dataset (``unsafe_path``)."""
        try:
            rel = template.format(**values)
        except (KeyError, IndexError, ValueError, AttributeError) as e:
            raise DataError(f"field {field!r} ({template!r}) cannot be filled with {sorted(values)} "
                            f"({type(e).__name__}: {e})", str(episode), self.info_path, kind="bad_meta") from e
        return inside(self.root, self.root / rel, str(episode), f"{field} of episode_index {episode}")

    def _read_tasks(self) -> dict[int, str]:
        path = self.root / "meta" / "tasks.parquet"
        table = _read_table(path, "task table")
        names = table.column_names
        text_col = next((c for c in ("task", "__index_level_0__") if c in names), None)
        if text_col is None or "task_index" not in names:
            raise DataError(f"expected columns task_index and task; found {names}", path=path, kind="missing_field")
        return dict(zip(table.column("task_index").to_pylist(), map(str, table.column(text_col).to_pylist())))

    def _read_episodes(self) -> dict[int, LeRobotEpisode]:
        files = sorted((self.root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
        if not files:
            raise DataError("no episode metadata files", path=self.root / "meta" / "episodes", kind="missing_meta")
        cam = f"videos/{self.camera}/"
        needed = ["episode_index", "length", "data/chunk_index", "data/file_index"]
        if not self.images:
            needed += [cam + "chunk_index", cam + "file_index", cam + "from_timestamp", cam + "to_timestamp"]
        out: dict[int, LeRobotEpisode] = {}
        for f in files:
            rows = _read_table(f, "episode metadata")
            missing = [c for c in needed if c not in rows.column_names]
            if missing:
                raise DataError(f"columns {missing} are missing", path=f, kind="missing_field")
            for r in rows.select([c for c in needed + ["tasks"] if c in rows.column_names]).to_pylist():
                try:
                    ep, length = int(r["episode_index"]), int(r["length"])
                    chunks = {k: int(r[k]) for k in needed if k.endswith(("chunk_index", "file_index"))}
                    times = (0.0, 0.0) if self.images else (float(r[cam + "from_timestamp"]),
                                                             float(r[cam + "to_timestamp"]))
                except (TypeError, ValueError) as e:
                    raise DataError(f"an episode row holds a missing or non-numeric index/length/timestamp ({e})",
                                    path=f, kind="bad_meta") from e
                tasks = r.get("tasks") or []
                out[ep] = LeRobotEpisode(
                    index=ep, length=length, task=str(tasks[0]) if tasks else "",
                    data_file=self._path(self.data_path, "data_path", ep, chunk_index=chunks["data/chunk_index"],
                                         file_index=chunks["data/file_index"]),
                    video_file=None if self.images else self._path(
                        self.video_path, "video_path", ep, video_key=self.camera,
                        chunk_index=chunks[cam + "chunk_index"], file_index=chunks[cam + "file_index"]),
                    from_ts=times[0], to_ts=times[1])
        return out

    def _data_table(self, path: Path):
        if self._table_cache is None or self._table_cache[0] != path:
            self._table_cache = (path, _read_table(path, "episode data"))
        return self._table_cache[1]

    def _rows(self, ep: LeRobotEpisode):
        """The episode's rows of its data parquet, ordered by frame_index (exactly ``length`` of them)."""
        table = self._data_table(ep.data_file)
        for c in ("episode_index", "frame_index"):
            if c not in table.column_names:
                raise DataError(f"column {c!r} is missing", str(ep.index), ep.data_file, kind="missing_field")
        rows = table.filter(pc.equal(table.column("episode_index"), ep.index))
        rows = rows.take(pc.sort_indices(rows, sort_keys=[("frame_index", "ascending")]))
        if rows.num_rows != ep.length:
            raise DataError(f"{rows.num_rows} data rows for episode_index {ep.index}; expected length {ep.length}",
                            str(ep.index), ep.data_file, kind="truncated_data")
        return rows

    def lowdim(self, ep: LeRobotEpisode) -> tuple[np.ndarray, np.ndarray, str]:
        """(actions (T, A), states (T, S), task) of one episode, rows ordered by frame_index."""
        rows = self._rows(ep)
        task = ep.task
        if not task and "task_index" in rows.column_names and rows.num_rows:
            task = self.tasks.get(rows.column("task_index")[0].as_py(), "")
        return (_column_2d(rows, self.action_key, ep.data_file), _column_2d(rows, self.state_key, ep.data_file),
                task)

    def frames(self, ep: LeRobotEpisode) -> np.ndarray:
        """uint8 (T, H, W, 3): the frames of the episode's video file with from_ts <= t < to_ts, or (an image
        camera) the images of its data rows."""
        if self.images:
            return self._image_frames(ep)
        if not ep.video_file.exists():
            raise DataError("video file is missing", str(ep.index), ep.video_file, kind="missing_video")
        tol = 0.5 / self.fps
        frames = []
        try:
            with av.open(str(ep.video_file)) as container:
                stream = container.streams.video[0]
                if ep.from_ts > 0:
                    container.seek(int(max(0.0, ep.from_ts - tol) / stream.time_base), stream=stream)
                for fr in container.decode(stream):
                    t = fr.time if fr.time is not None else len(frames) / self.fps
                    if t < ep.from_ts - tol:
                        continue
                    if t >= ep.to_ts - tol or len(frames) == ep.length:
                        break
                    frames.append(fr.to_ndarray(format="rgb24"))
        except (av.error.FFmpegError, ValueError, IndexError, OSError) as e:
            raise DataError(f"video cannot be decoded ({type(e).__name__}: {e})", str(ep.index), ep.video_file,
                            kind="unreadable_video") from e
        if len(frames) != ep.length:
            raise DataError(f"{len(frames)} frames between {ep.from_ts:.3f}s and {ep.to_ts:.3f}s; expected length "
                            f"{ep.length}", str(ep.index), ep.video_file, kind="truncated_video")
        return np.stack(frames)

    def _image_frames(self, ep: LeRobotEpisode) -> np.ndarray:
        """Frames of an image camera: each row's cell is {"bytes", "path"} (or raw bytes) of a PNG/JPEG image."""
        rows = self._rows(ep)
        if self.camera not in rows.column_names:
            raise DataError(f"image column {self.camera!r} is missing", str(ep.index), ep.data_file,
                            kind="missing_field")
        frames = []
        for t, cell in enumerate(rows.column(self.camera).to_pylist()):
            data, where = cell, ep.data_file
            if isinstance(cell, dict):
                data = cell.get("bytes")
                if data is None and isinstance(cell.get("path"), str):  # an image file beside the parquet
                    where = inside(self.root, self.root / cell["path"], str(ep.index), "image path")
                    try:
                        data = where.read_bytes()
                    except OSError as e:
                        raise DataError(f"frame {t}: cannot read the image ({e})", str(ep.index), where,
                                        kind="missing_file") from e
            if not isinstance(data, (bytes, bytearray)):
                raise DataError(f"frame {t}: column {self.camera!r} holds no image bytes", str(ep.index), where,
                                kind="unreadable_video")
            try:
                with Image.open(io.BytesIO(data)) as img:
                    frames.append(np.asarray(img.convert("RGB")))
            except (UnidentifiedImageError, OSError, ValueError) as e:
                raise DataError(f"frame {t}: the image cannot be decoded ({type(e).__name__}: {e})", str(ep.index),
                                where, kind="unreadable_video") from e
        if len({f.shape for f in frames}) > 1:
            raise DataError(f"the images have different sizes {sorted({f.shape for f in frames})}", str(ep.index),
                            ep.data_file, kind="resolution_mismatch")
        return np.stack(frames)


def fit_frames(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """uint8 (T, h, w, 3) -> (T, height, width, 3) with the training transform (resize to cover + centre crop)."""
    if frames.shape[1:3] == (height, width):
        return frames
    return frames_to_target(frames, height, width).permute(1, 2, 3, 0).numpy()  # (3,T,H,W) -> (T,H,W,3)


def _camera_size(ds: LeRobotV3) -> tuple[int, int] | None:
    """(H, W) from the camera feature's ``shape`` [H, W, 3] (None when absent or malformed)."""
    shape = ds.info["features"][ds.camera].get("shape")
    if isinstance(shape, list) and len(shape) == 3 and all(isinstance(v, int) and v > 0 for v in shape[:2]):
        return shape[0], shape[1]
    return None


def _keys(keys) -> list:
    """A camera flag's value: None (the dataset's only camera), a key, or a list of keys."""
    return [None] if keys is None else ([keys] if isinstance(keys, str) else list(keys))


def camera_views(sim_cameras, real_cameras, views=None) -> tuple[list, list, list[str]]:
    """The cameras of a paired import, checked before anything is read: as many sim as real camera keys (one view
    each: sim camera k pairs with real camera k), none named twice, and the views' names (``views``, else
    ``external`` for one camera, else the last part of each real key) distinct plain names; ConfigError naming the
    flag otherwise."""
    sims, reals = _keys(sim_cameras), _keys(real_cameras)
    if len(sims) != len(reals):
        raise ConfigError(f"--sim-camera / --real-camera: got {len(sims)} sim and {len(reals)} real camera keys; a "
                          "multi-view dataset pairs each real camera with the simulation's view of it, one key each")
    for flag, keys in (("--sim-camera", sims), ("--real-camera", reals)):
        twice = sorted({k for k in keys if k is not None and keys.count(k) > 1})
        if twice:
            raise ConfigError(f"{flag}: the camera {twice[0]!r} is given twice; name each camera once")
    if views is None:
        views = ([DEFAULT_VIEW] if len(reals) == 1 else
                 ["".join(c if c.isalnum() or c in "_-" else "_" for c in str(k).split(".")[-1]) for k in reals])
    views = list(views)
    if len(views) != len(reals):
        raise ConfigError(f"--views: got {len(views)} names for {len(reals)} cameras; name each view once")
    check_views(",".join(views), "--views")
    return sims, reals, views


def import_lerobot(sim_dir: str | Path, real_dir: str | Path, out: str | Path, sim_camera=None,
                   real_camera=None, action_key: str = "action", state_key: str = "observation.state",
                   val_fraction: float = 0.1, seed: int = 0, height: int | None = None, width: int | None = None,
                   lowdim_from: str = "real", sim_background: str = "black", progress: bool = True,
                   overwrite: bool = False, skip_bad: bool = False, views=None) -> dict:
    """Convert a sim and a real LeRobot v3.0 dataset into one paired dataset at ``out``; returns a summary dict
    (``skipped``: [(episode, kind, message)] of the episodes ``skip_bad`` left out). See the module docstring.
    ``sim_camera`` / ``real_camera``: a key each, or lists of keys for a multi-view dataset (:func:`camera_views`:
    the first pair is the first view, every view at the first real camera's size)."""
    if not 0.0 <= val_fraction < 1.0:
        raise ConfigError(f"--val-fraction: got {val_fraction}; expected a fraction in [0, 1)")
    if lowdim_from not in ("real", "sim"):
        raise ConfigError(f"--lowdim-from: got {lowdim_from!r}; expected 'real' or 'sim'")
    parse_color(sim_background, "--sim-background")
    sim_keys, real_keys, names = camera_views(sim_camera, real_camera, views)
    out = Path(out)
    check_output_folder(out, overwrite, "dataset", is_dataset)  # before any decoding (staged_folder checks again)
    sims = [LeRobotV3(sim_dir, k, action_key, state_key) for k in sim_keys]
    reals = [LeRobotV3(real_dir, k, action_key, state_key) for k in real_keys]
    sim, real = sims[0], reals[0]
    paired = sorted(set(sim.episodes) & set(real.episodes))
    sim_only = sorted(set(sim.episodes) - set(real.episodes))
    real_only = sorted(set(real.episodes) - set(sim.episodes))
    for ep in real_only:
        log.warning("real episode %d has no simulation partner in %s; skipped", ep, sim.root)
    if not paired:
        raise DataError(f"no episode_index is shared by {sim.root} and {real.root}", kind="empty_split")
    if height is None or width is None:
        hw = _camera_size(real) or real.frames(real.episodes[paired[0]]).shape[1:3]
        h, w = int(hw[0]), int(hw[1])
        height, width = height or h - h % 2, width or w - w % 2
    rng = np.random.default_rng(seed)
    n_val = int(round(len(paired) * val_fraction)) if len(paired) > 1 else 0
    val_set = {paired[i] for i in rng.permutation(len(paired))[:n_val]}
    episodes, splits = [], {"train": [], "val": [], "sim_pool": []}
    skipped: list[tuple[str, str, str]] = []
    dims: tuple[int, int] | None = None
    with staged_folder(out, overwrite, "dataset", replaceable=is_dataset) as tmp:
        for idx in tqdm(paired + sim_only, desc="import-lerobot", disable=not progress):
            s_ep = sim.episodes[idx]
            r_ep = real.episodes.get(idx)
            eid = f"ep{idx:06d}"
            try:
                if r_ep is not None and r_ep.length != s_ep.length:
                    raise DataError(f"sim has {s_ep.length} frames ({s_ep.video_file or s_ep.data_file}) but real "
                                    f"has {r_ep.length}; paired episodes must have equal lengths", eid,
                                    r_ep.video_file or r_ep.data_file, kind="frame_count_mismatch")
                if s_ep.length < 2:
                    raise DataError(f"length is {s_ep.length}; an episode needs at least 2 frames", eid,
                                    s_ep.data_file, kind="too_short_episode")
                src, src_ep = (real, r_ep) if (lowdim_from == "real" and r_ep is not None) else (sim, s_ep)
                actions, states, task = src.lowdim(src_ep)
                T = s_ep.length
                cams = [_view_frames(s, r, idx, eid, T, height, width) for s, r in zip(sims, reals)]
            except DataError as e:
                skipped.append(skip_or_raise(e, skip_bad, eid))
                continue
            write_episode(tmp, eid, cams[0].sim, cams[0].real, actions[:T - 1], states[:T], layout="separate",
                          fps=int(round(real.fps)), views=dict(zip(names[1:], cams[1:])))
            dims = (int(actions.shape[1]), int(states.shape[1]))
            episodes.append(EpisodeInfo(eid, T, task, r_ep is not None))
            split = "sim_pool" if r_ep is None else ("val" if idx in val_set else "train")
            splits[split].append(eid)
        if not splits["train"] and not splits["val"]:
            raise DataError(f"every paired episode was skipped ({len(skipped)} skipped); nothing to import",
                            kind="empty_split")
        info = {"fps": int(round(real.fps)) or 1, "height": height, "width": width, "action_dim": dims[0],
                "state_dim": dims[1], "video_layout": "separate", "sim_background": sim_background,
                "source": "lerobot-v3.0", **({"views": names} if len(names) > 1 else {}),
                "lerobot": {"sim": str(sim.root.resolve()), "real": str(real.root.resolve()),
                            "sim_camera": sim.camera, "real_camera": real.camera,
                            **({"cameras": {v: {"sim": s.camera, "real": r.camera}
                                            for v, s, r in zip(names, sims, reals)}} if len(names) > 1 else {}),
                            "action_key": action_key,
                            "state_key": state_key, "lowdim_from": lowdim_from, "skipped_real_only": real_only,
                            "skipped": [{"episode": e, "kind": k, "reason": r} for e, k, r in skipped]}}
        write_meta(tmp, info, episodes, splits)
        write_stats(tmp)
    return {"out": str(out), **{k: len(v) for k, v in splits.items()}, "skipped_real_only": real_only,
            "skipped": skipped, "height": height, "width": width, "views": names}


def _view_frames(sim: LeRobotV3, real: LeRobotV3, idx: int, eid: str, length: int, height: int,
                 width: int) -> ViewVideos:
    """One camera of episode ``idx`` (sim and real) brought to the dataset's size; a camera that lacks the episode
    or holds another number of frames than the episode is a DataError naming it (an episode-level error)."""
    s_ep, r_ep = sim.episodes.get(idx), real.episodes.get(idx)
    if s_ep is None:
        raise DataError(f"the sim camera {sim.camera!r} has no episode {idx}", eid, sim.root, kind="missing_video")
    frames = {"sim": fit_frames(sim.frames(s_ep), height, width)}
    if r_ep is not None:
        frames["real"] = fit_frames(real.frames(r_ep), height, width)
    for dom, v in frames.items():
        if len(v) != length:
            cam = sim if dom == "sim" else real
            raise DataError(f"the {dom} camera {cam.camera!r} has {len(v)} frames; the episode has {length} (every "
                            "camera of an episode records each step)", eid,
                            (s_ep if dom == "sim" else r_ep).video_file or s_ep.data_file, kind="frame_count_mismatch")
    return ViewVideos(frames["sim"], frames.get("real"))
