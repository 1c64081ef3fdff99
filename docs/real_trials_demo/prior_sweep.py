"""How much disagreement the interval should assume it missed: ``policy estimate --disagreement-prior`` swept on a
pool, each policy's 95 % interval checked against its rate over many draws of the population design (n labelled and N
unlabelled scenes drawn with replacement from the pool, the truth the pool's rate), against the trials' own (Wilson)
interval on the same draws; and every two policies' paired difference (``ppi.difference``, the labelled term's
least variance from the same prior) against theirs. For a predictor fitted on nothing (``twin``, ``hand``,
``verdict``, ``actions``).

    python docs/real_trials_demo/prior_sweep.py SIM_EVAL WM_EVAL PREDICTOR --name NAME --out FILE.md
        [--priors 0 0.1 0.25 --draws 3000]

Writes a markdown table (per policy whose rate is not pinned at 0 or 1: coverage and trials saved; their worst and
mean) and beside it FILE.json, the record the notebook's table is generated from; nothing is typed."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # lambda_variants.py beside this script
from lambda_variants import pool_parser, pool_table  # noqa: E402
from simforcing.policy.estimate.ppi import PolicyTerms, classical, difference, ppi_mean, ppi_terms


def main() -> None:
    ap = pool_parser(__doc__)
    ap.add_argument("--name", required=True, help="the row's name in the notebook's table")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--priors", type=float, nargs="+", default=[0.0, 0.1, 0.25])
    ap.add_argument("--draws", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    wm, scenes, y, fp = pool_table(a.sim_eval, a.wm_eval, a.predictor)
    truth = y.mean(1)
    keep = [i for i in range(len(truth)) if 0 < truth[i] < 1]  # pinned policies: λ = 0, Wilson's either way
    n, big_n = a.n, len(scenes) - a.n
    rng = np.random.default_rng(a.seed)
    kinds = [f"prior {p:g}" for p in a.priors] + ["trials alone"]
    hits = np.zeros((len(kinds), len(keep)))
    widths = np.zeros_like(hits)
    pairs = list(itertools.combinations(range(len(truth)), 2))
    pair_hits = np.zeros((len(a.priors), len(pairs)))
    ids = (tuple(range(n)), tuple(range(n, n + big_n)))  # the same scenes for every policy: a paired design
    for _ in range(a.draws):
        lab, unl = rng.integers(0, len(scenes), n), rng.integers(0, len(scenes), big_n)
        for k, p in enumerate(a.priors):
            terms = [PolicyTerms(ppi_terms(y[i, lab], fp[i, lab], fp[i, unl], prior=p), *ids)
                     for i in range(len(truth))]
            for j, (u, v) in enumerate(pairs):
                pair_hits[k, j] += difference(terms[u], terms[v]).covers(truth[u] - truth[v])
        for j, i in enumerate(keep):
            ests = [ppi_mean(y[i, lab], fp[i, lab], fp[i, unl], prior=p) for p in a.priors] + [classical(y[i, lab])]
            for k, e in enumerate(ests):
                hits[k, j] += e.covers(truth[i])
                widths[k, j] += e.width / a.draws
    cov = hits / a.draws
    pair_cov = pair_hits / a.draws
    saved = 1 - (widths / widths[-1]) ** 2
    lines = [f"The disagreement prior swept, population design: `{a.wm_eval}` with predictor `{a.predictor}`, truth "
             f"`{a.sim_eval}` (the pool's rate), n = {n}, N = {big_n}, {a.draws} draws (s.e. of a coverage ≈ "
             f"{100 * np.sqrt(0.95 * 0.05 / a.draws):.1f} %); coverage of each 95 % interval / trials saved at equal "
             "width against the trials' own (Wilson) interval. The policies pinned at 0 or 1 are left out (λ = 0: "
             "Wilson's interval whatever the prior). Written by docs/real_trials_demo/prior_sweep.py.", "",
             "| policy | truth | " + " | ".join(kinds) + " |", "|---|---|" + "---|" * len(kinds)]
    for j, i in enumerate(keep):
        lines.append(f"| {wm.policies[i]} | {100 * truth[i]:.0f} % | " + " | ".join(
            f"{100 * cov[k, j]:.1f} %" + ("" if k == len(kinds) - 1 else f" / {100 * saved[k, j]:.0f} %")
            for k in range(len(kinds))) + " |")
    lines.append("| **worst / mean coverage; mean saved (of all policies)** | | " + " | ".join(
        f"**{100 * cov[k].min():.1f} / {100 * cov[k].mean():.1f} %**"
        + ("" if k == len(kinds) - 1 else f"; {100 * saved[k].sum() / len(truth):.0f} %")
        for k in range(len(kinds))) + " |")
    worst = [int(np.argmin(c)) for c in pair_cov]
    lines += ["", f"Every two policies' paired difference ({len(pairs)} pairs), coverage of the true difference, "
              "worst (the pair) / mean:", ""] + [
        f"- prior {p:g}: {100 * pair_cov[k].min():.1f} % ({wm.policies[pairs[worst[k]][0]]} − "
        f"{wm.policies[pairs[worst[k]][1]]}) / {100 * pair_cov[k].mean():.1f} %" for k, p in enumerate(a.priors)]
    Path(a.out).write_text("\n".join(lines) + "\n")
    record = {"format": "simforcing.prior-sweep", "name": a.name, "sim_eval": a.sim_eval, "wm_eval": a.wm_eval,
              "predictor": a.predictor, "n": n, "N": big_n, "draws": a.draws, "priors": a.priors,
              "policies": [wm.policies[i] for i in keep], "truth": [float(truth[i]) for i in keep],
              "coverage": {k: [float(v) for v in cov[j]] for j, k in enumerate(kinds)},
              "saved_of_all": {k: float(saved[j].sum() / len(truth)) for j, k in enumerate(kinds[:-1])},
              "pairs": [[wm.policies[u], wm.policies[v]] for u, v in pairs],
              "difference_coverage": {k: [float(v) for v in pair_cov[j]] for j, k in enumerate(kinds[:-1])},
              "markdown": Path(a.out).name}
    Path(a.out).with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
