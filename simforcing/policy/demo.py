"""The demo's policy section (paper Tab. 5 at demo scale): one call for whoever assembles the demo report.

    res = policy_section(OUT, {"simforcing": RUN_SF, "sft": RUN_SFT}, full=False, seed=42, jobs=2, progress=print)
    res["table_md"], res["commands"], res["rows"], res["wall_time_s"]

1. the policy dataset (``data synth-policy --layouts 2``: scripted-expert demonstrations in LIBERO-like fixed layouts,
   two cameras; cached in OUT/policy/data);
2. policies trained from ``base`` (the world model's architecture and VAE, weights from the model's own init — what
   stands in for Wan2.2 at demo scale, docs/POLICY_TRANSFER.md), from the SimForcing world model and from the
   ``sft`` world model when ``wm_runs`` has one (does SimForcing's motion prior, not real-video fine-tuning,
   transfer?); the default is the action-only setting (the paper's largest gain); ``full`` measures instead the
   seeds × initialisations (random, video base, sft, SimForcing; ``policy.demo_full``);
   independent trainings run as parallel processes with one thread each when ``jobs > 1``;
3. closed-loop success on the same held-out scenes with the scripted expert (ceiling) and do-nothing (floor) rows,
   95 % Wilson intervals; evaluation also split across ``jobs`` processes.
A finished run or evaluation is reused when the section is called again (the demo's resume behaviour) while its
recorded provenance matches; what was made from other inputs is made again.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from simforcing.jobs import Job, run_jobs, timings
from simforcing.policy.demo_full import collect_full, full_policy_jobs
from simforcing.policy.evaluate import EXPERT, FLOOR, format_table
from simforcing.provenance import (check_provenance, digest, provenance_record, read_provenance, remove_stale_run,
                                   run_finished, write_provenance)
from simforcing.utils import atomic_write_json, atomic_write_text


@dataclass
class PolicyBudget:
    per_task: int = 12  # training demonstrations per task
    max_steps: int = 30  # step limit of demonstrations and evaluation episodes
    train_steps: int = 500
    eval_per_task: int = 10  # held-out scenes per task
    batch_size: int = 8
    execute: int = 4  # actions of each 8-action chunk executed before re-planning
    layouts: int = 2  # LIBERO-like scenes: fixed layouts, the task object jittered (policy.synthetic)
    jitter: float = 0.03  # metres


QUICK = PolicyBudget(per_task=1, max_steps=20, train_steps=3, eval_per_task=1, batch_size=2)


def _setting_rows(wm_runs: dict[str, Path]) -> list[tuple[str, str, str]]:
    """(row label, setting, init) in table order: the default section's action-only rows (``demo --full`` measures
    every setting in ``policy.demo_full``)."""
    inits = [("base", "base"), ("SimForcing WM", "simforcing")]
    if "sft" in wm_runs:  # is it SimForcing's motion prior that transfers, or any real-video fine-tuning?
        inits.insert(1, ("SFT WM", "sft"))
    return [(f"action_only / {label}", "action_only", key) for label, key in inits]


def policy_jobs(out_dir: str | Path, wm_runs: dict[str, Path], full: bool = False, seed: int = 42,
                budget: PolicyBudget | None = None, wm_deps: dict[str, str] | None = None,
                after: tuple = (), wm_records: dict[str, dict] | None = None) -> tuple[list[Job], dict]:
    """The section as jobs of a :mod:`simforcing.jobs` graph (what the demo schedules beside its other work), and
    what :func:`collect_policy` needs afterwards. ``wm_deps``: the job that makes each world-model run (the
    policies start when it finished); ``after``: jobs the dataset generation waits for (to leave the cores to them);
    ``wm_records``: the provenance records of the world-model runs (:mod:`simforcing.provenance`; default: what
    each run folder records).

    Every folder records its provenance (the command, the budget, the seed, the digests of its inputs: the dataset
    for a policy, the world-model run it starts from, the policy for an evaluation) and is not made again while it
    matches and is complete; a dataset or world model made again makes the policies and evaluations from it stale:
    a stale policy run is removed and trained again (``info["notes"]`` says so), a stale evaluation is rerun."""
    if full:  # demo --full: the seeds × initialisations measurement (policy.demo_full)
        return full_policy_jobs(out_dir, wm_runs, seed, budget or PolicyBudget(), None, wm_deps, after, wm_records)
    budget = budget or PolicyBudget()
    out = Path(out_dir) / "policy"
    wm_deps = wm_deps or {}
    if "simforcing" not in wm_runs:
        raise ValueError(f"wm_runs: expected a 'simforcing' run; got {sorted(wm_runs)}")
    wm_digest = {}
    for key, run in wm_runs.items():
        rec = (wm_records or {}).get(key) or read_provenance(run)
        wm_digest[key] = digest(rec) if rec is not None else f"unrecorded:{Path(run).resolve()}"
    notes: list[str] = []  # (the commands carry every size; provenance records them with the seed and the inputs)

    def stale_fields(folder: Path, rec: dict) -> list[str]:  # [] when the folder records exactly ``rec``
        return check_provenance(folder, rec) if folder.exists() else ["absent"]

    sf_cfg = Path(wm_runs["simforcing"]) / "config.json"
    data = out / "data"
    jobs: list[Job] = []
    data_argv = ["data", "synth-policy", str(data), "--per-task", str(budget.per_task), "--num-val", "0",
                 "--max-steps", str(budget.max_steps), "--layouts", str(budget.layouts), "--jitter", str(budget.jitter),
                 "--workers", "1"]
    data_rec = provenance_record("simforcing " + " ".join(data_argv), None, seed)
    jobs.append(Job("policy data", data_argv + ["--overwrite", "--no-progress"], deps=tuple(after), priority=30,
                    skip=lambda: not stale_fields(data, data_rec) and (data / "meta" / "info.json").exists(),
                    on_done=lambda: write_provenance(data, data_rec)))
    runs: dict[str, Path] = {}
    train_recs: dict[str, dict] = {}
    common = [f"--train.max_steps={budget.train_steps}", f"--train.batch_size={budget.batch_size}",
              f"--policy.execute={budget.execute}", f"--train.seed={seed}", f"--train.ckpt_every={budget.train_steps}",
              "--train.log_every=25", "--train.threads=1"]
    for label, setting, key in _setting_rows(wm_runs):
        run = out / f"{setting}_{key}"
        runs[label] = run
        init = "base" if key == "base" else str(wm_runs[key])
        argv = ["policy", "train", "--setting", setting, "--init", init, "--data", str(data), "--out", str(run)]
        if key == "base":
            argv += ["--config", str(sf_cfg)]
        argv += common
        inputs = {"data": digest(data_rec), "world model": wm_digest["simforcing" if key == "base" else key]}
        rec = train_recs[label] = provenance_record("simforcing " + " ".join(argv), None, seed, inputs)
        stale = stale_fields(run, rec)
        if run.exists() and stale:
            notes.append(remove_stale_run(run, stale))
        elif (run / "checkpoints").exists() and not run_finished(run, budget.train_steps):
            argv = argv + ["--resume"]

        def start(run=run, rec=rec):
            run.mkdir(parents=True, exist_ok=True)
            write_provenance(run, rec)
        deps = ("policy data",) + tuple(wm_deps[k] for k in ("simforcing", key) if k in wm_deps)
        jobs.append(Job(f"policy train {label}", argv, deps=tuple(dict.fromkeys(deps)), priority=35,
                        skip=lambda run=run, rec=rec: (not stale_fields(run, rec)
                                                       and run_finished(run, budget.train_steps)),
                        on_start=start))
    groups = [[EXPERT]] + [[label] for label in runs]  # the baselines in one process, one process per policy
    evals: dict[int, Path] = {}
    for g, members in enumerate(groups):
        ev = out / "eval" / f"part{g}"
        evals[g] = ev
        argv = ["policy", "eval", "--out", str(ev), "--per-task", str(budget.eval_per_task), "--max-steps",
                str(budget.max_steps), "--layouts", str(budget.layouts), "--jitter", str(budget.jitter)]
        if members != [EXPERT]:
            argv += ["--runs", f"{members[0]}={runs[members[0]]}", "--no-baselines"]
        inputs = {"policy": digest(train_recs[members[0]])} if members != [EXPERT] else {"data": digest(data_rec)}
        rec = provenance_record("simforcing " + " ".join(argv), None, seed, inputs)
        deps = ("policy data",) if members == [EXPERT] else (f"policy train {members[0]}",)
        name = f"policy eval {'expert + floor' if members == [EXPERT] else members[0]}"
        jobs.append(Job(name, argv, deps=deps, priority=25,
                        skip=lambda ev=ev, rec=rec: not stale_fields(ev, rec) and (ev / "eval.json").exists(),
                        on_done=lambda ev=ev, rec=rec: write_provenance(ev, rec)))
    info = {"out": str(out), "data": str(data), "runs": {k: str(v) for k, v in runs.items()},
            "evals": [str(v) for v in evals.values()], "budget": asdict(budget), "seed": seed,
            "commands": {j.name: j.cite() for j in jobs}, "notes": notes}
    return jobs, info


def collect_policy(info: dict, wall_time_s: dict | None = None) -> dict:
    """The section's results from the files its jobs wrote: rows (expert, floor, each policy), the Tab. 5 table,
    the commands, each policy's initialisation report; also written to OUT/policy/results.json and table.md."""
    if info.get("full"):  # demo --full (policy.demo_full)
        return collect_full(info, wall_time_s)
    rows: dict = {}
    for ev in info["evals"]:
        rows.update(json.loads((Path(ev) / "eval.json").read_text())["rows"])
    order = [EXPERT, FLOOR] + list(info["runs"])
    rows = {k: rows[k] for k in order if k in rows}
    init = {}
    for label, run in info["runs"].items():
        p = Path(run) / "init.json"
        if p.exists():
            rep = json.loads(p.read_text())
            init[label] = {"source": rep["source"], "inherited": len(rep["inherited"]), "new": len(rep["new"]),
                           "partial": rep["partial"]}
    res = {"rows": rows, "table_md": format_table(rows, ["reach", "push", "grasp"]), "commands": info["commands"],
           "wall_time_s": wall_time_s or {}, "runs": info["runs"], "init": init, "data": info["data"],
           "budget": info["budget"], "seed": info["seed"]}
    out = Path(info["out"])
    atomic_write_json(out / "results.json", res)
    atomic_write_text(out / "table.md", res["table_md"] + "\n")
    return res


def policy_section(out_dir: str | Path, wm_runs: dict[str, Path], full: bool = False, seed: int = 42, jobs: int = 1,
                   progress: Callable[[str], None] = print, quick: bool = False,
                   budget: PolicyBudget | None = None) -> dict:
    """The whole section on its own (see the module docstring): :func:`policy_jobs` run on ``jobs`` slots, then
    :func:`collect_policy`. Returns {"rows", "table_md", "commands", "wall_time_s", "runs", "init", ...}."""
    budget = budget or (QUICK if quick else PolicyBudget())
    graph, info = policy_jobs(out_dir, wm_runs, full, seed, budget)
    for line in info["notes"]:
        progress(line)
    t0 = time.perf_counter()
    results = run_jobs(graph, max(1, jobs), Path(info["out"]) / "logs", echo=progress, status_every=60)
    wall = timings(results)
    wall["total"] = round(time.perf_counter() - t0, 1)
    return collect_policy(info, wall)
