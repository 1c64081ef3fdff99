"""Loss terms of SPEC §3–§4 and §6, the simulation-condition corruption and the gate.

Every loss returns a :class:`Term`: ``per_sample`` (B,) = mean squared error over all of a sample's elements times
that sample's weight (the flow-matching timestep weight), and ``value`` = its batch mean (a scalar). Teacher-side
inputs are detached inside the distillation losses (``sg``), so a caller cannot forget it. :func:`weighted_total` is
the one place a step function sums its terms and checks them for NaN/inf (world-model methods and the policy alike).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from simforcing.config import ConditioningConfig


class NonFiniteLoss(FloatingPointError):
    """A loss term is NaN or infinite. ``term`` names it (e.g. "md_real"), ``value`` is what it was."""

    def __init__(self, term: str, value: float):
        self.term = term
        self.value = value
        super().__init__(f"non-finite loss: term {term!r} = {value}")


def weighted_total(terms: dict[str, tuple[float, torch.Tensor]]) -> tuple[torch.Tensor, dict[str, float]]:
    """Σ λ·value over ``terms`` (name -> (λ, scalar value)), in their order; returns (total, logs) with logs = every
    term's value (before its λ) and ``loss`` (the total). Raises NonFiniteLoss naming the first NaN/inf term, or
    ``loss`` when only the total is not finite (e.g. an overflow)."""
    logs: dict[str, float] = {}
    for name, (_, value) in terms.items():
        v = float(value.detach())
        if not math.isfinite(v):
            raise NonFiniteLoss(name, v)
        logs[name] = v
    loss = sum(weight * value for weight, value in terms.values())
    logs["loss"] = float(loss.detach())
    if not math.isfinite(logs["loss"]):
        raise NonFiniteLoss("loss", logs["loss"])
    return loss, logs


class Term(NamedTuple):
    value: torch.Tensor  # scalar: batch mean of per_sample
    per_sample: torch.Tensor  # (B,)


def _weighted_mse(a: torch.Tensor, b: torch.Tensor, weight: torch.Tensor | None, name: str,
                  region: torch.Tensor | None = None) -> Term:
    """Mean squared error per sample × weight. ``region`` (B, 1, L, h, w), broadcast over channels: a per-position
    weight, normalised to mean 1 per sample, so it moves the emphasis without changing the loss's scale."""
    if a.shape != b.shape:
        raise ValueError(f"{name}: prediction {tuple(a.shape)} and target {tuple(b.shape)} must have the same shape")
    sq = (a.float() - b.float()).pow(2)
    if region is not None:
        r = region.float().expand_as(sq)
        sq = sq * (r / r.flatten(1).mean(dim=1).view(-1, *([1] * (sq.dim() - 1))))
    per_sample = sq.flatten(1).mean(dim=1)  # (B, ...) -> (B,)
    if weight is not None:
        if weight.shape != per_sample.shape:
            raise ValueError(f"{name}: weight must have shape {tuple(per_sample.shape)}, got {tuple(weight.shape)}")
        per_sample = per_sample * weight.to(per_sample.dtype)
    return Term(per_sample.mean(), per_sample)


def flow_matching_loss(u_hat: torch.Tensor, u: torch.Tensor, weight: torch.Tensor | None = None,
                       region: torch.Tensor | None = None) -> Term:
    """‖û − u‖² per sample (mean over C, L, h, w) × weight; u_hat, u (B, C, L, h, w), weight (B,) or None (= 1);
    ``region``: :func:`region_weight` (None: every position alike)."""
    return _weighted_mse(u_hat, u, weight, "flow_matching_loss", region)


