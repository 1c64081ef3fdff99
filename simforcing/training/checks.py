"""What may continue a run, or teach one: the checks a training run makes before it starts (read-only), and what
it records about its data so that a resume can say what changed.

- ``--resume``: the run's kind (a stage-1 run is continued by ``pretrain``, a stage-2 run by ``train``, a policy by
  ``policy train``: ``runs.folder.require_kind``), what the stage itself requires (``Stage.resume_check``), the same
  architecture as the config its checkpoint was trained with (``runs.loaded.architecture_fields``), and the same data:
  :func:`data_record` goes into every checkpoint's meta.json; :func:`data_changes` compares it, and the checkpoint's
  normalisation statistics, with the data now.
- ``--teacher``: a stage-1 run of the same architecture (:func:`resolve_teacher`; on resume the checkpoint
  ``teacher.json`` recorded), or one the student adds zero-initialised tensors to (``runs.loaded.STUDENT_ADDITIONS``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Optional

from simforcing.config import Config, ConfigError
from simforcing.errors import CheckpointError
from simforcing.runs.checkpoint import list_checkpoints
from simforcing.runs.folder import (CHECKPOINTS_DIR, STAGE_KIND, TEACHER_FILE, Run, check_same_vae, describe_kind,
                                    kind_of_config, open_run, resume_command)
from simforcing.runs.loaded import (STUDENT_ADDITIONS, VIEW_FIELDS, architecture_fields, check_same_pairing,
                                    check_teacher_architecture, data_pairing, differing_fields, trained_pairing)
from simforcing.training.stage import Stage


# ----------------------------------------------------------------------------------------------------------------------
# Resume
# ----------------------------------------------------------------------------------------------------------------------


def check_resume_kind(theirs: Config, stage: Stage, run_dir: Path) -> None:
    """ConfigError naming the run's kind (and the command that continues it) when the config its checkpoint was
    trained with is another kind of run than ``stage`` trains."""
    kind = kind_of_config(theirs, (run_dir / TEACHER_FILE).exists())
    if kind != STAGE_KIND[stage.name]:
        raise ConfigError(f"--out: {run_dir} is {describe_kind(kind, theirs)}; {stage.command} --resume cannot "
                          f"continue it — use `{resume_command(run_dir, kind, theirs)}`")


def check_architecture_unchanged(theirs: Config, cfg: Config, run_dir: Path) -> None:
    """ConfigError naming the first architecture field in which ``cfg`` differs from the run's."""
    for name, was, now in differing_fields(theirs, cfg, architecture_fields(cfg) + VIEW_FIELDS)[:1]:
        raise ConfigError(f"{name}: {run_dir} was trained with {was!r}, the resumed config asks {now!r}; "
                          "architecture and view fields cannot change on --resume (start a new run, or stage 2 "
                          "from it)")


def check_resume_config(cfg: Config, theirs: Config, stage: Stage, run_dir: Path) -> None:
    """Whether ``cfg`` may continue a run of ``stage`` trained with ``theirs``: the same kind of run, what the stage
    itself requires (``Stage.resume_check``: a policy's setting), the same architecture."""
    check_resume_kind(theirs, stage, run_dir)
    stage.resume_check(theirs, cfg, run_dir)
    check_architecture_unchanged(theirs, cfg, run_dir)


# ----------------------------------------------------------------------------------------------------------------------
# The teacher of stage 2
# ----------------------------------------------------------------------------------------------------------------------


def recorded_teacher(run_dir: Path) -> tuple[Optional[Path], Optional[Path]]:
    """(run, checkpoint) from RUN/teacher.json; (None, None) when there is none. The checkpoint is found by its name
    in the recorded run's checkpoints/ (teacher.json once recorded it relative to the working directory of the run's
    start, so a resume from another directory did not find it and took the teacher's newest). A record that is not
    {run, checkpoint, step} of their types is a CheckpointError naming the file."""
    from simforcing.result_files import typed

    path = run_dir / TEACHER_FILE
    if not path.exists():
        return None, None
    try:
        rec = json.loads(path.read_text())
        run, checkpoint = Path(typed(rec, "run", "str")), Path(typed(rec, "checkpoint", "str"))
        step = typed(rec, "step", "int", default=0)
        if step < 0:
            raise ValueError(f"field 'step' must be a step >= 0; got {step}")
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot read the teacher record ({e}); expected {{run, checkpoint, step}} as written "
                              "by `simforcing train` / `simforcing distill`", path) from e
    return run, run / CHECKPOINTS_DIR / checkpoint.name


