"""Simulator rollouts as the success judge's fitting data (``model fit-judge --sim-episodes N --sim-frames K``).

The judge reads frames of the policy benchmark's external camera while policies act; recorded demonstrations show
mostly successful, smooth motions. So the judge is also fitted on rollouts of the benchmark itself — the scripted
expert at several action-noise levels (hands that hesitate, miss, push and lift objects the wrong way) — in scenes of
another dataset seed than any evaluation (``JUDGE_SEED``), every frame labelled with the simulator's truth in the
judge's terms (``judge.true_readings``). Each episode runs its full ``max_steps`` (after a success too), so a
success's later frames are seen as well.

Rendering is what a rollout costs, and neighbouring frames of one scene teach the judge little that the next scene
would not; what it must learn is where the task's verdict flips. So an episode is first simulated without rendering
(its physics state kept after every step), then only ``frames`` of its frames are rendered (:func:`chosen_steps`):
the first (every reading is against it), the frames whose truth lies closest to the task's decision threshold, and
the rest drawn at random — more scenes for the same rendering time.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from tqdm import tqdm

from simforcing.data.synthetic.generate import mujoco
from simforcing.data.synthetic.tasks import LIFT_HEIGHT, PUSH_DISTANCE, REACH_RADIUS, Task
from simforcing.policy.closed_loop.evaluate import ExpertPlayer, run_episode, scene_of
from simforcing.policy.closed_loop.synthetic import SyntheticTaskEnv
from simforcing.policy.judge.success_judge import JudgeFrames
from simforcing.utils import derive_seed

JUDGE_SEED = 7000  # scene seed of the judge's rollouts (evaluations use 9000, demonstrations 100)
NOISE_LEVELS = (0.0, 0.01, 0.02, 0.04, 0.08)  # metres per step, cycled over the episodes
_STATE = mujoco.mjtState.mjSTATE_INTEGRATION  # the physics state of a frame
# what a rendering reads: the poses MuJoCo computed before a frame's last physics step (mj_step integrates after its
# kinematics), kept as they were so a deferred rendering equals the one made at the time, bit for bit
_POSES = ("xpos", "xmat", "xquat", "geom_xpos", "geom_xmat", "site_xpos", "site_xmat", "cam_xpos", "cam_xmat",
          "light_xpos", "light_xdir")


def decision_margin(task: Task, truth: np.ndarray) -> np.ndarray:
    """truth (T, 6) = [ee − obj, obj − obj_0] -> (T,) signed distance (m) of each frame from the task's decision
    threshold, positive where the predicate holds: reach 0.10 − ‖r‖, push d·direction − 0.04, grasp d_z − 0.05."""
    t = np.asarray(truth, np.float64)
    if task.kind == "reach":
        return REACH_RADIUS - np.linalg.norm(t[:, :3], axis=1)
    if task.kind == "push":
        return t[:, 3:5] @ np.asarray(task.direction, np.float64) - PUSH_DISTANCE
    return t[:, 5] - LIFT_HEIGHT


def chosen_steps(margin: np.ndarray, frames: int, rng: np.random.Generator) -> np.ndarray:
    """Which of an episode's T frames to render (sorted indices): frame 0, the ⌈(frames − 1) / 2⌉ others nearest the
    decision threshold (smallest |margin|), the rest at random among the remaining ones; all T when frames >= T."""
    n = len(margin)
    if frames >= n:
        return np.arange(n)
    near = 1 + np.argsort(np.abs(margin[1:]), kind="stable")[: frames // 2]
    rest = np.setdiff1d(np.arange(1, n), near)
    drawn = rng.choice(rest, frames - 1 - len(near), replace=False)
    return np.sort(np.concatenate([[0], near, drawn]))


class _Unrendered:
    """The episode's environment with rendering deferred: ``image`` returns a one-pixel placeholder (the scripted
    expert does not look), and the physics state is kept after every step (``states[t]``: the state of frame t)."""

    def __init__(self, env: SyntheticTaskEnv):
        self.env = env
        self.states = [self._state()]

    def _state(self) -> tuple[np.ndarray, dict]:
        ep = self.env.ep
        s = np.empty(mujoco.mj_stateSize(ep.model, _STATE))
        mujoco.mj_getState(ep.model, ep.data, s, _STATE)
        return s, {k: getattr(ep.data, k).copy() for k in _POSES}

    def __getattr__(self, name):
        return getattr(self.env, name)

    def image(self, cameras: int = 2) -> np.ndarray:
        return np.zeros((1, cameras, 3), np.uint8)

    def step(self, action: np.ndarray) -> bool:
        hit = self.env.step(action)
        self.states.append(self._state())
        return hit

    def render(self, t: int, cameras: int = 1) -> np.ndarray:
        """Frame t of ``cameras`` (the external camera; 2: [external | wrist]), uint8 (H, cameras·W, 3), rendered
        from its kept state (the episode then stands there)."""
        ep, (state, poses) = self.env.ep, self.states[t]
        mujoco.mj_setState(ep.model, ep.data, state, _STATE)
        mujoco.mj_forward(ep.model, ep.data)
        for k, v in poses.items():
            np.copyto(getattr(ep.data, k), v)
        return self.env.image(cameras)


def rollout_frames(env: SyntheticTaskEnv, player: ExpertPlayer, max_steps: int, frames: Optional[int],
                   rng: np.random.Generator, cameras: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """One rollout of ``player`` for ``max_steps`` steps in ``env`` -> (rendered frames uint8 (K, H, cameras·W, 3),
    their truth (K, 6)): every frame (``frames`` None) or the :func:`chosen_steps` of them."""
    if frames is None:
        o = run_episode(env, player.env_chunk(scene_of(env)), max_steps, 1, record=True, tail=max_steps,
                        cameras=cameras)
        return o.frames, o.truth
    lazy = _Unrendered(env)
    o = run_episode(lazy, player.env_chunk(scene_of(env)), max_steps, 1, record=True, tail=max_steps)
    keep = chosen_steps(decision_margin(env.task, o.truth), frames, rng)
    return np.stack([lazy.render(int(t), cameras) for t in keep]), o.truth[keep]


def simulated_frames(episodes: int, height: int, width: int, layouts: int, jitter: float = 0.03,
                     max_steps: int = 30, seed: int = JUDGE_SEED, progress: bool = True,
                     frames: Optional[int] = None, cameras: int = 1) -> JudgeFrames:
    """``episodes`` rollouts (episode i: scene i of ``seed``, the expert at noise ``NOISE_LEVELS[i % 5]``), with
    ``frames`` rendered frames each (None: all ``max_steps`` + 1; module docstring) of ``cameras`` (the external
    camera, or [external | wrist]) -> frames uint8 (N, 3, H, cameras·W), labels (N, 6), the episode of each frame
    (its first frame first), its hand's initial position."""
    if frames is not None and frames < 2:
        raise ValueError(f"frames: got {frames}; expected at least 2 rendered frames per rollout (the first and one "
                         "more) or None for all")
    out, labels, owner, q0 = [], [], [], []
    for i in tqdm(range(episodes), desc="judge rollouts", leave=False, disable=not progress):
        env = SyntheticTaskEnv(seed, i, max_steps, height, width, layouts, jitter)
        try:
            start = torch.from_numpy(env.state()[:3].copy())
            player = ExpertPlayer(NOISE_LEVELS[i % len(NOISE_LEVELS)], seed)
            rng = np.random.default_rng(derive_seed(seed, "judge-frames", i))
            x, truth = rollout_frames(env, player, max_steps, frames, rng, cameras)
        finally:
            env.close()
        out.append(torch.from_numpy(np.ascontiguousarray(x)).permute(0, 3, 1, 2))  # (K, 3, H, W)
        labels.append(torch.from_numpy(truth))
        owner.append(torch.full((len(x),), i))
        q0.append(start.float().expand(len(x), 3))
    return JudgeFrames(torch.cat(out), torch.cat(labels), torch.cat(owner), torch.cat(q0))
