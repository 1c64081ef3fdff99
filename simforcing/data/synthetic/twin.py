"""The synthetic benchmark's digital twin as a :class:`simforcing.twin.SimRenderer`: the benchmark's own controller
driving what an episode's twin record holds, rendered as its simulation videos were.

- an **arm** record (``{"camera"}``, the Bridge-like pairing and every dataset before generator version 4): one MuJoCo
  model for all such episodes of a tessellation (``scene.sim_xml``: the very model the recorded simulation videos were
  rendered with, at the record's ``mesh``, :func:`mesh_of`;
  its servos and integrator those of the real scene), the arm alone — no objects;
- a **full-scene** record (``{"camera", "scene"}``, ``data synth --pairing scene``): the episode's own simulation
  rebuilt from the record (``scene.SimScene.from_record`` -> ``scene.sim_scene_xml``: the arm, a plain table and the
  episode's objects with the simulation's own masses, frictions, sizes and servo gains); the objects move by the
  simulation's physics, which is what rendered the recorded simulation video (``data synth`` renders it with this
  class: ``generate.simulate_episode``).

One ``MjData`` per episode (episodes with the same scene share its model and renderer). ``start`` places the arm as
``data synth`` places it (IK from the home pose to the state's end-effector pose, fingers at the state's opening, at
rest; the objects at the record's poses); ``window`` turns each action into the controller's commanded target
(``motions.CommandedTarget``: deltas added, clipped into the workspace) and runs one video frame of the controller per
action (``servo.servo_frame``: IK, then 100 physics steps of the position servos), rendering a frame every
``stride`` actions from the episode's camera. The first ``keep`` actions are executed; the state after them is
restored once the rest of the window is rendered (``mj_getState`` / ``mj_setState``). After every executed action a
full-scene episode records where its end-effector and objects are (:meth:`SyntheticTwin.executed`): the simulator's
own view of the task, which :func:`task_verdicts` turns into the task predicate's verdict per step.

What an arm twin lacks against the recorded simulation video: the real scene's contacts (the fingers closing on an
object, the arm pressing on the table or an object), and the recorded video went through the H.264 encoder; the test
``tests/test_twin.py`` measures both. A full-scene twin replays its recorded video exactly, up to the encoder.
"""

from __future__ import annotations

import json
from typing import Sequence

import numpy as np

from simforcing.config import ConfigError
from simforcing.data.synthetic.servo import servo_frame
from simforcing.data.synthetic.motions import ArmController, CommandedTarget
from simforcing.data.synthetic.offscreen import SharedContextRenderer
from simforcing.data.synthetic.scene import (ARM_JOINTS, EE_SITE, FINGER_JOINTS, FINGER_TRAVEL, HOME_Q, WRIST_CAMERA,
                                             CameraPose, SimScene, sim_scene_xml, sim_xml)
from simforcing.data.synthetic.tasks import Task, task_success
from simforcing.data.twin_episode import (TwinEpisode, check_synthetic_camera, check_synthetic_mesh,
                                          check_synthetic_scene, window_frame_steps)

ACTION_DIM = 7  # target ee position delta (3), target roll-pitch-yaw delta (3), gripper opening command (1)
INITIAL_IK_ITERS = 300  # as EpisodePhysics places the arm at an episode's start


def _checked(check, record: dict):
    """``check(record)`` with its ValueError as the ConfigError naming the record."""
    try:
        return check(record)
    except ValueError as e:
        raise ConfigError(f"twin record: {e}; got {json.dumps(record, default=str)[:300]}") from None


def mesh_of(record: dict) -> tuple[int, int]:
    """The tessellation (numslices, numstacks) the episode's simulation video was rendered with
    (``data.twin_episode.check_synthetic_mesh``: the record's ``mesh``, MuJoCo's default where the record has none);
    ConfigError naming the field otherwise."""
    return _checked(check_synthetic_mesh, record)


def camera_of(record: dict) -> CameraPose:
    """The episode's camera from its twin record (``data.twin_episode.check_synthetic_camera``); ConfigError naming
    the field that is missing, of the wrong shape or not finite."""
    return CameraPose(*_checked(check_synthetic_camera, record))


