"""The frozen video VAEs: a tiny Wan2.2-style diffusers VAE and the closed-form demo VAE."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from simforcing.config import ConfigError, load_config
from simforcing.data.format import DataError, EpisodeInfo, write_episode, write_meta
from simforcing.models.vae import DemoVAE, WanVAE, depth_to_space, load_vae, space_to_depth
from simforcing.prep.demo_vae import fit_demo_vae, read_demo_vae_report


# ----------------------------------------------------------------------------------------------------------------------
# Wan2.2 (diffusers AutoencoderKLWan, tiny random weights)
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wan_dir(tmp_path_factory):
    """A tiny Wan2.2-style VAE: residual blocks, patch 2 (12 channels in/out), z_dim 48, 16× spatial, 4× temporal."""
    from diffusers import AutoencoderKLWan

    torch.manual_seed(0)
    vae = AutoencoderKLWan(base_dim=8, decoder_base_dim=8, z_dim=48, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                           temperal_downsample=[False, True, True], is_residual=True, in_channels=12,
                           out_channels=12, patch_size=2, scale_factor_spatial=16, scale_factor_temporal=4,
                           latents_mean=[0.02 * i - 0.5 for i in range(48)],
                           latents_std=[0.5 + 0.03 * i for i in range(48)])
    d = tmp_path_factory.mktemp("wan_vae")
    vae.save_pretrained(d)
    return d


def wan_cfg(path, **vae_fields):
    cfg = load_config("bridge", [f"--model.vae.path={path}"])
    for k, v in vae_fields.items():
        setattr(cfg.model.vae, k, v)
    return cfg


def test_wan_shapes_and_first_frame(wan_dir):
    vae = load_vae(wan_cfg(wan_dir))
    assert isinstance(vae, WanVAE)
    assert (vae.latent_channels, vae.spatial_stride, vae.temporal_stride) == (48, 16, 4)
    assert not vae.training and not any(p.requires_grad for p in vae.parameters())
    x = torch.rand(2, 3, 9, 16, 32) * 2 - 1
    z = vae.encode(x)
    assert z.shape == (2, 48, 3, 1, 2) and z.dtype == torch.float32
    x_hat = vae.decode(z)
    assert x_hat.shape == x.shape and x_hat.abs().max() <= 1.0
    z1 = vae.encode(x[:, :, :1])  # a single frame -> one latent frame, equal to the video's first (causal)
    assert z1.shape == (2, 48, 1, 1, 2)
    torch.testing.assert_close(z1, z[:, :, :1], atol=1e-5, rtol=1e-4)
    assert vae.decode(z1).shape == (2, 3, 1, 16, 32)
    vae.train()
    assert not vae.training  # frozen: stays in eval mode


def test_wan_normalisation_round_trip(wan_dir):
    vae = load_vae(wan_cfg(wan_dir))
    raw_vae = vae.vae
    mean = torch.tensor(raw_vae.config.latents_mean).view(1, -1, 1, 1, 1)
    std = torch.tensor(raw_vae.config.latents_std).view(1, -1, 1, 1, 1)
    x = torch.rand(1, 3, 5, 16, 16) * 2 - 1
    with torch.no_grad():
        raw = raw_vae.encode(x).latent_dist.mode()
        expected_x = raw_vae.decode(raw).sample
    z = vae.encode(x)
    torch.testing.assert_close(z, (raw - mean) / std)
    torch.testing.assert_close(z * std + mean, raw, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(vae.decode(z), expected_x.clamp(-1, 1), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(vae.encode(x), z)  # deterministic (posterior mode, no sampling)


def test_wan_errors(wan_dir, tmp_path):
    with pytest.raises(ConfigError, match="model.vae.path"):
        load_vae(wan_cfg(None))
    with pytest.raises(ConfigError, match="model.vae.path"):
        load_vae(wan_cfg(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="model.vae.path"):
        load_vae(wan_cfg(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="model.vae.latent_channels"):
        load_vae(wan_cfg(wan_dir, latent_channels=16))
    vae = load_vae(wan_cfg(wan_dir))
    with pytest.raises(ValueError, match=r"F = 1 \+ 4"):
        vae.encode(torch.zeros(1, 3, 4, 16, 16))


# ----------------------------------------------------------------------------------------------------------------------
# Demo VAE
# ----------------------------------------------------------------------------------------------------------------------


def random_demo_vae(k: int, seed: int = 0) -> DemoVAE:
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(192, 192, generator=g, dtype=torch.float64))
    c = 48 + k
    shift = torch.cat([torch.randn(48, generator=g) * 0.2, torch.zeros(k)])
    scale = torch.rand(c, generator=g) + 0.5
    return DemoVAE(q[:, :k].float(), shift, scale)


def test_space_to_depth_inverse():
    x = torch.randn(2, 3, 5, 8, 12)
    s = space_to_depth(x)
    assert s.shape == (2, 48, 5, 2, 3)
    assert torch.equal(s[:, 16 * 1 + 4 * 2 + 3, :, 1, 2], x[:, 1, :, 4 + 2, 8 + 3])  # colour 1, dy 2, dx 3
    assert torch.equal(depth_to_space(s), x)


def test_demo_lossless_with_all_components():
    vae = random_demo_vae(192)
    x = torch.rand(2, 3, 9, 16, 24) * 2 - 1
    z = vae.encode(x)
    assert z.shape == (2, 240, 3, 4, 6)
    torch.testing.assert_close(vae.decode(z), x, atol=2e-5, rtol=0)


def test_demo_shapes_and_single_frame():
    vae = random_demo_vae(16)
    assert (vae.latent_channels, vae.spatial_stride, vae.temporal_stride) == (64, 4, 4)
    x = torch.rand(3, 3, 9, 32, 48) * 2 - 1
    z = vae.encode(x)
    assert z.shape == (3, 64, 3, 8, 12)
    z1 = vae.encode(x[:, :, :1])
    assert z1.shape == (3, 64, 1, 8, 12)
    assert torch.equal(z1, z[:, :, :1])
    torch.testing.assert_close(vae.decode(z1)[:, :, 0], x[:, :, 0], atol=1e-5, rtol=0)  # first frame is lossless
    assert vae.decode(z).shape == x.shape
    with pytest.raises(ValueError, match="divisible by the VAE stride 4"):
        vae.encode(torch.zeros(1, 3, 5, 30, 48))
    with pytest.raises(ValueError, match="latents must be"):
        vae.decode(torch.zeros(1, 48, 2, 8, 12))


def test_demo_static_video_repeats_first_latent():
    vae = random_demo_vae(16)
    frame = torch.rand(2, 3, 1, 32, 48) * 2 - 1
    z = vae.encode(frame.expand(-1, -1, 9, -1, -1))  # (2, 64, 3, 8, 12)
    for ell in range(1, 3):
        assert torch.equal(z[:, :, ell], z[:, :, 0])  # exactly: "copy the first frame" is x_hat = z_0
    torch.testing.assert_close(vae.decode(z), frame.expand(-1, -1, 9, -1, -1), atol=1e-5, rtol=0)


def test_demo_causal():
    vae = random_demo_vae(16)
    x = torch.rand(1, 3, 13, 16, 16) * 2 - 1  # groups: frame 0 | 1-4 | 5-8 | 9-12
    z = vae.encode(x)
    for t, group in ((0, 0), (3, 1), (6, 2), (12, 3)):
        y = x.clone()
        y[:, :, t] = -y[:, :, t]
        zy = vae.encode(y)
        assert torch.equal(zy[:, :, :group], z[:, :, :group]), f"frame {t} changed an earlier latent"
        assert not torch.equal(zy[:, :, group], z[:, :, group])
        assert torch.equal(zy[:, :, group + 1:], z[:, :, group + 1:])


def test_demo_save_load_round_trip(tmp_path):
    vae = random_demo_vae(16)
    vae.save(tmp_path / "vae", {"psnr_val": {"sim": 30.0}})
    cfg_json = json.loads((tmp_path / "vae" / "config.json").read_text())
    assert cfg_json["kind"] == "demo" and cfg_json["components"] == 16 and cfg_json["latent_channels"] == 64
    cfg = load_config("demo", [f"--model.vae.path={tmp_path / 'vae'}", "--model.vae.latent_channels=64"])
    loaded = load_vae(cfg)
    assert isinstance(loaded, DemoVAE) and loaded.components == 16
    x = torch.rand(1, 3, 5, 32, 48) * 2 - 1
    assert torch.equal(loaded.encode(x), vae.encode(x))
    cfg.model.vae.latent_channels = 48
    with pytest.raises(ConfigError, match="model.vae.latent_channels"):
        load_vae(cfg)
    cfg.model.vae.latent_channels = 64
    (tmp_path / "vae" / "vae.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ConfigError, match="model.vae.path"):
        load_vae(cfg)
    with pytest.raises(ConfigError, match="model.vae.path"):
        load_vae(load_config("demo"))  # path not set


# ----------------------------------------------------------------------------------------------------------------------
# Fitting the demo VAE on a tiny dataset
# ----------------------------------------------------------------------------------------------------------------------


def make_moving_blob_dataset(root, n_train=3, n_val=2, n_pool=3, length=13, h=32, w=48, seed=0):
    """Sim: a bright disc moving on black; real: the same disc over a random flat background."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:h, :w]
    episodes, splits = [], {"train": [], "val": [], "sim_pool": []}
    for split, n in (("train", n_train), ("val", n_val), ("sim_pool", n_pool)):
        for i in range(n):
            eid = f"{split}_{i}"
            c, v = rng.uniform([6, 6], [h - 6, w - 6]), rng.normal(0, 1.0, 2)
            disc = [((yy - c[0] - v[0] * t) ** 2 + (xx - c[1] - v[1] * t) ** 2) < 16 for t in range(length)]
            sim = np.stack([np.where(d[..., None], 220, 0) for d in disc]).repeat(3, -1).astype(np.uint8)  # (T, H, W, 3)
            real = np.where(sim > 0, sim, rng.integers(0, 255, 3)).astype(np.uint8)
            has_real = split != "sim_pool"
            write_episode(root, eid, sim, real if has_real else None, np.zeros((length - 1, 7)),
                          np.zeros((length, 7)))
            episodes.append(EpisodeInfo(eid, length, "push the disc", has_real))
            splits[split].append(eid)
    write_meta(root, {"fps": 10, "height": h, "width": w, "action_dim": 7, "state_dim": 7}, episodes, splits)


