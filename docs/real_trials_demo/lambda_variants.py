"""Where PPI's short coverage under the population's truth comes from: the weight λ tuned on the policy's own ten
trials, or not. The population design of ``policy estimate --study-design population`` (each draw n labelled and N
unlabelled scenes drawn with replacement from the pool, the same scenes for every policy; the truth the pool's rate),
for a predictor fitted on nothing (``twin``, ``hand``, ``verdict``), with λ

- ``own``: tuned on the policy's labelled episodes (PPI++, what ``policy estimate`` does);
- ``others``: the same formula pooled over the other policies' labelled episodes (0 where this policy's outcomes do
  not vary) — no use of this policy's outcomes beyond whether they vary;
- a fixed number (1: classical PPI; N / (N + n): the optimum of a perfect predictor);

each interval with the disagreement prior ``--prior`` (default 0: the interval's correlation the trials' own, as it
was when this was measured; ``policy estimate`` now counts ``ppi.DISAGREEMENT_PRIOR``).

    python docs/real_trials_demo/lambda_variants.py SIM_EVAL WM_EVAL PREDICTOR --out FILE.md [--n 10 20 --draws 600
        --prior 0]

Writes a markdown table per n (each policy's coverage and trials saved, their worst and mean); nothing is typed."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from simforcing.policy.estimate.estimate import predictions
from simforcing.policy.estimate.ppi import classical, ppi_mean
from simforcing.policy.estimate.trials import ground_truth, world_model_episodes


def pool_table(sim_eval: str, wm_eval: str, predictor: str):
    """The pool as arrays: its world-model episodes, its scenes, and per (policy, scene) the simulator's outcome ``y``
    and the predictor's value ``f`` — (wm, scenes, y, f); prior_sweep.py reads the pool the same way."""
    wm = world_model_episodes(wm_eval)
    gt = ground_truth(sim_eval, wm)
    f = predictions(wm, gt.truth, [], predictor)
    scenes = list(dict.fromkeys(k[1:] for k in wm.keys))
    index = wm.index()
    y = np.array([[gt.truth[(p,) + s] for s in scenes] for p in wm.policies], float)
    fp = np.array([[f[index[(p,) + s]] for s in scenes] for p in wm.policies], float)
    return wm, scenes, y, fp


def study(y: np.ndarray, f: np.ndarray, n: int, draws: int, modes: list[str], seed: int = 0,
          prior: float = 0.0) -> dict:
    """(policies, scenes) outcomes and predictions -> per mode: coverage and mean widths per policy, and the trials'
    own (Wilson) interval's."""
    rng = np.random.default_rng(seed)
    n_pol, scenes = y.shape
    big_n = scenes - n
    truth = y.mean(1)
    hits = {m: np.zeros(n_pol) for m in modes + ["trials"]}
    widths = {m: np.zeros(n_pol) for m in modes + ["trials"]}
    for _ in range(draws):
        lab, unl = rng.integers(0, scenes, n), rng.integers(0, scenes, big_n)
        yl, fl, fu = y[:, lab], f[:, lab], f[:, unl]
        cov = ((yl - yl.mean(1, keepdims=True)) * (fl - fl.mean(1, keepdims=True))).sum(1)
        var = np.concatenate([fl, fu], 1).var(1, ddof=1) * (n - 1)
        for i in range(n_pol):
            g = classical(yl[i])
            hits["trials"][i] += g.covers(truth[i])
            widths["trials"][i] += g.width / draws
            for m in modes:
                if m == "own":
                    lam = None
                elif m == "others":
                    o = np.arange(n_pol) != i
                    lam = 0.0 if yl[i].std() == 0 or var[o].sum() <= 0 else \
                        float(np.clip(cov[o].sum() / ((1 + n / big_n) * var[o].sum()), 0, 1))
                else:
                    lam = float(m)
                e = ppi_mean(yl[i], fl[i], fu[i], lam=lam, prior=prior)
                hits[m][i] += e.covers(truth[i])
                widths[m][i] += e.width / draws
    return {m: {"coverage": hits[m] / draws, "width": widths[m]} for m in hits}


def pool_parser(doc: str) -> argparse.ArgumentParser:
    """The arguments of a study on a pool (this script's and prior_sweep.py's): the simulator and world-model
    evaluations, a predictor fitted on nothing, the markdown file written."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("sim_eval")
    ap.add_argument("wm_eval")
    ap.add_argument("predictor", choices=("twin", "hand", "verdict", "actions"))
    ap.add_argument("--out", required=True)
    return ap


def main() -> None:
    ap = pool_parser(__doc__)
    ap.add_argument("--n", type=int, nargs="+", default=[10, 20])
    ap.add_argument("--draws", type=int, default=600)
    ap.add_argument("--prior", type=float, default=0.0, help="the interval's disagreement prior")
    a = ap.parse_args()
    wm, scenes, y, fp = pool_table(a.sim_eval, a.wm_eval, a.predictor)
    lines = [f"λ tuned or not, population design: `{a.wm_eval}` with predictor `{a.predictor}`, truth "
             f"`{a.sim_eval}` (the pool's rate), {a.draws} draws per n, disagreement prior {a.prior:g}; coverage "
             "of each 95 % interval / trials saved at equal width against the trials' own (Wilson) interval. "
             "Written by docs/real_trials_demo/lambda_variants.py.", ""]
    for n in a.n:
        big_n = len(scenes) - n
        modes = ["own", "others", "1", f"{big_n / (big_n + n):.3f}"]
        res = study(y, fp, n, a.draws, modes, prior=a.prior)
        lines += [f"n = {n}, N = {big_n}:", "", "| policy | truth | trials alone | " + " | ".join(
            f"λ {m}" for m in modes) + " |", "|---|---|---|" + "---|" * len(modes)]
        saved = {m: 1 - (res[m]["width"] / res["trials"]["width"]) ** 2 for m in modes}
        for i, p in enumerate(wm.policies):
            lines.append(f"| {p} | {100 * y[i].mean():.0f} % | {100 * res['trials']['coverage'][i]:.1f} % | " +
                         " | ".join(f"{100 * res[m]['coverage'][i]:.1f} % / {100 * saved[m][i]:.0f} %"
                                    for m in modes) + " |")
        lines.append(f"| **worst coverage / mean saved** | | {100 * res['trials']['coverage'].min():.1f} % | " +
                     " | ".join(f"**{100 * res[m]['coverage'].min():.1f} % / {100 * saved[m].mean():.0f} %**"
                                for m in modes) + " |")
        lines.append("")
    Path(a.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
