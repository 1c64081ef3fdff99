"""The synthetic benchmark (`simforcing data synth`): simulate scripted episodes in MuJoCo and write the paired
sim/real dataset.

    simforcing data synth data/synth                 # the demo set: 20 train + 16 val paired, 300 sim-only
    simforcing data synth /tmp/tiny --quick          # a tiny set for a smoke test

Each episode is simulated (the real scene: arm, table, objects) and rendered per frame from one per-episode camera
pose: **real** = the full scene with its own lights, shadows and textures plus Gaussian sensor noise, with an exact arm
mask from MuJoCo's segmentation render; **sim** = the simulation of the same actions, by ``pairing``:

- ``arm`` (the default, BridgeData V2's kind of pair): the arm's digital twin alone on black, its joints those of the
  real scene in every frame (no physics of its own: objects do not exist in it);
- ``scene`` (InternData-A1's kind, ``data synth --pairing scene``): the whole scene — arm, table, every object — in
  plain appearance, simulated by physics of its own (``scene.SimScene``: object masses, frictions, sizes and the
  servos' gains drawn per episode within ``scene.PhysicsGap`` × ``--physics-gap``), started at the real episode's
  first state and driven by its recorded actions (``twin.SyntheticTwin`` renders it, as the twin in the loop and
  ``data check-twin`` do). The same actions move the objects otherwise than in the real scene.

Episode i draws everything from ``SeedSequence([seed, i])`` (i counts train, then val, then sim_pool), so a seed fixes
the dataset and the worker count does not change it; the operator's variations and the simulation's physics draw from
streams of their own (``SeedSequence([seed, i, k])``), so an episode's real scene and scripted motion are the same
whatever they are.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import imageio.v3 as iio
import numpy as np
from tqdm import tqdm

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402  (after MUJOCO_GL is set)

from simforcing.data.synthetic.offscreen import SharedContextRenderer  # noqa: E402
from simforcing.data.synthetic.servo import FPS, SUBSTEPS, servo_frame  # noqa: E402

from simforcing.config import ConfigError  # noqa: E402
from simforcing.utils import atomic_write, staged_folder  # noqa: E402
from simforcing.data.format import (EpisodeInfo, ViewVideos, episode_file, is_dataset, read_arm_mask,  # noqa: E402
                                    read_episode_videos, read_info, write_episode, write_meta, write_twin_record)
from simforcing.data.synthetic.motions import (FAILURE_TEXT, ArmController, insert_pauses, mat_to_rpy,  # noqa: E402
                                               perturb_targets, script_motion)
from simforcing.data.synthetic.scene import (  # noqa: E402
    ARM_GEOM_PREFIX, ARM_JOINTS, EE_SITE, FINGER_JOINTS, FINGER_TRAVEL, HOME_Q, PHYSICS_GAP, TIMESTEP,
    MESH, WRIST_CAMERA, CameraPose, NOMINAL_CAMERA, draw_sim_scene, fixed_layout, paint_textures, real_xml,
    sample_appearance, sample_camera, sample_objects, sim_xml)

SIM_BACKGROUND = "black"
# the benchmark's cameras (``data synth --views``): the episode's external camera (the first view: its files are the
# one-view dataset's, byte for byte) and the wrist camera on the hand (``scene.WRIST_CAMERA``, the policy's second)
SYNTH_VIEWS = ("external", "wrist")
# 2: objects.npz beside every paired episode; layout episodes (--layout-train); 3: twin.json; 4: --pairing scene
# (twin.json's "scene", objects.npz's "sim_xyz"), --failures (episodes.jsonl's "failure"); info.json's "pairing";
# 5: round geoms rendered at scene.MESH (twin.json's "mesh"; before: MuJoCo's default tessellation)
GENERATOR_VERSION = 5
PAIRINGS = ("arm", "scene")
# the streams of an episode's own (SeedSequence([seed, index, k])): beside its scene, motion and noise (spawn(3))
NOISE_STREAM, PAUSE_STREAM, SIM_PHYSICS_STREAM, FAILURE_STREAM = 11, 13, 17, 19
WRIST_SENSOR_STREAM = 23  # the wrist camera's sensor noise (the external camera's is the episode's noise_rng)


@dataclass
class SimulatedEpisode:
    """One simulated episode. Videos uint8 (T, H, W, 3); ``real``/``arm_mask`` are None for sim-only episodes."""

    instruction: str
    kind: str
    sim: np.ndarray
    real: np.ndarray | None
    arm_mask: np.ndarray | None  # uint8 (T, H, W), 1 = arm visible in the real frame
    actions: np.ndarray  # float32 (T-1, 7)
    states: np.ndarray  # float32 (T, 7): ee position, ee roll-pitch-yaw, gripper opening in [0, 1]
    object_xyz: np.ndarray  # float32 (T, n_objects, 3): object positions (objects.npz of paired episodes)
    object_names: list[str]  # "<colour> <shape>" of task objects, "distractor" otherwise
    camera: CameraPose  # the pose both renders share (the twin record: the digital twin renders from it)
    target: int = -1  # the task's object (index into object_names)
    twin_record: dict = field(default_factory=dict)  # twin.json: {"camera"} (arm pairing), + "scene" (scene pairing)
    failure: str = ""  # "<kind>/<mode>" of a failing operator (motions.FAILURE_TEXT); "" for the scripted one
    sim_xyz: np.ndarray | None = None  # float32 (T, n_objects, 3): the simulation's objects (scene pairing)
    views: dict = field(default_factory=dict)  # every camera after the external one: {name: format.ViewVideos}


class TwinRenderer:
    """The arm's digital twin and one offscreen renderer, built once per process and reused for every episode."""

    def __init__(self, height: int, width: int):
        self.model = mujoco.MjModel.from_xml_string(sim_xml())
        self.data = mujoco.MjData(self.model)
        self.renderer = SharedContextRenderer(self.model, height, width)
        self.qadr = np.array([int(self.model.joint(j).qposadr[0]) for j in ARM_JOINTS + FINGER_JOINTS])
        self._scene = None

    def render(self, q: np.ndarray, camera) -> np.ndarray:
        """q (8,): arm + finger joint positions -> uint8 (H, W, 3) seen by ``camera`` (a pose, or a camera's name:
        ``scene.WRIST_CAMERA``)."""
        self.data.qpos[self.qadr] = q
        mujoco.mj_forward(self.model, self.data)
        self.renderer.update_scene(self.data, camera=camera)
        return self.renderer.render().copy()

    def scene(self, views: tuple[str, ...] = SYNTH_VIEWS[:1]):
        """The full-scene simulation's renderer of ``views`` (``twin.SyntheticTwin``, built on first use; ``--pairing
        scene``)."""
        if self._scene is None or self._scene.views != tuple(views):
            from simforcing.data.synthetic.twin import SyntheticTwin  # on first use: scene pairing only

            if self._scene is not None:
                self._scene.close()
            self._scene = SyntheticTwin(self.renderer.height, self.renderer.width, views=tuple(views))
        return self._scene

    def close(self) -> None:
        self.renderer.close()
        if self._scene is not None:
            self._scene.close()
            self._scene = None


