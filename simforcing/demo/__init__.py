"""`simforcing demo`: the whole paper on the embedded synthetic benchmark, on a laptop CPU.

    synthetic MuJoCo benchmark -> demo VAE -> stage 1 (the simulation world model, both cores)
    -> state probe | stage 2: sft and simforcing (+ the ablations of --full, × --seeds) side by side
    -> evaluation at the paper's sampler (1, 10, 0.6) with the action-following error, the baselines, the
       decomposition of where the gain is lost, the N_r × w sweep, videos
    -> policy transfer (Tab. 5): action-only policies from a base initialisation and from the SimForcing world model
    -> OUT/report.md, OUT/report.html, OUT/results.json

Every step is one `simforcing` command (:mod:`simforcing.demo.plan`), run on ``--jobs`` slots with a fixed thread
count each (:mod:`simforcing.jobs`), so the numbers do not depend on ``--jobs``; what a folder already holds for
this exact run is reused, anything made from other inputs is remade (:mod:`simforcing.provenance`). One demo per
output folder at a time: it holds ``OUT/.lock`` (``simforcing.locking``) from before planning to the report.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from simforcing.config import Config, load_config
from simforcing.demo.plan import BASE_METHODS, QUICK, Budget, Plan, build_plan, budget_dict, demo_budget
from simforcing.demo.report import collect, write_report
from simforcing.jobs import JobFailed, run_jobs, timings
from simforcing.locking import lock_folder
from simforcing.policy.demo import collect_policy
from simforcing.utils import check_output_path


def demo_config(budget: Budget, data_root: Path, vae_dir: Path, overrides: list[str]) -> Config:
    """The demo preset + ``overrides`` on the demo's data and VAE folders (validated): what --dry-run prints."""
    cfg = load_config("demo", overrides)
    cfg.data.root = str(data_root)
    cfg.model.vae.path = str(vae_dir)
    cfg.eval.num_samples = budget.num_val * budget.eval_windows
    cfg.eval.windows_per_episode = budget.eval_windows
    return cfg.validate()


def run_demo(out: Path, data: Optional[Path], budget: Budget, overrides: list[str] = (), seeds: int = 1,
             full: bool = False, jobs: int = 2, policy: bool = True, echo=print) -> int:
    """Plan, run and report (see the module docstring) while holding OUT's lock: a second demo into the same folder
    is refused at once (``locking.FolderBusy``, naming this one's pid). Returns 0, or the exit code of the job that
    failed (a stopped training job: 75; run the same command again to resume)."""
    out = check_output_path(out, "--out")
    with lock_folder(out, "simforcing demo"):
        return _run_locked(out, data, budget, overrides, seeds, full, jobs, policy, echo)


def _run_locked(out: Path, data: Optional[Path], budget: Budget, overrides, seeds: int, full: bool, jobs: int,
                policy: bool, echo) -> int:
    plan = build_plan(out, data, budget, list(overrides), seeds, full, jobs, policy)
    for note in plan.notes:
        echo(note)
    echo(f"demo: {len(plan.jobs)} jobs on {jobs} slot(s); logs in {out / 'logs'}")
    t0 = time.perf_counter()
    try:
        results = run_jobs(plan.jobs, jobs, out / "logs", echo=echo)
    except JobFailed as e:
        echo(f"simforcing demo: {e}\nrun the same command again to continue (finished jobs are reused)")
        return e.exit_code if e.exit_code in (3, 75) else 1
    wall = timings(results)
    wall["total"] = round(time.perf_counter() - t0, 1)
    pol = collect_policy(plan.policy, {k: v for k, v in wall.items() if k.startswith("policy")}) \
        if plan.policy else None
    res = collect(plan, wall, pol)
    res["budget"] = budget_dict(budget)
    write_report(plan, res, plan.commands)
    echo("\n" + res["summary"]["line"])
    echo(f"report: {out / 'report.html'}")
    return 0


__all__ = ["BASE_METHODS", "Budget", "Plan", "QUICK", "build_plan", "demo_budget", "demo_config", "run_demo"]
