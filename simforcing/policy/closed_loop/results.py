"""What a closed-loop policy evaluation produces, typed: episode outcomes, success rates, per-policy rows and the
evaluation itself (simulator or world model), each with ``to_json`` / ``from_json``.

    ev = evaluate_synthetic(...)                     # a PolicyEvaluation
    ev.rows["scripted expert (ceiling)"].average.rate
    ev.write(out)                                    # OUT/eval.json (tagged, readable) and OUT/eval.md
    ev = PolicyEvaluation.read(out, "--sim")         # or a ConfigError naming the flag, the file and its kind

``eval.json`` carries ``format: simforcing.policy-evaluation`` and ``format_version: 2``; a file written before the
tags (version 1: rows with the average and the seconds beside the task names, one ``execute`` for all players) loads
through the same reader. The success table (eval.md) is rendered here; the agreement's tables by
``policy.closed_loop.tables``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from simforcing.result_files import (AGREEMENT, POLICY_EVALUATION, MalformedResult, finite_number, nested,
                                     read_typed, tagged, typed)
from simforcing.runs.scored import ScoredRun

FORMAT_VERSION = 2
SIMULATOR, WORLD_MODEL = "synthetic", "world-model"  # PolicyEvaluation.env
# What the success judge reads off a frame (``policy.judge.success_judge``; per-task errors of ``TaskValidation``):
# r̂ = ee − obj, d̂ = obj − obj_0 (metres)
JUDGE_OUTPUTS = ("rel_x", "rel_y", "rel_z", "disp_x", "disp_y", "disp_z")
ENV_NAMES = {SIMULATOR: "a simulator evaluation (`policy eval`)",
             WORLD_MODEL: "a world-model evaluation (`policy eval --env world-model`)"}


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a success rate k/n (n = 0: (0, 1))."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Rate:
    """A success rate with its 95 % Wilson interval. ``rate`` is k/n for one task's episodes; for a row's average it is
    the mean of the tasks' rates while the interval is the pooled count's."""

    successes: int
    episodes: int
    rate: Optional[float]
    ci95: tuple[float, float]

    @classmethod
    def of(cls, k: int, n: int) -> "Rate":
        return cls(int(k), int(n), k / n if n else None, wilson(k, n))

    def to_json(self) -> dict:
        return {"successes": self.successes, "episodes": self.episodes, "rate": self.rate, "ci95": list(self.ci95)}

    @classmethod
    def from_json(cls, d: dict) -> "Rate":
        """Counts integers >= 0 (successes at most episodes), ``rate`` a number in [0, 1] (null only without
        episodes), ``ci95`` two numbers in [0, 1]: a NaN or out-of-range rate is named, never shown as a success."""
        k, n = _count(d, "successes", 0), _count(d, "episodes", 0)
        if k > n:
            raise MalformedResult(f"field 'successes' ({k}) is more than 'episodes' ({n})")
        rate = typed(d, "rate", "number", "null")
        if (rate is None) != (n == 0) or (rate is not None and not 0 <= rate <= 1):
            raise MalformedResult(f"field 'rate' must be a number in [0, 1] (null only with 0 episodes); got {rate!r} "
                                  f"with {n} episodes")
        ci = typed(d, "ci95", "list")
        if len(ci) != 2 or not all(finite_number(v) and 0 <= v <= 1 for v in ci):
            raise MalformedResult(f"field 'ci95' must be two numbers in [0, 1]; got {ci!r:.80}")
        return cls(k, n, rate, tuple(ci))


@dataclass(frozen=True)
class EpisodeOutcome:
    """One episode of one player on one scene (``scene``: its index in the evaluation's dataset seed). The simulator
    records ``chunks``; with a success judge the simulator also records the judge's episode verdict (``judged``, its
    step) and per frame the judge's and MuJoCo's verdicts and the judge's |error| (mm, (T, 6)); inside a world model
    ``success`` is the judge's and ``frame_judged`` its verdict on each predicted frame, ``frame_margin`` the task
    predicate's signed margin on the judge's readings (metres, > 0 where it holds) and ``frame_arm_mm`` how far the
    hand the judge reads is from where the executed actions put it (mm): what an episode's trust score is computed
    from (``policy.estimate.trust``). With several noise draws of the world model per episode (``policy eval
    --draws K``) those are draw 0's, and ``draw_success`` / ``draw_margin`` hold every draw's verdict and largest
    margin (K each; None with one draw). ``twin_verdicts``: with a full-scene digital twin in the loop
    (``--wm-condition render`` on a world model of the ``data synth --pairing scene`` data), the twin's own verdict —
    the task predicate on the twin simulation's objects and end-effector — after every executed action (the
    simulator's own prediction of success, SureSim's; :attr:`twin_success`, :attr:`twin_step`; draw 0's)."""

    scene: int
    success: bool
    steps: int
    chunks: Optional[int] = None
    judged: Optional[bool] = None
    judged_step: Optional[int] = None
    frame_judged: Optional[list] = None
    frame_true: Optional[list] = None
    frame_error_mm: Optional[list] = None
    frame_margin: Optional[list] = None
    frame_arm_mm: Optional[list] = None
    draw_success: Optional[list] = None
    draw_margin: Optional[list] = None
    twin_verdicts: Optional[list] = None
    frame_gap_mm: Optional[list] = None  # the commanded hand's distance from the object's start (world_model_eval)

    @property
    def twin_success(self) -> Optional[bool]:
        """Success as the twin's simulation sees it (its predicate held after some executed action); None without."""
        return None if self.twin_verdicts is None else any(self.twin_verdicts)

    @property
    def twin_step(self) -> Optional[int]:
        """The executed action after which the twin's predicate first held (1-based); None without or never."""
        return next((i + 1 for i, v in enumerate(self.twin_verdicts or []) if v), None)

    def to_json(self) -> dict:
        out = {"scene": self.scene, "success": self.success, "steps": self.steps}
        for key in ("chunks", "judged", "judged_step", "frame_judged", "frame_true", "frame_error_mm", "frame_margin",
                    "frame_arm_mm", "draw_success", "draw_margin", "twin_verdicts", "frame_gap_mm"):
            value = getattr(self, key)
            if value is not None or (key == "judged_step" and self.judged is not None):
                out[key] = value
        return out

    @classmethod
    def from_json(cls, d: dict) -> "EpisodeOutcome":
        """Every field of its type: a scene id and step counts integers >= 0, verdicts true/false (a string such as
        "false" is refused, never read as a success), per-frame verdicts lists of true/false, readings lists of
        finite numbers (distances — the arm's offset, the commanded hand's gap, the judge's errors — >= 0); with
        several noise draws each draw's verdict and margin (one entry per draw), with a full-scene twin its
        verdicts."""
        optional = {k: _count(d, k, 0, optional=True) for k in ("chunks", "judged_step")}
        draws, draw_margin = _flags(d, "draw_success"), _numbers(d, "draw_margin")
        if (draws is None) != (draw_margin is None) or \
                (draws is not None and (not draws or len(draws) != len(draw_margin))):
            raise MalformedResult("fields 'draw_success' and 'draw_margin' must both be absent or lists of one "
                                  "entry per noise draw")
        return cls(_count(d, "scene", 0), typed(d, "success", "bool"), _count(d, "steps", 0), optional["chunks"],
                   typed(d, "judged", "bool", "null", default=None), optional["judged_step"],
                   _flags(d, "frame_judged"), _flags(d, "frame_true"), _rows(d, "frame_error_mm"),
                   _numbers(d, "frame_margin"), _numbers(d, "frame_arm_mm", 0), draws, draw_margin,
                   _flags(d, "twin_verdicts"), _numbers(d, "frame_gap_mm", 0))

    @property
    def soft(self) -> float:
        """The share of the world model's noise draws judged successful (the verdict itself with one draw)."""
        return float(np.mean(self.draw_success)) if self.draw_success else float(self.success)


