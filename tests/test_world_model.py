"""WorldModel: conditioning zero-init and gate, attention masks, token layouts, parameterisation, checkpointing."""

import pytest
import torch

from simforcing.config import load_config
from simforcing.models import mot
from simforcing.models.world_model import build_world_model

TINY = {"model.num_attention_heads": "2", "model.attention_head_dim": "16", "model.ffn_dim": "64",
        "model.freq_dim": "32", "model.text_dim": "32", "model.num_layers": "2", "model.action_hidden": "32",
        "model.action_ffn_dim": "64", "model.vae.latent_channels": "16", "model.parameterization": "velocity",
        "model.first_frame_skip": "false"}


def _cfg(preset="demo", **extra):
    ov = dict(TINY)
    ov.update({k.replace("__", "."): str(v) for k, v in extra.items()})
    return load_config(preset, ov).validate()


def _model(cfg, trained=True, seed=0):
    """A tiny model; ``trained`` randomises the zero-initialised head so gradients and signals flow everywhere."""
    torch.manual_seed(seed)
    m = build_world_model(cfg)
    if trained:
        with torch.no_grad():
            m.video.proj_out.weight.normal_(0, 0.2)
    return m


def _batch(cfg, b=2, seed=1):
    g = torch.Generator().manual_seed(seed)
    c, (h, w), lat = cfg.model.vae.latent_channels, cfg.latent_hw, cfg.latent_frames
    return dict(z_t=torch.randn(b, c, lat - 1, h, w, generator=g), tau=torch.rand(b, generator=g) * 0.8 + 0.1,
                z0=torch.randn(b, c, 1, h, w, generator=g),
                actions=torch.rand(b, cfg.data.actions_per_window, cfg.data.action_dim, generator=g) * 2 - 1,
                state0=torch.randn(b, cfg.data.state_dim, generator=g),
                text=torch.randn(b, 6, cfg.model.text_dim, generator=g),
                text_mask=torch.tensor([[True] * 6, [True] * 3 + [False] * 3])[:b])


def _streams(model, batch, **kw):
    """Run the model and return (output, video tokens, action tokens) after the last layer."""
    got = {}
    hook = model.layers[-1].register_forward_hook(lambda mod, args, out: got.update(hv=out[0], ha=out[1]))
    try:
        with torch.no_grad():
            out = model(**batch, **kw)
    finally:
        hook.remove()
    return out, got["hv"], got["ha"]


@pytest.fixture(scope="module")
def cfg():
    return _cfg()


# -- multi-block simulation conditioning -----------------------------------------------------------------------------


def test_zero_init_condition_changes_nothing(cfg):
    model = _model(cfg)
    batch = _batch(cfg)
    cond = torch.randn(2, 16, cfg.latent_frames, *cfg.latent_hw)
    with torch.no_grad():
        plain = model(**batch)
        conditioned = model(**batch, cond=cond, gate=torch.ones(2))
    assert plain.abs().mean() > 0.01
    assert torch.equal(plain, conditioned)
    for layer in model.layers:
        assert not layer.cond_proj.weight.any() and not layer.cond_proj.bias.any()


def test_gate_zero_is_bit_identical_and_gate_one_is_not(cfg):
    model = _model(cfg)
    with torch.no_grad():
        for layer in model.layers:
            layer.cond_proj.weight.normal_(0, 0.1)
    batch = _batch(cfg)
    cond = torch.randn(2, 16, cfg.latent_frames, *cfg.latent_hw)
    with torch.no_grad():
        plain = model(**batch)
        assert torch.equal(model(**batch, cond=cond, gate=torch.zeros(2)), plain)
        assert torch.equal(model(**batch, cond=cond, gate=None), plain)
        nan_cond = torch.full_like(cond, float("nan"))  # a gate-0 sample must not see even NaN conditions
        assert torch.equal(model(**batch, cond=nan_cond, gate=torch.zeros(2)), plain)
        mixed = model(**batch, cond=cond, gate=torch.tensor([1.0, 0.0]))
        feats = model.condition_features(cond)
        via_feats = model(**batch, cond_feats=feats, gate=torch.tensor([1.0, 0.0]))
    assert len(feats) == 2 and feats[0].shape == (2, cfg.latent_frames * cfg.tokens_per_latent_frame, 32)
    assert torch.equal(mixed[1], plain[1]) and not torch.allclose(mixed[0], plain[0])
    assert torch.allclose(via_feats, mixed, atol=1e-6)


