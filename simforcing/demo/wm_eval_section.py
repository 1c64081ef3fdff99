"""The demo report's section on policies evaluated inside the world models: the agreement table, the judge's
validation, the scatter plot and one policy's episodes side by side (simulator | world models)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from simforcing.config import ConfigError
from simforcing.demo.plan import Plan
from simforcing.policy.closed_loop.results import AgreementResult, PolicyEvaluation
from simforcing.policy.closed_loop.tables import agreement_markdown
from simforcing.utils import relative_to


@dataclass
class WorldModelEvalSection:
    """What the section shows: the agreement of every world model of the pool with the simulator (``policy
    agreement``'s result on the pool), the judge's harness check (its agreement on the simulator's own frames, and
    the copy-first floor, on the held-out scenes: ``harness``) and, per evaluation job, its size and speed (episodes,
    seconds, episodes per minute)."""

    agreement: AgreementResult
    timing: dict[str, dict]
    harness: Optional[AgreementResult] = None

    def to_json(self) -> dict:
        return {"agreement": self.agreement.to_json(), "timing": self.timing,
                "harness": None if self.harness is None else self.harness.to_json()}


def seed_pairs(res: AgreementResult) -> list[tuple[str, str, str]]:
    """(seed label, simforcing world model, sft world model) for every seed evaluated with both."""
    envs = set(res.envs)
    out = []
    for name in sorted(envs):
        if name.startswith("simforcing"):
            sft = "sft" + name[len("simforcing"):]
            if sft in envs:
                out.append((name[len("simforcing_"):] or "42", name, sft))
    return out


def seed_lines(res: AgreementResult) -> list[str]:
    """SimForcing's world model against the sft one as an evaluator, per seed: Pearson, MMRV, episode agreement."""
    pairs = seed_pairs(res)
    if not pairs:
        return []
    lines = ["Which world model is the more faithful evaluator, per world-model seed (simforcing / sft):", "",
             "| seed | Pearson, all | MMRV, all | Pearson, learned | MMRV, learned | episodes agreeing | "
             "Pearson, all, against the judged simulator |", "|---|---|---|---|---|---|---|"]
    diffs: dict[str, list] = {"pearson": [], "mmrv": [], "agree": []}
    for seed, sf, sft in pairs:
        r = res.ranking
        cells = []
        for subset in ("all", "learned"):
            for key in ("pearson", "mmrv"):
                a, b = (_stat(r[sf].get(subset), key), _stat(r[sft].get(subset), key))
                cells.append(f"{_f(a)} / {_f(b)}")
        ea, eb = res.episode_agreement[sf]["all"], res.episode_agreement[sft]["all"]
        cells.append(f"{100 * ea:.0f} % / {100 * eb:.0f} %")
        alone = res.vs_judged_simulator
        cells.append(f"{_f(_stat(alone[sf].all, 'pearson') if sf in alone else None)} / "
                     f"{_f(_stat(alone[sft].all, 'pearson') if sft in alone else None)}")
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
        for key in ("pearson", "mmrv"):
            a, b = _stat(r[sf]["all"], key), _stat(r[sft]["all"], key)
            if a is not None and b is not None:
                diffs[key].append(a - b)
        diffs["agree"].append(ea - eb)
    if len(pairs) > 1:
        lines.append(f"| simforcing − sft (mean ± std) | {_pm(diffs['pearson'])} | {_pm(diffs['mmrv'])} | | | "
                     f"{_pm([100 * d for d in diffs['agree']], ' points')} | |")
    return lines + [""]


def _stat(stats, key: str) -> Optional[float]:
    """One statistic of a ranking (None where the subset was not ranked)."""
    return None if stats is None else getattr(stats, key)


def _f(v) -> str:
    return "—" if v is None or v != v else f"{v:.2f}"


def _pm(vals: list, unit: str = "") -> str:
    if not vals:
        return "—"
    m = float(np.mean(vals))
    return f"{m:+.2f}" + (f" ± {float(np.std(vals, ddof=1)):.2f}" if len(vals) > 1 else "") + unit


def collect_wm_eval(plan: Plan) -> Optional[WorldModelEvalSection]:
    """The section's results from the files its jobs wrote (None when the pool's agreement was not made)."""
    if not plan.wm_eval:
        return None
    try:
        agreement = AgreementResult.read(plan.wm_eval["pool_agreement"], "the world-model evaluation section")
    except ConfigError:
        return None
    try:
        harness = AgreementResult.read(plan.wm_eval["agreement"], "the world-model evaluation section's harness")
    except ConfigError:
        harness = None
    timing = {}
    for name, folder in plan.wm_eval["pool_evals"].items():
        try:
            ev = PolicyEvaluation.read(folder, f"the world-model evaluation section's {name}")
        except ConfigError:
            continue
        timing[name] = {"seconds": round(ev.seconds, 1),
                        "episodes": sum(r.average.episodes for r in ev.rows.values()),
                        "episodes_per_minute": ev.episodes_per_minute}
    return WorldModelEvalSection(agreement, timing, harness)


def harness_lines(res: Optional[AgreementResult]) -> list[str]:
    """The judge's harness check: its verdicts on the simulator's own frames against MuJoCo's, per task, and what
    ranking they give (what no world model judged by it can beat but by luck)."""
    if res is None:
        return []
    judged = next((e for e in res.envs if e not in res.world_models and e != "copy-first"), None)
    stats = res.ranking.get(judged, {}).get("all") if judged else None
    v = (res.judge_validation or {}).get("all")
    out = [f"**The judge's harness check** ({res.scenes} held-out scenes per policy in the simulator, every frame "
           "through the judge): "]
    if stats is not None:
        out[0] += (f"its verdicts rank the policies at Pearson {_f(stats.pearson)} with MuJoCo's "
                   f"(MMRV {_f(stats.mmrv)}), ")
    if v is not None:
        out[0] += (f"and agree with MuJoCo's on {100 * v.episode.accuracy:.0f} % of the episodes (Cohen's κ "
                   f"{_f(v.episode.kappa)}). " if v.episode.accuracy is not None else "")
    out[0] += "The copy-first floor and the per-task validation are in `wm_eval/agreement/agreement.md`."
    return out + [""]


def judge_budget_sentence(w, full: bool) -> str:
    """What the judge was fitted on, and what that means for the table (a judge below a κ near 1 caps it)."""
    rollouts, steps, frames = ((w.judge_rollouts_full, w.judge_steps_full, w.judge_frames_full) if full else
                               (w.judge_rollouts, w.judge_steps, w.judge_frames))
    rendered = "every frame rendered" if frames is None else f"{frames} frames of each rendered"
    return (f"The success judge was fitted on {rollouts} simulator rollouts ({rendered}) for {steps} steps; its "
            "agreement with MuJoCo (the harness row and the last table) caps what any world model judged by it can "
            "show (docs/notebook/policy_evaluation.md).")


def wm_eval_lines(section: Optional[WorldModelEvalSection], plan: Plan) -> list[str]:
    if section is None:
        return []
    res, b = section.agreement, plan.budget
    lines = ["", "## Policies evaluated inside the world models", "",
             f"The same policies on the same {res.scenes} held-out scenes of the policy benchmark's LIBERO-like "
             f"layouts ({b.policy.layouts} layouts, ±{100 * b.policy.jitter:.0f} cm), the same noise and "
             f"executed-actions rule, once in the MuJoCo simulator and once inside each world model: every episode "
             "starts from the simulator's rendering of its first frame and state, then only the world model makes "
             "frames (one batched chunk for all episodes of all policies) and a frozen success judge reads the "
             "task's success from them (the simulator's predicates on the judge's readings of the hand and the "
             "object). The paper's world models were trained on paired data including "
             f"{b.layout_train} real episodes of these layouts, the evaluator on {b.evaluator.layout_train} more "
             "with noisy, pausing and failing operators (`simforcing.recipes.EVALUATOR`). Learned policies: "
             "action-only, one camera (the world model predicts the external view), from base, the `sft` and the "
             "SimForcing world model. " + judge_budget_sentence(b.wm_eval, plan.full), "",
             *harness_lines(section.harness), agreement_markdown(res), "",
             f"![world model vs simulator success]({relative_to(res.scatter, plan.out)})",
             ""]
    for gif in res.videos:
        png = Path(gif).with_suffix(".png")
        lines += [f"{Path(gif).stem}: ![episode]({relative_to(str(png), plan.out)})", ""]
    lines += seed_lines(res)
    if section.timing:
        lines += ["| evaluation | episodes | seconds | episodes / minute |", "|---|---|---|---|"]
        for name, t in section.timing.items():
            epm = t["episodes_per_minute"] if t["episodes_per_minute"] is not None else \
                round(60 * t["episodes"] / max(t["seconds"], 1e-9), 1)
            lines.append(f"| {name} | {t['episodes']} | {t['seconds']:.0f} | {epm:.0f} |")
        lines.append("")
    return lines
