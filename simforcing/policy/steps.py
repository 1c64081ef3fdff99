"""The policy's training step (SPEC §9): flow matching on the action chunk, plus on the future video latents (the
first latent frame excluded, it is the clean observation) in the settings that have video.

    loss, logs = policy_step(model, None, batch, cfg, gen)      # the train loop's step-function signature

``batch``: ``z`` (B, C, L+1, h, w) latents of the observation window ([external | wrist]), ``actions`` (B, A, 7)
normalised, ``state0``, ``text``, ``text_mask``. Random numbers from ``gen`` in a fixed order: ε_a, t_a, then (with
video) ε_v, t_v — future latents and actions are noised independently (FastWAM). Action times: ``policy.t_sampling``
(continuous, as FastWAM) with the flow's shift; the action term's per-sample weight is ``flow.loss_weight`` with
``policy.loss_weighting`` (the Gaussian bump); the video term keeps the world model's own ``flow`` settings (its
parameterisation was trained with them). Total = policy.video_loss · video FM + policy.action_loss · action FM.
Logs: ``fm_action``, ``fm_video`` (settings with video), ``loss``. A non-finite term or total raises NonFiniteLoss
(``losses.weighted_total``, as the world model's methods).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
from torch import nn

import simforcing.flow as flow
from simforcing.config import Config, FlowConfig
from simforcing.losses import flow_matching_loss, weighted_total
from simforcing.policy.settings import WITH_VIDEO


def action_flow(cfg: Config) -> FlowConfig:
    """The flow settings of the action chunk: the world model's shift and levels, the policy's sampling and weight."""
    return dataclasses.replace(cfg.flow, t_sampling=cfg.policy.t_sampling, loss_weighting=cfg.policy.loss_weighting)


def policy_step(model: nn.Module, teacher: Optional[nn.Module], batch: dict, cfg: Config,
                gen: torch.Generator) -> tuple[torch.Tensor, dict]:
    z, actions = batch["z"], batch["actions"]
    z0, future = z[:, :, :1], z[:, :, 1:]
    b, dev = actions.shape[0], actions.device
    fa = action_flow(cfg)
    eps_a = torch.randn(actions.shape, generator=gen, device=dev, dtype=actions.dtype)
    tau_a, t_a = flow.sample_tau(b, fa, gen, dev)
    a_t = flow.add_noise(actions, eps_a, tau_a)  # (B, A, 7)
    terms = {}
    if cfg.policy.setting in WITH_VIDEO:
        eps_v = torch.randn(future.shape, generator=gen, device=dev, dtype=future.dtype)
        tau_v, t_v = flow.sample_tau(b, cfg.flow, gen, dev)
        u_v, u_a = model.policy_forward(flow.add_noise(future, eps_v, tau_v), tau_v, z0, a_t, tau_a,
                                        batch["state0"], batch["text"], batch.get("text_mask"))
        terms["fm_video"] = (cfg.policy.video_loss, flow_matching_loss(
            u_v, flow.velocity_target(future, eps_v), flow.loss_weight(t_v, cfg.flow)).value)
    else:  # action-only: the observation alone, no future frames
        _, u_a = model.policy_forward(None, None, z0, a_t, tau_a, batch["state0"], batch["text"],
                                      batch.get("text_mask"))
    terms["fm_action"] = (cfg.policy.action_loss, flow_matching_loss(
        u_a, flow.velocity_target(actions, eps_a), flow.loss_weight(t_a, fa)).value)
    return weighted_total(terms)