def _draws(d: dict) -> int:
    value = typed(d, "draws", "int", default=1)
    if value < 1:
        raise MalformedResult(f"field 'draws' must be a whole number >= 1; got {value}")
    return value


def _count(d: dict, key: str, low: int, optional: bool = False) -> Optional[int]:
    """``d[key]``: an integer >= ``low`` (or, ``optional``, null or absent), else MalformedResult naming it."""
    value = typed(d, key, "int", "null", default=None) if optional else typed(d, key, "int")
    if value is not None and value < low:
        raise MalformedResult(f"field {key!r} must be an integer >= {low}; got {value}")
    return value


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _finite(d: dict, key: str, low: float = -math.inf, optional: bool = False) -> Optional[float]:
    """``d[key]``: a finite number >= ``low`` (or, ``optional``, null or absent), else MalformedResult naming it."""
    value = typed(d, key, "number", "null", default=None) if optional else typed(d, key, "number")
    if value is None:
        return None
    if not math.isfinite(value) or value < low:
        raise MalformedResult(f"field {key!r} must be a finite number >= {low:g}; got {value!r}")
    return float(value)


def _numbers(d: dict, key: str, low: float = -math.inf) -> Optional[list]:
    """``d[key]``: None or a list of finite numbers >= ``low`` (a per-frame reading; ``low`` 0: a distance), else
    MalformedResult naming it."""
    value = typed(d, key, "list", "null", default=None)
    if value is not None and not all(finite_number(v) and v >= low for v in value):
        raise MalformedResult(f"field {key!r} must be a list of finite numbers" + (f" >= {low:g} (distances)"
                                                                                    if low > -math.inf else ""))
    return value


