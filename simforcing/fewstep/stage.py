"""`simforcing distill`: a few-step student of a stage-2 world model, as a training stage of the shared loop.

    distill_run(cfg, out_dir, teacher_run=RUN2, resume=False) -> dict            (``training.loop.Trainer``'s result)
    cfg = distill_config(teacher_cfg, steps=K, objective="trajectory", w=None)    # the student's config

The run (kind ``fewstep``, ``runs.folder.STAGE_KIND["distill"]``) reads the stage-2 windows (sim and real, pixels or a
latent cache), starts the student from the teacher's checkpoint beside a frozen copy of it, and steps
``objective.fewstep_step``. Its config is the teacher's with the ``fewstep`` section set: K, the objective, the
teacher's sampler (N_s, N_r, w) it reproduces; teacher.json records the teacher's run and checkpoint, and a resume
continues from them. Only a stage-2 run teaches (a student, a stage-1 run or a policy is refused by name).
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Optional

from simforcing.runs.checkpoint import load_model_state
from simforcing.config import Config, ConfigError
from simforcing.errors import CheckpointError
from simforcing.fewstep.objective import fewstep_step
from simforcing.models.weights import frozen_copy
from simforcing.models.world_model import build_world_model
from simforcing.runs.folder import CHECKPOINTS_DIR, check_same_teacher, check_same_vae, open_run, own_sampler
from simforcing.runs.loaded import CONDITION_FIELDS, check_teacher_architecture, differing_fields
from simforcing.train import STAGE2
from simforcing.training.checks import TEACHER_VAE, check_teacher_pairing, resumed_teacher
from simforcing.training.loop import Trainer
from simforcing.training.stage import Models, Stage, Start, StartFolder

TEACHER_KINDS = ("stage2",)
# what a resumed student must keep: the student it is (its K, objective and the sampler it reproduces)
FIXED_FIELDS = ("fewstep.steps", "fewstep.objective", "fewstep.w", "fewstep.teacher_n_sim", "fewstep.teacher_n_real",
                *CONDITION_FIELDS)


def distill_config(teacher_cfg: Config, steps: int, objective: str = "trajectory",
                   w: Optional[float] = None) -> Config:
    """The student's config: the teacher's (a copy), the ``fewstep`` section set to K = ``steps``, ``objective``
    and the teacher's sampler (its ``sample`` section's N_s, N_r and w; ``w`` given: that weight instead), its own
    ``sample`` section the sampler it samples with (``runs.folder.own_sampler``), and the training levers that read
    earlier chunks (``train.rollout_prob``, ``context_ghost``, ``context_noise``) off: the student learns the
    teacher's samples of the given window."""
    cfg = copy.deepcopy(teacher_cfg)
    s = cfg.sample
    cfg.fewstep = dataclasses.replace(cfg.fewstep, steps=int(steps), objective=objective,
                                      w=float(s.w if w is None else w), teacher_n_sim=s.n_sim,
                                      teacher_n_real=s.n_real)
    cfg.train.rollout_prob = cfg.train.context_ghost = cfg.train.context_noise = 0.0
    return own_sampler(cfg)


def _check(cfg: Config) -> None:
    if not cfg.fewstep.steps:
        raise ConfigError("fewstep.steps: got 0; `simforcing distill` trains a K-step student: pass --steps K "
                          "(1, 2 or 4)")


def _resume_check(theirs: Config, cfg: Config, run_dir: Path) -> None:
    for name, was, now in differing_fields(theirs, cfg, FIXED_FIELDS)[:1]:
        raise ConfigError(f"{name}: {run_dir} distils with {was!r}, the resumed config asks {now!r}; a student "
                          "keeps what it distils — start a new run in another --out")


def _start(cfg: Config, folder: StartFolder, start: Start) -> Start:
    """The teacher: ``--teacher`` (on --resume it may be left out: teacher.json names it, and its checkpoint is
    the one reused — one no longer there is refused by name, ``training.checks.resumed_teacher``), a stage-2 run of
    the same architecture."""
    teacher_run, checkpoint = start.teacher_run, None
    if folder.resume:
        check_same_teacher(folder.path, teacher_run)  # another --teacher is refused by name
        teacher_run, checkpoint = resumed_teacher(folder.path, teacher_run)  # its recorded weights, or refused
    if teacher_run is None:
        raise ConfigError("--teacher: `simforcing distill` needs the world model to distil (a `simforcing train` "
                          "run folder)")
    if start.init is not None:
        raise ConfigError("--init: a student starts from its teacher's weights (--teacher)")
    try:
        teacher = open_run(teacher_run, TEACHER_KINDS, "--teacher", "distill_teacher", checkpoint=checkpoint)
    except CheckpointError as e:
        if "no valid checkpoint" in str(e):
            raise CheckpointError("no valid checkpoint to distil", Path(teacher_run) / CHECKPOINTS_DIR) from e
        raise
    check_teacher_architecture(cfg, teacher.cfg, str(teacher_run))
    check_same_vae(cfg, teacher_run, teacher.checkpoint, TEACHER_VAE)
    check_teacher_pairing(cfg, Path(teacher_run), teacher)
    return dataclasses.replace(start, teacher_run=Path(teacher_run), teacher=teacher.checkpoint)


def _models(cfg: Config, start: Start, meta: bool, fresh: bool) -> Models:
    """The student from the teacher's checkpoint and a frozen copy of it (also on resume: the teacher stays)."""
    student = build_world_model(cfg, device="cpu", meta=meta)
    if not meta:
        load_model_state(start.teacher, student)
    return Models(student, frozen_copy(student))


DISTILL = Stage(
    name="distill", command="simforcing distill",
    describe=lambda cfg: f"distill {cfg.fewstep.steps}-step {cfg.fewstep.objective}", check=_check,
    dataset=STAGE2.dataset, encodes=STAGE2.encodes, models=_models, step=lambda cfg: fewstep_step,
    latents=STAGE2.latents, latent_keys=STAGE2.latent_keys, start=_start, resume_check=_resume_check)


def distill_run(cfg: Config, out_dir: str | Path, teacher_run: str | Path | None = None, resume: bool = False,
                progress: bool = True) -> dict:
    """Run (or resume) a distillation into ``out_dir`` (``cfg``: :func:`distill_config` of the teacher's, or the
    run's own on resume); the trainer's result dict (state, step, exit_code, checkpoint, last_logs, ...)."""
    start = Start(teacher_run=Path(teacher_run) if teacher_run is not None else None)
    return Trainer(DISTILL, cfg, out_dir, resume, progress, start).run()
