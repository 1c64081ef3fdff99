"""How faithful a world model is as a simulator, in a few numbers read from results its commands already wrote
(docs/ROLLOUTS.md), and the fidelity–compute curve over several trained models.

    point = fidelity_point(oracle="eval_oracle", twin="rollout_twin", wm_eval="wm_twin", agreement="agreement",
                           wm_name="simforcing-twin", runs=["stage1", "stage2"])      # a FidelityPoint
    point.write("fidelity/")                              # fidelity.json (tagged) + fidelity.md
    point = FidelityPoint.read("fidelity/", "--points")   # or a ConfigError naming the flag, the file and the field
    FidelityCurve({"2x2": p1, "1x1": p2, ...}).write("curve/")   # fidelity_curve.json + .md + .png

The numbers, each optional (a missing input leaves its entry out; nothing is guessed):

- **oracle** (:class:`OracleWindow`): the one-window action error (cm) and PSNR with the recorded simulation video as
  the condition (``evaluate --sample.condition=oracle``): how well the real branch renders what an exact condition
  shows;
- **twin** (:class:`TwinDrift`): the rollout's drift over its chunks with the digital twin's rendering as every
  chunk's condition (``rollout --sample.condition=render --rows rollout restart``): rollout − restarted, in cm and dB,
  so that only the real branch can drift;
- **still** (:class:`StillChange`): the do-nothing frame change — the mean absolute change (0–255) of the world
  model's frame at policy step 5, 10 and 30 against its first frame while the commanded arm does not move (``policy
  eval --env world-model`` keeps the first scene of each task in frames.npz); the simulator's is about 0.01;
- **inside** (:class:`Inside`): how the world model ranks the policies against the simulator (``policy agreement``):
  Pearson of the success rates over every policy with its interval, MMRV, and the clean scripted expert's success
  inside it (a statistic the agreement left undefined — no spread — is recorded as null);
- **training** (:class:`TrainingCost`): the core-seconds of the training runs that made the model (the sum of each
  run's process CPU time, the ``core_s`` of its metrics row — for the world model's own run, the row at its
  checkpoint's step), or a number measured outside (``core_s=``).

A point is one world model's: each measurement records the world model its input was made with (run, checkpoint,
step: :class:`WorldModelId`, read from the input's own record), and inputs of two different world models — or
training runs that do not include the world model's run — are refused by name. Each number is compared with the aim
of docs/ROLLOUTS.md (``AIMS``; how they stand: docs/notebook/faithful.md); the comparison is written beside it.

Every input is read through its own typed reader (``WindowEvaluation``, ``RolloutDrift``, ``PolicyEvaluation``,
``AgreementResult``), and the point and the curve through theirs: a missing, ill-typed or non-finite field is a
ConfigError naming the file and the field, never a traceback. fidelity.json is ``format: simforcing.fidelity``,
``format_version: 2`` (version 1, written before the world model was recorded, reads the same, its world model
unknown); fidelity_curve.json holds every point in full and the headline table.
"""

from __future__ import annotations

import json
import math
import os
import typing
import zipfile
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Optional, Sequence

import numpy as np

from simforcing.data.format import read_episodes, read_info, read_splits
from simforcing.errors import ConfigError, DataError
from simforcing.evaluate.results import FORMAT_VERSION as WINDOW_VERSION, RolloutDrift, WindowEvaluation
from simforcing.policy.closed_loop.results import (ENV_NAMES, FORMAT_VERSION as POLICY_VERSION, WORLD_MODEL,
                                                   AgreementResult, PolicyEvaluation)
from simforcing.outputs import results_folder
from simforcing.result_files import (AGREEMENT, FIDELITY, FIDELITY_CURVE, KIND_NAMES, POLICY_EVALUATION,
                                     ROLLOUT_DRIFT, WINDOW_EVALUATION, MalformedResult, nested, read_typed, tagged,
                                     typed)
from simforcing.runs.folder import METRICS_FILE
from simforcing.runs.scored import ScoredRun
from simforcing.utils import atomic_write, atomic_write_json, atomic_write_text

FORMAT_VERSION = 2  # 2: the world model of each measurement and of the point; 1: none recorded
STILL_PLAYER = "do nothing (floor)"  # the policy evaluation's do-nothing player (frames.npz keys "player|task|scene")
CLEAN_EXPERT = "scripted expert (ceiling)"
JUDGE_ON_SIM = "simulator frames through the judge"  # an agreement's environment that is not a world model
STILL_STEPS = (5, 10, 30)
POINT_FILES = ("fidelity.json", "fidelity.md")
CURVE_FILES = ("fidelity_curve.json", "fidelity_curve.md", "fidelity_curve.png", "fidelity_curve_data.png")


@dataclass(frozen=True)
class Aim:
    key: str  # the headline's field (``Headline``)
    label: str
    bound: float
    below: bool = True  # met when value <= bound (else value >= bound)

    def met(self, value: Optional[float]) -> Optional[bool]:
        if value is None or not math.isfinite(value):
            return None
        return value <= self.bound if self.below else value >= self.bound


# the aims (docs/notebook/faithful.md, "The aims") for the demo's default world model (issue 44)
AIMS = (Aim("oracle_af_cm", "oracle condition, one window: action error (cm)", 4.0),
        Aim("twin_drift_cm", "twin, rollout − restarted: action error (cm)", 2.0),
        Aim("twin_drift_db", "twin, restarted − rollout: PSNR (dB)", 1.0),
        Aim("still_30", "do-nothing frame change by step 30 (0–255)", 2.0),
        Aim("pearson", "inside the world model: Pearson with the simulator", 0.85, below=False),
        Aim("clean_expert", "inside the world model: the clean expert's success", 0.70, below=False))


