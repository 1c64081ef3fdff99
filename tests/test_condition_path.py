"""conditioning.path: where the simulation condition enters the real branch — the paper's multi-block P_j ("blocks"),
the condition latent channel-concatenated with the noisy latent at the input ("concat"), or both. The new path starts
exact (a stage-1 or Wan2.2 start gives the same outputs), its gate drops it exactly, the sampler's CFG treats it as
two independent forwards would, and the start weights (Wan2.2, a stage-1 checkpoint) load into it."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from simforcing.config import ConfigError, load_config
from simforcing.export import export_run, load_pretrained
from simforcing.models.weights import diffusers_from_ours
from simforcing.models.world_model import build_world_model, patchify
from simforcing.runs.checkpoint import list_checkpoints, load_checkpoint
from simforcing.runs.folder import load_model_from_run
from simforcing.sample import CountingModel, StepInputs, guided_velocity, rollout_velocity
from simforcing.train import train_run
from simforcing.warmstart import load_start_weights
from test_train import make_tiny_data, tiny_cfg
from test_weights import wan_started, write_tiny_wan
from test_world_model import _batch

TINY = {"model.num_attention_heads": "2", "model.attention_head_dim": "16", "model.ffn_dim": "64",
        "model.freq_dim": "32", "model.text_dim": "32", "model.num_layers": "2", "model.action_hidden": "32",
        "model.action_ffn_dim": "64", "model.vae.latent_channels": "16", "model.parameterization": "velocity",
        "model.first_frame_skip": "false"}


def _cfg(path: str, preset: str = "demo", **extra):
    ov = {**TINY, "conditioning.path": path, **extra}
    return load_config(preset, ov).validate()


def _model(cfg, seed=0):
    """A tiny model with its zero-initialised video head randomised, so the output depends on everything."""
    torch.manual_seed(seed)
    m = build_world_model(cfg)
    with torch.no_grad():
        m.video.proj_out.weight.normal_(0, 0.2)
    return m.eval()


def _perturb(model, seed=3):
    """The condition's weights made non-zero (as training makes them): E and, where they are used, every P_j."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        if model.cond_embed is not None:
            model.cond_embed.weight.copy_(torch.randn(model.cond_embed.weight.shape, generator=g) * 0.1)
        if model.cond_blocks:
            for layer in model.layers:
                layer.cond_proj.weight.copy_(torch.randn(layer.cond_proj.weight.shape, generator=g) * 0.1)
    return model


def _cond(cfg, b=2, seed=2):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, cfg.model.vae.latent_channels, cfg.latent_frames, *cfg.latent_hw, generator=g)


# ----------------------------------------------------------------------------------------------------------------------
# The network
# ----------------------------------------------------------------------------------------------------------------------


def test_the_field_is_validated_and_the_paper_path_is_every_presets_default():
    for preset in ("demo", "bridge", "interndata_a1"):
        assert load_config(preset).conditioning.path == "blocks"
    with pytest.raises(ConfigError, match="conditioning.path: got 'input'"):
        load_config("demo", {"conditioning.path": "input"}).validate()
    blocks = build_world_model(_cfg("blocks"), meta=True)
    assert blocks.cond_embed is None and "cond_embed.weight" not in blocks.state_dict()  # the paper's tensors only
    assert blocks.num_condition_features == 2


@pytest.mark.parametrize("path", ["concat", "both"])
def test_the_new_path_starts_exact(path):
    """At initialisation the condition changes nothing, bit for bit: the model equals itself without the condition
    and a stage-1 (paper-path) model with the same weights."""
    cfg = _cfg(path)
    model = _model(cfg)
    assert not model.cond_embed.weight.any() and model.cond_embed.bias is None
    assert model.cond_embed.weight.shape == (32, 16, 1, 2, 2)  # (dim, C, patch): the condition's input channels
    stage1 = _model(_cfg("blocks"))  # the same seed: every tensor but the condition channels alike
    theirs = stage1.state_dict()
    assert set(model.state_dict()) - set(theirs) == {"cond_embed.weight"}
    assert all(torch.equal(theirs[k], v) for k, v in model.state_dict().items() if k in theirs)
    batch, cond = _batch(cfg), _cond(cfg)
    with torch.no_grad():
        plain = model(**batch)
        conditioned = model(**batch, cond=cond, gate=torch.ones(2))
        via_feats = model(**batch, cond_feats=model.condition_features(cond), gate=torch.ones(2))
        reference = stage1(**batch)
    assert plain.abs().mean() > 0.01
    assert torch.equal(conditioned, plain) and torch.equal(via_feats, plain) and torch.equal(reference, plain)


