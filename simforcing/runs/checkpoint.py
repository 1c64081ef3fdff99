"""Checkpoints: written atomically, verified on load, resumable. (The run folder around them, its other files and
how a run is opened: ``simforcing.runs.folder``.)

    RUN/checkpoints/step_000123/
        config.json           the exact config this checkpoint was trained with (its sha256 is meta's config_hash
                              source; a resume compares against it, not against RUN/config.json)
        model.safetensors     student weights (single-process runs)
        dcp/                  model + optimizer shards, torch.distributed.checkpoint (runs with world size > 1)
        train_state.pt        optimizer (single process), LR scheduler, RNG states (torch, CUDA, numpy, python
                              random) and the data position (epoch, batch position within the epoch); only tensors
                              and primitive containers, so ``torch.load(weights_only=True)`` reads it
        meta.json             {"format", "step", "epoch", "stats", "config_hash", "run_id", "world_size", "time",
                               "files": {relative path: sha256}, "data": what the run trained on (root, episodes)}

Writing: everything goes to the writer's own ``checkpoints/.tmp-step_N-w<pid>``; each file is fsynced, then
``meta.json`` (holding the sha256 of every other file) is written last, the folder is renamed to ``step_N``
(``os.replace``, atomic) and the parent folder fsynced. A crash or a failed write (disk full) leaves at most a
``.tmp-*`` folder; a write never removes another writer's temporary folder — stale ones are removed by
:func:`remove_stale_temp`, which the train loop calls once it holds the run folder's lock (so no other writer can be
alive). Only the last ``train.keep_last`` checkpoints *of this run* (meta.json's ``run_id``; checkpoints written
before run ids existed count as the run's own) are kept: a checkpoint of another run is never pruned. "Latest" is
found by scanning the ``step_*`` folders (no symlink).

Loading (:func:`load_checkpoint`) checks every sha256 listed in meta.json: a truncated or bit-flipped file raises
:class:`CheckpointError` naming it. :func:`find_resumable` walks back from the newest checkpoint to the newest valid
one, warning about each damaged one it skips. A checkpoint's own config.json is the config its weights were trained
with (``runs.folder.trained_config``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

import simforcing.parallel as parallel
from simforcing.config import Config, ConfigError
from simforcing.errors import CheckpointError

FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"
STATE_FILE = "train_state.pt"
META_FILE = "meta.json"
CONFIG_FILE = "config.json"
CHECKPOINTS_DIR = "checkpoints"  # RUN/checkpoints/ (the other run-folder names: simforcing.runs.folder)
SHARDED_DIR = "dcp"
_PREFIX = "step_"
_TMP_PREFIX = ".tmp-"


@dataclass
class Checkpoint:
    """A verified checkpoint. ``model_state`` is None for sharded (DCP) checkpoints or when not requested."""

    path: Path
    step: int
    meta: dict
    model_state: dict[str, torch.Tensor] | None
    train_state: dict | None

    @property
    def sharded(self) -> bool:
        return bool(self.meta.get("sharded"))


# ----------------------------------------------------------------------------------------------------------------------
# Names, hashes, RNG
# ----------------------------------------------------------------------------------------------------------------------


def step_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR / f"{_PREFIX}{step:06d}"


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Finished checkpoints of a run as (step, folder), oldest first; temporary folders are ignored."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    out = []
    if root.is_dir():
        for p in root.iterdir():
            if p.is_dir() and p.name.startswith(_PREFIX) and p.name[len(_PREFIX):].isdigit():
                out.append((int(p.name[len(_PREFIX):]), p))
    return sorted(out)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest finished checkpoint folder (not verified), or None."""
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1][1] if ckpts else None


def config_hash(cfg: Config) -> str:
    """The first 16 hex digits of the sha256 of the config's JSON (:func:`config_dict_hash` of ``cfg.to_dict()``)."""
    return config_dict_hash(cfg.to_dict())


