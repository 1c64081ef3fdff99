"""Prediction-powered estimates of policies' success (``policy.estimate``): the estimators and intervals against
independent computations and simulated coverage, the cross-fitting, the trust score's AUROC, the trial file's
validation and the command end to end on evaluations whose truth is known."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import optimize, stats

from simforcing.cli import main
from simforcing.errors import ConfigError, DataError
from simforcing.policy.estimate import run_estimate
from simforcing.policy.estimate import trust as trust_mod
from simforcing.policy.estimate.ppi import (DISAGREEMENT_PRIOR, PolicyTerms, active_mean, classical,
                                            clopper_pearson, difference, empirical_bernstein, labelled_moments,
                                            prior_variance, refit_covariance,
                                            ppi_mean, ppi_terms, rank_intervals, sampling_probabilities,
                                            tuned_lambda, wilson)
from simforcing.policy.estimate.estimate import (StudyPoint, ideal_saved, resample_scenes, saved_per_policy,
                                                 within_policy_rho)
from simforcing.policy.estimate.trials import read_trials, world_model_episodes
from simforcing.policy.estimate.trust import Logistic, auroc, crossfit, episode_features

from evalgen import RATES, TASKS, evaluation, write_known_pool
from simforcing.policy.closed_loop.results import WORLD_MODEL, EpisodeOutcome


# ----------------------------------------------------------------------------------------------------------------------
# The estimators against independent computations
# ----------------------------------------------------------------------------------------------------------------------


def test_ppi_estimate_is_the_rectified_mean_and_lambda_the_variance_minimiser():
    rng = np.random.default_rng(0)
    y = (rng.random(30) < 0.4).astype(float)
    f_lab = np.clip(y * 0.7 + rng.random(30) * 0.3, 0, 1)
    f_unl = rng.random(200)
    # λ = 1: classical PPI, by hand
    e = ppi_mean(y, f_lab, f_unl, lam=1.0)
    assert e.estimate == pytest.approx(f_unl.mean() + (y - f_lab).mean(), abs=1e-12)
    # λ = 0: the ground-truth mean
    assert ppi_mean(y, f_lab, f_unl, lam=0.0).estimate == pytest.approx(y.mean(), abs=1e-12)
    # the tuned λ minimises the plug-in variance Var(y − λf)/n + λ² Var(f)/N (numerically, over λ)
    n, N = len(y), len(f_unl)
    var_f = np.concatenate([f_lab, f_unl]).var(ddof=1)

    def variance(lam):
        return (np.var(y, ddof=1) - 2 * lam * np.cov(y, f_lab)[0, 1] + lam ** 2 * var_f) / n + lam ** 2 * var_f / N

    best = optimize.minimize_scalar(variance, bounds=(0, 1), method="bounded").x
    assert tuned_lambda(y, f_lab, f_unl) == pytest.approx(best, abs=1e-4)
    # a useless (constant) predictor: λ = 0 and the estimate is the ground truth's
    assert tuned_lambda(y, np.full(30, 0.5), np.full(200, 0.5)) == 0.0
    # with a cross-fitted predictor's refit variance J (at λ = 1) the variance gains λ² J: its minimiser is smaller
    folds = np.clip(f_unl + rng.normal(0, 0.05, (5, 1)), 0, 1)  # five fold models, each shifted by its own offset
    means = folds.mean(axis=1)
    j = 4 / 5 * np.sum((means - means.mean()) ** 2)
    best_j = optimize.minimize_scalar(lambda lam: variance(lam) + lam ** 2 * j, bounds=(0, 1), method="bounded").x
    assert tuned_lambda(y, f_lab, f_unl, refit=j) == pytest.approx(best_j, abs=1e-4) and best_j < best
    assert ppi_terms(y, f_lab, folds.mean(0), f_folds=folds, prior=0.0).lam == pytest.approx(
        tuned_lambda(y, f_lab, folds.mean(0), refit=j))


def test_classical_intervals_are_wilson_and_clopper_pearson():
    w = stats.binomtest(3, 10).proportion_ci(method="wilson")
    assert wilson(3, 10) == pytest.approx((w.low, w.high), abs=1e-9)
    cp = stats.binomtest(3, 10).proportion_ci(method="exact")
    assert clopper_pearson(3, 10) == pytest.approx((cp.low, cp.high), abs=1e-9)
    assert classical([1, 0, 0, 1, 0, 0, 1, 0, 0, 0]).estimate == 0.3
    # the PPI interval at λ = 0 is the Wilson interval exactly
    y = np.array([1, 0, 0, 1, 0, 0, 1, 0, 0, 0], float)
    e = ppi_mean(y, np.full(10, 0.5), np.full(40, 0.5))
    assert (e.lo, e.hi) == pytest.approx(wilson(3, 10), abs=1e-4)


def test_a_handful_of_trials_gives_the_trials_own_interval():
    """Below ``min_n`` labelled episodes (MIN_TUNED_TRIALS, 10) the tuned λ is 0 and the CLT interval is Wilson's
    (scipy's); from ``min_n`` on, or with a lower ``min_n``, λ is tuned as before."""
    rng = np.random.default_rng(3)
    y = np.array([1, 0, 1, 1, 0], float)
    f_lab = np.clip(y * 0.8 + rng.random(5) * 0.2, 0, 1)
    f_unl = rng.random(100)
    e = ppi_mean(y, f_lab, f_unl)
    w = stats.binomtest(3, 5).proportion_ci(method="wilson")
    assert e.lam == 0.0 and e.estimate == pytest.approx(0.6) and (e.lo, e.hi) == pytest.approx((w.low, w.high),
                                                                                                abs=1e-4)
    tuned = ppi_mean(y, f_lab, f_unl, min_n=2)
    assert tuned.lam == pytest.approx(tuned_lambda(y, f_lab, f_unl)) and tuned.lam > 0
    y10, f10 = np.tile(y, 2), np.tile(f_lab, 2)
    lam10 = ppi_mean(y10, f10, f_unl).lam
    assert lam10 == pytest.approx(tuned_lambda(y10, f10, f_unl)) and lam10 > 0
    assert ppi_terms(y, f_lab, f_unl).lam == 0.0 and ppi_terms(y, f_lab, f_unl, lam=1.0).lam == 1.0


def test_the_disagreement_prior_is_pseudo_episodes_in_the_labelled_moments():
    """``labelled_moments`` against numpy on the sample with the pseudo-episodes appended: weight 1 — each appended
    once; weight 0.25 — the real episodes repeated four times and each pseudo-episode once; weight 0 — the sample's own.
    The pseudo-episodes: a failure where the prediction is highest, a success where it is lowest."""
    y = np.array([1, 0, 1, 1, 0, 0, 1, 0, 0, 1], float)
    f = np.array([0.9, 0.1, 0.8, 0.7, 0.2, 0.3, 0.95, 0.05, 0.4, 0.6])
    assert labelled_moments(y, f, 0.0) == pytest.approx((np.corrcoef(y, f)[0, 1], f.std()))
    y1, f1 = np.append(y, [1.0, 0.0]), np.append(f, [f.min(), f.max()])
    assert labelled_moments(y, f, 1.0) == pytest.approx((np.corrcoef(y1, f1)[0, 1], f1.std()))
    y4, f4 = np.append(np.tile(y, 4), [1.0, 0.0]), np.append(np.tile(f, 4), [f.min(), f.max()])
    assert labelled_moments(y, f, 0.25) == pytest.approx((np.corrcoef(y4, f4)[0, 1], f4.std()))
    perfect = y.copy()  # ten trials the predictor got all right: ρ 1 alone, below 1 with the prior
    assert labelled_moments(y, perfect, 0.0)[0] == pytest.approx(1.0)
    assert labelled_moments(y, perfect, DISAGREEMENT_PRIOR)[0] < 0.99
    assert labelled_moments(np.ones(10), f, 0.0)[0] == 0.0  # outcomes that do not vary: no correlation
    # the estimate is the same, the interval wider; at λ = 0 (Wilson's) the prior changes nothing
    f_unl = np.tile([0.0, 1.0], 25)
    a, b = ppi_mean(y, perfect, f_unl, prior=0.0), ppi_mean(y, perfect, f_unl)
    assert a.estimate == b.estimate and a.lam == b.lam > 0 and b.width > 1.1 * a.width
    w0, w1 = ppi_mean(y, np.full(10, 0.5), f_unl, prior=0.0), ppi_mean(y, np.full(10, 0.5), f_unl, prior=1.0)
    assert (w0.lo, w0.hi) == (w1.lo, w1.hi)


def test_ten_trials_of_a_predictor_with_rare_errors_cover_with_the_prior():
    """The case the prior is for, simulated from a pool's own table: the full-scene twin's verdicts for SFT-WM@500 on
    the 60-scene pool (18 both successes, 1 success it called a failure, 5 failures it called successes, 36 both
    failures) as the population, ten trials and fifty unlabelled episodes drawn from it. Over 2,000 draws (s.e. ≈ 0.5
    %) the interval without the prior falls short of 95 % by more than three standard errors; with the prior it does
    not, and it is still narrower than the trials' own (Wilson) interval."""
    rng = np.random.default_rng(7)
    n, big_n, draws = 10, 50, 2000
    cells = np.array([18, 1, 5, 36]) / 60  # (y, f) = (1, 1), (1, 0), (0, 1), (0, 0)
    p = cells[0] + cells[1]
    hits = {"none": 0, "prior": 0}
    widths = {"prior": 0.0, "wilson": 0.0}
    for _ in range(draws):
        c = rng.choice(4, n + big_n, p=cells)
        y, f = (c <= 1).astype(float), ((c == 0) | (c == 2)).astype(float)
        e0, e, g = ppi_mean(y[:n], f[:n], f[n:], prior=0.0), ppi_mean(y[:n], f[:n], f[n:]), classical(y[:n])
        hits["none"] += e0.covers(p)
        hits["prior"] += e.covers(p)
        widths["prior"] += e.width / draws
        widths["wilson"] += g.width / draws
    se = math.sqrt(0.95 * 0.05 / draws)
    assert hits["none"] / draws < 0.95 - 3 * se <= hits["prior"] / draws
    assert widths["prior"] < 0.9 * widths["wilson"]


def test_the_labelled_terms_least_variance_counts_the_pseudo_episodes():
    """``prior_variance`` against numpy: the residual y − λ f over the trials and the two pseudo-episodes, its
    variance (ddof 0) over n − 1 — at weight 1 each appended once, at 0.25 the trials repeated four times."""
    y = np.array([1, 0, 1, 1, 0, 0, 1, 0, 0, 1], float)
    f = y.copy()  # ten trials the predictor got all right: the plug-in variance of y − λf would be 0
    lam, n = 0.8, 10
    a1 = np.append(y, [1.0, 0.0]) - lam * np.append(f, [f.min(), f.max()])
    assert prior_variance(y, f, lam, 1.0) == pytest.approx(a1.var() / (n - 1))
    a4 = np.append(np.tile(y, 4), [1.0, 0.0]) - lam * np.append(np.tile(f, 4), [f.min(), f.max()])
    assert prior_variance(y, f, lam, 0.25) == pytest.approx(a4.var() / (n - 1))
    assert prior_variance(y, f, lam, 0.0) == prior_variance(y, f, 0.0, 1.0) == 0.0
    t0, t = ppi_terms(y, f, np.tile([0.0, 1.0], 25), prior=0.0), ppi_terms(y, f, np.tile([0.0, 1.0], 25))
    assert t0.floor == 0.0 and t.floor > 0
    assert t.floor == pytest.approx(prior_variance(y, f, t.lam, DISAGREEMENT_PRIOR))


def test_a_paired_difference_the_predictor_cannot_see_covers_with_the_prior():
    """Two policies that differ on 3 scenes of 60, on which the predictor says the same for both (the demo pool's
    SFT-WM@500 and SimForcing-WM@500 with the `hand` predictor, their table as the population): ten trials often hold
    none of the three, the labelled terms' difference is then constant and the plug-in interval collapses — it
    covered the true difference (+5 points) in about half the draws; with the disagreement prior's floor in at least
    95 % less three standard errors."""
    cells = np.array([[0, 0, 0, 0], [0, 1, 0, 1], [1, 0, 0, 0], [1, 1, 0, 1], [1, 1, 1, 1]], float)  # y_p f_p y_q f_q
    w = np.array([37, 1, 2, 1, 19]) / 60
    d = w @ cells[:, 0] - w @ cells[:, 2]
    n, big_n, draws = 10, 50, 1000
    ids = (tuple(range(n)), tuple(range(n, n + big_n)))
    hits = {}
    for prior in (0.0, DISAGREEMENT_PRIOR):
        rng = np.random.default_rng(5)
        hits[prior] = 0
        for _ in range(draws):
            c = cells[rng.choice(5, n + big_n, p=w)]
            p, q = (PolicyTerms(ppi_terms(c[:n, j], c[:n, j + 1], c[n:, j + 1], prior=prior), *ids) for j in (0, 2))
            hits[prior] += difference(p, q).covers(d)
    se = math.sqrt(0.95 * 0.05 / draws)
    assert hits[0.0] / draws < 0.7 and hits[DISAGREEMENT_PRIOR] / draws >= 0.95 - 3 * se


def test_empirical_bernstein_matches_maurer_pontil():
    x = np.array([0.1, 0.4, 0.4, 0.9, 0.0, 0.3])
    delta = 0.05
    want = math.sqrt(2 * np.var(x, ddof=1) * math.log(4 / delta) / 6) + 7 * math.log(4 / delta) / (3 * 5)
    assert empirical_bernstein(x, delta, 1.0) == pytest.approx(want)


@pytest.mark.parametrize("p,noise", [(0.4, 0.3), (0.1, 0.3), (0.85, 0.5)])
def test_coverage_on_bernoulli_data_with_known_truth(p, noise):
    """Over 600 draws: the PPI++ CLT interval covers the truth within binomial error of 95 % (at least 95 % − 3 s.e.,
    s.e. ≈ 0.9 %), the finite-sample ones at least 95 %; with a good predictor PPI++ is narrower than Wilson."""
    rng = np.random.default_rng(1)
    n, N, draws = 40, 300, 600
    hits = {"clt": 0, "finite": 0, "gt": 0}
    widths = {"clt": [], "gt": []}
    for _ in range(draws):
        y = rng.random(n + N) < p
        f = np.where(rng.random(n + N) < noise, rng.random(n + N) < 0.5, y).astype(float)
        e, fin, gt = ppi_mean(y[:n], f[:n], f[n:]), ppi_mean(y[:n], f[:n], f[n:], method="finite"), classical(y[:n])
        hits["clt"] += e.covers(p)
        hits["finite"] += fin.covers(p)
        hits["gt"] += gt.covers(p)
        widths["clt"].append(e.width)
        widths["gt"].append(gt.width)
    se = math.sqrt(0.95 * 0.05 / draws)
    assert hits["clt"] / draws >= 0.95 - 3 * se
    assert hits["finite"] / draws >= 0.95
    if noise <= 0.3:
        assert np.mean(widths["clt"]) < 0.9 * np.mean(widths["gt"])


def test_active_sampling_is_unbiased_and_covers_with_doubt_weighted_probabilities():
    """Trials placed with probabilities π (more where the doubt is high): π sums to the budget within (0, 1]; the
    inverse-probability estimate covers the finite population's mean at the nominal rate over 800 draws, and where
    the doubt marks the predictor's errors it is narrower than uniform placement."""
    rng = np.random.default_rng(5)
    N, budget = 300, 40
    y = (rng.random(N) < 0.5).astype(float)
    wrong = rng.random(N) < 0.25
    f = np.where(wrong, 1 - y, y)
    doubt = np.where(wrong, 1.0, 0.2) + rng.random(N) * 0.1
    pi = sampling_probabilities(doubt, budget, mix=0.8)
    assert pi.sum() == pytest.approx(budget) and pi.min() > 0 and pi.max() <= 1
    assert pi[wrong].mean() > pi[~wrong].mean()
    uniform = sampling_probabilities(doubt, budget, mix=0.0)
    assert uniform == pytest.approx(np.full(N, budget / N))
    hits, widths = {"doubt": 0, "uniform": 0}, {"doubt": [], "uniform": []}
    for _ in range(800):
        for kind, p in (("doubt", pi), ("uniform", uniform)):
            e = active_mean(f, y, rng.random(N) < p, p)
            hits[kind] += e.covers(y.mean())
            widths[kind].append(e.width)
    se = math.sqrt(0.95 * 0.05 / 800)
    assert hits["doubt"] / 800 >= 0.95 - 3 * se and hits["uniform"] / 800 >= 0.95 - 3 * se
    assert np.mean(widths["doubt"]) < np.mean(widths["uniform"])


def test_paired_difference_variance_and_rank_intervals():
    rng = np.random.default_rng(2)
    ids = [("reach", i) for i in range(12)]
    ya, yb = (rng.random(12) < 0.8).astype(float), (rng.random(12) < 0.3).astype(float)
    # λ = 0 (no unlabelled): the difference's variance is the paired one, Var(y_a − y_b)/n
    ta = PolicyTerms(ppi_terms(ya, ya, [], lam=0.0), tuple(ids), ())
    tb = PolicyTerms(ppi_terms(yb, yb, [], lam=0.0), tuple(ids), ())
    d = difference(ta, tb)
    half = stats.t.ppf(0.975, 11) * math.sqrt(np.var(ya - yb, ddof=1) / 12)
    assert d.estimate == pytest.approx(ya.mean() - yb.mean())
    assert (d.lo, d.hi) == pytest.approx((max(-1, d.estimate - half), min(1, d.estimate + half)))
    # disjoint scenes: independent variances
    tb2 = PolicyTerms(ppi_terms(yb, yb, [], lam=0.0), tuple(("push", i) for i in range(12)), ())
    d2 = difference(ta, tb2)
    half2 = stats.t.ppf(0.975, 11) * math.sqrt(np.var(ya, ddof=1) / 12 + np.var(yb, ddof=1) / 12)
    assert d2.hi - d2.estimate == pytest.approx(min(half2, 1 - d2.estimate))
    # a clearly best and a clearly worst policy get the end ranks; two identical ones share an interval
    one, zero = np.ones(40), np.zeros(40)
    mixed = (np.arange(40) % 2).astype(float)
    ids40 = tuple(("reach", i) for i in range(40))
    terms = {n: PolicyTerms(ppi_terms(v, v, [], lam=0.0), ids40, ()) for n, v in
             (("best", one), ("mid1", mixed), ("mid2", mixed.copy()), ("worst", zero))}
    ranks = rank_intervals(terms)
    assert ranks["best"] == (1, 1) and ranks["worst"] == (4, 4)
    assert ranks["mid1"] == ranks["mid2"] == (2, 3)


def test_the_refit_variance_is_the_grouped_jackknife_of_the_fold_models():
    """A cross-fitted predictor's K fold models on the unlabelled episodes: λ times each one's mean, their spread by
    the delete-a-group jackknife ((K − 1)/K Σ (r_k − r̄)²) joins the variance — in the score interval too; a
    difference of two policies judged by the same models subtracts what moves both."""
    rng = np.random.default_rng(11)
    y = (rng.random(12) < 0.5).astype(float)
    f_lab, folds = rng.random(12), rng.random((5, 40))
    t = ppi_terms(y, f_lab, folds.mean(0), lam=0.6, f_folds=folds)
    r = 0.6 * folds.mean(axis=1)
    jk = 4 / 5 * np.sum((r - r.mean()) ** 2)
    assert t.refit == pytest.approx(r) and t.refit_variance == pytest.approx(jk)
    plain = ppi_terms(y, f_lab, folds.mean(0), lam=0.6)
    assert plain.refit_variance == 0.0 and t.variance == pytest.approx(plain.variance + jk)
    assert ppi_terms(y, f_lab, folds.mean(0), lam=0.0, f_folds=folds).refit_variance == 0.0  # λ = 0: trials alone
    with pytest.raises(ValueError, match=r"expected \(K, 40\)"):
        ppi_terms(y, f_lab, folds.mean(0), lam=0.6, f_folds=folds[:, :39])
    # the score interval's variance at θ gains the same term: its ends solve (θ̂ − θ)² = q² V(θ) with V(θ) =
    # (θ(1 − θ) − 2λρ σ_y σ_f + λ² σ_f²)/n + λ² Var(f_unl)/N + jk, found here by root-finding
    e1 = ppi_mean(y, f_lab, folds.mean(0), lam=0.6, prior=0.0, f_folds=folds)
    q, rho = stats.norm.ppf(0.975), np.corrcoef(y, f_lab)[0, 1]
    sd_f, est = f_lab.std(), t.estimate

    def gap(theta):
        sd_y = math.sqrt(theta * (1 - theta))
        var = ((sd_y ** 2 - 2 * 0.6 * rho * sd_y * sd_f + 0.36 * sd_f ** 2) / 12
               + 0.36 * folds.mean(0).var(ddof=1) / 40 + jk)
        return (est - theta) ** 2 - q * q * var

    lo, hi = optimize.brentq(gap, 1e-9, est), optimize.brentq(gap, est, 1 - 1e-9)
    assert (e1.lo, e1.hi) == pytest.approx((lo, hi), abs=1e-4)
    e0 = ppi_mean(y, f_lab, folds.mean(0), lam=0.6, prior=0.0)
    assert e1.lo < e0.lo and e1.hi > e0.hi
    # a difference: Var(r_p − r_q) by the same jackknife, so models that move both policies alike cancel
    g = rng.random((5, 40))
    tp = PolicyTerms(ppi_terms(y, f_lab, folds.mean(0), lam=0.6, f_folds=folds), tuple(range(12)),
                     tuple(range(12, 52)))
    tq = PolicyTerms(ppi_terms(y[::-1], f_lab, g.mean(0), lam=0.6, f_folds=g), tuple(range(12)),
                     tuple(range(12, 52)))
    rq = tq.terms.refit
    assert refit_covariance(r, rq) == pytest.approx(4 / 5 * np.sum((r - r.mean()) * (rq - rq.mean())))
    assert refit_covariance(r, rq[:4]) == 0.0 and refit_covariance(r[:1], rq[:1]) == 0.0
    base = difference(PolicyTerms(plain, tp.lab_ids, tp.unl_ids),
                      PolicyTerms(ppi_terms(y[::-1], f_lab, g.mean(0), lam=0.6), tq.lab_ids, tq.unl_ids))
    d = difference(tp, tq)
    extra = 4 / 5 * np.sum(((r - rq) - (r - rq).mean()) ** 2)
    t_q = stats.t.ppf(0.975, 11)
    assert ((d.hi - d.lo) / 2) ** 2 == pytest.approx(((base.hi - base.lo) / 2) ** 2 + t_q ** 2 * extra)


def test_the_refit_variance_accounts_for_a_cross_fitted_predictors_own_noise():
    """Simulated as the demo's pools are estimated: eight policies of different rates, one informative feature and one
    of noise, the same ten of sixty scenes labelled for every policy and one logistic predictor pooled over the
    policies, cross-fitted by scene. Over many samples the estimates' mean squared error exceeds the plug-in variance
    (the fit moves with the labels); the refit variance closes much of that gap without overshooting it."""
    rng = np.random.default_rng(4)
    policies, scenes, n = 8, 60, 10
    mu = np.linspace(-1.5, 1.5, policies)
    truth = np.array([np.mean(1 / (1 + np.exp(-1.5 * (m + rng.normal(size=200_000))))) for m in mu])
    sq_err, plug, full = np.zeros(policies), np.zeros(policies), np.zeros(policies)
    reps = 400
    for rep in range(reps):
        x = mu[:, None] + rng.normal(size=(policies, scenes))
        y = (rng.random((policies, scenes)) < 1 / (1 + np.exp(-1.5 * x))).astype(float)
        feats = np.stack([x, rng.normal(size=x.shape)], -1)
        lab = rng.choice(scenes, n, replace=False)
        unl = np.setdiff1d(np.arange(scenes), lab)
        cf = crossfit(feats[:, lab].reshape(-1, 2), y[:, lab].reshape(-1), list(np.tile(lab, policies)),
                      feats[:, unl].reshape(-1, 2), folds=5, seed=rep)
        f_lab, f_unl = cf.lab.reshape(policies, n), cf.unl.reshape(policies, -1)
        per_fold = cf.unl_folds.reshape(cf.folds, policies, -1)
        for p in range(policies):
            t = ppi_terms(y[p, lab], f_lab[p], f_unl[p], f_folds=per_fold[:, p], prior=0.0)
            sq_err[p] += (t.estimate - truth[p]) ** 2 / reps
            plug[p] += (t.variance - t.refit_variance) / reps
            full[p] += t.variance / reps
    gap = sq_err.sum() - plug.sum()
    assert gap > 0.05 * sq_err.sum()  # the plug-in misses the fit's own noise
    assert full.sum() - plug.sum() > 0.4 * gap  # the jackknife finds much of it (55 % here)
    assert full.sum() < 1.02 * sq_err.sum()  # and does not overshoot


# ----------------------------------------------------------------------------------------------------------------------
# The predictor, the cross-fitting and the trust score
# ----------------------------------------------------------------------------------------------------------------------


def test_logistic_matches_the_penalised_likelihood_optimum():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(200, 3))
    y = (rng.random(200) < 1 / (1 + np.exp(-(x @ [1.5, -1.0, 0.0] + 0.3)))).astype(float)
    m = Logistic(l2=1.0).fit(x, y)
    z = np.column_stack([np.ones(200), (x - x.mean(0)) / x.std(0)])

    def loss(w):
        s = z @ w
        return np.sum(np.logaddexp(0, s) - y * s) + 0.5 * (1e-6 * w[0] ** 2 + np.sum(w[1:] ** 2))

    w = optimize.minimize(loss, np.zeros(4), method="BFGS", options={"gtol": 1e-9}).x
    assert m.w == pytest.approx(w, abs=1e-4)


