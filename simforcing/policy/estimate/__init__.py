"""Policies' success from a few ground-truth trials and many world-model episodes: prediction-powered estimates
(``ppi``), every episode's trust score (``trust``), the trials and episodes (``trials``), the estimate and its
coverage study (``estimate``), the files (``report``); ``run_estimate`` is what the command and the API call."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from simforcing.errors import ConfigError
from simforcing.policy.estimate.estimate import (DESIGNS, KINEMATIC, PREDICTORS, EstimateResult, StudyPoint,
                                                 coverage_study, draw_labelled, estimate_policies)
from simforcing.policy.estimate.ppi import DISAGREEMENT_PRIOR, MIN_TUNED_TRIALS
from simforcing.policy.estimate.trials import HAND_TASKS, WorldModelEpisodes, ground_truth, world_model_episodes

STUDY_NS = (5, 10, 20, 40)
DEFAULT_N = 10


def _integer(flag: str, value, low: int) -> int:
    """``value`` as an integer >= ``low``, else a ConfigError naming ``flag`` (a bool, 2.5 or "3" is no count)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ConfigError(f"{flag}: got {value!r}; expected an integer >= {low}")
    return int(value)


def choose_predictor(predictor: Optional[str], wm: WorldModelEpisodes) -> tuple[str, list[str]]:
    """The predictor and a note on the choice: ``learned`` by default, ``verdict`` where the world-model episodes hold
    no per-frame readings (the learned one would see the verdict alone) — said in a note; ``learned`` asked for on
    such episodes is a ConfigError naming them. ``predictor`` is one of ``PREDICTORS`` or None (checked by the
    caller). ``hand`` and ``actions`` on episodes none of whose tasks is on the hand are what they reduce to there,
    said in a note."""
    if predictor in KINEMATIC and wm.gaps and not any(k[1] in HAND_TASKS for k in wm.keys):
        same = ("the world model's verdict on every episode: the estimate of --predictor verdict" if predictor == "hand"
                else "failure on every episode, a constant: the estimate rests on the ground truth alone")
        return predictor, [f"predictor {predictor}: no episode is of a task whose predicate is on the hand "
                           f"({', '.join(HAND_TASKS)}), so it is {same}"]
    if wm.readings or predictor not in (None, "learned"):
        return predictor or "learned", []
    why = (f"{wm.without_readings} of the {len(wm.keys)} episodes of {wm.source} hold no per-frame readings "
           "(frame_margin, frame_arm_mm: an evaluation by an earlier simforcing, or one written without them)")
    if predictor == "learned":
        raise ConfigError(f"--predictor learned: {why}, so it would learn from the verdict alone; use --predictor "
                          "verdict, or evaluate the policies in the world model again (`simforcing policy eval --env "
                          "world-model`)")
    return "verdict", [f"predictor verdict (not the default learned one): {why}"]


MAX_DRAWS = 100_000  # the coverage study's draws
MAX_PRIOR = 1000.0  # pseudo-episodes: more than any pool's trials (the trials would weigh nothing; 1e308 overflowed)


def _checked_prior(prior: Optional[float]) -> float:
    """``--disagreement-prior``: None is ``ppi.DISAGREEMENT_PRIOR``; ConfigError for anything but a number from 0 to
    ``MAX_PRIOR``."""
    prior = DISAGREEMENT_PRIOR if prior is None else prior
    if isinstance(prior, bool) or not isinstance(prior, (int, float)) or not math.isfinite(prior) or \
            not 0 <= prior <= MAX_PRIOR:
        raise ConfigError(f"--disagreement-prior: got {prior!r}; expected a number from 0 to {MAX_PRIOR:g} "
                          f"(pseudo-episodes of disagreement each way; default {DISAGREEMENT_PRIOR}, 0: the sample's "
                          "own correlation)")
    return prior


