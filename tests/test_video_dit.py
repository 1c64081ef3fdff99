"""The video expert against diffusers' WanTransformer3DModel (same weights, same outputs)."""

import pytest
import torch
from diffusers import WanTransformer3DModel

from simforcing.config import load_config
from simforcing.models.video_dit import (_grouped, _RMSNorm, _rms_fp32, apply_rope, modulate, sequence_rope,
                                         video_rope)
from simforcing.models.weights import load_video_expert_weights
from simforcing.models.world_model import WorldModel

TINY = {"model.num_attention_heads": "2", "model.attention_head_dim": "16", "model.ffn_dim": "64",
        "model.freq_dim": "32", "model.text_dim": "32", "model.num_layers": "2", "model.use_action_expert": "false",
        "model.vae.latent_channels": "16", "model.parameterization": "velocity", "model.first_frame_skip": "false"}


def _reference() -> WanTransformer3DModel:
    torch.manual_seed(0)
    ref = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=16,
                                out_channels=16, text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2,
                                cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6,
                                rope_max_seq_len=64).eval()
    with torch.no_grad():
        for p in ref.parameters():  # random everything (diffusers' defaults leave some tensors trivial)
            p.normal_(0.0, 0.2)
    return ref


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(diffusers reference, our world model with the same weights loaded from a save_pretrained folder)."""
    ref = _reference()
    folder = tmp_path_factory.mktemp("wan") / "transformer"
    ref.save_pretrained(folder)
    ours = WorldModel(load_config("demo", TINY), attention_mode="bidirectional").initialize_weights().eval()
    report = load_video_expert_weights(ours, folder)
    assert report.layout == "diffusers" and not report.missing and not report.unexpected
    return ref, ours


def _inputs(b=2, frames=3, h=8, w=12):
    g = torch.Generator().manual_seed(1)
    return torch.randn(b, 16, frames, h, w, generator=g), torch.randn(b, 5, 32, generator=g)


def test_scalar_timestep_parity(pair):
    ref, ours = pair
    x, text = _inputs()
    t = torch.tensor([300.0, 870.0])
    with torch.no_grad():
        a = ref(x, t, text).sample
        b = ours.backbone(x, t, text, attn_mask=None)
    assert a.shape == b.shape == x.shape
    assert a.abs().mean() > 0.1  # a real signal, not zeros
    assert (a - b).abs().max() <= 1e-5


def test_per_token_timestep_parity(pair):
    ref, ours = pair
    x, text = _inputs()
    n_frame = 4 * 6  # tokens per latent frame (8x12 latent, patch 2x2)
    g = torch.Generator().manual_seed(2)
    tt = torch.rand(2, 3 * n_frame, generator=g) * 1000  # arbitrary per-token timesteps (B, N)
    with torch.no_grad():
        a = ref(x, tt, text).sample
        b = ours.backbone(x, tt, text, attn_mask=None)
    assert (a - b).abs().max() <= 1e-5
    # per-frame groups (B, F) equal the same values expanded per token (B, N)
    tf = torch.tensor([[0.0, 500.0, 500.0], [0.0, 120.0, 120.0]])
    with torch.no_grad():
        a = ref(x, tf.repeat_interleave(n_frame, dim=1), text).sample
        b = ours.backbone(x, tf, text, attn_mask=None)
    assert (a - b).abs().max() <= 1e-5


def test_public_forward_is_wan_ti2v(pair):
    """forward(z_t, tau, z0, ...) == Wan on [z0; z_t] with TI2V timesteps and the state token appended to the text."""
    ref, ours = pair
    x, text = _inputs()
    tau = torch.tensor([0.3, 0.9])
    state0 = torch.randn(2, 7)
    with torch.no_grad():
        u = ours(x[:, :, 1:], tau, x[:, :, :1], None, state0, text)
        ctx = torch.cat([text, ours.state_embed(state0)[:, None]], dim=1)
        ts = torch.cat([torch.zeros(2, 24), (1000 * tau)[:, None].expand(2, 48)], dim=1)
        a = ref(x, ts, ctx).sample[:, :, 1:]
    assert u.shape == (2, 16, 2, 8, 12)
    assert (a - u).abs().max() <= 1e-5


def test_rope_tables():
    cos, sin = video_rope(3, 4, 6, 128, 1024, "cpu")
    assert cos.shape == sin.shape == (1, 72, 1, 64)
    assert torch.allclose(cos[0, 0], torch.ones(64)) and torch.allclose(sin[0, 0], torch.zeros(64))  # position 0
    assert torch.allclose(cos ** 2 + sin ** 2, torch.ones_like(cos), atol=1e-6)
    c1, _ = sequence_rope(20, 128, "cpu")
    assert c1.shape == (1, 20, 1, 64)
    with pytest.raises(ValueError, match="rope_max_seq_len"):
        video_rope(3, 40, 6, 128, 32, "cpu")


def test_apply_rope_rotates_each_pair():
    """apply_rope against an independent computation (each interleaved pair a complex number times e^{iθ}, in
    float64), and against the halves' form it replaced: the same values and gradients bit for bit."""
    rope = video_rope(3, 4, 6, 32, 1024, "cpu")
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 72, 3, 32, generator=g, requires_grad=True)
    theta = torch.atan2(rope.sin.double(), rope.cos.double())  # (1, N, 1, D/2)
    want = torch.view_as_real(torch.view_as_complex(x.detach().double().unflatten(-1, (-1, 2)).contiguous())
                              * torch.polar(torch.ones_like(theta), theta)).flatten(-2)
    out = apply_rope(x, rope)
    assert (out.double() - want).abs().max() < 1e-5

    def halves(x):  # the previous form: strided halves, four products and a stack
        x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
        return torch.stack((x1 * rope.cos - x2 * rope.sin, x1 * rope.sin + x2 * rope.cos), dim=-1).flatten(-2)

    grad = torch.randn(out.shape, generator=g)
    (ours,) = torch.autograd.grad(out, x, grad)
    ref_out = halves(x)
    (ref,) = torch.autograd.grad(ref_out, x, grad)
    assert torch.equal(out, ref_out) and torch.equal(ours, ref)
    assert apply_rope(x.detach().to(torch.bfloat16), rope).dtype == torch.bfloat16


