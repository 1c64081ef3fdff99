"""Prediction-powered estimates of a success rate: a few ground-truth outcomes correct many world-model predictions.

For one policy, ``y`` (n,) are ground-truth outcomes in {0, 1} (real-robot trials; in the synthetic benchmark the
simulator's verdicts), ``f_lab`` (n,) the predictor's values on the same episodes inside the world model and
``f_unl`` (N,) its values on N further world-model episodes (other scenes, no ground truth). Predictions lie in [0, 1]
(a verdict, or a probability of success learned from the episode's features: ``policy.estimate.trust``).

- **Ground truth only** (:func:`classical`): the mean of ``y`` with a Wilson interval (``clt``) or the exact
  Clopper–Pearson interval (``finite``).
- **PPI++** (:func:`ppi_mean`; Angelopoulos et al. 2023, *Prediction-powered inference*; Angelopoulos, Duchi & Zrnic
  2024, *PPI++*): θ̂_λ = mean(y − λ f_lab) + λ mean(f_unl). For every fixed λ it is unbiased — the labelled term
  removes the predictor's bias — and its variance is Var(y − λf)/n + λ² Var(f)/N. Power tuning takes the λ that
  minimises it, λ* = Cov(y, f) / ((1 + n/N) Var(f)), clipped to [0, 1]: λ = 0 is the ground-truth-only mean, so a
  useless predictor costs (asymptotically) nothing and a good one narrows the interval.
  ``clt``: the score interval of θ (:func:`score_interval`: Wilson's device, Wilson's interval itself at λ = 0).
  Power tuning needs enough trials: λ and the correlation it rests on are estimated from the labelled episodes, and
  from a handful the interval runs short (on the demo's 60-scene pools the worst policy's coverage was 83–90 % at 5–6
  trials per policy, 91–94 % at 8, 93–94 % at 10), so below ``min_n`` (:data:`MIN_TUNED_TRIALS`, 10; ``policy
  estimate --min-trials``) λ is 0: the ground truth's own interval. From ten trials on a second small-sample effect
  remains: a predictor wrong on a few scenes in fifty is often right on all ten labelled ones, its correlation with
  the outcomes then reads 1 and the interval shrinks to the unlabelled term's — against the policy's own rate (not
  only the pool's) the worst policy's interval held 89.8–92.2 % at n = 10 (the notebook's real_trials.md, *Which
  truth the coverage study checks*; over 3,000 draws the mean policy's 93.7–93.9 % against the trials' own 95.1 %).
  So the interval's correlation counts a little of a disagreement that was not seen (``prior``,
  :data:`DISAGREEMENT_PRIOR`: a tenth of an episode each way, y = 1 where f is least and y = 0 where it is most;
  ``policy estimate --disagreement-prior``; 0 is the sample's own). A tenth is the least of 0, 0.1 and 0.25 at which,
  on the demo's evaluator (``hand``) and the full-scene simulator (``twin``) at n = 10, every policy's interval
  covered the policy's rate at least as often as the trials' own worst (93.1–93.8 % against 92.9 %; the mean
  95.7–96.6 %), for about a sixth of the trials saved (27 → 22 %, 39 → 33 %). ``finite``: λ fixed (1, classical PPI,
  unless given) and two empirical-Bernstein bounds (Maurer & Pontil 2009), one per term at α/2 each, valid at every n
  for bounded outcomes — the predictor must then not be fitted on the labelled episodes (use the raw verdict).

A cross-fitted predictor (``policy.estimate.trust.crossfit``, the ``learned`` one) is fitted on the trials that then
correct it, so its predictions on the unlabelled episodes move with which scenes were labelled — a variance the
plug-in treats as nought. ``f_folds`` (each fold model's predictions there) gives it: the grouped jackknife of the
fold models' means (:attr:`Terms.refit_variance`), added to the interval's variance and counted by the power tuning
(:func:`tuned_lambda`: a predictor whose fit moves much gets less weight). On the demo's pools it reproduced the
estimates' measured spread, and the worst policy's coverage of its own rate went from 91.5–92.1 % to the trials' own
(the notebook's real_trials.md, *A learned predictor's own noise*).

Differences between two policies (:func:`difference`) keep the covariance of episodes the two share (the same scenes
labelled for both: a paired design); a ranking (:func:`rank_intervals`) reads its rank intervals off simultaneous
(Bonferroni) intervals of every difference. Each policy's labelled term has a least variance from the same
disagreement prior (:func:`prior_variance`): two policies that differ on a few scenes on which the predictor says the
same for both (the demo's SFT-WM@500 and SimForcing-WM@500 with ``hand``, 3 scenes of 60) are often labelled on none
of them, and the plug-in interval of their difference collapsed — it held the true difference in 44–64 % of the draws
(the notebook's real_trials.md), 94–96 % with the floor.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
from scipy import stats

METHODS = ("clt", "finite")
MIN_TUNED_TRIALS = 10  # labelled episodes below which a tuned λ is 0 (module docstring)
DISAGREEMENT_PRIOR = 0.1  # pseudo-episodes each way in the score interval's correlation (module docstring)


@functools.lru_cache(maxsize=4096)
def quantile(dist: str, q: float, *shape: float) -> float:
    """``scipy.stats.<dist>.ppf(q, *shape)``, remembered: the estimate asks for the same few quantiles (z at α, the
    Clopper–Pearson betas of k of n trials) thousands of times in a coverage study, and each scipy call costs ~0.1 ms
    of argument checking."""
    return float(getattr(stats, dist).ppf(q, *shape))


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its (1 − α) interval; ``lam`` the power-tuning weight where the estimate is
    prediction-powered (None: ground truth only), ``n`` / ``N`` the labelled and unlabelled episodes."""

    estimate: float
    lo: float
    hi: float
    n: int
    N: int = 0
    lam: Optional[float] = None

    @property
    def width(self) -> float:
        return self.hi - self.lo

    def covers(self, value: float) -> bool:
        return self.lo <= value <= self.hi

    def to_json(self) -> dict:
        return {"estimate": self.estimate, "ci": [self.lo, self.hi], "n": self.n, "N": self.N, "lam": self.lam}

    @classmethod
    def from_json(cls, d: dict) -> "Estimate":
        lo, hi = d["ci"]
        return cls(float(d["estimate"]), float(lo), float(hi), int(d["n"]), int(d.get("N", 0)), d.get("lam"))


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"interval method: got {method!r}; expected one of {', '.join(METHODS)}")


