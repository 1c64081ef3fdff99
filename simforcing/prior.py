"""Stage 0, the video prior: the world model's network trained as a plain video model, what stands in for Wan2.2.

    simforcing pretrain --method video_prior --preset demo --data DIR --out RUN0 [--resume]   # text + frame -> video
    simforcing pretrain --init RUN0 --preset demo --data DIR --out RUN1                       # stage 1 from it
    simforcing policy train --setting action_only --init RUN0 ...                            # the "base" policy

The paper's world model starts from Wan2.2, a video model that knows how videos move but has never seen an action,
and its Tab. 5 baseline policy starts from Wan2.2 itself. The demo has no such model, so this stage makes one: the same
two-expert network (same config, so its checkpoints load into a world model or a policy) trained with flow matching on
single videos — every simulation window of train + sim_pool and every real window of train
(``data.videos.VideoWindowDataset``: the videos the world models see in stages 1 and 2 together), the clean first
latent frame and the instruction as the only conditions (``methods.video_prior_step``). No action token and no
proprio-state token ever reach the network: the batch carries neither; the action expert, the state projection and
the simulation-condition projections are frozen (``requires_grad`` False) and stay at the model's own
initialisation, so a run that starts from the prior lists them as *new* (``warmstart.untrained_by``).
``model.weights`` (Wan2.2) is loaded first when set: at real scale this stage would continue Wan2.2 on robot videos;
the paper's pipeline does not need it there (``pretrain`` starts from Wan2.2 directly).

The run folder is a training run like the others (``run.json`` kind "video_base", stage "video_prior";
``config.json`` with ``train.method = "video_prior"``; checkpoints, resume, faults, SIGTERM): the stage
``VIDEO_PRIOR`` (``training.stage.Stage``: this data, model and step) run by ``training.loop.Trainer``. Its kind
(``runs.folder``) decides where it is accepted: ``pretrain --init`` (stage 1 from it) and ``policy train --init``;
``train --teacher``, ``generate``/``evaluate`` and ``pretrain --resume`` refuse it by name with a command that works.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from simforcing.config import VIDEO_PRIOR_METHOD, Config, ConfigError
from simforcing.data.videos import VideoWindowDataset
from simforcing.methods import METHODS, method_preset
from simforcing.models.world_model import build_world_model
from simforcing.training.loop import Trainer
from simforcing.training.stage import Models, Stage, Start
from simforcing.warmstart import is_action_side, load_start_weights


def freeze_action_side(model: torch.nn.Module) -> list[str]:
    """requires_grad False on what the video prior never trains (``warmstart.is_action_side``); returns the names."""
    frozen = []
    for name, p in model.named_parameters():
        if is_action_side(name):
            p.requires_grad_(False)
            frozen.append(name)
    return frozen


def _check(cfg: Config) -> None:
    if cfg.train.method != VIDEO_PRIOR_METHOD:
        raise ConfigError(f"train.method: the video prior trains {VIDEO_PRIOR_METHOD!r}, got {cfg.train.method!r}")
    if cfg.data.latent_cache:
        raise ConfigError("data.latent_cache: the video prior reads the videos themselves (sim and real windows "
                          "one by one); unset it")
    if cfg.train.rollout_prob > 0:
        raise ConfigError(f"train.rollout_prob: got {cfg.train.rollout_prob}; the video prior trains on recorded "
                          "windows only (set it to 0)")


def _models(cfg: Config, start: Start, meta: bool, fresh: bool) -> Models:
    """The network from the start weights (Wan2.2 when configured), its action side frozen."""
    model = build_world_model(cfg, device="cpu", meta=meta)
    if not meta and fresh:
        load_start_weights(model, cfg)
    freeze_action_side(model)
    return Models(model)


def _latents(batch: dict, cfg: Config, device: torch.device, vae: Any) -> dict:
    """Pixels -> latents ``z_video``; the text. Nothing else of the batch goes on (no actions, no states)."""
    out = {k: batch[k].to(device, non_blocking=True) for k in ("text", "text_mask")}
    with torch.no_grad():
        out["z_video"] = vae.encode(batch["video"].to(device))  # (B, 3, F, H, W) -> (B, C, L+1, h, w)
    return out


VIDEO_PRIOR = Stage(
    name="video_prior",  # runs.folder.STAGE_KIND maps it to the run kind "video_base"
    command=f"simforcing pretrain --method {VIDEO_PRIOR_METHOD}", describe=lambda cfg: "video prior", check=_check,
    dataset=lambda cfg, stats: VideoWindowDataset(cfg, cfg.data.root, stats=stats), encodes=lambda cfg: True,
    models=_models, step=lambda cfg: METHODS[VIDEO_PRIOR_METHOD], latents=_latents, latent_keys=("z_video",),
    facts=lambda dataset: {"videos": dataset.counts})  # episodes per domain


def video_prior_run(cfg: Config, out_dir: str | Path, resume: bool = False, progress: bool = True) -> dict:
    """Train (or resume) the video prior; the result dict of ``simforcing.train.train_run``."""
    cfg = method_preset(copy.deepcopy(cfg), VIDEO_PRIOR_METHOD)
    return Trainer(VIDEO_PRIOR, cfg, out_dir, resume, progress).run()
