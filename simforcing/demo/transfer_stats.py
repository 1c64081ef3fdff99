"""Does a world model start a policy better than the video model it came from? The numbers with their noise.

    res = transfer_analysis(rows, episodes, specs, budget, COMPARISONS)   # from the evaluations of `demo --full`
    md = transfer_markdown(res, probe, labels)
    note = default_note(rows, episodes, inits, labels)                     # what one seed's table can show

Every policy of a block (a setting at a training budget) is evaluated on the same held-out scenes, so two policies
differ scene by scene. Three sources of noise: the scenes (the same for every policy: paired), the policy's
training seed, and — for a world-model initialisation — the world model's own training seed.

- **Per seed**: policy A (world-model seed s, policy seed p) against policy B (the same s when B is a world model,
  the same p): the mean over scenes of (success_A − success_B), with a 95 % interval from the scenes alone (normal
  approximation of the paired difference: mean ± 1.96 · sd / √n). It holds the two trainings fixed.
- **Over seeds**: the mean success of an initialisation is the mean of its clusters — world-model seeds (each the mean
  over its policy seeds) for a world model, policy seeds for the others — and its standard error the clusters' sd /
  √k, which carries the world model's training noise, the policy's and the scenes' (each cluster mean holds all
  three). The difference A − B gets a Welch interval (t quantile at the Welch–Satterthwaite degrees of freedom).
  **Established** when that interval excludes 0; with 3 clusters a side the t quantile is large (4.3 at 2 degrees
  of freedom), so only a difference well beyond the spread of the seeds is.
"""

from __future__ import annotations

import math
from statistics import fmean, stdev

import numpy as np
from scipy import stats

from simforcing.policy.closed_loop.results import EpisodeOutcome, PolicyRow

TASK_ORDER = ("reach", "push", "grasp")
# A − B: the paper's claim first (world model > the video model it came from), then what separates the priors
COMPARISONS = (("simforcing", "video_base"), ("sft", "video_base"), ("simforcing", "sft"), ("video_base", "random"),
               ("simforcing", "random"), ("sft", "random"), ("simforcing", "simforcing_video"),
               ("simforcing_video", "random"))


def successes(episodes: dict[str, list[EpisodeOutcome]]) -> np.ndarray:
    """One run's outcomes {task: [EpisodeOutcome]} -> float (n,) in task order."""
    return np.array([float(o.success) for t in TASK_ORDER for o in episodes.get(t, [])])


def paired_scene_diff(a: np.ndarray, b: np.ndarray) -> dict:
    """Mean of a − b over the same scenes and its 95 % interval from the scenes (normal approximation)."""
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired_scene_diff: the two runs must cover the same scenes; got {a.shape} and {b.shape}")
    d = a - b
    se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else 0.0
    m = float(d.mean())
    return {"diff": m, "ci95": [m - 1.96 * se, m + 1.96 * se], "scenes": int(d.size)}


def cluster_mean(runs: list[dict]) -> dict:
    """Mean success over clusters (world-model seeds, else policy seeds) and its standard error (module docstring)."""
    by: dict = {}
    for r in runs:
        by.setdefault(r["wm_seed"] if r["wm_seed"] is not None else ("p", r["seed"]), []).append(r["rate"])
    means = [fmean(v) for v in by.values()]
    k = len(means)
    se = stdev(means) / math.sqrt(k) if k > 1 else None
    m = fmean(means)
    half = stats.t.ppf(0.975, k - 1) * se if se is not None else None
    return {"mean": m, "se": se, "clusters": k, "cluster_means": means, "runs": len(runs),
            "ci95": [m - half, m + half] if half is not None else None}


def welch(a: dict, b: dict) -> dict:
    """A − B from two :func:`cluster_mean` results: the difference, its Welch 95 % interval, whether established."""
    d = a["mean"] - b["mean"]
    if a["se"] is None or b["se"] is None:
        return {"diff": d, "ci95": None, "df": None, "established": None}
    va, vb = a["se"] ** 2, b["se"] ** 2
    se = math.sqrt(va + vb)
    if se == 0:
        return {"diff": d, "ci95": [d, d], "df": None, "established": d != 0}
    df = (va + vb) ** 2 / ((va ** 2 / (a["clusters"] - 1) if va else 0) + (vb ** 2 / (b["clusters"] - 1) if vb else 0))
    half = float(stats.t.ppf(0.975, df)) * se
    lo, hi = d - half, d + half
    return {"diff": d, "ci95": [lo, hi], "df": df, "established": bool(lo > 0 or hi < 0)}


