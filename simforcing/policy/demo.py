"""The demo's policy section (paper Tab. 5 at demo scale): one call for whoever assembles the demo report.

    res = policy_section(OUT, {"simforcing": RUN_SF, "sft": RUN_SFT}, full=False, seed=42, jobs=2, progress=print)
    res["table_md"], res["commands"], res["rows"], res["wall_time_s"]

1. the policy dataset (``data synth-policy``: scripted-expert demonstrations, two cameras; cached in OUT/policy/data);
2. policies trained from ``base`` (the world model's architecture and VAE, weights from the model's own init — what
   stands in for Wan2.2 at demo scale, README "Policy transfer") and from the SimForcing world model; the default is
   the action-only setting (the paper's largest gain); ``full`` adds unconditional and video + action and the
   ``sft`` world model's initialisation (does SimForcing's motion prior, not real-video fine-tuning, transfer?);
   independent trainings run as parallel processes with one thread each when ``jobs > 1``;
3. closed-loop success on the same held-out scenes with the scripted expert (ceiling) and do-nothing (floor) rows,
   95 % Wilson intervals; evaluation also split across ``jobs`` processes.
A finished run or evaluation is reused when the section is called again (the demo's resume behaviour).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from simforcing.policy.evaluate import EXPERT, FLOOR, format_table


@dataclass
class PolicyBudget:
    per_task: int = 12  # training demonstrations per task
    max_steps: int = 30  # step limit of demonstrations and evaluation episodes
    train_steps: int = 500
    eval_per_task: int = 10  # held-out scenes per task
    batch_size: int = 8
    execute: int = 4  # actions of each 8-action chunk executed before re-planning


QUICK = PolicyBudget(per_task=1, max_steps=20, train_steps=3, eval_per_task=1, batch_size=2)


def _setting_rows(wm_runs: dict[str, Path], full: bool) -> list[tuple[str, str, str]]:
    """(row label, setting, init) in table order."""
    inits = [("base", "base"), ("SimForcing WM", "simforcing")]
    if full and "sft" in wm_runs:
        inits.insert(1, ("SFT WM", "sft"))
    settings = ("action_only", "unconditional", "video_action") if full else ("action_only",)
    return [(f"{s} / {label}", s, key) for s in settings for label, key in inits]


def _finished(run: Path, steps: int) -> bool:
    try:
        st = json.loads((run / "status.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return st.get("state") == "finished" and int(st.get("step", -1)) >= steps


def _run_all(cmds: list[tuple[str, list[str], Path]], jobs: int, progress: Callable[[str], None]) -> None:
    """Run (name, argv, log file) commands, at most ``jobs`` at once, each with one torch thread; raise on failure."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.setdefault("MUJOCO_GL", "egl")
    pending, running = list(cmds), []
    while pending or running:
        while pending and len(running) < max(1, jobs):
            name, argv, log = pending.pop(0)
            log.parent.mkdir(parents=True, exist_ok=True)
            fh = open(log, "w")
            running.append((name, subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env), fh, log))
        time.sleep(0.5)
        for item in list(running):
            name, proc, fh, log = item
            if proc.poll() is None:
                continue
            fh.close()
            running.remove(item)
            if proc.returncode != 0:
                for _, other, ofh, _ in running:
                    other.terminate()
                    other.wait()
                    ofh.close()
                tail = "\n".join(log.read_text().splitlines()[-15:])
                raise RuntimeError(f"policy section: {name} failed (exit {proc.returncode}); log {log}:\n{tail}")
            progress(f"policy section: {name} done")


