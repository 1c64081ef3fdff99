"""The success judge validated on the simulator's own frames: its verdicts against MuJoCo's, per task, per frame and
per episode (precision, recall, Cohen's κ), and its readings against the simulator's truth (median |error| per
output). ``policy eval --judge`` records it in the simulator evaluation; ``policy agreement`` reports it as the harness
check (near perfect, or the rest means little)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from simforcing.policy.closed_loop.results import Episodes, JudgeValidation, TaskValidation
from simforcing.policy.judge.success_judge import OUTPUTS, confusion


def judge_validation(episodes: Episodes, tasks: list[str]) -> Optional[JudgeValidation]:
    """Per task and over "all" a :class:`TaskValidation` (frame and episode confusions, the median error per output in
    cm) from the outcomes of a simulator evaluation made with a judge (None without one)."""
    out = {}
    for task in tasks + ["all"]:
        eps = [o for per in episodes.values() for t, os_ in per.items() if task in (t, "all") for o in os_]
        if not eps or eps[0].judged is None:
            return None
        fj = [v for o in eps for v in o.frame_judged]
        ft = [v for o in eps for v in o.frame_true]
        errors = [row for o in eps for row in (o.frame_error_mm or ())]
        med = None
        if errors:  # the judge's readings against the simulator's truth: median |error| per output, every frame
            med = {k: round(float(v), 2) for k, v in zip(OUTPUTS, np.median(np.asarray(errors, float), axis=0) / 10)}
        out[task] = TaskValidation(confusion(fj, ft), confusion([o.judged for o in eps], [o.success for o in eps]),
                                   med)
    return out
