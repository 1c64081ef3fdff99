"""losses.py: each term against a computation written out here; motion vs value under an appearance offset;
stop-gradients; the condition corruption (pure, its formula, its statistics) and the gate."""

import pytest
import torch

from simforcing.config import ConditioningConfig
from simforcing.losses import (NonFiniteLoss, corrupt_condition, flow_matching_loss, latent_motion,
                               motion_distill_loss, sample_gate, value_distill_loss)


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_flow_matching_loss_per_sample_weighted_mean():
    a, b = _rand(3, 2, 2, 3, 3, seed=1), _rand(3, 2, 2, 3, 3, seed=2)
    w = torch.tensor([1.0, 0.0, 2.5])
    term = flow_matching_loss(a, b, w)
    want = torch.stack([((a[i] - b[i]) ** 2).sum() / a[i].numel() * w[i] for i in range(3)])
    assert torch.allclose(term.per_sample, want, atol=1e-6)
    assert term.value.shape == () and torch.allclose(term.value, want.mean(), atol=1e-6)
    assert torch.allclose(flow_matching_loss(a, b).value, ((a - b) ** 2).mean(), atol=1e-6)
    with pytest.raises(ValueError, match="same shape"):
        flow_matching_loss(a, b[:, :, :1])
    with pytest.raises(ValueError, match="weight"):
        flow_matching_loss(a, b, torch.ones(2))


def test_latent_motion_definition_and_constant_video():
    z0, fut = _rand(2, 3, 1, 4, 4, seed=3), _rand(2, 3, 5, 4, 4, seed=4)
    m = latent_motion(z0, fut)
    assert m.shape == fut.shape
    assert torch.equal(m[:, :, 0], fut[:, :, 0] - z0[:, :, 0])
    for ell in range(1, 5):
        assert torch.equal(m[:, :, ell], fut[:, :, ell] - fut[:, :, ell - 1])
    const = z0.expand(-1, -1, 5, -1, -1)  # every future frame equals z0
    assert torch.count_nonzero(latent_motion(z0, const)) == 0
    with pytest.raises(ValueError, match="z0"):
        latent_motion(fut, fut)


def test_motion_loss_ignores_appearance_offset_value_loss_does_not():
    z0_s, zs = _rand(2, 3, 1, 4, 4, seed=5), _rand(2, 3, 4, 4, 4, seed=6)
    z0_r, zr = _rand(2, 3, 1, 4, 4, seed=7), _rand(2, 3, 4, 4, 4, seed=8)
    off = 0.7 * torch.ones(1, 3, 1, 1, 1) + _rand(1, 3, 1, 4, 4, seed=9)  # constant over time, varies over space
    md = motion_distill_loss(latent_motion(z0_r, zr), latent_motion(z0_s, zs)).value
    md_off = motion_distill_loss(latent_motion(z0_r + off, zr + off), latent_motion(z0_s, zs)).value
    assert torch.allclose(md, md_off, atol=1e-5)
    vd = value_distill_loss(zr, zs).value
    vd_off = value_distill_loss(zr + off, zs).value
    assert (vd_off - vd).abs() > 0.1


def test_distillation_losses_stop_the_teacher_gradient():
    student = _rand(2, 3, 2, 4, 4, seed=10).requires_grad_(True)
    teacher = _rand(2, 3, 2, 4, 4, seed=11).requires_grad_(True)
    w = torch.tensor([1.0, 2.0])
    for fn in (motion_distill_loss, value_distill_loss):
        term = fn(student, teacher, w)
        term.value.backward()
        assert teacher.grad is None
        want = 2 * (student - teacher).detach() * w.view(2, 1, 1, 1, 1) / student[0].numel() / 2
        assert torch.allclose(student.grad, want, atol=1e-6)
        student.grad = None


def test_corrupt_condition_formula_and_purity():
    c = _rand(4, 3, 3, 4, 4, seed=12)
    c_before = c.clone()
    cfg = ConditioningConfig(corrupt_prob=0.5, alpha_min=0.5, alpha_max=0.9, sigma_min=0.1, sigma_max=0.3)
    out, applied = corrupt_condition(c, cfg, torch.Generator().manual_seed(13))
    assert torch.equal(c, c_before)  # input never modified
    assert out.shape == c.shape and applied.shape == (4,) and applied.dtype == torch.bool
    # replay the documented draws: applied, alpha, sigma, eta
    g = torch.Generator().manual_seed(13)
    app = torch.rand(4, generator=g) < 0.5
    alpha = 0.5 + 0.4 * torch.rand(4, generator=g)
    sigma = 0.1 + 0.2 * torch.rand(4, generator=g)
    eta = torch.randn(c.shape, generator=g)
    assert torch.equal(applied, app)
    for i in range(4):
        want = alpha[i] * c[i] + (1 - alpha[i]) * sigma[i] * eta[i] if app[i] else c[i]
        assert torch.allclose(out[i], want, atol=1e-6)
    none, app0 = corrupt_condition(c, ConditioningConfig(corrupt_prob=0.0), torch.Generator().manual_seed(1))
    assert torch.equal(none, c) and not app0.any()