def policy_section(out_dir: str | Path, wm_runs: dict[str, Path], full: bool = False, seed: int = 42, jobs: int = 1,
                   progress: Callable[[str], None] = print, quick: bool = False,
                   budget: PolicyBudget | None = None) -> dict:
    """See the module docstring. ``wm_runs``: {"simforcing": run, "sft": run (used with ``full``)}; the base policy
    takes the SimForcing run's config (architecture, VAE) without its weights. Returns {"rows", "labels",
    "table_md", "commands", "wall_time_s", "data", "runs", "init"}."""
    from simforcing.policy.synth_data import generate_policy_dataset

    budget = budget or (QUICK if quick else PolicyBudget())
    out = Path(out_dir) / "policy"
    out.mkdir(parents=True, exist_ok=True)
    exe = [sys.executable, "-m", "simforcing"]
    t_start = time.perf_counter()
    wall: dict[str, float] = {}
    commands: dict[str, str] = {}
    if "simforcing" not in wm_runs:
        raise ValueError(f"wm_runs: expected a 'simforcing' run; got {sorted(wm_runs)}")
    sf_cfg = Path(wm_runs["simforcing"]) / "config.json"

    # 1. data -----------------------------------------------------------------------------------------------------
    data = out / "data"
    want = {"per_task": budget.per_task, "max_steps": budget.max_steps}
    info_path = data / "meta" / "info.json"
    have = json.loads(info_path.read_text()).get("synth", {}) if info_path.exists() else {}
    t0 = time.perf_counter()
    if any(have.get(k) != v for k, v in want.items()):
        progress(f"policy section: generating {budget.per_task} demonstrations per task")
        generate_policy_dataset(data, per_task=budget.per_task, num_val=0, max_steps=budget.max_steps,
                                workers=max(1, min(jobs, 2)), overwrite=True, progress=False)
    wall["data"] = time.perf_counter() - t0
    commands["data"] = (f"simforcing data synth-policy {data} --per-task {budget.per_task} --num-val 0 "
                        f"--max-steps {budget.max_steps}")

    # 2. training ---------------------------------------------------------------------------------------------------
    rows = _setting_rows(wm_runs, full)
    runs, todo = {}, []
    common = [f"--train.max_steps={budget.train_steps}", f"--train.batch_size={budget.batch_size}",
              f"--policy.execute={budget.execute}",
              f"--train.seed={seed}", f"--train.ckpt_every={budget.train_steps}", "--train.log_every=25"]
    for label, setting, key in rows:
        run = out / f"{setting}_{key}"
        runs[label] = run
        init = "base" if key == "base" else str(wm_runs[key])
        argv = ["policy", "train", "--setting", setting, "--init", init, "--data", str(data), "--out", str(run)]
        if key == "base":
            argv += ["--config", str(sf_cfg)]
        argv += common
        commands[f"train {label}"] = "simforcing " + shlex.join(argv)
        if not _finished(run, budget.train_steps):
            todo.append((f"train {label}", exe + argv + ["--no-progress"] + (["--resume"] if (run / "checkpoints")
                                                                                .exists() else []),
                         out / "logs" / f"train_{setting}_{key}.log"))
    t0 = time.perf_counter()
    _run_all(todo, jobs, progress)
    wall["train"] = time.perf_counter() - t0

    # 3. closed-loop evaluation -------------------------------------------------------------------------------------
    t0 = time.perf_counter()
    groups = [[EXPERT]] + [[label] for label in runs]  # the baselines in one process, one process per policy
    evals, todo = {}, []
    for g, members in enumerate(groups):
        ev = out / "eval" / f"part{g}"
        evals[g] = ev
        argv = ["policy", "eval", "--out", str(ev), "--per-task", str(budget.eval_per_task), "--max-steps",
                str(budget.max_steps)]
        argv += ["--runs"] + [f"{m}={runs[m]}" for m in members if m in runs] if members != [EXPERT] else []
        argv += ["--no-baselines"] if members != [EXPERT] else []
        commands[f"eval {members[0] if members != [EXPERT] else 'expert + floor'}"] = "simforcing " + shlex.join(argv)
        if not (ev / "eval.json").exists():
            todo.append((f"eval {g}", exe + argv, out / "logs" / f"eval_{g}.log"))
    _run_all(todo, jobs, progress)
    table_rows: dict = {}
    for g in sorted(evals):
        table_rows.update(json.loads((evals[g] / "eval.json").read_text())["rows"])
    wall["eval"] = time.perf_counter() - t0
    order = [EXPERT, FLOOR] + [label for label in runs]
    table_rows = {k: table_rows[k] for k in order if k in table_rows}
    tasks = ["reach", "push", "grasp"]
    wall["total"] = time.perf_counter() - t_start
    init = {}
    for label, run in runs.items():
        p = run / "init.json"
        if p.exists():
            rep = json.loads(p.read_text())
            init[label] = {"source": rep["source"], "inherited": len(rep["inherited"]), "new": len(rep["new"]),
                           "partial": rep["partial"]}
    res = {"rows": table_rows, "table_md": format_table(table_rows, tasks), "commands": commands,
           "wall_time_s": wall, "runs": {k: str(v) for k, v in runs.items()}, "init": init,
           "data": str(data), "budget": asdict(budget), "seed": seed}
    (out / "results.json").write_text(json.dumps(res, indent=2) + "\n")
    (out / "table.md").write_text(res["table_md"] + "\n")
    return res
