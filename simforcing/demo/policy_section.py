"""The demo's policy section (paper Tab. 5 at demo scale): one call for whoever assembles the demo report.

    res = policy_section(OUT, {"simforcing": RUN_SF, "sft": RUN_SFT}, full=False, seed=42, jobs=2, progress=print)
    res.table_md, res.commands, res.rows, res.wall_time_s    # a PolicySectionResult (demo.policy_results)

1. the policy dataset (``data synth-policy --layouts 2``: scripted-expert demonstrations in LIBERO-like fixed layouts,
   two cameras; cached in OUT/policy/data);
2. policies trained from ``base`` (the world model's architecture and VAE, weights from the model's own init — what
   stands in for Wan2.2 at demo scale, docs/POLICY_TRANSFER.md), from the SimForcing world model and from the
   ``sft`` world model when ``wm_runs`` has one (does SimForcing's motion prior, not real-video fine-tuning,
   transfer?); the default is the action-only setting (the paper's largest gain); ``full`` measures instead the
   seeds × initialisations (random, video base, sft, SimForcing; ``demo.transfer_section``);
   independent trainings run as parallel processes with one thread each when ``jobs > 1``;
3. closed-loop success on the same held-out scenes with the scripted expert (ceiling) and do-nothing (floor) rows,
   95 % Wilson intervals; evaluation also split across ``jobs`` processes.
A finished run or evaluation is reused when the section is called again (the demo's resume behaviour) while its
recorded provenance matches; what was made from other inputs is made again.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from simforcing.demo.policy_jobs import eval_job, policy_data_job, train_job, wm_digests
from simforcing.demo.policy_results import PolicySectionResult, read_inits
from simforcing.demo.transfer_section import collect_full, full_policy_jobs
from simforcing.jobs import Job, run_jobs, timings
from simforcing.policy.closed_loop.evaluate import EXPERT, FLOOR
from simforcing.policy.closed_loop.results import PolicyEvaluation
from simforcing.policy.closed_loop.tables import format_table
from simforcing.runs.provenance import digest
from simforcing.utils import atomic_write_json, atomic_write_text


@dataclass
class PolicyBudget:
    per_task: int = 12  # training demonstrations per task
    max_steps: int = 30  # step limit of demonstrations and evaluation episodes
    train_steps: int = 500
    eval_per_task: int = 10  # held-out scenes per task
    batch_size: int = 8
    execute: int = 4  # actions of each 8-action chunk executed before re-planning
    layouts: int = 2  # LIBERO-like scenes: fixed layouts, the task object jittered (policy.closed_loop.synthetic)
    jitter: float = 0.03  # metres


QUICK = PolicyBudget(per_task=1, max_steps=20, train_steps=3, eval_per_task=1, batch_size=2)


def _setting_rows(wm_runs: dict[str, Path]) -> list[tuple[str, str, str]]:
    """(row label, setting, init) in table order: the default section's action-only rows (``demo --full`` measures
    every setting in ``demo.transfer_section``)."""
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
    ``wm_records``: the provenance records of the world-model runs (:mod:`simforcing.runs.provenance`; default: what
    each run folder records).

    Every folder records its provenance (the command, the budget, the seed, the digests of its inputs: the dataset
    for a policy, the world-model run it starts from, the policy for an evaluation) and is not made again while it
    matches and is complete; a dataset or world model made again makes the policies and evaluations from it stale:
    a stale policy run is removed and trained again (``info["notes"]`` says so), a stale evaluation is rerun."""
    if full:  # demo --full: the seeds × initialisations measurement (demo.transfer_section)
        return full_policy_jobs(out_dir, wm_runs, seed, budget or PolicyBudget(), None, wm_deps, after, wm_records)
    budget = budget or PolicyBudget()
    out = Path(out_dir) / "policy"
    wm_deps = wm_deps or {}
    if "simforcing" not in wm_runs:
        raise ValueError(f"wm_runs: expected a 'simforcing' run; got {sorted(wm_runs)}")
    wm_digest = wm_digests(wm_runs, wm_records)
    notes: list[str] = []  # (the commands carry every size; provenance records them with the seed and the inputs)
    sf_cfg = Path(wm_runs["simforcing"]) / "config.json"
    data = out / "data"
    data_job, data_rec = policy_data_job(data, budget, seed, after)
    jobs: list[Job] = [data_job]
    runs: dict[str, Path] = {}
    train_recs: dict[str, dict] = {}
    for label, setting, key in _setting_rows(wm_runs):
        run = runs[label] = out / f"{setting}_{key}"
        inputs = {"data": digest(data_rec), "world model": wm_digest["simforcing" if key == "base" else key]}
        deps = ("policy data",) + tuple(wm_deps[k] for k in ("simforcing", key) if k in wm_deps)
        job, train_recs[label] = train_job(label, run, setting, "base" if key == "base" else str(wm_runs[key]),
                                           sf_cfg if key == "base" else None, data, budget.train_steps, seed, budget,
                                           inputs, deps, 35, notes)
        jobs.append(job)
    groups = [[EXPERT]] + [[label] for label in runs]  # the baselines in one process, one process per policy
    evals: dict[int, Path] = {}
    for g, members in enumerate(groups):
        ev = evals[g] = out / "eval" / f"part{g}"
        if members == [EXPERT]:
            jobs.append(eval_job("policy eval expert + floor", ev, budget.eval_per_task, budget, seed, None,
                                 {"data": digest(data_rec)}, ("policy data",)))
        else:
            label = members[0]
            jobs.append(eval_job(f"policy eval {label}", ev, budget.eval_per_task, budget, seed, (label, runs[label]),
                                 {"policy": digest(train_recs[label])}, (f"policy train {label}",)))
    info = {"out": str(out), "data": str(data), "runs": {k: str(v) for k, v in runs.items()},
            "evals": [str(v) for v in evals.values()], "budget": asdict(budget), "seed": seed,
            "commands": {j.name: j.cite() for j in jobs}, "notes": notes,
            "records": {f"policy train {label}": rec for label, rec in train_recs.items()}}
    return jobs, info