def resumed_teacher(run_dir: Path, teacher_run: Optional[Path]) -> tuple[Optional[Path], Optional[Path]]:
    """On --resume: (the teacher run, the checkpoint of it to open; None: its newest) — the run teacher.json
    records (``--teacher`` may leave it out) and the checkpoint it recorded. A resumed run keeps its teacher's weights:
    a recorded teacher folder or checkpoint that is no longer there (removed; retrained or pruned since) is a
    ConfigError naming it (the resume took the teacher's newest checkpoint without a word, and recorded it in place of
    the first one). A ``--teacher`` standing in for a recorded teacher that is gone (``runs.folder.check_same_teacher``
    warns) is opened at its newest."""
    recorded_run, recorded_ckpt = recorded_teacher(run_dir)
    if recorded_run is None or recorded_ckpt is None:
        return teacher_run, None
    if teacher_run is not None and Path(teacher_run).resolve() != recorded_run.resolve():
        return teacher_run, None  # the stand-in for a teacher that is gone
    keep = "a resumed run keeps its teacher's weights"
    if not recorded_run.is_dir():
        raise ConfigError(f"--teacher: {run_dir} was started from the teacher {recorded_run} ({TEACHER_FILE}), which "
                          f"is no longer there; {keep} — restore it, or give --teacher RUN of the same weights (it "
                          "stands in, with a warning)")
    if not recorded_ckpt.is_dir():
        steps = [s for s, _ in list_checkpoints(recorded_run)]
        raise ConfigError(f"--teacher: {run_dir} was started from {recorded_ckpt.name} of {recorded_run} "
                          f"({TEACHER_FILE}), which is no longer there (the teacher holds steps {steps or 'none'} now: "
                          f"retrained or pruned since); {keep} — restore that checkpoint, or start a new run in "
                          "another --out")
    return recorded_run, recorded_ckpt


TEACHER_VAE = ("the student starts from its teacher's weights, which read that VAE's latents — train with "
               "--model.vae.path set to that VAE (or a copy of it), or give --teacher a run trained with this VAE")


def resolve_teacher(run_dir: Path, teacher_run: Optional[Path], resume: bool, cfg: Config) -> tuple[Path, Run]:
    """(the stage-1 run, the opened teacher checkpoint) stage 2 starts from: ``--teacher`` (on ``--resume`` it may be
    left out: teacher.json names it, and its recorded checkpoint is the one reused: :func:`resumed_teacher`).
    ConfigError when it is not a stage-1 run or has another architecture than ``cfg``."""
    checkpoint = None
    if resume:
        teacher_run, checkpoint = resumed_teacher(run_dir, teacher_run)
    if teacher_run is None:
        raise ConfigError("--teacher: stage 2 needs the stage-1 run folder (RUN1)")
    if not teacher_run.is_dir():
        raise ConfigError(f"--teacher: {teacher_run} is not a folder; expected a stage-1 run folder of `simforcing "
                          "pretrain` (config.json + checkpoints/)")
    try:
        teacher = open_run(teacher_run, ("stage1",), "--teacher", "teacher", checkpoint=checkpoint)
    except CheckpointError as e:
        if "no valid checkpoint" in str(e):
            raise CheckpointError("no valid checkpoint to start stage 2 from", teacher_run / CHECKPOINTS_DIR) from e
        raise
    check_teacher_architecture(cfg, teacher.cfg, str(teacher_run), STUDENT_ADDITIONS)
    check_same_vae(cfg, teacher_run, teacher.checkpoint, TEACHER_VAE)
    check_teacher_pairing(cfg, teacher_run, teacher)
    return teacher_run, teacher


