"""The demo report's section on policies evaluated inside the world models: the agreement table, the judge's
validation, the scatter plot and one policy's episodes side by side (simulator | world models)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from simforcing.demo.plan import Plan
from simforcing.utils import relative_to


def collect_wm_eval(plan: Plan) -> Optional[dict]:
    if not plan.wm_eval:
        return None
    path = Path(plan.wm_eval["agreement"]) / "agreement.json"
    try:
        res = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    timing = {}
    for name, folder in plan.wm_eval["evals"].items():
        try:
            ev = json.loads((Path(folder) / "eval.json").read_text())
        except (OSError, ValueError):
            continue
        timing[name] = {"seconds": round(ev["seconds"], 1),
                        "episodes": sum(r["average"]["episodes"] for r in ev["rows"].values()),
                        "episodes_per_minute": ev.get("episodes_per_minute")}
    res["timing"] = timing
    return res


def wm_eval_lines(res: Optional[dict], plan: Plan) -> list[str]:
    if not res:
        return []
    b = plan.budget
    lines = ["", "## Policies evaluated inside the world models", "",
             f"The same policies on the same {res['scenes']} held-out scenes of the policy benchmark's LIBERO-like "
             f"layouts ({b.policy.layouts} layouts, ±{100 * b.policy.jitter:.0f} cm), the same noise and "
             f"executed-actions rule, once in the MuJoCo simulator and once inside each world model: every episode "
             "starts from the simulator's rendering of its first frame and state, then only the world model makes "
             "frames (one batched chunk for all episodes of all policies) and a frozen success judge reads the "
             "task's success from them (the simulator's predicates on the judge's readings of the hand and the "
             "object). The world models were trained on paired data including "
             f"{b.layout_train} real episodes of these layouts. Learned policies: action-only, one camera (the "
             "world model predicts the external view), from base, the `sft` and the SimForcing world model.", "",
             res["table_md"], "", f"![world model vs simulator success]({relative_to(res['scatter'], plan.out)})",
             ""]
    for gif in res.get("videos", []):
        png = Path(gif).with_suffix(".png")
        lines += [f"{Path(gif).stem}: ![episode]({relative_to(str(png), plan.out)})", ""]
    if res.get("timing"):
        lines += ["| evaluation | episodes | seconds | episodes / minute |", "|---|---|---|---|"]
        for name, t in res["timing"].items():
            epm = t["episodes_per_minute"] if t["episodes_per_minute"] is not None else \
                round(60 * t["episodes"] / max(t["seconds"], 1e-9), 1)
            lines.append(f"| {name} | {t['episodes']} | {t['seconds']:.0f} | {epm:.0f} |")
        lines.append("")
    return lines
