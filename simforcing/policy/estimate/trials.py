"""The two sides of a prediction-powered estimate: ground-truth trials and world-model episodes, keyed alike.

An episode is keyed ``(policy, task, scene)``: the policy's name as the world-model evaluation names it, the task
(``reach``, ``push``, ``grasp`` in the synthetic benchmark) and the scene (start configuration) id of the evaluation.

Ground truth comes from a **trial file** — what a user records of real-robot trials, one line per trial:

    CSV (header required):  policy,task,scene,success
                            expert,push,17,1
    JSONL:                  {"policy": "expert", "task": "push", "scene": 17, "success": true}

(``success``: 1/0, true/false, yes/no; ``scene`` a non-negative integer) — or from a simulator evaluation folder
(``policy eval --env synthetic``: MuJoCo's verdict on every episode) of the same scenes and policies (dataset seed,
layouts, jitter, step limit, frame size; each policy the same run, checkpoint and step: :func:`truth_differences`).
Every trial must name a policy, task and scene the world-model evaluation ran (so its world-model episode exists); a
trial given twice is refused, and every estimated policy needs at least :data:`MIN_TRIALS` trials. Each error names
the file, the line and the field, and says what to do.

What spreadsheets write is read as they write it: a UTF-8 byte-order mark (Excel's "CSV UTF-8") or UTF-16 text, ``;``
or tab as the separator (the header says which), header names in any case, rows left empty (``,,,``) skipped, a scene
written ``17.0`` and an outcome ``TRUE`` / ``1.0``.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from simforcing.errors import ConfigError, DataError
from simforcing.policy.closed_loop.results import SIMULATOR, WORLD_MODEL, PolicyEvaluation
from simforcing.policy.estimate.trust import FEATURES, episode_features, has_readings
from simforcing.result_files import POLICY_EVALUATION

Key = tuple[str, str, int]  # (policy, task, scene)
TRIAL_FIELDS = ("policy", "task", "scene", "success")
HAND_TASKS = ("reach",)  # the benchmark's tasks whose predicate is on the hand (push and grasp: on the object)
MIN_TRIALS = 2  # per estimated policy: one trial says nothing of its outcomes' spread
_TRUE, _FALSE = {"1", "true", "yes", "success"}, {"0", "false", "no", "failure"}
_SEPARATORS = (",", ";", "\t")  # a spreadsheet's CSV: commas, or semicolons where the comma is the decimal mark
# the scene settings a simulator ground truth must share with the world-model evaluation (a superset of its scenes
# and policies is fine: every world-model episode's scene is looked up by its id)
TRUTH_SETTINGS = ("seed", "max_steps", "layouts", "jitter", "resolution")


@dataclass(frozen=True)
class WorldModelEpisodes:
    """Every episode of a world-model evaluation: its features (``trust.FEATURES``) and the judge's verdict (draw 0's
    with several noise draws, ``soft`` the share of draws judged successful); ``readings``: whether the evaluation
    recorded per-frame margins and arm readings (else only the verdict is known); ``source``: the folder."""

    keys: list[Key]
    features: np.ndarray  # (E, len(FEATURES))
    verdicts: np.ndarray  # (E,) bool
    readings: bool
    source: str
    evaluation: PolicyEvaluation
    left_out: tuple[str, ...] = ()  # the evaluation's policies not estimated (``--policies``)
    without_readings: int = 0  # episodes that hold no per-frame readings
    twin: bool = False  # every episode holds a full-scene twin's own verdict (``EpisodeOutcome.twin_verdicts``)
    gaps: bool = False  # every episode holds the commanded hand's distance per frame (``frame_gap_mm``)
    # the (task, scene) of the evaluation each episode is (a resampled pool's, ``estimate.resample_scenes``, where a
    # scene drawn twice is two keys but one scene); None: each key's own
    origins: Optional[tuple[tuple[str, int], ...]] = None

    def index(self) -> dict[Key, int]:
        return {k: i for i, k in enumerate(self.keys)}

    def scene_of(self, i: int) -> tuple[str, int]:
        """The (task, scene) episode ``i`` was run on — what cross-fitting keeps in one fold."""
        return self.keys[i][1:] if self.origins is None else self.origins[i]

    @property
    def soft(self) -> np.ndarray:
        """(E,) the share of the world model's noise draws judged successful (the verdict with one draw)."""
        return self.verdicts + self.features[:, FEATURES.index("soft_shift")]

    @property
    def twin_verdicts(self) -> np.ndarray:
        """(E,) the full-scene twin's own verdict per episode (0 where the evaluation had none)."""
        return self.features[:, FEATURES.index("twin")]

    @property
    def policies(self) -> list[str]:
        return list(dict.fromkeys(k[0] for k in self.keys))

    def kinematic(self, objects: str) -> np.ndarray:
        """(E,) a verdict with the hand where the executed actions put it (``trust.hand_success``) for every task whose
        predicate is on the hand, and for the others ``objects``: ``"world model"`` — the world model's verdict on its
        frames (``soft``: the share of its noise draws with several), what it alone can say (where the objects go) —
        or ``"stay"`` — failure: the objects stay where they started, the world model unused. None of it is fitted:
        the features ``hand_verdict`` and ``hand_reached`` (``trust.episode_features``)."""
        if not self.gaps:
            raise ConfigError(f"the episodes of {self.source} hold no commanded hand per frame (frame_gap_mm: an "
                              "evaluation by an earlier simforcing); evaluate the policies in the world model again "
                              "(`simforcing policy eval --env world-model`)")
        return self.features[:, FEATURES.index("hand_verdict" if objects == "world model" else "hand_reached")].copy()


