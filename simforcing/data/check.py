"""Dataset validation (`simforcing data check DIR [--skip-bad] [--preset P]`) and the checks the datasets reuse: one
validator for both formats (paired world-model episodes, ``validate_episode``; policy episodes with cameras side by
side, ``validate_policy_episode``, which adds ``camera_mismatch``).

Every problem is a DataError with a distinct ``kind`` naming the episode, the file, the field and what was expected:

    dataset level (never skipped)   missing_meta, unreadable_meta, bad_meta, missing_stats, bad_stats,
                                    missing_text_cache, bad_text_embedding (cache text_dim), empty_split;
                                    policy datasets: missing_camera (< 2), camera_mismatch (policy.cameras)
    episode level (--skip-bad)      unknown_episode (in splits.json, not in episodes.jsonl), duplicate_episode,
                                    bad_episode_id (not a plain name), unsafe_path (a symlinked episode folder
                                    or a file resolving outside the dataset), too_short_episode (< 2 frames),
                                    unpaired_episode (train/val episode with has_real False),
                                    missing_video, unreadable_video, truncated_video (fewer frames than `length`),
                                    length_mismatch (more frames than `length`), frame_count_mismatch (sim vs real),
                                    resolution_mismatch (sim vs real), bad_resolution (cannot be centre-cropped),
                                    view_mismatch (a later camera of another size than the first),
                                    bad_layout, missing_file, unreadable_file, missing_field (npz column),
                                    bad_action_shape (not (T-1, action_dim)), bad_state_shape (not (T, state_dim)),
                                    video_shorter_than_actions, non_finite (NaN/inf), bad_arm_mask (not (T, H, W)),
                                    bad_twin (twin.json: `data check` only, ``check_twin_file``),
                                    missing_text_embedding, bad_text_embedding; policy episodes: missing_states,
                                    camera_mismatch (the video is not info.json's cameras × width wide)

``check_dataset`` decodes every video (thorough); ``PairedWindowDataset`` and ``PolicyWindowDataset`` run the same
checks with ``decode=False`` (container headers only) so that building a dataset stays cheap. Episodes shorter than
one window of the preset are not errors (a dataset's lengths vary): the datasets leave them out and the trainer
names them (``too_short_for_window``) in its log and status.json; ``data check`` counts them per preset.
"""

from __future__ import annotations

import logging
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import av
import numpy as np
from numpy.lib import format as npformat

from simforcing.config import PRESETS, Config
from simforcing.data.format import (TWIN_FILE, DataError, EpisodeInfo, dataset_pairing, dataset_views, episode_dir,
                                    episode_file, episode_id_counts, generator_version, is_plain_id, meta_dir,
                                    read_episode_videos, read_episodes, read_info, read_lowdim, read_splits,
                                    read_stats, read_twin_record, read_video, read_views, view_file)
from simforcing.data.policy_format import VIDEO as POLICY_VIDEO
from simforcing.data.policy_format import is_policy_dataset, read_policy_info, read_policy_lowdim
from simforcing.data.stats import Normalizer
from simforcing.data.text_cache import cache_dir, embedding_path, has_embedding, load_embedding, read_cache_info

log = logging.getLogger("simforcing.data")

MIN_CROP_FRACTION = 0.25  # the centre crop must keep at least this fraction of the source along each axis
PAIRED_SPLITS = ("train", "val")


# ----------------------------------------------------------------------------------------------------------------------
# Small readers
# ----------------------------------------------------------------------------------------------------------------------


def probe_video(path: Path, episode: str | None = None) -> tuple[int, int, int]:
    """(frames, height, width) from the container header; decodes only when the header has no frame count."""
    if not path.exists():
        raise DataError("video file is missing", episode, path, kind="missing_video")
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            n, h, w = stream.frames, stream.codec_context.height, stream.codec_context.width
            if n <= 0:
                n = sum(1 for _ in container.decode(video=0))
    except (av.error.FFmpegError, ValueError, IndexError, OSError) as e:
        raise DataError(f"video cannot be opened ({type(e).__name__}: {e})", episode, path,
                        kind="unreadable_video") from e
    if n <= 0:
        raise DataError("video has no frames", episode, path, kind="unreadable_video")
    return n, h, w