def _rows(d: dict, key: str) -> Optional[list]:
    """``d[key]``: None or a list of rows (one per frame) of as many finite numbers >= 0 each (a judge's |error| per
    output, mm), else MalformedResult naming it."""
    value = typed(d, key, "list", "null", default=None)
    if value is not None and not all(isinstance(r, list) and len(r) == len(value[0]) and r and
                                     all(finite_number(v) and v >= 0 for v in r) for r in value):
        raise MalformedResult(f"field {key!r} must be a list of rows (one per frame) of as many finite numbers >= 0 "
                              "(the judge's |error| per output, mm)")
    return value


def _flags(d: dict, key: str) -> Optional[list]:
    """``d[key]``: None or a list of true/false (per-frame verdicts), else MalformedResult naming it."""
    value = typed(d, key, "list", "null", default=None)
    if value is not None and not all(isinstance(v, bool) for v in value):
        raise MalformedResult(f"field {key!r} must be a list of true/false (one verdict per frame)")
    return value


@dataclass(frozen=True)
class PolicyRow:
    """One player's row: each task's rate, the average over tasks (pooled interval), and the seconds its episodes
    took (the simulator's; None where the episodes of all players ran together)."""

    tasks: dict[str, Rate]
    average: Rate
    seconds: Optional[float] = None

    @classmethod
    def of(cls, per_task: dict[str, list[EpisodeOutcome]], tasks, seconds: Optional[float] = None) -> "PolicyRow":
        per = {t: Rate.of(sum(o.success for o in per_task[t]), len(per_task[t])) for t in tasks}
        return cls.of_rates(per, seconds)

    @classmethod
    def of_rates(cls, per: dict[str, Rate], seconds: Optional[float] = None) -> "PolicyRow":
        k, n = sum(r.successes for r in per.values()), sum(r.episodes for r in per.values())
        average = Rate(k, n, float(np.mean([r.rate for r in per.values()])), wilson(k, n))
        return cls(per, average, seconds)

    def to_json(self) -> dict:
        return {"tasks": {t: r.to_json() for t, r in self.tasks.items()}, "average": self.average.to_json(),
                "seconds": self.seconds}

    @classmethod
    def from_json(cls, d: dict) -> "PolicyRow":
        if "tasks" in d:
            tasks = d["tasks"]
        else:  # version 1: the tasks beside "average" and "seconds"
            tasks = {t: r for t, r in d.items() if t not in ("average", "seconds")}
        return cls({t: nested(f"tasks[{t!r}]", Rate.from_json, r) for t, r in tasks.items()},
                   nested("average", Rate.from_json, d["average"]), d.get("seconds"))


Episodes = dict[str, dict[str, list[EpisodeOutcome]]]  # player -> task -> outcomes in scene order


@dataclass(frozen=True)
class Confusion:
    """Verdicts against the truth (``policy.judge.success_judge.confusion``): the counts, and precision, recall,
    accuracy and Cohen's κ (None where undefined)."""

    tp: int
    fp: int
    fn: int
    tn: int
    n: int
    precision: Optional[float]
    recall: Optional[float]
    accuracy: Optional[float]
    kappa: Optional[float]

    def to_json(self) -> dict:
        return {"tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn, "n": self.n, "precision": self.precision,
                "recall": self.recall, "accuracy": self.accuracy, "kappa": self.kappa}

    @classmethod
    def from_json(cls, d: dict) -> "Confusion":
        counts = [_count(d, k, 0) for k in ("tp", "fp", "fn", "tn", "n")]
        if sum(counts[:4]) != counts[4]:
            raise MalformedResult(f"field 'n' ({counts[4]}) is not tp + fp + fn + tn ({sum(counts[:4])})")
        return cls(*counts, *(typed(d, k, "number", "null") for k in ("precision", "recall", "accuracy", "kappa")))


@dataclass(frozen=True)
class TaskValidation:
    """The judge on one task's (or "all") simulator frames (``policy.judge.validation``): its frame and episode verdicts
    against MuJoCo's, and the median |reading − truth| per output in cm (None where no readings were kept)."""

    frame: Confusion
    episode: Confusion
    median_error_cm: Optional[dict[str, float]] = None

    def to_json(self) -> dict:
        out = {"frame": self.frame.to_json(), "episode": self.episode.to_json()}
        if self.median_error_cm is not None:
            out["median_error_cm"] = dict(self.median_error_cm)
        return out

    @classmethod
    def from_json(cls, d: dict) -> "TaskValidation":
        med = d.get("median_error_cm")
        return cls(Confusion.from_json(d["frame"]), Confusion.from_json(d["episode"]),
                   None if med is None else dict(med))


JudgeValidation = dict[str, TaskValidation]  # task (and "all") -> the judge's validation


def validation_json(jv: Optional[JudgeValidation]) -> Optional[dict]:
    return None if jv is None else {t: v.to_json() for t, v in jv.items()}


def validation_from_json(d: Optional[dict]) -> Optional[JudgeValidation]:
    return None if d is None else {t: TaskValidation.from_json(v) for t, v in d.items()}


JUDGE_KEYS = ("benchmark", "consecutive", "weights_sha256")  # what makes two judges the same (not where they lie)


