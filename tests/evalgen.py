"""Policy evaluations written directly through the typed results (``policy.closed_loop.results``: no simulator, no
world model), for the tests of what reads them (``policy estimate``, ``policy agreement``).

    root, truth = write_known_pool(tmp_path)   # root/sim (the truth) and root/wm, 4 policies × 3 tasks × 20 scenes
    evaluation(SIMULATOR, 20, lambda p, t, s: EpisodeOutcome(s, True, 10)).write(folder)
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import numpy as np

from simforcing.policy.closed_loop.results import (SIMULATOR, WORLD_MODEL, EpisodeOutcome, JudgeRecord,
                                                   PolicyEvaluation, PolicyRow)

TASKS = ["reach", "push", "grasp"]
RATES = {"good": 0.9, "fair": 0.55, "poor": 0.25, "idle": 0.0}


def evaluation(env: str, per_task: int, outcome: Callable[[str, str, int], EpisodeOutcome],
               policies=tuple(RATES), judge: Optional[JudgeRecord] = None) -> PolicyEvaluation:
    """An evaluation in ``env`` of ``policies`` on scenes 0 … per_task − 1 of every task, each episode
    ``outcome(policy, task, scene)``, judged by ``judge`` (a record only: what `policy agreement` matches)."""
    scenes = {t: list(range(per_task)) for t in TASKS}
    episodes = {p: {t: [outcome(p, t, s) for s in scenes[t]] for t in TASKS} for p in policies}
    return PolicyEvaluation(env=env, seed=5, per_task=per_task, max_steps=30, tasks=list(TASKS), layouts=2, jitter=0.0,
                            resolution=(32, 48), scenes=scenes, rows={p: PolicyRow.of(per, TASKS)
                                                                      for p, per in episodes.items()},
                            episodes=episodes, runs={}, learned=[], executed={p: 4 for p in policies}, seconds=1.0,
                            wm="wm" if env == WORLD_MODEL else None, judge=judge)


def write_known_pool(root: Path) -> tuple[Path, dict]:
    """ROOT/sim, a simulator evaluation (the truth), and ROOT/wm, a world-model one of the same 4 policies × 3 tasks
    × 20 scenes: the world model's verdict is right 75 % of the time, and where it is wrong its arm wanders from the
    actions. Returns (root, the truth per (policy, task, scene))."""
    rng = np.random.default_rng(7)
    truth = {(p, t, s): bool(rng.random() < r) for p, r in RATES.items() for t in TASKS for s in range(20)}

    def sim(p, t, s):
        return EpisodeOutcome(s, truth[(p, t, s)], 10)

    def wm(p, t, s):
        right = rng.random() < 0.75
        v = truth[(p, t, s)] if right else bool(rng.random() < 0.6)
        margin = (0.02 if v else -0.03) + rng.normal(0, 0.01)
        arm = rng.normal(15 if right else 45, 8, 6).clip(0).round(1).tolist()
        return EpisodeOutcome(s, v, 10, frame_judged=[v] * 6, frame_margin=[margin] * 6, frame_arm_mm=arm)

    evaluation(SIMULATOR, 20, sim).write(root / "sim")
    evaluation(WORLD_MODEL, 20, wm).write(root / "wm")
    return root, truth


def edited(src: Path, dst: Path, edit: Callable[[dict], None]) -> Path:
    """DST: a copy of the evaluation folder ``src`` whose eval.json ``edit(body)`` changed (a file cut short, edited,
    or written by another version)."""
    import json

    body = json.loads((src / "eval.json").read_text())
    edit(body)
    dst.mkdir(parents=True)
    (dst / "eval.json").write_text(json.dumps(body))
    return dst


def demo_results() -> dict:
    """A demo's results.json as far as the README's tables read it (``demo.readme_tables.figures``): every section
    they quote, one row each."""
    return {"baselines": {"copy-first": {"psnr": 22.0, "af_pos": 0.1}},
            "summary": {"rows": {"sft": {"psnr": 23.0, "af_pos": 0.09}, "simforcing": {"psnr": 24.0, "af_pos": 0.08}}},
            "fewstep": {"windows": {"psnr": {"student": 23.5}, "af_pos": {"student": 0.085}}},
            "rollouts": {"runs": {"simforcing": {"rows": {"rollout": {"mean": {"psnr": 20.0, "af_pos": 0.15}}}}}},
            "wm_eval": {"harness": {"ranking": {"simulator frames through the judge": {"all": {"pearson": 0.97}}}}},
            "estimate": {"rows": {"simforcing-fewstep": {"pearson": 0.5, "pearson_ci95": [0.2, 0.7],
                                                         "rho_predictor": 0.3, "saved": 0.1}}}}
