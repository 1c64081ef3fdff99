"""The evaluator study's record (docs/POLICY_EVALUATION.md, "An evaluator world model"): each world model measured on
the demo's 60-scene pool — what it was trained on, its condition, its raw ranking against the simulator, what its
episodes are worth beside 10 real trials per policy, and the experts' success inside it — from the folders the
commands wrote (docs/evaluator_study/study.sh makes them from a finished `make demo`).

    python docs/evaluator_study/record.py NAME=EVAL_DIR:ESTIMATE_DIR[:AGREEMENT_DIR:ENV] ... --out docs/evaluator_study/study.json

Every number is read from a command's output (eval.json, estimate.json, agreement.json, the run's dataset meta through
``fidelity.TrainingData``); nothing is typed here."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np

from simforcing.demo.estimate_section import evaluator_row
from simforcing.policy.agreement.statistics import mmrv, pearson
from simforcing.fidelity import TrainingData
from simforcing.policy.closed_loop.results import AgreementResult, PolicyEvaluation
from simforcing.policy.estimate.estimate import KINEMATIC
from simforcing.policy.estimate.trials import world_model_episodes


def twin_rates(ev: PolicyEvaluation) -> dict[str, float]:
    """Each player's success as the full-scene twin's own verdicts say (the simulator alone)."""
    return {p: float(np.mean([o.twin_success for outs in per.values() for o in outs]))
            for p, per in ev.episodes.items()}


def predicted_rates(eval_dir: Path, predictor: str) -> dict[str, float]:
    """Each player's success as a predictor that fits nothing says (``hand``, ``actions``: its verdict per episode)."""
    wm = world_model_episodes(eval_dir)
    v = wm.kinematic(KINEMATIC[predictor])
    return {p: float(np.mean([x for k, x in zip(wm.keys, v) if k[0] == p])) for p in wm.policies}


def row(name: str, eval_dir: Path, estimate: Path, agreement: Path | None, env: str | None,
        truth: Path | None, runs_from: Path | None = None) -> dict:
    ev = PolicyEvaluation.read(eval_dir, f"{name}'s evaluation")
    ag = AgreementResult.read(agreement, f"{name}'s agreement") if agreement else None
    r = evaluator_row(name, ag, estimate, 10, env=env)
    predictor = json.loads((estimate / "estimate.json").read_text()).get("predictor")
    rates = {p: row.average.rate for p, row in ev.rows.items()}
    if predictor in ("twin", *KINEMATIC):  # a verdict fitted on nothing: its rates and ranking are its own
        rates = twin_rates(ev) if predictor == "twin" else predicted_rates(eval_dir, predictor)
        sim = PolicyEvaluation.read(truth, "the simulator's evaluation")
        players = list(rates)
        r = dataclasses.replace(r, pearson=pearson(np.array([sim.rows[p].average.rate for p in players]),
                                                   np.array([rates[p] for p in players])), pearson_ci95=None,
                                mmrv=mmrv([sim.rows[p].average.rate for p in players], [rates[p] for p in players]),
                                mmrv_ci95=None, rho_verdict=r.rho_predictor)  # its verdict is the predictor
    wm = ev.world_model
    run = None if wm is None else (Path(wm.run) if Path(wm.run).is_absolute() else eval_dir.parent / wm.run)
    here = os.getcwd()
    try:  # a run's data.root is spelled from where its command ran: the experiment's folder (a demo: its clone)
        os.chdir(runs_from or eval_dir.resolve().parent)
        data = TrainingData.measure([run.resolve()]) if run is not None else None
    finally:
        os.chdir(here)
    sampler = ev.sampler or {}
    return {**r.to_json(), "world_model": None if wm is None else wm.run, "condition": sampler.get("condition"),
            "draws": ev.draws, "data": None if data is None else data.to_json(), "predictor": predictor,
            "clean_expert": rates.get("scripted expert (ceiling)"),
            "noisiest_expert": rates.get("scripted expert, noise 4 cm/step")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="+", metavar="NAME=EVAL_DIR:ESTIMATE_DIR[:AGREEMENT_DIR:ENV]")
    ap.add_argument("--truth", type=Path, required=True, help="the simulator's evaluation of the pool (the truth)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs-from", type=Path, default=None, help="where the world models' commands ran (their "
                    "data.root is spelled from there; default: each evaluation's parent folder)")
    args = ap.parse_args(argv)
    rows = {}
    for spec in args.rows:
        name, rest = spec.split("=", 1)
        parts = rest.split(":")
        rows[name] = row(name, Path(parts[0]), Path(parts[1]), Path(parts[2]) if len(parts) > 2 and parts[2] else None,
                         parts[3] if len(parts) > 3 else None, args.truth, args.runs_from)
    Path(args.out).write_text(json.dumps({"format": "simforcing.evaluator-study", "rows": rows}, indent=2) + "\n")
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
