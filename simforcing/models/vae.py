"""The frozen video VAE: Wan2.2's (diffusers ``AutoencoderKLWan``) and the small demo VAE, behind one interface.

    vae = load_vae(cfg, device)          # cfg.model.vae.kind: "wan" | "demo", cfg.model.vae.path: a local folder
    z = vae.encode(x)                    # x (B, 3, F, H, W) in [-1, 1], F = 1 + 4L -> z (B, C, L+1, H/s, W/s)
    x_hat = vae.decode(z)                # (B, 3, F, H, W) clamped to [-1, 1]

Latents are normalised per channel. ``z[:, :, :1]`` encodes the first frame alone (causal), so F = 1 works.

The demo VAE is a causal *linear* autoencoder fitted in closed form (``simforcing.prep.demo_vae.fit_demo_vae``,
command ``simforcing model fit-vae``): space-to-depth S by 4 (a frame (3, H, W) -> (48, H/4, W/4)); the first frame is
z_0 = [S(x_0); 0_K]; each later group of 4 frames keeps its mean m = mean_t S(x_t) and the first K principal
components of the stacked residuals S(x_t) - m (4·48 = 192 numbers per spatial cell): z_l = [m; U^T r].
The 48 mean channels of z_0 and z_l share one normalisation, so a static video encodes to z_l == z_0 exactly.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from simforcing.config import Config, ConfigError
from simforcing.utils import atomic_write, atomic_write_json

DEMO_STRIDE = 4  # spatial and temporal stride of the demo VAE
DEMO_MEAN_CHANNELS = 3 * DEMO_STRIDE * DEMO_STRIDE  # 48: S(x) of one frame
DEMO_RESIDUAL_DIM = DEMO_STRIDE * DEMO_MEAN_CHANNELS  # 192: residuals of one 4-frame group per spatial cell
DEMO_RANK = DEMO_RESIDUAL_DIM - DEMO_MEAN_CHANNELS  # 144: the residuals sum to zero over the group
DEMO_FORMAT_VERSION = 1


class VideoVAE(nn.Module):
    """Frozen causal video autoencoder (always eval mode, no gradients).

    Subclasses set ``latent_channels``, ``spatial_stride``, ``temporal_stride`` and implement ``_encode``/``_decode``
    on already-checked tensors.
    """

    latent_channels: int
    spatial_stride: int
    temporal_stride: int
    kind: str

    def _freeze(self) -> None:
        self.requires_grad_(False)
        super().train(False)

    def train(self, mode: bool = True) -> "VideoVAE":
        return super().train(False)  # frozen: never leaves eval mode

    @torch.no_grad()
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, 3, F, H, W) in [-1, 1], F = 1 + 4L -> normalised latents z (B, C, L+1, H/s, W/s) float32."""
        self._check_video(x)
        return self._encode(x)

    @torch.no_grad()
    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """z (B, C, L+1, h, w) -> x (B, 3, 1 + 4L, h·s, w·s) float32 clamped to [-1, 1]."""
        if z.ndim != 5 or z.shape[1] != self.latent_channels:
            raise ValueError(f"latents must be (B, {self.latent_channels}, L+1, h, w), got {tuple(z.shape)}")
        return self._decode(z).clamp(-1.0, 1.0)

    def _check_video(self, x: torch.Tensor) -> None:
        s, t = self.spatial_stride, self.temporal_stride
        if x.ndim != 5 or x.shape[1] != 3:
            raise ValueError(f"video must be (B, 3, F, H, W), got {tuple(x.shape)}")
        f, h, w = x.shape[2:]
        if (f - 1) % t != 0:
            raise ValueError(f"video has F = {f} frames; expected F = 1 + {t}·L (e.g. 1, 5, 9, 21)")
        if h % s or w % s:
            raise ValueError(f"video is {h}×{w}; expected height and width divisible by the VAE stride {s}")

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _decode(self, z: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


# ----------------------------------------------------------------------------------------------------------------------
# Wan2.2 (diffusers)
# ----------------------------------------------------------------------------------------------------------------------


class WanVAE(VideoVAE):
    """diffusers ``AutoencoderKLWan`` (Wan2.2: 48 channels, 16× spatial, 4× temporal) with its latent normalisation.

    z = (mode(posterior) - latents_mean) / latents_std per channel; decode inverts it. The encode is deterministic.
    """

    kind = "wan"

    def __init__(self, vae: nn.Module, dtype: torch.dtype = torch.float32):
        super().__init__()
        cfg = vae.config
        self.vae = vae.to(dtype)
        self.dtype_ = dtype
        self.latent_channels = int(cfg.z_dim)
        self.spatial_stride = int(cfg.scale_factor_spatial)
        self.temporal_stride = int(cfg.scale_factor_temporal)
        mean, std = list(cfg.latents_mean), list(cfg.latents_std)
        if len(mean) != self.latent_channels or len(std) != self.latent_channels:
            raise ValueError(f"VAE config: latents_mean/latents_std have {len(mean)}/{len(std)} values; expected "
                             f"z_dim = {self.latent_channels}")
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1, 1))  # (1, C, 1, 1, 1)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1, 1))
        self._freeze()

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: torch.dtype = torch.float32) -> "WanVAE":
        # diffusers' autoencoders take ~1.5 s to import: only here, for the real Wan2.2 VAE (the demo's is ours)
        from diffusers import AutoencoderKLWan

        low_mem = importlib.util.find_spec("accelerate") is not None  # without accelerate diffusers only warns
        try:
            vae = AutoencoderKLWan.from_pretrained(str(path), local_files_only=True, torch_dtype=dtype,
                                                   low_cpu_mem_usage=low_mem, use_safetensors=True)
        except (OSError, ValueError, RuntimeError) as e:
            raise ConfigError(f"model.vae.path: cannot load a diffusers AutoencoderKLWan from {path} "
                              f"({type(e).__name__}: {e}); expected a folder with config.json and "
                              f"diffusion_pytorch_model.safetensors") from e
        return cls(vae, dtype)

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        raw = self.vae.encode(x.to(self.dtype_)).latent_dist.mode().float()  # (B, C, L+1, h, w)
        return (raw - self.mean) / self.std

    def _decode(self, z: torch.Tensor) -> torch.Tensor:
        raw = z.float() * self.std + self.mean
        return self.vae.decode(raw.to(self.dtype_)).sample.float()