def _as_unit(x, what: str) -> np.ndarray:
    a = np.asarray(x, np.float64).reshape(-1)
    if a.size and (not np.isfinite(a).all() or a.min() < 0 or a.max() > 1):
        raise ValueError(f"{what}: values must lie in [0, 1] (outcomes or predicted probabilities)")
    return a


def wilson(k: float, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval of a rate k/n at level 1 − α ((0, 1) for n = 0)."""
    if n == 0:
        return 0.0, 1.0
    z = quantile("norm", 1 - alpha / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, min(centre - half, p)), min(1.0, max(centre + half, p))  # p inside, whatever the rounding


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The exact (Clopper–Pearson) interval of a binomial rate k/n."""
    if n == 0:
        return 0.0, 1.0
    lo = 0.0 if k == 0 else quantile("beta", alpha / 2, k, n - k + 1)
    hi = 1.0 if k == n else quantile("beta", 1 - alpha / 2, k + 1, n - k)
    return lo, hi


def classical(y, alpha: float = 0.05, method: str = "clt") -> Estimate:
    """Ground truth only: the mean of binary outcomes ``y`` with its Wilson (``clt``) or Clopper–Pearson
    (``finite``) interval."""
    _check_method(method)
    y = _as_unit(y, "ground-truth outcomes")
    n, k = len(y), float(y.sum())
    lo, hi = wilson(k, n, alpha) if method == "clt" else clopper_pearson(int(round(k)), n, alpha)
    return Estimate(k / n if n else float("nan"), lo, hi, n)


def tuned_lambda(y: np.ndarray, f_lab: np.ndarray, f_unl: np.ndarray, refit: float = 0.0) -> float:
    """PPI++'s power-tuning weight for the mean: the λ that minimises the plug-in variance Var(y − λf)/n +
    λ² Var(f)/N + λ² J, i.e. Cov(y, f) / ((1 + n/N) Var(f) + n J), Var(f) over every prediction, clipped to [0, 1]
    (0 where the predictions do not vary); ``refit`` J: a cross-fitted predictor's refit variance at λ = 1
    (:func:`refit_covariance` of its fold models' means) — a predictor whose fit moves much with the trials gets less
    weight, so its interval is not wider than the trials' own for that."""
    n, N = len(y), len(f_unl)
    f_all = np.concatenate([f_lab, f_unl])
    var_f = f_all.var(ddof=1) if len(f_all) > 1 else 0.0
    if n < 2 or N == 0 or var_f <= 1e-12:
        return 0.0
    cov = np.cov(y, f_lab, ddof=1)[0, 1]
    return float(np.clip(cov / ((1 + n / N) * var_f + n * refit), 0.0, 1.0))


@dataclass(frozen=True)
class Terms:
    """θ̂ = mean(a) + mean(b): the labelled term's values ``a`` = y − λ f_lab and the unlabelled term's ``b`` =
    λ f_unl, per episode (what differences between policies need: :func:`difference`). ``floor``: the least variance
    of the labelled term's mean — :func:`agresti_caffo_variance` of the outcomes where ``a`` does not vary, and with
    λ > 0 the variance of ``a`` with the disagreement prior's pseudo-episodes among the trials
    (:func:`prior_variance`: ten trials that saw none of a predictor's errors do not make the term known exactly)."""

    a: np.ndarray
    b: np.ndarray
    lam: float
    floor: float = 0.0
    refit: np.ndarray = field(default_factory=lambda: np.zeros(0))  # λ · each fold model's mean of f_unl (K,)

    @property
    def estimate(self) -> float:
        return float(self.a.mean() + (self.b.mean() if len(self.b) else 0.0))

    @property
    def refit_variance(self) -> float:
        """How much mean(b) moves with the labelled episodes a cross-fitted predictor was fitted on: the grouped
        jackknife over its K fold models (each fitted without one fold), (K − 1)/K Σ_k (r_k − r̄)², r_k = λ · the
        k-th model's mean prediction on the unlabelled episodes (:func:`refit_covariance`); 0 for a predictor fitted
        on nothing."""
        return refit_covariance(self.refit, self.refit)

    @property
    def variance(self) -> float:
        """The plug-in Var(mean(a)) + Var(mean(b)) + the refit variance; where ``a`` does not vary (every trial
        succeeded, or none, or a single trial) its plug-in variance 0 would claim the policy's rate known exactly —
        ``floor`` stands in."""
        var_a = self.a.var(ddof=1) / len(self.a) if len(self.a) > 1 else 0.0
        var_b = self.b.var(ddof=1) / len(self.b) if len(self.b) > 1 else 0.0
        return float(max(var_a, self.floor) + var_b + self.refit_variance)


def refit_covariance(r: np.ndarray, s: np.ndarray) -> float:
    """The grouped jackknife's covariance of two statistics computed from the same K fold models (r_k, s_k: each
    model's value, the k-th fitted without the k-th fold of the labelled episodes): (K − 1)/K Σ_k (r_k − r̄)(s_k −
    s̄) — what refitting on another sample of labelled episodes would move them by, together. 0 unless both come from
    the same K ≥ 2 models."""
    if len(r) < 2 or len(r) != len(s):
        return 0.0
    k = len(r)
    return float((k - 1) / k * np.sum((r - r.mean()) * (s - s.mean())))


def agresti_caffo_variance(y: np.ndarray) -> float:
    """The variance of a binary mean with one success and one failure added (Agresti & Caffo 2000, the adjustment
    of their interval for a difference of two rates): p̃(1 − p̃)/(n + 2), p̃ = (k + 1)/(n + 2) — never 0, also when
    every outcome is the same."""
    n = len(y)
    p = (float(np.sum(y)) + 1.0) / (n + 2.0)
    return p * (1.0 - p) / (n + 2.0)


def prior_variance(y: np.ndarray, f_lab: np.ndarray, lam: float, prior: float) -> float:
    """Var(mean(y − λ f)) over the labelled episodes (weight 1) and the disagreement prior's two pseudo-episodes
    (weight ``prior``: a failure where the prediction is highest, a success where it is lowest; as in
    :func:`labelled_moments`): the weighted variance of the residual over n − 1. 0 where there is no prior, no λ or a
    single trial."""
    n = len(y)
    if prior <= 0 or lam <= 0 or n < 2:
        return 0.0
    a = np.concatenate([y, [1.0, 0.0]]) - lam * np.concatenate([f_lab, [f_lab.min(), f_lab.max()]])
    w = np.concatenate([np.ones(n), [prior, prior]])
    mean = (w * a).sum() / w.sum()
    return float((w * (a - mean) ** 2).sum() / w.sum() / (n - 1))


def ppi_terms(y, f_lab, f_unl, lam: Optional[float] = None, min_n: int = MIN_TUNED_TRIALS,
              prior: float = DISAGREEMENT_PRIOR, f_folds: Optional[np.ndarray] = None) -> Terms:
    """The terms of θ̂_λ; ``lam`` None: power-tuned (:func:`tuned_lambda`) from ``min_n`` labelled episodes on, 0 (the
    ground truth alone) below; ``prior``: the disagreement prior of the labelled term's least variance (``Terms``);
    ``f_folds`` (K, N): a cross-fitted predictor's K fold models on the unlabelled episodes (``f_unl`` their mean),
    whose spread is the refit variance (``Terms.refit_variance``)."""
    y, f_lab, f_unl = (_as_unit(y, "ground-truth outcomes"), _as_unit(f_lab, "predictions on labelled episodes"),
                       _as_unit(f_unl, "predictions on unlabelled episodes"))
    if len(y) != len(f_lab):
        raise ValueError(f"{len(y)} ground-truth outcomes but {len(f_lab)} predictions on them")
    if len(y) == 0:
        raise ValueError("no ground-truth outcomes: a prediction-powered estimate needs at least one")
    means = np.zeros(0)  # each fold model's mean prediction on the unlabelled episodes
    if f_folds is not None and len(f_unl):
        folds = np.asarray(f_folds, np.float64)
        if folds.ndim != 2 or folds.shape[1] != len(f_unl):
            raise ValueError(f"fold predictions of shape {folds.shape}; expected (K, {len(f_unl)}): each fold model's "
                             "prediction on every unlabelled episode")
        means = folds.mean(axis=1)
    if lam is None:
        lam = tuned_lambda(y, f_lab, f_unl, refit_covariance(means, means)) if len(y) >= min_n else 0.0
    lam = float(lam)
    if not len(f_unl):
        lam = 0.0
    a = y - lam * f_lab
    floor = max(agresti_caffo_variance(y) if np.ptp(a) == 0 else 0.0, prior_variance(y, f_lab, lam, prior))
    return Terms(a, lam * f_unl, lam, floor, lam * means if lam > 0 else np.zeros(0))


def empirical_bernstein(x: np.ndarray, delta: float, value_range: float) -> float:
    """Half-width of the two-sided empirical-Bernstein bound (Maurer & Pontil 2009, Thm 4, each side at δ/2) on the
    mean of i.i.d. ``x`` whose values span at most ``value_range``: √(2 V ln(4/δ) / n) + 7 R ln(4/δ) / (3 (n − 1)),
    V the unbiased sample variance (infinite for n < 2)."""
    n = len(x)
    if n < 2:
        return math.inf
    log = math.log(4 / delta)
    return math.sqrt(2 * x.var(ddof=1) * log / n) + 7 * value_range * log / (3 * (n - 1))


def labelled_moments(y: np.ndarray, f_lab: np.ndarray, prior: float = 0.0) -> tuple[float, float]:
    """(ρ, σ_f): the labelled episodes' correlation of outcomes and predictions and the predictions' deviation (ddof
    0), each episode of weight 1 and two pseudo-episodes of weight ``prior`` — one failure where the prediction is
    highest and one success where it is lowest, a disagreement each way (module docstring); ρ is 0 where y or f does
    not vary."""
    if prior > 0 and len(y) > 1:
        y = np.concatenate([y, [1.0, 0.0]])
        w = np.concatenate([np.ones(len(f_lab)), [prior, prior]])
        f_lab = np.concatenate([f_lab, [f_lab.min(), f_lab.max()]])
    else:
        w = np.ones(len(y))
    w = w / w.sum()
    dy, df = y - (w * y).sum(), f_lab - (w * f_lab).sum()
    var_y, var_f = (w * dy * dy).sum(), (w * df * df).sum()
    sd_f = float(math.sqrt(var_f))
    if var_y <= 1e-15 or var_f <= 1e-15:
        return 0.0, sd_f
    return float(np.clip((w * dy * df).sum() / math.sqrt(var_y * var_f), -1.0, 1.0)), sd_f


def score_interval(y: np.ndarray, f_lab: np.ndarray, t: Terms, q: float, grid: int = 20001,
                   prior: float = 0.0) -> tuple[float, float]:
    """The CLT interval of θ as the set of θ ∈ [0, 1] a score test keeps: (θ̂ − θ)² ≤ q² V(θ), with the binary
    outcome's standard deviation taken at θ, σ_y(θ) = √(θ(1 − θ)), in V(θ) = (σ_y² − 2λρ σ_y σ_f + λ² σ_f²) / n +
    λ² Var(f_unl) / N (ρ the labelled episodes' correlation of y and f, σ_f the predictions' deviation there, with
    ``prior`` pseudo-episodes of disagreement: :func:`labelled_moments`) — the Wilson interval's device (exactly
    Wilson's at λ = 0), which keeps coverage near 0 and 1 where the plug-in variance of a small labelled sample is
    often 0."""
    n, N, lam = len(y), len(t.b), t.lam
    rho, sd_f = labelled_moments(y, f_lab, prior if lam > 0 else 0.0) if n > 1 else (0.0, 0.0)
    theta = np.linspace(0.0, 1.0, grid)
    sd_y = np.sqrt(theta * (1 - theta))
    var = ((sd_y * sd_y - 2 * lam * rho * sd_y * sd_f + lam * lam * sd_f * sd_f) / n
           + (t.b.var(ddof=1) / N if N > 1 else 0.0) + t.refit_variance)
    keep = (t.estimate - theta) ** 2 <= q * q * np.maximum(var, 0.0)
    if not keep.any():  # no θ passes (a degenerate sample): the point estimate alone
        est = float(np.clip(t.estimate, 0, 1))
        return est, est
    return float(theta[keep].min()), float(theta[keep].max())


def ppi_mean(y, f_lab, f_unl, alpha: float = 0.05, method: str = "clt", lam: Optional[float] = None,
             min_n: int = MIN_TUNED_TRIALS, prior: float = DISAGREEMENT_PRIOR,
             f_folds: Optional[np.ndarray] = None) -> Estimate:
    """The prediction-powered estimate of E[y] (module docstring): PPI++ with power tuning (``lam`` None; from
    ``min_n`` labelled episodes on) and a CLT (score) interval whose correlation counts ``prior`` pseudo-episodes of
    disagreement each way and whose variance counts a cross-fitted predictor's refit variance (``f_folds``:
    :func:`ppi_terms`), or with ``method="finite"`` a fixed λ (default 1) and empirical-Bernstein bounds (for a
    predictor fitted on nothing)."""
    _check_method(method)
    if method == "finite" and lam is None:
        lam = 1.0
    t = ppi_terms(y, f_lab, f_unl, lam, min_n, f_folds=f_folds)
    n, N = len(t.a), len(t.b)
    est = t.estimate
    if method == "clt":
        lo, hi = score_interval(np.asarray(y, float), np.asarray(f_lab, float), t, quantile("norm", 1 - alpha / 2),
                                prior=prior)
    else:
        half = (empirical_bernstein(t.a, alpha / 2, 1 + t.lam)
                + (empirical_bernstein(t.b, alpha / 2, t.lam) if N else 0.0))
        lo, hi = est - half, est + half
    return _bounded(est, lo, hi, 0.0, 1.0, n, N, t.lam)


def _bounded(est: float, lo: float, hi: float, low: float, high: float, n: int, N: int,
             lam: Optional[float]) -> Estimate:
    """An estimate and interval within what the quantity can be ([0, 1] for a rate, [−1, 1] for a difference): the
    rectified mean can step outside (e.g. −0.02 for a policy that never succeeds); the point is clipped into its
    range and the interval kept around it."""
    est = float(np.clip(est, low, high))
    return Estimate(est, max(low, min(lo, est)), min(high, max(hi, est)), n, N, lam)


def sampling_probabilities(doubt: np.ndarray, budget: float, mix: float = 0.5, floor: float = 0.05) -> np.ndarray:
    """Where to spend ``budget`` ground-truth trials among N episodes (expected count = budget): π_i ∝ (1 − mix) +
    mix · doubt_i / mean(doubt) — uniform at ``mix`` 0, more trials where the doubt is high — each at least ``floor``
    · budget / N (no episode is left out: the weights 1/π_i stay bounded) and at most 1."""
    d = np.clip(np.asarray(doubt, np.float64), 0, None)
    n_all = len(d)
    w = (1 - mix) + mix * (d / d.mean() if d.mean() > 0 else np.ones(n_all))
    pi = budget * w / w.sum()
    pi = np.maximum(pi, floor * budget / n_all)
    for _ in range(20):  # rescale to the budget under the cap at 1
        pi = np.minimum(pi * budget / pi.sum(), 1.0)
        if abs(pi.sum() - budget) < 1e-9:
            break
    return pi


def active_mean(f: np.ndarray, y: np.ndarray, labelled: np.ndarray, pi: np.ndarray, alpha: float = 0.05) -> Estimate:
    """Active inference (Zrnic & Candès 2024, *Active statistical inference*): every episode's prediction ``f``
    (N,), its ground truth ``y`` where ``labelled`` (drawn independently with probability ``pi``; y elsewhere is
    ignored) -> θ̂ = mean(f_i + ξ_i/π_i (y_i − f_i)), unbiased for any π > 0, with the CLT interval of that mean.
    The predictor must not be fitted on the labelled episodes (the raw verdict, or a model from other data). Where
    the terms do not vary (every verdict and every trial alike) their plug-in variance 0 would claim the rate known
    exactly: the labelled outcomes' :func:`agresti_caffo_variance` stands in (as for :class:`Terms`)."""
    f, pi = np.asarray(f, np.float64), np.asarray(pi, np.float64)
    xi = np.asarray(labelled, bool)
    yv = np.where(xi, np.asarray(y, np.float64), 0.0)
    z = f + np.where(xi, (yv - f) / pi, 0.0)
    est = float(z.mean())
    var = float(z.var(ddof=1)) / len(z) if len(z) > 1 else 0.0
    if len(z) < 2 or np.ptp(z) == 0:
        var = max(var, agresti_caffo_variance(yv[xi]))
    half = quantile("norm", 1 - alpha / 2) * math.sqrt(var)
    return _bounded(est, est - half, est + half, 0.0, 1.0, int(xi.sum()), len(z) - int(xi.sum()), 1.0)


def _shared_cov(x: np.ndarray, x_ids: Sequence, z: np.ndarray, z_ids: Sequence) -> float:
    """Cov(mean(x), mean(z)) for two samples whose entries with equal ids are the same draw (a scene both saw):
    (m / (n_x n_z)) · Cov over the m shared ids."""
    pos = {k: i for i, k in enumerate(z_ids)}
    shared = [(i, pos[k]) for i, k in enumerate(x_ids) if k in pos]
    m = len(shared)
    if m < 2:
        return 0.0
    xi = x[[i for i, _ in shared]]
    zi = z[[j for _, j in shared]]
    return float(np.cov(xi, zi, ddof=1)[0, 1] * m / (len(x) * len(z)))


@dataclass(frozen=True)
class PolicyTerms:
    """One policy's :class:`Terms` with the ids of the episodes behind each value (scene ids: equal ids across two
    policies mean the same scene, a paired draw)."""

    terms: Terms
    lab_ids: tuple
    unl_ids: tuple


def difference(p: PolicyTerms, q: PolicyTerms, alpha: float = 0.05) -> Estimate:
    """θ_p − θ_q with a CLT interval: Var(θ̂_p) + Var(θ̂_q) − 2 Cov, the covariance from the scenes both share
    (labelled with labelled, unlabelled with unlabelled); a policy whose labelled term does not vary (all its trials
    alike) contributes its ``Terms.floor``, so two policies that succeeded in every trial differ by 0 with an interval
    around it, and 2/2 against 0/2 is no sure difference."""
    cov = (_shared_cov(p.terms.a, p.lab_ids, q.terms.a, q.lab_ids)
           + _shared_cov(p.terms.b, p.unl_ids, q.terms.b, q.unl_ids)
           + refit_covariance(p.terms.refit, q.terms.refit))  # one predictor refitted moves both
    var = max(p.terms.variance + q.terms.variance - 2 * cov, 0.0)
    n = min(len(p.terms.a), len(q.terms.a))
    est = p.terms.estimate - q.terms.estimate
    half = quantile("t", 1 - alpha / 2, max(n - 1, 1)) * math.sqrt(var)
    return _bounded(est, est - half, est + half, -1.0, 1.0, n, min(len(p.terms.b), len(q.terms.b)), None)


def rank_intervals(terms: dict[str, PolicyTerms], alpha: float = 0.05) -> dict[str, tuple[int, int]]:
    """Each policy's rank (1 = the highest success) with a simultaneous (1 − α) interval: from Bonferroni intervals of
    all K(K − 1)/2 differences, a policy ranks below every policy surely better than it and above every policy surely
    worse."""
    names = list(terms)
    k = len(names)
    pairs = max(k * (k - 1) // 2, 1)
    better = {n: 0 for n in names}
    worse = {n: 0 for n in names}
    for i in range(k):
        for j in range(i + 1, k):
            d = difference(terms[names[i]], terms[names[j]], alpha / pairs)
            if d.lo > 0:
                worse[names[i]] += 1
                better[names[j]] += 1
            elif d.hi < 0:
                better[names[i]] += 1
                worse[names[j]] += 1
    return {n: (1 + better[n], k - worse[n]) for n in names}
