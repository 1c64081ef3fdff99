"""What a world-model episode alone says about how far to trust its verdict, and the predictor learned from it.

Every episode of a world-model evaluation (``policy eval --env world-model``) records, beside the judge's verdict on
each predicted frame, the task predicate's signed margin on the judge's readings (metres: > 0 where the judge sees
success) and how far the arm the judge reads from the frames is from where the commanded actions put it (mm: the
judge's hand displacement since the first frame against the sum of the executed actions' position deltas). From them,
with no ground truth, :func:`episode_features`:

    verdict     the judge's episode verdict (what the world-model success rate counts)
    margin      the largest margin over the episode (how clearly the judge saw success, or how far it missed)
    held        the share of frames judged successful
    arm_mean    the arm's mean distance from where the actions put it, over the episode (cm)
    arm_last    that distance at the last frame (cm)
    soft_shift  the share of the world model's noise draws judged successful (``policy eval --draws K``: the soft
                prediction) minus the verdict (draw 0's); 0 with one draw
    disagree    how much the draws disagree: 4·soft·(1 − soft), 0 when they all agree (and with one draw)
    twin        the digital twin's own verdict on the episode (a full-scene twin in the loop, ``--wm-condition
                render`` on a world model of the scene pairing: the task predicate on the twin simulation's objects —
                the simulator's own prediction); 0 without one
    gap_min     how close the executed actions bring the hand to the task object's start (cm): the judge's reading of
                the real first frame plus the commanded displacement — the actions' own geometry, the world model's
                frames unused (0 where the evaluation did not record it)
    gap_last    that distance after the last action (cm)
    on_hand     1 where the task's predicate is on the hand (reach; push and grasp are on the object) and the gaps
                are recorded
    hand_reached  on such a task, whether the commanded hand came within the reach radius of the object's start
                (:func:`hand_success`: the simulator's own rule on the actions' geometry — it agrees with the
                simulator's verdict on 99 % of the demo's reach episodes, where the world models' frames give 60–76 %)
    hand_verdict  that where the predicate is on the hand, else the world model's (soft) verdict: the ``hand``
                predictor of ``policy estimate``; with the two above the fitted predictor can weigh the hand and
                the frames per kind of task, which a pooled logistic on the other features cannot

(Columns 6–13 are 0 — the last the verdict — in an evaluation of one draw per episode without a full-scene twin and
without the commanded gaps (an earlier simforcing's): constant columns or a copy of the verdict, which the fitted
predictor gives no weight beyond the verdict's, so its predictions are those of the first five alone.)

A predictor (:class:`Logistic`, L2-regularised logistic regression on standardised features) learns P(ground truth
succeeds | features) from labelled episodes; with **cross-fitting** (:func:`crossfit`) a labelled episode's prediction
comes from a model fitted without its fold of scenes (Zrnic & Candès 2024, *Cross-prediction-powered inference*), and
an unlabelled episode's is the average of the fold models — the prediction-powered interval stays valid. The
**trust score** of an episode is the predictor's probability that the world model's verdict is right: p̂ where the
judge said success, 1 − p̂ where it said failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from scipy.stats import rankdata

from simforcing.data.synthetic.tasks import REACH_RADIUS

FEATURES = ("verdict", "margin", "held", "arm_mean", "arm_last", "soft_shift", "disagree", "twin", "gap_min",
            "gap_last", "on_hand", "hand_reached", "hand_verdict")


def episode_features(verdict: bool, frame_judged: Optional[Sequence], frame_margin: Optional[Sequence],
                     frame_arm_mm: Optional[Sequence], draw_success: Optional[Sequence] = None,
                     twin_success: Optional[bool] = None, frame_gap_mm: Optional[Sequence] = None,
                     on_hand: bool = False) -> np.ndarray:
    """One episode's features (``FEATURES``; the verdict alone — the readings 0 — where the evaluation predates the
    per-frame margins and arm readings; ``draw_success``: every noise draw's verdict, None with one draw;
    ``twin_success``: the full-scene twin's verdict, None without one; ``frame_gap_mm``: the commanded hand's distance
    from the object's start per frame, None where not recorded; ``on_hand``: the task's predicate is on the hand
    (reach). From the last two, with nothing of the world model's frames: ``on_hand`` (where the gap is known),
    ``hand_reached`` (:func:`hand_success` on such a task) and ``hand_verdict`` — that, or the world model's (soft)
    verdict on a task whose predicate is on the objects: the ``hand`` predictor of ``policy estimate``)."""
    held = float(np.mean(frame_judged)) if frame_judged else float(verdict)
    margin = float(np.max(frame_margin)) if frame_margin else 0.0
    arm = np.asarray(frame_arm_mm, np.float64) / 10.0 if frame_arm_mm else np.zeros(1)
    soft = float(np.mean(draw_success)) if draw_success else float(verdict)
    gap = np.asarray(frame_gap_mm, np.float64) / 10.0 if frame_gap_mm else np.zeros(1)
    hand = on_hand and bool(frame_gap_mm)  # the hand's verdict is known
    reached = float(hand and bool(hand_success(frame_gap_mm)))
    return np.array([float(verdict), margin * 100.0, held, float(arm.mean()), float(arm[-1]), soft - float(verdict),
                     4.0 * soft * (1.0 - soft), float(bool(twin_success)), float(gap.min()), float(gap[-1]),
                     float(hand), reached, reached if hand else soft])


def hand_success(frame_gap_mm: Optional[Sequence]) -> Optional[bool]:
    """Whether the hand the executed actions command came within ``REACH_RADIUS`` of the task object's start after any
    executed action — the reach predicate read from the actions and the real first frame alone (``frame_gap_mm``,
    ``world_model_eval.commanded_gap_mm``), as the simulator decides it (its first success, no run of frames asked
    for: nothing here is a judge's reading of a predicted frame); None where the evaluation did not record it."""
    if frame_gap_mm is None:
        return None
    gap = np.asarray(frame_gap_mm, np.float64)
    return bool(gap.size) and bool(np.any(gap <= 1000.0 * REACH_RADIUS))


def has_readings(frame_margin, frame_arm_mm) -> bool:
    return bool(frame_margin) and bool(frame_arm_mm)


class Logistic:
    """L2-regularised logistic regression fitted by Newton's method on standardised features (a constant column is
    left at zero weight); ``predict`` gives P(y = 1 | x) in (0, 1)."""

    def __init__(self, l2: float = 1.0, iters: int = 50):
        self.l2, self.iters = float(l2), int(iters)
        self.mu = self.sd = self.w = None
        self.constant: Optional[float] = None

    def fit(self, x: np.ndarray, y: np.ndarray) -> "Logistic":
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if y.min() == y.max():  # one class only: the rate, slightly shrunk off 0 and 1
            self.constant = float((y.sum() + 0.5) / (len(y) + 1.0))
            return self
        self.mu = x.mean(0)
        self.sd = np.where(x.std(0) > 1e-9, x.std(0), np.inf)
        z = np.column_stack([np.ones(len(x)), (x - self.mu) / self.sd])
        w = np.zeros(z.shape[1])
        reg = np.full(z.shape[1], self.l2)
        reg[0] = 1e-6  # the intercept is (almost) not shrunk
        for _ in range(self.iters):
            p = 1 / (1 + np.exp(-np.clip(z @ w, -30, 30)))
            grad = z.T @ (p - y) + reg * w
            hess = (z * (p * (1 - p))[:, None]).T @ z + np.diag(reg)
            step = np.linalg.solve(hess, grad)
            w -= step
            if np.abs(step).max() < 1e-8:
                break
        self.w = w
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.float64)
        if self.constant is not None:
            return np.full(len(x), self.constant)
        z = np.column_stack([np.ones(len(x)), (x - self.mu) / self.sd])
        return 1 / (1 + np.exp(-np.clip(z @ self.w, -30, 30)))