@dataclass(frozen=True)
class JudgeRecord:
    """What an evaluation records about the success judge that judged it (``policy.closed_loop.evaluate.judge_record``):
    the benchmark it was fitted on, its consecutive-frames rule, a digest of its weights, and the folder it was loaded
    from and a digest of its files (None for a judge not loaded from a folder)."""

    benchmark: dict
    consecutive: int
    weights_sha256: str
    path: Optional[str] = None
    sha256: Optional[str] = None

    def to_json(self) -> dict:
        return {"benchmark": self.benchmark, "consecutive": self.consecutive, "weights_sha256": self.weights_sha256,
                "path": self.path, "sha256": self.sha256}

    @classmethod
    def from_json(cls, d: Optional[dict]) -> Optional["JudgeRecord"]:
        if d is None:
            return None
        return cls(typed(d, "benchmark", "dict", "null", default=None),
                   typed(d, "consecutive", "int", "null", default=None),
                   *(typed(d, k, "str", "null", default=None) for k in ("weights_sha256", "path", "sha256")))


def same_judge(a: Optional[JudgeRecord], b: Optional[JudgeRecord]) -> bool:
    """Whether two evaluations' judge records are of the same judge: the same weights, fitted for the same benchmark,
    with the same rule (copies of one judge in two folders are the same judge)."""
    if a is None or b is None:
        return a is b
    return all(getattr(a, k) == getattr(b, k) for k in JUDGE_KEYS)


def _episodes(d: dict) -> Episodes:
    """eval.json's ``episodes`` (player -> task -> outcomes), each outcome named by where it is when malformed."""
    out: Episodes = {}
    for p in typed(d, "episodes", "dict"):
        per = typed(d["episodes"], p, "dict")
        out[p] = {t: [nested(f"episodes[{p!r}][{t!r}][{i}]", EpisodeOutcome.from_json, o)
                      for i, o in enumerate(typed(per, t, "list"))] for t in per}
    return out