# -- reading records field by field ------------------------------------------------------------------------------------
def _value(tp: Any, v: Any, key: str) -> Any:
    """``v`` as the annotation ``tp`` of a record's field says (float: a finite number; int; str; bool; Optional,
    tuple[X, ...], dict[str, X]; a record: its ``from_json``), else a MalformedResult naming ``key``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union:  # Optional[X]: None, or NaN where X is a number (undefined, as the inputs mean it)
        inner = next(a for a in args if a is not type(None))
        undefined = v is None or (inner is float and isinstance(v, float) and math.isnan(v))
        return None if undefined else _value(inner, v, key)
    if tp is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise MalformedResult(f"field {key!r} must be a finite number; got {v!r:.80}")
        return float(v)
    if tp in (int, str, bool):
        return typed({key: v}, key, tp.__name__)
    if origin is tuple:
        return tuple(_value(args[0], x, f"{key}[{i}]") for i, x in enumerate(typed({key: v}, key, "list")))
    if origin is dict:
        return {str(k): _value(args[1], x, f"{key}.{k}") for k, x in typed({key: v}, key, "dict").items()}
    return nested(key, tp.from_json, v)


def _from_fields(cls: Any, d: Any) -> Any:
    """A record of ``cls`` from its JSON object, every field read by its annotation (``_value``); a field with a
    default may be absent (a file of an older version)."""
    if not isinstance(d, dict):
        raise MalformedResult(f"expected an object for {cls.__name__}; got a JSON {type(d).__name__}")
    hints = typing.get_type_hints(cls)
    got = {}
    for f in fields(cls):
        if f.name in d:
            got[f.name] = _value(hints[f.name], d[f.name], f.name)
        elif f.default is MISSING and f.default_factory is MISSING:
            raise MalformedResult(f"field {f.name!r} is missing")
    return cls(**got)


def _json(record: Any) -> dict:
    """A record's fields as JSON (tuples as lists, nested records by their ``to_json``)."""
    return {f.name: (v.to_json() if hasattr(v, "to_json") else list(v) if isinstance(v, tuple) else v)
            for f in fields(record) for v in [getattr(record, f.name)]}


class _Record:
    """A record of this module: its JSON is its fields (``_json``), read back field by field (``_from_fields``), each
    number within its field's ``BOUNDS`` (a count, a distance, a rate: an edited -5 core-seconds or a success of 7 is
    named, never plotted) and the record whole (``problem``: e.g. one frame change per step)."""

    BOUNDS: ClassVar[dict[str, tuple[float, float]]] = {}

    def to_json(self) -> dict:
        return _json(self)

    def problem(self) -> Optional[str]:
        """What makes the record inconsistent as a whole (None: nothing)."""
        return None

    @classmethod
    def from_json(cls, d: Any):
        rec = _from_fields(cls, d)
        for key, (low, high) in cls.BOUNDS.items():
            value = getattr(rec, key)
            values = value.values() if isinstance(value, dict) else value if isinstance(value, tuple) else [value]
            bad = [v for v in values if v is not None and not low <= v <= high]
            if bad:
                within = f">= {low:g}" if high == math.inf else f"within [{low:g}, {high:g}]"
                raise MalformedResult(f"field {key!r} must be {within}; got {bad[0]!r}")
        problem = rec.problem()
        if problem:
            raise MalformedResult(problem)
        return rec


def _finite(v: Any, key: str = "value") -> Optional[float]:
    """A statistic an input left undefined (None, NaN: no spread) as None, else the number (a value that is no
    number: a MalformedResult naming ``key``)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise MalformedResult(f"field {key!r} must be a number; got {v!r:.80}")
    return float(v) if math.isfinite(v) else None


def _interval(ci: Optional[Sequence], key: str) -> Optional[tuple]:
    if ci is not None and not isinstance(ci, (list, tuple)):
        raise MalformedResult(f"field {key!r} must be a list of two numbers; got {ci!r:.80}")
    return None if ci is None else tuple(_finite(x, f"{key}[{i}]") for i, x in enumerate(ci))


# -- which world model -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorldModelId(_Record):
    """The world model an input was made with, as the input recorded it: its run folder, checkpoint and step (None
    where the input does not say)."""

    run: str
    step: Optional[int] = None
    checkpoint: Optional[str] = None

    @classmethod
    def of(cls, scored: Optional[ScoredRun]) -> Optional["WorldModelId"]:
        return None if scored is None or scored.run is None else cls(scored.run, scored.step, scored.checkpoint)

    def same_as(self, other: "WorldModelId") -> bool:
        """The same run folder (as written, resolved, or the same folder on disk) at the same step (where both
        say)."""
        if self.step is not None and other.step is not None and self.step != other.step:
            return False
        a, b = Path(self.run), Path(other.run)
        if a == b or a.resolve() == b.resolve():
            return True
        try:
            return os.path.samefile(a, b)
        except OSError:
            return False

    def describe(self) -> str:
        return self.run + ("" if self.step is None else f" at step {self.step}")


def _input_file(path: str | Path, name: str, kind: str, what: str) -> Path:
    """The file ``name`` in the folder ``path`` (or ``path``, a file), refused by name when nothing is there."""
    path = Path(path)
    if not path.exists():
        want, command = KIND_NAMES[kind]
        raise ConfigError(f"{what}: {path} does not exist; give the folder `{command}` wrote ({want})")
    return path / name if path.is_dir() else path


def _record_field(record: dict, key: str, f: Path, what: str, *types: str):
    """``record[key]`` of an input's untyped record (its sampler settings, its checkpoint), None where absent."""
    try:
        return typed(record, key, *types, default=None)
    except MalformedResult as e:
        raise ConfigError(f"{what}: {f} has a malformed record ({e}); run the command that wrote it again") from None


