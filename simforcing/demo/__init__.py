"""`simforcing demo`: the whole paper on the embedded synthetic benchmark, on a laptop CPU.

    synthetic MuJoCo benchmark -> demo VAE -> stage 1 (the simulation world model) | the success judge beside it
    -> state probe | stage 2: sft and simforcing (+ the ablations of --full, × --seeds) side by side
    -> evaluation at the paper's sampler (1, 10, 0.6) with the action-following error, the baselines, the
       decomposition of where the gain is lost, the N_r × w sweep, videos
    -> policy transfer (Tab. 5): action-only policies from a base initialisation and from the SimForcing world model
    -> OUT/report.md, OUT/report.html, OUT/results.json

Every step is one `simforcing` command (:mod:`simforcing.demo.plan`), run on ``--jobs`` slots with a fixed thread
count each (:mod:`simforcing.jobs`), so the numbers do not depend on ``--jobs``; what a folder already holds for
this exact run is reused, anything made from other inputs is remade (:mod:`simforcing.runs.provenance`). One demo per
output folder at a time: it holds ``OUT/.lock`` (``simforcing.runs.locking``) from before planning to the report.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Optional

from simforcing.config import Config, load_config
from simforcing.demo.plan import BASE_METHODS, QUICK, Budget, Plan, build_plan, budget_dict, demo_budget
from simforcing.demo.policy_section import collect_policy
from simforcing.demo.report import collect, write_report
from simforcing.errors import ConfigError
from simforcing.demo.schedule import schedule_summary
from simforcing.jobs import JobFailed, run_jobs, spans, timings
from simforcing.runs.locking import lock_folder
from simforcing.runs.provenance import made_from
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
    is refused at once (``runs.locking.FolderBusy``, naming this one's pid). Returns 0, or the exit code of the job that
    failed (a stopped training job: 75; run the same command again to resume)."""
    out = check_output_path(out, "--out")
    home = _home(out)
    with lock_folder(out, "simforcing demo"), _working_directory(home, out, echo) as moved:
        if moved:  # the paths the user typed were relative to where they ran the command
            out, data = moved / out, (moved / data if data is not None else None)
        return _run_locked(out, data, budget, overrides, seeds, full, jobs, policy, echo)


def _home(out: Path):
    """The working directory OUT's folders were made from (``runs.provenance.made_from`` of the first that tells), or
    None for a new folder. The commands their records hold spell paths from there: run from another directory, the
    same folder would be spelled differently, every record would look stale, and finished runs would be made again."""
    for rec in sorted(out.glob("*/provenance.json")) + sorted(out.glob("*/*/provenance.json")):
        home = made_from(rec.parent)
        if home is not None:
            return home
    return None


@contextlib.contextmanager
def _working_directory(home, out: Path, echo):
    """Run from ``home`` (see :func:`_home`) and come back; yields the directory left (None when not moved)."""
    here = Path.cwd().resolve()
    if home is None or home == here or (home == "absolute" and not out.resolve().is_relative_to(here)):
        yield None
        return
    if home == "absolute":
        raise ConfigError(f"--out: the runs in {out} spell it as an absolute path (they were made before the demo "
                          f"recorded its working directory); run the demo from a directory that does not contain it (as "
                          f"when they were made), or choose another --out")
    if not home.is_dir():
        raise ConfigError(f"--out: the runs in {out} were made from {home}, which no longer exists, and their commands "
                          f"spell paths from there; create it again or choose another --out")
    echo(f"demo: running from {home}, where the runs in {out} were made (their commands spell paths from there)")
    os.chdir(home)
    try:
        yield here
    finally:
        os.chdir(here)


def _run_locked(out: Path, data: Optional[Path], budget: Budget, overrides, seeds: int, full: bool, jobs: int,
                policy: bool, echo) -> int:
    plan = build_plan(out, data, budget, list(overrides), seeds, full, jobs, policy)
    for note in plan.notes:
        echo(note)
    echo(f"demo: {len(plan.jobs)} jobs on {jobs} slot(s); logs in {out / 'logs'}; {out / 'report.md'} is rewritten "
         "as jobs finish")
    t0 = time.perf_counter()
    before = earlier_timings(out / "results.json")  # read before the partial reports rewrite it
    partial = PartialReport(plan, before, echo)
    try:
        results = run_jobs(plan.jobs, jobs, out / "logs", echo=echo, on_done=partial)
    except JobFailed as e:
        echo(f"simforcing demo: {e}\nrun the same command again to continue (finished jobs are reused)")
        return e.exit_code if e.exit_code in (3, 75) else 1
    wall, reused = with_reused_timings(timings(results), results, before)
    wall["total"] = round(time.perf_counter() - t0, 1)
    pol = collect_policy(plan.policy, {k: v for k, v in wall.items() if k.startswith("policy")}) \
        if plan.policy else None
    res = collect(plan, wall, pol, reused, budget_dict(budget))
    res.schedule = schedule_summary(spans(results), {j.name: j.deps for j in plan.jobs}, jobs,
                                    {j.name: j.slots for j in plan.jobs})
    write_report(plan, res, plan.commands)
    echo("\n" + res.summary.line)
    echo(f"report: {out / 'report.html'}")
    return 0


def earlier_timings(earlier: Path) -> dict:
    """The job times an earlier run's ``results.json`` recorded (none when it is missing or unreadable)."""
    try:
        before = json.loads(earlier.read_text()).get("wall_time_s") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return before if isinstance(before, dict) else {}


def with_reused_timings(wall: dict, results: dict, earlier: Path | dict) -> tuple[dict, list[str]]:
    """This run's job times plus, for each job it reused (skipped: finished in an earlier run, e.g. before a Ctrl-C),
    the seconds the earlier run's ``results.json`` recorded for it (``earlier``: the file, or its times read before
    this run rewrote it) — so a resumed demo's report still gives every job's time. Returns (times by job, the
    reused jobs' names)."""
    before = earlier_timings(earlier) if isinstance(earlier, Path) else earlier
    reused = {n: before[n] for n, r in results.items()
              if r.state == "skipped" and isinstance(before.get(n), (int, float))}
    return {**reused, **wall}, sorted(reused)


class PartialReport:
    """After each job: the report as far as the finished jobs go (``report.md``, ``report.html``, ``results.json``
    marked ``in_progress``), so the one-window table is there as soon as its evaluations are, hours before the last
    job of a long demo. A report that cannot be written yet is skipped with one line, never an error."""

    def __init__(self, plan: Plan, before: dict, echo):
        self.plan, self.before, self.echo, self.failed = plan, before, echo, False

    def __call__(self, name: str, results: dict) -> None:
        done = sum(r.state in ("done", "skipped") for r in results.values())
        if done == len(results):
            return  # the final report follows
        try:
            wall, reused = with_reused_timings(timings(results), results, self.before)
            res = collect(self.plan, wall, None, reused, budget_dict(self.plan.budget))
            res.progress = {"done": done, "jobs": len(results), "last": name}
            write_report(self.plan, res, self.plan.commands)
        except Exception as e:  # noqa: BLE001 - a partial report must never stop the demo
            if not self.failed:
                self.echo(f"demo: the report could not be written after {name} ({type(e).__name__}: {e}); it will be "
                          "at the end")
            self.failed = True


__all__ = ["BASE_METHODS", "Budget", "Plan", "QUICK", "build_plan", "demo_budget", "demo_config", "run_demo"]
