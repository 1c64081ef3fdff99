"""The benchmark's inputs: models with random weights (every branch active) and random batches shaped like the
dataset's; no checkpoint and no dataset are needed. ``bench_world_model`` holds them as every sampling caller holds a
trained one (``runs.loaded.LoadedWorldModel``)."""

from __future__ import annotations

import torch
from diffusers import AutoencoderKLWan

from simforcing.config import Config, ConfigError
from simforcing.data.stats import Normalizer
from simforcing.masking import FirstFrameMasker
from simforcing.models.vae import DEMO_MEAN_CHANNELS, DEMO_RESIDUAL_DIM, DemoVAE, WanVAE, load_vae
from simforcing.models.world_model import build_world_model
from simforcing.runs.loaded import LoadedWorldModel
from simforcing.sampler_batch import SamplerBatch

# The architecture of Wan2.2-TI2V-5B's VAE (diffusers AutoencoderKLWan, the `vae/config.json` of
# Wan-AI/Wan2.2-TI2V-5B-Diffusers): 48 latent channels, 16x spatial and 4x temporal compression
WAN22_VAE_ARCHITECTURE = {"base_dim": 160, "decoder_base_dim": 256, "z_dim": 48, "dim_mult": [1, 2, 4, 4],
                          "num_res_blocks": 2, "attn_scales": [], "temperal_downsample": [False, True, True],
                          "dropout": 0.0, "is_residual": True, "in_channels": 12, "out_channels": 12,
                          "patch_size": 2, "scale_factor_spatial": 16, "scale_factor_temporal": 4}


def bench_model(cfg: Config, device: torch.device, seed: int = 0):
    """``build_world_model(cfg)`` with random init, then small random values in the zero-initialised output head and
    condition projections P_j (so the condition and every branch change the output). Eval mode."""
    torch.manual_seed(seed)
    model = build_world_model(cfg, device=device)
    gen = torch.Generator(device="cpu").manual_seed(seed + 1)
    with torch.no_grad():
        heads = [model.video.proj_out] + [layer.cond_proj for layer in model.layers]
        for mod in heads:
            for p in mod.parameters():
                p.copy_(0.02 * torch.randn(p.shape, generator=gen).to(p.device, p.dtype))
    return model.eval()


def random_demo_vae(cfg: Config, seed: int = 0):
    """A DemoVAE with a random orthonormal basis of K = latent_channels - 48 components, shift 0, scale 1."""
    c = cfg.model.vae.latent_channels
    k = c - DEMO_MEAN_CHANNELS
    if not 0 <= k <= DEMO_RESIDUAL_DIM:
        raise ConfigError(f"model.vae.latent_channels: got {c}; the demo VAE has 48 + K channels, 0 <= K <= 192")
    gen = torch.Generator().manual_seed(seed)
    basis = torch.linalg.qr(torch.randn(DEMO_RESIDUAL_DIM, max(k, 1), generator=gen))[0][:, :k]  # (192, K)
    return DemoVAE(basis, torch.zeros(c), torch.ones(c))


def random_wan_vae(cfg: Config, device: torch.device, seed: int = 0) -> WanVAE:
    """A Wan2.2-TI2V-5B-architecture VAE with random weights (latent normalisation 0 / 1), float32, on ``device``:
    what a real-scale sampler encodes and decodes with, at the same cost, without the weights."""
    arch = WAN22_VAE_ARCHITECTURE
    v = cfg.model.vae
    got = (v.latent_channels, v.spatial_stride, v.temporal_stride)
    if got != (arch["z_dim"], arch["scale_factor_spatial"], arch["scale_factor_temporal"]):
        raise ConfigError(f"model.vae: latent_channels/spatial_stride/temporal_stride {got} do not match the "
                          "Wan2.2 VAE's (48, 16, 4); set model.vae.path to the VAE to use")
    torch.manual_seed(seed)
    with torch.device(device):
        vae = AutoencoderKLWan(**arch, latents_mean=[0.0] * arch["z_dim"], latents_std=[1.0] * arch["z_dim"])
    return WanVAE(vae).to(device)


def bench_vae(cfg: Config, device: torch.device):
    """The configured VAE when ``model.vae.path`` is set, else one with random weights: a demo VAE (kind demo) or a
    Wan2.2-architecture VAE (kind wan)."""
    if cfg.model.vae.path:
        return load_vae(cfg, device)
    if cfg.model.vae.kind == "demo":
        return random_demo_vae(cfg).to(device)
    return random_wan_vae(cfg, device)


def identity_normalizer(cfg: Config) -> Normalizer:
    """Statistics that leave actions and states in [-1, 1] as they are (normalise(x) == x)."""
    d = cfg.data
    return Normalizer({k: {"min": [-1.0] * n, "max": [1.0] * n}
                       for k, n in (("action", d.action_dim), ("state", d.state_dim))})


def bench_world_model(cfg: Config, model: torch.nn.Module, vae, device: torch.device) -> LoadedWorldModel:
    """``model`` and ``vae`` as a loaded world model (identity statistics, the configured first-frame masker)."""
    return LoadedWorldModel(cfg, model, vae, identity_normalizer(cfg), masker=FirstFrameMasker.from_config(cfg, device))


def pixel_batch(cfg: Config, b: int, device: torch.device, seed: int = 0) -> SamplerBatch:
    """What the sampler reads: the first frame of a window (B, 3, F, H, W) in [-1, 1] (the window as
    ``recorded_real``, a sim window as ``recorded_sim``), actions (B, A_w, A), state0 (B, S), text (B, N, D) with
    text_mask (B, N) (first half real tokens), the first frame's arm_mask (B, H, W) (a centred box)."""
    d = cfg.data
    g = torch.Generator().manual_seed(seed)
    video = (b, 3, d.frames, d.height, d.width)
    text_mask = torch.zeros(b, d.text_max_tokens, dtype=torch.bool)
    text_mask[:, : max(1, d.text_max_tokens // 2)] = True
    arm = torch.zeros(b, d.height, d.width, dtype=torch.bool)
    arm[:, d.height // 4: 3 * d.height // 4, d.width // 4: 3 * d.width // 4] = True
    real, sim = torch.rand(video, generator=g) * 2 - 1, torch.rand(video, generator=g) * 2 - 1
    batch = SamplerBatch(first_frame=real[:, :, 0], recorded_real=real, recorded_sim=sim,
                         actions=torch.rand(b, d.actions_per_window, d.action_dim, generator=g) * 2 - 1,
                         state0=torch.rand(b, d.state_dim, generator=g) * 2 - 1,
                         text=torch.randn(b, d.text_max_tokens, cfg.model.text_dim, generator=g),
                         text_mask=text_mask, arm_mask=arm)
    return batch.to(device)


def latent_batch(cfg: Config, b: int, device: torch.device, seed: int = 0) -> dict:
    """What a step function reads: z_sim, z_real (B, C, L+1, h, w) plus actions, state0, text, text_mask."""
    px = pixel_batch(cfg, b, device, seed)
    g = torch.Generator().manual_seed(seed + 7)
    shape = (b, cfg.model.vae.latent_channels, cfg.latent_frames, *cfg.latent_hw)
    out = {"actions": px.actions, "state0": px.state0, "text": px.text, "text_mask": px.text_mask}
    out["z_sim"] = torch.randn(shape, generator=g).to(device)
    out["z_real"] = (out["z_sim"].cpu() + 0.5 * torch.randn(shape, generator=g)).to(device)
    return out