def test_crossfitting_keeps_each_labelled_episode_out_of_its_own_predictor(monkeypatch):
    """Every model is fitted on rows of other scene groups only; a labelled episode's prediction comes from a model
    that never saw its group; unlabelled predictions average all the fold models."""
    fitted = []

    class Recorder:
        def __init__(self, l2):
            pass

        def fit(self, x, y):
            self.seen = set(x[:, 0].astype(int).tolist())
            fitted.append(self.seen)
            return self

        def predict(self, x):
            return np.array([1.0 if int(i) in self.seen else 0.0 for i in x[:, 0]])  # 1: "saw this episode"

    monkeypatch.setattr(trust_mod, "Logistic", Recorder)
    groups = [g for g in range(10) for _ in range(3)]  # 10 scenes × 3 policies
    x = np.arange(30, dtype=float)[:, None]
    cf = crossfit(x, np.arange(30) % 2, groups, np.full((4, 1), 99.0), folds=5)
    assert (cf.lab == 0).all()  # no labelled episode was predicted by a model that saw it
    assert len(fitted) == 5
    for seen in fitted:  # every scene's episodes are all in or all out
        for g in range(10):
            members = {i for i in range(30) if groups[i] == g}
            assert members <= seen or not (members & seen)
    assert cf.unl == pytest.approx(np.zeros(4))