@dataclass
class PolicyEvaluation:
    """A closed-loop evaluation of players on held-out scenes, in the simulator (``env`` "synthetic") or inside a world
    model ("world-model"). ``scenes``: task -> scene indices of dataset ``seed`` (drawn with ``layouts``/``jitter``,
    at most ``max_steps`` actions each, frames ``resolution`` (H, W)); ``runs``: what each learned player scored (its
    run folder, checkpoint and step, ``runs.scored.ScoredRun``); ``executed``: actions executed per chunk by each
    player; ``judge``: the success judge's record where one judged (world model) or was validated (simulator), and
    ``judge_validation`` its agreement with MuJoCo on the simulator's frames. World-model evaluations also record the
    world model (``wm``), its sampler settings and timings. ``frames`` (player|task|scene -> uint8 (T, H, W, 3), the
    first scene of each task) is not part of eval.json: the commands keep it in frames.npz."""

    env: str
    seed: int
    per_task: int
    max_steps: int
    tasks: list[str]
    layouts: int
    jitter: float
    resolution: tuple[int, int]
    scenes: dict[str, list[int]]
    rows: dict[str, PolicyRow]
    episodes: Episodes
    runs: dict[str, Optional[ScoredRun]]
    learned: list[str]
    executed: dict[str, int]
    seconds: float
    judge: Optional[JudgeRecord] = None
    judge_validation: Optional[JudgeValidation] = None
    wm: Optional[str] = None
    world_model: Optional[ScoredRun] = None  # the world model's run, checkpoint, step and whether it was finished
    sampler: Optional[dict] = None
    timing: Optional[dict] = None
    episodes_per_minute: Optional[float] = None
    frames: dict = field(default_factory=dict, compare=False, repr=False)
    draws: int = 1  # world-model noise draws per episode (``policy eval --draws``)

    def to_json(self) -> dict:
        body = {"env": self.env, "seed": self.seed, "per_task": self.per_task, "max_steps": self.max_steps,
                "tasks": list(self.tasks), "layouts": self.layouts, "jitter": self.jitter,
                "resolution": list(self.resolution), "scenes": self.scenes, "learned": list(self.learned),
                "executed": self.executed, "runs": {n: r and r.to_json() for n, r in self.runs.items()},
                "judge": None if self.judge is None else self.judge.to_json(), "wm": self.wm,
                "world_model": self.world_model and self.world_model.to_json(),
                "sampler": self.sampler, "seconds": self.seconds, "timing": self.timing,
                "episodes_per_minute": self.episodes_per_minute, "draws": self.draws,
                "rows": {n: r.to_json() for n, r in self.rows.items()},
                "judge_validation": validation_json(self.judge_validation),
                "episodes": {p: {t: [o.to_json() for o in os_] for t, os_ in per.items()}
                             for p, per in self.episodes.items()}}
        return tagged(POLICY_EVALUATION, FORMAT_VERSION, body)

    @classmethod
    def from_json(cls, d: dict, version: int = FORMAT_VERSION) -> "PolicyEvaluation":
        """From ``to_json``'s dict, or a version-1 eval.json (one ``execute`` for the learned players, none recorded
        in the simulator). Every count, seed and setting of its type (``_count``, ``_finite``), every episode typed
        (``EpisodeOutcome.from_json``, named by player, task and position), and the episodes those the rows and
        scenes say (:meth:`episode_problems`): else MalformedResult naming the field."""
        learned = list(typed(d, "learned", "list", default=[]))
        executed = typed(d, "executed", "dict", "null", default=None)
        if executed is None:
            executed = {p: d["execute"] for p in learned} if d.get("execute") is not None else {}
        resolution = typed(d, "resolution", "list")
        if len(resolution) != 2 or not all(_is_int(v) and v > 0 for v in resolution):
            raise MalformedResult(f"field 'resolution' must be [height, width] in pixels; got {resolution!r:.80}")
        scenes, tasks = typed(d, "scenes", "dict"), typed(d, "tasks", "list")
        for task, ids in scenes.items():
            if not isinstance(ids, list) or not all(_is_int(i) and i >= 0 for i in ids):
                raise MalformedResult(f"field 'scenes': task {task!r} must list integer scene ids >= 0")
        for task in tasks:  # `policy eval` draws --per-task >= 1 scenes of every task
            if not isinstance(task, str) or not scenes.get(task):
                raise MalformedResult(f"field 'scenes': task {task!r} of 'tasks' has no scenes (an evaluation draws "
                                      "at least one scene of every task)")
        ev = cls(env=typed(d, "env", "str"), seed=typed(d, "seed", "int"), per_task=_count(d, "per_task", 0),
                 max_steps=_count(d, "max_steps", 1), tasks=list(tasks),
                 layouts=_count(d, "layouts", 0), jitter=_finite(d, "jitter", 0.0), resolution=tuple(resolution),
                 scenes={t: list(v) for t, v in scenes.items()},
                 rows={n: nested(f"rows[{n!r}]", PolicyRow.from_json, r) for n, r in typed(d, "rows", "dict").items()},
                 episodes=_episodes(d),
                 runs={n: r and nested(f"runs[{n!r}]", ScoredRun.from_json, r)
                       for n, r in (typed(d, "runs", "dict", "null", default=None) or {}).items()}, learned=learned,
                 executed=dict(executed),
                 seconds=_finite(d, "seconds", 0.0), judge=nested("judge", JudgeRecord.from_json, d.get("judge")),
                 judge_validation=validation_from_json(d.get("judge_validation")),
                 wm=d.get("wm"),
                 world_model=d.get("world_model") and ScoredRun.from_json(d["world_model"]),
                 sampler=d.get("sampler"), timing=d.get("timing"),
                 episodes_per_minute=_finite(d, "episodes_per_minute", 0.0, optional=True), draws=_draws(d))
        problems = ev.episode_problems()
        if problems:
            raise MalformedResult("its episodes are not those its rows and scenes say (cut short or edited?): "
                                  + "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3
                                                               else ""))
        return ev

    def episode_problems(self) -> list[str]:
        """Where the episodes disagree with the evaluation's own rows and scenes (an eval.json cut short or edited):
        a player with a row and no episodes (it would drop out of every statistic read from the episodes) or
        episodes and no row, a task the evaluation does not have, an episode on a scene it did not draw or two on
        one scene, episodes of another number of noise draws than ``draws`` (K > 1: K verdicts each; one draw:
        none), a row that counts other successes or episodes than are there."""
        out = []
        for p in self.rows:
            if not any(self.episodes.get(p, {}).values()):
                out.append(f"policy {p!r} has a row ({self.rows[p].average.episodes} episodes) but no episodes")
        for p, per in self.episodes.items():
            if p not in self.rows:
                out.append(f"policy {p!r} has episodes but no row")
            if p not in self.rows or not any(per.values()):
                continue
            for t in dict.fromkeys([*per, *self.rows[p].tasks]):
                outs = per.get(t, [])
                if t not in self.tasks:
                    out.append(f"policy {p!r} has task {t!r}, not one of the evaluation's tasks {self.tasks}")
                    continue
                ids = [o.scene for o in outs]
                foreign = sorted(set(ids) - set(self.scenes.get(t, [])))
                if foreign:
                    out.append(f"policy {p!r}, task {t}: episodes on scenes {foreign[:6]} the evaluation did not draw")
                twice = sorted({i for i in ids if ids.count(i) > 1})
                if twice:
                    out.append(f"policy {p!r}, task {t}: two episodes on scene {twice[0]}")
                drawn = sorted({len(o.draw_success or []) for o in outs} - {self.draws if self.draws > 1 else 0})
                if drawn:  # 'draws' K: every episode holds K draws' verdicts (one draw: none)
                    out.append(f"policy {p!r}, task {t}: episodes hold {drawn[0]} noise draws' verdicts "
                               f"(draw_success), but the evaluation's 'draws' is {self.draws}")
                rate = self.rows[p].tasks.get(t)
                k = sum(o.success for o in outs)
                if rate is None or (rate.successes, rate.episodes) != (k, len(outs)):
                    counted = "no count" if rate is None else f"{rate.successes}/{rate.episodes}"
                    out.append(f"policy {p!r}, task {t}: its row counts {counted}, its episodes hold {k}/{len(outs)}")
        return out

    @classmethod
    def read(cls, folder: str | Path, what: str) -> "PolicyEvaluation":
        """FOLDER/eval.json, or a ConfigError naming ``what`` (the flag) and what the file holds instead, or the
        field that is missing or malformed."""
        return read_typed(Path(folder) / "eval.json", POLICY_EVALUATION, FORMAT_VERSION, what, cls.from_json)

    def write(self, folder: str | Path) -> None:
        """FOLDER/eval.json (this result, tagged) and FOLDER/eval.md (its table), each written atomically."""
        from simforcing.utils import atomic_write_json, atomic_write_text

        atomic_write_json(Path(folder) / "eval.json", self.to_json())
        atomic_write_text(Path(folder) / "eval.md", evaluation_markdown(self) + "\n")