def test_gradients_reach_every_condition_projection(cfg):
    model = _model(cfg)
    batch = _batch(cfg)
    cond = torch.randn(2, 16, cfg.latent_frames, *cfg.latent_hw)
    model(**batch, cond=cond, gate=torch.ones(2)).square().mean().backward()
    for j, layer in enumerate(model.layers):
        assert layer.cond_proj.weight.grad is not None and layer.cond_proj.weight.grad.abs().sum() > 0, j
    model.zero_grad(set_to_none=False)
    model(**batch, cond=cond, gate=torch.zeros(2)).square().mean().backward()
    assert all(not layer.cond_proj.weight.grad.any() for layer in model.layers)


@pytest.mark.parametrize("layers", [1, 2])
def test_every_parameter_receives_a_gradient(layers):
    """No dead parameters (FSDP2/DCP optimizer state and DDP need every trainable tensor to get a gradient)."""
    cfg = _cfg(model__num_layers=layers)
    model = _model(cfg)
    cond = torch.randn(2, 16, cfg.latent_frames, *cfg.latent_hw)
    model(**_batch(cfg), cond=cond, gate=torch.ones(2)).square().mean().backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []
    assert model.layers[-1].action.attn1.to_k.weight.grad.abs().sum() > 0  # actions reach the video


def test_meta_build_then_initialize_keeps_zero_projections(cfg):
    model = build_world_model(cfg, meta=True)
    assert all(p.is_meta for p in model.parameters())
    model.to_empty(device="cpu")
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))  # to_empty leaves garbage; make it loud
    model.initialize_weights()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    for layer in model.layers:
        assert not layer.cond_proj.weight.any() and not layer.cond_proj.bias.any()
    out = model(**_batch(cfg))
    assert torch.isfinite(out).all()


# -- attention masks ---------------------------------------------------------------------------------------------------


def test_mask_builders():
    m = mot.world_model_mask(2, 5, 3)[0, 0]
    assert m.shape == (8, 8)
    assert not m[:2, 2:5].any() and m[:2, :2].all()  # first frame does not see the future
    assert m[2:5, :5].all() and m[:5, 5:].all()  # future sees all video; video sees actions
    assert not m[5:, :5].any() and m[5:, 5:].all()  # actions see only actions
    keep = mot.world_model_mask(2, 5, 3, torch.tensor([True, False]))
    assert keep.shape == (2, 1, 8, 8) and keep[0, 0, :5, 5:].all() and not keep[1, 0, :5, 5:].any()
    u = mot.policy_unconditional_mask(2, 5, 3)[0, 0]
    assert not u[:5, 5:].any() and u[5:, :2].all() and not u[5:, 2:5].any() and u[5:, 5:].all()
    va = mot.policy_video_action_mask(2, 5, 3)[0, 0]
    assert not va[:5, 5:].any() and va[5:, :].all()
    with pytest.raises(ValueError, match="attention mode"):
        mot.build_mask("causal", 2, 5, 3)


def test_video_tokens_do_not_reach_actions_and_future_does_not_reach_first_frame(cfg):
    model = _model(cfg)
    a = _batch(cfg)
    n_first = cfg.tokens_per_latent_frame
    out_a, hv_a, ha_a = _streams(model, a)
    b = dict(a, z_t=torch.randn_like(a["z_t"]), tau=a["tau"].flip(0))  # new future frames and noise levels
    out_b, hv_b, ha_b = _streams(model, b)
    assert torch.equal(ha_a, ha_b)
    assert torch.allclose(hv_a[:, :n_first], hv_b[:, :n_first], atol=1e-6, rtol=0)
    assert not torch.allclose(hv_a[:, n_first:], hv_b[:, n_first:])
    c = dict(a, z0=torch.randn_like(a["z0"]))  # a new first frame changes the video, never the actions
    _, hv_c, ha_c = _streams(model, c)
    assert torch.equal(ha_a, ha_c) and not torch.allclose(hv_a, hv_c)


