"""Policies' success from a few ground-truth trials and many world-model episodes: prediction-powered estimates
(``ppi``), every episode's trust score (``trust``), the trials and episodes (``trials``), the estimate and its
coverage study (``estimate``), the files (``report``); ``run_estimate`` is what the command and the API call."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from simforcing.errors import ConfigError
from simforcing.policy.estimate.estimate import (PREDICTORS, EstimateResult, StudyPoint, coverage_study,
                                                 draw_labelled, estimate_policies)
from simforcing.policy.estimate.trials import ground_truth, world_model_episodes

STUDY_NS = (5, 10, 20, 40)


def run_estimate(ground_truth_source: str | Path, wm_eval: str | Path, out: Optional[str | Path] = None, n: int = 10,
                 draws: int = 0, study_ns: Sequence[int] = STUDY_NS, predictor: str = "learned", alpha: float = 0.05,
                 seed: int = 0, progress: Callable[[str], None] = print) -> tuple[EstimateResult, list[StudyPoint]]:
    """The prediction-powered estimate of every policy of the world-model evaluation ``wm_eval`` from the ground
    truth ``ground_truth_source`` — a trial file (its trials labelled) or a simulator evaluation of the same scenes
    (``n`` scenes drawn with ``seed`` labelled for every policy; with ``draws`` > 0 also the coverage study over
    ``study_ns``) — written to ``out`` when given (``policy.estimate.report``)."""
    if predictor not in PREDICTORS:
        raise ConfigError(f"--predictor: got {predictor!r}; expected one of {', '.join(PREDICTORS)}")
    if not 0 < alpha < 1:
        raise ConfigError(f"--alpha: got {alpha}; expected a level in (0, 1), e.g. 0.05 for 95 % intervals")
    if draws < 0:
        raise ConfigError(f"--draws: got {draws}; expected 0 (no coverage study) or more")
    wm = world_model_episodes(wm_eval)
    truth, sim = ground_truth(ground_truth_source, wm)
    if sim is None:
        if draws:
            raise ConfigError("--draws: a coverage study needs every episode's truth — a simulator evaluation as "
                              "--ground-truth, not a trial file")
        labelled = sorted(truth)
        known = False
    else:
        labelled = draw_labelled(wm, n, np.random.default_rng(seed))
        known = True
    res = estimate_policies(wm, truth, labelled, predictor, alpha, seed=seed, truth_known=known)
    study = coverage_study(wm, truth, study_ns, draws, predictor, alpha, seed, progress) if draws else []
    if out is not None:
        from simforcing.policy.estimate.report import write_estimate

        inputs = {"ground_truth": str(ground_truth_source), "wm_eval": str(wm_eval), "n": n if known else None,
                  "seed": seed, "draws": draws, "world_model": wm.evaluation.wm,
                  "readings": wm.readings}
        write_estimate(res, study, out, inputs)
    return res, study


__all__ = ["run_estimate", "estimate_policies", "coverage_study", "EstimateResult", "StudyPoint", "STUDY_NS"]