def npz_field_shape(path: Path, name: str, episode: str | None = None) -> tuple[int, ...]:
    """Shape of one array of an .npz from its header, without reading the data."""
    try:
        with zipfile.ZipFile(path) as zf:
            if name + ".npy" not in zf.namelist():
                found = sorted(n[:-4] for n in zf.namelist())
                raise DataError(f"field {name!r} is missing (found {found})", episode, path, kind="missing_field")
            with zf.open(name + ".npy") as f:
                version = npformat.read_magic(f)
                read = npformat.read_array_header_1_0 if version == (1, 0) else npformat.read_array_header_2_0
                shape, _, _ = read(f)
    except DataError:
        raise
    except Exception as e:  # BadZipFile, ValueError, OSError
        raise DataError(f"cannot read ({type(e).__name__}: {e})", episode, path, kind="unreadable_file") from e
    return tuple(shape)


def crop_keep_fraction(h: int, w: int, height: int, width: int) -> float:
    """Fraction of the source kept along the cropped axis by resize-to-cover + centre crop to (height, width)."""
    scale = max(height / h, width / w)
    return min(height / (h * scale), width / (w * scale))


def check_resolution(h: int, w: int, height: int, width: int, episode: str | None, path: Path) -> None:
    """Reject a degenerate source: under 2 px on a side, or a centre crop keeping < 25 % of an axis."""
    if h < 2 or w < 2:
        raise DataError(f"resolution {h}x{w} is degenerate; expected at least 2x2", episode, path,
                        kind="bad_resolution")
    keep = crop_keep_fraction(h, w, height, width)
    if keep < MIN_CROP_FRACTION:
        raise DataError(f"resolution {h}x{w} (H x W) cannot be centre-cropped to {height}x{width} (data.height x "
                        f"data.width): the crop would keep {keep:.0%} of an axis, expected >= "
                        f"{MIN_CROP_FRACTION:.0%}", episode, path, kind="bad_resolution")


def skip_or_raise(e: DataError, skip_bad: bool, episode: str | None = None) -> tuple[str, str, str]:
    """What every reader does with a bad episode: raise ``e``, or with ``skip_bad`` log it once and return
    (episode, kind, message) for the reader's list of skipped episodes."""
    if not skip_bad:
        raise e
    eid = episode if episode is not None else e.episode
    log.warning("skipping episode %s [%s]: %s", eid, e.kind, e)
    return eid, e.kind, str(e)


def check_text_cache(cache: Path, cfg: Config) -> dict:
    """The cache's info.json must exist and match model.text_dim (DataError kind bad_text_embedding otherwise)."""
    info = read_cache_info(cache)
    if info.get("text_dim") != cfg.model.text_dim:
        raise DataError(f"field text_dim is {info.get('text_dim')!r}; expected {cfg.model.text_dim} (model.text_dim); "
                        f"re-run `simforcing data embed-text` with this preset", path=cache / "info.json",
                        kind="bad_text_embedding")
    return info


# ----------------------------------------------------------------------------------------------------------------------
# One episode
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class EpisodeSummary:
    episode_id: str
    length: int
    height: int
    width: int
    has_real: bool
    has_mask: bool
    action_min: np.ndarray
    action_max: np.ndarray
    state_min: np.ndarray
    state_max: np.ndarray