def test_concat_is_the_patch_embedding_of_the_concatenated_channels():
    """x's tokens + E(c) = the patch embedding of [x; c] whose kernel is [W_x | E] (one Conv3d over 2C channels)."""
    cfg = _cfg("concat")
    model = _perturb(_model(cfg))
    x, c = _cond(cfg, seed=5), _cond(cfg, seed=6)
    pe = model.video.patch_embedding
    wide = F.conv3d(torch.cat([x, c], 1), torch.cat([pe.weight, model.cond_embed.weight], 1), pe.bias,
                    stride=model.patch_size)
    with torch.no_grad():
        ours = model.video.patchify(x) + model.input_condition_feature(patchify(c, model.patch_size))
    assert torch.allclose(ours, wide.flatten(2).transpose(1, 2), atol=1e-5)


@pytest.mark.parametrize("path", ["concat", "both"])
def test_gate_zero_drops_the_condition_exactly(path):
    cfg = _cfg(path)
    model = _perturb(_model(cfg))
    batch, cond = _batch(cfg), _cond(cfg)
    with torch.no_grad():
        plain = model(**batch)
        assert torch.equal(model(**batch, cond=cond, gate=torch.zeros(2)), plain)
        assert torch.equal(model(**batch, cond=cond, gate=None), plain)
        nan = torch.full_like(cond, float("nan"))  # a gate-0 sample must not see even a NaN condition
        assert torch.equal(model(**batch, cond=nan, gate=torch.zeros(2)), plain)
        mixed = model(**batch, cond=cond, gate=torch.tensor([1.0, 0.0]))
        feats = model.condition_features(cond)
        via_feats = model(**batch, cond_feats=feats, gate=torch.tensor([1.0, 0.0]))
    assert len(feats) == model.num_condition_features == {"concat": 1, "both": 3}[path]
    assert torch.equal(mixed[1], plain[1]) and not torch.allclose(mixed[0], plain[0], atol=1e-3)
    assert torch.allclose(via_feats, mixed, atol=1e-6)


def test_concat_trains_its_channels_and_leaves_the_paper_projections_frozen_at_zero():
    cfg = _cfg("concat")
    model = _model(cfg).train()
    batch, cond = _batch(cfg), _cond(cfg)
    model(**batch, cond=cond, gate=torch.ones(2)).square().mean().backward()
    assert model.cond_embed.weight.grad is not None and model.cond_embed.weight.grad.abs().sum() > 0
    assert [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None] == []
    assert all(not p.requires_grad and not p.any() for layer in model.layers for p in layer.cond_proj.parameters())
    model.zero_grad(set_to_none=False)
    model(**batch, cond=cond, gate=torch.zeros(2)).square().mean().backward()
    assert not model.cond_embed.weight.grad.any()


@pytest.mark.parametrize("path", ["concat", "both"])
@pytest.mark.parametrize("w", [0.6, 1.0])
def test_the_samplers_guidance_equals_two_independent_forwards(path, w):
    """The real rollout's guided velocity (one batched pair forward of the condition features, or the conditional
    forward alone at w = 1) equals u_u + w·(u_c − u_u) from two separate forwards: the condition present (gate 1)
    and absent (no condition at all)."""
    cfg = _cfg(path)
    model = _perturb(_model(cfg))
    batch, cond = _batch(cfg), _cond(cfg)
    step = StepInputs(batch["z0"], batch["actions"], batch["state0"], batch["text"], batch["text_mask"])
    with torch.no_grad():
        velocity = rollout_velocity(CountingModel(model), step, w, model.condition_features(cond), 4)
        got = velocity(batch["z_t"], batch["tau"])
        u_c = model(**batch, cond=cond, gate=torch.ones(2))
        u_u = model(**batch)
    assert not torch.allclose(u_c, u_u, atol=1e-3)
    assert torch.allclose(got, u_u + w * (u_c - u_u), atol=1e-5)
    assert torch.allclose(got, guided_velocity(u_c, u_u, w), atol=1e-5)


# ----------------------------------------------------------------------------------------------------------------------
# Start weights: Wan2.2 (the 5B preset) and a stage-1 run
# ----------------------------------------------------------------------------------------------------------------------

BRIDGE_TINY = {"model.num_attention_heads": "2", "model.attention_head_dim": "16", "model.ffn_dim": "64",
               "model.freq_dim": "32", "model.text_dim": "32", "model.num_layers": "2", "model.action_hidden": "16",
               "model.action_ffn_dim": "32", "data.frames": "5", "data.height": "64", "data.width": "96"}


