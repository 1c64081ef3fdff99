"""Scripted reach / push / grasp motions and the 7-D actions they command.

A motion is a list of end-effector waypoints (position, gripper yaw, gripper opening, frames to get there), followed
by random reaches once the task is done, so any episode length is filled with motion. The waypoints become one
commanded target per frame (minimum-jerk interpolation plus noise); the actions are the differences between
consecutive commanded targets:

    action_t = [p*_{t+1} − p*_t (3), rpy*_{t+1} − rpy*_t (3), g*_{t+1} (1)]      t = 0 … T−2

with p* the target position (m), rpy* the target roll-pitch-yaw (rad, extrinsic xyz of the ``ee`` site frame) and
g* the commanded gripper opening in [0, 1] (1 = open). The controller tracks p*_{t+1} between frame t and t+1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np
from scipy.spatial.transform import Rotation

from simforcing.data.synthetic.scene import (ARM_JOINTS, ARM_REACH, EE_SITE, HOME_Q, SHOULDER_Z, WRIST_ABOVE_EE,
                                             SceneObject)
from simforcing.data.synthetic.tasks import KINDS, PUSH_DIRECTIONS

# End-effector workspace (m, rad): targets are clipped into it, so the arm stays in view and reachable.
WORKSPACE_LO = np.array([0.2, -0.36, 0.015])
WORKSPACE_HI = np.array([0.6, 0.36, 0.34])
YAW_LIMIT = 1.6
TILT_LIMIT = 0.12  # |roll|, |pitch| of the commanded gripper


@dataclass
class Waypoint:
    pos: np.ndarray  # (3,) target end-effector position
    yaw: float  # gripper yaw about the vertical
    grip: float  # commanded opening in [0, 1]
    frames: int  # frames spent moving from the previous waypoint to this one


@dataclass
class Motion:
    """Commanded targets for every frame: pos (T, 3), rpy (T, 3), grip (T,)."""

    kind: str
    instruction: str
    pos: np.ndarray
    rpy: np.ndarray
    grip: np.ndarray
    target: int = -1  # index of the task's object in the scene's objects
    failure: str = ""  # how a failing operator fails the task (``FAILURE_MODES``); "" for the scripted operator

    def actions(self) -> np.ndarray:
        """(T−1, 7) float32: target deltas between consecutive frames + the next gripper command."""
        return np.concatenate([np.diff(self.pos, axis=0), np.diff(self.rpy, axis=0), self.grip[1:, None]],
                              axis=1).astype(np.float32)


def _clip(p: np.ndarray) -> np.ndarray:
    """Targets (..., 3) into the workspace box, then pulled in so the wrist stays within 92 % of the arm's reach."""
    p = np.clip(p, WORKSPACE_LO, WORKSPACE_HI)
    wrist = p + [0.0, 0.0, WRIST_ABOVE_EE - SHOULDER_Z]  # wrist relative to the shoulder joint
    r = np.linalg.norm(wrist, axis=-1, keepdims=True)
    scale = np.minimum(1.0, 0.92 * ARM_REACH / r)
    return wrist * scale - [0.0, 0.0, WRIST_ABOVE_EE - SHOULDER_Z]


def _grip_yaw(angle: float) -> float:
    """A parallel gripper is symmetric under a half turn: pick the equivalent yaw inside ±π/2."""
    return float((angle + np.pi / 2) % np.pi - np.pi / 2)