class _Sim:
    """One MuJoCo model of the twin (the arm alone, or one episode's full scene), its renderer, its controller and the
    addresses the twin drives and reads."""

    def __init__(self, mj, xml: str, height: int, width: int, objects: Sequence[str] = ()):
        self.model = m = mj.MjModel.from_xml_string(xml)
        self.renderer = SharedContextRenderer(m, height, width)
        self.ctl = ArmController(m)
        self.arm_adr = np.array([int(m.joint(j).qposadr[0]) for j in ARM_JOINTS])
        self.finger_adr = np.array([int(m.joint(j).qposadr[0]) for j in FINGER_JOINTS])
        self.arm_act = np.array([int(m.actuator(f"a_{j}").id) for j in ARM_JOINTS])
        self.finger_act = np.array([int(m.actuator(f"a_{j}").id) for j in FINGER_JOINTS])
        self.site = int(mj.mj_name2id(m, mj.mjtObj.mjOBJ_SITE, EE_SITE))
        self.obj_adr = np.array([int(m.jnt_qposadr[m.body(n).jntadr[0]]) for n in objects], dtype=np.int64)
        self.state_size = mj.mj_stateSize(m, mj.mjtState.mjSTATE_INTEGRATION)

    def close(self) -> None:
        self.renderer.close()


class _Episode:
    """One episode's twin: its physics, the servos' setpoint, the commanded target, the camera and (full scene) the
    end-effector and object positions after every executed action."""

    def __init__(self, mj, sim: _Sim, episode: TwinEpisode):
        state = np.asarray(episode.state, np.float64).reshape(-1)
        if state.shape[0] < 7 or not np.all(np.isfinite(state[:7])):
            raise ValueError(f"twin start: the state must hold 7 finite numbers (ee position, roll-pitch-yaw, "
                             f"gripper opening); got {state}")
        pos, rpy, grip = (episode.target if episode.target is not None else (state[:3], state[3:6], state[6]))
        self.sim, self.target = sim, CommandedTarget(pos, rpy, float(grip))
        self.camera = camera_of(episode.record).to_mjv()
        self.data = mj.MjData(sim.model)
        self.q = sim.ctl.solve(np.array(HOME_Q), state[:3], state[3:6], iters=INITIAL_IK_ITERS)
        self.data.qpos[sim.arm_adr] = self.data.ctrl[sim.arm_act] = self.q
        self.data.qpos[sim.finger_adr] = self.data.ctrl[sim.finger_act] = float(state[6]) * FINGER_TRAVEL
        mj.mj_forward(sim.model, self.data)
        self.start_objects = self.objects()
        self.track: list[tuple[np.ndarray, np.ndarray]] = []

    def objects(self) -> np.ndarray:
        """(n_objects, 3) the objects' centres now (none for the arm alone)."""
        return self.data.qpos[self.sim.obj_adr[:, None] + np.arange(3)].copy()


