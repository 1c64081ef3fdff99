"""An episode's start as the robot's digital twin sees it, and a window's frame layout (``simforcing.twin``: the twin
in the loop; ``data.synthetic.twin``: the synthetic benchmark's twin)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np


@dataclass
class TwinEpisode:
    """One episode's start as a twin sees it. ``state`` (S,) raw (dataset units); ``record`` the episode's twin record
    (``{"camera": {...}}``); ``target`` the controller's commanded target at the start when the environment knows it
    (the synthetic benchmark's: (pos (3,), rpy (3,), grip)); None: the state's own pose."""

    state: np.ndarray
    record: dict
    target: Optional[tuple] = None


def window_frame_steps(num_actions: int, stride: int) -> list[int]:
    """The action counts after which a window's frames are rendered: 0 (now), stride, 2·stride, …, num_actions."""
    if stride < 1 or num_actions < stride or num_actions % stride:
        raise ValueError(f"a window of {num_actions} actions with frame stride {stride}: expected a positive multiple "
                         "of the stride")
    return list(range(0, num_actions + 1, stride))


# ----------------------------------------------------------------------------------------------------------------------
# Twin records are data: checked wherever one is read (``data.format.read_twin_record``, ``twin.TwinLoop``, the API)
# ----------------------------------------------------------------------------------------------------------------------

SYNTHETIC_CAMERA = {"lookat": 3, "distance": None, "azimuth": None, "elevation": None}  # None: one number


def _number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _non_finite(value: Any, where: str) -> Optional[str]:
    """The first number in ``value`` (nested dicts and lists) that is NaN or infinite, as "where: value"; None."""
    if _number(value):
        return None if math.isfinite(float(value)) else f"{where} is {value!r}"
    if isinstance(value, dict):
        parts = [(f"{where}.{k}", v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        parts = [(f"{where}[{i}]", v) for i, v in enumerate(value)]
    else:
        return None
    for name, v in parts:
        bad = _non_finite(v, name)
        if bad:
            return bad
    return None


def check_twin_record(record: Any, episode_id: Optional[str] = None) -> dict:
    """A twin record as every renderer needs it, else a ValueError saying what is wrong: a JSON object (its
    ``camera``, when present, an object), every number in it finite (no NaN, no infinity), and — when it names its
    episode (``episode_id``, which records carry since ``data.format.write_twin_record`` writes it) —
    ``episode_id``'s. What the camera holds beyond that is the renderer's own (:func:`check_synthetic_camera` for the synthetic
    twin)."""
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object {{\"camera\": {{...}}}}; got a {type(record).__name__}")
    cam = record.get("camera")
    if "camera" in record and not isinstance(cam, dict):
        raise ValueError(f"'camera' must be an object (the episode's camera in the renderer's terms); got "
                         f"{type(cam).__name__} {repr(cam)[:60]}")
    bad = next((b for b in (_non_finite(v, str(k)) for k, v in record.items()) if b), None)
    if bad:
        raise ValueError(f"{bad}; every number of a twin record must be finite")
    own = record.get("episode_id")
    if own is not None and episode_id is not None and own != episode_id:
        raise ValueError(f"it is the record of episode {own!r}, not of {episode_id!r} (copied from another "
                         "episode?); the twin would render another camera")
    return record


def check_synthetic_camera(record: dict) -> tuple[tuple[float, float, float], float, float, float]:
    """(lookat, distance, azimuth, elevation) of the synthetic benchmark's camera, each checked: ``lookat`` three
    finite numbers, ``distance`` a finite number > 0, ``azimuth`` and ``elevation`` finite numbers (degrees); a
    ValueError naming the field otherwise."""
    check_twin_record(record)
    cam = record.get("camera")
    if not isinstance(cam, dict):
        raise ValueError("no 'camera' object; the synthetic twin's record is {\"camera\": {lookat, distance, "
                         "azimuth, elevation}}")
    missing = [f for f in SYNTHETIC_CAMERA if f not in cam]
    if missing:
        raise ValueError(f"camera lacks {', '.join(missing)}; the synthetic twin's camera is "
                         "{lookat: [x, y, z], distance, azimuth, elevation}")
    look = cam["lookat"]
    if not isinstance(look, (list, tuple)) or len(look) != 3 or not all(_number(v) for v in look):
        raise ValueError(f"camera.lookat: expected three numbers [x, y, z]; got {look!r}")
    for f in ("distance", "azimuth", "elevation"):
        if not _number(cam[f]):
            raise ValueError(f"camera.{f}: expected a number; got {cam[f]!r}")
    if not float(cam["distance"]) > 0:
        raise ValueError(f"camera.distance: expected a distance > 0; got {cam['distance']!r}")
    return (tuple(float(v) for v in look), float(cam["distance"]), float(cam["azimuth"]),  # type: ignore[return-value]
            float(cam["elevation"]))


def check_twin_episode(episode: Any, state_dim: Optional[int] = None, name: str = "twin") -> "TwinEpisode":
    """A :class:`TwinEpisode` given by a caller (the Python API): its state finite (and ``state_dim`` wide), its
    target finite, its record checked (:func:`check_twin_record`); a ValueError naming ``name`` otherwise."""
    if not isinstance(episode, TwinEpisode):
        raise ValueError(f"{name}: expected a simforcing.twin.TwinEpisode (the episode's start for the digital twin); "
                         f"got {type(episode).__name__}")
    try:
        state = np.asarray(episode.state, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}.state: expected numbers; got {episode.state!r}") from e
    if state.ndim != 1 or (state_dim is not None and state.shape[0] != state_dim):
        raise ValueError(f"{name}.state: expected a vector of {state_dim or 'S'} numbers; got shape {state.shape}")
    if not np.all(np.isfinite(state)):
        raise ValueError(f"{name}.state: holds NaN or inf ({state.tolist()}); expected finite numbers")
    if episode.target is not None:
        try:
            flat = np.concatenate([np.ravel(np.asarray(t, dtype=np.float64)) for t in episode.target])
        except (TypeError, ValueError) as e:
            raise ValueError(f"{name}.target: expected numbers; got {episode.target!r}") from e
        if not np.all(np.isfinite(flat)):
            raise ValueError(f"{name}.target: holds NaN or inf; expected finite numbers")
    try:
        check_twin_record(episode.record)
    except ValueError as e:
        raise ValueError(f"{name}.record: {e}") from None
    return episode