def _video_shapes(root: Path, info: dict, ep: EpisodeInfo, decode: bool,
                  view: str | None = None) -> dict[str, tuple[int, int, int, Path]]:
    """{"sim": (frames, h, w, path), "real": ...} for the videos this episode has of ``view`` (None: the first)."""
    eid, views = ep.episode_id, dataset_views(info)
    layout = info.get("video_layout", "separate")
    if layout not in ("separate", "side_by_side"):
        raise DataError(f"field video_layout is {layout!r}; expected 'separate' or 'side_by_side'",
                        path=meta_dir(root) / "info.json", kind="bad_meta")
    side = layout == "side_by_side" and ep.has_real
    paths = ((episode_file(root, eid, view_file("pair", view, views)),) * 2 if side
             else (episode_file(root, eid, view_file("sim", view, views)),
                   episode_file(root, eid, view_file("real", view, views))))
    if decode:
        sim, real = read_episode_videos(root, info, ep, view)
        out = {"sim": (*sim.shape[:3], paths[0])}
        if real is not None:
            out["real"] = (*real.shape[:3], paths[1])
        return out
    if side:
        n, h, w = probe_video(paths[0], eid)
        if w % 2:
            raise DataError(f"side-by-side video width {w} is odd; expected 2·W", eid, paths[0], kind="bad_layout")
        return {"sim": (n, h, w // 2, paths[0]), "real": (n, h, w // 2, paths[0])}
    out = {"sim": (*probe_video(paths[0], eid), paths[0])}
    if ep.has_real:
        out["real"] = (*probe_video(paths[1], eid), paths[1])
    return out


def _check_length(root: Path, ep: EpisodeInfo) -> None:
    if ep.length < 2:
        raise DataError(f"field length is {ep.length}; an episode needs at least 2 frames (one transition)",
                        ep.episode_id, meta_dir(root) / "episodes.jsonl", kind="too_short_episode")


def _check_frame_count(n: int, ep: EpisodeInfo, vpath: Path) -> None:
    """The video's frame count against episodes.jsonl's ``length``."""
    if n < ep.length:
        raise DataError(f"video has {n} frames; expected {ep.length} (field length in episodes.jsonl)",
                        ep.episode_id, vpath, kind="truncated_video")
    if n > ep.length:
        raise DataError(f"video has {n} frames but field length in episodes.jsonl is {ep.length}", ep.episode_id,
                        vpath, kind="length_mismatch")


def _check_lowdim(root: Path, ep: EpisodeInfo, n: int, cfg: Config,
                  read: Callable[[Path, str], tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """actions (T−1, action_dim) and states (T, state_dim), all finite; returns them."""
    eid = ep.episode_id
    lowdim = episode_file(root, eid, "lowdim.npz")
    actions, states = read(root, eid)
    A, S = cfg.data.action_dim, cfg.data.state_dim
    if actions.ndim != 2 or actions.shape[1] != A:
        raise DataError(f"field actions has shape {actions.shape}; expected ({n - 1}, {A}) (T-1, data.action_dim)",
                        eid, lowdim, kind="bad_action_shape")
    if states.ndim != 2 or states.shape[1] != S:
        raise DataError(f"field states has shape {states.shape}; expected ({n}, {S}) (T, data.state_dim)", eid,
                        lowdim, kind="bad_state_shape")
    if actions.shape[0] > n - 1:
        raise DataError(f"field actions has {actions.shape[0]} rows but the videos have only {n} frames "
                        f"({n - 1} transitions)", eid, lowdim, kind="video_shorter_than_actions")
    if actions.shape[0] != ep.length - 1:
        raise DataError(f"field actions has shape {actions.shape}; expected ({ep.length - 1}, {A}) (T-1 transitions)",
                        eid, lowdim, kind="bad_action_shape")
    if states.shape[0] != ep.length:
        raise DataError(f"field states has shape {states.shape}; expected ({ep.length}, {S}) (T frames)", eid,
                        lowdim, kind="bad_state_shape")
    for name, x in (("actions", actions), ("states", states)):
        bad = ~np.isfinite(x)
        if bad.any():
            row, col = map(int, np.argwhere(bad)[0])
            raise DataError(f"field {name} holds {int(bad.sum())} NaN/inf values (first at [{row}, {col}])", eid,
                            lowdim, kind="non_finite")
    return actions, states


def _check_text(root: Path, ep: EpisodeInfo, cfg: Config, decode: bool, text_cache: Path | None) -> None:
    cache = text_cache if text_cache is not None else cache_dir(root, cfg.data.text_cache)
    if decode:
        load_embedding(cache, ep.instruction, cfg.data.text_max_tokens, cfg.model.text_dim, ep.episode_id)
    elif not has_embedding(cache, ep.instruction):
        raise DataError(f"instruction {ep.instruction!r} has no cached embedding; run `simforcing data embed-text`",
                        ep.episode_id, embedding_path(cache, ep.instruction), kind="missing_text_embedding")


def _summary(ep: EpisodeInfo, h: int, w: int, has_real: bool, has_mask: bool, actions: np.ndarray,
             states: np.ndarray) -> EpisodeSummary:
    return EpisodeSummary(ep.episode_id, ep.length, h, w, has_real, has_mask, actions.min(0), actions.max(0),
                          states.min(0), states.max(0))


def _check_view(root: Path, info: dict, ep: EpisodeInfo, cfg: Config, decode: bool, view: str | None,
                first: tuple[int, int] | None) -> tuple[int, int, int, Path, bool]:
    """One camera's videos and arm mask of a paired episode: sim and real alike, the episode's length, a size the
    model's crop takes and — for a later view — the first view's size (``first``, (h, w); ``view_mismatch``).
    Returns (frames, h, w, sim video path, has a mask)."""
    eid, views = ep.episode_id, dataset_views(info)
    vids = _video_shapes(root, info, ep, decode, view)
    n, h, w, vpath = vids["sim"]
    if "real" in vids:
        rn, rh, rw, rpath = vids["real"]
        if rn != n:
            raise DataError(f"real video has {rn} frames but the sim video has {n}; expected equal counts", eid, rpath,
                            kind="frame_count_mismatch")
        if (rh, rw) != (h, w):
            raise DataError(f"real resolution {rh}x{rw} differs from sim resolution {h}x{w}", eid, rpath,
                            kind="resolution_mismatch")
    _check_frame_count(n, ep, vpath)
    if first is not None and (h, w) != first:
        raise DataError(f"view {view!r} is {h}x{w} but the view {views[0]!r} is {first[0]}x{first[1]}; every camera "
                        "of a dataset is recorded at one size (meta/info.json height × width)", eid, vpath,
                        kind="view_mismatch")
    check_resolution(h, w, cfg.data.height, cfg.data.width, eid, vpath)
    mask_path = episode_file(root, eid, view_file("arm_mask", view, views, ".npz"))
    has_mask = ep.has_real and mask_path.exists()
    if has_mask:
        shape = npz_field_shape(mask_path, "mask", eid)
        if shape != (n, h, w):
            raise DataError(f"field mask has shape {shape}; expected ({n}, {h}, {w}) (T, H, W of the real video)", eid,
                            mask_path, kind="bad_arm_mask")
    return n, h, w, vpath, has_mask


def validate_episode(root: str | Path, info: dict, ep: EpisodeInfo, cfg: Config, need_real: bool,
                     decode: bool = False, text_cache: Path | None = None,
                     views: tuple[str, ...] | None = None) -> EpisodeSummary:
    """Every per-episode check of a paired episode; raises the first DataError found. ``decode``: decode the videos
    fully. ``views``: the cameras checked (None: those ``cfg`` reads, ``format.read_views``); every one must be there,
    as long as the first and of its size, with its mask (when the first view has one)."""
    root = Path(root)
    eid = ep.episode_id
    episode_dir(root, eid)  # a plain id and a real folder inside the dataset (DataError otherwise)
    _check_length(root, ep)
    if need_real and not ep.has_real:
        raise DataError("has_real is false but this split needs paired sim/real videos", eid,
                        meta_dir(root) / "episodes.jsonl", kind="unpaired_episode")
    views = views if views is not None else read_views(cfg.data.view_names, info, root)
    n, h, w, vpath, has_mask = _check_view(root, info, ep, cfg, decode, views[0], None)
    for view in views[1:]:
        _, _, _, _, masked = _check_view(root, info, ep, cfg, decode, view, (h, w))
        if masked != has_mask:
            have, lack = (views[0], view) if has_mask else (view, views[0])
            raise DataError(f"the view {have!r} has an arm mask and the view {lack!r} none; a dataset's views all have "
                            "their masks or none does", eid,
                            episode_file(root, eid, view_file("arm_mask", lack, dataset_views(info), ".npz")),
                            kind="bad_arm_mask")
    actions, states = _check_lowdim(root, ep, n, cfg, read_lowdim)
    _check_text(root, ep, cfg, decode, text_cache)
    if decode and episode_file(root, eid, TWIN_FILE).exists():  # `data check` only: training never reads it
        check_twin_file(root, info, eid)
    return _summary(ep, h, w, ep.has_real, has_mask, actions, states)


def check_twin_file(root: Path, info: dict, eid: str) -> None:
    """The episode's twin.json as its renderer reads it (`data check` only): ``read_twin_record`` (not an object with a
    camera, a number not finite, another episode's record); in a dataset of `data synth` (info.json ``source``), whose
    twin is the synthetic one, also every field that twin renders from (``check_synthetic_dataset_record``: the
    camera, the mesh, the scene, the dataset's pairing and its generator's mesh) — named now, not at the first
    render. DataError ``bad_twin`` naming the episode and the file."""
    from simforcing.data.twin_episode import SYNTHETIC_SOURCE, check_synthetic_dataset_record

    record = read_twin_record(root, eid)
    if info.get("source") == SYNTHETIC_SOURCE:
        try:
            check_synthetic_dataset_record(record, dataset_pairing(info), generator_version(info))
        except ValueError as e:
            raise DataError(f"{TWIN_FILE}: {e} (the synthetic twin's record)", eid, episode_file(root, eid, TWIN_FILE),
                            kind="bad_twin") from None


def camera_width(cfg: Config, cameras: int) -> int:
    """The width one camera is brought to: a policy config's ``data.width`` holds every camera side by side; a
    world-model config (``data check`` with a preset) gives one camera's width."""
    return cfg.data.width // cameras if cfg.model.action_head else cfg.data.width


def check_policy_cameras(info: dict, cfg: Config, path: Path) -> int:
    """The config's ``policy.cameras`` must not exceed the cameras info.json names (the video is cut into that
    many; the policy reads the first ``policy.cameras``: external, then wrist); DataError ``camera_mismatch``
    otherwise. Returns ``policy.cameras``."""
    cams = len(info["cameras"])
    if cfg.policy.cameras > cams:
        raise DataError(f"field 'cameras' names {cams} cameras {info['cameras']}; the policy observes "
                        f"policy.cameras = {cfg.policy.cameras} cameras side by side; write the dataset with that "
                        "many cameras (or set --policy.cameras to at most its count)", path=path,
                        kind="camera_mismatch")
    return cfg.policy.cameras


def validate_policy_episode(root: str | Path, info: dict, ep: EpisodeInfo, cfg: Config, target_width: int,
                            decode: bool = False, text_cache: Path | None = None) -> EpisodeSummary:
    """Every per-episode check of a policy episode (the paired checks where they apply, and the cameras against the
    video: ``camera_mismatch``); raises the first DataError found. ``target_width``: one camera's width after the
    transform; ``decode``: decode the video fully."""
    root = Path(root)
    eid = ep.episode_id
    episode_dir(root, eid)
    _check_length(root, ep)
    vpath = episode_file(root, eid, POLICY_VIDEO)
    n, h, w = read_video(vpath, eid).shape[:3] if decode else probe_video(vpath, eid)
    cams, cam_w = len(info["cameras"]), info["width"]
    if w != cams * cam_w:
        raise DataError(f"video is {w} px wide; info.json names {cams} cameras of width {cam_w} ({cams * cam_w} px "
                        "side by side)", eid, vpath, kind="camera_mismatch")
    _check_frame_count(n, ep, vpath)
    check_resolution(h, cam_w, cfg.data.height, target_width, eid, vpath)
    actions, states = _check_lowdim(root, ep, n, cfg, read_policy_lowdim)
    _check_text(root, ep, cfg, decode, text_cache)
    return _summary(ep, h, cam_w, True, False, actions, states)


# ----------------------------------------------------------------------------------------------------------------------
# Dataset-level checks
# ----------------------------------------------------------------------------------------------------------------------


def resolve_split_episodes(root: str | Path, splits: tuple[str, ...] | list[str]
                           ) -> tuple[list[tuple[str, str]], dict[str, EpisodeInfo], list[DataError]]:
    """([(split, id)] in order, the episode index, [DataError for unknown/duplicate ids]) for ``splits``."""
    root = Path(root)
    episodes = read_episodes(root)
    counts = episode_id_counts(root)
    all_splits = read_splits(root)
    where: dict[str, list[str]] = {}
    for s, ids in all_splits.items():
        for eid in ids:
            where.setdefault(eid, []).append(s)
    index_path, splits_path = meta_dir(root) / "episodes.jsonl", meta_dir(root) / "splits.json"
    order, problems, seen = [], [], set()
    for s in splits:
        if s not in all_splits:
            raise DataError(f"split {s!r} is unknown; expected one of {list(all_splits)}", path=splits_path,
                            kind="bad_meta")
        for eid in all_splits[s]:
            if eid in seen:
                continue
            seen.add(eid)
            if not is_plain_id(eid):
                problems.append(DataError(f"episode id {eid!r} in split {s!r} is not a plain name (no '/', '\\', "
                                          "'..', absolute paths or control characters)", repr(eid), splits_path,
                                          kind="bad_episode_id"))
            elif eid not in episodes:
                problems.append(DataError(f"listed in split {s!r} but absent from episodes.jsonl", eid, splits_path,
                                          kind="unknown_episode"))
            elif counts.get(eid, 0) > 1:
                problems.append(DataError(f"episode id appears {counts[eid]} times; expected once", eid, index_path,
                                          kind="duplicate_episode"))
            elif len(where[eid]) > 1:
                problems.append(DataError(f"episode id is listed {len(where[eid])} times in splits "
                                          f"{where[eid]}; expected once", eid, splits_path, kind="duplicate_episode"))
            else:
                order.append((s, eid))
    return order, episodes, problems


# ----------------------------------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class CheckReport:
    root: str
    preset: str
    kind: str = "paired"  # "paired" or "policy, N cameras"
    splits: dict = field(default_factory=dict)  # split -> {"episodes", "frames", "paired", "masks"}
    windows: dict = field(default_factory=dict)  # preset -> {"window_steps", "windows", "too_short"}
    action_range: tuple = ((), ())
    state_range: tuple = ((), ())
    resolutions: dict = field(default_factory=dict)  # "HxW" -> episodes
    text_coverage: tuple = (0, 0)  # (instructions with an embedding, distinct instructions)
    skipped: list = field(default_factory=list)  # (episode, kind, message)

    @property
    def ok(self) -> bool:
        return not self.skipped

    def format(self) -> str:
        lines = [f"dataset {self.root} ({self.kind}; checked with preset {self.preset})"]
        for s, v in self.splits.items():
            pairs = (f"  {v['paired']:>6} paired  {v['masks']:>6} with arm masks" if self.kind.startswith("paired")
                     else "")
            lines.append(f"  {s:<9} {v['episodes']:>6} episodes  {v['frames']:>8} frames{pairs}")
        lines.append("  resolutions: " + ", ".join(f"{k} ({v} episodes)" for k, v in self.resolutions.items()))
        for name, v in self.windows.items():
            lines.append(f"  preset {name:<14} window {v['window_steps']:>4} steps: {v['windows']:>8} distinct "
                         f"windows, {v['too_short']} episodes too short")
        fmt = lambda xs: "[" + ", ".join(f"{x:.4g}" for x in xs) + "]"  # noqa: E731
        lines.append(f"  actions min {fmt(self.action_range[0])}\n          max {fmt(self.action_range[1])}")
        lines.append(f"  states  min {fmt(self.state_range[0])}\n          max {fmt(self.state_range[1])}")
        lines.append(f"  text cache: {self.text_coverage[0]}/{self.text_coverage[1]} instructions embedded")
        for eid, kind, msg in self.skipped:
            lines.append(f"  skipped [{kind}] {msg}")
        lines.append("dataset OK" if self.ok else f"{len(self.skipped)} bad episodes skipped; the rest is OK")
        return "\n".join(lines)


def check_dataset(root: str | Path, cfg: Config, skip_bad: bool = False) -> CheckReport:
    """Validate every episode of every split (videos decoded) of a paired or a policy dataset (its info.json says
    which). Raises the first DataError unless ``skip_bad``."""
    root = Path(root)
    policy = is_policy_dataset(root)
    info = read_policy_info(root) if policy else read_info(root)
    cams = check_policy_cameras(info, cfg, meta_dir(root) / "info.json") if policy else 1
    stats = read_stats(root)
    Normalizer(stats).check_dims(cfg.data.action_dim, cfg.data.state_dim, str(meta_dir(root) / "stats.json"))
    cache = cache_dir(root, cfg.data.text_cache)
    check_text_cache(cache, cfg)
    order, episodes, problems = resolve_split_episodes(root, ("train", "val", "sim_pool"))
    report = CheckReport(str(root), cfg.preset, f"policy, {len(info['cameras'])} cameras" if policy
                         else "paired" + (f", views {', '.join(dataset_views(info))}" if "views" in info else ""))

    def bad(e: DataError) -> None:
        report.skipped.append(skip_or_raise(e, skip_bad))

    for e in problems:
        bad(e)
    good: list[tuple[str, EpisodeSummary]] = []
    for split, eid in order:
        try:
            if policy:
                summary = validate_policy_episode(root, info, episodes[eid], cfg, camera_width(cfg, cams),
                                                  decode=True, text_cache=cache)
            else:
                summary = validate_episode(root, info, episodes[eid], cfg, split in PAIRED_SPLITS, decode=True,
                                           text_cache=cache, views=dataset_views(info))
            good.append((split, summary))
        except DataError as e:
            bad(e)
    if not good:
        raise DataError("no valid episode in splits train, val, sim_pool", path=meta_dir(root) / "splits.json",
                        kind="empty_split")
    for s in ("train", "val", "sim_pool"):
        eps = [g for sp, g in good if sp == s]
        report.splits[s] = {"episodes": len(eps), "frames": sum(g.length for g in eps),
                            "paired": sum(g.has_real for g in eps), "masks": sum(g.has_mask for g in eps)}
    for g in (g for _, g in good):
        key = f"{g.height}x{g.width}"
        report.resolutions[key] = report.resolutions.get(key, 0) + 1
    for name, make in PRESETS.items():
        ws = make().data.window_steps
        report.windows[name] = {"window_steps": ws, "windows": sum(max(0, g.length - ws + 1) for _, g in good),
                                "too_short": sum(g.length < ws for _, g in good)}
    report.action_range = (np.min([g.action_min for _, g in good], 0).tolist(),
                           np.max([g.action_max for _, g in good], 0).tolist())
    report.state_range = (np.min([g.state_min for _, g in good], 0).tolist(),
                          np.max([g.state_max for _, g in good], 0).tolist())
    instructions = {episodes[eid].instruction for _, eid in order}
    report.text_coverage = (sum(has_embedding(cache, t) for t in instructions), len(instructions))
    return report