class SyntheticTwin:
    """The synthetic benchmark's SimRenderer (module docstring): B episodes' twins, each the arm alone or its own
    full scene as its record says. ``views``: the cameras it renders, side by side in every frame (H, V·W, 3) in
    this order — the episode's external camera (its record's) and the wrist camera on the twin's hand
    (``scene.WRIST_CAMERA``: it moves with the commanded hand)."""

    VIEWS = ("external", "wrist")  # the benchmark's cameras (data.synthetic.generate.SYNTH_VIEWS)

    def __init__(self, height: int, width: int, views: Sequence[str] = ("external",)):
        import mujoco  # generate.py has set MUJOCO_GL before MuJoCo's first import

        unknown = [v for v in views if v not in self.VIEWS]
        if not views or unknown:
            raise ConfigError(f"the synthetic twin renders the cameras {', '.join(self.VIEWS)}; got the views "
                              f"{', '.join(views) or 'none'} (data.views of the world model)")
        self.mj = mujoco
        self.views = tuple(views)
        self.height, self.width = int(height), int(width)
        self._arms: dict[tuple[int, int], _Sim] = {}  # the arm alone, by its tessellation (built on first use)
        self._scenes: dict[str, _Sim] = {}  # full-scene models by their record, while their episodes run
        self.episodes: list[_Episode] = []
        self._spec = mujoco.mjtState.mjSTATE_INTEGRATION

    def _sim(self, record: dict) -> _Sim:
        mesh = mesh_of(record)
        if "scene" not in record:
            if mesh not in self._arms:
                self._arms[mesh] = _Sim(self.mj, sim_xml(mesh), self.height, self.width)
            return self._arms[mesh]
        scene = _checked(check_synthetic_scene, record)
        key = json.dumps([scene, mesh], sort_keys=True)
        if key not in self._scenes:
            sim = SimScene.from_record(scene)
            self._scenes[key] = _Sim(self.mj, sim_scene_xml(sim, mesh), self.height, self.width,
                                     [o.name for o in sim.objects])
        return self._scenes[key]

    def start(self, episodes: Sequence[TwinEpisode]) -> np.ndarray:
        """Each episode's twin at its start -> the first frames (B, H, V·W, 3) uint8 (V views side by side)."""
        self._close_scenes()
        self.episodes = [_Episode(self.mj, self._sim(e.record), e) for e in episodes]
        return np.stack([self._render(e) for e in self.episodes])

    def window(self, actions: np.ndarray, stride: int, keep: int) -> np.ndarray:
        """Raw actions (B, A_w, 7) -> (B, A_w / stride + 1, H, V·W, 3) uint8: the frame now, then every ``stride``
        actions; each twin keeps the state after its first ``keep`` actions (0 <= keep <= A_w)."""
        a = np.asarray(actions, np.float64)
        if a.ndim != 3 or a.shape[0] != len(self.episodes) or a.shape[2] != ACTION_DIM:
            raise ValueError(f"twin window: expected raw actions ({len(self.episodes)}, A, {ACTION_DIM}) for the "
                             f"{len(self.episodes)} started episodes; got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError("twin window: the actions hold NaN or inf values; expected finite actions")
        if not 0 <= keep <= a.shape[1]:
            raise ValueError(f"twin window: keep={keep}; expected 0..{a.shape[1]} executed actions")
        steps = set(window_frame_steps(a.shape[1], stride))
        return np.stack([self._window_one(e, acts, steps, keep) for e, acts in zip(self.episodes, a)])

    def _window_one(self, ep: _Episode, actions: np.ndarray, steps: set, keep: int) -> np.ndarray:
        sim = ep.sim
        frames = [self._render(ep)]
        saved = None
        for i, act in enumerate(actions, start=1):
            if i - 1 == keep:
                saved = self._save(ep)
            ep.target.apply(act)
            ep.q = servo_frame(sim.model, ep.data, sim.ctl, ep.q, ep.target.pos, ep.target.rpy, ep.target.grip,
                               sim.arm_act, sim.finger_act)
            if i <= keep and len(sim.obj_adr):  # read as the simulator's success reads them: after the step
                ep.track.append((ep.data.site_xpos[sim.site].copy(), ep.objects()))
            if i in steps:
                frames.append(self._render(ep))
        if saved is not None:
            self._restore(ep, saved)
        return np.stack(frames)

    def executed(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Episode ``i``'s own view of what it executed: (ee (T, 3), objects (T, n, 3)) after each of its T executed
        actions, and the objects at the start (n, 3). ValueError for an arm-only episode: it has no objects."""
        ep = self.episodes[i]
        if not len(ep.sim.obj_adr):
            raise ValueError(f"twin episode {i}: the arm alone (its record has no 'scene'), so it knows no object; "
                             "the twin's own verdict needs a full-scene record (data synth --pairing scene)")
        n = len(ep.sim.obj_adr)
        ee = np.array([t[0] for t in ep.track]).reshape(-1, 3)
        obj = np.array([t[1] for t in ep.track]).reshape(-1, n, 3)
        return ee, obj, ep.start_objects

    def _save(self, ep: _Episode) -> tuple:
        buf = np.empty(ep.sim.state_size)
        self.mj.mj_getState(ep.sim.model, ep.data, buf, self._spec)
        return buf, ep.q.copy(), ep.target.copy()

    def _restore(self, ep: _Episode, saved: tuple) -> None:
        buf, ep.q, ep.target = saved
        self.mj.mj_setState(ep.sim.model, ep.data, buf, self._spec)

    def _render(self, ep: _Episode) -> np.ndarray:
        """The frame at the current positions, as the recorded videos were rendered (the kinematics of qpos now: after
        a physics step the data's positions are the step's start; positions only, so the physics — its solver's warm
        start included — is not touched)."""
        self.mj.mj_kinematics(ep.sim.model, ep.data)
        frames = []
        for view in self.views:
            ep.sim.renderer.update_scene(ep.data, camera=ep.camera if view == self.VIEWS[0] else WRIST_CAMERA)
            frames.append(ep.sim.renderer.render().copy())
        return frames[0] if len(frames) == 1 else np.concatenate(frames, axis=1)

    def _close_scenes(self) -> None:
        for sim in self._scenes.values():
            sim.close()
        self._scenes = {}

    def close(self) -> None:
        self._close_scenes()
        for arm in self._arms.values():
            arm.close()
        self._arms = {}


def task_verdicts(twin: SyntheticTwin, tasks: Sequence[Task]) -> list[np.ndarray]:
    """The simulator's own verdict on each started episode (a full-scene twin): the task predicate
    (``tasks.task_success``, what the policy benchmark's simulator decides with) after every executed action, from the
    twin's own end-effector and object positions -> per episode bool (T,). ``tasks[i].object_index`` indexes the
    record's objects (the scene's order)."""
    if len(tasks) != len(twin.episodes):
        raise ValueError(f"task_verdicts: got {len(tasks)} tasks for {len(twin.episodes)} started episodes")
    out = []
    for i, task in enumerate(tasks):
        ee, obj, start = twin.executed(i)
        k = task.object_index
        out.append(np.array([task_success(task, e, o[k], start[k]) for e, o in zip(ee, obj)], dtype=bool))
    return out