# ----------------------------------------------------------------------------------------------------------------------
# The success table (eval.md): beside the evaluation, so that writing it needs no other module
# ----------------------------------------------------------------------------------------------------------------------


def evaluation_markdown(ev: PolicyEvaluation) -> str:
    """eval.md: the success table (a simulator evaluation's with unfinished runs named under it and, made with a
    judge, the judge's validation)."""
    if ev.env == WORLD_MODEL:
        return format_table(ev.rows, list(ev.tasks))
    text = table_with_notes(ev.rows, list(ev.tasks), ev.runs)
    if ev.judge_validation:
        text += "\n\n" + "\n".join(judge_validation_md(ev.judge_validation))
    return text


def scored_labels(scored: dict) -> tuple[dict, list[str]]:
    """For the runs an evaluation scored (name -> ``runs.scored.ScoredRun``, or None): table labels that mark an
    unfinished run, and one note line for each."""
    labels, notes = {}, []
    for name, rec in scored.items():
        note = rec.unfinished_note(name) if rec is not None else None
        if note is not None:
            labels[name] = f"{name} (unfinished run, step {rec.step})"
            notes.append(f"Note: {note}")
    return labels, notes


def table_with_notes(rows: dict[str, PolicyRow], tasks: list[str], scored: dict) -> str:
    """:func:`format_table` with unfinished runs marked in their row and named under the table."""
    labels, notes = scored_labels(scored)
    return format_table(rows, tasks, labels) + ("\n\n" + "\n".join(notes) if notes else "")


def rate_cell(r: Rate) -> str:
    """"rate [low, high]" in percent."""
    lo, hi = r.ci95
    return f"{100 * r.rate:.0f} [{100 * lo:.0f}, {100 * hi:.0f}]"


def format_table(rows: dict[str, PolicyRow], tasks: list[str], labels: dict | None = None) -> str:
    """Tab. 5's layout: rows = policy (setting × initialisation), columns = tasks + average; success % [95 % CI]."""
    labels = labels or {}
    lines = ["| policy | " + " | ".join(tasks) + " | average |", "|---" * (len(tasks) + 2) + "|"]
    for name, r in rows.items():
        lines.append(f"| {labels.get(name, name)} | " + " | ".join(rate_cell(r.tasks[t]) for t in tasks)
                     + f" | {rate_cell(r.average)} |")
    return "\n".join(lines)


def judge_validation_md(jv: JudgeValidation) -> list[str]:
    """The judge's validation (``policy.judge.validation``) as a markdown table (``policy agreement``, and ``policy
    eval --judge`` in the simulator)."""
    from simforcing.utils import fmt_num  # torch: only where a table is rendered

    lines = ["The judge on the simulator's own frames against MuJoCo's verdicts:", "",
             "| task | frames: precision | recall | κ | episodes: precision | recall | κ |",
             "|---|---|---|---|---|---|---|"]
    for t, v in jv.items():
        f, e = v.frame, v.episode
        lines.append(f"| {t} | {fmt_num(f.precision, 2)} | {fmt_num(f.recall, 2)} | {fmt_num(f.kappa, 2)} "
                     f"| {fmt_num(e.precision, 2)} | {fmt_num(e.recall, 2)} | {fmt_num(e.kappa, 2)} |")
    med = {t: v.median_error_cm for t, v in jv.items() if v.median_error_cm is not None}
    if med:
        lines += ["", "Its readings against the simulator's truth, median |error| over every frame (cm; r = hand − "
                  "object, d = object's displacement):", "",
                  "| task | " + " | ".join(JUDGE_OUTPUTS) + " |", "|---|" + "---|" * len(JUDGE_OUTPUTS)]
        lines += [f"| {t} | " + " | ".join(f"{m[k]:.1f}" for k in JUDGE_OUTPUTS) + " |" for t, m in med.items()]
    return lines


