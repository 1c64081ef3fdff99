"""The job builders both policy sections of the demo share (``demo.policy_section.policy_jobs``, the default table, and
``demo.transfer_section.full_policy_jobs``, the seeds × initialisations measurement): the policy dataset, one policy's
training and one evaluation, each a :class:`simforcing.jobs.Job` whose folder records its provenance (the command,
the seed, the digests of its inputs) and is not made again while it matches and is complete."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from simforcing.jobs import Job
from simforcing.runs.provenance import (check_provenance, digest, provenance_record, read_provenance, remove_stale_run,
                                        run_finished, write_provenance)


def stale_fields(folder: Path, rec: dict) -> list[str]:
    """[] when ``folder`` records exactly ``rec``."""
    return check_provenance(folder, rec) if folder.exists() else ["absent"]


def wm_digests(wm_runs: dict, wm_records: Optional[dict]) -> dict[str, str]:
    """The digest of each world-model run's provenance (the recorded one when given, else its folder's)."""
    out = {}
    for key, run in wm_runs.items():
        rec = (wm_records or {}).get(key) or read_provenance(run)
        out[key] = digest(rec) if rec is not None else f"unrecorded:{Path(run).resolve()}"
    return out


def policy_data_job(data: Path, budget, seed: int, after: tuple) -> tuple[Job, dict]:
    """``data synth-policy`` into ``data`` (after the jobs ``after``; early: the judge needs it); the job and its
    provenance record."""
    argv = ["data", "synth-policy", str(data), "--per-task", str(budget.per_task), "--num-val", "0",
            "--max-steps", str(budget.max_steps), "--layouts", str(budget.layouts), "--jitter", str(budget.jitter),
            "--workers", "1"]
    rec = provenance_record("simforcing " + " ".join(argv), None, seed)
    job = Job("policy data", argv + ["--overwrite", "--no-progress"], deps=tuple(after), priority=85,
              skip=lambda: not stale_fields(data, rec) and (data / "meta" / "info.json").exists(),
              on_done=lambda: write_provenance(data, rec))
    return job, rec


def train_job(label: str, run: Path, setting: str, init: str, config: Optional[Path], data: Path, steps: int,
              seed: int, budget, inputs: dict, deps: tuple, priority: int, notes: list,
              overrides: tuple = ()) -> tuple[Job, dict]:
    """``policy train`` of one policy into ``run`` from ``init`` (``config``: the architecture of a ``base`` start;
    ``overrides``: more ``--section.field=value``); a run recorded with another command is removed (said in
    ``notes``), an unfinished one resumed."""
    argv = ["policy", "train", "--setting", setting, "--init", init, "--data", str(data), "--out", str(run)]
    if config is not None:
        argv += ["--config", str(config)]  # the same architecture and VAE, no weight inherited
    argv += [f"--train.max_steps={steps}", f"--train.batch_size={budget.batch_size}",
             f"--policy.execute={budget.execute}", f"--train.seed={seed}", f"--train.ckpt_every={steps}",
             "--train.log_every=25", "--train.threads=1", *overrides]
    rec = provenance_record("simforcing " + " ".join(argv), None, seed, inputs)
    stale = stale_fields(run, rec)
    if run.exists() and stale:
        notes.append(remove_stale_run(run, stale))
    elif (run / "checkpoints").exists() and not run_finished(run, steps):
        argv = argv + ["--resume"]

    def start():
        run.mkdir(parents=True, exist_ok=True)
        write_provenance(run, rec)
    job = Job(f"policy train {label}", argv, deps=tuple(dict.fromkeys(deps)), priority=priority,
              skip=lambda: not stale_fields(run, rec) and run_finished(run, steps), on_start=start)
    return job, rec


def eval_job(name: str, ev: Path, per_task: int, budget, seed: int, policy: Optional[tuple], inputs: dict,
             deps: tuple) -> Job:
    """``policy eval`` into ``ev``: the baselines (``policy`` None) or one policy (``policy`` = (label, run))."""
    argv = ["policy", "eval", "--out", str(ev), "--per-task", str(per_task), "--max-steps", str(budget.max_steps),
            "--layouts", str(budget.layouts), "--jitter", str(budget.jitter)]
    if policy is not None:
        argv += ["--runs", f"{policy[0]}={policy[1]}", "--no-baselines"]
    rec = provenance_record("simforcing " + " ".join(argv), None, seed, inputs)
    return Job(name, argv, deps=deps, priority=25,
               skip=lambda: not stale_fields(ev, rec) and (ev / "eval.json").exists(),
               on_done=lambda: write_provenance(ev, rec))
