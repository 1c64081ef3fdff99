"""Flow matching: the one time convention of the project, noise/targets, time sampling, loss weights, Euler steps.

Convention (Wan2.2's; SPEC §2, DESIGN "Time convention"): flow time ``τ ∈ [0, 1]``, **τ = 1 is pure noise, τ = 0 is
data**. (The ``flow_matching`` library runs the other way: its t = 1 is data. Never mix the two.)

    z(τ) = (1 − τ)·z + τ·ε           add_noise
    u    = ε − z                      velocity_target   (dz(τ)/dτ along the straight path)
    ẑ    = z(τ) − τ·û                 clean_estimate
    τ    = s·t / (1 + (s − 1)·t)      shift_time, s = cfg.flow.shift (5)
    1000·τ                            wan_timestep: what Wan's network reads as its timestep

``t`` is the unshifted time: either one of the ``N = cfg.flow.num_train_timesteps`` training levels ``k/N``,
``k = 1..N``, drawn uniformly (diffusers ``FlowMatchEulerDiscreteScheduler``, DiffSynth-Studio's Wan training), or
continuous ``U(0, 1]`` (``cfg.flow.t_sampling``). Per-sample times have shape (B,) and broadcast over (B, C, L, h, w).
"""

from __future__ import annotations

import functools
from typing import Union

import torch

from simforcing.config import FlowConfig

Time = Union[torch.Tensor, float]

WAN_TIMESTEP_SCALE = 1000.0  # Wan's timestep for flow time τ is 1000·τ (its schedule's 1000 levels)


def wan_timestep(tau: torch.Tensor) -> torch.Tensor:
    """The timestep Wan's network embeds for flow time τ: 1000·τ (same shape and dtype as ``tau``)."""
    return WAN_TIMESTEP_SCALE * tau


def shift_time(t: Time, shift: float) -> Time:
    """The timestep shift τ = s·t / (1 + (s − 1)·t): maps 0 → 0 and 1 → 1, monotone, pushes times towards noise."""
    return shift * t / (1 + (shift - 1) * t)


def _per_sample(tau: Time, like: torch.Tensor) -> Time:
    """(B,) → (B, 1, ..., 1) so a per-sample time broadcasts over ``like`` (B, C, L, h, w); scalars pass through."""
    if isinstance(tau, torch.Tensor) and tau.dim() == 1:
        if tau.shape[0] != like.shape[0]:
            raise ValueError(f"flow time: expected shape ({like.shape[0]},) (one per sample), got {tuple(tau.shape)}")
        return tau.to(like.dtype).view(-1, *([1] * (like.dim() - 1)))
    return tau


