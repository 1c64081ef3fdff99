"""The robot's digital twin in the loop (beyond the paper): simulation-domain frames of commanded actions.

SimForcing's training data pairs every real video with a simulation video of the same actions, rendered by a
simulator of the robot — its digital twin: the arm alone on the simulation's background, seen from the real camera's
pose. At inference the paper's sampler makes that condition itself (the student's own simulation rollout, SPEC §5
step 2), and over a long rollout that chain drifts. A user who owns the twin can render the condition instead, exactly,
for any commanded actions, chunk after chunk: ``sample.condition = render``.

    twin = make_renderer(cfg, height, width)                    # a SimRenderer (``sample.twin``)
    first = twin.start([TwinEpisode(state0, record), ...])      # (B, H, W, 3) uint8: each twin at its start
    frames = twin.window(actions, stride, keep=n)               # (B, F, H, W, 3) uint8: now + every stride actions

    loop = TwinLoop(twin, episodes, cfg)                        # the sampler's condition, window after window
    c = loop.window(actions, keep=n)                            # (B, 3, F, H, W) in [-1, 1] at the model's size

A :class:`SimRenderer` keeps one twin per episode and promises:

- ``start(episodes)``: each twin at the episode's start — its robot state (dataset units) and its twin record (the
  dataset's ``episodes/<id>/twin.json``: the camera in the renderer's own terms), optionally the controller's commanded
  target when it is not the state's pose (a closed-loop environment knows it) — and that first frame;
- ``window(actions, stride, keep)``: raw actions (B, A_w, A) from the current state: the frame now, then one frame
  after every ``stride`` actions (F = A_w / stride + 1 frames, the data's window layout), rendered as the training
  data's simulation videos were; each twin then advances by its first ``keep`` actions only (the executed ones; the
  rest of a window is the plan or the hold actions that fill it, ``simforcing.rollout``);
- frames at the size it was built for (the data's ``height × width``), uint8, deterministic for the same inputs.

The synthetic benchmark's twin is :class:`simforcing.data.synthetic.twin.SyntheticTwin` (``sample.twin = synthetic``):
the benchmark's own controller and servos driving what the episode's record holds — the MuJoCo arm alone (the
Bridge-like pairing, ``{"camera"}``), or the episode's whole simulated scene, objects moved by the simulator's own
physics (``data synth --pairing scene``, ``{"camera", "scene"}``). For your own robot, write a class with these
three methods (an MJCF or URDF of the arm in the simulator the paired data was rendered with, the camera per episode
in ``twin.json``, the controller that turns one action into joint targets), register ``factory(height, width) ->
SimRenderer`` under a name (:func:`register_renderer`, or an entry point of group ``simforcing.twins`` in your
package for the command line) and select it with ``--sample.twin=NAME``; ``simforcing data check-twin`` measures how well it renders the
recorded simulation videos again (docs/GUIDE.md "The twin in the loop").
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Sequence

import numpy as np
import torch

from simforcing.config import Config, ConfigError
from simforcing.data.twin_episode import (TwinEpisode, check_synthetic_camera, check_synthetic_scene,  # noqa: F401
                                          check_synthetic_dataset_record, check_synthetic_record, check_twin_episode,
                                          check_twin_record, window_frame_steps)
from simforcing.data.format import DEFAULT_VIEW
from simforcing.errors import DataError

SYNTHETIC = "synthetic"


class SimRenderer(Protocol):
    """Simulation-domain frames of commanded actions (module docstring)."""

    height: int
    width: int

    def start(self, episodes: Sequence[TwinEpisode]) -> np.ndarray: ...

    def window(self, actions: np.ndarray, stride: int, keep: int) -> np.ndarray: ...

    def close(self) -> None: ...


ENTRY_POINTS = "simforcing.twins"  # the entry-point group an installed package registers its twins in
_REGISTERED: dict[str, Callable[[int, int], SimRenderer]] = {}


def register_renderer(name: str, factory: Callable[[int, int], SimRenderer]) -> None:
    """Make ``factory(height, width) -> SimRenderer`` the twin ``sample.twin = name`` (Python API; from the command
    line a package registers it as an entry point of group ``simforcing.twins``)."""
    if not name or name == SYNTHETIC or not callable(factory):
        raise ValueError(f"register_renderer: got name {name!r} and factory {factory!r}; expected a new name (not "
                         f"{SYNTHETIC!r}) and a callable factory(height, width)")
    _REGISTERED[name] = factory


def _factory(name: str) -> Callable[[int, int], SimRenderer]:
    """The factory of twin ``name``: built in, registered, or an installed package's entry point (a config value
    never imports a module of its own choosing)."""
    if name == SYNTHETIC:
        from simforcing.data.synthetic.twin import SyntheticTwin  # MuJoCo loads only here

        return SyntheticTwin
    if name in _REGISTERED:
        return _REGISTERED[name]
    found = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINTS) if ep.name == name]
    if not found:
        known = sorted({SYNTHETIC, *_REGISTERED, *(ep.name for ep in importlib.metadata.entry_points(
            group=ENTRY_POINTS))})
        raise ConfigError(f"sample.twin: got {name!r}; expected one of {', '.join(known)} — your robot's twin is "
                          f"registered with simforcing.twin.register_renderer(name, factory) or as an entry point of "
                          f"group {ENTRY_POINTS!r} in your package (docs/GUIDE.md \"The twin in the loop\")")
    return found[0].load()


def check_record(name: str, record: dict, episode_id: Optional[str] = None) -> dict:
    """A twin record as twin ``name`` needs it, else a ValueError saying what is wrong: the checks every renderer
    needs (``data.twin_episode.check_twin_record``: an object holding a camera object, every number finite, the
    episode it names ``episode_id``), then the renderer's own — the synthetic twin's (``check_synthetic_record``: its
    camera — lookat three numbers, a distance > 0, azimuth, elevation —, its mesh and, in a full-scene record, its
    scene — the objects, their physics, the servo gains), a registered factory's ``check_record(record)`` when it has
    one. Nothing is rendered or loaded (the synthetic twin's MuJoCo neither)."""
    check_twin_record(record, episode_id)
    if name == SYNTHETIC:
        return check_synthetic_record(record)
    check = getattr(_factory(name), "check_record", None)
    if callable(check):
        check(record)
    return record


def read_dataset_records(cfg: Config, root, episode_ids: Sequence[str]) -> list[dict]:
    """The twin records of the episodes ``episode_ids`` of dataset ``root``, each checked for ``cfg.sample.twin``
    (:func:`check_record`) before anything is rendered: DataError ``missing_file`` / ``bad_twin`` naming the episode
    and its twin.json. A synthetic twin's record that would not render what the dataset's simulation videos show is
    ``bad_twin`` too (``check_synthetic_dataset_record``: the other pairing than the dataset's — an arm-only record in
    a full-scene dataset rendered the arm alone against videos of the whole scene —, or a mesh its generator did not
    render at), a low PSNR that read as the twin's."""
    from simforcing.data.format import (TWIN_FILE, dataset_pairing, episode_file, generator_version, read_info,
                                        read_twin_record)

    info = read_info(root)
    pairing, version = dataset_pairing(info), generator_version(info)
    records = []
    for eid in episode_ids:
        record = read_twin_record(root, eid)
        try:
            if str(cfg.sample.twin) == SYNTHETIC:
                check_synthetic_dataset_record(record, pairing, version)
            check_record(str(cfg.sample.twin), record, eid)
        except ValueError as e:
            raise DataError(f"{TWIN_FILE}: {e} (twin {cfg.sample.twin!r})", eid, episode_file(root, eid, TWIN_FILE),
                            kind="bad_twin") from None
        records.append(record)
    return records


CONDITION_SOURCES = {"render": "the digital twin", "oracle": "the recorded simulation video"}


def check_twin_can_act(cfg: Config, where: str, condition: str = "render") -> None:
    """ConfigError when the condition ``condition`` would be read by nothing: a world model trained without a
    simulation condition (``conditioning.p`` 0: sft, joint_fm, the distillation baselines) samples as w = 0
    (``sample.effective_w``), as does ``sample.w`` 0 — the twin would render frames (the oracle encode a recorded
    video) its sampler never looks at, and the result would carry the condition's name for a w = 0 sample."""
    from simforcing.sample import effective_w

    if condition not in CONDITION_SOURCES or effective_w(cfg, cfg.sample.w) != 0.0:
        return
    if cfg.conditioning.p == 0.0:
        why = (f"was trained without a simulation condition (train.method {cfg.train.method!r}, conditioning.p 0): "
               "its sampler runs as w = 0 and never reads the condition")
    else:
        why = "samples with sample.w = 0: the conditional branch, the only one that reads the condition, is off"
    raise ConfigError(f"sample.condition={condition}: the world model {where} {why}, so {CONDITION_SOURCES[condition]} "
                      "cannot act on it; sample it with sample.condition=rollout, or use a world model trained "
                      "with the condition (train.method simforcing) at w > 0")


def twin_views(cfg: Config) -> tuple[str, ...]:
    """The cameras a twin renders for ``cfg``'s world model: its ``data.views`` — () for a one-view model, whose twin
    renders the one camera its records name (every renderer's default)."""
    names = cfg.data.view_names
    return () if names in ((), (DEFAULT_VIEW,)) else names


def make_renderer(cfg: Config, height: int, width: int, views: Optional[Sequence[str]] = None) -> SimRenderer:
    """The renderer ``cfg.sample.twin`` names (:func:`_factory`), rendering ``height × width`` frames of each view —
    the size the dataset's simulation videos were recorded at (its info.json); the sampler transforms them as training
    transforms recorded frames. ``views`` (default :func:`twin_views`): a multi-view world model's cameras, which the
    renderer draws side by side in every frame (``factory(height, width, views=...)``; it says which in its ``views``):
    a renderer that cannot draw them all is a ConfigError naming it and the views it lacks."""
    name = str(cfg.sample.twin)
    views = tuple(twin_views(cfg) if views is None else views)
    if views:
        try:
            renderer = _factory(name)(int(height), int(width), views=views)
        except TypeError as e:
            raise ConfigError(f"sample.twin: {name!r} renders one camera (its factory takes no views: {e}); the world "
                              f"model predicts the views {', '.join(views)} (data.views) — give the twin's factory a "
                              "views argument and draw them side by side, or use a one-view world model") from None
        got = tuple(getattr(renderer, "views", ()) or ())
        if got != views:
            renderer.close()
            raise ConfigError(f"sample.twin: {name!r} renders the views {', '.join(got) or '(none named)'}; the world "
                              f"model predicts {', '.join(views)} (data.views), in that order")
    else:
        renderer = _factory(name)(int(height), int(width))
    missing = [m for m in ("start", "window", "close") if not callable(getattr(renderer, m, None))]
    if missing:
        raise ConfigError(f"sample.twin: {name!r} returned a {type(renderer).__name__} without {', '.join(missing)}; "
                          "expected a SimRenderer (simforcing.twin)")
    return renderer


def views_of_frames(frames: np.ndarray, views: int) -> list[np.ndarray]:
    """A renderer's frames (..., H, V·W, 3), its views side by side, -> V arrays (..., H, W, 3)."""
    if views <= 1:
        return [frames]
    if frames.shape[-2] % views:
        raise ValueError(f"the twin's frames are {frames.shape[-2]} pixels wide, not {views} views of one width")
    return np.split(frames, views, axis=-2)


class TwinLoop:
    """A renderer driven window by window as the sampler's condition (``sample.condition = render``): B episodes'
    twins, started at their episodes' starts on the first window. :meth:`window` renders a window of raw commanded
    actions (B, A_w, A) from the twins' current state — the frame now, then one every ``data.frame_stride`` actions,
    transformed to the model's ``data.height × data.width`` as the dataset transforms recorded frames — and advances
    each twin by the first ``keep`` actions (the executed ones). ``executed`` keeps what the twins were given to
    execute, window after window (raw (B, keep, A) each)."""

    def __init__(self, renderer: SimRenderer, episodes: Sequence[TwinEpisode], cfg: Config):
        for i, e in enumerate(episodes):  # every reader's twin checked before the renderer sees it (ValueError)
            check_twin_episode(e, cfg.data.state_dim, f"twin episode {i}")
            try:
                check_record(str(cfg.sample.twin), e.record)
            except ValueError as err:
                raise ValueError(f"twin episode {i}.record: {err}") from None
        self.renderer, self.episodes = renderer, list(episodes)
        self.stride, self.height, self.width = cfg.data.frame_stride, cfg.data.height, cfg.data.width
        self.views, self.layout = cfg.data.num_views, cfg.data.view_layout
        self.started = False
        self.executed: list[np.ndarray] = []

    @classmethod
    def from_config(cls, cfg: Config, episodes: Sequence[TwinEpisode], height: int, width: int) -> "TwinLoop":
        """The loop of ``cfg.sample.twin``'s renderer rendering ``height × width`` frames (the size the paired
        simulation videos were recorded at; :func:`make_renderer`); the episodes are checked first."""
        renderer = make_renderer(cfg, height, width)
        try:
            return cls(renderer, episodes, cfg)
        except BaseException:
            renderer.close()
            raise

    def window(self, actions: np.ndarray, keep: int) -> torch.Tensor:
        """(B, A_w, A) raw actions -> the window's simulation video (B, 3, F, H, W) in [-1, 1] (every view brought to
        data.height × data.width and put side by side as the model's frames are: ``data.frame_hw``)."""
        from simforcing.data.paired import to_unit_range

        actions = np.asarray(actions, dtype=np.float64)
        if actions.shape[0] != len(self.episodes):
            raise ValueError(f"twin window: got actions for {actions.shape[0]} episodes; the twin holds "
                             f"{len(self.episodes)}")
        if not self.started:
            self.renderer.start(self.episodes)
            self.started = True
        frames = self.renderer.window(actions, self.stride, keep=int(keep))  # (B, F, h, V·w, 3) uint8
        self.executed.append(actions[:, :keep].copy())
        return to_unit_range(torch.stack([self.model_frames(f) for f in frames]))  # (B, 3, F, H, W)

    def model_frames(self, frames: np.ndarray) -> torch.Tensor:
        """One episode's rendered frames (F, h, V·w, 3) uint8 -> (3, F, H, W) uint8 at the model's frame size."""
        from simforcing.data.paired import compose_views, frames_to_target

        return compose_views([frames_to_target(v, self.height, self.width)
                              for v in views_of_frames(frames, self.views)], self.layout)

    def close(self) -> None:
        self.renderer.close()


def render_actions(renderer: SimRenderer, episodes: Sequence[TwinEpisode], actions: np.ndarray,
                   stride: int = 1) -> np.ndarray:
    """A whole episode's simulation video again: (B, 1 + H / stride, height, width, 3) uint8 for raw actions
    (B, H, A) from the episodes' starts (what ``data check-twin`` compares with the recorded video)."""
    first = renderer.start(episodes)
    if actions.shape[1] == 0:
        return first[:, None]
    return renderer.window(np.asarray(actions), stride, keep=actions.shape[1])


@dataclass
class TwinCheck:
    """How well a renderer renders a dataset's recorded simulation videos again (``simforcing data check-twin``):
    per episode the PSNR (dB, 0..255 frames) of every frame against the recorded one — its mean and its worst frame
    (several views: each frame's PSNR the mean of its views', and ``views`` per view)."""

    twin: str
    split: str
    episodes: list  # [{"episode_id", "instruction", "frames", "psnr_mean", "psnr_min"}]

    @property
    def worst_frame(self) -> float:
        return min(e["psnr_min"] for e in self.episodes)

    @property
    def mean(self) -> float:
        return float(np.mean([e["psnr_mean"] for e in self.episodes]))

    def to_json(self) -> dict:
        return {"twin": self.twin, "split": self.split, "psnr_mean": self.mean, "psnr_worst_frame": self.worst_frame,
                "episodes": self.episodes}


PSNR_CAP = 99.0  # dB: an exact frame (its MSE 0) counts as this


def frame_psnr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """PSNR (dB) per frame of uint8 videos (T, H, W, 3), capped at ``PSNR_CAP``."""
    mse = ((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean(axis=(1, 2, 3))
    return np.minimum(PSNR_CAP, 10 * np.log10(255.0 ** 2 / np.maximum(mse, 1e-12)))


def check_twin(cfg: Config, root, split: str = "val", num_episodes: Optional[int] = None) -> TwinCheck:
    """Render the first ``num_episodes`` episodes of ``split`` from their recorded first state and actions with the
    twin ``cfg.sample.twin`` and compare with their recorded simulation videos (:class:`TwinCheck`)."""
    from pathlib import Path

    from simforcing.data.format import (read_episode_videos, read_episodes, read_info, read_lowdim, read_splits,
                                        read_views)

    info, index = read_info(root), read_episodes(root)
    ids = read_splits(root).get(split) or []
    if not ids:
        raise ConfigError(f"--split {split}: {root} holds no episode in that split")
    ids = ids[:num_episodes] if num_episodes else ids
    missing = [eid for eid in ids if eid not in index]
    if missing:
        raise DataError(f"split {split!r} names episode {missing[0]!r}, which episodes.jsonl does not list",
                        missing[0], Path(root) / "meta" / "episodes.jsonl", kind="unknown_episode")
    records = dict(zip(ids, read_dataset_records(cfg, root, ids)))  # every camera checked before any rendering
    views = read_views(cfg.data.view_names, info, root)
    renderer = make_renderer(cfg, info["height"], info["width"])
    rows = []
    try:
        for eid in ids:
            ep = index[eid]
            actions, states = read_lowdim(root, eid)
            start, acts = states[0].astype(np.float64), actions.astype(np.float64)
            if not (np.all(np.isfinite(start)) and np.all(np.isfinite(acts))):
                raise DataError("lowdim.npz: the first state or the actions hold NaN or inf; the twin renders finite "
                                "commands only", eid, Path(root) / "episodes" / eid / "lowdim.npz", kind="non_finite")
            frames = render_actions(renderer, [TwinEpisode(start, records[eid])], acts[None])[0]
            per_view = {}
            for view, got in zip(views, views_of_frames(frames, len(views))):
                sim, _ = read_episode_videos(root, info, ep, view)
                per_view[view] = frame_psnr(got, sim[: len(got)])
            p = np.mean(list(per_view.values()), axis=0)
            row = {"episode_id": eid, "instruction": ep.instruction, "frames": int(len(p)),
                   "psnr_mean": float(p.mean()), "psnr_min": float(p.min())}
            if len(views) > 1:
                row["views"] = {v: {"psnr_mean": float(q.mean()), "psnr_min": float(q.min())}
                                for v, q in per_view.items()}
            rows.append(row)
    finally:
        renderer.close()
    return TwinCheck(cfg.sample.twin, split, rows)
