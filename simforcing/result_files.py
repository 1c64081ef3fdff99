"""Result files that say what they are: a ``format`` tag and a ``format_version`` on every typed result written as JSON.

    body = tagged(POLICY_EVALUATION, 2, {...})          # what a result's ``to_json`` writes
    obj, version = read_result(path, POLICY_EVALUATION, "--sim")

A file of another kind is refused by name ("…/agreement.json is an agreement of policy evaluations, not a policy
evaluation"); a file written before the tags existed is recognised by its keys (version 1) so that it still loads, or
is refused by the kind it holds; a newer version than this code reads is refused with the versions named.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

from simforcing.errors import ConfigError

POLICY_EVALUATION = "simforcing.policy-evaluation"
AGREEMENT = "simforcing.policy-agreement"
WORLD_MODEL_EXPORT = "simforcing.world-model"
WINDOW_EVALUATION = "simforcing.window-evaluation"
ROLLOUT_DRIFT = "simforcing.rollout-drift"
SWEEP_STEPS, SWEEP_CFG = "simforcing.sweep-steps", "simforcing.sweep-cfg"
POLICY_PROBE = "simforcing.policy-probe"
POLICY_ESTIMATE = "simforcing.policy-estimate"
FIDELITY, FIDELITY_CURVE = "simforcing.fidelity", "simforcing.fidelity-curve"

# What a kind is called in messages, and the command that writes it.
KIND_NAMES = {POLICY_EVALUATION: ("a policy evaluation", "simforcing policy eval"),
              AGREEMENT: ("an agreement of policy evaluations", "simforcing policy agreement"),
              WORLD_MODEL_EXPORT: ("an exported world model", "simforcing export"),
              WINDOW_EVALUATION: ("a one-window evaluation", "simforcing evaluate"),
              ROLLOUT_DRIFT: ("a rollout-drift result", "simforcing rollout"),
              SWEEP_STEPS: ("a sweep of the sampler's steps", "simforcing sweep steps"),
              SWEEP_CFG: ("a sweep of the training p and the guidance w", "simforcing sweep cfg"),
              POLICY_PROBE: ("a linear probe of policies' video experts", "simforcing policy probe"),
              POLICY_ESTIMATE: ("a prediction-powered estimate of policies' success", "simforcing policy estimate"),
              FIDELITY: ("a world model's fidelity", "simforcing fidelity point"),
              FIDELITY_CURVE: ("a fidelity-compute curve", "simforcing fidelity curve")}

# Files written before the tags: the keys that identify each kind (checked in this order).
_LEGACY = ((AGREEMENT, ("ranking", "envs", "players")),
           (POLICY_EVALUATION, ("env", "rows", "episodes", "scenes")),
           (WINDOW_EVALUATION, ("psnr", "num_samples")),
           (ROLLOUT_DRIFT, ("horizon", "chunk_frames", "rows")),
           (SWEEP_STEPS, ("configs", "n_real", "notes")),
           (SWEEP_CFG, ("configs", "row_labels")),
           (POLICY_PROBE, ("runs", "n_fit", "n_test", "reference")))
_UNTAGGED_OTHERS = ((("suite", "tasks", "average"), "a LIBERO policy evaluation (`policy eval --env libero`)"),
                    (("benchmark", "consecutive"), "a success judge (`simforcing model fit-judge`)"),
                    (("preset", "model", "train"), "a run's config (a run folder: load it with "
                                                   "WorldModelPipeline.from_run)"))
_OTHER_FORMATS = {"simforcing-success-judge": "a success judge (`simforcing model fit-judge`)",
                  "simforcing-state-probe": "a state probe (`simforcing model fit-probe`)"}
# What a folder holds when the expected file is not in it: a marker file and its description.
_FOLDER_MARKERS = (("eval.json", "an evaluation (eval.json)"), ("agreement.json", "an agreement of policy evaluations "
                   "(`simforcing policy agreement`)"), ("judge.json", "a success judge (`simforcing model fit-judge`)"),
                   ("estimate.json", "a prediction-powered estimate (`simforcing policy estimate`)"),
                   ("fidelity.json", "a world model's fidelity (`simforcing fidelity point`)"),
                   ("rollout.json", "a rollout-drift result (`simforcing rollout`)"),
                   ("sweep_steps.json", "a sweep of the sampler's steps (`simforcing sweep steps`)"),
                   ("sweep_cfg.json", "a sweep of the training p and the guidance w (`simforcing sweep cfg`)"),
                   ("run.json", "a training run (pretrain / train / policy train)"),
                   ("meta/info.json", "a dataset"))


def tagged(kind: str, version: int, body: dict) -> dict:
    """``body`` with its kind and version first (what a person reading the file sees at the top)."""
    return {"format": kind, "format_version": version, **body}


def kind_of(obj) -> tuple[Optional[str], int, str]:
    """(kind or None, version, description) of a parsed result file; version 1 for a file written before the tags."""
    if not isinstance(obj, dict):
        return None, 0, f"a JSON {type(obj).__name__}, not an object"
    if "format" in obj:
        kind = obj["format"]
        version = obj.get("format_version")
        name = KIND_NAMES.get(kind, (_OTHER_FORMATS.get(kind, f"a result of kind {kind!r}"),))[0]
        return kind, version if isinstance(version, int) else 0, name
    for kind, keys in _LEGACY:
        if all(k in obj for k in keys):
            return kind, 1, KIND_NAMES[kind][0]
    for keys, name in _UNTAGGED_OTHERS:
        if all(k in obj for k in keys):
            return None, 0, name
    return None, 0, "no result this version of simforcing knows"


def read_result(path: str | Path, kind: str, version: int, what: str) -> tuple[dict, int]:
    """The parsed result file at ``path`` and its version, or a ConfigError naming ``what`` (the flag), the file,
    the kind it holds and the kind expected."""
    path = Path(path)
    want, command = KIND_NAMES[kind]
    if not path.is_file() and path.parent.is_dir():
        raise ConfigError(f"{what}: {path.parent} holds {folder_contents(path.parent)}, no {path.name}; expected "
                          f"{want}: give the folder `{command}` wrote")
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{what}: {path} cannot be read ({e}); expected {want} written by `{command}`") from e
    got, got_version, name = kind_of(obj)
    if got != kind:
        raise ConfigError(f"{what}: {path} holds {name}, not {want}; give the folder `{command}` wrote")
    if not 1 <= got_version <= version:
        raise ConfigError(f"{what}: {path} is {want} of format version {obj.get('format_version')!r}; this version "
                          f"of simforcing reads versions 1 to {version} — upgrade simforcing or re-run `{command}`")
    return obj, got_version


class MalformedResult(ValueError):
    """A field of a result file is missing or of the wrong type (raised by a result's ``from_json`` through
    :func:`typed`; :func:`read_typed` names the file and the flag)."""


_TYPES = {"int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
          "number": ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
          "str": ("a string", lambda v: isinstance(v, str)),
          "bool": ("true or false", lambda v: isinstance(v, bool)),
          "dict": ("an object", lambda v: isinstance(v, dict)),
          "list": ("a list", lambda v: isinstance(v, list)),
          "null": ("null", lambda v: v is None)}
_REQUIRED = object()


def finite_number(v: object) -> bool:
    """Whether ``v`` is a finite JSON number (not true/false, not NaN or infinite): what a measured field must be."""
    return _TYPES["number"][1](v) and math.isfinite(v)


def typed(d: object, key: str, *types: str, default: object = _REQUIRED):
    """``d[key]`` when it is of one of ``types`` (names of ``_TYPES``: int, number, str, bool, dict, list, null);
    ``default`` when the key is absent and a default is given; MalformedResult naming the field otherwise."""
    if not isinstance(d, dict):
        raise MalformedResult(f"expected an object holding {key!r}; got a JSON {type(d).__name__}")
    if key not in d:
        if default is _REQUIRED:
            raise MalformedResult(f"field {key!r} is missing")
        return default
    value = d[key]
    if not any(_TYPES[t][1](value) for t in types):
        want = " or ".join(_TYPES[t][0] for t in types)
        raise MalformedResult(f"field {key!r} must be {want}; got {value!r:.80}")
    return value


def nested(prefix: str, parse, value):
    """``parse(value)`` with a malformed field named under ``prefix`` ("checkpoint: field 'step' ...")."""
    try:
        return parse(value)
    except MalformedResult as e:
        raise MalformedResult(f"{prefix}: {e}") from None


def read_typed(path: str | Path, kind: str, version: int, what: str, parse):
    """``parse(obj, version)`` of the result file at ``path`` (:func:`read_result`), a malformed field — missing, of
    the wrong type (a ``typed`` check) or unusable — a ConfigError naming ``what``, the file and the field, never a
    traceback."""
    obj, got = read_result(path, kind, version, what)
    try:
        return parse(obj, got)
    except (MalformedResult, KeyError, TypeError, ValueError, AttributeError) as e:
        why = f"field {e.args[0]!r} is missing" if isinstance(e, KeyError) else str(e)
        want, command = KIND_NAMES[kind]
        raise ConfigError(f"{what}: {path} is {want} with a malformed field ({why}); it was not written by "
                          f"`{command}` as it is — restore it or run `{command}` again") from None


def folder_contents(folder: Path) -> str:
    """What ``folder`` holds, by the files that mark each kind of output ("nothing simforcing wrote" otherwise)."""
    found = [name for marker, name in _FOLDER_MARKERS if (folder / marker).is_file()]
    return " and ".join(found) if found else "nothing simforcing wrote"


# What the docs' tables show of a record's numbers (``simforcing.docs_tables``, ``demo.readme_tables``)


def table_number(v: object) -> Optional[float]:
    """A record's number as a table shows it: None, or NaN (a statistic its command left undefined, e.g. a Pearson
    without spread), is None — shown "—", never "nan"; anything but a finite number (a string, true/false, inf) is a
    ValueError naming it (``docs_tables.render_block`` names the record and the table)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if not finite_number(v):
        raise ValueError(f"{v!r:.40} where a finite number belongs")
    return float(v)


def figure(v: object, nd: int = 2) -> str:
    v = table_number(v)
    return "—" if v is None else f"{v:.{nd}f}"


def percent(v: object) -> str:
    v = table_number(v)
    return "—" if v is None else f"{100 * v:.0f} %"


def mark(ok: Optional[bool]) -> str:
    """An aim's cell suffix: " ✓" met, " ✗" missed, "" not measured."""
    return "" if ok is None else (" ✓" if ok else " ✗")
