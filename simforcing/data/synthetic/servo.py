"""The benchmark's controller in time: one video frame of the arm's position servos (``servo_frame``), the clock of
the synthetic data (``FPS`` frames per second, ``SUBSTEPS`` physics steps per frame) — shared by the real scene
(``generate.EpisodePhysics``), the full-scene simulation of the scene pairing and the digital twin in the loop
(``twin.SyntheticTwin``)."""

from __future__ import annotations

import numpy as np

from simforcing.data.synthetic.motions import ArmController
from simforcing.data.synthetic.offscreen import mujoco  # MUJOCO_GL set before MuJoCo's first import
from simforcing.data.synthetic.scene import FINGER_TRAVEL, SERVO_GAINS, TIMESTEP

FPS = 10
SUBSTEPS = round(1.0 / (FPS * TIMESTEP))  # physics steps per video frame (100)
LEAD = np.array([kv / kp for kp, kv in SERVO_GAINS])  # s: velocity feed-forward cancels the servos' damping lag


def servo_frame(model, data, ctl: ArmController, q: np.ndarray, pos: np.ndarray, rpy: np.ndarray, grip: float,
                arm_act: np.ndarray, finger_act: np.ndarray) -> np.ndarray:
    """One video frame of the benchmark's controller: IK for the commanded target (pos (3,), rpy (3,)) from the last
    setpoint ``q`` (6,), then ``SUBSTEPS`` physics steps while the arm's position servos track setpoints moving
    linearly from ``q`` to the new solution (with the velocity feed-forward ``LEAD``), the fingers commanded to
    ``grip`` in [0, 1]. The real scene (``EpisodePhysics``) and the arm's twin alone (``twin.ArmTwin``) both run it.
    Returns the new setpoint (6,)."""
    q_new = ctl.solve(q, pos, rpy)
    qdot = (q_new - q) / (SUBSTEPS * TIMESTEP)
    data.ctrl[finger_act] = grip * FINGER_TRAVEL
    for s in range(1, SUBSTEPS + 1):
        data.ctrl[arm_act] = q + (q_new - q) * (s / SUBSTEPS) + LEAD * qdot
        mujoco.mj_step(model, data)
    return q_new
