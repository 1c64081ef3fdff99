"""flow.py against independent computations: shift map, time sampling grid, noise/velocity/clean-estimate identities,
Euler integration, loss weights (DiffSynth-Studio's Wan training weighting, recomputed here with numpy)."""

import numpy as np
import pytest
import torch

from simforcing import flow
from simforcing.config import FlowConfig


def test_shift_time_endpoints_and_monotone():
    t = torch.linspace(0, 1, 1001, dtype=torch.float64)
    for s in (1.0, 3.0, 5.0, 0.5):
        tau = flow.shift_time(t, s)
        assert tau[0].item() == 0.0 and tau[-1].item() == 1.0
        assert torch.all(tau[1:] > tau[:-1])
        # independent formula at one point
        assert tau[250].item() == pytest.approx(s * 0.25 / (1 + (s - 1) * 0.25), abs=1e-12)
    assert torch.equal(flow.shift_time(t, 1.0), t)
    assert torch.all(flow.shift_time(t, 5.0)[1:-1] > t[1:-1])  # s > 1 pushes times towards noise (tau = 1)


def test_discrete_tau_on_the_1000_level_shifted_grid():
    cfg = FlowConfig(shift=5.0, num_train_timesteps=1000, t_sampling="discrete")
    gen = torch.Generator().manual_seed(0)
    tau, t = flow.sample_tau(20000, cfg, gen)
    assert tau.shape == t.shape == (20000,) and tau.dtype == torch.float32
    k = t.double() * 1000
    assert torch.allclose(k, k.round(), atol=1e-3)
    assert k.round().min() >= 1 and k.round().max() <= 1000
    # the grid of diffusers' FlowMatchEulerDiscreteScheduler (shift 5, 1000 training steps): its training sigmas
    from diffusers import FlowMatchEulerDiscreteScheduler

    grid = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=5.0).sigmas.double()
    dist = (tau.double()[:, None] - grid[None, :]).abs().min(dim=1).values
    assert dist.max() < 1e-6
    # uniform over the levels: mean level (1000 + 1)/2, both ends reached
    assert k.mean().item() == pytest.approx(500.5, rel=0.02)
    assert (k.round() <= 50).any() and (k.round() >= 950).any()


def test_continuous_tau_in_half_open_interval_and_reproducible():
    cfg = FlowConfig(shift=5.0, t_sampling="continuous")
    tau1, t1 = flow.sample_tau(5000, cfg, torch.Generator().manual_seed(3))
    tau2, t2 = flow.sample_tau(5000, cfg, torch.Generator().manual_seed(3))
    assert torch.equal(tau1, tau2)
    assert t1.min() > 0 and t1.max() <= 1
    assert torch.allclose(tau1, 5 * t1 / (1 + 4 * t1))
    assert t1.mean().item() == pytest.approx(0.5, abs=0.02)


def test_add_noise_clean_estimate_round_trip_float64():
    g = torch.Generator().manual_seed(1)
    z = torch.randn(3, 4, 2, 3, 5, generator=g, dtype=torch.float64)
    eps = torch.randn(z.shape, generator=g, dtype=torch.float64)
    tau = torch.tensor([0.01, 0.5, 1.0], dtype=torch.float64)
    z_t = flow.add_noise(z, eps, tau)
    for i in range(3):  # per-sample broadcasting, computed sample by sample
        assert torch.allclose(z_t[i], (1 - tau[i]) * z[i] + tau[i] * eps[i], atol=0, rtol=1e-15)
    u = flow.velocity_target(z, eps)
    assert torch.equal(u, eps - z)
    assert torch.allclose(flow.clean_estimate(z_t, tau, u), z, atol=1e-12)
    # u is dz(tau)/dtau along the path (finite difference)
    h = 1e-6
    fd = (flow.add_noise(z, eps, tau + h) - flow.add_noise(z, eps, tau - h)) / (2 * h)
    assert torch.allclose(fd, u, atol=1e-6)
    assert torch.equal(flow.add_noise(z, eps, torch.zeros(3, dtype=torch.float64)), z)


@pytest.mark.parametrize("n_steps", [1, 2, 7, 20])
def test_euler_with_exact_velocity_reaches_the_data(n_steps):
    g = torch.Generator().manual_seed(2)
    z = torch.randn(2, 3, 2, 4, 4, generator=g, dtype=torch.float64)
    eps = torch.randn(z.shape, generator=g, dtype=torch.float64)
    taus = flow.euler_schedule(n_steps, 5.0).double()
    x = eps.clone()  # z(1) = eps
    for i in range(n_steps):
        u = eps - z  # the exact velocity field of the straight path through (z, eps)
        x = flow.euler_step(x, u, taus[i].expand(2), taus[i + 1].expand(2))
        assert torch.allclose(x, flow.add_noise(z, eps, taus[i + 1].expand(2)), atol=1e-6)
    assert torch.allclose(x, z, atol=1e-6)