def world_model_episodes(folder: str | Path, what: str = "--wm-eval",
                         policies: Optional[Sequence[str]] = None) -> WorldModelEpisodes:
    """FOLDER/eval.json of a world-model evaluation -> the episodes of ``policies`` (default: every policy it
    evaluated), or a ConfigError naming the flag (an unknown policy names the evaluation's)."""
    ev = PolicyEvaluation.read(folder, what)
    if ev.env != WORLD_MODEL:
        raise ConfigError(f"{what} {folder}: a {ev.env} evaluation; expected a world-model evaluation (`simforcing "
                          "policy eval --env world-model --wm RUN --judge J ...`)")
    every = list(ev.episodes)
    chosen = every if policies is None else list(dict.fromkeys(policies))
    unknown = [p for p in chosen if p not in ev.episodes]
    if unknown or not chosen:
        raise ConfigError(f"--policies: {', '.join(map(repr, unknown)) or 'none given'}: expected policies of the "
                          f"world-model evaluation {folder} (its policies: {', '.join(every)})")
    keys, feats, verdicts, bare, twin, gaps = [], [], [], 0, True, True
    for policy in chosen:
        for task, outs in ev.episodes[policy].items():
            for o in outs:
                keys.append((policy, task, int(o.scene)))
                feats.append(episode_features(o.success, o.frame_judged, o.frame_margin, o.frame_arm_mm,
                                              o.draw_success, o.twin_success, o.frame_gap_mm, task in HAND_TASKS))
                twin &= o.twin_verdicts is not None
                verdicts.append(bool(o.success))
                bare += not has_readings(o.frame_margin, o.frame_arm_mm)
                gaps &= o.frame_gap_mm is not None
    if not keys:
        raise ConfigError(f"{what} {folder}: the evaluation holds no episodes")
    return WorldModelEpisodes(keys, np.array(feats).reshape(len(keys), len(FEATURES)), np.array(verdicts, bool),
                              bare == 0, str(folder), ev, tuple(p for p in every if p not in chosen), bare, twin, gaps)



def simulator_truth(folder: str | Path, what: str = "--ground-truth") -> tuple[dict[Key, bool], PolicyEvaluation]:
    """FOLDER/eval.json of a simulator evaluation -> MuJoCo's verdict per episode."""
    ev = PolicyEvaluation.read(folder, what)
    if ev.env != SIMULATOR:
        raise ConfigError(f"{what} {folder}: a {ev.env} evaluation; the ground truth is a simulator evaluation "
                          "(`simforcing policy eval --env synthetic ...`) or a trial file (CSV or JSONL)")
    return {(p, t, int(o.scene)): bool(o.success) for p, per in ev.episodes.items() for t, outs in per.items()
            for o in outs}, ev