def run_estimate(ground_truth_source: str | Path, wm_eval: str | Path, out: Optional[str | Path] = None,
                 n: Optional[int] = None, draws: int = 0, study_ns: Optional[Sequence[int]] = None,
                 predictor: Optional[str] = None, alpha: float = 0.05, seed: int = 0,
                 progress: Callable[[str], None] = print,
                 policies: Optional[Sequence[str]] = None,
                 min_trials: int = MIN_TUNED_TRIALS, design: str = "pool",
                 prior: Optional[float] = None, refit: bool = True) -> tuple[EstimateResult, list[StudyPoint]]:
    """The prediction-powered estimate of the policies of the world-model evaluation ``wm_eval`` (``policies``, or
    all) from the ground truth ``ground_truth_source`` — a trial file (its trials labelled) or a simulator
    evaluation of the same scenes (``n`` scenes, default 10, drawn with ``seed`` labelled for every policy; with
    ``draws`` > 0 also the coverage study over ``study_ns``: each fewer than the evaluation's scenes, by default those
    of ``STUDY_NS`` that are; ``design``: the truth its intervals must hold, the pool's rate or its population's —
    ``estimate.study_point``) — written to ``out`` when given (``policy.estimate.report``). ``predictor``: learned
    (the default where the episodes hold per-frame readings, else verdict, with a note) or verdict. A rate with fewer
    than ``min_trials`` ground-truth trials is the trials' own (λ = 0; ``ppi``'s docstring), said in a note for a
    policy's; ``prior``: the pseudo-episodes of disagreement each way that the interval's correlation counts
    (None: ``ppi.DISAGREEMENT_PRIOR``); ``refit``: the learned predictor's interval counts how much its fit moves
    with the trials (``ppi.Terms.refit_variance``; False: the plug-in variance alone, the interval before
    2026-12-07). Every argument —
    ``out`` too (``outputs.check_results_folder``: a folder of other files or another command's results is refused)
    — is checked before anything is read or computed; ``out`` is written whole, replacing an earlier estimate there
    (``outputs.results_folder``); what was chosen or passed over is in the result's ``notes``."""
    from simforcing.outputs import check_results_folder, results_folder
    from simforcing.policy.estimate.report import ESTIMATE_FILES, write_estimate

    if out is not None:
        check_results_folder(out, "--out", "an estimate", ESTIMATE_FILES)
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise ConfigError(f"--alpha: got {alpha}; expected a level in (0, 1), e.g. 0.05 for 95 % intervals")
    draws, seed = _integer("--draws", draws, 0), _integer("--seed", seed, 0)
    if draws > MAX_DRAWS:  # 10^9 draws ran for days before writing anything
        raise ConfigError(f"--draws: got {draws}; expected at most {MAX_DRAWS} (3000 draws measure a coverage to about "
                          "±0.5 %)")
    min_trials = _integer("--min-trials", min_trials, 2)
    n = None if n is None else _integer("--n", n, 2)
    study_ns = None if study_ns is None else [_integer("--study-n", v, 2) for v in study_ns]
    if study_ns is not None and not draws:
        raise ConfigError("--study-n: the coverage study's n values are used with --draws N > 0 only")
    if design not in DESIGNS:
        raise ConfigError(f"--study-design: got {design!r}; expected one of {', '.join(DESIGNS)}")
    prior = _checked_prior(prior)
    if design != "pool" and not draws:
        raise ConfigError("--study-design: the coverage study's design is used with --draws N > 0 only")
    if predictor is not None and predictor not in PREDICTORS:
        raise ConfigError(f"--predictor: got {predictor!r}; expected one of {', '.join(PREDICTORS)}")
    wm = world_model_episodes(wm_eval, policies=policies)
    gt = ground_truth(ground_truth_source, wm)
    predictor, notes = choose_predictor(predictor, wm)
    if not refit and predictor != "learned":  # only the learned predictor is fitted: said, never a silent no-op
        notes.append(f"--no-refit-variance: nothing to leave out — the {predictor} predictor is fitted on nothing "
                     "(its intervals have no refit variance)")
    notes += list(gt.notes)
    if len(wm.policies) == 1:  # an estimate of its own, but nothing to rank it against or to differ from
        notes.append(f"one policy ({wm.policies[0]}): no differences between policies and no ranking "
                     + ("(the coverage study's Pearson is undefined) " if draws else "")
                     + "— estimate two or more to compare them")
    if gt.simulator is None:
        if draws:
            raise ConfigError("--draws: a coverage study needs every episode's truth — a simulator evaluation as "
                              "--ground-truth, not a trial file")
        if n is not None:
            raise ConfigError(f"--n: the trials of {ground_truth_source} are the labelled episodes; --n draws that "
                              "many scenes from a simulator evaluation given as --ground-truth")
        labelled = sorted(gt.truth)
    else:
        n = DEFAULT_N if n is None else n
        labelled = draw_labelled(wm, n, np.random.default_rng(seed))
        study_ns = _study_ns(study_ns, wm)
    res = estimate_policies(wm, gt.truth, labelled, predictor, alpha, seed=seed, truth_known=gt.simulator is not None,
                            min_trials=min_trials, prior=prior, refit=refit)
    few = {p: e.average.ppi.n for p, e in res.policies.items() if e.average.ppi.n < min_trials}
    if few:
        notes.append(f"fewer than --min-trials {min_trials} ground-truth trials for {len(few)} polic"
                     f"{'y' if len(few) == 1 else 'ies'} ({', '.join(f'{p}: {k}' for p, k in few.items())}): their "
                     "intervals are the trials' own (λ = 0) — from a handful of trials the world model's weight "
                     "cannot be estimated reliably and its interval runs short; run more trials")
    res.notes = notes
    study = (coverage_study(wm, gt.truth, study_ns, draws, predictor, alpha, seed, progress, min_trials, design,
                            prior, refit) if draws else [])
    if out is not None:
        inputs = {"ground_truth": str(ground_truth_source), "wm_eval": str(wm_eval), "n": n, "seed": seed,
                  "draws": draws, "study_design": design, "min_trials": min_trials,
                  "disagreement_prior": prior, "refit_variance": bool(refit and predictor == "learned"),
                  "world_model": wm.evaluation.wm,
                  "readings": wm.readings,
                  "policies": wm.policies}
        with results_folder(out, "--out", "an estimate", ESTIMATE_FILES) as tmp:
            write_estimate(res, study, tmp, inputs)
    return res, study