def test_actions_reach_video_unless_dropped(cfg):
    model = _model(cfg)
    a = _batch(cfg)
    b = dict(a, actions=torch.rand_like(a["actions"]) * 2 - 1)
    out_a, out_b = _streams(model, a)[0], _streams(model, b)[0]
    assert not torch.allclose(out_a[0], out_b[0]) and not torch.allclose(out_a[1], out_b[1])
    keep = torch.tensor([False, True])
    kept_a = _streams(model, a, action_keep=keep)[0]
    kept_b = _streams(model, b, action_keep=keep)[0]
    assert torch.allclose(kept_a[0], kept_b[0], atol=1e-6, rtol=0)  # sample 0: actions have no influence
    assert not torch.allclose(kept_a[1], kept_b[1])
    assert torch.allclose(kept_a[1], out_a[1], atol=1e-6)  # kept sample unchanged by the other's dropout


def test_without_action_expert_there_are_no_action_parameters():
    model = _model(_cfg(model__use_action_expert="false"))
    assert model.action is None and all(layer.action is None for layer in model.layers)
    assert not any(".action." in k or k.startswith("action.") for k in model.state_dict())
    out = model(**_batch(_cfg()))
    assert out.shape == (2, 16, 2, 8, 12)


# -- token layouts of the paper's datasets, at tiny width --------------------------------------------------------------


@pytest.mark.parametrize("preset, n_video, n_action", [("bridge", 420, 20), ("interndata_a1", 630, 128)])
def test_dataset_token_layouts(preset, n_video, n_action):
    cfg = _cfg(preset, model__vae__latent_channels=48, model__num_layers=1)
    model = _model(cfg)
    batch = _batch(cfg, b=1)
    out, hv, ha = _streams(model, batch, cond=torch.randn(1, 48, cfg.latent_frames, 14, 20), gate=torch.ones(1))
    assert hv.shape == (1, n_video, 32) and ha.shape == (1, n_action, 32)
    assert out.shape == (1, 48, cfg.latent_frames - 1, 14, 20)
    assert torch.isfinite(out).all()


# -- parameterisation --------------------------------------------------------------------------------------------------


def test_x0_first_frame_skip_copies_the_first_frame_at_init():
    cfg = _cfg(model__parameterization="x0", model__first_frame_skip="true", model__tau_min=0.05)
    model = _model(cfg, trained=False)
    batch = _batch(cfg)
    batch["tau"] = torch.tensor([0.5, 0.01])  # the second sample is below tau_min
    with torch.no_grad():
        u = model(**batch)
    tau = batch["tau"].clamp(min=0.05).view(2, 1, 1, 1, 1)
    x_hat = batch["z_t"] - tau * u
    assert torch.allclose(x_hat, batch["z0"].expand_as(x_hat), atol=1e-5)
    velocity = _model(_cfg(), trained=False)
    with torch.no_grad():
        assert not velocity(**_batch(_cfg())).any()  # zero-initialised head: û = 0


def test_gradient_checkpointing_matches(cfg):
    plain = _model(cfg)
    ckpt = _model(_cfg(model__gradient_checkpointing="true"))
    ckpt.load_state_dict(plain.state_dict())
    assert ckpt.gradient_checkpointing and not plain.gradient_checkpointing
    batch = _batch(cfg)
    cond = torch.randn(2, 16, cfg.latent_frames, *cfg.latent_hw)
    for m in (plain, ckpt):
        m(**batch, cond=cond, gate=torch.ones(2)).square().mean().backward()
    for (name, p), q in zip(plain.named_parameters(), ckpt.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            assert torch.allclose(p.grad, q.grad, atol=1e-6), name


def test_bf16_autocast_runs(cfg):
    model = _model(cfg)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(**_batch(cfg), cond=torch.randn(2, 16, cfg.latent_frames, *cfg.latent_hw), gate=torch.ones(2))
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    ref = model(**_batch(cfg))
    with torch.no_grad():
        half = model.to(torch.bfloat16)(**_batch(cfg))  # a bf16 copy (e.g. an inference teacher), no autocast
    assert half.dtype == torch.float32 and torch.allclose(half, ref, atol=0.1 * ref.abs().max().item())


def test_bad_shapes_are_named(cfg):
    model = _model(cfg)
    batch = _batch(cfg)
    with pytest.raises(ValueError, match="cond"):
        model(**batch, cond=torch.randn(2, 16, 2, 8, 12), gate=torch.ones(2))
    with pytest.raises(ValueError, match="z0"):
        model(**dict(batch, z0=batch["z_t"]))


# -- the step-invariant context of a rollout ---------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["full", "no_mask_no_state", "no_action_expert", "three_layers", "policy_mode",
                                     "bidirectional"])
