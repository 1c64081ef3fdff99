"""The world model's training stages: stage 1 ``simforcing pretrain`` and stage 2 ``simforcing train`` (SPEC §3, §4,
§7), each one specification (``training.stage.Stage``) run by the loop every stage shares (``training.loop``).

    simforcing pretrain --preset demo --data DIR --out RUN1 [--init RUN0] [--resume] [--section.field=value ...]
    simforcing train --method simforcing --teacher RUN1 --data DIR --out RUN2 [--resume] [overrides]
    torchrun --nproc_per_node=N -m simforcing train ...          (FSDP2, see simforcing.parallel)
    train_run(cfg, out_dir, stage, teacher_run=None, resume=False, progress=True, method=None, init=None) -> dict

Stage 1 (``SIM_PRETRAIN``) trains the simulation world model with ``sim_pretrain`` on the sim windows of train +
sim_pool, from Wan2.2 weights (``model.weights``) or a video base (``--init RUN0``, ``simforcing.warmstart``). Stage 2
(``STAGE2``) trains a real-domain student with one of the five methods on the paired windows of train, from the
stage-1 teacher's checkpoint, beside a frozen copy of it when the method distils. Both read pixel windows (encoded by
the frozen VAE) or a latent cache, and with ``train.rollout_prob`` windows of two chunks (the student's own rollouts).
The recipe, the run folder's life cycle, resume and the exit codes are in docs/DESIGN.md ("Training").
"""

from __future__ import annotations

import copy
import dataclasses
from functools import partial
from pathlib import Path
from typing import Any, Optional

import torch

from simforcing.config import STAGE1_METHOD, STAGE2_METHODS, Config, ConfigError
from simforcing.data.latent_cache import LatentWindowDataset
from simforcing.data.paired import PairedWindowDataset
from simforcing.methods import METHODS, method_preset, needs_previous_chunk, needs_teacher, rollout_windows
from simforcing.models.weights import frozen_copy
from simforcing.models.world_model import build_world_model, new_condition_tensor
from simforcing.runs.checkpoint import load_model_state
from simforcing.runs.folder import INIT_FILE, check_same_teacher, recorded_init
from simforcing.runs.loaded import CONDITION_FIELDS, differing_fields
from simforcing.training.checks import resolve_teacher
from simforcing.training.loop import Trainer
from simforcing.training.stage import Models, Stage, Start, StartFolder
from simforcing.warmstart import check_init_run, init_from_run, load_start_weights

__all__ = ["SIM_PRETRAIN", "STAGE2", "train_run"]

# what the steps read ("states": the second chunk's first state when training on own rollouts)
_BATCH_KEYS = ("sim", "real", "z_sim", "z_real", "actions", "state0", "text", "text_mask", "states", "arm_mask",
               "has_arm_mask")


# ----------------------------------------------------------------------------------------------------------------------
# Data and latents (both stages)
# ----------------------------------------------------------------------------------------------------------------------


def _windows(splits: tuple[str, ...], domains: tuple[str, ...], cfg: Config, stats: Optional[dict]) -> Any:
    """The windows of ``splits`` in ``domains``: from the latent cache (``data.latent_cache``) or the dataset's
    pixels (two chunks per window when training on own rollouts)."""
    if cfg.data.latent_cache:
        return LatentWindowDataset(cfg, cfg.data.latent_cache, splits, domains, 0, stats)
    return PairedWindowDataset(rollout_windows(cfg), cfg.data.root, splits, domains, 0, stats)


def _pixels_encoded(cfg: Config) -> bool:
    return not cfg.data.latent_cache


def _latents(domains: tuple[str, ...], batch: dict, cfg: Config, device: torch.device, vae: Any) -> dict:
    """Move to the device; pixels -> latents with the frozen VAE (no grad). With ``train.rollout_prob`` (or ``train.context_ghost``)
    the windows hold two chunks: the second is the training window, the first its ``*_prev`` (``methods.own_first_frames``)."""
    out = {k: batch[k].to(device, non_blocking=True) for k in _BATCH_KEYS if k in batch}
    states = out.pop("states", None)
    own = needs_previous_chunk(cfg)
    if vae is not None:
        with torch.no_grad():
            for d in domains:
                video = out.pop(d)  # (B, 3, F, H, W); two chunks (2F - 1 frames) when training on own rollouts
                if own:
                    f = cfg.data.frames
                    out[f"z_{d}_prev"] = vae.encode(video[:, :, :f])
                    video = video[:, :, f - 1:]
                out[f"z_{d}"] = vae.encode(video)  # (B, 3, F, H, W) -> (B, C, L+1, h, w)
        if own:
            if "arm_mask" in out:
                out["arm_mask"] = out["arm_mask"][:, cfg.data.frames - 1:]
            a = cfg.data.actions_per_window
            out["actions_prev"], out["actions"] = out["actions"][:, :a], out["actions"][:, a:]
            out["state0_prev"], out["state0"] = out["state0"], states[:, cfg.data.frames - 1]
    return out


