"""Weight loading (diffusers and original Wan2.2 layouts), key reports, init-action-expert, frozen copies."""

import json
import math

import pytest
import torch
from diffusers import WanTransformer3DModel
from safetensors.torch import load_file, save_file

from simforcing.cli import main
from simforcing.config import ConfigError, load_config
from simforcing.models.weights import (diffusers_from_ours, frozen_copy, load_action_expert_weights,
                                       load_configured_weights, load_video_expert_weights)
from simforcing.models.world_model import build_world_model

TINY = {"model.num_attention_heads": "2", "model.attention_head_dim": "16", "model.ffn_dim": "64",
        "model.freq_dim": "32", "model.text_dim": "32", "model.num_layers": "2", "model.action_hidden": "16",
        "model.action_ffn_dim": "32", "model.vae.latent_channels": "16"}
ARGS = [f"--{k}={v}" for k, v in TINY.items()]


def _cfg(**extra):
    ov = dict(TINY)
    ov.update(extra)
    return load_config("demo", ov)


def _to_original(key: str) -> str:
    """diffusers key -> the original Wan2.2 key (the inverse of diffusers' converter, written out for the test)."""
    if key == "scale_shift_table":
        return "head.modulation"
    rules = [("condition_embedder.time_embedder.linear_1", "time_embedding.0"),
             ("condition_embedder.time_embedder.linear_2", "time_embedding.2"),
             ("condition_embedder.text_embedder.linear_1", "text_embedding.0"),
             ("condition_embedder.text_embedder.linear_2", "text_embedding.2"),
             ("condition_embedder.time_proj", "time_projection.1"), ("attn1.", "self_attn."), ("attn2.", "cross_attn."),
             (".to_out.0.", ".o."), (".to_q.", ".q."), (".to_k.", ".k."), (".to_v.", ".v."),
             ("ffn.net.0.proj", "ffn.0"), ("ffn.net.2", "ffn.2"), (".norm2.", ".norm3."), ("proj_out", "head.head"),
             ("scale_shift_table", "modulation")]
    for a, b in rules:
        key = key.replace(a, b)
    return key


def write_tiny_wan(folder, in_channels: int = 16, **save) -> dict:
    """A tiny random diffusers Wan transformer (2 layers, 2 heads × 16, ``in_channels`` latent channels, weights
    N(0, 0.2²) from seed 0) saved to ``folder`` (``save``: save_pretrained's options); returns its state dict."""
    torch.manual_seed(0)
    ref = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16,
                                in_channels=in_channels, out_channels=in_channels, text_dim=32, freq_dim=32, ffn_dim=64,
                                num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6)
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0.0, 0.2)
    ref.save_pretrained(folder, **save)
    return {k: v.clone() for k, v in ref.state_dict().items()}


def wan_started(cfg, folder):
    """The model of ``cfg`` as a large run starts it: built on the meta device, materialised (garbage made NaN, so a
    tensor left unset is loud), initialised from seed 1, then the Wan weights at ``folder`` loaded ->
    (model in eval mode, the LoadReport)."""
    model = build_world_model(cfg, meta=True)
    model.to_empty(device="cpu")
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    torch.manual_seed(1)
    model.initialize_weights()
    return model.eval(), load_video_expert_weights(model, folder)


@pytest.fixture(scope="module")
def wan(tmp_path_factory):
    """A tiny random diffusers Wan transformer saved as a sharded folder, and its state dict."""
    folder = tmp_path_factory.mktemp("wan") / "transformer"
    sd = write_tiny_wan(folder, max_shard_size="40KB")  # several shards + an index json
    assert len(list(folder.glob("*.safetensors"))) > 1 and list(folder.glob("*.index.json"))
    return folder, sd


def _check_equal(model, sd):
    """Every video-expert tensor of ``model`` equals the diffusers state dict ``sd``, and all of ``sd`` is used."""
    mapped = {diffusers_from_ours(k): v for k, v in model.state_dict().items() if diffusers_from_ours(k)}
    assert set(mapped) == set(sd)
    for k, v in sd.items():
        assert torch.equal(mapped[k], v), k


def test_diffusers_folder_loads(wan):
    folder, sd = wan
    model = build_world_model(_cfg())
    report = load_video_expert_weights(model, folder)
    assert report.layout == "diffusers" and report.missing == [] and report.unexpected == []
    assert len(report.loaded) == len(sd)
    assert "layers.0.cond_proj.weight" in report.expected_missing
    assert "layers.0.action.attn1.to_q.weight" in report.expected_missing
    assert "state_embed.weight" in report.expected_missing
    _check_equal(model, sd)


def test_original_layout_loads(wan, tmp_path):
    _, sd = wan
    original = {"model.diffusion_model." + _to_original(k): v for k, v in sd.items()}
    assert "model.diffusion_model.blocks.0.self_attn.q.weight" in original
    assert "model.diffusion_model.blocks.1.norm3.weight" in original  # Wan's cross-attention norm is norm3
    save_file(original, str(tmp_path / "wan2.2_ti2v.safetensors"))
    model = build_world_model(_cfg())
    report = load_video_expert_weights(model, tmp_path / "wan2.2_ti2v.safetensors")
    assert report.layout == "original" and not report.missing and not report.unexpected
    _check_equal(model, sd)