def test_step_context_gives_the_plain_forward(variant):
    extra = {"no_action_expert": {"model__use_action_expert": "false"},
             "three_layers": {"model__num_layers": "3"}}.get(variant, {})
    cfg = _cfg(**extra)
    model = _model(cfg)
    model.attention_mode = {"policy_mode": "policy_video_action", "bidirectional": "bidirectional"}.get(
        variant, "world_model")
    with torch.no_grad():
        for layer in model.layers:
            layer.cond_proj.weight.normal_(0, 0.1)
    batch = _batch(cfg)
    if variant == "no_mask_no_state":
        batch.update(text_mask=None, state0=None)
    cond = torch.randn(2, 16, cfg.latent_frames, *cfg.latent_hw)
    ctx = {k: batch[k] for k in ("actions", "state0", "text", "text_mask")}
    # the world-model mask keeps action tokens off video tokens: the action stream is run once, alone (its attention
    # over the action tokens only rounds differently); otherwise the action expert runs per step as in a plain forward
    precomputed = variant in ("full", "no_mask_no_state", "three_layers")

    def same(a, b):
        if precomputed:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        else:
            assert torch.equal(a, b)

    with torch.no_grad():
        static = model.step_context(**ctx)
        feats = model.condition_features(cond)
        for tau in (torch.tensor([0.9, 0.3]), torch.tensor([0.05, 0.5])):  # several steps reuse one context
            step = dict(batch, tau=tau)
            same(model(**step, static=static), model(**step))
            gate = torch.tensor([1.0, 0.0])
            same(model(**step, cond_feats=feats, gate=gate, static=static), model(**step, cond_feats=feats, gate=gate))
            keep = torch.tensor([True, False])  # per-sample action dropout: video rows of sample 1 see no action
            same(model(**step, action_keep=keep, static=static), model(**step, action_keep=keep))
    n_kv = sum(kv_a is not None for _, kv_a in static.cross_kv)
    expected = 0 if variant == "no_action_expert" else cfg.model.num_layers - 1  # the last action block has no cross
    assert len(static.cross_kv) == cfg.model.num_layers and n_kv == expected
    assert (static.action_kv is not None) == precomputed
    if precomputed:
        assert len(static.action_kv) == cfg.model.num_layers
    assert len(static.masks) == 1  # built by the first step (None: no mask), then reused


def test_step_context_under_autocast_and_for_other_tensors(cfg):
    model = _model(cfg)
    batch = _batch(cfg)
    ctx = {k: batch[k] for k in ("actions", "state0", "text", "text_mask")}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        static = model.step_context(**ctx)
        got, want = model(**batch, static=static), model(**batch)
    # the precomputed action stream attends over the action tokens alone: the same result up to bf16 rounding (the
    # kernels' accumulation order differs between CPUs; bit equality held on some and not on others)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    assert (got - want).abs().mean() < 2e-3
    with pytest.raises(ValueError, match="step_context"):  # the same values in other tensors: refused, not guessed
        model(**dict(batch, text=batch["text"].clone()), static=static)


def test_condition_features_equal_the_conv3d_they_are_stored_as():
    """P_j is kept as a Conv3d (kernel = stride = patch) and computed as patchify + one matrix product."""
    cfg = _cfg()
    model = _model(cfg)
    with torch.no_grad():
        for layer in model.layers:
            layer.cond_proj.weight.normal_(0, 0.1)
            layer.cond_proj.bias.normal_(0, 0.1)
        cond = torch.randn(2, 16, cfg.latent_frames, *cfg.latent_hw)
        feats = model.condition_features(cond)
        for layer, feat in zip(model.layers, feats):
            conv = layer.cond_proj(cond).flatten(2).transpose(1, 2)  # (B, N_video, dim), tokens frame-major
            torch.testing.assert_close(feat, conv, rtol=1e-5, atol=1e-5)