def test_rms_norm_closed_form_backward():
    """_RMSNorm: F.rms_norm's values bit for bit, the gradients of autograd through F.rms_norm to float32 rounding,
    and torch's finite-difference check in float64."""
    norm = torch.nn.RMSNorm(32, eps=1e-6)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.3, generator=g)
    x = torch.randn(4, 9, 32, generator=g, requires_grad=True)
    grad = torch.randn(4, 9, 32, generator=g)
    ours = _rms_fp32(norm, x)
    ref = torch.nn.functional.rms_norm(x, (32,), norm.weight, 1e-6)
    assert ours.grad_fn is not None and "RMSNorm" in type(ours.grad_fn).__name__
    assert torch.equal(ours, ref)
    a = torch.autograd.grad(ours, (x, norm.weight), grad)
    b = torch.autograd.grad(ref, (x, norm.weight), grad)
    for u, v in zip(a, b):
        assert (u - v).abs().max() <= 1e-6 * v.abs().max()
    with torch.no_grad():
        assert torch.equal(_rms_fp32(norm, x), ref)  # the no-grad path: the same forward
    xd = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True, generator=g)
    wd = torch.randn(8, dtype=torch.float64, requires_grad=True, generator=g)
    assert torch.autograd.gradcheck(lambda a, b: _RMSNorm.apply(a, b, 1e-6), (xd, wd))


def test_grouped_modulation_matches_per_token():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 12, 8, generator=g)
    shift, scale = torch.randn(2, 3, 1, 8, generator=g), torch.randn(2, 3, 1, 8, generator=g)
    per_token = modulate(x, shift.repeat_interleave(4, 1), scale.repeat_interleave(4, 1))
    assert torch.equal(modulate(x, shift, scale), per_token)
    with pytest.raises(ValueError, match="equal groups"):
        _grouped(x, 5)