def _measured(v: Optional[float], key: str, f: Path, what: str, command: str) -> float:
    """A measurement the point is built on: a finite number, else a ConfigError naming the file and the field."""
    if v is None or not math.isfinite(v):
        raise ConfigError(f"{what}: {f} has no finite {key} ({v!r}); {command}")
    return float(v)


def _check_condition(cond: Any, want: str, f: Path, what: str, made: str, command: str) -> None:
    if cond != want:
        raise ConfigError(f"{what}: {f} was {made} with the condition {cond!r}; give {command}")


# -- the measurements --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OracleWindow(_Record):
    """The one-window evaluation with the oracle condition: action error and its floor (cm), PSNR, arm PSNR, the
    guidance w, seconds per window, the windows and the folder."""

    af_cm: float
    floor_cm: Optional[float]
    psnr: float
    psnr_arm: Optional[float]
    w: Optional[float]
    latency_s: Optional[float]
    windows: int
    folder: str
    world_model: Optional[WorldModelId] = None

    BOUNDS = {"af_cm": (0, math.inf), "floor_cm": (0, math.inf), "latency_s": (0, math.inf), "windows": (1, math.inf)}

    @classmethod
    def measure(cls, path: str | Path, what: str = "--oracle") -> "OracleWindow":
        """The evaluation at ``path`` (a folder of ``evaluate``, or its eval.json), which must have used the oracle
        condition and the state probe."""
        f = _input_file(path, "eval.json", WINDOW_EVALUATION, what)
        ev = read_typed(f, WINDOW_EVALUATION, WINDOW_VERSION, what, WindowEvaluation.from_json)
        again = "evaluate with `simforcing evaluate ... --sample.condition=oracle --eval.probe=PROBE`"
        _check_condition(ev.sampler.get("condition"), "oracle", f, what, "evaluated",
                         "an evaluation made with `simforcing evaluate ... --sample.condition=oracle`")
        a, s = ev.scores.action, ev.scores
        if a.af_pos is None:
            raise ConfigError(f"{what}: {f} has no action error (af_pos); evaluate with --eval.probe=PROBE")
        return cls(af_cm=100 * _measured(a.af_pos, "af_pos", f, what, again), floor_cm=_cm(a.af_floor_pos),
                   psnr=_measured(s.psnr, "psnr", f, what, again), psnr_arm=_finite(s.psnr_arm),
                   w=_finite(_record_field(ev.sampler, "w", f, what, "number", "null")),
                   latency_s=_finite(s.latency_s), windows=s.num_samples, folder=str(f.parent),
                   world_model=WorldModelId.of(ev.checkpoint))


@dataclass(frozen=True)
class TwinDrift(_Record):
    """The rollout with the twin as every chunk's condition: the mean over chunks of the rollout and the restarted
    rows (cm, dB), the drift between them and the last chunk's error."""

    chunks: int
    episodes: int
    rollout_cm: float
    restart_cm: float
    drift_cm: float
    rollout_psnr: float
    restart_psnr: float
    drift_db: float
    last_chunk_cm: float
    folder: str
    world_model: Optional[WorldModelId] = None

    BOUNDS = {"chunks": (1, math.inf), "episodes": (1, math.inf), "rollout_cm": (0, math.inf),
              "restart_cm": (0, math.inf), "last_chunk_cm": (0, math.inf)}

    @classmethod
    def measure(cls, path: str | Path, what: str = "--twin") -> "TwinDrift":
        """The rollout at ``path`` (``rollout``'s folder or rollout.json), made with the twin as every chunk's
        condition and with the rollout and restart rows."""
        f = _input_file(path, "rollout.json", ROLLOUT_DRIFT, what)
        r = read_typed(f, ROLLOUT_DRIFT, WINDOW_VERSION, what, RolloutDrift.from_json)
        again = "roll out with `simforcing rollout ... --sample.condition=render --rows rollout restart`"
        _check_condition(r.sampler.get("condition"), "render", f, what, "rolled out", "a rollout made with "
                         "`simforcing rollout ... --sample.condition=render --rows rollout restart`")
        missing = [k for k in ("rollout", "restart") if k not in r.rows]
        if missing:
            raise ConfigError(f"{what}: {f} has no {' or '.join(missing)} row; roll out with --rows rollout restart")
        ro, rs = r.rows["rollout"], r.rows["restart"]
        if ro.mean.get("af_pos") is None or rs.mean.get("af_pos") is None:
            raise ConfigError(f"{what}: {f} has no action error (af_pos); roll out with --eval.probe=PROBE")
        num = {f"{row}.{k}": _measured(_number(x.mean.get(k)), f"rows.{row}.mean.{k}", f, what, again)
               for row, x in (("rollout", ro), ("restart", rs)) for k in ("af_pos", "psnr")}
        chunks = ro.per_chunk.get("af_pos") or [None]
        last = _measured(_number(chunks[-1]), "rows.rollout.per_chunk.af_pos", f, what, again)
        step = _record_field(r.checkpoint, "step", f, what, "int", "null")
        ckpt = _record_field(r.checkpoint, "path", f, what, "str", "null")
        return cls(chunks=r.chunks, episodes=r.num_episodes, rollout_cm=100 * num["rollout.af_pos"],
                   restart_cm=100 * num["restart.af_pos"],
                   drift_cm=100 * (num["rollout.af_pos"] - num["restart.af_pos"]),
                   rollout_psnr=num["rollout.psnr"], restart_psnr=num["restart.psnr"],
                   drift_db=num["restart.psnr"] - num["rollout.psnr"], last_chunk_cm=100 * last,
                   folder=str(f.parent), world_model=WorldModelId(r.run, step, ckpt))