class RealRenderer:
    """Colour + arm-mask renders of one episode's real model (its textures are uploaded on construction)."""

    def __init__(self, model, height: int, width: int):
        self.renderer = SharedContextRenderer(model, height, width)
        names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g) or "" for g in range(model.ngeom)]
        self.arm_geoms = np.array([g for g, n in enumerate(names) if n.startswith(ARM_GEOM_PREFIX)])

    def render(self, data, camera) -> tuple[np.ndarray, np.ndarray]:
        """-> (rgb uint8 (H, W, 3), mask uint8 (H, W)): the mask marks pixels whose front-most geom is the arm's."""
        r = self.renderer
        r.update_scene(data, camera=camera)
        rgb = r.render().copy()
        r.enable_segmentation_rendering()
        r.update_scene(data, camera=camera)
        seg = r.render()  # (H, W, 2): object id, object type
        r.disable_segmentation_rendering()
        mask = (seg[..., 1] == mujoco.mjtObj.mjOBJ_GEOM) & np.isin(seg[..., 0], self.arm_geoms)
        return rgb, mask.astype(np.uint8)

    def close(self) -> None:
        self.renderer.close()


class EpisodePhysics:
    """One episode's real scene in MuJoCo, its scripted motion and the servo loop that executes it.

    ``advance(t)`` runs the physics from frame t−1 to frame t: IK for the commanded target of frame t, then
    ``SUBSTEPS`` physics steps while the joint setpoints move linearly from the last solution to the new one
    (``drive(pos, rpy, grip)``: the same towards any commanded target).

    ``layouts`` = K > 0 (the policy benchmark's LIBERO-like mode, ``data synth-policy --layouts K``): the episode's
    task object, distractors and look are those of fixed layout ``index % K`` (:func:`scene.fixed_layout`, the same
    for every seed) with the task object jittered by ±``jitter`` m, seen from the nominal camera; its textures, start
    pose and scripted motion (which task, which instruction) are still the episode's own draws.

    ``action_noise`` = σ_max > 0 (``data synth --action-noise``): the commanded positions are those of a noisy
    operator (:func:`motions.perturb_targets`), σ ~ U(0, σ_max) per episode, drawn from a stream of their own (the
    scene and the scripted motion are those of the same episode without noise). ``pauses`` = N > 0 (``data synth
    --pauses``): the operator holds its target N times for 2–5 frames (:func:`motions.insert_pauses`, a stream of
    its own), after any noise. ``failures`` = F > 0 (``data synth --failures``): with probability F (drawn from a
    stream of its own) the operator fails the task (:func:`motions.fail_waypoints`; ``motion.failure`` says how).
    """

    def __init__(self, seed: int, index: int, length: int, layouts: int = 0, jitter: float = 0.03,
                 action_noise: float = 0.0, pauses: int = 0, failures: float = 0.0):
        if length < 2:
            raise ValueError(f"length: got {length}; an episode needs at least 2 frames (1 action)")
        if layouts < 0:
            raise ValueError(f"layouts: got {layouts}; expected 0 (every episode its own scene) or a count >= 1")
        self.seed, self.index = seed, index
        scene_rng, motion_rng, self.noise_rng = (np.random.default_rng(s)
                                                 for s in np.random.SeedSequence([seed, index]).spawn(3))
        self.objects = sample_objects(scene_rng)
        look = sample_appearance(scene_rng)
        self.camera: CameraPose = sample_camera(scene_rng)
        if layouts:  # LIBERO-like: layout index % layouts, the nominal camera; the rest stays the episode's own
            self.objects, look = fixed_layout(index % layouts, jitter,
                                              np.random.default_rng(np.random.SeedSequence([seed, index, 5])))
            self.camera = NOMINAL_CAMERA
        start_pos = scene_rng.uniform([0.28, -0.12, 0.18], [0.38, 0.12, 0.26])
        start_yaw = float(scene_rng.uniform(-0.4, 0.4))
        self.model = m = mujoco.MjModel.from_xml_string(real_xml(self.objects, look))
        paint_textures(m, scene_rng)
        self.data = mujoco.MjData(m)
        self.ctl = ArmController(m)
        failing = None
        if failures > 0:
            fail_rng = self.stream(FAILURE_STREAM)
            failing = fail_rng if fail_rng.random() < failures else None
        self.motion = script_motion(motion_rng, self.objects, start_pos, start_yaw, length, failing)
        if action_noise > 0:
            noise_rng = self.stream(NOISE_STREAM)
            self.motion.pos = perturb_targets(self.motion.pos, noise_rng, noise_rng.uniform(0.0, action_noise))
        if pauses > 0:
            insert_pauses(self.motion, self.stream(PAUSE_STREAM), pauses)

        self.site = int(mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, EE_SITE))
        self.finger_adr = np.array([int(m.joint(j).qposadr[0]) for j in FINGER_JOINTS])
        self.arm_act = np.array([int(m.actuator(f"a_{j}").id) for j in ARM_JOINTS])
        self.finger_act = np.array([int(m.actuator(f"a_{j}").id) for j in FINGER_JOINTS])
        self.twin_adr = np.concatenate([self.ctl.qadr, self.finger_adr])  # arm + finger joints, the twin's order
        self.obj_adr = np.array([int(m.jnt_qposadr[m.body(o.name).jntadr[0]]) for o in self.objects])

        self.q = self.ctl.solve(np.array(HOME_Q), self.motion.pos[0], self.motion.rpy[0], iters=300)
        self.data.qpos[self.ctl.qadr] = self.data.ctrl[self.arm_act] = self.q
        self.data.qpos[self.finger_adr] = self.data.ctrl[self.finger_act] = self.motion.grip[0] * FINGER_TRAVEL
        mujoco.mj_forward(m, self.data)

    def stream(self, k: int) -> np.random.Generator:
        """The episode's own generator ``k`` (``SeedSequence([seed, index, k])``), apart from its scene and motion."""
        return np.random.default_rng(np.random.SeedSequence([self.seed, self.index, k]))

    def twin_record(self, pairing: str = "arm", physics_gap: float = 1.0) -> dict:
        """The episode's twin record (``twin.json``, as JSON holds it): the camera and the renders' tessellation
        (``scene.MESH``); with the ``scene`` pairing also its
        simulation (``scene.SimScene.to_record``: the objects with the simulation's own physics drawn at
        ``physics_gap`` from the episode's stream ``SIM_PHYSICS_STREAM``, the servos' gains) — the same for ``data
        synth`` and the policy benchmark's scene of the same (seed, index)."""
        record: dict = {"camera": asdict(self.camera), "mesh": list(MESH)}
        if pairing == "scene":
            record["scene"] = draw_sim_scene(self.objects, self.stream(SIM_PHYSICS_STREAM), physics_gap).to_record()
        elif pairing != "arm":
            raise ValueError(f"pairing: got {pairing!r}; expected one of {', '.join(PAIRINGS)}")
        return json.loads(json.dumps(record))

    def advance(self, t: int) -> None:
        mo = self.motion
        self.drive(mo.pos[t], mo.rpy[t], mo.grip[t])

    def drive(self, pos: np.ndarray, rpy: np.ndarray, grip: float) -> None:
        """One frame of physics towards the commanded target: IK for (pos (3,), rpy (3,)), the gripper opening
        ``grip`` in [0, 1] (``advance`` drives the scripted targets; a closed-loop policy drives its own)."""
        self.q = servo_frame(self.model, self.data, self.ctl, self.q, pos, rpy, grip, self.arm_act, self.finger_act)

    def state(self) -> np.ndarray:
        """(7,): ee position, ee roll-pitch-yaw, gripper opening in [0, 1]."""
        d = self.data
        opening = float(d.qpos[self.finger_adr].sum()) / (2 * FINGER_TRAVEL)
        return np.concatenate([d.site_xpos[self.site], mat_to_rpy(d.site_xmat[self.site]), [opening]])

    def object_positions(self) -> np.ndarray:
        """(n_objects, 3) free-body positions."""
        return self.data.qpos[self.obj_adr[:, None] + np.arange(3)].copy()


