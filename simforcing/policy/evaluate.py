"""Closed-loop evaluation on the synthetic benchmark and the Tab. 5-style table (`simforcing policy eval`).

    res = evaluate_synthetic({"base": RUN_A, "simforcing": RUN_B}, per_task=10, max_steps=30)
    print(res["table_md"])

Scenes: the first ``per_task`` episodes of each task (reach, push, grasp) of dataset seed ``EVAL_SEED`` (the policy
dataset's demonstrations come from another seed, so they are held out), in the scene mode the runs were trained on
(``layouts``: the LIBERO-like fixed layouts of ``policy.synthetic``, or every scene its own); the same scenes, in the
same order and with the same action noise per (scene, chunk), for every policy. Each episode runs until its success
predicate holds or ``max_steps`` actions were executed; a policy's chunk is executed for its first ``policy.execute``
actions, then it re-plans. Every table carries the scripted expert (ceiling) and "do nothing" (floor). Success rates
come with 95 % Wilson score intervals (per task over its episodes; the average over tasks with the interval of the
pooled count). ``eval.json`` records the run folder, checkpoint and step each row scored (``runs``); a run that was
not finished (still training, stopped, failed) is marked in its row and named under the table.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from simforcing.config import ConfigError
from simforcing.policy.infer import PolicyRunner
from simforcing.policy.synthetic import TASKS, SyntheticTaskEnv, held_out_scenes
from simforcing.runfolder import unfinished_note
from simforcing.utils import derive_seed

EVAL_SEED = 9000  # dataset seed of the held-out evaluation scenes (synth-policy demonstrations use 100)
EXPERT, FLOOR = "scripted expert (ceiling)", "do nothing (floor)"


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a success rate k/n (n = 0: (0, 1))."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(k: int, n: int) -> dict:
    lo, hi = wilson(k, n)
    return {"successes": k, "episodes": n, "rate": k / n if n else None, "ci95": [lo, hi]}


def run_episode(env: SyntheticTaskEnv, chunk_fn: Callable[[SyntheticTaskEnv, int], np.ndarray], max_steps: int,
                execute: int) -> dict:
    """Act until success or ``max_steps`` actions; ``chunk_fn(env, chunk_index)`` gives the next chunk (k, 7)."""
    steps, chunk_i = 0, 0
    while steps < max_steps:
        chunk = np.asarray(chunk_fn(env, chunk_i))[:execute]
        chunk_i += 1
        for a in chunk:
            steps += 1
            if env.step(a):
                return {"success": True, "steps": steps, "chunks": chunk_i}
            if steps >= max_steps:
                break
    return {"success": False, "steps": steps, "chunks": chunk_i}


def expert_chunk(env: SyntheticTaskEnv, i: int) -> np.ndarray:
    return env.expert_action()[None]


def idle_chunk(env: SyntheticTaskEnv, i: int) -> np.ndarray:
    return env.idle_action()[None]


def training_scene_mode(cfg) -> tuple[int, float] | None:
    """(layouts, jitter) of the `data synth-policy` dataset a policy was trained on (``cfg.data.root``); (0, 0.03) for
    a synthetic dataset written before layouts existed; None when the dataset is not a synthetic one or is gone."""
    path = Path(cfg.data.root or "") / "meta" / "info.json"
    try:
        synth = json.loads(path.read_text()).get("synth")
    except (OSError, ValueError):
        return None
    if not isinstance(synth, dict):
        return None
    return int(synth.get("layouts", 0)), float(synth.get("jitter", 0.03))


def scene_mode(cfgs: dict, layouts: int | None, jitter: float | None,
               progress: Callable[[str], None] = print) -> tuple[int, float]:
    """The evaluation scenes' (layouts, jitter): the explicit values where given, else those of the runs' training
    data (:func:`training_scene_mode`; ConfigError when the runs were trained in different modes), else (0, 0.03).
    Evaluating a run in another mode than it was trained in is allowed (a generalisation test) and said."""
    trained = {name: m for name, cfg in cfgs.items() if (m := training_scene_mode(cfg)) is not None}
    if layouts is None:
        modes = set(trained.values())
        if len(modes) > 1:
            raise ConfigError("--layouts: the runs were trained on datasets of different scene modes ("
                              + ", ".join(f"{n}: layouts {m[0]}" for n, m in trained.items())
                              + "); pass --layouts K [--jitter M] to choose the evaluation scenes")
        layouts, jitter_default = modes.pop() if modes else (0, 0.03)
        jitter = jitter_default if jitter is None else jitter
    jitter = 0.03 if jitter is None else float(jitter)
    if layouts < 0 or not 0 <= jitter <= 0.1:
        raise ConfigError(f"--layouts {layouts} --jitter {jitter}: expected layouts >= 0 and 0 <= jitter <= 0.1 m")
    for name, m in trained.items():
        if m[0] != layouts or (layouts and abs(m[1] - jitter) > 1e-12):
            progress(f"note: {name} was trained on scenes with layouts {m[0]} (jitter {m[1]}); evaluating on layouts "
                     f"{layouts} (jitter {jitter})")
    return int(layouts), jitter


def policy_chunk_fn(runner: PolicyRunner, seed: int, scene: tuple) -> Callable:
    def fn(env: SyntheticTaskEnv, i: int) -> np.ndarray:
        gen = torch.Generator().manual_seed(derive_seed(seed, "policy-noise", *scene, i) & 0x7FFFFFFF)
        return runner.act(env.image(), env.state(), env.instruction, gen)
    return fn


def evaluate_synthetic(runs: dict[str, str | Path], per_task: int = 10, max_steps: int = 30, seed: int = EVAL_SEED,
                       tasks=TASKS, baselines: bool = True, device="cpu", progress: Callable[[str], None] = print,
                       height: int | None = None, width: int | None = None, execute: int | None = None,
                       layouts: int | None = None, jitter: float | None = None) -> dict:
    """Closed-loop success of each run (name -> policy run folder) and of the expert / floor rows on the same
    held-out scenes. ``execute`` overrides the runs' ``policy.execute``; ``layouts``/``jitter``: the scene mode
    (:func:`scene_mode`). Returns {"scenes", "rows": {name: {task: rate(...), "average": ...}}, "table_md", ...}."""
    for flag, value, ok in (("--per-task", per_task, per_task >= 1), ("--max-steps", max_steps, max_steps >= 1),
                            ("--execute", execute, execute is None or execute >= 1)):
        if not ok:
            raise ConfigError(f"{flag}: got {value}; expected an integer >= 1")
    runners = {name: PolicyRunner.load(run, device) for name, run in runs.items()}
    layouts, jitter = scene_mode({name: r.cfg for name, r in runners.items()}, layouts, jitter, progress)
    scenes = held_out_scenes(seed, per_task, max_steps, tasks, layouts=layouts, jitter=jitter)
    if height is None or width is None:
        any_cfg = next(iter(runners.values())).cfg if runners else None
        cams = any_cfg.policy.cameras if any_cfg else 2
        height = height or (any_cfg.data.height if any_cfg else 32)
        width = width or (any_cfg.data.width // cams if any_cfg else 48)
    players: dict[str, Callable] = {}
    if baselines:
        players[EXPERT] = lambda scene: expert_chunk
        players[FLOOR] = lambda scene: idle_chunk
    for name, runner in runners.items():
        players[name] = (lambda r: (lambda scene: policy_chunk_fn(r, seed, scene)))(runner)
    execute = {name: (execute if execute is not None else runners[name].cfg.policy.execute) if name in runners else 1
               for name in players}
    rows: dict = {}
    episodes: dict = {}
    t0 = time.perf_counter()
    for name, make in players.items():
        t_run = time.perf_counter()
        per = {}
        for task in tasks:
            outcomes = []
            for idx in scenes[task]:
                env = SyntheticTaskEnv(seed, idx, max_steps, height, width, layouts, jitter)
                try:
                    outcomes.append(run_episode(env, make((task, idx)), max_steps, execute[name]))
                finally:
                    env.close()
            episodes.setdefault(name, {})[task] = outcomes
            per[task] = rate(sum(o["success"] for o in outcomes), len(outcomes))
        k, n = sum(per[t]["successes"] for t in tasks), sum(per[t]["episodes"] for t in tasks)
        per["average"] = {"rate": float(np.mean([per[t]["rate"] for t in tasks])), "ci95": list(wilson(k, n)),
                          "successes": k, "episodes": n}
        per["seconds"] = time.perf_counter() - t_run
        rows[name] = per
        progress(f"closed loop {name}: " + ", ".join(f"{t} {per[t]['successes']}/{per[t]['episodes']}"
                                                      for t in tasks) + f" ({per['seconds']:.0f} s)")
    scored = {name: r.scored for name, r in runners.items()}  # the run folder, checkpoint and step of each row
    return {"scenes": scenes, "seed": seed, "per_task": per_task, "max_steps": max_steps, "tasks": list(tasks),
            "layouts": layouts, "jitter": jitter, "runs": scored,
            "rows": rows, "episodes": episodes, "seconds": time.perf_counter() - t0,
            "table_md": table_with_notes(rows, list(tasks), scored)}


def scored_labels(scored: dict) -> tuple[dict, list[str]]:
    """For the runs an evaluation scored (name -> ``runfolder.scored_record``): table labels that mark an unfinished
    run, and one note line for each."""
    labels, notes = {}, []
    for name, rec in scored.items():
        note = unfinished_note(name, rec or {"finished": True})
        if note is not None:
            labels[name] = f"{name} (unfinished run, step {rec['step']})"
            notes.append(f"Note: {note}")
    return labels, notes


def table_with_notes(rows: dict, tasks: list[str], scored: dict) -> str:
    """:func:`format_table` with unfinished runs marked in their row and named under the table."""
    labels, notes = scored_labels(scored)
    return format_table(rows, tasks, labels) + ("\n\n" + "\n".join(notes) if notes else "")


def _cell(r: dict) -> str:
    lo, hi = r["ci95"]
    return f"{100 * r['rate']:.0f} [{100 * lo:.0f}, {100 * hi:.0f}]"


def format_table(rows: dict, tasks: list[str], labels: dict | None = None) -> str:
    """Tab. 5's layout: rows = policy (setting × initialisation), columns = tasks + average; success % [95 % CI]."""
    labels = labels or {}
    lines = ["| policy | " + " | ".join(tasks) + " | average |", "|---" * (len(tasks) + 2) + "|"]
    for name, r in rows.items():
        lines.append(f"| {labels.get(name, name)} | " + " | ".join(_cell(r[t]) for t in tasks)
                     + f" | {_cell(r['average'])} |")
    return "\n".join(lines)