def region_weight(mask: torch.Tensor, temporal_stride: int, spatial_stride: int, strength: float) -> torch.Tensor:
    """Per-position loss weight of the future latents from a window's pixel masks (the robot arm's):
    mask (B, F, H, W) bool with F = 1 + ts·L -> (B, 1, L, H / s, W / s) = 1 + strength·m, where m is the fraction of
    a latent cell's pixels that hold the arm in the first frame or in any frame its latent frame encodes (frames
    (ℓ − 1)·ts + 1 … ℓ·ts for latent ℓ = 1 … L): where the arm goes and where it was, which a prediction that leaves a
    ghost of the start pose gets wrong. ``loss.arm_weight`` is ``strength``; the paper weights every position alike."""
    b, f, h, w = mask.shape
    if (f - 1) % temporal_stride or h % spatial_stride or w % spatial_stride:
        raise ValueError(f"region_weight: mask (B, F, H, W) = {tuple(mask.shape)} does not fit a latent of temporal "
                         f"stride {temporal_stride} and spatial stride {spatial_stride}")
    m = mask.bool()
    groups = m[:, 1:].reshape(b, (f - 1) // temporal_stride, temporal_stride, h, w).any(dim=2)  # (B, L, H, W)
    cover = (groups | m[:, :1]).float()
    frac = torch.nn.functional.avg_pool2d(cover.flatten(0, 1)[:, None], spatial_stride)  # (B·L, 1, h, w)
    return 1.0 + strength * frac.view(b, 1, groups.shape[1], h // spatial_stride, w // spatial_stride)


def latent_motion(z0: torch.Tensor, z_future: torch.Tensor) -> torch.Tensor:
    """m_ℓ = ẑ_{ℓ+1} − ẑ_ℓ, ℓ = 0..L−1, over (ẑ_0 = z0, ẑ_1..ẑ_L = z_future).

    z0 (B, C, 1, h, w), z_future (B, C, L, h, w) -> m (B, C, L, h, w).
    """
    if z0.dim() != 5 or z0.shape[2] != 1 or z0.shape[:2] != z_future.shape[:2] or z0.shape[3:] != z_future.shape[3:]:
        raise ValueError(f"latent_motion: expected z0 (B, C, 1, h, w) matching z_future {tuple(z_future.shape)}, "
                         f"got {tuple(z0.shape)}")
    seq = torch.cat([z0.to(z_future.dtype), z_future], dim=2)  # (B, C, L + 1, h, w)
    return seq[:, :, 1:] - seq[:, :, :-1]


def motion_distill_loss(m_student: torch.Tensor, m_teacher: torch.Tensor, weight: torch.Tensor | None = None,
                        region: torch.Tensor | None = None) -> Term:
    """‖m̂_student − sg(m̂_teacher)‖² per sample × weight (teacher motion detached here)."""
    return _weighted_mse(m_student, m_teacher.detach(), weight, "motion_distill_loss", region)


def value_distill_loss(z_student_hat: torch.Tensor, z_teacher_hat: torch.Tensor,
                       weight: torch.Tensor | None = None, region: torch.Tensor | None = None) -> Term:
    """‖ẑ_student − sg(ẑ_teacher)‖² per sample × weight over the future latents (teacher detached here)."""
    return _weighted_mse(z_student_hat, z_teacher_hat.detach(), weight, "value_distill_loss", region)


def _uniform(batch: int, lo: float, hi: float, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(batch, generator=generator, device=device)


def corrupt_condition(c: torch.Tensor, cond_cfg: ConditioningConfig,
                      generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """SPEC §4 step 3: with probability ``corrupt_prob`` per sample, c' = α·c + σ_c·η.

    α ~ U[alpha_min, alpha_max], σ_c = (1 − α)·σ with σ ~ U[sigma_min, sigma_max], η ~ N(0, I) (its own draw,
    independent of the flow noise ε). c (B, C, L+1, h, w) is never modified; returns (c', applied (B,) bool).
    The same random numbers are drawn whatever the outcome, so the generator's stream does not depend on it.
    """
    b, dev = c.shape[0], c.device
    applied = torch.rand(b, generator=generator, device=dev) < cond_cfg.corrupt_prob
    alpha = _uniform(b, cond_cfg.alpha_min, cond_cfg.alpha_max, generator, dev)
    sigma = _uniform(b, cond_cfg.sigma_min, cond_cfg.sigma_max, generator, dev)
    eta = torch.randn(c.shape, generator=generator, device=dev, dtype=c.dtype)
    shape = (b,) + (1,) * (c.dim() - 1)  # (B,) -> (B, 1, 1, 1, 1)
    alpha_b, sigma_c = alpha.view(shape).to(c.dtype), ((1 - alpha) * sigma).view(shape).to(c.dtype)
    corrupted = alpha_b * c + sigma_c * eta
    return torch.where(applied.view(shape), corrupted, c), applied


def sample_gate(batch: int, p: float, generator: torch.Generator | None = None,
                device: torch.device | str | None = None) -> torch.Tensor:
    """g ~ Bernoulli(p) per sample, float32 (B,) in {0, 1} (shared by all blocks). Device: ``device`` or the
    generator's."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"conditioning.p: got {p}; expected a probability in [0, 1]")
    if device is None:
        device = generator.device if generator is not None else "cpu"
    return (torch.rand(batch, generator=generator, device=device) < p).to(torch.float32)