def test_euler_schedule_is_wans_shifted_sigmas():
    for n, s in ((1, 5.0), (10, 5.0), (20, 3.0)):
        sched = flow.euler_schedule(n, s)
        assert sched.shape == (n + 1,)
        assert sched[0].item() == 1.0 and sched[-1].item() == 0.0
        assert torch.all(sched[1:] < sched[:-1])
        sig = np.linspace(1, 0, n + 1)[:n]  # Wan2.2 get_sampling_sigmas, then a final 0
        sig = s * sig / (1 + (s - 1) * sig)
        assert np.allclose(sched.numpy(), np.append(sig, 0.0), atol=1e-6)


def _diffsynth_weights(n=1000, shift=5.0):
    """DiffSynth-Studio FlowMatchScheduler(shift, sigma_min=0, extra_one_step=True).set_timesteps(n, training=True)."""
    sig = np.linspace(1.0, 0.0, n + 1)[:-1]
    sig = shift * sig / (1 + (shift - 1) * sig)
    x = sig * n
    y = np.exp(-2 * ((x - n / 2) / n) ** 2)
    y = y - y.min()
    return x, y * (n / y.sum())


def test_gaussian_bump_mean_one_and_matches_reference():
    cfg = FlowConfig(shift=5.0, num_train_timesteps=1000, loss_weighting="gaussian_bump")
    t = torch.arange(1, 1001, dtype=torch.float32) / 1000
    w = flow.loss_weight(t, cfg)
    assert w.shape == (1000,) and w.dtype == torch.float32
    assert w.double().mean().item() == pytest.approx(1.0, abs=1e-5)
    x_ref, w_ref = _diffsynth_weights()
    assert np.allclose(w.numpy()[::-1], w_ref, atol=1e-5)  # reference lists levels from noise to data
    # the bump peaks at the level whose shifted timestep is nearest to 500 (tau = 0.5) and vanishes at tau = 1
    peak = int(np.argmin(np.abs(x_ref - 500)))
    assert w_ref[peak] == pytest.approx(w.max().item(), rel=1e-5)
    assert w[-1].item() == pytest.approx(0.0, abs=1e-6)
    assert (w >= 0).all()


def test_loss_weight_uniform_and_continuous_nearest_level():
    t = torch.tensor([0.0004, 0.2, 0.999], dtype=torch.float32)
    assert torch.equal(flow.loss_weight(t, FlowConfig(loss_weighting="uniform")), torch.ones(3))
    cfg = FlowConfig(shift=5.0, loss_weighting="gaussian_bump")
    x_ref, w_ref = _diffsynth_weights()
    got = flow.loss_weight(t, cfg)
    x = 1000 * 5 * t.double().numpy() / (1 + 4 * t.double().numpy())
    want = w_ref[np.abs(x[:, None] - x_ref[None, :]).argmin(axis=1)]
    assert np.allclose(got.numpy(), want, atol=1e-6)
    with pytest.raises(ValueError, match="flow.loss_weighting"):
        flow.loss_weight(t, FlowConfig(loss_weighting="bogus"))


def test_tau_squared_weight_turns_the_x0_velocity_loss_into_clean_latent_mse():
    """With û = (z(τ) − x̂)/τ, τ²·‖û − u‖² = ‖x̂ − z‖² (independent check in float64), up to the constant norm."""
    from simforcing.config import FlowConfig
    from simforcing.flow import add_noise, loss_weight, shift_time, velocity_target

    cfg = FlowConfig(loss_weighting="tau_squared", shift=5.0)
    g = torch.Generator().manual_seed(0)
    t = torch.rand(6, generator=g, dtype=torch.float64) * 0.9 + 0.1
    tau = shift_time(t, cfg.shift)
    z, eps, x0 = (torch.randn(6, 3, 2, generator=g, dtype=torch.float64) for _ in range(3))
    zt = add_noise(z, eps, tau)
    u_hat = (zt - x0) / tau[:, None, None]
    lhs = loss_weight(t, cfg).double() * ((u_hat - velocity_target(z, eps)) ** 2).mean(dim=(1, 2))
    levels = torch.arange(1, 1001, dtype=torch.float64) / 1000
    norm = (5 * levels / (1 + 4 * levels)).pow(2).mean()
    rhs = ((x0 - z) ** 2).mean(dim=(1, 2)) / norm
    torch.testing.assert_close(lhs, rhs, rtol=1e-5, atol=1e-6)