def test_missing_and_unexpected_keys_are_named(wan, tmp_path):
    _, sd = wan
    broken = dict(sd)
    del broken["blocks.1.ffn.net.2.weight"]
    broken["blocks.0.attn1.to_gate.weight"] = torch.zeros(2)
    save_file(broken, str(tmp_path / "broken.safetensors"))
    model = build_world_model(_cfg())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"layers\.1\.video\.ffn\.net\.2\.weight.*blocks\.0\.attn1\.to_gate\.weight"):
        load_video_expert_weights(model, tmp_path / "broken.safetensors")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # nothing copied on failure
    report = load_video_expert_weights(model, tmp_path / "broken.safetensors", strict=False)
    assert report.missing == ["layers.1.video.ffn.net.2.weight"]
    assert report.unexpected == ["blocks.0.attn1.to_gate.weight"]


def test_wrong_shapes_and_configs_are_named(wan, tmp_path):
    folder, sd = wan
    wide = build_world_model(_cfg(**{"model.ffn_dim": "96"}))
    with pytest.raises(ConfigError, match="model.ffn_dim"):
        load_video_expert_weights(wide, folder)
    save_file(dict(sd), str(tmp_path / "w.safetensors"))  # no config.json: caught by the tensor shapes
    with pytest.raises(ValueError, match=r"ffn\.net\.0\.proj\.weight: expected shape \(96, 32\), file has \(64, 32\)"):
        load_video_expert_weights(wide, tmp_path / "w.safetensors")
    save_file({"encoder.weight": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not a Wan transformer"):
        load_video_expert_weights(wide, tmp_path / "other.safetensors")
    meta = build_world_model(_cfg(), meta=True)
    with pytest.raises(ValueError, match="meta device"):
        load_video_expert_weights(meta, folder)


def test_init_action_expert_command(wan, tmp_path):
    folder, sd = wan
    out = tmp_path / "action.safetensors"
    assert main(["model", "init-action-expert", "--preset", "demo", "--weights", str(folder), "--out", str(out),
                 *ARGS]) == 0
    t = load_file(str(out))
    # self-attention: heads x head_dim side kept (32), input side sliced 32 -> 16 and rescaled by sqrt(32/16)
    q = sd["blocks.0.attn1.to_q.weight"]
    assert torch.allclose(t["layers.0.action.attn1.to_q.weight"], q[:, :16] * math.sqrt(2))
    assert torch.equal(t["layers.0.action.attn1.to_out.0.weight"], sd["blocks.0.attn1.to_out.0.weight"][:16])
    assert torch.equal(t["layers.0.action.attn1.norm_q.weight"], sd["blocks.0.attn1.norm_q.weight"])
    # cross-attention at the action width: whole heads kept
    assert torch.allclose(t["layers.0.action.attn2.to_k.weight"], sd["blocks.0.attn2.to_k.weight"][:16, :16] * 2**0.5)
    # FFN: ffn 64 -> 32 and dim 32 -> 16
    assert torch.allclose(t["layers.0.action.ffn.net.2.weight"], sd["blocks.0.ffn.net.2.weight"][:16, :32] * 2**0.5)
    assert torch.equal(t["layers.0.action.ffn.net.0.proj.bias"], sd["blocks.0.ffn.net.0.proj.bias"][:32])
    # the last action block is K/V-only: adaLN shift/scale rows, keys, values
    assert torch.equal(t["layers.1.action.scale_shift_table"], sd["blocks.1.scale_shift_table"][:, :2, :16])
    assert torch.allclose(t["layers.1.action.attn1.to_v.weight"], sd["blocks.1.attn1.to_v.weight"][:, :16] * 2**0.5)
    assert not any(k.startswith(("layers.1.action.ffn", "layers.1.action.attn2", "layers.1.action.attn1.to_q"))
                   for k in t)
    # adaLN projection: first 16 of each of the 6 chunks
    tp = sd["condition_embedder.time_proj.weight"].view(6, 32, 32)[:, :16, :16].reshape(96, 16)
    assert torch.allclose(t["action.condition_embedder.time_proj.weight"], tp * 2**0.5)
    assert torch.equal(t["layers.0.action.scale_shift_table"], sd["blocks.0.scale_shift_table"][..., :16])
    assert not any(k.startswith("action.action_in") for k in t)

    model = build_world_model(_cfg())
    report = load_action_expert_weights(model, out)
    assert report.missing == [] and report.unexpected == []
    assert report.expected_missing == ["action.action_in.bias", "action.action_in.weight"]
    assert torch.equal(model.state_dict()["layers.0.action.ffn.net.2.weight"], t["layers.0.action.ffn.net.2.weight"])

    cfg = _cfg(**{"model.weights": str(folder), "model.action_expert_weights": str(out)})
    fresh = build_world_model(cfg)
    reports = load_configured_weights(fresh, cfg)
    assert [r.layout for r in reports] == ["diffusers", "simforcing-action-expert"]
    _check_equal(fresh, sd)


def test_init_action_expert_needs_weights(tmp_path, capsys):
    assert main(["model", "init-action-expert", "--preset", "demo", "--out", str(tmp_path / "a.safetensors")]) == 2
    assert "model.weights" in capsys.readouterr().err


def test_frozen_copy_is_independent_and_frozen():
    model = build_world_model(_cfg())
    teacher = frozen_copy(model)
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    assert all(p.requires_grad for p in model.parameters()) and model.training
    for (name, p), q in zip(model.named_parameters(), teacher.parameters()):
        assert torch.equal(p, q) and p.data_ptr() != q.data_ptr(), name
    with torch.no_grad():
        model.video.proj_out.bias.add_(1.0)
    assert not teacher.video.proj_out.bias.any()


def test_index_json_lists_real_shards(wan, tmp_path):
    folder, _ = wan
    index = json.loads(next(folder.glob("*.index.json")).read_text())
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(FileNotFoundError, match="shards that do not exist"):
        load_video_expert_weights(build_world_model(_cfg()), bad)
