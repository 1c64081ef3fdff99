"""The benchmark's controller in time: one video frame of the arm's position servos (``servo_frame``), the clock of
the synthetic data (``FPS`` frames per second, ``SUBSTEPS`` physics steps per frame) — shared by the real scene
(``generate.EpisodePhysics``), the full-scene simulation of the scene pairing and the digital twin in the loop
(``twin.SyntheticTwin``).

A frame's ``SUBSTEPS`` physics steps run in one call of MuJoCo's ``rollout`` (its C loop over ``mj_step``, on the
calling thread) with the servos' setpoints as its controls, not ``SUBSTEPS`` Python-driven ``mj_step`` calls: the
state it leaves is the same to the last bit (``tests/test_synthetic.py`` checks it against the stepped loop), and the
arm's physics costs a sixth less per frame (docs/notebook/benchmark.md, "The servo loop in C")."""

from __future__ import annotations

import numpy as np

from simforcing.data.synthetic.motions import ArmController
from simforcing.data.synthetic.offscreen import mujoco  # MUJOCO_GL set before MuJoCo's first import
from simforcing.data.synthetic.scene import FINGER_TRAVEL, SERVO_GAINS, TIMESTEP

FPS = 10
SUBSTEPS = round(1.0 / (FPS * TIMESTEP))  # physics steps per video frame (100)
LEAD = np.array([kv / kp for kp, kv in SERVO_GAINS])  # s: velocity feed-forward cancels the servos' damping lag
RAMP = np.arange(1, SUBSTEPS + 1)[:, None] / SUBSTEPS  # (SUBSTEPS, 1): how far along the setpoints are at each step
_FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS
_ROLLOUT = None  # the process's MuJoCo rollout runner (made on first use; no thread pool: the calling thread runs it)


def _runner():
    global _ROLLOUT
    if _ROLLOUT is None:
        from mujoco import rollout

        _ROLLOUT = rollout.Rollout(nthread=0)
    return _ROLLOUT


def servo_controls(data, q: np.ndarray, q_new: np.ndarray, arm_act: np.ndarray) -> np.ndarray:
    """(SUBSTEPS, nu) the controls of one frame's physics steps: the arm's setpoints moving linearly from ``q`` to
    ``q_new`` (plus the velocity feed-forward ``LEAD``), every other actuator held at its ``data.ctrl``."""
    qdot = (q_new - q) / (SUBSTEPS * TIMESTEP)
    ctrl = np.repeat(data.ctrl[None], SUBSTEPS, axis=0)
    ctrl[:, arm_act] = q + (q_new - q) * RAMP + LEAD * qdot
    return ctrl


def step_frame(model, data, controls: np.ndarray) -> None:
    """``len(controls)`` physics steps of ``data`` with ``controls[s]`` as ``data.ctrl`` at step s, in MuJoCo's C
    loop; ``data`` is left as the stepped loop leaves it (its state, warm start and the last step's derived
    quantities)."""
    state = np.empty(mujoco.mj_stateSize(model, _FULL))
    mujoco.mj_getState(model, data, state, _FULL)
    _runner().rollout(model, data, state[None], controls[None], initial_warmstart=data.qacc_warmstart[None].copy())


def servo_frame(model, data, ctl: ArmController, q: np.ndarray, pos: np.ndarray, rpy: np.ndarray, grip: float,
                arm_act: np.ndarray, finger_act: np.ndarray) -> np.ndarray:
    """One video frame of the benchmark's controller: IK for the commanded target (pos (3,), rpy (3,)) from the last
    setpoint ``q`` (6,), then ``SUBSTEPS`` physics steps while the arm's position servos track setpoints moving
    linearly from ``q`` to the new solution (with the velocity feed-forward ``LEAD``), the fingers commanded to
    ``grip`` in [0, 1]. The real scene (``EpisodePhysics``) and the twin in the loop (``twin.SyntheticTwin``) both
    run it. Returns the new setpoint (6,)."""
    q_new = ctl.solve(q, pos, rpy)
    data.ctrl[finger_act] = grip * FINGER_TRAVEL
    controls = servo_controls(data, q, q_new, arm_act)
    step_frame(model, data, controls)
    data.ctrl[:] = controls[-1]
    return q_new


def stepped_servo_frame(model, data, ctl: ArmController, q: np.ndarray, pos: np.ndarray, rpy: np.ndarray,
                        grip: float, arm_act: np.ndarray, finger_act: np.ndarray) -> np.ndarray:
    """``servo_frame`` as a Python loop of ``SUBSTEPS`` ``mj_step`` calls, the controls set before each (what it ran
    before MuJoCo's rollout took the steps): the reference ``servo_frame`` must equal bit for bit
    (``tests/test_synthetic.py``, ``simforcing bench --sections simulator``)."""
    q_new = ctl.solve(q, pos, rpy)
    qdot = (q_new - q) / (SUBSTEPS * TIMESTEP)
    data.ctrl[finger_act] = grip * FINGER_TRAVEL
    for s in range(1, SUBSTEPS + 1):
        data.ctrl[arm_act] = q + (q_new - q) * (s / SUBSTEPS) + LEAD * qdot
        mujoco.mj_step(model, data)
    return q_new