def check_teacher_pairing(cfg: Config, teacher_run: Path, teacher: Run) -> None:
    """ConfigError when the student's data (``cfg.data.root``) is of another pairing than the teacher was trained on
    (an arm-alone simulation prior taught on full-scene videos, or the reverse)."""
    check_same_pairing(teacher_run, trained_pairing(teacher.cfg, teacher.checkpoint.meta),
                       data_pairing(cfg, None if cfg.data.latent_cache else cfg.data.root), cfg.data.root,
                       "the student starts from its teacher's simulation prior, of the other domain")


# ----------------------------------------------------------------------------------------------------------------------
# The data a run was trained on
# ----------------------------------------------------------------------------------------------------------------------


def _episodes(dataset: Any) -> list[tuple[str, int]]:
    """(episode id, length) of the episodes a dataset trains on (paired, policy or latent-cache datasets)."""
    out = []
    for e in getattr(dataset, "episodes", []):
        info = getattr(e, "info", e)
        if isinstance(info, dict):
            out.append((str(info.get("episode_id")), int(info.get("length", -1))))
        else:
            out.append((str(info.episode_id), int(info.length)))
    return out


def data_record(cfg: Config, dataset: Any) -> dict:
    """What a checkpoint records about the data it was trained on (meta.json ``data``): the folder, the episodes (a
    fingerprint of their ids and lengths) and the episodes left out (bad ones skipped, ones shorter than a window)."""
    episodes = _episodes(dataset)
    digest = hashlib.sha256(json.dumps(episodes).encode()).hexdigest()[:16]
    root = cfg.data.latent_cache or cfg.data.root
    return {"root": str(Path(root).resolve()) if root else None,
            "source": "latent_cache" if cfg.data.latent_cache else "dataset", "episodes": len(episodes),
            "fingerprint": digest, "skipped": [eid for eid, _ in getattr(dataset, "skipped", [])],
            "too_short": [eid for eid, _ in getattr(dataset, "dropped", [])]}


def _stats_changes(theirs: dict, ours: dict, limit: int = 4) -> list[str]:
    """'action max[2] 1 -> 1.2' for each statistic that differs (at most ``limit`` named)."""
    out = []
    for key in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(key), ours.get(key)
        if not isinstance(a, dict) or not isinstance(b, dict):
            if a != b and key in ("action", "state"):
                out.append(f"{key} statistics {'added' if a is None else 'removed'}")
            continue
        for field in ("min", "max"):
            va, vb = list(a.get(field) or []), list(b.get(field) or [])
            if len(va) != len(vb):
                out.append(f"{key} {field}: {len(va)} values -> {len(vb)}")
                continue
            out += [f"{key} {field}[{i}] {x:.6g} -> {y:.6g}" for i, (x, y) in enumerate(zip(va, vb)) if x != y]
    return out[:limit] + ([f"+{len(out) - limit} more"] if len(out) > limit else [])


def data_changes(meta: dict, stats_now: Optional[dict], record_now: dict) -> list[str]:
    """What differs between the data a checkpoint was trained on (its meta.json ``stats`` and ``data``) and the data
    now: one phrase each (nothing for a checkpoint of the same data)."""
    out = []
    recorded = meta.get("data") or {}
    if recorded.get("root") and recorded["root"] != record_now["root"]:
        out.append(f"data folder {recorded['root']} -> {record_now['root']}")
    if recorded.get("fingerprint") and recorded["fingerprint"] != record_now["fingerprint"]:
        out.append(f"episodes changed ({recorded.get('episodes')} -> {record_now['episodes']} episodes, ids or "
                   "lengths differ)")
    theirs = meta.get("stats")
    if stats_now is not None and isinstance(theirs, dict):
        changed = _stats_changes(theirs, stats_now)
        if changed:
            out.append("normalisation statistics changed (stats.json: " + ", ".join(changed) + ")")
    return out
