"""The two sides of a prediction-powered estimate: ground-truth trials and world-model episodes, keyed alike.

An episode is keyed ``(policy, task, scene)``: the policy's name as the world-model evaluation names it, the task
(``reach``, ``push``, ``grasp`` in the synthetic benchmark) and the scene (start configuration) id of the evaluation.

Ground truth comes from a **trial file** — what a user records of real-robot trials, one line per trial:

    CSV (header required):  policy,task,scene,success
                            expert,push,17,1
    JSONL:                  {"policy": "expert", "task": "push", "scene": 17, "success": true}

(``success``: 1/0, true/false, yes/no; ``scene`` a non-negative integer) — or from a simulator evaluation folder
(``policy eval --env synthetic``: MuJoCo's verdict on every episode). Every trial must name a policy, task and scene
the world-model evaluation ran (so its world-model episode exists); a trial given twice is refused. Each error names
the file, the line and the field, and says what to do.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from simforcing.errors import ConfigError, DataError
from simforcing.policy.closed_loop.results import SIMULATOR, WORLD_MODEL, PolicyEvaluation
from simforcing.policy.estimate.trust import FEATURES, episode_features, has_readings
from simforcing.result_files import POLICY_EVALUATION

Key = tuple[str, str, int]  # (policy, task, scene)
TRIAL_FIELDS = ("policy", "task", "scene", "success")
_TRUE, _FALSE = {"1", "true", "yes", "success"}, {"0", "false", "no", "failure"}


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

    def index(self) -> dict[Key, int]:
        return {k: i for i, k in enumerate(self.keys)}

    @property
    def soft(self) -> np.ndarray:
        """(E,) the share of the world model's noise draws judged successful (the verdict with one draw)."""
        return self.verdicts + self.features[:, FEATURES.index("soft_shift")]

    @property
    def policies(self) -> list[str]:
        return list(dict.fromkeys(k[0] for k in self.keys))


def world_model_episodes(folder: str | Path, what: str = "--wm-eval") -> WorldModelEpisodes:
    """FOLDER/eval.json of a world-model evaluation -> its episodes, or a ConfigError naming the flag."""
    ev = PolicyEvaluation.read(folder, what)
    if ev.env != WORLD_MODEL:
        raise ConfigError(f"{what} {folder}: a {ev.env} evaluation; expected a world-model evaluation (`simforcing "
                          "policy eval --env world-model --wm RUN --judge J ...`)")
    keys, feats, verdicts, readings = [], [], [], True
    for policy, per in ev.episodes.items():
        for task, outs in per.items():
            for o in outs:
                keys.append((policy, task, int(o.scene)))
                feats.append(episode_features(o.success, o.frame_judged, o.frame_margin, o.frame_arm_mm,
                                              o.draw_success))
                verdicts.append(bool(o.success))
                readings &= has_readings(o.frame_margin, o.frame_arm_mm)
    if not keys:
        raise ConfigError(f"{what} {folder}: the evaluation holds no episodes")
    return WorldModelEpisodes(keys, np.array(feats).reshape(len(keys), len(FEATURES)), np.array(verdicts, bool),
                              readings, str(folder), ev)


def simulator_truth(folder: str | Path, what: str = "--ground-truth") -> tuple[dict[Key, bool], PolicyEvaluation]:
    """FOLDER/eval.json of a simulator evaluation -> MuJoCo's verdict per episode."""
    ev = PolicyEvaluation.read(folder, what)
    if ev.env != SIMULATOR:
        raise ConfigError(f"{what} {folder}: a {ev.env} evaluation; the ground truth is a simulator evaluation "
                          "(`simforcing policy eval --env synthetic ...`) or a trial file (CSV or JSONL)")
    return {(p, t, int(o.scene)): bool(o.success) for p, per in ev.episodes.items() for t, outs in per.items()
            for o in outs}, ev


def _bool(value, path: Path, line: int) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    s = str(value).strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise DataError(f"line {line}, field 'success': got {value!r}; a trial's outcome is binary — write 1 or 0 "
                    "(true/false)", path=path)


def _scene(value, path: Path, line: int) -> int:
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        scene = int(str(value).strip()) if not isinstance(value, (int, float)) else int(value)
    except (TypeError, ValueError):
        raise DataError(f"line {line}, field 'scene': got {value!r}; expected the scene's integer id in the "
                        "world-model evaluation (its eval.json 'scenes')", path=path) from None
    if scene < 0:
        raise DataError(f"line {line}, field 'scene': got {scene}; scene ids are non-negative", path=path)
    return scene


def _rows(path: Path) -> list[tuple[int, dict]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise DataError("no such trial file; give a CSV or JSONL file of real-robot trials (policy,task,scene,"
                        "success) or a simulator evaluation folder", path=path) from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read the trial file ({type(e).__name__}: {e})", path=path) from None
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
    if path.suffix.lower() != ".csv":
        raise DataError(f"unknown trial file type {path.suffix or '(none)'!r}; write .csv (header policy,task,scene,"
                        "success) or .jsonl", path=path)
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [f for f in TRIAL_FIELDS if f not in header]
    if missing:
        raise DataError(f"header {','.join(header) or '(empty)'}: missing {', '.join(missing)}; the first line "
                        f"names the columns {','.join(TRIAL_FIELDS)}", path=path)
    return [(i, {k.strip(): v for k, v in row.items() if k is not None}) for i, row in enumerate(reader, 2)]


def read_trials(path: str | Path, wm: WorldModelEpisodes) -> dict[Key, bool]:
    """A trial file -> ground truth per episode key, validated against the world-model evaluation ``wm``."""
    path = Path(path)
    rows = _rows(path)
    if not rows:
        raise DataError("no trials in the file", path=path)
    index = wm.index()
    policies, tasks = set(wm.policies), {k[1] for k in wm.keys}
    out: dict[Key, bool] = {}
    first_line: dict[Key, int] = {}
    for line, row in rows:
        for f in TRIAL_FIELDS:
            if row.get(f) in (None, ""):
                raise DataError(f"line {line}: field {f!r} is missing or empty", path=path)
        policy, task = str(row["policy"]).strip(), str(row["task"]).strip()
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
    return out


def ground_truth(source: str | Path, wm: WorldModelEpisodes, what: str = "--ground-truth"
                 ) -> tuple[dict[Key, bool], Optional[PolicyEvaluation]]:
    """``--ground-truth``: a simulator evaluation folder (every episode's MuJoCo verdict; the evaluation is returned
    too, its scenes must be the world model's) or a trial file."""
    p = Path(source)
    if p.is_dir():
        truth, ev = simulator_truth(p, what)
        missing = [k for k in wm.keys if k not in truth]
        if missing:
            k = missing[0]
            raise ConfigError(f"{what} {p}: has no episode {k[0]} / {k[1]} / scene {k[2]} of the world-model "
                              f"evaluation {wm.source} ({len(missing)} of {len(wm.keys)} missing); evaluate the same "
                              "policies on the same scenes in the simulator (same --scene-seed, --per-task, layouts)")
        return truth, ev
    if p.suffix.lower() == ".json":
        raise DataError(f"a JSON file; give the folder of a simulator evaluation ({POLICY_EVALUATION}) or a trial "
                        "file (.csv or .jsonl)", path=p)
    return read_trials(p, wm), None