def _number(value) -> Optional[float]:
    """A JSON number or a numeral as a spreadsheet writes it ("17", "17.0", " 1 "), else None (booleans too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        return None


def _bool(value, path: Path, line: int) -> bool:
    if isinstance(value, bool):
        return value
    if _number(value) in (0.0, 1.0):
        return _number(value) == 1.0
    s = str(value).strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise DataError(f"line {line}, field 'success': got {value!r}; a trial's outcome is binary — write 1 or 0 "
                    "(true/false)", path=path)


def _scene(value, path: Path, line: int) -> int:
    x = _number(value)
    if x is None or not x.is_integer():  # NaN and ±inf are not integers either
        raise DataError(f"line {line}, field 'scene': got {value!r}; expected the scene's integer id in the "
                        "world-model evaluation (its eval.json 'scenes')", path=path)
    scene = value if isinstance(value, int) else int(x)  # a JSON integer as it is (no float rounding)
    if scene < 0:
        raise DataError(f"line {line}, field 'scene': got {scene}; scene ids are non-negative", path=path)
    return scene


def _text(path: Path) -> str:
    """The trial file's text: UTF-8 (a byte-order mark dropped) or UTF-16 with its mark (a spreadsheet's "Unicode
    text"), else a DataError saying how to save it."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError("no such trial file; give a CSV or JSONL file of real-robot trials (policy,task,scene,"
                        "success) or a simulator evaluation folder", path=path) from None
    except OSError as e:
        raise DataError(f"cannot read the trial file ({type(e).__name__}: {e})", path=path) from None
    try:
        return raw.decode("utf-16") if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(f"not UTF-8 text (byte {raw[e.start:e.start + 1]!r} at offset {e.start}); save the trial "
                        "file as UTF-8 (a spreadsheet's \"CSV UTF-8\")", path=path) from None


def _header(line: str) -> tuple[str, list[str]]:
    """The separator of a CSV header line (the first of ``_SEPARATORS`` that splits it into every trial field) and
    its column names, stripped and lower-cased."""
    for sep in _SEPARATORS:
        names = [h.strip().strip('"').strip().lower() for h in line.split(sep)]
        if all(f in names for f in TRIAL_FIELDS):
            return sep, names
    return ",", [h.strip().lower() for h in line.split(",")]


def _rows(path: Path) -> list[tuple[int, dict]]:
    text = _text(path)
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        rows = []
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"line {i}: not JSON ({e.msg}); one JSON object per line", path=path) from None
            if not isinstance(obj, dict):
                raise DataError(f"line {i}: a JSON {type(obj).__name__}; expected an object with "
                                f"{', '.join(TRIAL_FIELDS)}", path=path)
            rows.append((i, obj))
        return rows
    if path.suffix.lower() not in (".csv", ".tsv"):
        raise DataError(f"unknown trial file type {path.suffix or '(none)'!r}; write .csv (header policy,task,scene,"
                        "success) or .jsonl", path=path)
    lines = text.splitlines()
    sep, header = _header(lines[0] if lines else "")
    missing = [f for f in TRIAL_FIELDS if f not in header]
    if missing:
        raise DataError(f"header {sep.join(header) or '(empty)'}: missing {', '.join(missing)}; the first line "
                        f"names the columns {','.join(TRIAL_FIELDS)}", path=path)
    twice = sorted({h for h in header if h and header.count(h) > 1})
    if twice:
        raise DataError(f"header: column {twice[0]!r} is named twice; keep one", path=path)
    reader = csv.reader(lines[1:], delimiter=sep)
    rows = []
    for i, values in enumerate(reader, 2):
        if not any(v.strip() for v in values):  # an empty line, or a spreadsheet's empty row (",,,")
            continue
        rows.append((i, {h: v for h, v in zip(header, values) if h}))
    return rows


def read_trials(path: str | Path, wm: WorldModelEpisodes) -> dict[Key, bool]:
    """A trial file -> ground truth per episode key, validated against the world-model evaluation ``wm``."""
    return _read_trials(Path(path), wm)[0]


def _read_trials(path: Path, wm: WorldModelEpisodes) -> tuple[dict[Key, bool], dict[str, int]]:
    """:func:`read_trials` and the trials it passed over: per policy of the evaluation left out of the estimate
    (``wm.left_out``), its trials' count."""
    rows = _rows(path)
    if not rows:
        raise DataError("no trials in the file", path=path)
    index = wm.index()
    policies, tasks = set(wm.policies), {k[1] for k in wm.keys}
    out: dict[Key, bool] = {}
    first_line: dict[Key, int] = {}
    passed: dict[str, int] = {}
    for line, row in rows:
        for f in TRIAL_FIELDS:
            if row.get(f) in (None, ""):
                raise DataError(f"line {line}: field {f!r} is missing or empty", path=path)
        policy, task = str(row["policy"]).strip(), str(row["task"]).strip()
        if policy in wm.left_out:
            passed[policy] = passed.get(policy, 0) + 1
            continue
        if policy not in policies:
            raise DataError(f"line {line}, field 'policy': {policy!r} is not in the world-model evaluation "
                            f"{wm.source} (its policies: {', '.join(sorted(policies))}); name the policy as that "
                            "evaluation does, or evaluate it there too", path=path)
        if task not in tasks:
            raise DataError(f"line {line}, field 'task': {task!r}; the world-model evaluation's tasks are "
                            f"{', '.join(sorted(tasks))}", path=path)
        key = (policy, task, _scene(row["scene"], path, line))
        if key not in index:
            scenes = sorted(k[2] for k in wm.keys if k[:2] == key[:2])
            raise DataError(f"line {line}, field 'scene': {key[2]} is not a {task} scene of the world-model "
                            f"evaluation (its {task} scenes: {scenes[:12]}{' …' if len(scenes) > 12 else ''}); a "
                            "trial must start where a world-model episode started", path=path)
        if key in out:
            raise DataError(f"line {line}: the trial {policy} / {task} / scene {key[2]} is also on line "
                            f"{first_line[key]}; each scene is one trial per policy — keep one", path=path)
        out[key] = _bool(row["success"], path, line)
        first_line[key] = line
    return out, passed