def _number(v: Any) -> Optional[float]:
    """A value of a result's untyped table (a rollout row's mean): a number or None (anything else: NaN)."""
    if v is None:
        return None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


@dataclass(frozen=True)
class StillChange(_Record):
    """The do-nothing frame change of a world-model policy evaluation: for each step t, the mean over pixels and
    episodes of |frame_t − frame_0| (0–255)."""

    steps: tuple[int, ...]
    change: tuple[float, ...]
    episodes: int
    folder: str
    world_model: Optional[WorldModelId] = None

    BOUNDS = {"steps": (0, math.inf), "change": (0, 255), "episodes": (1, math.inf)}

    def problem(self) -> Optional[str]:
        if len(self.steps) != len(self.change):
            return (f"fields 'steps' and 'change' must hold one frame change per step; got {len(self.steps)} steps and "
                    f"{len(self.change)} changes")
        return None

    def at(self, step: int) -> Optional[float]:
        return dict(zip(self.steps, self.change)).get(step)

    @classmethod
    def measure(cls, path: str | Path, player: str = STILL_PLAYER, steps: Sequence[int] = STILL_STEPS,
                what: str = "--wm-eval") -> "StillChange":
        """From a ``policy eval --env world-model`` folder (its eval.json says which world model; its frames.npz keeps
        the first scene of each task): an episode shorter than t uses its last frame."""
        folder = Path(path).parent if Path(path).is_file() else Path(path)  # the folder, or a file of it
        _input_file(folder, "eval.json", POLICY_EVALUATION, what)  # nothing there: refused by name
        ev = PolicyEvaluation.read(folder, what)
        if ev.env != WORLD_MODEL:
            name = ENV_NAMES.get(ev.env, f"an evaluation in {ev.env!r}")
            raise ConfigError(f"{what}: {folder / 'eval.json'} is {name}, not one inside a world model; give the "
                              "folder `simforcing policy eval --env world-model` wrote (the do-nothing frame change "
                              "is the world model's)")
        f = folder / "frames.npz"
        if not f.is_file():
            raise ConfigError(f"{what}: {f} does not exist; give the folder `simforcing policy eval` wrote (it keeps "
                              "the first scene of each task in frames.npz)")
        again = "run `simforcing policy eval --env world-model` again"
        try:
            with np.load(f, allow_pickle=False) as z:
                keys = [k for k in z.files if k.split("|")[0] == player]
                if not keys:
                    players = sorted({k.split("|")[0] for k in z.files})
                    raise ConfigError(f"{what}: {f} has no episode of {player!r} (it holds "
                                      f"{', '.join(players) or 'none'}); evaluate with the baselines on "
                                      "(no --no-baselines)")
                per = [_frame_change(z[k], steps, f"{f}: {k!r}", what, again) for k in keys]
        except ConfigError:
            raise
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise ConfigError(f"{what}: {f} cannot be read ({e}); {again}") from None
        mean = np.mean(np.array(per), axis=0)
        return cls(tuple(steps), tuple(float(v) for v in mean), len(per), str(folder),
                   WorldModelId.of(ev.world_model))


def _frame_change(frames: np.ndarray, steps: Sequence[int], where: str, what: str, again: str) -> list[float]:
    if frames.ndim != 4 or frames.shape[0] < 1 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ConfigError(f"{what}: {where} is {frames.dtype} {tuple(frames.shape)}, not uint8 frames (T, H, W, 3); "
                          f"{again}")
    x = frames.astype(np.float64)
    return [float(np.abs(x[min(t, len(x) - 1)] - x[0]).mean()) for t in steps]


@dataclass(frozen=True)
class Inside(_Record):
    """The world model ``wm`` in an agreement: Pearson over every policy with its interval, Spearman, MMRV (None where
    the agreement left them undefined), and the clean expert's success inside it."""

    wm: str
    pearson: Optional[float]
    pearson_ci95: Optional[tuple[Optional[float], ...]]
    spearman: Optional[float]
    mmrv: Optional[float]
    n_policies: Optional[int]
    clean_expert: Optional[float]
    clean_expert_ci95: Optional[tuple[Optional[float], ...]]
    scenes: int
    folder: str
    world_model: Optional[WorldModelId] = None

    BOUNDS = {"pearson": (-1, 1), "pearson_ci95": (-1, 1), "spearman": (-1, 1), "mmrv": (0, 1),
              "n_policies": (2, math.inf), "clean_expert": (0, 1), "clean_expert_ci95": (0, 1), "scenes": (1, math.inf)}

    def problem(self) -> Optional[str]:
        bad = [k for k in ("pearson_ci95", "clean_expert_ci95") if getattr(self, k) not in (None, ())
               and len(getattr(self, k)) != 2]
        return f"field {bad[0]!r} must be an interval of two numbers (or null)" if bad else None

    @classmethod
    def measure(cls, path: str | Path, wm_name: Optional[str] = None, what: str = "--agreement") -> "Inside":
        """From ``policy agreement``'s folder or agreement.json; without ``wm_name`` the agreement must hold one
        world model."""
        f = _input_file(path, "agreement.json", AGREEMENT, what)
        a = read_typed(f, AGREEMENT, POLICY_VERSION, what, AgreementResult.from_json)
        wms = [k for k in a.ranking if k != JUDGE_ON_SIM]
        if wm_name is None:
            if len(wms) != 1:
                raise ConfigError(f"{what}: {f} holds the world models {', '.join(wms) or 'none'}; say which with "
                                  "--wm-name")
            wm_name = wms[0]
        if wm_name not in wms:
            raise ConfigError(f"--wm-name: {f} has no world model {wm_name!r} (it holds {', '.join(wms) or 'none'})")
        rank = a.ranking[wm_name].get("all")
        expert = a.envs.get(wm_name, {}).get(CLEAN_EXPERT)
        try:
            return cls(wm=wm_name, pearson=rank and _finite(rank.pearson, "pearson"),
                       pearson_ci95=rank and _interval(rank.pearson_ci95, "pearson_ci95"),
                       spearman=rank and _finite(rank.spearman, "spearman"), mmrv=rank and _finite(rank.mmrv, "mmrv"),
                       n_policies=rank and rank.n_policies, clean_expert=expert and _finite(expert.rate, "rate"),
                       clean_expert_ci95=expert and _interval(expert.ci95, "ci95"), scenes=a.scenes,
                       folder=str(f.parent), world_model=WorldModelId.of(a.world_models.get(wm_name)))
        except MalformedResult as e:
            raise ConfigError(f"{what}: {f} has a malformed field of {wm_name!r} ({e}); run `simforcing policy "
                              "agreement` again") from None