# ----------------------------------------------------------------------------------------------------------------------
# The agreement of world-model evaluations with the simulator's (``policy.agreement.statistics``)
# ----------------------------------------------------------------------------------------------------------------------


def _stat_json(v: float) -> Optional[float]:
    """A statistic as agreement.json holds it: null where it is undefined (NaN: e.g. no spread), so that the file is
    standard JSON (a bare NaN is not) and every reader sees "undefined", never a number."""
    return None if v is None or not math.isfinite(v) else float(v)


def _shares(d: dict, key: str) -> dict[str, dict[str, float]]:
    """agreement.json ``episode_agreement``: per environment, "all" and each policy's share of episodes agreeing —
    numbers in [0, 1]; anything else a MalformedResult naming the environment (a share of text was formatted as one
    by the tables and the demo's report)."""
    table = typed(d, key, "dict")
    for env, per in table.items():
        if not isinstance(per, dict) or "all" not in per or \
                not all(finite_number(v) and 0 <= v <= 1 for v in per.values()):
            raise MalformedResult(f"field {key!r}: {env!r} must map 'all' and each policy to a share in [0, 1]; got "
                                  f"{per!r:.80}")
    return table


def _stat_read(d: dict, key: str) -> float:
    """A statistic of agreement.json: a finite number, or null (and NaN, as an earlier version wrote it) read as NaN
    (undefined); anything else a MalformedResult naming it."""
    v = typed(d, key, "number", "null")
    if v is not None and math.isinf(v):
        raise MalformedResult(f"field {key!r} must be a finite number or null (undefined); got {v!r}")
    return math.nan if v is None else float(v)


def _interval_read(d: dict, key: str) -> tuple:
    """An interval of agreement.json: two finite numbers, or (None, None) where no resample defined it."""
    ci = typed(d, key, "list")
    if len(ci) != 2 or not (ci == [None, None] or all(finite_number(v) for v in ci)):
        raise MalformedResult(f"field {key!r} must be two finite numbers or [null, null]; got {ci!r:.80}")
    return tuple(ci)


@dataclass(frozen=True)
class RankingStats:
    """Agreement of ``n_policies`` policies' average success across two environments: Pearson, Spearman and MMRV,
    each with its 95 % bootstrap interval over scenes ((None, None) where no resample defined it; NaN where the point
    value is undefined, e.g. no spread — null in agreement.json)."""

    n_policies: int
    pearson: float
    pearson_ci95: tuple
    spearman: float
    spearman_ci95: tuple
    mmrv: float
    mmrv_ci95: tuple

    def to_json(self) -> dict:
        return {"n_policies": self.n_policies, "pearson": _stat_json(self.pearson),
                "pearson_ci95": list(self.pearson_ci95), "spearman": _stat_json(self.spearman),
                "spearman_ci95": list(self.spearman_ci95), "mmrv": _stat_json(self.mmrv),
                "mmrv_ci95": list(self.mmrv_ci95)}

    @classmethod
    def from_json(cls, d: Optional[dict]) -> Optional["RankingStats"]:
        if d is None:
            return None
        return cls(_count(d, "n_policies", 2), _stat_read(d, "pearson"), _interval_read(d, "pearson_ci95"),
                   _stat_read(d, "spearman"), _interval_read(d, "spearman_ci95"), _stat_read(d, "mmrv"),
                   _interval_read(d, "mmrv_ci95"))


@dataclass(frozen=True)
class JudgeHeldFixed:
    """A world model against the simulator's frames read by the same judge (the judge's errors held fixed): ranking
    over all policies and over the learned ones (None with fewer than two), and the share of episodes agreeing."""

    all: RankingStats
    learned: Optional[RankingStats]
    episodes_agreeing: float

    def to_json(self) -> dict:
        return {"all": self.all.to_json(), "learned": None if self.learned is None else self.learned.to_json(),
                "episodes_agreeing": self.episodes_agreeing}

    @classmethod
    def from_json(cls, d: dict) -> "JudgeHeldFixed":
        return cls(RankingStats.from_json(d["all"]), RankingStats.from_json(d.get("learned")),
                   float(d["episodes_agreeing"]))


@dataclass(frozen=True)
class ReferenceComparison:
    """A world model against a reference world model on the same episodes (``policy agreement --reference``, e.g. a
    few-step student against its teacher): its ranking against the reference's success (``to_reference``), the share
    of episodes with the reference's verdict, and the paired differences of its agreement with the simulator (all
    policies): Pearson and MMRV minus the reference's, each with a 95 % bootstrap interval on the same scene draws."""

    reference: str
    to_reference: RankingStats
    episodes_agreeing: float
    pearson_diff: float
    pearson_diff_ci95: tuple
    mmrv_diff: float
    mmrv_diff_ci95: tuple

    def to_json(self) -> dict:
        return {"reference": self.reference, "to_reference": self.to_reference.to_json(),
                "episodes_agreeing": self.episodes_agreeing, "pearson_diff": _stat_json(self.pearson_diff),
                "pearson_diff_ci95": list(self.pearson_diff_ci95), "mmrv_diff": _stat_json(self.mmrv_diff),
                "mmrv_diff_ci95": list(self.mmrv_diff_ci95)}

    @classmethod
    def from_json(cls, d: dict) -> "ReferenceComparison":
        return cls(typed(d, "reference", "str"), nested("to_reference", RankingStats.from_json, d["to_reference"]),
                   _finite(d, "episodes_agreeing", 0.0), _stat_read(d, "pearson_diff"),
                   _interval_read(d, "pearson_diff_ci95"), _stat_read(d, "mmrv_diff"),
                   _interval_read(d, "mmrv_diff_ci95"))