@pytest.fixture(scope="module")
def blob_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("blobs")
    make_moving_blob_dataset(root)
    return root


def test_fit_demo_vae(blob_root, tmp_path):
    cfg = load_config("demo")
    vae, report = fit_demo_vae(blob_root, cfg, max_windows=40, components=16, out_dir=tmp_path / "vae")
    assert vae.latent_channels == 64
    torch.testing.assert_close(vae.basis.T @ vae.basis, torch.eye(16), atol=1e-5, rtol=0)
    assert report["fitted_on"]["windows"] == 40
    by_k = {int(k): v for k, v in report["psnr_val_by_components"].items()}
    assert report["psnr_val"] == by_k[16] and set(by_k[16]) == {"sim", "real"}
    for dom in ("sim", "real"):
        ps = [by_k[k][dom] for k in sorted(by_k)]
        assert all(b >= a - 1e-3 for a, b in zip(ps, ps[1:])), f"{dom} PSNR must grow with K: {ps}"
        assert by_k[144][dom] >= 90  # residuals of 4 frames around their mean span 144 dims: lossless
        assert by_k[16][dom] > by_k[0][dom] + 1  # the components carry the motion
    assert read_demo_vae_report(tmp_path / "vae")["psnr_val"] == report["psnr_val"]
    z = vae.encode(torch.zeros(1, 3, 9, 32, 48) - 1)  # black static video: the mean channels are normalised
    assert torch.equal(z[:, :, 1], z[:, :, 0]) and z[:, 48:].abs().max() == 0