def test_corrupt_condition_statistics():
    cfg = ConditioningConfig(corrupt_prob=0.4)
    zero = torch.zeros(4000, 1, 2, 4, 4)
    out, applied = corrupt_condition(zero, cfg, torch.Generator().manual_seed(14))
    assert applied.float().mean().item() == pytest.approx(0.4, abs=0.03)
    std = out.flatten(1).std(dim=1)  # with c = 0, c' = sigma_c * eta: per-sample scale (1 - alpha) * sigma
    assert (std[~applied] == 0).all()
    assert std[applied].min() > 0.1 * 0.1 * 0.3 and std[applied].max() < 0.5 * 0.3 * 2.5
    ones = torch.ones(4000, 1, 1, 8, 8)
    out1, app1 = corrupt_condition(ones, ConditioningConfig(corrupt_prob=1.0), torch.Generator().manual_seed(15))
    assert app1.all()
    scale = out1.flatten(1).mean(dim=1)  # ~ alpha in [0.5, 0.9] plus small noise
    assert scale.min() > 0.42 and scale.max() < 0.98


def test_sample_gate():
    g = torch.Generator().manual_seed(16)
    assert torch.equal(sample_gate(50, 0.0, g), torch.zeros(50))
    assert torch.equal(sample_gate(50, 1.0, g), torch.ones(50))
    gate = sample_gate(20000, 0.7, g)
    assert gate.dtype == torch.float32 and set(gate.unique().tolist()) <= {0.0, 1.0}
    assert gate.mean().item() == pytest.approx(0.7, abs=0.02)
    with pytest.raises(ValueError, match="conditioning.p"):
        sample_gate(3, 1.5, g)


def test_non_finite_loss_names_the_term():
    err = NonFiniteLoss("md_real", float("nan"))
    assert err.term == "md_real" and "md_real" in str(err) and err.value != err.value


def test_region_weight_against_a_loop():
    """losses.region_weight: 1 + s·(share of a latent cell's pixels holding the arm at frame 0 or in any frame its
    latent frame encodes), written out cell by cell."""
    from simforcing.losses import region_weight

    g = torch.Generator().manual_seed(0)
    b, ts, ss, L, h, w = 2, 4, 4, 2, 3, 2
    mask = torch.rand(b, 1 + ts * L, h * ss, w * ss, generator=g) < 0.2
    got = region_weight(mask, ts, ss, 3.0)
    assert got.shape == (b, 1, L, h, w)
    for i in range(b):
        for ell in range(1, L + 1):
            frames = [0] + list(range((ell - 1) * ts + 1, ell * ts + 1))
            cover = torch.zeros(h * ss, w * ss, dtype=torch.bool)
            for f in frames:
                cover |= mask[i, f]
            for y in range(h):
                for x in range(w):
                    share = cover[y * ss:(y + 1) * ss, x * ss:(x + 1) * ss].float().mean()
                    assert got[i, 0, ell - 1, y, x].item() == pytest.approx(1 + 3.0 * share.item())


def test_region_weighted_loss_keeps_the_scale_and_moves_the_emphasis():
    g = torch.Generator().manual_seed(1)
    a, t = torch.randn(3, 4, 2, 3, 3, generator=g), torch.randn(3, 4, 2, 3, 3, generator=g)
    ones = torch.ones(3, 1, 2, 3, 3)
    assert torch.allclose(flow_matching_loss(a, t, region=ones).per_sample, flow_matching_loss(a, t).per_sample)
    r = 1 + 4 * (torch.rand(3, 1, 2, 3, 3, generator=g) > 0.7).float()
    want = (((a - t) ** 2) * r).flatten(1).mean(1) / r.expand_as(a).flatten(1).mean(1)
    assert torch.allclose(flow_matching_loss(a, t, region=r).per_sample, want)