def config_dict_hash(config: dict) -> str:
    """:func:`config_hash` of a config as a JSON object — a config.json as a run wrote it, with no field added since.
    A world model's config (``model.action_head`` false) is hashed without the fields the downstream policy added
    (``model.action_head``, the ``policy`` section), so its hash is what it was before they existed and older
    checkpoints keep verifying against their config.json. Likewise the ``fewstep`` section of any run but a few-step
    student (``fewstep.steps`` 0), ``model.action_conditioning`` at its default ("expert") and ``data.pairing`` when
    None."""
    d = copy.deepcopy(config)
    model, data = d.get("model") or {}, d.get("data") or {}
    if not model.get("action_head"):
        model.pop("action_head", None)
        d.pop("policy", None)
    if model.get("action_conditioning") == "expert":
        model.pop("action_conditioning")
    if not (d.get("fewstep") or {}).get("steps"):
        d.pop("fewstep", None)
    if "pairing" in data and data["pairing"] is None:  # a field added later, None unless a config set it
        data.pop("pairing")
    return hashlib.sha256(json.dumps(d, indent=2).encode()).hexdigest()[:16]


def temp_dir(final: Path) -> Path:
    """This writer's temporary folder for the checkpoint folder ``final``."""
    return final.parent / f"{_TMP_PREFIX}{final.name}-w{os.getpid()}"


def remove_stale_temp(run_dir: str | Path) -> list[str]:
    """Remove every temporary folder in RUN/checkpoints. Only for the holder of the run folder's lock (then no
    other writer is alive: what is left is from a crashed one). Returns the names removed."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    removed = []
    if root.is_dir():
        for stale in root.glob(f"{_TMP_PREFIX}*"):
            shutil.rmtree(stale, ignore_errors=True)
            removed.append(stale.name)
    return removed


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def capture_rng() -> dict:
    """Every global RNG as tensors / primitive containers (weights_only-loadable)."""
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"name": np_state[0], "keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "python": _to_lists(random.getstate()),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    random.setstate(_to_tuples(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _to_lists(x: Any) -> Any:
    return [_to_lists(v) for v in x] if isinstance(x, (tuple, list)) else x


def _to_tuples(x: Any) -> Any:
    return tuple(_to_tuples(v) for v in x) if isinstance(x, list) else x


# ----------------------------------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------------------------------


def _write_file(path: Path, write: Callable[[Path], None]) -> None:
    """Write one checkpoint file through ``write(path)`` and fsync it (tests monkeypatch this to simulate ENOSPC)."""
    write(path)
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _cpu_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Contiguous CPU copies (safetensors refuses shared storage, e.g. tied weights)."""
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}


