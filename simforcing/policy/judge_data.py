"""Simulator rollouts as the success judge's fitting data (``model fit-judge --sim-episodes N``).

The judge reads frames of the policy benchmark's external camera while policies act; recorded demonstrations show
mostly successful, smooth motions. So the judge is also fitted on rollouts of the benchmark itself — the scripted
expert at several action-noise levels (hands that hesitate, miss, push and lift objects the wrong way) — in scenes of
another dataset seed than any evaluation (``JUDGE_SEED``), every frame labelled with the simulator's truth in the
judge's terms (``judge.true_readings``). Each episode runs its full ``max_steps`` (after a success too), so a
success's later frames are seen as well.
"""

from __future__ import annotations

import numpy as np
import torch
from tqdm import tqdm

from simforcing.policy.evaluate import ExpertPlayer, run_episode, scene_of
from simforcing.policy.judge import JudgeFrames
from simforcing.policy.synthetic import SyntheticTaskEnv

JUDGE_SEED = 7000  # scene seed of the judge's rollouts (evaluations use 9000, demonstrations 100)
NOISE_LEVELS = (0.0, 0.01, 0.02, 0.04, 0.08)  # metres per step, cycled over the episodes


def simulated_frames(episodes: int, height: int, width: int, layouts: int, jitter: float = 0.03,
                     max_steps: int = 30, seed: int = JUDGE_SEED, progress: bool = True) -> JudgeFrames:
    """``episodes`` rollouts (episode i: scene i of ``seed``, the expert at noise ``NOISE_LEVELS[i % 5]``) ->
    frames uint8 (N, 3, H, W), labels (N, 6), the episode of each frame, its hand's initial position."""
    frames, labels, owner, q0 = [], [], [], []
    for i in tqdm(range(episodes), desc="judge rollouts", leave=False, disable=not progress):
        env = SyntheticTaskEnv(seed, i, max_steps, height, width, layouts, jitter)
        try:
            start = torch.from_numpy(env.state()[:3].copy())
            player = ExpertPlayer(NOISE_LEVELS[i % len(NOISE_LEVELS)], seed)
            o = run_episode(env, player.env_chunk(scene_of(env)), max_steps, 1, record=True, tail=max_steps)
        finally:
            env.close()
        frames.append(torch.from_numpy(np.ascontiguousarray(o["frames"])).permute(0, 3, 1, 2))  # (T, 3, H, W)
        labels.append(torch.from_numpy(o["truth"]))
        owner.append(torch.full((len(o["frames"]),), i))
        q0.append(start.float().expand(len(o["frames"]), 3))
    return JudgeFrames(torch.cat(frames), torch.cat(labels), torch.cat(owner), torch.cat(q0))
