"""The synthetic benchmark's digital twin as a :class:`simforcing.twin.SimRenderer`: the arm alone, driven by the
benchmark's own controller, rendered as its simulation videos were.

One MuJoCo model (``scene.sim_xml``: the very model the recorded simulation videos were rendered with, its servos and
integrator those of the real scene) and one ``MjData`` per episode. ``start`` places the arm as ``data synth`` places
it (IK from the home pose to the state's end-effector pose, fingers at the state's opening, at rest); ``window`` turns
each action into the controller's commanded target (``motions.CommandedTarget``: deltas added, clipped into the
workspace) and runs one video frame of the controller per action (``generate.servo_frame``: IK, then 100 physics
steps of the position servos), rendering a frame every ``stride`` actions from the episode's camera
(``twin.json``: ``{"camera": {lookat, distance, azimuth, elevation}}``). The first ``keep`` actions are executed; the
state after them is restored once the rest of the window is rendered (``mj_getState`` / ``mj_setState``).

What differs from the recorded simulation video: the real scene's contacts (the fingers closing on an object, the arm
pressing on the table or an object) are absent, and the recorded video went through the H.264 encoder; the test
``tests/test_twin.py`` measures both against the recorded videos.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from simforcing.config import ConfigError
from simforcing.data.synthetic.generate import servo_frame
from simforcing.data.synthetic.motions import ArmController, CommandedTarget
from simforcing.data.synthetic.offscreen import SharedContextRenderer
from simforcing.data.synthetic.scene import ARM_JOINTS, FINGER_JOINTS, FINGER_TRAVEL, HOME_Q, CameraPose, sim_xml
from simforcing.data.twin_episode import TwinEpisode, check_synthetic_camera, window_frame_steps

ACTION_DIM = 7  # target ee position delta (3), target roll-pitch-yaw delta (3), gripper opening command (1)
INITIAL_IK_ITERS = 300  # as EpisodePhysics places the arm at an episode's start


def camera_of(record: dict) -> CameraPose:
    """The episode's camera from its twin record (``data.twin_episode.check_synthetic_camera``); ConfigError naming
    the field that is missing, of the wrong shape or not finite."""
    try:
        return CameraPose(*check_synthetic_camera(record))
    except ValueError as e:
        raise ConfigError(f"twin record: {e}; got {record!r}") from None


class _Arm:
    """One episode's twin: its physics, the servos' setpoint, the commanded target and the camera."""

    def __init__(self, twin: "ArmTwin", episode: TwinEpisode):
        import mujoco

        state = np.asarray(episode.state, np.float64).reshape(-1)
        if state.shape[0] < 7 or not np.all(np.isfinite(state[:7])):
            raise ValueError(f"twin start: the state must hold 7 finite numbers (ee position, roll-pitch-yaw, "
                             f"gripper opening); got {state}")
        pos, rpy, grip = (episode.target if episode.target is not None else (state[:3], state[3:6], state[6]))
        self.target = CommandedTarget(pos, rpy, float(grip))
        self.camera = camera_of(episode.record).to_mjv()
        m = twin.model
        self.data = mujoco.MjData(m)
        self.q = twin.ctl.solve(np.array(HOME_Q), state[:3], state[3:6], iters=INITIAL_IK_ITERS)
        self.data.qpos[twin.arm_adr] = self.data.ctrl[twin.arm_act] = self.q
        self.data.qpos[twin.finger_adr] = self.data.ctrl[twin.finger_act] = float(state[6]) * FINGER_TRAVEL
        mujoco.mj_forward(m, self.data)


class ArmTwin:
    """The synthetic benchmark's SimRenderer (module docstring): B episodes' twins, one renderer."""

    def __init__(self, height: int, width: int):
        import mujoco  # generate.py has set MUJOCO_GL before MuJoCo's first import

        self.mj = mujoco
        self.height, self.width = int(height), int(width)
        self.model = mujoco.MjModel.from_xml_string(sim_xml())
        self.renderer = SharedContextRenderer(self.model, self.height, self.width)
        self.ctl = ArmController(self.model)
        self.arm_adr = np.array([int(self.model.joint(j).qposadr[0]) for j in ARM_JOINTS])
        self.finger_adr = np.array([int(self.model.joint(j).qposadr[0]) for j in FINGER_JOINTS])
        self.arm_act = np.array([int(self.model.actuator(f"a_{j}").id) for j in ARM_JOINTS])
        self.finger_act = np.array([int(self.model.actuator(f"a_{j}").id) for j in FINGER_JOINTS])
        self.arms: list[_Arm] = []
        self._spec = mujoco.mjtState.mjSTATE_INTEGRATION

    def start(self, episodes: Sequence[TwinEpisode]) -> np.ndarray:
        """Each episode's twin at its start -> the first frames (B, H, W, 3) uint8."""
        self.arms = [_Arm(self, e) for e in episodes]
        return np.stack([self._render(a) for a in self.arms])

    def window(self, actions: np.ndarray, stride: int, keep: int) -> np.ndarray:
        """Raw actions (B, A_w, 7) -> (B, A_w / stride + 1, H, W, 3) uint8: the frame now, then every ``stride``
        actions; each twin keeps the state after its first ``keep`` actions (0 <= keep <= A_w)."""
        a = np.asarray(actions, np.float64)
        if a.ndim != 3 or a.shape[0] != len(self.arms) or a.shape[2] != ACTION_DIM:
            raise ValueError(f"twin window: expected raw actions ({len(self.arms)}, A, {ACTION_DIM}) for the "
                             f"{len(self.arms)} started episodes; got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError("twin window: the actions hold NaN or inf values; expected finite actions")
        if not 0 <= keep <= a.shape[1]:
            raise ValueError(f"twin window: keep={keep}; expected 0..{a.shape[1]} executed actions")
        steps = set(window_frame_steps(a.shape[1], stride))
        return np.stack([self._window_one(arm, acts, steps, keep) for arm, acts in zip(self.arms, a)])

    def _window_one(self, arm: _Arm, actions: np.ndarray, steps: set, keep: int) -> np.ndarray:
        mj, m = self.mj, self.model
        frames = [self._render(arm)]
        saved = None
        for i, act in enumerate(actions, start=1):
            if i - 1 == keep:
                saved = self._save(arm)
            arm.target.apply(act)
            arm.q = servo_frame(m, arm.data, self.ctl, arm.q, arm.target.pos, arm.target.rpy, arm.target.grip,
                                self.arm_act, self.finger_act)
            if i in steps:
                frames.append(self._render(arm))
        if saved is not None:
            self._restore(arm, saved)
        return np.stack(frames)

    def _save(self, arm: _Arm) -> tuple:
        buf = np.empty(self.mj.mj_stateSize(self.model, self._spec))
        self.mj.mj_getState(self.model, arm.data, buf, self._spec)
        return buf, arm.q.copy(), arm.target.copy()

    def _restore(self, arm: _Arm, saved: tuple) -> None:
        buf, arm.q, arm.target = saved
        self.mj.mj_setState(self.model, arm.data, buf, self._spec)

    def _render(self, arm: _Arm) -> np.ndarray:
        """The frame at the current joint positions, as ``generate.TwinRenderer`` rendered the recorded videos (the
        kinematics of qpos now: after a physics step the data's positions are the step's start; positions only, so
        the physics — its solver's warm start included — is not touched)."""
        self.mj.mj_kinematics(self.model, arm.data)
        self.renderer.update_scene(arm.data, camera=arm.camera)
        return self.renderer.render().copy()

    def close(self) -> None:
        self.renderer.close()
