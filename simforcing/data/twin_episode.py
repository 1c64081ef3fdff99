"""An episode's start as the robot's digital twin sees it, and a window's frame layout (``simforcing.twin``: the twin
in the loop; ``data.synthetic.twin``: the synthetic benchmark's twin)."""

from __future__ import annotations

import json
import math
import re
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

    @property
    def has_scene(self) -> bool:
        """The record holds the episode's full-scene simulation (``data synth --pairing scene``), not the arm alone."""
        return isinstance(self.record, dict) and "scene" in self.record


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


# the synthetic twin's full-scene record (``data synth --pairing scene``: ``scene.SimScene.to_record``)
SCENE_GEOMS = {"box": 3, "sphere": 1, "cylinder": 2}  # MJCF type -> number of half-sizes
RESERVED_NAMES = {"world", "floor", "table", "hand", "finger_l", "finger_r", "link1", "link2", "link3", "link4",
                  "link5"}
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
TABLE_XY = ((-0.18, 0.78), (-0.6, 0.6))  # the table top's extent (m): an object rests on it


def _numbers(value: Any, n: int, where: str, positive: bool = False) -> list:
    if not isinstance(value, (list, tuple)) or len(value) != n or not all(_number(v) for v in value):
        raise ValueError(f"{where}: expected {n} number{'s' if n > 1 else ''}; got {value!r:.80}")
    if positive and not all(float(v) > 0 for v in value):
        raise ValueError(f"{where}: expected numbers > 0; got {value!r:.80}")
    return [float(v) for v in value]


def _scene_object(o: Any, where: str) -> str:
    """One object of a scene record checked; its name."""
    if not isinstance(o, dict):
        raise ValueError(f"{where}: expected an object {{name, shape, geom, size, rgb, pos, yaw, mass, friction}}; "
                         f"got {type(o).__name__}")
    missing = [f for f in ("name", "shape", "geom", "size", "rgb", "pos", "yaw", "mass", "friction") if f not in o]
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)}")
    name = o["name"]
    if not isinstance(name, str) or not _NAME.match(name) or name in RESERVED_NAMES or name.startswith("arm_"):
        raise ValueError(f"{where}.name: got {name!r}; expected a plain name (a letter, then letters, digits or _; "
                         f"up to 32) that is not one of the arm's or the table's ({', '.join(sorted(RESERVED_NAMES))}, "
                         "arm_*)")
    if not isinstance(o["shape"], str) or not isinstance(o.get("colour", ""), str):
        raise ValueError(f"{where}.shape / colour: expected strings; got {o['shape']!r} / {o.get('colour')!r}")
    if o["geom"] not in SCENE_GEOMS:
        raise ValueError(f"{where}.geom: got {o['geom']!r}; expected one of {', '.join(SCENE_GEOMS)}")
    size = _numbers(o["size"], SCENE_GEOMS[o["geom"]], f"{where}.size (half-sizes of a {o['geom']}, metres)", True)
    if max(size) > 0.2:
        raise ValueError(f"{where}.size: got {size}; expected half-sizes of a tabletop object (at most 0.2 m)")
    rgb = _numbers(o["rgb"], 3, f"{where}.rgb")
    if not all(0.0 <= c <= 1.0 for c in rgb):
        raise ValueError(f"{where}.rgb: got {rgb}; expected three numbers in [0, 1]")
    x, y = _numbers(o["pos"], 2, f"{where}.pos (x, y on the table, metres)")
    if not (TABLE_XY[0][0] <= x <= TABLE_XY[0][1] and TABLE_XY[1][0] <= y <= TABLE_XY[1][1]):
        raise ValueError(f"{where}.pos: got {[x, y]}; expected a point on the table (x in {TABLE_XY[0]}, "
                         f"y in {TABLE_XY[1]})")
    if not _number(o["yaw"]):
        raise ValueError(f"{where}.yaw: expected a number (radians); got {o['yaw']!r}")
    if not _number(o["mass"]) or not 0 < float(o["mass"]) <= 10:
        raise ValueError(f"{where}.mass: got {o['mass']!r}; expected a mass in (0, 10] kg")
    friction = _numbers(o["friction"], 3, f"{where}.friction (sliding, torsional, rolling)")
    if friction[0] <= 0 or min(friction) < 0:
        raise ValueError(f"{where}.friction: got {friction}; expected a sliding friction > 0 and the others >= 0")
    return name