def _study_ns(given: Optional[Sequence[int]], wm: WorldModelEpisodes) -> list[int]:
    """The coverage study's n values: ``given`` (each must leave unlabelled scenes: fewer than the evaluation's), or
    those of ``STUDY_NS`` that do."""
    scenes = len({k[1:] for k in wm.keys})
    if given is None:
        ns = [v for v in STUDY_NS if v < scenes]
        if not ns:  # the study was written empty, as if finished
            raise ConfigError(f"--draws: none of the coverage study's default n ({' '.join(map(str, STUDY_NS))}) is "
                              f"fewer than the {scenes} scenes of the world-model evaluation {wm.source}; give "
                              f"--study-n with values from 2 to {scenes - 1}" if scenes > 2 else
                              f"--draws: the world-model evaluation {wm.source} holds {scenes} scenes, too few for a "
                              "coverage study (n from 2 to one fewer than the scenes); evaluate more scenes")
        return ns
    for v in given:
        if v >= scenes:
            raise ConfigError(f"--study-n: {v} is not fewer than the {scenes} scenes of the world-model evaluation "
                              f"{wm.source} (the rest are the unlabelled episodes); give values from 2 to {scenes - 1}")
    return list(dict.fromkeys(given))


__all__ = ["run_estimate", "estimate_policies", "coverage_study", "EstimateResult", "StudyPoint", "STUDY_NS"]
