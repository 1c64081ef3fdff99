"""The demo report's section on the prediction-powered estimate (``policy estimate``, docs/REAL_TRIALS.md): per world
model, each policy's world-model rate against n ground-truth scenes corrected by the rest, and the coverage study."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from simforcing.config import ConfigError
from simforcing.demo.plan import Plan
from simforcing.result_files import POLICY_ESTIMATE, read_result
from simforcing.utils import fmt_num, relative_to


def collect_estimate(plan: Plan) -> Optional[dict]:
    """world model -> its estimate.json (the episodes' rows left out: they are in episodes.csv); None when the demo
    has no estimate or none finished."""
    folders = (plan.wm_eval or {}).get("estimate") or {}
    out = {}
    for wm, folder in folders.items():
        try:
            body, _ = read_result(Path(folder) / "estimate.json", POLICY_ESTIMATE, 1, f"the estimate section's {wm}")
        except ConfigError:
            continue
        out[wm] = dict(body, folder=str(folder))
    return out or None


def _study_row(study: list, n: int) -> Optional[dict]:
    return next((s for s in study if s["n"] == n), None)


def estimate_lines(section: Optional[dict], plan: Plan) -> list[str]:
    if not section:
        return []
    w = plan.budget.wm_eval
    lines = ["", "## Policies' success from a few ground-truth trials (prediction-powered)", "",
             f"The policies on a pool of {w.pool_per_task_full if plan.full else w.pool_per_task} scenes per "
             "task, in the simulator (the truth of every episode) and inside the world model. The world model's raw "
             f"rate is biased; {w.estimate_n} ground-truth scenes per policy (drawn at random, the same for every "
             "policy) correct it (PPI++ with power tuning; the predictor learned from each episode's features and "
             "cross-fitted), and the rest of the pool's world-model episodes narrow it. The coverage study repeats "
             f"this over {w.estimate_draws} draws of the ground-truth scenes and counts how often each 95 % interval "
             "holds the truth. What to record and how to read it for a real robot: docs/REAL_TRIALS.md.", ""]
    for wm, body in section.items():
        md = (Path(body["folder"]) / "estimate.md")
        lines += [f"### Inside `{wm}`", ""]
        try:
            lines += md.read_text().rstrip().splitlines()
        except OSError:
            lines.append(json.dumps({k: body[k] for k in ("labelled", "unlabelled")}))
        for png in ("estimates.png", "coverage.png"):
            if (Path(body["folder"]) / png).exists():
                lines += ["", f"![{png}]({relative_to(Path(body['folder']) / png, plan.out)})"]
        lines.append("")
        row = _study_row(body.get("study") or [], w.estimate_n)
        if row:
            cov = min(c["ppi"] for c in row["coverage"].values())
            lines.append(f"At n = {w.estimate_n}: the worst policy's coverage {100 * cov:.1f} % (aim ≥ 93 %), "
                         f"{100 * row['saved']:.0f} % of ground-truth trials saved at equal width (aim ≥ 50 %), "
                         f"ranking Pearson {fmt_num(row['pearson_ppi'], 2)} (aim ≥ 0.9), trust AUROC "
                         f"{fmt_num(row['trust_auroc'], 2)} (aim ≥ 0.8).")
    return lines