def check_synthetic_scene(record: dict) -> dict:
    """The full-scene part of a synthetic twin record (``record["scene"]``, written by ``data synth --pairing
    scene``), else a ValueError naming the field: ``objects`` a non-empty list of objects with distinct plain names,
    an MJCF geom (box, sphere, cylinder) with its number of half-sizes > 0, an rgb in [0, 1], a position on the table,
    a yaw, a mass > 0 and a (sliding > 0, torsional, rolling) friction; ``servo_gains`` six (kp, kv) pairs > 0 (the arm
    joints), ``finger_gains`` one. Returns the scene. A record without ``scene`` is the arm alone (nothing checked)."""
    scene = record.get("scene")
    if not isinstance(scene, dict):
        raise ValueError(f"'scene' must be an object {{objects, servo_gains, finger_gains}}; got "
                         f"{type(scene).__name__}")
    objects = scene.get("objects")
    if not isinstance(objects, list) or not objects or len(objects) > 16:
        raise ValueError(f"scene.objects: expected a list of 1 to 16 objects; got {objects!r:.80}")
    names = [_scene_object(o, f"scene.objects[{i}]") for i, o in enumerate(objects)]
    if len(set(names)) != len(names):
        raise ValueError(f"scene.objects: names {names} repeat one; every object needs its own")
    gains = scene.get("servo_gains")
    if not isinstance(gains, list) or len(gains) != 6:
        raise ValueError(f"scene.servo_gains: expected six [kp, kv] pairs (the arm's joints); got {gains!r:.80}")
    for i, g in enumerate(gains):
        _numbers(g, 2, f"scene.servo_gains[{i}] ([kp, kv])", True)
    _numbers(scene.get("finger_gains"), 2, "scene.finger_gains ([kp, kv])", True)
    gap = scene.get("physics_gap", 0.0)
    if not _number(gap) or float(gap) < 0:
        raise ValueError(f"scene.physics_gap: got {gap!r}; expected a scale >= 0")
    return scene


def check_synthetic_mesh(record: dict) -> tuple[int, int]:
    """The tessellation (numslices, numstacks) of the round geoms the episode's simulation video was rendered with:
    the record's ``mesh`` (``scene.MESH`` since generator version 5), MuJoCo's default where the record has no such
    field (generator <= 4); a ValueError naming the field otherwise (a null too: no generator writes one)."""
    from simforcing.data.synthetic.scene import DEFAULT_MESH, MESH

    if "mesh" not in record:
        return DEFAULT_MESH
    mesh = record["mesh"]
    ok = (isinstance(mesh, list) and len(mesh) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                           for v in mesh)
          and 3 <= mesh[0] <= 64 and 2 <= mesh[1] <= 64)
    if not ok:
        raise ValueError(f"mesh: got {json.dumps(mesh, default=str)[:60]}; expected [numslices, numstacks], two "
                         "integers (3–64, 2–64): the tessellation the simulation videos were rendered with "
                         f"({list(MESH)} since generator version {MESH_SINCE}; without the field, MuJoCo's default "
                         f"{list(DEFAULT_MESH)})")
    return mesh[0], mesh[1]


def check_synthetic_record(record: dict) -> dict:
    """A synthetic twin record as the synthetic twin renders it, else a ValueError naming the field: its camera
    (:func:`check_synthetic_camera`), its mesh (:func:`check_synthetic_mesh`) and, in a full-scene record, its scene
    (:func:`check_synthetic_scene`). Nothing is rendered (MuJoCo is not imported)."""
    check_synthetic_camera(record)
    check_synthetic_mesh(record)
    if "scene" in record:
        check_synthetic_scene(record)
    return record


SYNTHETIC_SOURCE = "simforcing-synth"  # info.json "source" of a `data synth` dataset: its twin is the synthetic one
MESH_SINCE = 5  # the generator version (info.json synth.version) since which twin.json names its mesh


def check_synthetic_dataset_record(record: dict, pairing: str, version: Optional[int]) -> dict:
    """A synthetic twin record (:func:`check_synthetic_record`) that renders what its dataset's simulation videos show,
    else a ValueError saying what differs: the record's pairing (``scene`` or not) the dataset's ``pairing``
    (``data.format.dataset_pairing``: an arm-only record rendered the arm alone against videos of the whole scene, or
    the reverse) and, where the dataset says which generator made it (``version``,
    ``data.format.generator_version``), its mesh that generator's — named since version
    5, absent before (a record without it would render at MuJoCo's default tessellation against videos rendered at
    ``scene.MESH``, or the reverse: edge pixels off, a PSNR that read as the twin's)."""
    from simforcing.data.synthetic.scene import DEFAULT_MESH

    def shows(full: bool) -> str:
        return "the whole scene" if full else "the arm alone"

    scene = pairing == "scene"
    if ("scene" in record) != scene:
        raise ValueError(f"a record of {shows('scene' in record)} in a dataset whose simulation videos show "
                         f"{shows(scene)} (meta/info.json pairing): the twin would render the one against the other; "
                         "write records of the dataset's pairing (`data synth --pairing`)")
    check_synthetic_record(record)
    if version is not None:
        if version >= MESH_SINCE and "mesh" not in record:
            raise ValueError(f"no 'mesh': the dataset's generator (meta/info.json synth.version {version}) rendered "
                             f"its simulation videos at a tessellation every record names (since version "
                             f"{MESH_SINCE}); without it the twin renders at MuJoCo's default — restore the field "
                             "(the record of `data synth`) or synthesize again")
        if version < MESH_SINCE and check_synthetic_mesh(record) != DEFAULT_MESH:
            raise ValueError(f"mesh: {record['mesh']}, but the dataset's generator (meta/info.json synth.version "
                             f"{version}) rendered its simulation videos at MuJoCo's default tessellation "
                             f"{list(DEFAULT_MESH)}; remove the field (records of version < {MESH_SINCE} have none)")
    return record


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