def camera_of_view(view: str, camera: CameraPose):
    """What MuJoCo renders view ``view`` of an episode with: its external camera's pose, or the wrist camera's name."""
    return camera.to_mjv() if view == SYNTH_VIEWS[0] else WRIST_CAMERA


def sensor_noise(frames: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """A camera's real frames with its sensor's Gaussian noise (σ ~ U(1.5, 4) in 0..255 units, per episode)."""
    sigma = rng.uniform(1.5, 4.0)
    noisy = np.asarray(frames, np.float32) + rng.normal(0, sigma, size=(len(frames), *frames[0].shape))
    return np.clip(np.rint(noisy), 0, 255).astype(np.uint8)


def simulate_episode(seed: int, index: int, length: int, twin: TwinRenderer, paired: bool = True, layouts: int = 0,
                     jitter: float = 0.03, action_noise: float = 0.0, pauses: int = 0, failures: float = 0.0,
                     pairing: str = "arm", physics_gap: float = 1.0,
                     views: tuple[str, ...] = SYNTH_VIEWS[:1]) -> SimulatedEpisode:
    """Simulate episode ``index`` of the dataset with ``seed``; render sim always, real + mask when ``paired``;
    ``layouts`` > 0: the policy benchmark's LIBERO-like scenes, ``action_noise`` a noisy operator, ``pauses`` a
    pausing one, ``failures`` a failing one (:class:`EpisodePhysics`); ``pairing`` what the sim video shows (module
    docstring; ``scene``: its physics at ``physics_gap``). ``views``: the cameras rendered (:data:`SYNTH_VIEWS`, the
    external one first); the external camera's frames are the same whatever the others (the wrist camera's sensor
    noise draws from a stream of its own)."""
    ep = EpisodePhysics(seed, index, length, layouts, jitter, action_noise, pauses, failures)
    record = ep.twin_record(pairing, physics_gap)
    cams = {v: camera_of_view(v, ep.camera) for v in views}
    real_r = RealRenderer(ep.model, twin.renderer.height, twin.renderer.width) if paired else None
    sims, reals, masks = ({v: [] for v in views} for _ in range(3))
    states, obj_xyz = [], []
    try:
        for t in range(length):
            if t > 0:
                ep.advance(t)
            states.append(ep.state())
            obj_xyz.append(ep.object_positions())
            for v, cam in cams.items():
                if pairing == "arm":
                    sims[v].append(twin.render(ep.data.qpos[ep.twin_adr], cam))
                if real_r is not None:
                    rgb, mask = real_r.render(ep.data, cam)
                    reals[v].append(rgb)
                    masks[v].append(mask)
    finally:
        if real_r is not None:
            real_r.close()

    states_arr = np.asarray(states, np.float32)
    if not np.all(np.isfinite(states_arr)):
        raise RuntimeError(f"episode {index} (seed {seed}): the simulation diverged (non-finite states)")
    actions = ep.motion.actions()
    sim_xyz = None
    if pairing == "scene":  # the simulation's own physics from the recorded start and actions, as the twin replays it
        video, sim_xyz = simulate_scene(twin.scene(views), states_arr[0], record, actions)
        if not np.all(np.isfinite(sim_xyz)):
            raise RuntimeError(f"episode {index} (seed {seed}): the scene's simulation diverged (non-finite objects)")
        sim = dict(zip(views, np.split(video, len(views), axis=2)))  # the twin renders its views side by side
    else:
        sim = {v: np.stack(sims[v]) for v in views}
    real = {v: None for v in views}
    if paired:
        real[views[0]] = sensor_noise(reals[views[0]], ep.noise_rng)
        for v in views[1:]:
            real[v] = sensor_noise(reals[v], ep.stream(WRIST_SENSOR_STREAM))
    first = views[0]
    return SimulatedEpisode(instruction=ep.motion.instruction, kind=ep.motion.kind, sim=sim[first], real=real[first],
                            arm_mask=np.stack(masks[first]) if paired else None, actions=actions,
                            states=states_arr, object_xyz=np.asarray(obj_xyz, np.float32),
                            object_names=[f"{o.colour} {o.shape}" if o.colour else "distractor" for o in ep.objects],
                            camera=ep.camera, target=ep.motion.target, twin_record=record,
                            failure=f"{ep.motion.kind}/{ep.motion.failure}" if ep.motion.failure else "",
                            sim_xyz=sim_xyz,
                            views={v: ViewVideos(sim[v], real[v], np.stack(masks[v]) if paired else None)
                                   for v in views[1:]})


def simulate_scene(scene, state0: np.ndarray, record: dict, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The full-scene simulation of one episode (``--pairing scene``): ``scene`` (a ``twin.SyntheticTwin``) started at
    the recorded first state ``state0`` (7,) with the twin record, then driven by the recorded ``actions`` (T−1, 7) —
    what ``data check-twin`` and the twin in the loop do with the stored float32 values, so they replay it exactly ->
    (video uint8 (T, H, W, 3), the simulation's objects float32 (T, n, 3))."""
    from simforcing.data.twin_episode import TwinEpisode

    scene.start([TwinEpisode(np.asarray(state0, np.float64), record)])
    video = scene.window(np.asarray(actions, np.float64)[None], 1, keep=len(actions))[0]
    _, objects, start = scene.executed(0)
    return video, np.concatenate([start[None], objects]).astype(np.float32)


# ----------------------------------------------------------------------------------------------------------------------
# The dataset
# ----------------------------------------------------------------------------------------------------------------------

_TWIN: TwinRenderer | None = None  # one per worker process


def _init_worker(height: int, width: int) -> None:
    global _TWIN
    _TWIN = TwinRenderer(height, width)


@dataclass(frozen=True)
class EpisodeJob:
    """One episode of a dataset to simulate and write (``_write_one``; the settings already those of its split)."""

    out: str
    episode_id: str
    index: int
    paired: bool
    seed: int
    length: int
    layout: str  # video layout
    scene_layouts: int = 0  # > 0: a policy-benchmark layout episode
    jitter: float = 0.03
    action_noise: float = 0.0
    pauses: int = 0
    failures: float = 0.0
    pairing: str = "arm"
    physics_gap: float = 1.0
    views: tuple = SYNTH_VIEWS[:1]


def _write_one(job: EpisodeJob) -> EpisodeInfo:
    """Simulate one episode and write its files."""
    assert _TWIN is not None, "_init_worker must run first"
    ep = simulate_episode(job.seed, job.index, job.length, _TWIN, paired=job.paired, layouts=job.scene_layouts,
                          jitter=job.jitter, action_noise=job.action_noise, pauses=job.pauses, failures=job.failures,
                          pairing=job.pairing, physics_gap=job.physics_gap, views=job.views)
    out, eid = job.out, job.episode_id
    write_episode(out, eid, ep.sim, ep.real, ep.actions, ep.states, ep.arm_mask, layout=job.layout, fps=FPS,
                  views=ep.views)
    write_twin_record(out, eid, ep.twin_record)
    if job.paired:
        write_objects(out, eid, ep.object_xyz, ep.object_names, ep.target, ep.kind, ep.sim_xyz)
    return EpisodeInfo(episode_id=eid, length=job.length, instruction=ep.instruction, has_real=job.paired,
                       failure=ep.failure or None)


OBJECTS_FILE = "objects.npz"


def write_objects(root: str | Path, episode_id: str, xyz: np.ndarray, names: list[str], target: int,
                  kind: str, sim_xyz: np.ndarray | None = None) -> None:
    """``episodes/<id>/objects.npz``: ``xyz`` float32 (T, n, 3) every object's centre per frame, ``names`` (n,)
    ("<colour> <shape>" or "distractor"), ``target`` the task's object, ``kind`` the task — what the success judge of
    the policy benchmark is fitted on (``policy.judge.success_judge``); world-model and policy training do not read
    it. ``sim_xyz`` (the scene pairing): the same objects in the episode's simulation, (T, n, 3) — where the
    simulator thinks they went."""
    path = episode_file(root, episode_id, OBJECTS_FILE)
    extra = {} if sim_xyz is None else {"sim_xyz": np.asarray(sim_xyz, np.float32)}

    def save(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, xyz=np.asarray(xyz, np.float32), names=np.array(names), target=np.int64(target),
                                kind=np.array(kind), **extra)

    atomic_write(path, save)


def check_frame_size(height: int, width: int) -> None:
    """A camera size the renderer and the video files take: even (H.264), within the models' offscreen buffer."""
    for name, v, most in (("height", height, 480), ("width", width, 640)):
        if v <= 0 or v % 2 or v > most:
            raise ConfigError(f"{name}: got {v}; expected an even number of pixels in 2..{most} "
                              "(H.264 needs even sizes)")


def _check_args(num_train: int, num_val: int, num_sim_pool: int, length: int, height: int, width: int,
                layout: str, workers: int = 1, layout_train: int = 0, layouts: int | None = None,
                jitter: float | None = None) -> tuple[int, float]:
    """The counts, sizes and layout settings, named; -> (layouts, jitter) of the layout episodes (2 layouts, 0.03 m
    unless given; given without layout episodes, they would shape nothing: refused)."""
    if workers < 1:
        raise ConfigError(f"workers: got {workers}; expected an integer >= 1")
    for name, v in (("num_train", num_train), ("num_val", num_val), ("num_sim_pool", num_sim_pool),
                    ("layout_train", layout_train)):
        if v < 0:
            raise ConfigError(f"{name}: got {v}; expected a count >= 0")
    if not layout_train and (layouts is not None or jitter is not None):
        raise ConfigError(f"--layouts / --jitter: got {layouts} / {jitter}, but there are no layout episodes for them "
                          "to shape; give --layout-train N (the policy benchmark's scenes), or leave them out")
    layouts, jitter = (2 if layouts is None else layouts), (0.03 if jitter is None else jitter)
    if layout_train and (layouts < 1 or not 0 <= jitter <= 0.1):
        raise ConfigError(f"--layouts {layouts} --jitter {jitter}: layout episodes need layouts >= 1 and "
                          "0 <= jitter <= 0.1 m")
    if num_train + num_val + num_sim_pool + layout_train == 0:
        raise ConfigError("num_train + num_val + num_sim_pool + layout_train is 0; expected at least one episode")
    if length < 2:
        raise ConfigError(f"length: got {length}; expected >= 2 frames")
    check_frame_size(height, width)
    if layout not in ("separate", "side_by_side"):
        raise ConfigError(f"layout: got {layout!r}; expected 'separate' or 'side_by_side'")
    return layouts, jitter


def check_synth_views(views) -> tuple[str, ...]:
    """``data synth --views``: cameras of :data:`SYNTH_VIEWS`, each once, the external one first (its files are the
    one-view dataset's); ConfigError naming the flag otherwise."""
    views = tuple(views or SYNTH_VIEWS[:1])
    unknown = [v for v in views if v not in SYNTH_VIEWS]
    if unknown:
        raise ConfigError(f"--views: got {' '.join(views)}; the benchmark renders the cameras {', '.join(SYNTH_VIEWS)} "
                          f"({unknown[0]!r} is none of them)")
    if len(set(views)) != len(views):
        raise ConfigError(f"--views: got {' '.join(views)}; name each camera once")
    if views[0] != SYNTH_VIEWS[0]:
        raise ConfigError(f"--views: got {' '.join(views)}; the first view must be {SYNTH_VIEWS[0]!r} (its files are "
                          "those of the one-view dataset, which every one-view run reads), e.g. --views external wrist")
    return views


OPERATOR_SPLITS = ("train", "val", "sim_pool")
COUNT_FLAGS = {"train": "--num-train and --layout-train are", "val": "--num-val is", "sim_pool": "--num-sim-pool is"}
# the splits an operator option drives unless named (``generate_dataset``): those of them that hold episodes
DEFAULT_SPLITS = {"--action-noise": ("sim_pool",), "--pauses": ("train", "sim_pool"),
                  "--failures": ("train", "sim_pool")}


def _operator_splits(flag: str, level: float, splits, counts: dict[str, int]) -> tuple[str, ...]:
    """The splits operator option ``flag`` (at ``level``; 0: off) drives, named: ``splits`` as given (each a split
    that holds episodes), or None for ``DEFAULT_SPLITS`` less those without episodes; splits given for an option
    that is off, or an option that would drive no episode, are refused."""
    split_flag = {"--action-noise": "--action-noise-splits", "--pauses": "--pause-splits",
                  "--failures": "--failure-splits"}[flag]
    if splits is not None:
        bad = [s for s in splits if s not in OPERATOR_SPLITS]
        if bad:
            raise ConfigError(f"{split_flag}: got {bad}; expected some of {', '.join(OPERATOR_SPLITS)}")
        if not level:
            raise ConfigError(f"{split_flag}: got {' '.join(splits)} but {flag} is 0, so it would drive nothing; give "
                              f"{flag} (or leave out {split_flag})")
        empty = [s for s in splits if not counts[s]]
        if empty:
            raise ConfigError(f"{split_flag}: got {' '.join(splits)}, but the dataset has no {empty[0]} episode "
                              f"({COUNT_FLAGS[empty[0]]} 0); name splits that hold episodes")
        return tuple(splits)
    if not level:
        return ()
    chosen = tuple(s for s in DEFAULT_SPLITS[flag] if counts[s])
    if not chosen:
        raise ConfigError(f"{flag} {level:g}: its default splits ({' '.join(DEFAULT_SPLITS[flag])}) hold no episode, so "
                          f"it would drive nothing; name the splits with {split_flag}")
    return chosen


@dataclass(frozen=True)
class Operators:
    """The checked operator and simulation settings of a dataset (``generate_dataset``): each option's level and the
    splits it drives, the pairing and its physics gap."""

    action_noise: float = 0.0
    noise_splits: tuple[str, ...] = ()
    pauses: int = 0
    pause_splits: tuple[str, ...] = ()
    failures: float = 0.0
    failure_splits: tuple[str, ...] = ()
    pairing: str = "arm"
    physics_gap: float = 0.0

    @classmethod
    def checked(cls, counts: dict[str, int], length: int, action_noise: float = 0.0, noise_splits=None,
                pauses: int = 0, pause_splits=None, failures: float = 0.0, failure_splits=None, pairing: str = "arm",
                physics_gap: float | None = None) -> "Operators":
        """The settings, each refused by name when it cannot be (``counts``: episodes per split)."""
        if not 0 <= action_noise <= 0.2:
            raise ConfigError(f"--action-noise: got {action_noise}; expected a noise level in [0, 0.2] metres per "
                              "step (0: the scripted operator alone)")
        if not 0 <= pauses <= 4:
            raise ConfigError(f"--pauses: got {pauses}; expected 0 to 4 pauses per episode (0: the operator never "
                              "stops)")
        if not 0 <= failures <= 1:
            raise ConfigError(f"--failures: got {failures}; expected the fraction of the episodes whose operator "
                              "fails the task, in [0, 1] (0: the scripted operator always attempts it properly)")
        noise = _operator_splits("--action-noise", action_noise, noise_splits, counts)
        paused = _operator_splits("--pauses", pauses, pause_splits, counts)
        failing = _operator_splits("--failures", failures, failure_splits, counts)
        if paused and length < 3:
            raise ConfigError(f"--pauses {pauses} --length {length}: a pause holds the target after the first frame "
                              "and before the last, and an episode of 2 frames has no such frame; give --length >= 3 "
                              "or --pauses 0")
        if pairing not in PAIRINGS:
            raise ConfigError(f"--pairing: got {pairing!r}; expected one of {', '.join(PAIRINGS)} (arm: the arm alone "
                              "on black; scene: the whole scene simulated with physics of its own)")
        if physics_gap is not None and pairing != "scene":
            raise ConfigError(f"--physics-gap: got {physics_gap}, but the {pairing} pairing's simulation has no physics "
                              "of its own (the arm's joints are copied from the real scene); give --pairing scene")
        gap = 1.0 if physics_gap is None else float(physics_gap)
        if not 0 <= gap <= 2:
            raise ConfigError(f"--physics-gap: got {physics_gap}; expected a scale in [0, 2] of the stated ranges "
                              "(0: the real scene's physics, 1: scene.PhysicsGap's ranges)")
        return cls(action_noise, noise, pauses, paused, failures, failing, pairing, gap if pairing == "scene" else 0.0)

    def settings(self) -> dict:
        """What info.json's ``synth`` records of them."""
        return {
            "action_noise": ({"sigma_max": self.action_noise, "splits": sorted(self.noise_splits),
                              "per_episode": "sigma ~ U(0, sigma_max) m per step per axis, a random walk around the "
                                             "scripted targets"} if self.action_noise else None),
            "pauses": ({"per_episode": self.pauses, "splits": sorted(self.pause_splits),
                        "hold": "the commanded target held for 2-5 frames (zero actions) at a random frame, then the "
                                "scripted motion goes on"} if self.pauses else None),
            "failures": ({"fraction": self.failures, "splits": sorted(self.failure_splits),
                          "per_episode": "drawn with probability 'fraction' from the episode's own stream; which "
                                         "failure: episodes.jsonl 'failure' (<task>/<mode>)",
                          "modes": dict(FAILURE_TEXT)} if self.failures else None),
            "pairing": self.pairing,
            "physics_gap": ({"scale": self.physics_gap, "ranges_at_1": asdict(PHYSICS_GAP),
                             "per_episode": "each object's mass x mass^(S u), sliding friction x friction^(S u), "
                                            "half-sizes x (1 + size S u); each servo's kp, kv x servo^(S u); "
                                            "u ~ U(-1, 1) per parameter from the episode's own stream; the draws: "
                                            "twin.json scene.factors"} if self.pairing == "scene" else None)}


def generate_dataset(out: str | Path, *, num_train: int, num_val: int, num_sim_pool: int, length: int, height: int,
                     width: int, seed: int, layout: str = "separate", progress: bool = True,
                     workers: int = 1, overwrite: bool = False, finish: Callable[[Path], None] | None = None,
                     layout_train: int = 0, layouts: int | None = None, jitter: float | None = None,
                     action_noise: float = 0.0, noise_splits: tuple[str, ...] | None = None, pauses: int = 0,
                     pause_splits: tuple[str, ...] | None = None, failures: float = 0.0,
                     failure_splits: tuple[str, ...] | None = None, pairing: str = "arm",
                     physics_gap: float | None = None, views: tuple[str, ...] | None = None) -> Path:
    """Write the synthetic paired dataset to ``out`` (videos, lowdim, masks, meta). Returns ``out``.

    Everything is written into a temporary sibling folder that becomes ``out`` by a rename once complete
    (``utils.staged_folder``): an interrupted or failed generation leaves nothing at ``out``. A non-empty ``out`` is
    refused (FileExistsError) unless ``overwrite``, which replaces a dataset there (never another kind of folder).
    ``finish(folder)`` runs on the complete folder before it appears (the command passes
    ``simforcing.prep.text.finalize_dataset``: stats and the text cache). ``workers`` > 1 simulates episodes in that
    many processes; the output is identical whatever the count. ``layout_train`` more paired training episodes are
    the policy benchmark's LIBERO-like scenes (``layouts`` fixed layouts, 2 unless given, the task object jittered by
    ±``jitter`` m, 0.03 unless given, the nominal camera: ``policy.closed_loop.synthetic``), appended after the sim
    pool — so a world model knows the scenes a policy acts in; the other episodes are unchanged.

    The operator (:class:`EpisodePhysics`; each option drives the splits named, ``train`` including the layout
    episodes, or when None its ``DEFAULT_SPLITS`` that hold episodes; their scenes and scripted motions are those of
    the same dataset without it): ``action_noise`` σ_max > 0, a noisy operator, σ ~ U(0, σ_max) m per step per
    episode; ``pauses`` N > 0, the target held N times for 2–5 frames; ``failures`` F > 0, the task failed in a
    fraction F of the episodes (``motions.FAILURE_TEXT``). ``pairing``: what the sim videos show (module docstring);
    ``physics_gap`` S (the scene pairing; 1 unless given): the scale of the simulation's physics gap
    (``scene.PhysicsGap``). ``views``: the cameras (:func:`check_synth_views`; None: the external one alone, and
    info.json names none); every episode's external files are those of the dataset without them. Settings that cannot
    be are ConfigErrors naming the option (:meth:`Operators.checked`).
    """
    layouts, jitter = _check_args(num_train, num_val, num_sim_pool, length, height, width, layout, workers,
                                  layout_train, layouts, jitter)
    cams = check_synth_views(views)
    counts = {"train": num_train + layout_train, "val": num_val, "sim_pool": num_sim_pool}
    ops = Operators.checked(counts, length, action_noise, noise_splits, pauses, pause_splits, failures,
                            failure_splits, pairing, physics_gap)
    out = Path(out)
    with staged_folder(out, overwrite, "dataset", replaceable=is_dataset) as tmp:
        _generate_into(tmp, num_train, num_val, num_sim_pool, length, height, width, seed, layout, progress, workers,
                       (layout_train, layouts, jitter), ops, cams if views else None)
        if finish is not None:
            finish(tmp)
    return out


def _generate_into(out: Path, num_train: int, num_val: int, num_sim_pool: int, length: int, height: int,
                   width: int, seed: int, layout: str, progress: bool, workers: int,
                   scenes: tuple = (0, 2, 0.03), ops: Operators = Operators(),
                   views: tuple[str, ...] | None = None) -> None:
    layout_train, layouts, jitter = scenes
    plan = ([("train", True, 0)] * num_train + [("val", True, 0)] * num_val + [("sim_pool", False, 0)] * num_sim_pool
            + [("train", True, layouts)] * layout_train)
    jobs = [EpisodeJob(str(out), f"ep_{i:05d}", i, paired, seed, length, layout, k, jitter,
                       ops.action_noise if split in ops.noise_splits else 0.0,
                       ops.pauses if split in ops.pause_splits else 0,
                       ops.failures if split in ops.failure_splits else 0.0, ops.pairing, ops.physics_gap,
                       views or SYNTH_VIEWS[:1])
            for i, (split, paired, k) in enumerate(plan)]
    bar = tqdm(total=len(jobs), desc="synth episodes", unit="ep", disable=not progress, file=sys.stderr)
    infos: list[EpisodeInfo] = []
    if workers <= 1:
        _init_worker(height, width)
        try:
            for job in jobs:
                infos.append(_write_one(job))
                bar.update()
        finally:
            _close_twin()
    else:  # spawned processes (no GL state inherited); each builds its own twin renderer
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"), initializer=_init_worker,
                                 initargs=(height, width)) as pool:
            for info in pool.map(_write_one, jobs, chunksize=1):
                infos.append(info)
                bar.update()
    bar.close()

    splits: dict[str, list[str]] = {"train": [], "val": [], "sim_pool": []}
    for (split, _, _), info in zip(plan, infos):
        splits[split].append(info.episode_id)
    settings = {"version": GENERATOR_VERSION, "seed": seed, "num_train": num_train, "num_val": num_val,
                "num_sim_pool": num_sim_pool, "length": length, "layout_train": layout_train,
                "layouts": layouts if layout_train else 0, "jitter": jitter if layout_train else None,
                **ops.settings(), "physics_timestep": TIMESTEP, "substeps": SUBSTEPS,
                "mujoco": mujoco.__version__, "motions": ["reach", "push", "grasp"],
                "episode_seed": "SeedSequence([seed, index]), index over train, val, sim_pool in order",
                "state": "ee position (3), ee roll-pitch-yaw xyz (3), gripper opening 0..1 (1)",
                "action": "target ee position delta (3), target roll-pitch-yaw delta (3), gripper command 0..1 (1)"}
    info = {"fps": FPS, "height": height, "width": width, "action_dim": 7, "state_dim": 7, "video_layout": layout,
            "sim_background": SIM_BACKGROUND, "pairing": ops.pairing, "source": "simforcing-synth",
            "synth": settings, **({"views": list(views)} if views else {})}
    write_meta(out, info, infos, splits)


def _close_twin() -> None:
    global _TWIN
    if _TWIN is not None:
        _TWIN.close()
        _TWIN = None


def save_preview(root: str | Path, episode_id: str, path: str | Path, num_frames: int = 9, scale: int = 4) -> Path:
    """A PNG strip of one paired episode: sim row over real row over mask row, ``num_frames`` evenly spaced."""
    info = read_info(root)
    sim, real = read_episode_videos(root, info, EpisodeInfo(episode_id, 0, "", True))
    mask = read_arm_mask(root, episode_id)
    if real is None or mask is None:
        raise ValueError(f"episode {episode_id}: preview needs a paired episode with an arm mask")
    idx = np.linspace(0, len(sim) - 1, min(num_frames, len(sim))).round().astype(int)
    mask_rgb = np.repeat(mask[..., None] * 255, 3, axis=-1).astype(np.uint8)
    rows = [np.concatenate(list(v[idx]), axis=1) for v in (sim, real, mask_rgb)]
    img = np.concatenate(rows, axis=0).repeat(scale, axis=0).repeat(scale, axis=1)
    iio.imwrite(path, img)
    return Path(path)