@dataclass(frozen=True)
class CrossFit:
    """Cross-fitted predictions: ``lab`` (n,) each labelled episode's from the model without its fold, ``unl`` (N,)
    the fold models' average on the unlabelled episodes, ``folds`` the number of models and ``unl_folds`` (folds, N)
    each model's own predictions there (their spread: how much the fit moves with the labelled episodes —
    ``ppi.Terms.refit_variance``)."""

    lab: np.ndarray
    unl: np.ndarray
    folds: int
    unl_folds: np.ndarray


def crossfit(x_lab: np.ndarray, y_lab: np.ndarray, groups: Sequence, x_unl: np.ndarray, folds: int = 5,
             l2: float = 1.0, seed: int = 0) -> CrossFit:
    """K-fold cross-fitting with folds of whole groups (scenes: every episode of a scene in one fold, so no model
    sees a scene it predicts). With fewer groups than ``folds``, one fold per group."""
    x_lab, y_lab, x_unl = np.asarray(x_lab, float), np.asarray(y_lab, float), np.asarray(x_unl, float)
    uniq = list(dict.fromkeys(groups))
    k = max(2, min(folds, len(uniq)))
    rng = np.random.default_rng(seed)
    fold_of_group = {g: i % k for i, g in enumerate(rng.permutation(len(uniq)))}
    fold_of_group = {uniq[i]: f for i, f in fold_of_group.items()}
    fold = np.array([fold_of_group[g] for g in groups])
    lab = np.empty(len(y_lab))
    unl = np.zeros(len(x_unl))
    per_fold = np.zeros((k, len(x_unl)))
    for f in range(k):
        held = fold == f
        model = Logistic(l2).fit(x_lab[~held], y_lab[~held])
        if held.any():
            lab[held] = model.predict(x_lab[held])
        if len(x_unl):
            per_fold[f] = model.predict(x_unl)
            unl += per_fold[f] / k
    return CrossFit(lab, unl, k, per_fold)


def _ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="mergesort")
    r = np.empty(len(v))
    r[order] = np.arange(len(v))
    return r / max(len(v) - 1, 1)


def unsupervised_doubt(features: np.ndarray) -> np.ndarray:
    """A doubt score from the episode alone, with nothing fitted (what a user has before any trial): the mean of the
    episode's rank in the arm's offset from the actions (high: doubt) and in the margin's size (small: doubt), in
    [0, 1]."""
    x = np.asarray(features, np.float64)
    return 0.5 * (_ranks(x[:, FEATURES.index("arm_mean")]) + _ranks(-np.abs(x[:, FEATURES.index("margin")])))


def trust_scores(p_success: np.ndarray, verdicts: np.ndarray) -> np.ndarray:
    """P(the world model's verdict is right): p̂ where it said success, 1 − p̂ where it said failure."""
    p, v = np.asarray(p_success, float), np.asarray(verdicts, bool)
    return np.where(v, p, 1 - p)


def auroc(scores: np.ndarray, positive: np.ndarray) -> Optional[float]:
    """Area under the ROC curve of ``scores`` for ``positive`` (Mann–Whitney, ties half): the chance a random
    positive scores above a random negative; None with one class only."""
    s, pos = np.asarray(scores, float), np.asarray(positive, bool)
    n1, n0 = int(pos.sum()), int((~pos).sum())
    if n1 == 0 or n0 == 0:
        return None
    ranks = rankdata(s)  # ties: their mean rank
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))
