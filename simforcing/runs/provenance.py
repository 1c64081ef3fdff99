"""Provenance: what produced a folder (a dataset, a fitted VAE, a training run), stored beside its content.

    rec = provenance_record("simforcing data synth --out D --num-train 20 ...", sizes={"num_train": 20, ...}, seed=0,
                            inputs={"data": digest(data_rec)})
    if check_provenance(FOLDER, rec):        # [] when FOLDER/provenance.json records the same thing
        ...regenerate FOLDER (or refuse)...
    write_provenance(FOLDER, rec)

A record is ``{"command", "sizes", "seed", "inputs", "code", "cwd"}``: the command line that reproduces the folder
(its paths spelled from ``cwd``, the working directory it was made from: :func:`spelled`), the sizes and seed it was
made with, the digests of the records of the folders it was made from (so a regenerated dataset makes
the VAE and the runs made from it stale too), and the code version (``simforcing`` package version and, when the
package sits in a git checkout, the commit). :func:`check_provenance` compares every field except those in
``ignore`` — by default the git commit, which is recorded (and cited) but would otherwise make every commit regenerate
everything; the package version is compared — and the working directory, which only says how the command's paths
are spelled (:func:`made_from` reads it back, so a demo run from elsewhere can spell them the same way).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Optional

from simforcing.version import __version__
from simforcing.errors import ConfigError
from simforcing.runs.folder import is_run_folder, read_status
from simforcing.runs.locking import lock_folder
from simforcing.utils import atomic_write_json

PROVENANCE_FILE = "provenance.json"
DEFAULT_IGNORE = ("code.git", "cwd")


@lru_cache(maxsize=1)
def _git_commit() -> Optional[str]:
    """The commit of the checkout this package runs from (with "-dirty" when it has changes), or None."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (commit + ("-dirty" if dirty else "")) if commit else None


def code_version() -> dict:
    """{"simforcing": package version, "git": commit or None}."""
    return {"simforcing": __version__, "git": _git_commit()}


def provenance_record(command: str, sizes: Optional[dict] = None, seed: Optional[int] = None,
                      inputs: Optional[dict] = None) -> dict:
    """A record (module docstring); JSON types only (tuples become lists), so it compares equal after a round trip."""
    rec = {"command": command, "sizes": dict(sizes or {}), "seed": seed, "inputs": dict(inputs or {}),
           "code": code_version(), "cwd": str(Path.cwd().resolve())}
    return json.loads(json.dumps(rec))


def _flat(d: Any, prefix: str = "") -> dict:
    if isinstance(d, dict) and d:
        out: dict = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def _kept(record: dict, ignore: Iterable[str]) -> dict:
    ignore = tuple(ignore)
    return {k: v for k, v in _flat(record).items() if not any(k == i or k.startswith(i + ".") for i in ignore)}


def digest(record: dict, ignore: Iterable[str] = DEFAULT_IGNORE) -> str:
    """A short hash of the compared fields of a record (what a folder made from it records as its input)."""
    return hashlib.sha256(json.dumps(_kept(record, ignore), sort_keys=True).encode()).hexdigest()[:16]


def write_provenance(folder: str | Path, record: dict) -> Path:
    path = Path(folder) / PROVENANCE_FILE
    atomic_write_json(path, record)
    return path


def read_provenance(folder: str | Path) -> Optional[dict]:
    """FOLDER/provenance.json, or None when absent or unreadable."""
    try:
        rec = json.loads((Path(folder) / PROVENANCE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def check_provenance(folder: str | Path, record: dict, ignore: Iterable[str] = DEFAULT_IGNORE) -> list[str]:
    """The fields in which FOLDER's recorded provenance differs from ``record``, as readable lines
    ("sizes.num_train: recorded 4, asked 20"); ``["provenance.json: none recorded"]`` when there is none; [] when
    they match."""
    recorded = read_provenance(folder)
    if recorded is None:
        return [f"{PROVENANCE_FILE}: none recorded"]
    a, b = _kept(recorded, ignore), _kept(record, ignore)
    keys = sorted(a.keys() | b.keys(), key=lambda k: (k == "command", k))  # the long command line last
    return [f"{k}: recorded {a.get(k)!r}, asked {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]


def spelled(path: str | Path) -> Path:
    """One spelling of a folder for the commands a record holds: relative to the working directory when it lies
    inside it, else absolute (symlinks resolved). ``runs/demo``, ``./runs/demo/`` and ``$PWD/runs/demo`` are then the
    same command, so a run asked for with another spelling of the same folder is reused, not made again."""
    full = Path(path).expanduser().resolve()
    try:
        return full.relative_to(Path.cwd().resolve())
    except ValueError:
        return full


def made_from(folder: str | Path) -> Optional[Path | str]:
    """The working directory FOLDER's record spells its command's paths from: its ``cwd``; for a record written
    before ``cwd`` was recorded, the directory its relative ``--out`` names FOLDER from, or ``"absolute"`` when
    ``--out`` is absolute (then any directory outside FOLDER spells it the same); None when it cannot be told."""
    rec = read_provenance(folder)
    if rec is None:
        return None
    if isinstance(rec.get("cwd"), str):
        return Path(rec["cwd"])
    try:
        argv = shlex.split(str(rec.get("command", "")))
        out = Path(argv[argv.index("--out") + 1])
    except (ValueError, IndexError):
        return None
    if out.is_absolute():
        return "absolute"
    here = Path(folder).resolve().parts
    n = len(out.parts)
    return Path(*here[:-n]) if n < len(here) and here[-n:] == out.parts else None


def why_stale(stale: list[str]) -> str:
    """The differing fields of a provenance check, the command line last and left out when others say enough."""
    lines = [x for x in stale if not x.startswith("command:")] or stale
    return "; ".join(lines[:4]) + (f"; +{len(lines) - 4} more" if len(lines) > 4 else "")


def run_finished(run: str | Path, steps: int) -> bool:
    """The run's status.json says finished at ``steps`` or later: its state "finished" and its step an integer (a
    status.json of other types — a list, a step "600", NaN or 2.5 — ended the demo in a traceback, or read 2.5 as 2;
    it reads as not finished, so the run is continued or trained again)."""
    st = read_status(run)
    step = st.get("step")
    return (st.get("state") == "finished" and isinstance(step, int) and not isinstance(step, bool)
            and step >= steps)


def remove_stale_run(folder: str | Path, stale: list[str]) -> str:
    """Remove a training run made from other inputs (``stale``: :func:`check_provenance`'s fields), under its lock;
    returns the line that says so. ConfigError, and nothing removed, when the folder is neither a simforcing run nor
    records a provenance (a folder the demo did not make)."""
    folder = Path(folder)
    if not (is_run_folder(folder) or read_provenance(folder) is not None):
        raise ConfigError(f"{folder} is not a run of this demo (no {PROVENANCE_FILE}, not a simforcing run); "
                          "move it away or choose another --out")
    with lock_folder(folder, "simforcing demo (removing a stale run)"):
        shutil.rmtree(folder)
    return f"training {folder} again: it was made from other inputs ({why_stale(stale)})"
