"""Policies' success estimated from a few ground-truth trials and many world-model episodes (prediction-powered).

    simforcing policy estimate --ground-truth TRIALS.csv|SIM_EVAL --wm-eval WM_EVAL --out OUT [--n 10 --draws 200]

One estimate (:func:`estimate_policies`): the labelled episodes are those with ground truth (a trial file's trials;
from a simulator evaluation, ``n`` scenes drawn at random, the same scenes for every policy — a paired design), the
unlabelled ones every other world-model episode of the same policy. The predictor (``predictor``):

- ``verdict``: the world model's own verdict (the judge's success), no fitting;
- ``learned`` (default): P(success | the episode's features), a logistic regression pooled over policies and
  cross-fitted by scene (``policy.estimate.trust``) — its prediction on a labelled episode never saw that scene;
- ``twin``: a full-scene twin's own verdict, the world model's frames ignored (the simulator as the predictor);
- ``hand``: the verdict of a task whose predicate is on the hand (reach) from where the executed actions put the hand
  (``trust.hand_success``), the world model's verdict for the others (what only its frames say: where the objects
  go); ``actions``: the same with the objects left where they started — no world model at all, the control that says
  what a world model's frames add. Neither is fitted (``WorldModelEpisodes.kinematic``).

Per policy and per task: the world model's raw rate (what ``policy eval --env world-model`` prints), the
ground-truth-only estimate (Wilson / Clopper–Pearson) and the prediction-powered one (PPI++ CLT / finite-sample);
the differences between every two policies and each policy's rank interval; every episode's trust score and its
AUROC for the world model's verdict being wrong (out-of-fold on the labelled episodes; with a simulator ground truth
also on every unlabelled one). With a simulator evaluation as ground truth the truth of every episode is known:
:func:`coverage_study` repeats the estimate over many draws and measures what the intervals promise.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Sequence

import numpy as np

from simforcing.errors import ConfigError
from simforcing.policy.agreement.statistics import pearson
from simforcing.policy.estimate.ppi import (DISAGREEMENT_PRIOR, MIN_TUNED_TRIALS, Estimate, PolicyTerms, active_mean,
                                            classical, difference, ppi_mean, ppi_terms, rank_intervals,
                                            sampling_probabilities)
from simforcing.policy.estimate.trials import Key, WorldModelEpisodes
from simforcing.policy.estimate.trust import FEATURES, auroc, crossfit, trust_scores, unsupervised_doubt

PREDICTORS = ("learned", "verdict", "twin", "hand", "actions")
KINEMATIC = {"hand": "world model", "actions": "stay"}  # predictor -> what says where the objects go
# the coverage study's truth (``study_point``): the pool's own rate, or the rate of the population it stands for
DESIGNS = ("pool", "population")


@dataclass(frozen=True)
class RateEstimates:
    """One policy's (or one policy-task's) estimates: the world model's raw rate over its episodes, ground truth only
    (CLT: Wilson; finite: Clopper–Pearson), prediction-powered (PPI++ CLT; finite: λ = 1 with the raw verdict,
    empirical Bernstein) and, where known, the truth (the simulator's rate over every episode of the pool)."""

    world_model: float
    episodes: int
    ground_truth_only: Estimate
    ppi: Estimate
    ground_truth_only_finite: Estimate
    ppi_finite: Estimate
    truth: Optional[float] = None

    def to_json(self) -> dict:
        return {"world_model": self.world_model, "episodes": self.episodes,
                "ground_truth_only": self.ground_truth_only.to_json(), "ppi": self.ppi.to_json(),
                "ground_truth_only_finite": self.ground_truth_only_finite.to_json(),
                "ppi_finite": self.ppi_finite.to_json(), "truth": self.truth}


@dataclass
class PolicyEstimate:
    """A policy's estimates over all its episodes (``average``) and per task, and its rank interval (1 = best)."""

    average: RateEstimates
    tasks: dict[str, RateEstimates]
    rank: tuple[int, int]

    def to_json(self) -> dict:
        return {"average": self.average.to_json(), "tasks": {t: r.to_json() for t, r in self.tasks.items()},
                "rank": list(self.rank)}


@dataclass
class EstimateResult:
    """What ``policy estimate`` reports (module docstring); ``episodes``: one row per world-model episode with its
    success probability, trust score, whether it was labelled, and its ground truth where known."""

    predictor: str
    alpha: float
    labelled: int
    unlabelled: int
    policies: dict[str, PolicyEstimate]
    differences: dict[str, Estimate]
    trust_auroc: Optional[float]
    trust_auroc_unlabelled: Optional[float]
    feature_auroc: dict[str, Optional[float]]
    episodes: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the estimate chose or passed over (the predictor, trials)

    def to_json(self) -> dict:
        return {"predictor": self.predictor, "alpha": self.alpha, "labelled": self.labelled,
                "unlabelled": self.unlabelled, "policies": {p: e.to_json() for p, e in self.policies.items()},
                "differences": {k: d.to_json() for k, d in self.differences.items()},
                "trust": {"auroc_labelled_out_of_fold": self.trust_auroc,
                          "auroc_unlabelled": self.trust_auroc_unlabelled, "single_features": self.feature_auroc},
                "notes": list(self.notes)}


def predictions(wm: WorldModelEpisodes, truth: dict[Key, bool], labelled: Sequence[int], predictor: str = "learned",
                folds: int = 5, seed: int = 0) -> np.ndarray:
    """P(success) of every episode of ``wm`` (E,) — indices ``labelled`` carry ground truth in ``truth``: the raw
    verdict, or cross-fitted (a labelled episode's from the models without its scene's fold, an unlabelled one's the
    fold models' average)."""
    return fitted_predictions(wm, truth, labelled, predictor, folds, seed)[0]


def fitted_predictions(wm: WorldModelEpisodes, truth: dict[Key, bool], labelled: Sequence[int],
                       predictor: str = "learned", folds: int = 5,
                       seed: int = 0) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """:func:`predictions` and, for the learned predictor, each fold model's prediction on every episode (K, E) — on
    the unlabelled episodes what the refit variance is read from (``ppi.Terms.refit_variance``); None for a
    predictor fitted on nothing."""
    if predictor not in PREDICTORS:
        raise ConfigError(f"--predictor: got {predictor!r}; expected one of {', '.join(PREDICTORS)}")
    if predictor == "verdict":  # the raw verdict; with several noise draws their share of successes
        return wm.soft.copy(), None
    if predictor == "twin":  # the simulator's own verdict (a full-scene twin in the loop), the world model ignored
        if not wm.twin:
            raise ConfigError(f"--predictor twin: the episodes of {wm.source} hold no full-scene twin's verdict "
                              "(twin_verdicts: `policy eval --env world-model --wm-condition render` of a world model "
                              "trained on `data synth --pairing scene` data records it)")
        return wm.twin_verdicts.copy(), None
    if predictor in KINEMATIC:  # the hand from the executed actions; the objects from the frames, or left in place
        try:
            return wm.kinematic(KINEMATIC[predictor]), None
        except ConfigError as e:
            raise ConfigError(f"--predictor {predictor}: {e}") from None
    lab = np.asarray(labelled, int)
    unl = np.setdiff1d(np.arange(len(wm.keys)), lab)
    y = np.array([truth[wm.keys[i]] for i in lab], float)
    groups = [wm.scene_of(i) for i in lab]  # (task, scene): one scene's episodes of every policy in one fold
    if len(set(groups)) < 2:  # a model fitted without the only scene would be fitted on nothing
        raise ConfigError(f"--predictor learned: the trials are all of one scene ({len(lab)} trial(s)); its "
                          "cross-fitting needs trials of at least 2 scenes — add trials, or use --predictor verdict")
    cf = crossfit(wm.features[lab], y, groups, wm.features[unl], folds, seed=seed)
    p = np.empty(len(wm.keys))
    p[lab], p[unl] = cf.lab, cf.unl
    per_fold = np.full((cf.folds, len(wm.keys)), np.nan)  # the labelled episodes' are their own fold's (not needed)
    per_fold[:, unl] = cf.unl_folds
    return p, per_fold


def _rates(y_lab, f_lab, f_unl, v_lab, v_unl, wm_all, truth_all, alpha, min_n, prior, f_folds) -> RateEstimates:
    return RateEstimates(
        world_model=float(np.mean(wm_all)), episodes=len(wm_all),
        ground_truth_only=classical(y_lab, alpha, "clt"), ppi=ppi_mean(y_lab, f_lab, f_unl, alpha, "clt",
                                                                       min_n=min_n, prior=prior, f_folds=f_folds),
        ground_truth_only_finite=classical(y_lab, alpha, "finite"),
        ppi_finite=ppi_mean(y_lab, v_lab, v_unl, alpha, "finite"),
        truth=None if truth_all is None else float(np.mean(truth_all)))


def estimate_policies(wm: WorldModelEpisodes, truth: dict[Key, bool], labelled_keys: Sequence[Key],
                      predictor: str = "learned", alpha: float = 0.05, folds: int = 5, seed: int = 0,
                      truth_known: bool = False, differences: bool = True,
                      min_trials: int = MIN_TUNED_TRIALS, prior: float = DISAGREEMENT_PRIOR,
                      refit: bool = True) -> EstimateResult:
    """The estimate with the episodes ``labelled_keys`` labelled (their ground truth in ``truth``); ``truth_known``:
    ``truth`` holds every episode's truth (a simulator evaluation), so the truth and the unlabelled AUROC are
    reported too. A rate with fewer than ``min_trials`` labelled episodes (a policy's, or one task's) is
    prediction-powered with λ = 0: the ground truth's own interval (``ppi``'s module docstring); ``prior``: the
    pseudo-episodes of disagreement the interval's correlation counts (``ppi.DISAGREEMENT_PRIOR``); ``refit``: a
    cross-fitted predictor's intervals count its refit variance (``ppi.Terms.refit_variance``)."""
    index = wm.index()
    lab_idx = [index[k] for k in labelled_keys]
    lab_set = set(lab_idx)
    pred, per_fold = fitted_predictions(wm, truth, lab_idx, predictor, folds, seed)

    def fold_values(unl: list[int]) -> Optional[np.ndarray]:  # each fold model's predictions on these episodes
        return None if per_fold is None or not refit else per_fold[:, unl]

    verdicts = wm.verdicts.astype(float)
    trust = trust_scores(pred, wm.verdicts)
    tasks = list(dict.fromkeys(k[1] for k in wm.keys))
    policies: dict[str, PolicyEstimate] = {}
    terms: dict[str, PolicyTerms] = {}
    for policy in wm.policies:
        def rates(task: Optional[str]) -> Optional[RateEstimates]:
            idx = [i for i, k in enumerate(wm.keys) if k[0] == policy and (task is None or k[1] == task)]
            lab = [i for i in idx if i in lab_set]
            unl = [i for i in idx if i not in lab_set]
            if not lab:
                return None
            y = np.array([truth[wm.keys[i]] for i in lab], float)
            all_truth = [truth[wm.keys[i]] for i in idx] if truth_known else None
            return _rates(y, pred[lab], pred[unl], verdicts[lab], verdicts[unl], verdicts[idx], all_truth, alpha,
                          min_trials, prior, fold_values(unl))

        average = rates(None)
        if average is None:
            raise ConfigError(f"--ground-truth: no trial of policy {policy!r}; every policy of the estimate needs at "
                              "least two ground-truth trials (or leave it out with --policies)")
        per_task = {t: r for t in tasks if (r := rates(t)) is not None}
        policies[policy] = PolicyEstimate(average, per_task, (0, 0))
        idx = [i for i, k in enumerate(wm.keys) if k[0] == policy]
        lab = [i for i in idx if i in lab_set]
        unl = [i for i in idx if i not in lab_set]
        y = np.array([truth[wm.keys[i]] for i in lab], float)
        terms[policy] = PolicyTerms(ppi_terms(y, pred[lab], pred[unl], min_n=min_trials, prior=prior,
                                              f_folds=fold_values(unl)),
                                    tuple(wm.keys[i][1:] for i in lab),
                                    tuple(wm.keys[i][1:] for i in unl))
    ranks = rank_intervals(terms, alpha)
    for policy, est in policies.items():
        est.rank = ranks[policy]
    diffs = {}
    if differences:
        names = list(policies)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                diffs[f"{a} − {b}"] = difference(terms[a], terms[b], alpha)
    wrong = ~(np.array([truth.get(k, v) for k, v in zip(wm.keys, wm.verdicts)], bool) == wm.verdicts)
    lab_arr = np.array(sorted(lab_set), int)
    unl_arr = np.setdiff1d(np.arange(len(wm.keys)), lab_arr)
    trust_auroc = auroc(1 - trust[lab_arr], wrong[lab_arr]) if predictor == "learned" else None
    trust_unl = auroc(1 - trust[unl_arr], wrong[unl_arr]) if truth_known and len(unl_arr) else None
    feature_auroc = {}
    if truth_known:  # each feature alone, as a trust signal with no fitting: |margin| and the arm's offset
        sel = np.arange(len(wm.keys))
        margin = np.abs(wm.features[:, FEATURES.index("margin")])
        arm = wm.features[:, FEATURES.index("arm_mean")]
        feature_auroc = {"|margin| (low: doubt)": auroc(-margin[sel], wrong[sel]),
                         "arm offset (high: doubt)": auroc(arm[sel], wrong[sel])}
        if wm.evaluation.draws > 1:
            feature_auroc["draws disagreeing (high: doubt)"] = auroc(wm.features[:, FEATURES.index("disagree")],
                                                                     wrong)
    rows = [{"policy": k[0], "task": k[1], "scene": k[2], "world_model_success": bool(wm.verdicts[i]),
             "p_success": round(float(pred[i]), 4), "trust": round(float(trust[i]), 4), "labelled": i in lab_set,
             "ground_truth": truth.get(k) if (i in lab_set or truth_known) else None}
            for i, k in enumerate(wm.keys)]
    return EstimateResult(predictor, alpha, len(lab_set), len(wm.keys) - len(lab_set), policies, diffs, trust_auroc,
                          trust_unl, feature_auroc, rows)


def draw_labelled(wm: WorldModelEpisodes, n: int, rng: np.random.Generator) -> list[Key]:
    """``n`` scenes drawn at random without replacement (each a (task, scene) the evaluation ran), labelled for every
    policy: the paired design a user runs (each policy from the same start states)."""
    scenes = list(dict.fromkeys(k[1:] for k in wm.keys))
    if n < 2 or n >= len(scenes):
        raise ConfigError(f"--n: got {n}; expected at least 2 and fewer than the {len(scenes)} scenes of the "
                          "world-model evaluation (the rest are its unlabelled episodes)")
    chosen = {scenes[i] for i in rng.choice(len(scenes), n, replace=False)}
    return [k for k in wm.keys if k[1:] in chosen]


# ----------------------------------------------------------------------------------------------------------------------
# Validity measured: many draws of the labelled scenes from a pool whose truth is known
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class StudyPoint:
    """Over ``draws`` draws of ``n`` labelled scenes: per policy the coverage of the 95 % intervals (PPI++ CLT,
    ground truth only (Wilson), and their finite-sample versions) of the pool's truth and the mean widths; pooled:
    the ground-truth trials saved at equal width (1 − (w_ppi / w_gt)², the mean over policies of the squared width
    ratio), the ranking's Pearson with the truth (PPI estimates and ground-truth-only; None where no draw defines it:
    one policy, or policies whose truths are all equal), the trust AUROC; and the within-policy correlation ρ with the
    truth over the pool's episodes (:func:`within_policy_rho`) of the world model's verdict (``rho_verdict``: its soft
    verdict with several noise draws; nothing fitted) and of the learned predictor (``rho_predictor``, mean over the
    draws) — PPI saves about ρ² of the trials."""

    n: int
    draws: int
    coverage: dict[str, dict[str, float]]
    width: dict[str, dict[str, float]]
    saved: float
    pearson_ppi: Optional[float]
    pearson_ground_truth_only: Optional[float]
    pearson_world_model: Optional[float]
    trust_auroc: Optional[float]
    rho_verdict: Optional[float] = None
    rho_predictor: Optional[float] = None
    saved_ideal: Optional[float] = None  # what the predictor's ρ allows (:func:`ideal_saved`); None: not recorded
    design: str = "pool"  # the truth the coverage is checked against (``DESIGNS``, :func:`study_point`)

    def to_json(self) -> dict:
        return {"n": self.n, "draws": self.draws, "design": self.design, "coverage": self.coverage,
                "width": self.width, "saved": self.saved, "saved_ideal": self.saved_ideal,
                "pearson_ppi": self.pearson_ppi, "pearson_ground_truth_only": self.pearson_ground_truth_only,
                "pearson_world_model": self.pearson_world_model, "trust_auroc": self.trust_auroc,
                "rho_verdict": self.rho_verdict, "rho_predictor": self.rho_predictor}

    @classmethod
    def from_json(cls, d: dict) -> "StudyPoint":
        """From ``to_json``'s dict, every field of its type: ``n`` and ``draws`` integers >= 1, each policy's
        coverages and widths numbers in [0, 1], ``saved`` a finite number, each statistic a finite number or null
        (undefined); else a ``result_files.MalformedResult`` naming the field."""
        from simforcing.result_files import MalformedResult, finite_number, typed

        def unit_table(key: str) -> dict[str, dict[str, float]]:
            table = typed(d, key, "dict")
            for policy, per in table.items():
                if not isinstance(per, dict) or not all(finite_number(v) and 0 <= v <= 1 for v in per.values()):
                    raise MalformedResult(f"field {key!r}: policy {policy!r} must map each interval to a number in "
                                          f"[0, 1]; got {per!r:.80}")
            return table

        def stat(key: str) -> Optional[float]:
            v = typed(d, key, "number", "null", default=None)
            if v is not None and not finite_number(v):
                raise MalformedResult(f"field {key!r} must be a finite number or null (undefined); got {v!r}")
            return v

        counts = {k: typed(d, k, "int") for k in ("n", "draws")}
        if min(counts.values()) < 1:
            raise MalformedResult(f"fields 'n' and 'draws' must be integers >= 1; got {counts}")
        if stat("saved") is None:
            raise MalformedResult("field 'saved' must be a finite number; got null")
        design = typed(d, "design", "str", default="pool")  # a study recorded before the field: the pool's truth
        if design not in DESIGNS:
            raise MalformedResult(f"field 'design' must be one of {', '.join(DESIGNS)}; got {design!r}")
        return cls(counts["n"], counts["draws"], unit_table("coverage"), unit_table("width"), stat("saved"),
                   *(stat(k) for k in ("pearson_ppi", "pearson_ground_truth_only", "pearson_world_model",
                                       "trust_auroc", "rho_verdict", "rho_predictor", "saved_ideal")), design)


def ideal_saved(keys: Sequence[Key], values: np.ndarray, truth: dict[Key, bool], n: int) -> dict[str, float]:
    """Per policy, the share of its ground-truth trials a predictor with these ``values`` (E,) saves at n labelled
    episodes when λ and the variances are known: ρ² N / (N + n), ρ its within-policy correlation with the truth over
    the pool's episodes and N = the policy's episodes − n the unlabelled ones. From PPI's variance, (Var(y) −
    2λ Cov(y, f) + λ² Var(f)) / n + λ² Var(f) / N, least at λ* (``ppi.tuned_lambda``): (1 − ρ² N / (N + n)) Var(y) / n
    against the trials' Var(y) / n. Even a perfect predictor (ρ = 1) leaves n / (N + n) — the unlabelled episodes
    are a sample too — and a policy whose truth or predictions do not vary (pinned at 0 or 1) saves 0."""
    out = {}
    v = np.asarray(values, float)
    for policy in dict.fromkeys(k[0] for k in keys):
        idx = [i for i, k in enumerate(keys) if k[0] == policy]
        r = pearson(np.array([truth[keys[i]] for i in idx], float), v[idx])
        big_n = len(idx) - n
        out[policy] = float(r * r * big_n / (big_n + n)) if np.isfinite(r) and big_n > 0 else 0.0
    return out


def resample_scenes(wm: WorldModelEpisodes, truth: dict[Key, bool],
                    rng: np.random.Generator) -> tuple[WorldModelEpisodes, dict[Key, bool]]:
    """A pool of as many scenes as ``wm``'s, each (task, scene) drawn with replacement from it — every policy's
    episode of a drawn scene with it, the scene renumbered by its place in the draw (a scene drawn twice is two
    keys, one origin: ``WorldModelEpisodes.origins``): a fresh sample of the population the pool stands for (the
    bootstrap's), and its truth."""
    scenes = list(dict.fromkeys(k[1:] for k in wm.keys))
    drawn = rng.integers(0, len(scenes), len(scenes))
    index = wm.index()
    rows, keys, new_truth = [], [], {}
    for policy in wm.policies:
        for j, s in enumerate(drawn):
            key = (policy,) + scenes[s]
            if key not in index:
                continue
            new = (policy, key[1], j)
            rows.append(index[key])
            keys.append(new)
            new_truth[new] = truth[key]
    rows = np.array(rows, int)
    origins = tuple(wm.scene_of(i) for i in rows)  # a scene drawn twice stays one scene for the cross-fitting
    return (replace(wm, keys=keys, features=wm.features[rows], verdicts=wm.verdicts[rows], origins=origins),
            new_truth)


def within_policy_rho(keys: Sequence[Key], values: np.ndarray, truth: dict[Key, bool]) -> Optional[float]:
    """The mean over policies of the Pearson correlation between ``values`` (E,) and the truth across one policy's
    episodes — how well a predictor tells this policy's successes from its failures, the quantity prediction-powered
    inference turns into trials saved (1 − ρ² of the variance remains). Policies whose truth or values do not vary
    (a policy that always succeeds) have no correlation and are left out; None when none has one."""
    rhos = []
    for policy in dict.fromkeys(k[0] for k in keys):
        idx = [i for i, k in enumerate(keys) if k[0] == policy]
        r = pearson(np.array([truth[keys[i]] for i in idx], float), np.asarray(values, float)[idx])
        if np.isfinite(r):
            rhos.append(r)
    return float(np.mean(rhos)) if rhos else None


KINDS = ("ppi", "ground_truth_only", "ppi_finite", "ground_truth_only_finite")
SAMPLING = ("sampled_uniform", "sampled_by_doubt")  # active inference with the raw verdict: where the trials go


def sampled_estimates(wm: WorldModelEpisodes, truth: dict[Key, bool], n: int, rng: np.random.Generator,
                      alpha: float, mix: float = 0.8) -> dict[str, dict[str, Estimate]]:
    """Per policy, ``n`` expected ground-truth trials placed by Poisson sampling among its episodes — uniformly, or
    where the unsupervised doubt (``trust.unsupervised_doubt``) is high — each estimate by active inference with the
    raw verdict as the predictor (``ppi.active_mean``): does trust-guided placement narrow the interval?"""
    doubt = unsupervised_doubt(wm.features)
    out: dict[str, dict[str, Estimate]] = {}
    for policy in wm.policies:
        idx = np.array([i for i, k in enumerate(wm.keys) if k[0] == policy])
        f = wm.verdicts[idx].astype(float)
        y = np.array([truth[wm.keys[i]] for i in idx], float)
        out[policy] = {}
        for kind, m in zip(SAMPLING, (0.0, mix)):
            pi = sampling_probabilities(doubt[idx], n, m)
            out[policy][kind] = active_mean(f, y, rng.random(len(idx)) < pi, pi, alpha)
    return out


def study_point(wm: WorldModelEpisodes, truth: dict[Key, bool], n: int, draws: int, predictor: str = "learned",
                alpha: float = 0.05, seed: int = 0, progress: Callable[[str], None] = lambda s: None,
                min_trials: int = MIN_TUNED_TRIALS, design: str = "pool",
                prior: float = DISAGREEMENT_PRIOR, refit: bool = True) -> StudyPoint:
    """:func:`estimate_policies` over ``draws`` random draws of ``n`` labelled scenes (module docstring). ``design``:
    what each interval must hold. ``pool``: the pool's own rate — its ``n`` labelled scenes drawn without replacement
    from its scenes, the unlabelled ones the rest; the rate of those scenes is what is estimated. ``population``: the
    rate of the population the pool is a sample of (a policy's success on the task, what a user asks) — each draw
    first draws a pool of as many scenes with replacement (:func:`resample_scenes`), its truth the pool's rate, so
    the unlabelled episodes' own sampling error counts as it does on a user's robot; the learned predictor's
    cross-fitting keeps a scene drawn twice in one fold (else it would be fitted on a copy of what it predicts). The
    pool design flatters every interval (the labelled scenes are a sixth of what is estimated at n = 10 of 60) and
    PPI's most (its unlabelled term's error is part of the truth)."""
    if design not in DESIGNS:
        raise ConfigError(f"--study-design: got {design!r}; expected one of {', '.join(DESIGNS)}")
    rng = np.random.default_rng(seed)
    kinds = KINDS + SAMPLING
    hits = {p: {k: 0 for k in kinds} for p in wm.policies}
    widths = {p: {k: [] for k in kinds} for p in wm.policies}
    r_ppi, r_gt, aurocs, rho_pred, ideal = [], [], [], [], []
    idx = {p: [i for i, k in enumerate(wm.keys) if k[0] == p] for p in wm.policies}
    truths = np.array([np.mean([truth[wm.keys[i]] for i in idx[p]]) for p in wm.policies])
    raw = np.array([np.mean(wm.verdicts[idx[p]]) for p in wm.policies])
    for d in range(draws):
        pool, pool_truth = resample_scenes(wm, truth, rng) if design == "population" else (wm, truth)
        res = estimate_policies(pool, pool_truth, draw_labelled(pool, n, rng), predictor, alpha, seed=d,
                                truth_known=True, differences=False, min_trials=min_trials, prior=prior,
                                refit=refit)
        sampled = sampled_estimates(pool, pool_truth, n, rng, alpha)
        for p, target in zip(wm.policies, truths):
            avg = res.policies[p].average
            for k in kinds:
                est: Estimate = getattr(avg, k) if k in KINDS else sampled[p][k]
                hits[p][k] += est.covers(target)
                widths[p][k].append(est.width)
        r_ppi.append(pearson(truths, [res.policies[p].average.ppi.estimate for p in wm.policies]))
        r_gt.append(pearson(truths, [res.policies[p].average.ground_truth_only.estimate for p in wm.policies]))
        if res.trust_auroc_unlabelled is not None:
            aurocs.append(res.trust_auroc_unlabelled)
        p_success = np.array([row["p_success"] for row in res.episodes])
        rho = within_policy_rho(pool.keys, p_success, pool_truth)
        if rho is not None:
            rho_pred.append(rho)
        ideal.append(np.mean(list(ideal_saved(pool.keys, p_success, pool_truth, n).values())))
        if (d + 1) % 50 == 0:
            progress(f"n = {n}: {d + 1}/{draws} draws")
    width = {p: {k: float(np.mean(v)) for k, v in w.items()} for p, w in widths.items()}
    return StudyPoint(n, draws, {p: {k: h / draws for k, h in c.items()} for p, c in hits.items()}, width,
                      float(np.mean(list(saved_per_policy(width).values()))), _defined_mean(r_ppi), _defined_mean(r_gt),
                      _defined_mean([pearson(truths, raw)]), float(np.mean(aurocs)) if aurocs else None,
                      within_policy_rho(wm.keys, wm.soft, truth), float(np.mean(rho_pred)) if rho_pred else None,
                      float(np.mean(ideal)) if ideal else None, design)


def saved_per_policy(width: dict[str, dict[str, float]]) -> dict[str, float]:
    """The ground-truth trials each policy's prediction-powered interval saves at equal width, 1 − (w_ppi / w_gt)²
    (mean widths over a study's draws; policies whose ground-truth interval has no width left out). A policy whose
    rate is pinned at 0 or 1 (the floor, the ceiling) saves nothing: its trials agree already."""
    return {p: float(1 - (w["ppi"] / w["ground_truth_only"]) ** 2) for p, w in width.items()
            if w["ground_truth_only"] > 0}


def _defined_mean(values: Sequence[float]) -> Optional[float]:
    """The mean of the values that are defined (not NaN), None when none is."""
    v = [x for x in values if not np.isnan(x)]
    return float(np.mean(v)) if v else None


def coverage_study(wm: WorldModelEpisodes, truth: dict[Key, bool], ns: Sequence[int], draws: int = 200,
                   predictor: str = "learned", alpha: float = 0.05, seed: int = 0,
                   progress: Callable[[str], None] = print, min_trials: int = MIN_TUNED_TRIALS,
                   design: str = "pool", prior: float = DISAGREEMENT_PRIOR, refit: bool = True) -> list[StudyPoint]:
    """:func:`study_point` for every n of ``ns`` (those the pool allows: fewer than its scenes)."""
    scenes = len({k[1:] for k in wm.keys})
    return [study_point(wm, truth, n, draws, predictor, alpha, seed + n, progress, min_trials, design, prior, refit)
            for n in ns if 2 <= n < scenes]