def test_the_5b_preset_builds_with_concat_on_the_meta_device():
    cfg = load_config("bridge", {"conditioning.path": "concat"}).validate()
    model = build_world_model(cfg, meta=True)
    e = model.cond_embed.weight
    assert e.is_meta and e.shape == (3072, 48, 1, 2, 2)  # Wan2.2-TI2V-5B: dim 3072, 48 latent channels, 1x2x2 patch
    assert model.video.patch_embedding.weight.shape == (3072, 48, 1, 2, 2)  # Wan's own tensor keeps its shape


@pytest.mark.parametrize("path", ["concat", "both"])
def test_wan_weights_load_with_the_new_channels_zero(tmp_path, path):
    """A tiny random Wan2.2 transformer (diffusers layout, as tests/test_weights.py writes them) into a tiny 5B-preset
    model built on the meta device: Wan's tensors load, the condition channels are expected missing and zero, and the
    pretrained start is exact — the same outputs as the paper-path model from the same weights."""
    folder = tmp_path / "transformer"
    write_tiny_wan(folder, in_channels=48)

    def loaded(path):
        cfg = load_config("bridge", {**BRIDGE_TINY, "conditioning.path": path}).validate()
        return (cfg, *wan_started(cfg, folder))

    cfg, model, report = loaded(path)
    assert report.missing == [] and report.unexpected == [] and "cond_embed.weight" in report.expected_missing
    assert not model.cond_embed.weight.any()
    _, paper, _ = loaded("blocks")
    batch, cond = _batch(cfg), _cond(cfg)
    with torch.no_grad():
        out = model(**batch, cond=cond, gate=torch.ones(2))
        assert torch.isfinite(out).all() and out.abs().mean() > 0.01
        assert torch.equal(out, model(**batch))
        assert torch.equal(out, paper(**batch, cond=cond, gate=torch.ones(2)))
    # the configured start (model.weights), as stage 1 loads it
    cfg.model.weights = str(folder)
    fresh = build_world_model(cfg)
    load_start_weights(fresh, cfg)
    wan = [k for k in fresh.state_dict() if diffusers_from_ours(k)]
    assert len(wan) == len(report.loaded) and not fresh.cond_embed.weight.any()
    assert all(torch.equal(fresh.state_dict()[k], model.state_dict()[k]) for k in wan)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_data(tmp_path_factory.mktemp("tiny"))


def test_stage2_with_concat_trains_from_a_stage1_run_resumes_and_exports(tiny, tmp_path):
    """Stage 2 with the input path starts from a paper-path stage-1 run (its condition channels new, zero), trains
    them, records the path in its config (sampling loads it; a resume cannot change it) and exports."""
    s1 = tmp_path / "s1"
    assert train_run(tiny_cfg(*tiny, "--train.max_steps=1"), s1, "pretrain", progress=False)["exit_code"] == 0
    run = tmp_path / "s2"
    cfg = tiny_cfg(*tiny, "--train.max_steps=2", "--conditioning.path=concat", "--conditioning.p=1")
    result = train_run(cfg, run, "train", teacher_run=s1, method="simforcing", progress=False)
    assert result["state"] == "finished" and result["step"] == 2, result
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(r["gate_mean"] == 1.0 for r in rows)
    teacher = load_checkpoint(list_checkpoints(s1)[-1][1]).model_state
    assert "cond_embed.weight" not in teacher
    state = load_checkpoint(list_checkpoints(run)[-1][1]).model_state
    assert state["cond_embed.weight"].abs().sum() > 0  # trained from zero
    assert all(torch.equal(state[k], teacher[k]) for k in teacher if ".cond_proj." in k)  # frozen at the start
    run_cfg, model, _ = load_model_from_run(run)
    assert run_cfg.conditioning.path == "concat" and torch.equal(model.cond_embed.weight, state["cond_embed.weight"])
    with pytest.raises(ConfigError, match="conditioning.path: .* was trained with 'concat'"):
        train_run(tiny_cfg(*tiny, "--train.max_steps=3"), run, "train", teacher_run=s1, resume=True, progress=False)
    out = tmp_path / "shared"
    export_run(run, out)
    shared = load_pretrained(out)
    assert shared.cfg.conditioning.path == "concat"
    assert torch.equal(shared.model.cond_embed.weight, state["cond_embed.weight"])