def test_auroc_is_the_pairwise_ordering_probability():
    rng = np.random.default_rng(4)
    s, pos = rng.normal(size=50).round(1), rng.random(50) < 0.4
    pairs = [(a, b) for a, b in itertools.product(s[pos], s[~pos])]
    want = np.mean([1.0 if a > b else 0.5 if a == b else 0.0 for a, b in pairs])
    assert auroc(s, pos) == pytest.approx(want)
    assert auroc(s, np.zeros(50, bool)) is None


def test_episode_features():
    f = episode_features(True, [False, True, True], [-0.02, 0.01, 0.03], [10.0, 20.0, 60.0])
    assert f.tolist() == pytest.approx([1.0, 3.0, 2 / 3, 3.0, 6.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    assert episode_features(False, None, None, None).tolist() == [0.0] * 13
    # a reach (its predicate on the hand): the commanded hand within 10 cm of the object's start after any action
    # decides it, the world model's verdict (here a failure) not read; a push keeps the verdict
    assert episode_features(False, None, None, None, None, None, [120.0, 99.0, 130.0], True)[-3:].tolist() == [1, 1, 1]
    assert episode_features(False, None, None, None, None, None, [120.0, 101.0], True)[-3:].tolist() == [1, 0, 0]
    assert episode_features(True, None, None, None, None, None, [120.0, 40.0], False)[-3:].tolist() == [0, 0, 1]
    assert episode_features(True, None, None, None, None, None, None, True)[-3:].tolist() == [0, 0, 1]  # unrecorded
    assert episode_features(False, None, None, None, None, True)[7] == 1.0  # a full-scene twin's own verdict
    # the commanded hand's distance from the object's start: closest and last (cm)
    assert episode_features(False, None, None, None, None, None, [120.0, 40.0, 90.0])[8:10].tolist() == [4.0, 9.0]
    # four noise draws, one of them a failure: soft 0.75, i.e. 0.25 below draw 0's verdict; disagreement 4·0.75·0.25
    f = episode_features(True, [True], [0.01], [5.0], [True, True, False, True])
    assert f[5:7].tolist() == pytest.approx([-0.25, 0.75])


def test_a_constant_feature_column_leaves_the_predictor_unchanged():
    """One noise draw per episode leaves the draw features at 0: the fitted predictor is the five features' own."""
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(60, 5)), rng.random(60) < 0.5
    five = Logistic().fit(x, y).predict(x)
    seven = Logistic().fit(np.column_stack([x, np.zeros((60, 2))]), y).predict(np.column_stack([x, np.zeros((60, 2))]))
    np.testing.assert_allclose(seven, five, rtol=0, atol=1e-12)


def test_within_policy_rho_is_the_mean_of_each_policys_pearson():
    rng = np.random.default_rng(9)
    keys = [(p, "push", s) for p in ("a", "b", "always") for s in range(30)]
    truth = {k: bool(rng.random() < 0.5) if k[0] != "always" else True for k in keys}
    values = np.array([truth[k] + rng.normal(0, 0.8) for k in keys])
    want = np.mean([stats.pearsonr([truth[k] for k in keys if k[0] == p],
                                   [v for k, v in zip(keys, values) if k[0] == p])[0] for p in ("a", "b")])
    assert within_policy_rho(keys, values, truth) == pytest.approx(want)  # "always" has no correlation: left out
    assert within_policy_rho(keys[60:], values[60:], truth) is None


def test_ideal_saving_is_what_ppi_with_the_known_lambda_saves_by_simulation():
    """ρ² N / (N + n) against an independent computation: the variance of the rectified mean with λ* over many
    simulated samples of a binary outcome and a noisy binary prediction, against the trials' own mean's."""
    rng = np.random.default_rng(3)
    n, big_n, p, flip, reps = 10, 50, 0.3, 0.1, 40000
    y = rng.random((reps, n + big_n)) < p
    f = np.where(rng.random(y.shape) < flip, ~y, y).astype(float)  # the prediction, wrong in 10 % of episodes
    y = y.astype(float)
    rho = np.corrcoef(y.ravel(), f.ravel())[0, 1]
    lam = np.cov(y.ravel(), f.ravel())[0, 1] / ((1 + n / big_n) * f.var())
    est = (y[:, :n] - lam * f[:, :n]).mean(1) + lam * f[:, n:].mean(1)
    simulated = 1 - est.var() / y[:, :n].mean(1).var()
    keys = [("a", "push", s) for s in range(n + big_n)]  # one pool of the same law, large enough to fix ρ
    assert rho ** 2 * big_n / (big_n + n) == pytest.approx(simulated, abs=0.02)
    truth = {k: bool(v) for k, v in zip(keys, y[0])}
    got = ideal_saved(keys, f[0], truth, n)["a"]
    r = np.corrcoef(y[0], f[0])[0, 1]
    assert got == pytest.approx(r * r * big_n / (big_n + n))
    pinned = {k: True for k in keys}  # a policy whose truth does not vary saves nothing
    assert ideal_saved(keys, f[0], pinned, n) == {"a": 0.0}


def test_a_resampled_pool_keeps_each_scenes_episodes_together():
    keys = [(p, t, s) for p in ("a", "b") for t in ("push", "reach") for s in range(5)]
    truth = {k: bool((hash(k) >> 3) % 2) for k in keys}
    from simforcing.policy.estimate.trials import WorldModelEpisodes

    feats = np.arange(len(keys), dtype=float)[:, None] * np.ones((1, 3))
    wm = WorldModelEpisodes(keys, feats, np.array([truth[k] for k in keys]), True, "x", None)
    pool, pool_truth = resample_scenes(wm, truth, np.random.default_rng(0))
    assert len(pool.keys) == len(keys) and set(pool_truth) == set(pool.keys)
    scenes = list(dict.fromkeys(k[1:] for k in keys))
    for j in range(len(scenes)):  # position j: one drawn scene, every policy's episode of it
        rows = [i for i, k in enumerate(pool.keys) if k[2] == j]
        assert [pool.keys[i][0] for i in rows] == ["a", "b"]
        a, b = (keys[int(pool.features[i, 0])] for i in rows)
        assert a[1:] == b[1:] and pool.keys[rows[0]][1] == a[1]
        assert [pool_truth[pool.keys[i]] for i in rows] == [truth[a], truth[b]]
        assert [bool(pool.verdicts[i]) for i in rows] == [truth[a], truth[b]]
        assert [pool.scene_of(i) for i in rows] == [a[1:], a[1:]]  # its origin: the cross-fitting's fold
    assert wm.keys == keys and (wm.features[:, 0] == np.arange(len(keys))).all()  # the original untouched


def test_a_study_point_reads_its_design_and_ideal_or_the_defaults_of_an_older_record():
    body = {"n": 10, "draws": 4, "coverage": {"a": {"ppi": 1.0}}, "width": {"a": {"ppi": 0.2}}, "saved": 0.3,
            "pearson_ppi": None, "pearson_ground_truth_only": None, "pearson_world_model": None,
            "trust_auroc": None}
    old = StudyPoint.from_json(body)
    assert old.design == "pool" and old.saved_ideal is None
    new = StudyPoint.from_json({**body, "design": "population", "saved_ideal": 0.5})
    assert new.design == "population" and new.saved_ideal == 0.5
    assert StudyPoint.from_json(new.to_json()) == new
    from simforcing.result_files import MalformedResult
    with pytest.raises(MalformedResult, match="field 'design' must be one of pool, population"):
        StudyPoint.from_json({**body, "design": "superpopulation"})


# ----------------------------------------------------------------------------------------------------------------------
# Evaluations whose truth is known: the trial file and the command
# ----------------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def known_pool(tmp_path_factory):
    """A simulator evaluation (the truth) and a world-model one of the same 4 policies × 3 tasks × 20 scenes
    (``evalgen.write_known_pool``)."""
    return write_known_pool(tmp_path_factory.mktemp("pool"))


def test_trial_file_is_validated_with_named_errors(known_pool, tmp_path):
    root, _ = known_pool
    wm = world_model_episodes(root / "wm")

    def trials(text, name="t.csv"):
        p = tmp_path / name
        p.write_text(text)
        return p

    good = trials("policy,task,scene,success\ngood,push,3,1\nidle,reach,0,false\n")
    assert read_trials(good, wm) == {("good", "push", 3): True, ("idle", "reach", 0): False}
    jl = trials('{"policy": "fair", "task": "grasp", "scene": 1, "success": true}\n', "t.jsonl")
    assert read_trials(jl, wm) == {("fair", "grasp", 1): True}
    cases = {
        "policy,task,scene,success\ngood,push,3,2\n": "line 2, field 'success'",
        "policy,task,scene,success\ngood,push,99,1\n": "line 2, field 'scene': 99 is not a push scene",
        "policy,task,scene,success\ngood,push,x,1\n": "line 2, field 'scene'",
        "policy,task,scene,success\ngood,push,3,1\ngood,push,3,0\n": "line 3: the trial good / push / scene 3 is "
                                                                     "also on line 2",
        "policy,task,scene,success\nexpert,push,3,1\n": "field 'policy': 'expert' is not in the world-model",
        "policy,task,scene,success\ngood,stack,3,1\n": "field 'task': 'stack'",
        "policy,task,success\ngood,push,1\n": "missing scene",
        "policy,task,scene,success\n": "no trials",
    }
    for text, want in cases.items():
        with pytest.raises(DataError, match=want.replace("(", r"\(")) as e:
            read_trials(trials(text), wm)
        assert "t.csv" in str(e.value)
    with pytest.raises(DataError, match="line 1: not JSON"):
        read_trials(trials("{policy: good}\n", "t.jsonl"), wm)
    with pytest.raises(DataError, match="unknown trial file type"):
        read_trials(trials("x", "t.txt"), wm)


def test_estimate_from_a_simulator_evaluation_and_from_trials(known_pool, tmp_path):
    root, truth = known_pool
    res, study = run_estimate(root / "sim", root / "wm", tmp_path / "est", n=10, draws=40, study_ns=(10,))
    for name, p in res.policies.items():
        pool = np.mean([v for k, v in truth.items() if k[0] == name])
        assert p.average.truth == pytest.approx(pool)
        assert p.average.ppi.n == 10 and p.average.ppi.N == 50
    assert res.trust_auroc_unlabelled is not None and res.trust_auroc_unlabelled > 0.6
    assert study[0].n == 10 and study[0].draws == 40
    w = study[0].width  # trials saved: per policy 1 − (w_ppi / w_gt)², the study's figure their mean
    per = {p: 1 - (v["ppi"] / v["ground_truth_only"]) ** 2 for p, v in w.items() if v["ground_truth_only"] > 0}
    assert saved_per_policy(w) == pytest.approx(per) and study[0].saved == pytest.approx(np.mean(list(per.values())))
    md = (tmp_path / "est" / "estimate.md").read_text()
    assert "Trials saved per policy at n = 10" in md and f"good {100 * per['good']:.0f} %" in md
    wm = world_model_episodes(root / "wm")  # the verdict's ρ: the world model's alone, nothing fitted
    assert study[0].rho_verdict == pytest.approx(within_policy_rho(wm.keys, wm.verdicts.astype(float), truth))
    assert 0.5 < study[0].rho_verdict < 1 and 0.5 < study[0].rho_predictor < 1  # 75 % of the verdicts right
    for kinds in study[0].coverage.values():
        assert kinds["ppi"] >= 0.8 and kinds["ppi_finite"] >= 0.9
    body = json.loads((tmp_path / "est" / "estimate.json").read_text())
    assert body["format"] == "simforcing.policy-estimate" and body["study"][0]["n"] == 10
    for f in ("estimate.md", "episodes.csv", "estimates.png", "coverage.png"):
        assert (tmp_path / "est" / f).stat().st_size > 0
    rows = (tmp_path / "est" / "episodes.csv").read_text().splitlines()
    assert len(rows) == 1 + 4 * 60 and rows[0].startswith("policy,task,scene,world_model_success,p_success,trust")
    # the same from a trial file of 8 scenes per policy, through the command line
    lines = ["policy,task,scene,success"] + [f"{p},{t},{s},{int(truth[(p, t, s)])}" for p in RATES
                                               for t, s in itertools.product(TASKS[:2], range(4))]
    (tmp_path / "trials.csv").write_text("\n".join(lines) + "\n")
    assert main(["policy", "estimate", "--ground-truth", str(tmp_path / "trials.csv"), "--wm-eval", str(root / "wm"),
                 "--out", str(tmp_path / "est2")]) == 0
    body = json.loads((tmp_path / "est2" / "estimate.json").read_text())
    assert body["labelled"] == 32 and body["policies"]["good"]["average"]["truth"] is None
    # 8 trials per policy, fewer than --min-trials 10: each policy's interval is its trials' own, said in a note
    assert all(p["average"]["ppi"]["lam"] == 0.0 for p in body["policies"].values())
    assert body["inputs"]["min_trials"] == 10 and "fewer than --min-trials 10" in body["notes"][0]
    assert main(["policy", "estimate", "--ground-truth", str(tmp_path / "trials.csv"), "--wm-eval", str(root / "wm"),
                 "--out", str(tmp_path / "est8"), "--min-trials", "8"]) == 0
    body8 = json.loads((tmp_path / "est8" / "estimate.json").read_text())
    assert body8["notes"] == [] and max(p["average"]["ppi"]["lam"] for p in body8["policies"].values()) > 0
    with pytest.raises(ConfigError, match="--min-trials: got 1"):
        run_estimate(tmp_path / "trials.csv", root / "wm", min_trials=1)
    from simforcing import estimate_success  # the Python API: the same estimate

    res3, _ = estimate_success(tmp_path / "trials.csv", root / "wm")
    want = body["policies"]["good"]["average"]["ppi"]["estimate"]
    assert res3.policies["good"].average.ppi.estimate == pytest.approx(want)
    with pytest.raises(ConfigError, match="a coverage study needs every episode's truth"):
        run_estimate(tmp_path / "trials.csv", root / "wm", draws=5)
    with pytest.raises(ConfigError, match="a world-model evaluation"):
        run_estimate(root / "sim", root / "sim")


def test_the_population_design_checks_the_populations_rate(known_pool, tmp_path):
    """``--study-design population``: each draw a fresh pool of scenes drawn with replacement, every interval checked
    against the original pool's rate (the population's); the pool design's figures unchanged by the option."""
    root, truth = known_pool
    _, pool = run_estimate(root / "sim", root / "wm", None, n=10, draws=30, study_ns=(10,), predictor="verdict")
    _, again = run_estimate(root / "sim", root / "wm", None, n=10, draws=30, study_ns=(10,), predictor="verdict",
                            design="pool")
    assert pool[0].to_json() == again[0].to_json() and pool[0].design == "pool"
    _, popu = run_estimate(root / "sim", root / "wm", tmp_path / "pop", n=10, draws=30, study_ns=(10,),
                           predictor="verdict", design="population")
    assert popu[0].design == "population" and popu[0].width != pool[0].width
    assert 0 < popu[0].saved_ideal < 1 and 0 < pool[0].saved_ideal < 1
    body = json.loads((tmp_path / "pop" / "estimate.json").read_text())
    assert body["inputs"]["study_design"] == "population" and body["study"][0]["design"] == "population"
    assert "taken as the population's" in (tmp_path / "pop" / "estimate.md").read_text()
    # one draw by hand: the resampled pool, its labelled scenes, each interval checked against the original pool's
    # rate (the population's), not the resampled pool's
    from simforcing.policy.estimate.estimate import draw_labelled, estimate_policies
    _, one = run_estimate(root / "sim", root / "wm", None, n=10, draws=1, study_ns=(10,), predictor="verdict",
                          design="population")
    wm = world_model_episodes(root / "wm")
    rng = np.random.default_rng(10)  # study_point's seed: seed + n
    p2, t2 = resample_scenes(wm, truth, rng)
    res = estimate_policies(p2, t2, draw_labelled(p2, 10, rng), "verdict", truth_known=True, differences=False)
    moved = 0
    for name, est in res.policies.items():
        population = np.mean([v for k, v in truth.items() if k[0] == name])
        moved += est.average.truth != pytest.approx(population)
        for kind in ("ppi", "ground_truth_only"):
            assert one[0].coverage[name][kind] == float(getattr(est.average, kind).covers(population))
    assert moved  # the resampled pool's rates are not the population's
    with pytest.raises(ConfigError, match="--study-design: got 'bootstrap'"):
        run_estimate(root / "sim", root / "wm", draws=2, design="bootstrap")
    with pytest.raises(ConfigError, match="--study-design: the coverage study's design is used with --draws"):
        run_estimate(root / "sim", root / "wm", design="population")


def test_the_population_designs_trials_only_coverage_is_the_exact_binomial_one(known_pool):
    """An independent check of the population design: ten trials drawn from a population of rate p, the Wilson
    interval's coverage is Σ_k Binom(k; 10, p) [p ∈ Wilson(k)] — the study must find it within its draws' error; the
    pool design (the labelled a sixth of what is estimated) finds more."""
    root, truth = known_pool
    draws = 400
    _, popu = run_estimate(root / "sim", root / "wm", None, n=10, draws=draws, study_ns=(10,), predictor="verdict",
                           design="population")
    _, pool = run_estimate(root / "sim", root / "wm", None, n=10, draws=draws, study_ns=(10,), predictor="verdict")
    for name in ("fair", "poor"):
        p = np.mean([v for k, v in truth.items() if k[0] == name])
        exact = sum(stats.binom.pmf(k, 10, p) for k in range(11) if wilson(k, 10)[0] <= p <= wilson(k, 10)[1])
        got = popu[0].coverage[name]["ground_truth_only"]
        assert got == pytest.approx(exact, abs=3 * math.sqrt(exact * (1 - exact) / draws))
    assert np.mean([pool[0].coverage[p]["ground_truth_only"] for p in ("fair", "poor")]) > \
        np.mean([popu[0].coverage[p]["ground_truth_only"] for p in ("fair", "poor")])


def test_the_disagreement_prior_is_a_flag_recorded_with_the_estimate(known_pool, tmp_path):
    root, _ = known_pool
    assert main(["policy", "estimate", "--ground-truth", str(root / "sim"), "--wm-eval", str(root / "wm"),
                 "--out", str(tmp_path / "e0"), "--disagreement-prior", "0"]) == 0
    body0 = json.loads((tmp_path / "e0" / "estimate.json").read_text())
    res, _ = run_estimate(root / "sim", root / "wm", tmp_path / "e1")
    body1 = json.loads((tmp_path / "e1" / "estimate.json").read_text())
    assert body0["inputs"]["disagreement_prior"] == 0 and body1["inputs"]["disagreement_prior"] == DISAGREEMENT_PRIOR
    for p in ("good", "fair"):  # the same estimate; the interval at least as wide with the prior
        a, b = body0["policies"][p]["average"]["ppi"], body1["policies"][p]["average"]["ppi"]
        assert a["estimate"] == b["estimate"] and b["ci"][1] - b["ci"][0] >= a["ci"][1] - a["ci"][0] - 1e-12
    for bad in (-1, float("nan"), True, "0.1"):
        with pytest.raises(ConfigError, match="--disagreement-prior: got"):
            run_estimate(root / "sim", root / "wm", prior=bad)


def test_the_refit_variance_is_on_for_the_learned_predictor_and_recorded(known_pool, tmp_path):
    """The learned predictor's intervals count its refit variance by default — in the variance and in the power
    tuning, so λ is no larger and the interval no narrower; ``--no-refit-variance`` gives the plug-in interval; the
    record says which; a predictor fitted on nothing has none."""
    root, _ = known_pool
    assert main(["policy", "estimate", "--ground-truth", str(root / "sim"), "--wm-eval", str(root / "wm"),
                 "--out", str(tmp_path / "off"), "--no-refit-variance"]) == 0
    run_estimate(root / "sim", root / "wm", tmp_path / "on")
    off, on = (json.loads((tmp_path / k / "estimate.json").read_text()) for k in ("off", "on"))
    assert on["predictor"] == "learned"
    assert on["inputs"]["refit_variance"] is True and off["inputs"]["refit_variance"] is False
    moved = 0
    for p, est in on["policies"].items():
        a, b = off["policies"][p]["average"]["ppi"], est["average"]["ppi"]
        assert b["lam"] <= a["lam"] + 1e-12 and b["ci"][1] - b["ci"][0] >= a["ci"][1] - a["ci"][0] - 1e-9
        moved += b["lam"] < a["lam"] - 1e-9
    assert moved  # some policy's predictor gets less weight for its fit's own noise
    run_estimate(root / "sim", root / "wm", tmp_path / "verdict", predictor="verdict")
    assert json.loads((tmp_path / "verdict" / "estimate.json").read_text())["inputs"]["refit_variance"] is False


def test_malformed_world_model_episodes_are_named(known_pool, tmp_path):
    """A world-model evaluation whose per-frame readings or scene ids were damaged is refused naming the file and the
    field, before anything is estimated."""
    root, _ = known_pool
    body = json.loads((root / "wm" / "eval.json").read_text())
    for field, value, want in (("frame_margin", "high", "frame_margin"), ("frame_arm_mm", [1.0, float("nan")],
                                                                          "frame_arm_mm"), ("scene", "x", "x")):
        bad = json.loads(json.dumps(body))
        bad["episodes"]["good"]["push"][0][field] = value
        folder = tmp_path / field
        folder.mkdir()
        (folder / "eval.json").write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match=f"--wm-eval: .*eval.json is a policy evaluation with a malformed field"
                                              f".*{want}"):
            run_estimate(root / "sim", folder)