def sample_tau(batch: int, flow_cfg: FlowConfig, generator: torch.Generator | None = None,
               device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Draw per-sample flow times. Returns ``(tau, t)``, both float32 (B,): ``t`` unshifted, ``tau = shift_time(t)``.

    "discrete": t = k/N with k uniform in 1..N; "continuous": t ~ U(0, 1] (never 0, so τ > 0 and ẑ is defined).
    """
    n = flow_cfg.num_train_timesteps
    if flow_cfg.t_sampling == "discrete":
        k = torch.randint(1, n + 1, (batch,), generator=generator, device=device)
        t = k.to(torch.float32) / n
    elif flow_cfg.t_sampling == "continuous":
        t = 1.0 - torch.rand(batch, generator=generator, device=device, dtype=torch.float32)
    else:
        raise ValueError(f"flow.t_sampling: got {flow_cfg.t_sampling!r}; expected 'discrete' or 'continuous'")
    return shift_time(t, flow_cfg.shift), t


def add_noise(z: torch.Tensor, eps: torch.Tensor, tau: Time) -> torch.Tensor:
    """z(τ) = (1 − τ)·z + τ·ε. z, eps (B, C, L, h, w); tau (B,) or scalar."""
    tau_b = _per_sample(tau, z)
    return (1 - tau_b) * z + tau_b * eps


def velocity_target(z: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """u = ε − z (the constant velocity of the straight path from data to noise)."""
    return eps - z


def clean_estimate(z_t: torch.Tensor, tau: Time, u: torch.Tensor) -> torch.Tensor:
    """ẑ = z(τ) − τ·û: the clean latent implied by a predicted velocity. z_t, u (B, C, L, h, w); tau (B,)."""
    return z_t - _per_sample(tau, z_t) * u


@functools.lru_cache(maxsize=8)
def _bump_table(num_levels: int, shift: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(timesteps, weights), float64 (N,), over the N training levels t_k = k/N (k = N..1, as the schedule lists them).

    The weighting of DiffSynth-Studio's ``FlowMatchScheduler.set_timesteps(training=True)`` used by the Wan training
    code: with x_k = N·τ_k the shifted timestep of level k, y_k = exp(−2·((x_k − N/2)/N)²), then y − min(y),
    normalised so the N weights have mean 1. (The bump is over the shifted timestep value, as in that code.)
    """
    t = torch.arange(num_levels, 0, -1, dtype=torch.float64) / num_levels
    x = num_levels * shift_time(t, shift)
    y = torch.exp(-2.0 * ((x - num_levels / 2) / num_levels) ** 2)
    y = y - y.min()
    return x, y * (num_levels / y.sum())


def loss_weight(t: torch.Tensor, flow_cfg: FlowConfig) -> torch.Tensor:
    """Per-sample loss weight (B,) float32 for unshifted times ``t`` (B,).

    "uniform": 1. "gaussian_bump": the DiffSynth-Studio/Wan training weight of the level nearest to the sample's
    shifted timestep N·τ (exact for discrete t; continuous t takes its nearest level, as that code's lookup does).
    "tau_squared": τ² / mean(τ²) over the 1,000 levels. With the clean-latent parameterisation
    (û = (z(τ) − x̂)/τ for τ ≥ τ_min) it turns ‖û − u‖² into ‖x̂ − z‖², so small-τ samples, whose velocity error is
    amplified by 1/τ², do not dominate the gradient (the demo preset uses it).
    """
    if flow_cfg.loss_weighting == "uniform":
        return torch.ones_like(t, dtype=torch.float32)
    if flow_cfg.loss_weighting == "tau_squared":
        levels = torch.arange(1, flow_cfg.num_train_timesteps + 1, dtype=torch.float64) / flow_cfg.num_train_timesteps
        norm = shift_time(levels, flow_cfg.shift).pow(2).mean()
        tau = shift_time(t.detach().to(torch.float64), flow_cfg.shift)
        return (tau.pow(2) / norm).to(dtype=torch.float32)
    if flow_cfg.loss_weighting != "gaussian_bump":
        raise ValueError(f"flow.loss_weighting: got {flow_cfg.loss_weighting!r}; expected 'uniform', "
                         "'gaussian_bump' or 'tau_squared'")
    x, w = _bump_table(flow_cfg.num_train_timesteps, float(flow_cfg.shift))
    x_t = flow_cfg.num_train_timesteps * shift_time(t.detach().to("cpu", torch.float64), flow_cfg.shift)
    idx = (x_t[:, None] - x[None, :]).abs().argmin(dim=1)  # (B, N) -> (B,)
    return w[idx].to(device=t.device, dtype=torch.float32)


def euler_schedule(n_steps: int, shift: float) -> torch.Tensor:
    """Wan's sampling times, float32 (n + 1,): shift_time(linspace(1, 0, n + 1)) — from 1 (noise) down to exactly 0."""
    if n_steps < 1:
        raise ValueError(f"euler_schedule: n_steps must be >= 1, got {n_steps}")
    t = torch.linspace(1.0, 0.0, n_steps + 1, dtype=torch.float64)
    return shift_time(t, shift).to(torch.float32)


def euler_step(z: torch.Tensor, u: torch.Tensor, tau: Time, tau_next: Time) -> torch.Tensor:
    """One Euler step of dz/dτ = u from τ to τ_next (< τ when denoising): z + (τ_next − τ)·u."""
    return z + (_per_sample(tau_next, z) - _per_sample(tau, z)) * u