@dataclass(frozen=True)
class TrainingCost(_Record):
    """The core-seconds of the runs that trained the model: their sum (None when a run did not record it), each
    run's (None: not recorded, or given as a whole), the runs without a record, how it was measured ("metrics core_s"
    or "given") and the step of each run's metrics row read."""

    core_s: Optional[float]
    runs: dict[str, Optional[float]]
    measured: str
    not_recorded: Optional[tuple[str, ...]] = None
    steps: Optional[dict[str, Optional[int]]] = None

    BOUNDS = {"core_s": (0, math.inf), "runs": (0, math.inf), "steps": (0, math.inf)}

    def to_json(self) -> dict:
        """Its fields; a given number lists no runs without a record and no steps (as version 1 wrote it)."""
        return {k: v for k, v in _json(self).items() if v is not None or k == "core_s"}

    @classmethod
    def given(cls, core_s: float, runs: Sequence[str | Path] = ()) -> "TrainingCost":
        return cls(float(core_s), {str(r): None for r in runs}, "given")

    @classmethod
    def measure(cls, runs: Sequence[str | Path], world_model: Optional[WorldModelId] = None,
                what: str = "--runs") -> "TrainingCost":
        """Each run's ``core_s`` (process CPU time, kept across resumes) from its metrics: the last row, or for the
        world model's own run the last row at or before its checkpoint's step; None for a run from before simforcing
        measured it (``fidelity point --core-s`` then gives a number measured outside)."""
        per, steps = {}, {}
        for run in runs:
            own = world_model is not None and world_model.same_as(WorldModelId(str(run)))
            step, per[str(run)] = _core_s(Path(run), world_model.step if own else None, what)
            steps[str(run)] = step
        missing = tuple(r for r, v in per.items() if v is None)
        return cls(None if missing else sum(per.values()), per, "metrics core_s", missing, steps)


@dataclass(frozen=True)
class TrainingData(_Record):
    """What the world model was trained on (the data axis of the curve): its run's dataset (``data.root`` of the run's
    config.json), its paired training episodes (all, and those in the policy benchmark's layouts), and the operators
    that drove them — the synthetic benchmark's ``data synth`` settings (``scripted``; else the noisy, pausing and
    failing operators' levels and the recipe, where the dataset records them)."""

    root: str
    paired: int
    layout: int
    operators: str
    action_noise: Optional[float] = None
    pauses: Optional[int] = None
    failures: Optional[float] = None

    BOUNDS = {"paired": (0, math.inf), "layout": (0, math.inf), "action_noise": (0, math.inf),
              "pauses": (0, math.inf), "failures": (0, 1)}

    @classmethod
    def measure(cls, runs: Sequence[str | Path], world_model: Optional[WorldModelId] = None,
                what: str = "--runs") -> Optional["TrainingData"]:
        """From the world model's own run among ``runs`` (else the last run given): None where its dataset is no longer
        there to read (the point then has no data axis, said in fidelity.md)."""
        own = [r for r in runs if world_model is not None and world_model.same_as(WorldModelId(str(r)))]
        run = Path(own[0] if own else runs[-1])
        try:
            root = Path(json.loads((run / "config.json").read_text())["data"]["root"])
            info, splits = read_info(root), read_splits(root)
            episodes = read_episodes(root)
        except (OSError, ValueError, KeyError, TypeError, ConfigError, DataError):
            return None
        train = [e for e in splits.get("train", []) if e in episodes and episodes[e].has_real]
        synth = info.get("synth") or {}
        layout = int(synth.get("layout_train") or 0)
        noise = (synth.get("action_noise") or {}).get("sigma_max") if "train" in ((synth.get("action_noise") or {})
                                                                                    .get("splits") or ()) else None
        pauses = (synth.get("pauses") or {}).get("per_episode") if "train" in ((synth.get("pauses") or {})
                                                                               .get("splits") or ()) else None
        failures = (synth.get("failures") or {}).get("fraction") if "train" in ((synth.get("failures") or {})
                                                                                .get("splits") or ()) else None
        mix = [f"noise ≤ {100 * noise:g} cm" if noise else "", f"{pauses} pauses" if pauses else "",
               f"{100 * failures:g} % failing" if failures else ""]
        return cls(str(root), len(train), layout, ", ".join(m for m in mix if m) or "scripted",
                   _finite(noise), pauses, _finite(failures))