def check_trial_counts(truth: dict[Key, bool], wm: WorldModelEpisodes, path: Path) -> None:
    """A DataError naming every estimated policy with fewer than :data:`MIN_TRIALS` trials (none: it would drop out
    of the estimate; one: its interval would rest on no spread at all)."""
    counts = {p: 0 for p in wm.policies}
    for key in truth:
        counts[key[0]] += 1
    short = {p: c for p, c in counts.items() if c < MIN_TRIALS}
    others = [p for p in wm.policies if p not in short]
    if short:
        raise DataError(", ".join(f"policy {p!r} has {c or 'no'} trial{'' if c == 1 else 's'}" for p, c in short.items())
                        + f"; every policy of the estimate needs at least {MIN_TRIALS} — add trials of "
                        + ("it" if len(short) == 1 else "them")
                        + (f", or estimate the others alone with --policies {' '.join(others)}" if others else ""),
                        path=path)


def truth_differences(wm: PolicyEvaluation, sim: PolicyEvaluation, policies: Sequence[str]) -> list[str]:
    """How a simulator evaluation differs from the world-model evaluation it is the ground truth of: a scene
    setting (``TRUTH_SETTINGS``: the same scene ids would be other scenes, or episodes of another length), or a
    policy that scored another run, checkpoint or step, or executed another number of actions per chunk."""
    from simforcing.policy.agreement.statistics import policy_differences, scene_differences

    return ([f"scenes: {d}" for d in scene_differences(wm, sim, TRUTH_SETTINGS)]
            + policy_differences(wm, sim, "--ground-truth", list(policies), episodes=False))


@dataclass(frozen=True)
class GroundTruth:
    """``--ground-truth`` read: the truth per episode key, the simulator evaluation it came from (None for a trial
    file) and what was passed over (notes for the user)."""

    truth: dict[Key, bool]
    simulator: Optional[PolicyEvaluation]
    notes: tuple[str, ...] = ()


def ground_truth(source: str | Path, wm: WorldModelEpisodes, what: str = "--ground-truth") -> GroundTruth:
    """``--ground-truth``: a simulator evaluation folder (every episode's MuJoCo verdict; its scenes and policies
    must be the world model's: :func:`truth_differences`) or a trial file (:func:`read_trials`, every estimated
    policy with at least :data:`MIN_TRIALS` trials)."""
    p = Path(source)
    if p.is_dir():
        truth, ev = simulator_truth(p, what)
        diffs = truth_differences(wm.evaluation, ev, wm.policies)
        if diffs:
            raise ConfigError(f"{what} {p}: not the ground truth of the world-model evaluation {wm.source} — "
                              + "; ".join(diffs) + " (here: --wm-eval, there: --ground-truth); evaluate the same "
                              "policies on the same scenes in the simulator (the same --scene-seed, --layouts, "
                              "--jitter, --max-steps and runs)")
        missing = [k for k in wm.keys if k not in truth]
        if missing:
            k = missing[0]
            raise ConfigError(f"{what} {p}: has no episode {k[0]} / {k[1]} / scene {k[2]} of the world-model "
                              f"evaluation {wm.source} ({len(missing)} of {len(wm.keys)} missing); evaluate the same "
                              "policies on the same scenes in the simulator (same --scene-seed, --per-task, layouts)")
        return GroundTruth(truth, ev)
    if p.suffix.lower() == ".json":
        raise DataError(f"a JSON file; give the folder of a simulator evaluation ({POLICY_EVALUATION}) or a trial "
                        "file (.csv or .jsonl)", path=p)
    truth, passed = _read_trials(p, wm)
    check_trial_counts(truth, wm, p)
    notes = tuple(f"{c} trial{'' if c == 1 else 's'} of {name!r} not used (left out by --policies)"
                  for name, c in passed.items())
    return GroundTruth(truth, None, notes)
