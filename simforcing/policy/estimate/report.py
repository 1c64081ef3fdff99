"""``policy estimate``'s files: estimate.json (tagged), estimate.md, episodes.csv (every episode's trust score),
estimates.png (each policy's intervals beside the world model's raw rate) and, with a coverage study, coverage.png
(coverage and width against the ground-truth trials per policy)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from simforcing.policy.estimate.estimate import EstimateResult, StudyPoint, saved_per_policy
from simforcing.result_files import POLICY_ESTIMATE, tagged
from simforcing.utils import atomic_write_json, atomic_write_text, fmt_num

FORMAT_VERSION = 1
ESTIMATE_FILES = ("estimate.json", "estimate.md", "episodes.csv", "estimates.png", "coverage.png")  # what it writes


def _pct(x: Optional[float]) -> str:
    return "–" if x is None else f"{100 * x:.0f}"


def _ci(e) -> str:
    return f"{100 * e.estimate:.0f} [{100 * e.lo:.0f}, {100 * e.hi:.0f}]"


def inputs_line(inputs: dict) -> str:
    """Where the numbers come from: the ground truth, the world-model evaluation and its world model, the draw."""
    drawn = f", n = {inputs['n']} scenes drawn (seed {inputs['seed']})" if inputs.get("n") else ""
    study = f", {inputs['draws']} draws for the coverage study" if inputs.get("draws") else ""
    return (f"Ground truth `{inputs.get('ground_truth')}`, world-model evaluation `{inputs.get('wm_eval')}` (world "
            f"model `{inputs.get('world_model')}`){drawn}{study}.")


def estimate_markdown(res: EstimateResult, study: Sequence[StudyPoint] = (), inputs: Optional[dict] = None) -> str:
    truth = any(p.average.truth is not None for p in res.policies.values())
    head = ("| policy | world model's rate | ground truth only (n) | **prediction-powered** (N) | rank |"
            + (" truth |" if truth else ""))
    lines = [f"Success (%) per policy, {100 * (1 - res.alpha):.0f} % intervals: ground truth only (Wilson) and "
             f"prediction-powered (PPI++, predictor `{res.predictor}`); {res.labelled} labelled and {res.unlabelled} "
             "unlabelled world-model episodes." + (" " + inputs_line(inputs) if inputs else ""), "",
             *([f"Note: {'; '.join(res.notes)}.", ""] if res.notes else []), head, "|---" * (5 + truth) + "|"]
    for name, p in res.policies.items():
        a = p.average
        row = (f"| {name} | {_pct(a.world_model)} | {_ci(a.ground_truth_only)} ({a.ground_truth_only.n}) | "
               f"**{_ci(a.ppi)}** ({a.ppi.N}) | {p.rank[0]}–{p.rank[1]} |")
        lines.append(row + (f" {_pct(a.truth)} |" if truth else ""))
    lines += ["", "Finite-sample intervals (Clopper–Pearson; PPI with the raw verdict, λ = 1, empirical Bernstein): "
              + "; ".join(f"{n} {_ci(p.average.ground_truth_only_finite)} / {_ci(p.average.ppi_finite)}"
                          for n, p in res.policies.items()) + "."]
    sure = [k for k, d in res.differences.items() if d.lo > 0 or d.hi < 0]
    if res.differences:
        lines += ["", f"Differences whose interval excludes 0 ({len(sure)} of {len(res.differences)} pairs): "
                  + ("; ".join(f"{k} {100 * res.differences[k].estimate:+.0f} [{100 * res.differences[k].lo:+.0f}, "
                               f"{100 * res.differences[k].hi:+.0f}]" for k in sure) or "none") + "."]
    trust = [f"out of fold on the labelled episodes {res.trust_auroc:.2f}" if res.trust_auroc is not None else None,
             f"on every unlabelled episode {res.trust_auroc_unlabelled:.2f}"
             if res.trust_auroc_unlabelled is not None else None]
    trust += [f"{k} alone {v:.2f}" for k, v in res.feature_auroc.items() if v is not None]
    trust = [t for t in trust if t]
    if trust:
        lines += ["", "Trust score, AUROC for the world model's verdict being wrong: " + "; ".join(trust) + "."]
    if study:
        lines += ["", study_markdown(study)]
        lines += [f"\nTrials saved per policy at n = {s.n} (the study's column is their mean): "
                  + "; ".join(f"{p} {100 * v:.0f} %" for p, v in saved_per_policy(s.width).items()) + "."
                  for s in study]
    return "\n".join(lines)


def _ideal(saved_ideal: Optional[float]) -> str:
    return "" if saved_ideal is None else f" ({100 * saved_ideal:.0f} %)"


def study_markdown(study: Sequence[StudyPoint]) -> str:
    population = any(s.design == "population" for s in study)
    truth = ("the simulator's rate over the whole pool, taken as the population's: each draw a fresh pool of as many "
             "scenes drawn from it with replacement" if population else "the simulator's rate over the whole pool")
    ideal = any(s.saved_ideal is not None for s in study)
    lines = ["Coverage study: over the draws of n labelled scenes (the same for every policy), how often each "
             f"policy's 95 % interval holds its truth ({truth}), min over policies; "
             "mean widths; trials saved at equal width"
             + (" (in brackets, what the predictor's within-policy ρ allows with λ known: ρ² N / (N + n) per "
                "policy)" if ideal else "") + "; Pearson of the estimates with the truth.", "",
             "| n | draws | coverage PPI (min) | coverage ground truth only (min) | width PPI "
             "| width ground truth only "
             "| trials saved | Pearson PPI / ground truth only / world model raw | trust AUROC "
             "| within-policy ρ: verdict / predictor |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s in study:
        cov_ppi = min(c["ppi"] for c in s.coverage.values())
        cov_gt = min(c["ground_truth_only"] for c in s.coverage.values())
        w_ppi = np.mean([w["ppi"] for w in s.width.values()])
        w_gt = np.mean([w["ground_truth_only"] for w in s.width.values()])
        lines.append(f"| {s.n} | {s.draws} | {100 * cov_ppi:.1f} % | {100 * cov_gt:.1f} % | {100 * w_ppi:.1f} | "
                     f"{100 * w_gt:.1f} | {100 * s.saved:.0f} %{_ideal(s.saved_ideal)} | {fmt_num(s.pearson_ppi, 2)} / "
                     f"{fmt_num(s.pearson_ground_truth_only, 2)} / {fmt_num(s.pearson_world_model, 2)} | "
                     f"{fmt_num(s.trust_auroc, 2)} | {fmt_num(s.rho_verdict, 2)} / {fmt_num(s.rho_predictor, 2)} |")
    if all("sampled_by_doubt" in next(iter(s.coverage.values())) for s in study):
        lines += ["", "Where the trials go (the raw verdict as predictor, active inference): n expected trials per "
                  "policy placed uniformly or where the unsupervised doubt (the arm's offset from the actions, a small "
                  "judge margin) is high.", "",
                  "| n | coverage uniform / by doubt (min) | width uniform / by doubt |", "|---|---|---|"]
        for s in study:
            cov = [min(c[k] for c in s.coverage.values()) for k in ("sampled_uniform", "sampled_by_doubt")]
            wid = [np.mean([w[k] for w in s.width.values()]) for k in ("sampled_uniform", "sampled_by_doubt")]
            lines.append(f"| {s.n} | {100 * cov[0]:.1f} % / {100 * cov[1]:.1f} % | {100 * wid[0]:.1f} / "
                         f"{100 * wid[1]:.1f} |")
    return "\n".join(lines)


def episodes_csv(res: EstimateResult) -> str:
    buf = io.StringIO()
    cols = ["policy", "task", "scene", "world_model_success", "p_success", "trust", "labelled", "ground_truth"]
    w = csv.DictWriter(buf, cols, lineterminator="\n")
    w.writeheader()
    for row in res.episodes:
        w.writerow({k: ("" if row[k] is None else row[k]) for k in cols})
    return buf.getvalue()


def estimates_plot(res: EstimateResult, png: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(res.policies)
    y = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(7.5, 0.55 * len(names) + 1.9))
    for off, key, colour, label in ((-0.15, "ground_truth_only", "tab:grey", "ground truth only"),
                                    (0.15, "ppi", "tab:blue", "prediction-powered")):
        est = [getattr(res.policies[n].average, key) for n in names]
        ax.errorbar([100 * e.estimate for e in est], y + off,
                    xerr=[[100 * max(e.estimate - e.lo, 0) for e in est],
                          [100 * max(e.hi - e.estimate, 0) for e in est]],
                    fmt="o", color=colour, capsize=3, label=label)
    ax.scatter([100 * res.policies[n].average.world_model for n in names], y, marker="x", color="tab:red",
               label="world model's raw rate", zorder=3)
    truth = [res.policies[n].average.truth for n in names]
    if all(t is not None for t in truth):
        ax.scatter([100 * t for t in truth], y, marker="|", s=300, color="black", label="truth (whole pool)", zorder=3)
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlim(-2, 102)
    ax.set_xlabel("success (%)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)  # below: no row hidden
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return png


def coverage_plot(study: Sequence[StudyPoint], png: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [s.n for s in study]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for key, colour, label in (("ppi", "tab:blue", "prediction-powered"),
                               ("ground_truth_only", "tab:grey", "ground truth only")):
        lo = [100 * min(c[key] for c in s.coverage.values()) for s in study]
        mean = [100 * np.mean([c[key] for c in s.coverage.values()]) for s in study]
        a.plot(ns, mean, "o-", color=colour, label=f"{label}: mean over policies")
        a.plot(ns, lo, "o--", color=colour, alpha=0.6, label=f"{label}: worst policy")
        b.plot(ns, [100 * np.mean([w[key] for w in s.width.values()]) for s in study], "o-", color=colour,
               label=label)
    a.axhline(95, color="black", lw=0.8)
    a.set_xlabel("ground-truth scenes per policy (n)")
    a.set_ylabel("coverage of the 95 % interval (%)")
    a.set_ylim(70, 101)
    a.legend(fontsize=7)
    b.set_xlabel("ground-truth scenes per policy (n)")
    b.set_ylabel("mean interval width (points)")
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return png


def result_json(res: EstimateResult, study: Sequence[StudyPoint], inputs: dict) -> dict:
    body = dict(res.to_json(), inputs=inputs, study=[s.to_json() for s in study])
    return tagged(POLICY_ESTIMATE, FORMAT_VERSION, body)


def write_estimate(res: EstimateResult, study: Sequence[StudyPoint], out: str | Path, inputs: dict) -> dict:
    """OUT/estimate.json, estimate.md, episodes.csv, estimates.png and (with a study) coverage.png."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    body = result_json(res, study, inputs)
    atomic_write_text(out / "estimate.md", estimate_markdown(res, study, inputs) + "\n")
    atomic_write_text(out / "episodes.csv", episodes_csv(res))
    estimates_plot(res, out / "estimates.png")
    if study:
        coverage_plot(study, out / "coverage.png")
    atomic_write_json(out / "estimate.json", body)  # last: its presence says the folder is complete
    return body