def _core_s(run: Path, at_step: Optional[int], what: str) -> tuple[Optional[int], Optional[float]]:
    """(the step of the metrics row read, its core_s or None) of ``run``: the last row, or the last at or before
    ``at_step``."""
    m = run / METRICS_FILE
    if not m.is_file():
        raise ConfigError(f"{what}: {m} does not exist; give training run folders (pretrain / train)")
    rows = []
    try:
        lines = m.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{what}: {m} cannot be read ({e})") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(_metrics_row(line))
        except (ValueError, MalformedResult) as e:
            raise ConfigError(f"{what}: {m} line {i} is not a metrics row ({e}); the log was not written by "
                              "simforcing as it is — restore it, or give the core-seconds with --core-s") from None
    if at_step is not None:
        rows = [r for r in rows if r[0] is not None and r[0] <= at_step]
    if not rows:
        where = "" if at_step is None else f" at or before step {at_step} (the world model's checkpoint)"
        raise ConfigError(f"{what}: {m} has no metrics row{where}; give training run folders (pretrain / train), or "
                          "the core-seconds with --core-s")
    return rows[-1]


def _metrics_row(line: str) -> tuple[Optional[int], Optional[float]]:
    row = json.loads(line)
    step = typed(row, "step", "int", "null", default=None)
    core = row.get("core_s") if isinstance(row, dict) else None
    if core is not None and (isinstance(core, bool) or not isinstance(core, (int, float)) or not math.isfinite(core)
                             or core < 0):
        raise MalformedResult(f"field 'core_s' must be the core-seconds, a finite number >= 0; got {core!r:.80}")
    return step, None if core is None else float(core)


def _cm(v: Optional[float]) -> Optional[float]:
    v = _finite(v)
    return None if v is None else 100 * v


# -- a point -----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Headline(_Record):
    """A point's headline numbers (``AIMS`` keys, the training core-seconds, the oracle PSNR, the twin's rollout
    error, MMRV); None where not measured."""

    core_s: Optional[float] = None
    oracle_af_cm: Optional[float] = None
    oracle_psnr: Optional[float] = None
    twin_drift_cm: Optional[float] = None
    twin_drift_db: Optional[float] = None
    twin_rollout_cm: Optional[float] = None
    still_30: Optional[float] = None
    pearson: Optional[float] = None
    mmrv: Optional[float] = None
    clean_expert: Optional[float] = None
    paired_episodes: Optional[int] = None


@dataclass(frozen=True)
class AimCheck(_Record):
    """One aim (``AIMS``) against the point's value: met (True/False) or not measured (None)."""

    label: str
    value: Optional[float]
    bound: float
    below: bool
    met: Optional[bool]