def transfer_analysis(rows: dict[str, PolicyRow], episodes: dict, specs: dict, budget: dict,
                      comparisons=COMPARISONS) -> dict:
    """{"blocks": [{"setting", "steps", "inits": {init: cluster_mean + per-run rates}, "comparisons": [...]}]}
    from the rows/episodes of the evaluations and the specs of ``demo.policy_section`` (label -> setting, init, wm_seed,
    seed, steps)."""
    blocks: dict = {}
    for label, s in specs.items():
        if label not in episodes or episodes[label] is None:
            continue
        v = successes(episodes[label])
        run = {"label": label, "wm_seed": s["wm_seed"], "seed": s["seed"], "rate": float(v.mean()), "v": v,
               "tasks": {t: rows[label].tasks[t].rate for t in TASK_ORDER if label in rows and t in rows[label].tasks}}
        blocks.setdefault((s["setting"], s["steps"]), {}).setdefault(s["init"], []).append(run)
    out = []
    for (setting, steps), inits in blocks.items():
        summary = {}
        for init, runs in inits.items():
            summary[init] = {**cluster_mean(runs), "per_run": [{k: r[k] for k in ("label", "wm_seed", "seed", "rate",
                                                                                   "tasks")} for r in runs]}
        comps = []
        for a, b in comparisons:
            if a not in inits or b not in inits:
                continue
            cells = []
            for ra in inits[a]:
                for rb in inits[b]:
                    same_wm = rb["wm_seed"] is None or ra["wm_seed"] is None or rb["wm_seed"] == ra["wm_seed"]
                    if rb["seed"] == ra["seed"] and same_wm:
                        cells.append({"wm_seed": ra["wm_seed"] if ra["wm_seed"] is not None else rb["wm_seed"],
                                      "seed": ra["seed"], **paired_scene_diff(ra["v"], rb["v"])})
            w = welch(summary[a], summary[b])
            comps.append({"a": a, "b": b, **w, "cells": cells,
                          "cells_a_better": sum(c["ci95"][0] > 0 for c in cells),
                          "cells_b_better": sum(c["ci95"][1] < 0 for c in cells)})
        out.append({"setting": setting, "steps": steps, "inits": summary, "comparisons": comps})
    order = {"action_only": 0, "unconditional": 1, "video_action": 2}
    out.sort(key=lambda blk: (order.get(blk["setting"], 9), blk["steps"]))
    return {"blocks": out, "scenes_per_task": budget.get("full_eval_per_task"), "comparisons": [list(c) for c in
                                                                                                comparisons]}


def _pts(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "—"
    return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"


def _ci(ci: list | None) -> str:
    return "—" if ci is None else f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"


def transfer_markdown(res: dict, probe: dict | None, labels: dict) -> str:
    """The seeds × initialisations tables, the paired differences and the probe (module docstring)."""
    lines = [f"### Seeds × initialisations ({res.get('scenes_per_task')} held-out scenes per task, success %)", ""]
    for blk in res["blocks"]:
        lines += [f"**{blk['setting']}, {blk['steps']} steps**", "",
                  "| initialisation | runs | success per run (WM seed / policy seed) | mean | 95 % interval "
                  "(over clusters) | reach · push · grasp |", "|---|---|---|---|---|---|"]
        for init, s in blk["inits"].items():
            per = ", ".join(f"{_pts(r['rate'])}" + (f" ({r['wm_seed']}/{r['seed']})" if r["wm_seed"] is not None
                                                    else f" (–/{r['seed']})") for r in s["per_run"])
            tasks = " · ".join(_pts(fmean([r["tasks"].get(t, 0.0) for r in s["per_run"]])) for t in TASK_ORDER)
            lines.append(f"| {labels.get(init, init)} | {s['runs']} | {per} | **{_pts(s['mean'])}** | "
                         f"{_ci(s['ci95']).replace('+', '')} | {tasks} |")
        lines += ["", "| A − B | per seed: difference [95 % interval from the scenes] | A better / B better (per seed, "
                  "interval excludes 0) | mean | 95 % interval (Welch, over seeds) | established |",
                  "|---|---|---|---|---|---|"]
        for c in blk["comparisons"]:
            cells = "; ".join(f"{_pts(x['diff'], True)} {_ci(x['ci95'])}" for x in c["cells"])
            est = "—" if c["established"] is None else ("**yes**" if c["established"] else "no")
            lines.append(f"| {labels.get(c['a'], c['a'])} − {labels.get(c['b'], c['b'])} | {cells} | "
                         f"{c['cells_a_better']} / {c['cells_b_better']} of {len(c['cells'])} | "
                         f"**{_pts(c['diff'], True)}** | {_ci(c['ci95'])} | {est} |")
        lines.append("")
    if probe:
        lines += ["### What the frozen video expert gives an action-only policy (linear probe, held-out scenes)", "",
                  probe["table_md"], "",
                  f"Ridge read-out of each layer's first-frame keys and values (no state token), fitted on "
                  f"{probe['n_fit']} frames of the training scenes, scored on {probe['n_test']} frames of held-out "
                  "scenes: RMS 3-D error and R². 'layout mean' = knowing which of the layouts the scene is and "
                  "nothing else (the object moves only by the layout's jitter)."]
    return "\n".join(lines)


def default_note(rows: dict, episodes: dict, inits: dict, labels: dict) -> str:
    """What the default one-seed table can and cannot show, with its paired differences over the scenes."""
    by_init = {inits[k]: k for k in rows}
    parts = []
    for a, b in COMPARISONS:
        if a in by_init and b in by_init and episodes.get(by_init[a]) and episodes.get(by_init[b]):
            d = paired_scene_diff(successes(episodes[by_init[a]]), successes(episodes[by_init[b]]))
            parts.append(f"{labels.get(a, a)} − {labels.get(b, b)}: {_pts(d['diff'], True)} points "
                         f"{_ci(d['ci95'])}")
    n = next((len(successes(e)) for e in episodes.values() if e), None)
    text = ("One world model and one policy seed per row; success % with 95 % Wilson intervals over the scenes. "
            "What this table can show: whether a policy learnt the task at all (against the floor and the expert), "
            "and, paired over the same scenes, how two rows differ for these two trainings")
    if parts:
        text += f" ({'; '.join(parts)}; intervals from the {n} scenes only)"
    text += (". What it cannot show: which initialisation is the better start — another world-model seed or policy "
             "seed moves a row by more than these intervals; `simforcing demo --full` measures that noise "
             "(docs/VIDEO_PRIOR.md). A run of the same commands on another machine or under load differs within "
             "the intervals.")
    return text
