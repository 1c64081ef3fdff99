"""Training on the model's own rollouts (``train.rollout_prob``): the first latent of a window replaced by the
student's own prediction of that frame from the previous chunk, as a long rollout hands a chunk over."""

from __future__ import annotations

import json

import pytest
import torch

from simforcing import flow
from simforcing.config import ConfigError
from simforcing.methods import own_first_frames, rollout_windows
from simforcing.train import train_run
from test_sample import random_batch, tiny_cfg, tiny_model, tiny_vae
from test_train import stage1, tiny, tiny_cfg as train_cfg  # noqa: F401  (fixtures)


def latent_batch(cfg, vae, b=3):
    px = random_batch(cfg, b)
    prev = random_batch(cfg, b, seed=5)
    return {"z_real": vae.encode(px["real"]), "z_real_prev": vae.encode(prev["real"]), "actions": px["actions"],
            "actions_prev": prev["actions"], "state0": px["state0"], "state0_prev": prev["state0"],
            "text": px["text"], "text_mask": px["text_mask"]}


def test_own_first_frames_is_the_decoded_one_step_prediction_re_encoded():
    cfg = tiny_cfg(train__rollout_prob=1.0)
    model, vae = tiny_model(cfg), tiny_vae()
    batch = latent_batch(cfg, vae)
    out = own_first_frames(model, vae, batch, cfg, torch.Generator().manual_seed(3), "real")
    # the same draws, by hand: the selection, then the noise of the previous chunk's future
    g = torch.Generator().manual_seed(3)
    assert bool((torch.rand(3, generator=g) < 1.0).all())
    prev = batch["z_real_prev"]
    noise = torch.randn(prev[:, :, 1:].shape, generator=g)
    tau = torch.ones(3)
    with torch.no_grad():
        u = model(noise, tau, prev[:, :, :1], batch["actions_prev"], batch["state0_prev"], batch["text"],
                  text_mask=batch["text_mask"])
        x = vae.decode(torch.cat([prev[:, :, :1], noise - u], dim=2))  # clean estimate at τ = 1: z(1) − û
        want = vae.encode(x[:, :, -1:].clamp(-1, 1))
    torch.testing.assert_close(out["z_real"][:, :, :1], want, atol=1e-5, rtol=1e-5)
    assert torch.equal(out["z_real"][:, :, 1:], batch["z_real"][:, :, 1:])  # the targets stay recorded
    assert float(out["rollout_frac"]) == 1.0
    none = own_first_frames(model, vae, batch, tiny_cfg(), torch.Generator().manual_seed(3), "real")
    assert torch.equal(none["z_real"], batch["z_real"]) and float(none["rollout_frac"]) == 0.0
    assert flow.clean_estimate(noise, tau, u).shape == noise.shape


def test_a_run_trains_on_two_chunk_windows_and_logs_the_share(tiny, stage1, tmp_path):  # noqa: F811
    cfg = train_cfg(*tiny, "--train.rollout_prob=0.5", "--train.method=sft")
    assert rollout_windows(cfg).data.frames == 2 * cfg.data.frames - 1
    res = train_run(cfg, tmp_path / "run", "train", teacher_run=stage1, progress=False)
    assert res["exit_code"] == 0, res
    logs = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(0.0 <= r["rollout_frac"] <= 1.0 for r in logs)
    with pytest.raises(ConfigError, match="latent_cache"):
        train_cfg(*tiny, "--train.rollout_prob=0.5", "--data.latent_cache=/tmp/x").validate()