@dataclass(frozen=True)
class FidelityPoint:
    """One world model's fidelity (module docstring): each measurement None where its input was not given; the
    world model every input was made with (None where none recorded it); ``config``: the caller's notes."""

    label: str = ""
    oracle: Optional[OracleWindow] = None
    twin: Optional[TwinDrift] = None
    still: Optional[StillChange] = None
    inside: Optional[Inside] = None
    training: Optional[TrainingCost] = None
    world_model: Optional[WorldModelId] = None
    config: Optional[dict] = None
    data: Optional[TrainingData] = None

    SECTIONS: ClassVar[tuple[str, ...]] = ("oracle", "twin", "still", "inside", "training", "data")

    @property
    def headline(self) -> Headline:
        o, t, i = self.oracle, self.twin, self.inside
        return Headline(core_s=self.training and self.training.core_s, oracle_af_cm=o and o.af_cm,
                        oracle_psnr=o and o.psnr, twin_drift_cm=t and t.drift_cm, twin_drift_db=t and t.drift_db,
                        twin_rollout_cm=t and t.rollout_cm, still_30=self.still and self.still.at(30),
                        pearson=i and i.pearson, mmrv=i and i.mmrv, clean_expert=i and i.clean_expert,
                        paired_episodes=self.data and self.data.paired)

    def aims(self) -> dict[str, AimCheck]:
        values = self.headline
        return {a.key: AimCheck(a.label, getattr(values, a.key), a.bound, a.below, a.met(getattr(values, a.key)))
                for a in AIMS}

    def to_json(self) -> dict:
        body: dict = {"label": self.label, **({"config": self.config} if self.config else {})}
        body.update({k: getattr(self, k).to_json() for k in self.SECTIONS if getattr(self, k) is not None})
        body["world_model"] = self.world_model and self.world_model.to_json()
        body["aims"] = {k: a.to_json() for k, a in self.aims().items()}
        return tagged(FIDELITY, FORMAT_VERSION, body)

    @classmethod
    def from_json(cls, d: dict, version: int = FORMAT_VERSION) -> "FidelityPoint":
        """From ``to_json``'s dict or a version-1 point (no world model recorded); the aims are the comparison of the
        numbers read with ``AIMS``."""
        hints = typing.get_type_hints(cls)
        sections = {k: _value(hints[k], d[k], k) for k in cls.SECTIONS if k in d}
        return cls(label=typed(d, "label", "str", default=""), config=typed(d, "config", "dict", "null", default=None),
                   world_model=_value(hints["world_model"], d.get("world_model"), "world_model"), **sections)

    @classmethod
    def read(cls, path: str | Path, what: str) -> "FidelityPoint":
        """A point's folder or its fidelity.json, or a ConfigError naming ``what``, the file and what it holds instead
        or its malformed field."""
        return read_typed(_input_file(path, "fidelity.json", FIDELITY, what), FIDELITY, FORMAT_VERSION, what,
                          cls.from_json)

    def markdown(self) -> str:
        """The point as a small markdown table: each aim, its value and whether it is met; a line per measurement."""
        lines = ["| measure | value | aim | met? |", "|---|---|---|---|"]
        for a, row in zip(AIMS, self.aims().values()):
            met = {True: "yes", False: "no", None: "not measured"}[row.met]
            lines.append(f"| {a.label} | {_fmt(row.value)} | {'≤' if a.below else '≥'} {a.bound:g} | {met} |")
        extra = []
        if self.oracle:
            o = self.oracle
            extra.append(f"oracle: {o.windows} windows at w = {_fmt(o.w, 'g')}, PSNR {_fmt(o.psnr)} dB, "
                         f"probe floor {_fmt(o.floor_cm)} cm")
        if self.twin:
            t = self.twin
            extra.append(f"twin: {t.episodes} episodes × {t.chunks} chunks, rollout {_fmt(t.rollout_cm)} cm "
                         f"against restarted {_fmt(t.restart_cm)} cm")
        if self.still:
            s = self.still
            extra.append("do-nothing frame change by step " + " / ".join(map(str, s.steps)) + ": "
                         + " / ".join(_fmt(v) for v in s.change) + f" ({s.episodes} episodes)")
        if self.inside:
            i = self.inside
            lo, hi = i.pearson_ci95 or (None, None)
            extra.append(f"inside `{i.wm}`: Pearson {_fmt(i.pearson)} [{_fmt(lo)}, {_fmt(hi)}] over "
                         f"{i.n_policies} policies and {i.scenes} scenes, MMRV {_fmt(i.mmrv)}")
        if self.training:
            tr = self.training
            extra.append(f"training: {_fmt(tr.core_s, '.0f')} core-seconds" if tr.core_s is not None else
                         "training: core-seconds not recorded by " + ", ".join(tr.not_recorded or ()))
        if self.data:
            d = self.data
            extra.append(f"data: {d.paired} paired training episodes ({d.layout} in the policy layouts), operators: "
                         f"{d.operators} ({d.root})")
        if self.world_model:
            silent = [k for k in self.SECTIONS[:4] if getattr(self, k) and getattr(self, k).world_model is None]
            extra.append(f"world model: {self.world_model.describe()}"
                         + (f" (not recorded by the {', '.join(silent)} input)" if silent else ""))
        return "\n".join(lines + [""] + [f"- {e}" for e in extra]) + "\n"

    def write(self, out: str | Path) -> Path:
        """OUT/fidelity.json and fidelity.md, written whole in place of an earlier point (never over another
        command's results: ``outputs.results_folder``); the path of fidelity.json."""
        with results_folder(out, "--out", "a fidelity point", POINT_FILES) as tmp:
            atomic_write_json(tmp / "fidelity.json", self.to_json())
            atomic_write_text(tmp / "fidelity.md", self.markdown())
        return Path(out) / "fidelity.json"


def _fmt(v, spec: str = ".2f") -> str:
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def one_world_model(measured: Sequence[tuple[str, Optional[Any]]]) -> Optional[WorldModelId]:
    """The world model that (flag, measurement) pairs share, or a ConfigError naming the two inputs that differ and
    their folders; None where no input recorded one."""
    known = [(flag, m) for flag, m in measured if m is not None and m.world_model is not None]
    if not known:
        return None
    first_flag, first = known[0]
    for flag, m in known[1:]:
        if not m.world_model.same_as(first.world_model):
            raise ConfigError(f"{flag}: {m.folder} was made with the world model {m.world_model.describe()}, "
                              f"{first_flag}: {first.folder} with {first.world_model.describe()}; a fidelity point is "
                              "one world model's — give the results of one model (or make one point per model)")
    return first.world_model


def fidelity_point(oracle=None, twin=None, wm_eval=None, agreement=None, wm_name: Optional[str] = None,
                   runs: Sequence = (), core_s: Optional[float] = None, label: str = "",
                   config: Optional[dict] = None) -> FidelityPoint:
    """One model's fidelity from the result folders its commands wrote (each optional; module docstring): refused by
    name where two inputs are of different world models, or the training runs given do not include the world
    model's run."""
    if core_s is not None and (isinstance(core_s, bool) or not math.isfinite(core_s) or core_s < 0):
        raise ConfigError(f"--core-s: got {core_s}; expected the core-seconds, a finite number >= 0")
    def given(path, measure, *args):
        return None if path is None else measure(path, *args)

    measured = [("--oracle", given(oracle, OracleWindow.measure)), ("--twin", given(twin, TwinDrift.measure)),
                ("--wm-eval", given(wm_eval, StillChange.measure)),
                ("--agreement", given(agreement, Inside.measure, wm_name))]
    wm = one_world_model(measured)
    if wm is not None and runs and not any(wm.same_as(WorldModelId(str(r))) for r in runs):
        raise ConfigError(f"--runs: the measurements are of the world model {wm.describe()}, which is not one of the "
                          f"training runs given ({', '.join(map(str, runs))}); give the runs that trained it "
                          "(stage 1, stage 2)")
    training = (TrainingCost.given(core_s, runs) if core_s is not None else
                TrainingCost.measure(runs, wm) if runs else None)
    o, t, s, i = (m for _, m in measured)
    return FidelityPoint(label, oracle=o, twin=t, still=s, inside=i, training=training, world_model=wm,
                         config=dict(config) if config else None, data=TrainingData.measure(runs, wm) if runs else None)