def test_a_rectified_mean_outside_zero_one_is_clipped_into_its_interval(tmp_path):
    """A policy that never succeeds, whose world-model episodes look worse on the unlabelled scenes than on the
    trials: the rectified mean is below 0; the estimate is 0 and lies inside its interval (so its plot draws)."""
    y = np.zeros(10)
    f_lab = np.r_[np.ones(3), np.zeros(7)]
    raw = ppi_terms(y, f_lab, np.zeros(50), lam=1.0).estimate
    assert raw < 0
    for method in ("clt", "finite"):
        e = ppi_mean(y, f_lab, np.zeros(50), method=method, lam=1.0)
        assert e.estimate == 0.0 and e.lo <= e.estimate <= e.hi and 0 <= e.lo and e.hi <= 1


def test_every_rate_lies_inside_its_interval_at_the_ends():
    """All trials succeeded (or none): the Wilson bound's rounding never leaves the rate outside its interval."""
    for k, n in ((10, 10), (0, 10), (7, 7), (1, 3)):
        e = classical(np.r_[np.ones(k), np.zeros(n - k)])
        assert e.lo <= e.estimate <= e.hi


def test_the_demo_report_section_reads_every_world_models_estimate(known_pool, tmp_path):
    """The demo's section (``demo.estimate_section``): one row per world model of the pool — its ranking and the
    experts' success from the pool's agreement, its coverage study at n from its estimate — beside the aims, and the
    evaluator's estimate in full; results.json's ``estimate`` is the rows' JSON."""
    from types import SimpleNamespace

    from simforcing.demo.estimate_section import AIMS, collect_estimate, estimate_lines
    from simforcing.demo.plan import demo_budget
    from simforcing.policy.agreement.statistics import agreement
    from simforcing.policy.closed_loop.results import PolicyEvaluation

    import dataclasses

    from simforcing.policy.closed_loop.results import JudgeRecord
    from simforcing.utils import atomic_write_json

    root, truth = known_pool
    folder = tmp_path / "wm_eval" / "estimate_evaluator-fewstep-twin"
    run_estimate(root / "sim", root / "wm", folder, n=10, draws=5, study_ns=(10,))
    judge = JudgeRecord({}, 2, "j")
    sim, wm = (dataclasses.replace(PolicyEvaluation.read(root / f, f), judge=judge) for f in ("sim", "wm"))
    ag = agreement(sim, {"evaluator-fewstep-twin": wm}, n_boot=20)
    atomic_write_json(tmp_path / "wm_eval" / "pool_agreement" / "agreement.json", ag.to_json())
    plan = SimpleNamespace(wm_eval={"pool_evals": {"copy-first": None, "evaluator-fewstep-twin": root / "wm",
                                                   "missing": tmp_path / "none"},
                                    "estimate": {"evaluator-fewstep-twin": folder},
                                    "pool_agreement": tmp_path / "wm_eval" / "pool_agreement"},
                           out=tmp_path, budget=demo_budget(False), full=False)
    section = collect_estimate(plan)
    assert set(section.rows) == {"evaluator-fewstep-twin"} and section.evaluator == "evaluator-fewstep-twin"
    row = section.rows["evaluator-fewstep-twin"]
    study = json.loads((folder / "estimate.json").read_text())["study"][0]
    assert row.saved == study["saved"] and row.rho_predictor == study["rho_predictor"]
    assert row.coverage == min(c["ppi"] for c in study["coverage"].values())
    assert row.pearson == ag.ranking["evaluator-fewstep-twin"]["all"].pearson
    assert row.clean_expert is None  # the pool's players hold no scripted expert
    body = json.loads(json.dumps(section.to_json()))
    assert set(body["aims"]) == {a.key for a in AIMS} and body["rows"]["evaluator-fewstep-twin"]["aims"]["saved"] in \
        (True, False)
    text = "\n".join(estimate_lines(section, plan))
    assert "## Which world model to judge policies in" in text and "**evaluator-fewstep-twin** (the demo's" in text
    assert "| *aim* | ≥ 0.9 | ≤ 0.1 |" in text and "](wm_eval/estimate_evaluator-fewstep-twin/coverage.png)" in text
    assert collect_estimate(SimpleNamespace(wm_eval=None)) is None and estimate_lines(None, plan) == []