# ----------------------------------------------------------------------------------------------------------------------
# Demo: causal linear autoencoder
# ----------------------------------------------------------------------------------------------------------------------


def space_to_depth(x: torch.Tensor, s: int = DEMO_STRIDE) -> torch.Tensor:
    """(B, 3, F, H, W) -> (B, 3·s·s, F, H/s, W/s); channel = colour·s² + dy·s + dx."""
    b, c, f, h, w = x.shape
    x = x.reshape(b, c, f, h // s, s, w // s, s)  # (B, 3, F, h, dy, w, dx)
    x = x.permute(0, 1, 4, 6, 2, 3, 5)  # (B, 3, dy, dx, F, h, w)
    return x.reshape(b, c * s * s, f, h // s, w // s)


def depth_to_space(y: torch.Tensor, s: int = DEMO_STRIDE) -> torch.Tensor:
    """Inverse of ``space_to_depth``: (B, 3·s·s, F, h, w) -> (B, 3, F, h·s, w·s)."""
    b, cs, f, h, w = y.shape
    c = cs // (s * s)
    y = y.reshape(b, c, s, s, f, h, w).permute(0, 1, 4, 5, 2, 6, 3)  # (B, 3, F, h, dy, w, dx)
    return y.reshape(b, c, f, h * s, w * s)


def group_mean_and_residuals(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Later frames S(x_1..x_4L) (B, 48, 4L, h, w) -> means m (B, 48, L, h, w), residuals r (B, 192, L, h, w).

    The mean is summed pairwise so that four equal frames give m equal to them bit for bit (static video property).
    Residual index = t·48 + channel for t in 0..3 within the group.
    """
    b, c, f, h, w = s.shape
    g = s.reshape(b, c, f // 4, 4, h, w)  # (B, 48, L, 4, h, w)
    m = ((g[:, :, :, 0] + g[:, :, :, 1]) + (g[:, :, :, 2] + g[:, :, :, 3])) * 0.25  # (B, 48, L, h, w)
    r = (g - m.unsqueeze(3)).permute(0, 3, 1, 2, 4, 5)  # (B, 4, 48, L, h, w)
    return m, r.reshape(b, 4 * c, f // 4, h, w)


class DemoVAE(VideoVAE):
    """Causal linear video autoencoder: z_0 = [S(x_0); 0_K], z_l = [mean_t S(x_t); U^T r] for each 4-frame group.

    Buffers: ``basis`` U (192, K) with orthonormal columns, ``shift`` and ``scale`` (C,) the per-channel
    normalisation z = (raw - shift) / scale (coefficient channels have shift 0, so zero motion stays exactly 0).
    """

    kind = "demo"

    def __init__(self, basis: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor):
        super().__init__()
        k = basis.shape[1]
        if basis.ndim != 2 or basis.shape[0] != DEMO_RESIDUAL_DIM or not 0 <= k <= DEMO_RESIDUAL_DIM:
            raise ValueError(f"basis must be ({DEMO_RESIDUAL_DIM}, K) with 0 <= K <= 192, got {tuple(basis.shape)}")
        c = DEMO_MEAN_CHANNELS + k
        if shift.shape != (c,) or scale.shape != (c,):
            raise ValueError(f"shift/scale must be ({c},), got {tuple(shift.shape)}/{tuple(scale.shape)}")
        self.components = k
        self.latent_channels = c
        self.spatial_stride = DEMO_STRIDE
        self.temporal_stride = DEMO_STRIDE
        self.register_buffer("basis", basis.float().contiguous())
        self.register_buffer("shift", shift.float().view(1, c, 1, 1, 1))  # (1, C, 1, 1, 1)
        self.register_buffer("scale", scale.float().view(1, c, 1, 1, 1))
        self._freeze()

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        s = space_to_depth(x.float())  # (B, 48, F, h, w)
        b, _, f, h, w = s.shape
        z0 = torch.cat([s[:, :, :1], s.new_zeros(b, self.components, 1, h, w)], 1)  # (B, C, 1, h, w)
        if f == 1:
            raw = z0
        else:
            m, r = group_mean_and_residuals(s[:, :, 1:])  # (B, 48, L, h, w), (B, 192, L, h, w)
            coef = torch.einsum("dk,bdlhw->bklhw", self.basis, r)  # (B, K, L, h, w)
            raw = torch.cat([z0, torch.cat([m, coef], 1)], 2)  # (B, C, L+1, h, w)
        return (raw - self.shift) / self.scale

    def _decode(self, z: torch.Tensor) -> torch.Tensor:
        raw = z.float() * self.scale + self.shift  # (B, C, L+1, h, w)
        m, coef = raw[:, :DEMO_MEAN_CHANNELS], raw[:, DEMO_MEAN_CHANNELS:]
        b, c, l1, h, w = m.shape
        frames = [m[:, :, :1]]  # first frame: its mean channels alone
        if l1 > 1:
            r = torch.einsum("dk,bklhw->bdlhw", self.basis, coef[:, :, 1:])  # (B, 192, L, h, w)
            r = r.reshape(b, 4, c, l1 - 1, h, w).permute(0, 2, 3, 1, 4, 5)  # (B, 48, L, 4, h, w)
            later = m[:, :, 1:].unsqueeze(3) + r
            frames.append(later.reshape(b, c, 4 * (l1 - 1), h, w))  # (B, 48, 4L, h, w)
        return depth_to_space(torch.cat(frames, 2))

    # -- save / load --------------------------------------------------------------------------------------------------
    def save(self, out: str | Path, info: dict | None = None) -> None:
        """OUT/config.json (kind, K, strides, channels, ``info``) + OUT/vae.safetensors (basis, shift, scale)."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        tensors = {"basis": self.basis.cpu().contiguous(), "shift": self.shift.flatten().cpu().contiguous(),
                   "scale": self.scale.flatten().cpu().contiguous()}
        atomic_write(out / "vae.safetensors", lambda p: save_file(tensors, str(p)))
        cfg = {"kind": "demo", "version": DEMO_FORMAT_VERSION, "components": self.components,
               "latent_channels": self.latent_channels, "spatial_stride": self.spatial_stride,
               "temporal_stride": self.temporal_stride, **(info or {})}
        atomic_write_json(out / "config.json", cfg)

    @classmethod
    def load(cls, path: str | Path) -> "DemoVAE":
        path = Path(path)
        cfg = read_vae_config(path)
        if cfg.get("kind") != "demo":
            raise ConfigError(f"model.vae.kind: {path / 'config.json'} describes kind {cfg.get('kind')!r}; "
                              f"expected 'demo' (a folder written by `simforcing model fit-vae`)")
        try:
            t = load_file(str(path / "vae.safetensors"))
            vae = cls(t["basis"], t["shift"], t["scale"])
        except (SafetensorError, OSError, KeyError, ValueError) as e:
            raise ConfigError(f"model.vae.path: cannot read {path / 'vae.safetensors'} ({type(e).__name__}: {e}); "
                              f"expected tensors basis (192, K), shift (C,), scale (C,)") from e
        if vae.components != cfg.get("components"):
            raise ConfigError(f"model.vae.path: {path} holds K = {vae.components} components but config.json "
                              f"says {cfg.get('components')}")
        return vae


def read_vae_config(path: Path) -> dict:
    p = path / "config.json"
    if not p.is_file():
        raise ConfigError(f"model.vae.path: {p} is missing; expected a VAE folder (diffusers AutoencoderKLWan or "
                          f"the output of `simforcing model fit-vae`)")
    try:
        return json.loads(p.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"model.vae.path: cannot read {p} ({e})") from e


# ----------------------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------------------


def load_vae(cfg: Config, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> VideoVAE:
    """The frozen VAE of ``cfg.model.vae`` on ``device``; checks channels and strides against the config.

    ``dtype`` applies to the Wan VAE's weights (the demo VAE always computes in float32).
    """
    v = cfg.model.vae
    if v.path is None:
        hint = ("fit one with `simforcing model fit-vae --data DIR --out VAE_DIR` and pass --model.vae.path=VAE_DIR"
                if v.kind == "demo" else "expected a local diffusers folder of the Wan2.2 VAE (AutoencoderKLWan)")
        raise ConfigError(f"model.vae.path: not set; {hint}")
    path = Path(v.path)
    if not path.is_dir():
        raise ConfigError(f"model.vae.path: {path} is not a folder; expected a VAE folder with config.json")
    if v.kind == "demo":
        vae: VideoVAE = DemoVAE.load(path)
    elif v.kind == "wan":
        if read_vae_config(path).get("kind") == "demo":
            raise ConfigError(f"model.vae.kind: {path} holds a demo VAE; set --model.vae.kind=demo")
        vae = WanVAE.from_pretrained(path, dtype)
    else:
        raise ConfigError(f"model.vae.kind: got {v.kind!r}; expected 'wan' or 'demo'")
    for name in ("latent_channels", "spatial_stride", "temporal_stride"):
        if getattr(vae, name) != getattr(v, name):
            raise ConfigError(f"model.vae.{name}: the config says {getattr(v, name)} but the VAE at {path} has "
                              f"{getattr(vae, name)}; set --model.vae.{name}={getattr(vae, name)}")
    return vae.to(device)
