"""`simforcing policy train`: the policy as a training stage (``POLICY``, a ``training.stage.Stage``) run by the loop
every stage shares (``training.loop.Trainer``: run folder, checkpoints, resume, SIGTERM/SIGINT, faults, NaN stop,
FSDP2), with the policy's data, model, initialisation and step.

    policy_train_run(cfg, out_dir, init="base" | RUN, resume=False) -> the result dict of ``train.train_run``

``cfg`` is a policy config (``settings.policy_config``). On a fresh start the model is built with the setting's
attention mode, initialised by ``init.init_policy`` (the report goes to ``RUN/init.json`` and stdout) and, for
``action_only``, every video parameter is frozen (AdamW sees only the trainable ones). ``--resume`` restores the
checkpoint instead (the initialisation is not redone) and continues only a run of the same setting. Each batch: the
observation window -> frozen VAE -> ``z``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from simforcing.config import Config, ConfigError
from simforcing.models.world_model import build_world_model
from simforcing.policy.data import PolicyWindowDataset
from simforcing.policy.init import init_policy
from simforcing.policy.settings import ATTENTION_MODE, check_setting, freeze_for_setting
from simforcing.policy.steps import policy_step
from simforcing.runs.folder import check_same_vae, newest_readable, resume_command
from simforcing.training.loop import Trainer
from simforcing.training.stage import Models, Stage, Start, StartFolder

_KEYS = ("actions", "state0", "text", "text_mask")


def _check(cfg: Config) -> None:
    check_setting(cfg.policy.setting)
    if not cfg.model.action_head:
        raise ConfigError("model.action_head: False; a policy needs the action head (policy train sets it)")
    if cfg.train.rollout_prob > 0:
        raise ConfigError(f"train.rollout_prob: got {cfg.train.rollout_prob}; a policy trains on recorded "
                          "observation windows only (set it to 0)")


def _same_setting(theirs: Config, cfg: Config, run_dir: Path) -> None:
    if theirs.policy.setting != cfg.policy.setting:
        raise ConfigError(f"policy.setting: {run_dir} is a {theirs.policy.setting!r} policy run, the resumed config "
                          f"asks {cfg.policy.setting!r}; --resume continues a run of the same setting — use "
                          f"`{resume_command(run_dir, 'policy', theirs)}`")


def _start(cfg: Config, folder: StartFolder, start: Start) -> Start:
    """A fresh start from a run (``--init RUN``): the VAE the policy encodes with must be the one that run was
    trained with (its checkpoint's meta.json ``inputs``; ``runs.folder.check_same_vae``) — its video expert reads
    that VAE's latents."""
    init = start.init
    if init not in (None, "base") and not (folder.resume and folder.has_checkpoints) and Path(init).is_dir():
        ref = newest_readable(init)
        if ref is not None:
            check_same_vae(cfg, init, ref, "the policy starts from its weights, which read that VAE's latents — "
                           "train with --model.vae.path set to that VAE (or a copy of it), or --init a run trained "
                           "with this one")
    return start


def _models(cfg: Config, start: Start, meta: bool, fresh: bool) -> Models:
    """The policy with its setting's attention mode, initialised from ``start.init`` ("base" or a run) on a fresh
    start, frozen as its setting says."""
    setting = cfg.policy.setting
    model = build_world_model(cfg, device="cpu", meta=meta, attention_mode=ATTENTION_MODE[setting])
    report = init_policy(model, cfg, str(start.init)) if not meta and fresh else None
    freeze_for_setting(model, setting)
    return Models(model, report=report)


def _latents(batch: dict, cfg: Config, device: torch.device, vae: Any) -> dict:
    """The observation window -> latents ``z`` (only its first frame for action_only); actions, state, text."""
    out = {k: batch[k].to(device, non_blocking=True) for k in _KEYS if k in batch}
    obs = batch["obs"].to(device)  # (B, 3, F, H, W)
    if cfg.policy.setting == "action_only":
        obs = obs[:, :, :1]  # only the observation is encoded (the causal VAE encodes frame 0 alone anyway)
    with torch.no_grad():
        out["z"] = vae.encode(obs)  # (B, C, L+1, h, w), or (B, C, 1, h, w) for action_only
    return out


POLICY = Stage(
    name="policy", command="simforcing policy train", describe=lambda cfg: f"policy {cfg.policy.setting}",
    check=_check, dataset=lambda cfg, stats: PolicyWindowDataset(cfg, cfg.data.root, "train", stats=stats),
    encodes=lambda cfg: True, models=_models, step=lambda cfg: policy_step, latents=_latents, latent_keys=("z",),
    resume_check=_same_setting, forward_methods=("policy_forward",), start=_start)


def policy_train_run(cfg: Config, out_dir: str | Path, init: str = "base", resume: bool = False,
                     progress: bool = True) -> dict:
    """Train (or resume) a policy; the result dict of ``simforcing.train.train_run``."""
    return Trainer(POLICY, copy.deepcopy(cfg), out_dir, resume, progress, Start(init=str(init))).run()