def test_the_twins_own_verdict_as_the_predictor(known_pool, tmp_path):
    """--predictor twin: a full-scene twin's own verdict (``twin_verdicts``) is the prediction, the world model's frames
    ignored; an evaluation without the twin's verdicts is refused by name, and the learned predictor reads it as a
    feature."""
    root, truth = known_pool
    rng = np.random.default_rng(11)
    twin = {k: v if rng.random() < 0.9 else not v for k, v in truth.items()}  # a simulator right 90 % of the time

    def wm(p, t, s):
        v = bool(rng.random() < 0.5)  # a world model that knows nothing
        return EpisodeOutcome(s, v, 10, frame_judged=[v] * 6, frame_margin=[0.01 if v else -0.01] * 6,
                              frame_arm_mm=[20.0] * 6, twin_verdicts=[False] * 5 + [twin[(p, t, s)]])

    evaluation(WORLD_MODEL, 20, wm).write(tmp_path / "wm_twin")
    res, study = run_estimate(root / "sim", tmp_path / "wm_twin", n=10, draws=20, study_ns=(10,), predictor="twin")
    assert [r["p_success"] for r in res.episodes] == [float(twin[(r["policy"], r["task"], r["scene"])])
                                                      for r in res.episodes]
    _, learned = run_estimate(root / "sim", tmp_path / "wm_twin", n=10, draws=20, study_ns=(10,))
    assert learned[0].rho_predictor > 0.5 > abs(learned[0].rho_verdict)  # the twin's verdict carries it
    with pytest.raises(ConfigError, match="--predictor twin: .* no full-scene twin"):
        run_estimate(root / "sim", root / "wm", n=10, predictor="twin")