def _frames(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def _noisy(rng: np.random.Generator, p, sigma: float = 0.01) -> np.ndarray:
    return _clip(np.asarray(p, np.float64) + rng.normal(0, sigma, 3))


def _name(o: SceneObject) -> str:
    return f"the {o.colour} {o.shape}"


def _reach(rng, o: SceneObject, yaw0: float) -> tuple[str, list[Waypoint]]:
    x, y = o.pos
    yaw = _grip_yaw(o.yaw) if rng.random() < 0.5 else yaw0
    near = 2 * o.height + rng.uniform(0.03, 0.06)
    text = rng.choice(["reach toward {}", "move the gripper to {}", "reach for {}"]).format(_name(o))
    return text, [
        Waypoint(_noisy(rng, [x, y, near + 0.1]), yaw, 1.0, _frames(rng, 6, 8)),
        Waypoint(_noisy(rng, [x, y, near], 0.005), yaw, 1.0, _frames(rng, 4, 5)),
        Waypoint(_noisy(rng, [x, y, near + 0.02], 0.005), yaw, 0.6, _frames(rng, 2, 3)),
        Waypoint(_noisy(rng, [x - 0.08, y * 0.6, 0.24], 0.03), yaw0, 1.0, _frames(rng, 6, 8)),
    ]


def _push(rng, o: SceneObject, yaw0: float) -> tuple[str, list[Waypoint]]:
    p = np.array(o.pos)
    ok = [k for k, d in PUSH_DIRECTIONS.items()
          if np.all(p + 0.2 * d >= WORKSPACE_LO[:2] + 0.02) and np.all(p + 0.2 * d <= WORKSPACE_HI[:2] - 0.02)
          and np.all(p - 0.1 * d >= WORKSPACE_LO[:2]) and np.all(p - 0.1 * d <= WORKSPACE_HI[:2])]
    name = str(rng.choice(ok or list(PUSH_DIRECTIONS)))
    d = PUSH_DIRECTIONS[name]
    yaw = _grip_yaw(np.arctan2(d[1], d[0]))  # palm face (hand x) along the push
    radius = max(o.size[:2]) if o.geom == "box" else o.size[0]
    start = p - d * (radius + 0.045)
    end = p + d * rng.uniform(0.1, 0.15)
    z = max(0.02, o.height)
    text = rng.choice(["push {} {}", "slide {} {}"]).format(_name(o), name)
    return text, [
        Waypoint(_noisy(rng, [*start, 0.12], 0.005), yaw, 0.0, _frames(rng, 6, 8)),  # closed fingers: a paddle
        Waypoint(_clip(np.array([*start, z])), yaw, 0.0, _frames(rng, 4, 5)),
        Waypoint(_clip(np.array([*end, z])), yaw, 0.0, _frames(rng, 7, 9)),
        Waypoint(_noisy(rng, [*end, 0.16], 0.01), yaw, 1.0, _frames(rng, 4, 5)),
    ]


def _grasp(rng, o: SceneObject, yaw0: float) -> tuple[str, list[Waypoint]]:
    x, y = o.pos
    yaw = _grip_yaw(o.yaw)  # fingers close across the object's y side (its narrow side for a block)
    z = max(0.018, o.height)
    text = rng.choice(["pick up {}", "grasp {} and lift it", "lift {}"]).format(_name(o))
    return text, [
        Waypoint(_noisy(rng, [x, y, 0.13], 0.005), yaw, 1.0, _frames(rng, 6, 8)),
        Waypoint(_clip(np.array([x, y, z])), yaw, 1.0, _frames(rng, 4, 5)),
        Waypoint(_clip(np.array([x, y, z])), yaw, 0.0, 2),
        Waypoint(_clip(np.array([x, y, 0.22])), yaw, 0.0, _frames(rng, 5, 6)),
        Waypoint(_noisy(rng, [x - 0.05, -0.5 * y, 0.25], 0.04), yaw0, 0.0, _frames(rng, 5, 7)),
    ]


_PLANNERS = {"reach": _reach, "push": _push, "grasp": _grasp}
_SHAPES_FOR = {"reach": ("block", "cube", "ball", "cylinder"), "push": ("block", "cube", "ball", "cylinder"),
               "grasp": ("block", "cube", "cylinder")}


def random_reach(rng: np.random.Generator, grip: float, high: bool = False) -> Waypoint:
    """A free move to a random point of the workspace (fills episodes longer than the task); ``high``: in its upper
    band (z >= ``HIGH_Z``), where the fingers clear every object (a failing operator's, after its failed attempt)."""
    lo = WORKSPACE_LO + [0.02, 0.04, 0.06]
    if high:
        lo[2] = HIGH_Z
    p = rng.uniform(lo, WORKSPACE_HI - [0.02, 0.04, 0.0])
    return Waypoint(p, float(rng.uniform(-1.0, 1.0)), float(rng.choice([grip, 1.0, 0.0])), _frames(rng, 5, 8))


# ----------------------------------------------------------------------------------------------------------------------
# A failing operator (``data synth --failures``): the same task attempted, failed as policies fail it
# ----------------------------------------------------------------------------------------------------------------------

HIGH_Z = 0.2  # m: the end-effector this high clears every object (their tops are below 0.07 m), 0.17 m from a centre
FAILURE_MODES = {"reach": ("miss", "short"), "push": ("miss", "short"), "grasp": ("miss", "early_close")}
FAILURE_TEXT = {
    "reach/miss": "reaches for a point 13-17 cm beside the object (outside the 10 cm reach radius)",
    "reach/short": "stops 13-16 cm above the object's centre and hovers there before retreating",
    "push/miss": "pushes along the named direction 9-12 cm beside the object (the paddle passes it by)",
    "push/short": "stops the push 0-4.5 cm after its start, 3.3 cm from contact at most (it ends before moving the "
                  "object by the 4 cm the task needs)",
    "grasp/miss": "descends and closes the gripper 7.5-9.5 cm beside the object along its long side, lifts nothing",
    "grasp/early_close": "closes the gripper 6-9 cm above the grasp height, lifts nothing",
}


def _shifted(waypoints: list[Waypoint], which: range, offset: np.ndarray) -> list[Waypoint]:
    """The waypoints with those of ``which`` moved by ``offset`` (2,) in the table plane, clipped again."""
    out = list(waypoints)
    for i in which:
        out[i] = replace(out[i], pos=_clip(out[i].pos + np.array([offset[0], offset[1], 0.0])))
    return out


def _clear_of(waypoints: list[Waypoint], which: range, xy: np.ndarray, distance: float) -> bool:
    return all(np.linalg.norm(waypoints[i].pos[:2] - xy) >= distance for i in which)


def _miss(rng: np.random.Generator, waypoints: list[Waypoint], which: range, xy: np.ndarray, lo: float, hi: float,
          directions: np.ndarray) -> Optional[list[Waypoint]]:
    """The waypoints of ``which`` moved by U(lo, hi) m along the first of ``directions`` (unit (k, 2)) that keeps them
    ``lo`` − 5 mm from ``xy`` once clipped into the workspace; None when none does."""
    dist = rng.uniform(lo, hi)
    for d in directions:
        moved = _shifted(waypoints, which, dist * d)
        if _clear_of(moved, which, xy, lo - 0.005):
            return moved
    return None


def fail_waypoints(rng: np.random.Generator, kind: str, o: SceneObject,
                   waypoints: list[Waypoint]) -> tuple[str, list[Waypoint]]:
    """A failing operator's attempt at the task of ``waypoints`` (what ``_reach`` / ``_push`` / ``_grasp`` planned for
    object ``o``): one of the task's ``FAILURE_MODES`` drawn from ``rng`` (``FAILURE_TEXT`` says what each does) ->
    (mode, waypoints). The end-effector never comes where the predicate of ``tasks.py`` would hold; a miss that the
    workspace leaves no room for becomes the task's other failure."""
    xy = np.array(o.pos, np.float64)
    mode = str(rng.choice(FAILURE_MODES[kind]))
    angle = rng.uniform(0, 2 * np.pi)
    if kind == "reach":
        if mode == "miss":  # every waypoint of the approach beside the object, the retreat straight up
            ring = np.stack([[np.cos(angle + k * np.pi / 4), np.sin(angle + k * np.pi / 4)] for k in range(8)])
            moved = _miss(rng, waypoints, range(3), xy, 0.13, 0.17, ring)
            if moved is not None:
                moved[3] = replace(moved[3], pos=_clip(np.array([*moved[2].pos[:2], 0.24])))
                return mode, moved
            mode = "short"
        hover = o.height + rng.uniform(0.13, 0.16)  # above the centre: farther than the reach radius
        return mode, [waypoints[0]] + [replace(w, pos=_clip(np.array([*w.pos[:2], hover + dz])))
                                       for w, dz in ((waypoints[1], 0.0), (waypoints[2], 0.02))] + waypoints[3:]
    if kind == "push":
        d = np.array([waypoints[2].pos[0] - waypoints[1].pos[0], waypoints[2].pos[1] - waypoints[1].pos[1]])
        d = d / max(np.linalg.norm(d), 1e-9)
        if mode == "miss":  # the whole push beside the object, on either side
            side = np.array([-d[1], d[0]]) * (1 if rng.random() < 0.5 else -1)
            moved = _miss(rng, waypoints, range(4), xy, 0.09, 0.12, np.stack([side, -side]))
            if moved is not None:
                return mode, moved
            mode = "short"
        start = waypoints[1].pos
        end = _clip(np.array([*(start[:2] + d * rng.uniform(0.0, 0.045)), start[2]]))
        return mode, waypoints[:2] + [replace(waypoints[2], pos=end),
                                      replace(waypoints[3], pos=_clip(np.array([*end[:2], 0.16])))]
    if kind == "grasp":
        if mode == "miss":  # along the object's long side, where the closing fingers find nothing between them
            along = np.array([np.cos(o.yaw), np.sin(o.yaw)])
            moved = _miss(rng, waypoints, range(4), xy, 0.075, 0.095, np.stack([along, -along]))
            if moved is not None:
                return mode, moved
            mode = "early_close"
        up = rng.uniform(0.06, 0.09)
        return mode, waypoints[:1] + [replace(w, pos=_clip(w.pos + [0.0, 0.0, up])) for w in waypoints[1:3]] \
            + waypoints[3:]
    raise ValueError(f"task kind: got {kind!r}; expected one of {tuple(FAILURE_MODES)}")


def _min_jerk(u: np.ndarray) -> np.ndarray:
    return u ** 3 * (10 - 15 * u + 6 * u ** 2)


def script_motion(rng: np.random.Generator, objects: list[SceneObject], start_pos: np.ndarray, start_yaw: float,
                  length: int, failing: Optional[np.random.Generator] = None) -> Motion:
    """Choose a task and a target among the task objects (named ones), then lay out T = ``length`` targets.
    ``failing``: the operator fails the task (:func:`fail_waypoints`, its draws from this generator; the task, its
    object and instruction the same) and fills the rest of the episode with reaches above every object."""
    kind = str(rng.choice(KINDS))
    targets = [o for o in objects if o.colour and o.shape in _SHAPES_FOR[kind]]
    if not targets:  # every task object has a shape this task cannot use: fall back to reaching
        kind, targets = "reach", [o for o in objects if o.colour]
    if not targets:
        raise ValueError("script_motion: the scene has no named task object (SceneObject.colour is empty for all)")
    target = targets[int(rng.integers(len(targets)))]
    instruction, waypoints = _PLANNERS[kind](rng, target, start_yaw)
    failure = ""
    if failing is not None:
        failure, waypoints = fail_waypoints(failing, kind, target, waypoints)

    pos = [np.asarray(start_pos, np.float64)]
    yaw, grip = [float(start_yaw)], [1.0]
    queue = list(waypoints)
    while len(pos) < length:
        wp = queue.pop(0) if queue else random_reach(rng, grip[-1], high=bool(failure))
        u = _min_jerk(np.arange(1, wp.frames + 1) / wp.frames)
        p0, y0 = pos[-1], yaw[-1]
        for k in range(wp.frames):
            pos.append(p0 + (wp.pos - p0) * u[k])
            yaw.append(y0 + (wp.yaw - y0) * u[k])
            grip.append(wp.grip)
    T = length
    p = np.stack(pos[:T])
    p[1:] = _clip(p[1:] + rng.normal(0, 0.002, size=(T - 1, 3)))  # tracking noise of a scripted operator
    tilt = np.cumsum(rng.normal(0, 0.015, size=(T, 2)), axis=0)  # a slow random wobble of roll and pitch
    tilt[0] = 0.0
    rpy = np.concatenate([np.clip(tilt, -TILT_LIMIT, TILT_LIMIT),
                          np.clip(np.array(yaw[:T]), -YAW_LIMIT, YAW_LIMIT)[:, None]], axis=1)
    return Motion(kind=kind, instruction=str(instruction), pos=p, rpy=rpy, grip=np.array(grip[:T], np.float64),
                  target=next(i for i, o in enumerate(objects) if o is target), failure=failure)


def perturb_targets(pos: np.ndarray, rng: np.random.Generator, sigma: float) -> np.ndarray:
    """Commanded positions (T, 3) of a noisy operator: every position delta gets N(0, σ²) per axis (metres), as the
    policy benchmark's noisy expert (``policy.closed_loop.evaluate.ExpertPlayer``), and the target is clipped into the
    workspace after each step, the controller's rule (``policy.closed_loop.synthetic.CommandedTarget``) — so the noise
    accumulates into a random walk around the scripted path. ``data synth --action-noise``: action sequences a world
    model trained on scripted motions alone never sees."""
    deltas = np.diff(pos, axis=0) + rng.normal(0.0, sigma, size=(len(pos) - 1, 3))
    out = np.array(pos, np.float64)
    for t in range(1, len(pos)):
        out[t] = _clip(out[t - 1] + deltas[t - 1])
    return out


def insert_pauses(motion: Motion, rng: np.random.Generator, pauses: int) -> Motion:
    """The operator stops ``pauses`` times: at a random frame after the first the commanded target (position,
    orientation, gripper) is held for 2–5 frames (zero actions), then the scripted motion goes on where it stopped;
    the episode keeps its length (the motion's end is cut). ``data synth --pauses``: what a world model trained on
    scripted motions alone never sees — commanded stillness."""
    length = len(motion.pos)
    idx = list(range(length))
    for at in sorted(rng.integers(1, length - 1, size=pauses), reverse=True):
        idx[at:at] = [int(at)] * int(rng.integers(2, 6))
    idx = np.array(idx[:length])
    motion.pos, motion.rpy, motion.grip = motion.pos[idx], motion.rpy[idx], motion.grip[idx]
    return motion


# ----------------------------------------------------------------------------------------------------------------------
# Executing the commanded targets: differential inverse kinematics
# ----------------------------------------------------------------------------------------------------------------------


def rpy_to_mat(rpy: np.ndarray) -> np.ndarray:
    """(3,) extrinsic x-y-z angles -> (3, 3) rotation matrix."""
    return Rotation.from_euler("xyz", rpy).as_matrix()


def mat_to_rpy(mat: np.ndarray) -> np.ndarray:
    return Rotation.from_matrix(np.asarray(mat).reshape(3, 3)).as_euler("xyz")


def rotvec(R: np.ndarray) -> np.ndarray:
    """(3, 3) rotation (angle < π) -> (3,) axis·angle."""
    v = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])  # 2·sin(θ)·axis
    s, c = 0.5 * math.sqrt(v.dot(v)), 0.5 * (R[0, 0] + R[1, 1] + R[2, 2] - 1.0)  # np.linalg.norm's and np.trace's sums
    theta = np.arctan2(s, c)
    return 0.5 * v * (theta / s if s > 1e-12 else 1.0)