def _method_step(cfg: Config):
    return METHODS[cfg.train.method]


def _same_condition_path(theirs: Config, cfg: Config, run_dir: Path) -> None:
    """``conditioning.path`` decides the network's tensors (the input's condition channels) and
    ``conditioning.representation`` what they read (c itself, or its motion), so a resume keeps both (both stages; a
    stage-2 run may choose others than its teacher's)."""
    for name, was, now in differing_fields(theirs, cfg, CONDITION_FIELDS)[:1]:
        why = "the network's tensors" if name == "conditioning.path" else "what the trained projections read"
        raise ConfigError(f"{name}: {run_dir} was trained with {was!r}, the resumed config asks {now!r}; it decides "
                          f"{why}, so it cannot change on --resume (start a new run)")


# ----------------------------------------------------------------------------------------------------------------------
# Stage 1: the simulation world model
# ----------------------------------------------------------------------------------------------------------------------


def _check_stage1(cfg: Config) -> None:
    if cfg.train.method != STAGE1_METHOD:
        raise ConfigError(f"train.method: stage 1 trains 'sim_pretrain', got {cfg.train.method!r}")


def _recorded_start(folder: StartFolder, init: Optional[Path]) -> Optional[Path]:
    """A resumed stage 1 keeps the start it recorded (RUN/init.json): before its first checkpoint the weights still
    come from it, so `pretrain --resume` without --init uses the recorded run, and an --init naming another run is
    refused (two starts for one run)."""
    recorded = recorded_init(folder.path)
    if recorded is None:
        if init is not None and folder.has_checkpoints:
            raise ConfigError(f"--init {init}: {folder.path} did not start from another run (its {INIT_FILE} "
                              "records none) and already holds checkpoints; resume it without --init")
        return init
    if init is None:
        if not folder.has_checkpoints:
            print(f"{folder.label}: resuming {folder.path} before its first checkpoint: starting again from "
                  f"{recorded} (its {INIT_FILE})", flush=True)
        return Path(recorded)
    if init.resolve() != Path(recorded).resolve():
        raise ConfigError(f"--init {init}: {folder.path} started from {recorded} ({folder.path / INIT_FILE}); resume "
                          "it without --init, or start a new run in another --out")
    return init


def _stage1_start(cfg: Config, folder: StartFolder, start: Start) -> Start:
    """``--init RUN0`` (or the one a resumed run recorded): one start, a video base of this architecture."""
    init = Path(start.init) if start.init is not None else None
    if folder.resume:
        init = _recorded_start(folder, init)
    if init is not None:
        if cfg.model.weights or cfg.model.action_expert_weights:
            raise ConfigError(f"--init {init} and model.weights / model.action_expert_weights are two starts; "
                              "choose one")
        if not (folder.resume and folder.has_checkpoints):
            check_init_run(cfg, init)
    return dataclasses.replace(start, init=init)


def _stage1_models(cfg: Config, start: Start, meta: bool, fresh: bool) -> Models:
    """The student from ``--init RUN0`` (every tensor it trained; the report goes to init.json) or the start weights
    (Wan2.2 when configured, else the model's own init)."""
    student = build_world_model(cfg, device="cpu", meta=meta)
    if meta or not fresh:
        return Models(student)
    if start.init is not None:
        return Models(student, report=init_from_run(student, cfg, start.init))
    load_start_weights(student, cfg)
    return Models(student)


SIM_PRETRAIN = Stage(
    name="pretrain", command="simforcing pretrain", describe=lambda cfg: f"pretrain {cfg.train.method}",
    check=_check_stage1, dataset=partial(_windows, ("train", "sim_pool"), ("sim",)), encodes=_pixels_encoded,
    models=_stage1_models, step=_method_step, latents=partial(_latents, ("sim",)), latent_keys=("z_sim",),
    rollout_domain="sim", start=_stage1_start, resume_check=_same_condition_path)