def test_pixel_normalisation_makes_the_latent_error_a_pixel_error(blob_root):
    """'pixel': ‖Δz‖² over a 4-frame group = ‖Δx‖² / (4σ²) for any change of the future latents (σ: the one scale
    of the mean channels), checked by decoding two latents; 'channel' puts every channel at unit variance."""
    cfg = load_config("demo")
    vae, report = fit_demo_vae(blob_root, cfg, max_windows=40, components=16)
    assert report["normalization"] == "pixel"
    sigma = float(vae.scale.flatten()[0])
    torch.testing.assert_close(vae.scale.flatten(), torch.cat([torch.full((48,), sigma), torch.full((16,), 2 * sigma)]))
    g = torch.Generator().manual_seed(0)
    z = torch.randn(1, 64, 3, 8, 12, generator=g)
    ratios = []
    for channels in (slice(0, 48), slice(48, 64), slice(0, 64)):  # mean channels, coefficients, both
        dz = torch.zeros_like(z)
        dz[:, channels, 1:] = 0.1 * torch.randn(dz[:, channels, 1:].shape, generator=g)  # z_0 is given, not predicted
        ratios.append(float(dz.pow(2).sum() / (vae.decode(z + dz) - vae.decode(z)).pow(2).sum()))
    assert ratios[0] == pytest.approx(ratios[1], rel=1e-2), ratios  # one constant for every channel
    assert ratios[2] == pytest.approx(ratios[0], rel=5e-2), ratios  # (+ small cross terms: null PCA directions)
    vae_c, report_c = fit_demo_vae(blob_root, cfg, max_windows=40, components=16, normalization="channel")
    assert report_c["normalization"] == "channel" and not torch.allclose(vae_c.scale[0, 48:], vae_c.scale[0, 48])
    with pytest.raises(ConfigError, match="normalization"):
        fit_demo_vae(blob_root, cfg, max_windows=4, normalization="none")


def test_fit_demo_vae_checks_resolution(blob_root):
    cfg = load_config("demo", ["--data.height=64", "--data.width=96"])
    with pytest.raises(DataError, match="data.height"):
        fit_demo_vae(blob_root, cfg, components=8, max_windows=4)


def test_fit_vae_command(blob_root, tmp_path, capsys):
    from simforcing.cli import main

    out = tmp_path / "demo_vae"
    rc = main(["model", "fit-vae", "--data", str(blob_root), "--out", str(out), "--components", "8",
               "--max-windows", "16"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "reconstruction PSNR" in printed and "sim" in printed and "real" in printed
    cfg = load_config("demo", [f"--model.vae.path={out}", "--model.vae.latent_channels=56"])
    assert load_vae(cfg).components == 8