class ArmController:
    """Damped-least-squares IK on the ``ee`` site (Jacobian from mj_jacSite) over the 6 arm joints.

    ``solve`` runs on a private kinematics-only copy of the model, so the physics state is never touched; the
    result is the joint setpoint the position servos track. A small null-space pull toward ``HOME_Q`` keeps the
    elbow up.
    """

    def __init__(self, model, damping: float = 0.02, rot_weight: float = 0.3):
        import mujoco  # not at the top: generate.py sets MUJOCO_GL before MuJoCo's first import (package docstring)

        self.mj, self.model, self.data = mujoco, model, mujoco.MjData(model)
        joints = [model.joint(j) for j in ARM_JOINTS]
        self.qadr = np.array([int(j.qposadr[0]) for j in joints])
        self.dofadr = np.array([int(j.dofadr[0]) for j in joints])
        self.lo, self.hi = (np.array([model.jnt_range[j.id][k] for j in joints]) for k in (0, 1))
        self.site = int(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, EE_SITE))
        self.home = np.array(HOME_Q)
        self.damping, self.rot_weight = damping, rot_weight
        self._jacp, self._jacr = np.zeros((3, model.nv)), np.zeros((3, model.nv))
        # solve's loop-invariant terms and buffers, made once (the same numbers each iteration made before)
        self._w = np.array([1, 1, 1] + [rot_weight] * 3)
        self._w_col = self._w[:, None]
        self._eye = np.eye(6)
        self._ridge = damping ** 2 * np.eye(6)
        self._err, self._J = np.empty(6), np.empty((6, 6), order="F")  # F: the layout the Jacobian columns had

    def solve(self, q: np.ndarray, pos: np.ndarray, rpy: np.ndarray, iters: int = 40,
              tol: float = 1e-4) -> np.ndarray:
        """Joint angles (6,) that put the site at ``pos`` (3,) with orientation ``rpy`` (3,), starting from q (6,)."""
        mj, d, m, site = self.mj, self.data, self.model, self.site
        q = np.clip(np.asarray(q, np.float64).copy(), self.lo, self.hi)
        target = rpy_to_mat(rpy)
        w, w_col, ridge, eye = self._w, self._w_col, self._ridge, self._eye
        jacp, jacr, err, J = self._jacp, self._jacr, self._err, self._J
        for _ in range(iters):
            d.qpos[self.qadr] = q
            mj.mj_kinematics(m, d)
            mj.mj_comPos(m, d)
            err[:3] = pos - d.site_xpos[site]  # (6,) world frame: position, then rotation
            err[3:] = rotvec(target @ d.site_xmat[site].reshape(3, 3).T)
            if np.abs(err[:3]).max() < tol and np.abs(err[3:]).max() < 10 * tol:
                break
            mj.mj_jacSite(m, d, jacp, jacr, site)
            J[:3], J[3:] = jacp[:, self.dofadr], jacr[:, self.dofadr]
            Jw = J * w_col  # (6, 6)
            JJt = Jw @ Jw.T + ridge
            dq = Jw.T @ np.linalg.solve(JJt, err * w)
            null = eye - Jw.T @ np.linalg.solve(JJt, Jw)
            dq += null @ (0.05 * (self.home - q))
            q = np.clip(q + np.clip(dq, -0.3, 0.3), self.lo, self.hi)
        return q


