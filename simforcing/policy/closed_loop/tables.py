"""Markdown tables rendered from the typed policy results (``policy.closed_loop.results``): the Tab. 5-style success
table of an evaluation (with unfinished runs marked and the judge's validation under it) and the agreement tables of
``policy agreement``. Nothing here computes a result; the results never carry their tables."""

from __future__ import annotations

import numpy as np

from simforcing.policy.closed_loop.results import (WORLD_MODEL, AgreementResult, JudgeValidation, PolicyEvaluation,
                                                   PolicyRow, Rate)
from simforcing.policy.judge.success_judge import OUTPUTS
from simforcing.utils import fmt_num


def evaluation_markdown(ev: PolicyEvaluation) -> str:
    """eval.md: the success table (a simulator evaluation's with unfinished runs named under it and, made with a
    judge, the judge's validation)."""
    if ev.env == WORLD_MODEL:
        return format_table(ev.rows, list(ev.tasks))
    text = table_with_notes(ev.rows, list(ev.tasks), ev.runs)
    if ev.judge_validation:
        text += "\n\n" + "\n".join(judge_validation_md(ev.judge_validation))
    return text


def scored_labels(scored: dict) -> tuple[dict, list[str]]:
    """For the runs an evaluation scored (name -> ``runs.scored.ScoredRun``, or None): table labels that mark an
    unfinished run, and one note line for each."""
    labels, notes = {}, []
    for name, rec in scored.items():
        note = rec.unfinished_note(name) if rec is not None else None
        if note is not None:
            labels[name] = f"{name} (unfinished run, step {rec.step})"
            notes.append(f"Note: {note}")
    return labels, notes


def table_with_notes(rows: dict[str, PolicyRow], tasks: list[str], scored: dict) -> str:
    """:func:`format_table` with unfinished runs marked in their row and named under the table."""
    labels, notes = scored_labels(scored)
    return format_table(rows, tasks, labels) + ("\n\n" + "\n".join(notes) if notes else "")


def rate_cell(r: Rate) -> str:
    """"rate [low, high]" in percent."""
    lo, hi = r.ci95
    return f"{100 * r.rate:.0f} [{100 * lo:.0f}, {100 * hi:.0f}]"


def format_table(rows: dict[str, PolicyRow], tasks: list[str], labels: dict | None = None) -> str:
    """Tab. 5's layout: rows = policy (setting × initialisation), columns = tasks + average; success % [95 % CI]."""
    labels = labels or {}
    lines = ["| policy | " + " | ".join(tasks) + " | average |", "|---" * (len(tasks) + 2) + "|"]
    for name, r in rows.items():
        lines.append(f"| {labels.get(name, name)} | " + " | ".join(rate_cell(r.tasks[t]) for t in tasks)
                     + f" | {rate_cell(r.average)} |")
    return "\n".join(lines)


def judge_validation_md(jv: JudgeValidation) -> list[str]:
    """The judge's validation (``policy.judge.validation``) as a markdown table (``policy agreement``, and ``policy
    eval --judge`` in the simulator)."""
    lines = ["The judge on the simulator's own frames against MuJoCo's verdicts:", "",
             "| task | frames: precision | recall | κ | episodes: precision | recall | κ |",
             "|---|---|---|---|---|---|---|"]
    for t, v in jv.items():
        f, e = v.frame, v.episode
        lines.append(f"| {t} | {fmt_num(f.precision, 2)} | {fmt_num(f.recall, 2)} | {fmt_num(f.kappa, 2)} "
                     f"| {fmt_num(e.precision, 2)} | {fmt_num(e.recall, 2)} | {fmt_num(e.kappa, 2)} |")
    med = {t: v.median_error_cm for t, v in jv.items() if v.median_error_cm is not None}
    if med:
        lines += ["", "Its readings against the simulator's truth, median |error| over every frame (cm; r = hand − "
                  "object, d = object's displacement):", "",
                  "| task | " + " | ".join(OUTPUTS) + " |", "|---|" + "---|" * len(OUTPUTS)]
        lines += [f"| {t} | " + " | ".join(f"{m[k]:.1f}" for k in OUTPUTS) + " |" for t, m in med.items()]
    return lines


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
