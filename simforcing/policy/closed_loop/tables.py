"""Markdown tables rendered from the typed policy results (``policy.closed_loop.results``): the agreement tables of
``policy agreement``, and the Tab. 5-style success table of an evaluation (with unfinished runs marked and the
judge's validation under it), which lives beside the evaluation (``PolicyEvaluation.write`` writes it as eval.md)
and is named here too. Nothing here computes a result."""

from __future__ import annotations

import numpy as np

from simforcing.policy.closed_loop.results import (AgreementResult, evaluation_markdown, format_table,  # noqa: F401
                                                   judge_validation_md, rate_cell, scored_labels, table_with_notes)
from simforcing.utils import fmt_num


def _stat(v, ci, nd=2, signed: bool = False) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "—"
    lo, hi = ci
    if signed:
        sign = lambda x: "—" if x is None else f"{x:+.{nd}f}"  # noqa: E731
        return f"{sign(v)} [{sign(lo)}, {sign(hi)}]"
    return f"{v:.{nd}f} [{fmt_num(lo, nd)}, {fmt_num(hi, nd)}]"


def _ranking_line(env: str, subset: str, r, agree: str) -> str:
    return (f"| {env} | {subset} ({r.n_policies}) | {_stat(r.pearson, r.pearson_ci95)} | "
            f"{_stat(r.spearman, r.spearman_ci95)} | {_stat(r.mmrv, r.mmrv_ci95, 3)} | {agree} |")


def agreement_markdown(res: AgreementResult) -> str:
    """agreement.md: success per policy per environment, the ranking agreement, the world models with the judge held
    fixed, the judge's validation."""
    envs = list(res.envs)
    lines = [f"Success over all tasks (%, 95 % Wilson interval), {res.scenes} held-out scenes per policy:", "",
             "| policy | simulator | " + " | ".join(envs) + " |", "|---" * (len(envs) + 2) + "|"]
    for p in res.players:
        lines.append(f"| {p}{' (learned)' if p in res.learned else ''} | {rate_cell(res.sim[p])} | "
                     + " | ".join(rate_cell(res.envs[e][p]) for e in envs) + " |")
    lines += ["", "Agreement with the simulator's ranking (95 % bootstrap interval over scenes; MMRV lower is "
                  "better) and per-episode agreement (the same verdict on the same scene and policy):", "",
              "| verdicts from | policies | Pearson | Spearman | MMRV | episodes agreeing |",
              "|---|---|---|---|---|---|"]
    for e in envs:
        for subset in ("all", "learned", *(f"all, {t} only" for t in res.tasks)):
            r = res.ranking[e].get(subset)
            if r:
                agree = f"{100 * res.episode_agreement[e]['all']:.0f} %" if subset == "all" else ""
                lines.append(_ranking_line(e, subset, r, agree))
    if res.vs_judged_simulator:
        lines += ["", "The world model alone: agreement with the simulator's frames through the same judge (the "
                      "judge's errors held fixed; what remains is the world model's):", "",
                  "| world model | policies | Pearson | Spearman | MMRV | episodes agreeing |",
                  "|---|---|---|---|---|---|"]
        for e, v in res.vs_judged_simulator.items():
            lines.append(_ranking_line(e, "all", v.all, f"{100 * v.episodes_agreeing:.0f} %"))
            if v.learned:
                lines.append(_ranking_line(e, "learned", v.learned, ""))
    if res.vs_reference:
        ref = next(iter(res.vs_reference.values())).reference
        lines += ["", f"Against the reference world model `{ref}` on the same episodes: agreement with its success "
                      "per policy, episodes with its verdict, and the change in agreement with the simulator (this "
                      "world model's minus the reference's, 95 % bootstrap interval on the same scene draws):", "",
                  f"| world model | Pearson with {ref} | episodes agreeing with {ref} | Pearson vs simulator − "
                  f"{ref}'s | MMRV − {ref}'s |", "|---|---|---|---|---|"]
        for e, v in res.vs_reference.items():
            lines.append(f"| {e} | {_stat(v.to_reference.pearson, v.to_reference.pearson_ci95)} | "
                         f"{100 * v.episodes_agreeing:.0f} % | {_stat(v.pearson_diff, v.pearson_diff_ci95, signed=True)}"
                         f" | {_stat(v.mmrv_diff, v.mmrv_diff_ci95, 3, signed=True)} |")
    if res.judge_validation:
        lines += ["", *judge_validation_md(res.judge_validation)]
    return "\n".join(lines)