def test_the_hand_from_the_executed_actions_as_the_predictor(known_pool, tmp_path):
    """--predictor hand: a reach episode's verdict is the simulator's reach predicate (``tasks.task_success``) on the
    hand the executed actions command (frame_gap_mm: its distance from the object's start per action), any action
    counting as the simulator counts it; push and grasp keep the world model's verdict. --predictor actions: the same
    with the objects left in place (push and grasp fail): no frame of the world model read. An evaluation without
    frame_gap_mm is refused by name."""
    from simforcing.data.synthetic.tasks import Task, task_success

    root, truth = known_pool
    rng = np.random.default_rng(12)
    obj0 = np.array([0.5, 0.1, 0.02])
    reach = Task("reach", "reach the red cube", 0, "red cube")
    want = {}

    def wm(p, t, s):
        ee = obj0 + rng.normal(0, 0.09, (6, 3))  # the commanded hand after each executed action
        want[(p, t, s)] = any(task_success(reach, e, obj0, obj0) for e in ee)
        v = bool(rng.random() < 0.5)  # the world model's own verdict, right or wrong
        gap = np.round(1000 * np.linalg.norm(ee - obj0, axis=1), 1).tolist()
        return EpisodeOutcome(s, v, 10, frame_judged=[v] * 6, frame_margin=[0.01 if v else -0.01] * 6,
                              frame_arm_mm=[20.0] * 6, frame_gap_mm=gap)

    evaluation(WORLD_MODEL, 20, wm).write(tmp_path / "wm_hand")
    own = {(p, t, o.scene): o.success for p, per in world_model_episodes(tmp_path / "wm_hand").evaluation
           .episodes.items() for t, outs in per.items() for o in outs}
    for predictor in ("hand", "actions"):
        res, _ = run_estimate(root / "sim", tmp_path / "wm_hand", n=10, predictor=predictor)
        for r in res.episodes:
            k = (r["policy"], r["task"], r["scene"])
            other = float(own[k]) if predictor == "hand" else 0.0
            assert r["p_success"] == (float(want[k]) if r["task"] == "reach" else other), (predictor, k)
    assert 0 < np.mean([want[k] for k in want if k[1] == "reach"]) < 1  # both outcomes occur
    with pytest.raises(ConfigError, match="--predictor hand: .* no commanded hand per frame"):
        run_estimate(root / "sim", root / "wm", n=10, predictor="hand")
    assert main(["policy", "estimate", "--ground-truth", str(root / "sim"), "--wm-eval", str(tmp_path / "wm_hand"),
                 "--predictor", "actions", "--out", str(tmp_path / "est")]) == 0
    assert json.loads((tmp_path / "est" / "estimate.json").read_text())["predictor"] == "actions"