@dataclass
class AgreementResult:
    """``policy agreement``: per policy its success in the simulator (``sim``) and in each environment (``envs``: the
    world models, and the simulator's frames through the judge where the simulator evaluation was judged); per
    environment the ranking statistics by subset ("all", "learned", "all, TASK only"; None where a subset has fewer
    than two policies) and the share of episodes with the simulator's verdict (``episode_agreement``: "all" and per
    policy); the judge's validation; each world model with the judge held fixed. ``matched``: what every compared
    evaluation shared (scenes, step settings, judge), ``scatter`` / ``videos``: the pictures written beside it;
    ``world_models``: each world model's run, checkpoint and step as its evaluation recorded them (empty in an
    agreement written before they were kept; ``fidelity`` reads them)."""

    players: list[str]
    learned: list[str]
    tasks: list[str]
    scenes: int
    sim: dict[str, Rate]
    envs: dict[str, dict[str, Rate]]
    ranking: dict[str, dict[str, Optional[RankingStats]]]
    episode_agreement: dict[str, dict[str, float]]
    judge_validation: Optional[JudgeValidation]
    vs_judged_simulator: dict[str, JudgeHeldFixed]
    n_boot: int
    matched: dict = field(default_factory=dict)
    scatter: Optional[str] = None
    videos: list[str] = field(default_factory=list)
    vs_reference: dict[str, ReferenceComparison] = field(default_factory=dict)  # --reference: the others against it
    world_models: dict[str, Optional[ScoredRun]] = field(default_factory=dict)  # each --wm's run, checkpoint, step

    def to_json(self) -> dict:
        body = {"players": self.players, "learned": self.learned, "tasks": self.tasks, "scenes": self.scenes,
                "matched": self.matched, "sim": {p: r.to_json() for p, r in self.sim.items()},
                "envs": {e: {p: r.to_json() for p, r in rows.items()} for e, rows in self.envs.items()},
                "ranking": {e: {k: None if s is None else s.to_json() for k, s in v.items()}
                            for e, v in self.ranking.items()},
                "episode_agreement": self.episode_agreement,
                "judge_validation": validation_json(self.judge_validation),
                "vs_judged_simulator": {e: v.to_json() for e, v in self.vs_judged_simulator.items()},
                "n_boot": self.n_boot, "scatter": self.scatter, "videos": self.videos,
                "vs_reference": {e: v.to_json() for e, v in self.vs_reference.items()},
                "world_models": {e: r and r.to_json() for e, r in self.world_models.items()}}
        return tagged(AGREEMENT, FORMAT_VERSION, body)

    @classmethod
    def from_json(cls, d: dict, version: int = FORMAT_VERSION) -> "AgreementResult":
        return cls(players=list(d["players"]), learned=list(d["learned"]), tasks=list(d["tasks"]),
                   scenes=_count(d, "scenes", 1), sim={p: Rate.from_json(r) for p, r in d["sim"].items()},
                   envs={e: {p: Rate.from_json(r) for p, r in rows.items()} for e, rows in d["envs"].items()},
                   ranking={e: {k: RankingStats.from_json(s) for k, s in v.items()} for e, v in d["ranking"].items()},
                   episode_agreement=_shares(d, "episode_agreement"),
                   judge_validation=validation_from_json(d.get("judge_validation")),
                   vs_judged_simulator={e: JudgeHeldFixed.from_json(v)
                                        for e, v in (d.get("vs_judged_simulator") or {}).items()},
                   n_boot=_count(d, "n_boot", 1), matched=d.get("matched") or {}, scatter=d.get("scatter"),
                   videos=list(d.get("videos") or []),
                   vs_reference={e: ReferenceComparison.from_json(v)
                                 for e, v in (d.get("vs_reference") or {}).items()},
                   world_models={e: r and nested(f"world_models: {e}", ScoredRun.from_json, r)
                                 for e, r in typed(d, "world_models", "dict", default={}).items()})

    @classmethod
    def read(cls, folder: str | Path, what: str) -> "AgreementResult":
        """FOLDER/agreement.json, or a ConfigError naming ``what`` and what the file holds instead, or the field that
        is missing or malformed."""
        return read_typed(Path(folder) / "agreement.json", AGREEMENT, FORMAT_VERSION, what, cls.from_json)