class CommandedTarget:
    """The controller's commanded target (``policy.closed_loop.synthetic``, "Action"): the deltas of an action are added
    to the target, which is clipped into the scripted workspace; the gripper command is clipped to [0, 1]. What the
    controller executes — the simulator, the arm's twin — and what a world model is given instead (the effective
    action) are the same, without reading any simulator state."""

    def __init__(self, pos: np.ndarray, rpy: np.ndarray, grip: float):
        self.pos, self.rpy, self.grip = np.array(pos, np.float64), np.array(rpy, np.float64), float(grip)

    def copy(self) -> "CommandedTarget":
        return CommandedTarget(self.pos, self.rpy, self.grip)

    def apply(self, action: np.ndarray) -> np.ndarray:
        """Move the target by one 7-D action; returns the effective action (the target's actual change, the
        clipped gripper command), float64 (7,)."""
        a = np.asarray(action, np.float64).reshape(-1)
        if a.shape != (7,) or not np.all(np.isfinite(a)):
            raise ValueError(f"action: expected 7 finite numbers; got {a}")
        pos = _clip(self.pos + a[:3])
        rpy = self.rpy + a[3:6]
        rpy = np.concatenate([np.clip(rpy[:2], -TILT_LIMIT, TILT_LIMIT), np.clip(rpy[2:], -YAW_LIMIT, YAW_LIMIT)])
        eff = np.concatenate([pos - self.pos, rpy - self.rpy, [np.clip(a[6], 0.0, 1.0)]])
        self.pos, self.rpy, self.grip = pos, rpy, float(eff[6])
        return eff