# ----------------------------------------------------------------------------------------------------------------------
# Stage 2: the real-domain student, taught by the frozen stage-1 model
# ----------------------------------------------------------------------------------------------------------------------


def _check_stage2(cfg: Config) -> None:
    if cfg.train.method not in STAGE2_METHODS:
        raise ConfigError(f"train.method: got {cfg.train.method!r}; stage 2 expects one of "
                          f"{', '.join(STAGE2_METHODS)}")


def _stage2_start(cfg: Config, folder: StartFolder, start: Start) -> Start:
    """The stage-1 run and its checkpoint (``checks.resolve_teacher``; on --resume the one teacher.json records:
    another --teacher is refused by name, ``runs.folder.check_same_teacher``)."""
    if folder.resume:
        check_same_teacher(folder.path, start.teacher_run)
    teacher_run, teacher = resolve_teacher(folder.path, start.teacher_run, folder.resume, cfg)
    if start.init is not None:
        raise ConfigError("--init: train does not start from another run's weights (stage 1 does: "
                          "`simforcing pretrain --init RUN0`)")
    return dataclasses.replace(start, teacher_run=teacher_run, teacher=teacher.checkpoint)


def _stage2_models(cfg: Config, start: Start, meta: bool, fresh: bool) -> Models:
    """The student from the teacher's checkpoint (also on resume: the teacher is a frozen copy of those weights,
    built only when the method has a distillation term). The input's condition channels (``conditioning.path``
    concat/both), which a stage-1 run does not have, start at zero, as the P_j do."""
    student = build_world_model(cfg, device="cpu", meta=meta)
    if not meta:
        load_model_state(start.teacher, student, new=new_condition_tensor)
    return Models(student, frozen_copy(student) if needs_teacher(cfg) else None)


STAGE2 = Stage(
    name="train", command="simforcing train", describe=lambda cfg: f"train {cfg.train.method}", check=_check_stage2,
    dataset=partial(_windows, ("train",), ("sim", "real")), encodes=_pixels_encoded, models=_stage2_models,
    step=_method_step, latents=partial(_latents, ("sim", "real")), latent_keys=("z_sim", "z_real"),
    rollout_domain="real", start=_stage2_start, resume_check=_same_condition_path)

STAGES = {"pretrain": SIM_PRETRAIN, "train": STAGE2}


# ----------------------------------------------------------------------------------------------------------------------
# Library entry
# ----------------------------------------------------------------------------------------------------------------------


def train_run(cfg: Config, out_dir: str | Path, stage: str, teacher_run: str | Path | None = None,
              resume: bool = False, progress: bool = True, method: str | None = None,
              init: str | Path | None = None) -> dict:
    """Run (or resume) one training stage; returns {"state", "step", "exit_code", "reason", "run_dir",
    "checkpoint", "total_steps", "last_logs", "loss_curves"}.

    stage "pretrain": the method is forced to sim_pretrain. stage "train": ``method`` (if given) is applied with
    ``method_preset`` on a copy of ``cfg``; ``teacher_run`` is the stage-1 run folder (on resume it may be omitted:
    teacher.json records it); ``init`` (stage 1): a video-base run to start from instead of ``model.weights`` (every
    tensor it trained, ``simforcing.warmstart``; the report goes to ``RUN/init.json``). Raises ConfigError, DataError
    or CheckpointError (status "failed" once the run folder exists); divergence and stop requests are results (exit
    codes 3 and 75), not exceptions.
    """
    if stage not in STAGES:
        raise ValueError(f"stage: got {stage!r}; expected one of {', '.join(map(repr, STAGES))}")
    cfg = copy.deepcopy(cfg)
    if stage == "pretrain":
        method_preset(cfg, STAGE1_METHOD)
    elif method is not None:
        if method not in STAGE2_METHODS:
            raise ConfigError(f"--method: got {method!r}; expected one of {', '.join(STAGE2_METHODS)}")
        method_preset(cfg, method)
    start = Start(teacher_run=Path(teacher_run) if teacher_run is not None else None, init=init)
    return Trainer(STAGES[stage], cfg, out_dir, resume, progress, start).run()
