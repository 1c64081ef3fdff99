"""`simforcing model info`: parameter counts, tokens, analytic FLOPs (checked against torch's counter), memory."""

import json

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from simforcing.cli import main
from simforcing.config import load_config
from simforcing.models.info import forward_flops, model_info, parameter_counts, token_counts
from simforcing.models.world_model import build_world_model


def test_bridge_video_expert_is_wan22_ti2v_5b():
    p = parameter_counts(load_config("bridge"))
    assert abs(p["video_expert"] - 5.0e9) < 0.02e9  # Wan2.2-TI2V-5B
    assert 0.7e9 < p["action_expert"] < 0.8e9  # 30 layers at width 1024, q/k/v to 24x128
    assert p["condition_projections"] == 30 * (48 * 4 * 3072 + 3072)
    assert p["total"] == sum(v for k, v in p.items() if k not in ("total", "per_layer"))


def test_token_layouts():
    assert token_counts(load_config("bridge")) == {"video": 420, "first_frame": 70, "action": 20, "text": 129,
                                                   "joint": 440}
    t = token_counts(load_config("interndata_a1"))
    assert (t["video"], t["action"]) == (630, 128)


@pytest.mark.parametrize("actions", ["expert", "frame", "both"])
def test_analytic_flops_match_torch_counter(actions):
    cfg = load_config("demo", {"model.action_conditioning": actions})
    model = build_world_model(cfg)
    c, lat, (h, w) = cfg.model.vae.latent_channels, cfg.latent_frames, cfg.latent_hw
    args = dict(z_t=torch.randn(1, c, lat - 1, h, w), tau=torch.rand(1), z0=torch.randn(1, c, 1, h, w),
                actions=torch.randn(1, cfg.data.actions_per_window, cfg.data.action_dim),
                state0=torch.randn(1, cfg.data.state_dim),
                text=torch.randn(1, cfg.data.text_max_tokens, cfg.model.text_dim),
                cond=torch.randn(1, c, lat, h, w), gate=torch.ones(1))
    with FlopCounterMode(display=False) as counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        model(**args)  # the math SDPA backend decomposes into counted matmuls
    assert counter.get_total_flops() == forward_flops(cfg)["total"]


def test_memory_table_shrinks_with_gpus_and_checkpointing():
    info = model_info(load_config("bridge"))
    rows = {(r["gpus"], r["checkpointing"]): r for r in info["memory"]}
    assert set(rows) == {(g, c) for g in (1, 8, 16, 32) for c in (False, True)}
    assert rows[(1, False)]["student_gib"] > 80  # 5.8 B params x 16 bytes, unsharded
    assert abs(rows[(8, False)]["student_gib"] * 8 - rows[(1, False)]["student_gib"]) < 1e-6
    for g in (1, 8, 16, 32):
        assert rows[(g, True)]["activations_gib"] < rows[(g, False)]["activations_gib"] / 5
        assert rows[(g, True)]["stage1_total_gib"] < rows[(g, True)]["stage2_total_gib"]
    assert rows[(32, True)]["stage2_total_gib"] < rows[(8, True)]["stage2_total_gib"] < 80


def test_command_table_and_json(capsys):
    assert main(["model", "info", "--preset", "demo"]) == 0
    table = capsys.readouterr().out
    assert "tokens per sample: video 72" in table and "stage2" in table
    assert main(["model", "info", "--preset", "bridge", "--json", "--train.batch_size=2"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["batch_size_per_gpu"] == 2 and info["tokens"]["joint"] == 440
    assert 3e12 < info["forward_flops"]["total"] < 5e12