def _curve_point(p: Any) -> FidelityPoint:
    """A point inside a curve's file, of its own version."""
    version = typed(p, "format_version", "int", default=1)
    if not 1 <= version <= FORMAT_VERSION:
        raise MalformedResult(f"format version {version} (this simforcing reads 1 to {FORMAT_VERSION})")
    return FidelityPoint.from_json(p, version)


# -- the curve ---------------------------------------------------------------------------------------------------------
CURVE_AXES = {"core_s": "training core-seconds (stage 1 + stage 2)",
              "paired_episodes": "paired training episodes (the data axis)"}
CURVE_PANELS = (("oracle_af_cm", "oracle one-window action error (cm)"),
                ("twin_drift_cm", "twin drift over the rollout (cm)"),
                ("still_30", "do-nothing frame change, step 30"),
                ("pearson", "Pearson inside, twin vs simulator"))


@dataclass
class FidelityCurve:
    """Fidelity points by name (``fidelity curve``): fidelity_curve.json holds each in full and its headline
    (``table``), fidelity_curve.md the table in order of training core-seconds, fidelity_curve.png the plot."""

    points: dict[str, FidelityPoint] = field(default_factory=dict)

    def to_json(self) -> dict:
        return tagged(FIDELITY_CURVE, FORMAT_VERSION, {"points": {k: p.to_json() for k, p in self.points.items()},
                                                        "table": {k: p.headline.to_json()
                                                                  for k, p in self.points.items()}})

    @classmethod
    def from_json(cls, d: dict, version: int = FORMAT_VERSION) -> "FidelityCurve":
        """From ``to_json``'s dict, each point of its own version (the headline table is derived, not read)."""
        return cls({name: nested(f"points: {name}", _curve_point, p) for name, p in typed(d, "points", "dict").items()})

    @classmethod
    def read(cls, path: str | Path, what: str) -> "FidelityCurve":
        return read_typed(_input_file(path, "fidelity_curve.json", FIDELITY_CURVE, what), FIDELITY_CURVE,
                          FORMAT_VERSION, what, cls.from_json)

    def markdown(self) -> str:
        """One row per point, in order of training core-seconds."""
        head = ("| point | paired episodes (operators) | training core-s | oracle action error (cm) | oracle PSNR | "
                "twin drift (cm / dB) | do-nothing change, step 30 | Pearson inside (twin), scenes | MMRV | clean expert |")
        lines = [head, "|" + "---|" * 10]
        for name, p in sorted(self.points.items(), key=lambda kv: kv[1].headline.core_s or math.inf):
            v, d = p.headline, p.data
            data = "—" if d is None else f"{d.paired} ({d.operators})"
            lines.append(f"| {name} | {data} | {_fmt(v.core_s, '.0f')} | {_fmt(v.oracle_af_cm)} | {_fmt(v.oracle_psnr)} "
                         f"| {_fmt(v.twin_drift_cm)} / {_fmt(v.twin_drift_db)} | {_fmt(v.still_30)} | "
                         f"{_fmt(v.pearson)}{'' if p.inside is None else f', {p.inside.scenes}'} | {_fmt(v.mmrv)} | "
                         f"{_fmt(v.clean_expert, '.0%')} |")
        return "\n".join(lines) + "\n"

    def plot(self, path: str | Path, x: str = "core_s") -> Path:
        """Each fidelity number against ``x`` (``CURVE_AXES``: training core-seconds, or paired training episodes —
        the data axis), log x, one panel each, the aim drawn as a line; one colour and marker per point, named in the
        legend below the panels."""
        from matplotlib.figure import Figure

        fig = Figure(figsize=(11, 8.5))
        axes = fig.subplots(2, 2).ravel()
        aims = {a.key: a for a in AIMS}
        markers = "osD^vP*Xh<>"
        handles = {}
        for ax, (key, title) in zip(axes, CURVE_PANELS):
            for k, (name, p) in enumerate(self.points.items()):
                v = p.headline
                if getattr(v, x) is None or getattr(v, key) is None:
                    continue
                handles[name] = ax.scatter([getattr(v, x)], [getattr(v, key)], s=46, color=f"C{k % 10}",
                                           marker=markers[k % len(markers)])
            if key in aims:
                ax.axhline(aims[key].bound, color="0.5", ls="--", lw=1)
                ax.annotate(f"aim {aims[key].bound:g}", (0.01, aims[key].bound), xycoords=("axes fraction", "data"),
                            fontsize=7, color="0.4", xytext=(0, 2), textcoords="offset points")
            ax.set_xscale("log")
            ax.set_xlabel(CURVE_AXES[x])
            ax.set_title(title, fontsize=9)
            ax.grid(alpha=0.3)
        fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=3, fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, 0.08, 1, 1))
        path = Path(path)
        atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=110))
        return path

    def write(self, out: str | Path) -> Path:
        """OUT/fidelity_curve.json, .md and .png, written whole in place of an earlier curve (never over another
        command's results); the path of the JSON."""
        if not self.points:
            raise ConfigError("--points: no point given; give the folders `simforcing fidelity point` wrote")
        with results_folder(out, "--out", "a fidelity curve", CURVE_FILES) as tmp:
            atomic_write_json(tmp / "fidelity_curve.json", self.to_json())
            atomic_write_text(tmp / "fidelity_curve.md", self.markdown())
            self.plot(tmp / "fidelity_curve.png")
            if any(p.data is not None for p in self.points.values()):
                self.plot(tmp / "fidelity_curve_data.png", "paired_episodes")
        return Path(out) / "fidelity_curve.json"
