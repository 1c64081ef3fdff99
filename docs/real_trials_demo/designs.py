"""The record of docs/real_trials_demo/designs.sh (and refit.sh): each estimate's coverage study, under the truth it
checked (the pool's rate or its population's), as one row per (estimate, design, n) — the worst policy's coverage and
which policy it is, the mean widths, the trials saved and what the predictor's ρ allows; whether the learned
predictor's interval counted its refit variance.

    python docs/real_trials_demo/designs.py NAME=ESTIMATE_DIR ... --out docs/real_trials_demo/designs.json

Every number is read from `policy estimate`'s estimate.json; nothing is typed here."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from simforcing.policy.estimate.estimate import StudyPoint


def rows(name: str, folder: Path) -> list[dict]:
    est = json.loads((folder / "estimate.json").read_text())
    out = []
    for d in est["study"]:
        s = StudyPoint.from_json(d)
        worst = {k: min(s.coverage, key=lambda p: s.coverage[p][k]) for k in ("ppi", "ground_truth_only")}
        out.append({"name": name, "predictor": est["predictor"], "design": s.design, "n": s.n, "draws": s.draws,
                    "coverage_ppi": s.coverage[worst["ppi"]]["ppi"], "worst_ppi": worst["ppi"],
                    "coverage_ground_truth_only": s.coverage[worst["ground_truth_only"]]["ground_truth_only"],
                    "worst_ground_truth_only": worst["ground_truth_only"],
                    "width_ppi": float(np.mean([w["ppi"] for w in s.width.values()])),
                    "width_ground_truth_only": float(np.mean([w["ground_truth_only"] for w in s.width.values()])),
                    "saved": s.saved, "saved_ideal": s.saved_ideal, "rho_predictor": s.rho_predictor,
                    "prior": est.get("inputs", {}).get("disagreement_prior", 0.0),
                    "refit": est.get("inputs", {}).get("refit_variance", False),  # none before 2026-12-07
                    "folder": str(folder), "inputs": est.get("inputs", {})})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", nargs="+", metavar="NAME=ESTIMATE_DIR")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    table = []
    for spec in a.rows:
        name, folder = spec.rsplit("=", 1)
        table += rows(name, Path(folder))
    Path(a.out).write_text(json.dumps({"format": "simforcing.estimate-designs", "rows": table}, indent=2) + "\n")
    print(f"wrote {a.out}: {len(table)} rows")


if __name__ == "__main__":
    main()