def collect_policy(info: dict, wall_time_s: dict | None = None) -> PolicySectionResult:
    """The section's results from the files its jobs wrote: rows (expert, floor, each policy), the Tab. 5 table,
    the commands, each policy's initialisation report; also written to OUT/policy/results.json and table.md."""
    if info.get("full"):  # demo --full (demo.transfer_section)
        return collect_full(info, wall_time_s)
    rows: dict = {}
    for ev in info["evals"]:
        rows.update(PolicyEvaluation.read(ev, "the policy section's evaluation").rows)
    order = [EXPERT, FLOOR] + list(info["runs"])
    rows = {k: rows[k] for k in order if k in rows}
    res = PolicySectionResult(rows, format_table(rows, ["reach", "push", "grasp"]), info["commands"],
                              wall_time_s or {}, info["runs"], read_inits(info["runs"]), info["data"], info["budget"],
                              info["seed"])
    out = Path(info["out"])
    atomic_write_json(out / "results.json", res.to_json())
    atomic_write_text(out / "table.md", res.table_md + "\n")
    return res


def policy_section(out_dir: str | Path, wm_runs: dict[str, Path], full: bool = False, seed: int = 42, jobs: int = 1,
                   progress: Callable[[str], None] = print, quick: bool = False,
                   budget: PolicyBudget | None = None) -> PolicySectionResult:
    """The whole section on its own (see the module docstring): :func:`policy_jobs` run on ``jobs`` slots, then
    :func:`collect_policy`."""
    budget = budget or (QUICK if quick else PolicyBudget())
    graph, info = policy_jobs(out_dir, wm_runs, full, seed, budget)
    for line in info["notes"]:
        progress(line)
    t0 = time.perf_counter()
    results = run_jobs(graph, max(1, jobs), Path(info["out"]) / "logs", echo=progress, status_every=60)
    wall = timings(results)
    wall["total"] = round(time.perf_counter() - t0, 1)
    return collect_policy(info, wall)