def save_checkpoint(run_dir: str | Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: Any, rng_state: dict, data_state: dict, stats: dict | None, cfg: Config,
                    on_partial: Callable[[], None] | None = None, run_id: str | None = None,
                    data: dict | None = None, inputs: dict | None = None) -> Path:
    """Write ``RUN/checkpoints/step_N`` atomically and keep the last ``cfg.train.keep_last`` of run ``run_id``
    (None: every checkpoint of the folder counts as the run's). Returns the folder.

    With a process group of world size > 1 every rank must call this (model and optimizer go through DCP);
    rank 0 writes the rest. ``on_partial`` is called once the weights are written and before the folder is
    finalised (the fault-injection hook of the train loop); ``data`` is what the run records about its data
    (meta.json ``data``, ``training.checks.data_record``); ``inputs`` the VAE and probe it trains with (meta.json
    ``inputs``, ``runs.folder.inputs_record``). Raises CheckpointError when a write fails; the previous
    checkpoints are then untouched.
    """
    run_dir = Path(run_dir)
    final = step_dir(run_dir, step)
    tmp = temp_dir(final)
    sharded = parallel.world_size() > 1
    main = parallel.rank() == 0
    error = None
    if main:
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)  # this writer's own leftover only
            tmp.mkdir()
        except OSError as e:
            error = f"cannot create {tmp} ({e})"
    tmp = Path(parallel.broadcast_object(str(tmp)))  # every rank writes its DCP shards into rank 0's folder
    error = parallel.broadcast_object(error)
    if error is None:
        try:
            if sharded:
                parallel.save_sharded(tmp / SHARDED_DIR, model, optimizer)
            if main:
                if not sharded:
                    weights = _cpu_state(model)
                    _write_file(tmp / WEIGHTS_FILE, lambda p: save_file(weights, str(p), metadata={"step": str(step)}))
                config_text = cfg.to_json()
                _write_file(tmp / CONFIG_FILE, lambda p: p.write_text(config_text + "\n"))
                if on_partial is not None:
                    on_partial()
                train_state = {"step": step, "scheduler": scheduler.state_dict(), "rng": rng_state,
                               "data": dict(data_state)}
                if not sharded:
                    train_state["optimizer"] = optimizer.state_dict()
                _write_file(tmp / STATE_FILE, lambda p: torch.save(train_state, p))
                files = {str(p.relative_to(tmp)): sha256_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
                meta = {"format": FORMAT_VERSION, "step": step, "epoch": data_state.get("epoch"), "stats": stats,
                        "config_hash": config_hash(cfg), "run_id": run_id, "world_size": parallel.world_size(),
                        "sharded": sharded, "time": time.time(), "files": files}
                if data is not None:
                    meta["data"] = data
                if inputs:
                    meta["inputs"] = inputs
                text = json.dumps(meta, indent=2) + "\n"
                _write_file(tmp / META_FILE, lambda p: p.write_text(text))
                _fsync_dir(tmp)
                _replace_dir(tmp, final)
                _fsync_dir(final.parent)
                _prune(run_dir, cfg.train.keep_last, run_id)
        except Exception as e:  # noqa: BLE001 - any failure must leave the previous checkpoint intact
            error = f"writing checkpoint step {step} failed ({type(e).__name__}: {e})"
            if main:
                shutil.rmtree(tmp, ignore_errors=True)
    error = parallel.broadcast_object(error)
    if error is not None:
        prev = [p for s, p in list_checkpoints(run_dir) if s != step]
        hint = f"; the previous checkpoint {prev[-1]} is untouched" if prev else ""
        raise CheckpointError(error + hint, final)
    return final


def _replace_dir(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final``; an existing ``final`` (a re-save of the same step) is moved away first."""
    old = None
    if final.exists():
        old = final.parent / f"{_TMP_PREFIX}old-{final.name}"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def checkpoint_run_id(path: Path) -> str | None:
    """meta.json's run_id; None for checkpoints from before run ids; "?" when meta.json cannot be read."""
    try:
        return read_meta(path).get("run_id")
    except CheckpointError:
        return "?"


def _prune(run_dir: Path, keep_last: int, run_id: str | None = None) -> None:
    ckpts = list_checkpoints(run_dir)
    if run_id is not None:  # only this run's own (and pre-run-id ones); unreadable or foreign ones are left alone
        ckpts = [(s, p) for s, p in ckpts if checkpoint_run_id(p) in (run_id, None)]
    for _, path in ckpts[: max(0, len(ckpts) - keep_last)]:
        doomed = path.parent / f"{_TMP_PREFIX}del-{path.name}"
        os.replace(path, doomed)  # the rename is atomic; the slow delete happens after
        shutil.rmtree(doomed, ignore_errors=True)


# ----------------------------------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------------------------------


def read_meta(path: str | Path) -> dict:
    p = Path(path) / META_FILE
    if not p.exists():
        raise CheckpointError("meta.json is missing (an unfinished or foreign checkpoint folder)", p)
    try:
        meta = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"cannot read ({e})", p) from e
    if not isinstance(meta, dict) or "files" not in meta or "step" not in meta:
        raise CheckpointError("expected a JSON object with 'step' and 'files'", p)
    step, files = meta["step"], meta["files"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CheckpointError(f"'step' must be an integer >= 0; got {step!r}", p)
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise CheckpointError(f"'files' must map each file to its sha256; got {type(files).__name__} "
                              f"{str(files)[:60]}", p)
    outside = [rel for rel in files if not _inside(Path(path), rel)]
    if outside:  # meta.json is data: no path it names may lead out of the checkpoint folder
        raise CheckpointError(f"'files' names {outside[0]!r}, which is not a file of this checkpoint folder (an "
                              "absolute path or one leading out of it)", p)
    return meta


def _inside(folder: Path, rel: str) -> bool:
    """Whether ``rel`` is a relative path that stays inside ``folder`` (no ``..`` out of it, not absolute)."""
    if not rel or Path(rel).is_absolute() or "\\" in rel:
        return False
    root = folder.resolve()
    return root in (folder / rel).resolve().parents


def verify_checkpoint(path: str | Path) -> dict:
    """Check every file listed in meta.json against its sha256; returns meta. Raises CheckpointError naming the file."""
    path = Path(path)
    meta = read_meta(path)
    for rel, digest in meta["files"].items():
        f = path / rel
        if not f.is_file():
            raise CheckpointError("file listed in meta.json is missing", f)
        if sha256_file(f) != digest:
            raise CheckpointError(f"sha256 mismatch (expected {digest[:12]}…): the file is truncated or corrupted", f)
    return meta


def load_checkpoint(path: str | Path, weights: bool = True, train_state: bool = True) -> Checkpoint:
    """Verify and read one checkpoint folder (``weights``: model.safetensors; ``train_state``: train_state.pt)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError("checkpoint folder does not exist", path)
    meta = verify_checkpoint(path)
    model_state = state = None
    if weights and not meta.get("sharded"):
        try:
            model_state = load_file(str(path / WEIGHTS_FILE))
        except (SafetensorError, OSError) as e:
            raise CheckpointError(f"cannot read weights ({e})", path / WEIGHTS_FILE) from e
    if train_state:
        try:
            state = torch.load(path / STATE_FILE, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - unpickling errors come in many types
            raise CheckpointError(f"cannot read the training state ({type(e).__name__}: {e})",
                                  path / STATE_FILE) from e
    return Checkpoint(path, int(meta["step"]), meta, model_state, state)


def checkpoint_config(path: str | Path) -> Config | None:
    """The config a checkpoint folder was trained with (its own config.json), or None for checkpoints written
    before checkpoints stored it."""
    p = Path(path) / CONFIG_FILE
    if not p.exists():
        return None
    try:
        return Config.load(p)
    except ConfigError as e:
        raise CheckpointError(f"cannot read the checkpoint's config ({e})", p) from e


def find_resumable(run_dir: str | Path, weights: bool = True, train_state: bool = True) -> Checkpoint | None:
    """The newest checkpoint that verifies; damaged newer ones are skipped with a warning. None when there is none."""
    for _, path in reversed(list_checkpoints(run_dir)):
        try:
            return load_checkpoint(path, weights=weights, train_state=train_state)
        except CheckpointError as e:
            warnings.warn(f"checkpoint {path.name} is damaged ({e}); falling back to the previous checkpoint",
                          stacklevel=2)
    return None


def load_model_state(ckpt: Checkpoint, model: torch.nn.Module,
                     new: Callable[[str], bool] | None = None) -> list[str]:
    """Copy a checkpoint's weights into an (unsharded) model, strictly; sharded checkpoints are read through DCP.
    ``new``: the names the checkpoint may lack (they keep the model's initialisation; e.g. stage 2's input condition
    channels, ``models.world_model.new_condition_tensor``). Returns the names it lacked."""
    state = ckpt.model_state
    if state is None:
        state = parallel.load_sharded_model_offline(ckpt.path / SHARDED_DIR, model)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # shape mismatches
        raise CheckpointError(f"weights do not fit the model built from the config ({e})", ckpt.path) from e
    fresh = sorted(k for k in missing if new is not None and new(k))
    missing = [k for k in missing if k not in fresh]
    if missing or unexpected:
        raise CheckpointError(f"weights do not match the model: missing {sorted(missing)[:8]}, unexpected "
                              f"{sorted(unexpected)[:8]} (was the config changed?)", ckpt.path)
    return fresh
