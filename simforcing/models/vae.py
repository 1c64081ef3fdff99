"""The frozen video VAE: Wan2.2's (diffusers ``AutoencoderKLWan``) and the small demo VAE, behind one interface.

    vae = load_vae(cfg, device)          # cfg.model.vae.kind: "wan" | "demo", cfg.model.vae.path: a local folder
    z = vae.encode(x)                    # x (B, 3, F, H, W) in [-1, 1], F = 1 + 4L -> z (B, C, L+1, H/s, W/s)
    x_hat = vae.decode(z)                # (B, 3, F, H, W) clamped to [-1, 1]

Latents are normalised per channel. ``z[:, :, :1]`` encodes the first frame alone (causal), so F = 1 works.

The demo VAE is a causal *linear* autoencoder fitted in closed form (``fit_demo_vae``, command
``simforcing model fit-vae``): space-to-depth S by 4 (a frame (3, H, W) -> (48, H/4, W/4)); the first frame is
z_0 = [S(x_0); 0_K]; each later group of 4 frames keeps its mean m = mean_t S(x_t) and the first K principal
components of the stacked residuals S(x_t) - m (4·48 = 192 numbers per spatial cell): z_l = [m; U^T r].
The 48 mean channels of z_0 and z_l share one normalisation, so a static video encodes to z_l == z_0 exactly.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from simforcing.config import Config, ConfigError

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
        from safetensors.torch import save_file

        from simforcing.utils import atomic_write, atomic_write_json

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
        from safetensors import SafetensorError
        from safetensors.torch import load_file

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


# ----------------------------------------------------------------------------------------------------------------------
# Fitting the demo VAE
# ----------------------------------------------------------------------------------------------------------------------


def _to_video(frames: np.ndarray) -> torch.Tensor:
    """uint8 (N, F, H, W, 3) -> float32 (N, 3, F, H, W) in [-1, 1]."""
    return torch.from_numpy(frames).permute(0, 4, 1, 2, 3).float() / 127.5 - 1.0


def psnr_video(x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Per-video PSNR (dB) of (B, 3, F, H, W) videos in [-1, 1], pixel range taken as [0, 1] (capped at 100 dB)."""
    mse = ((x_hat - x) / 2).pow(2).flatten(1).mean(1).clamp_min(1e-10)
    return -10.0 * torch.log10(mse)


class _WindowReader:
    """Draws windows (episode, domain, start) of a dataset and reads their frames, one decode per episode."""

    def __init__(self, root: str | Path, cfg: Config, splits: tuple[str, ...]):
        from simforcing.data.format import DataError, read_episodes, read_info, read_splits

        self.root, self.cfg = Path(root), cfg
        self.info = read_info(root)
        h, w = self.info.get("height"), self.info.get("width")
        if (h, w) != (cfg.data.height, cfg.data.width):
            raise DataError(f"dataset frames are {h}×{w} (fields height/width) but data.height×data.width is "
                            f"{cfg.data.height}×{cfg.data.width}; the demo VAE fit does not resize — use a dataset "
                            f"at that size or override --data.height/--data.width", path=self.root / "meta/info.json",
                            kind="bad_resolution")
        episodes, split_ids = read_episodes(root), read_splits(root)
        self.episodes = [episodes[i] for s in splits for i in split_ids[s] if i in episodes]
        self.steps = cfg.data.window_steps

    def windows(self, rng: np.random.Generator | None, max_windows: int,
                per_video: int = 8) -> list[tuple[int, str, int]]:
        """Up to ``max_windows`` windows (episode index, "sim" | "real", start), at most half of them real (when
        there are enough), a few per video so that few videos are decoded: drawn with ``rng``, or evenly spaced
        when ``rng`` is None."""
        videos: dict[str, list[tuple[int, int]]] = {"real": [], "sim": []}  # (episode index, number of starts)
        for i, ep in enumerate(self.episodes):
            n = ep.length - self.steps + 1
            if n > 0:
                videos["sim"].append((i, n))
                if ep.has_real:
                    videos["real"].append((i, n))
        budget_real = min(max_windows // 2, sum(n for _, n in videos["real"]))
        out = []
        for dom, budget in (("real", budget_real), ("sim", max_windows - budget_real)):
            vids = videos[dom]
            if not vids:
                continue
            each = max(per_video, -(-budget // len(vids)))
            order = rng.permutation(len(vids)) if rng is not None else range(len(vids))
            for j in order:
                if budget <= 0:
                    break
                i, n = vids[j]
                k = min(n, each, budget)
                starts = np.sort(rng.choice(n, k, replace=False)) if rng is not None else \
                    np.unique(np.linspace(0, n - 1, k).round().astype(int))
                out += [(i, dom, int(t)) for t in starts]
                budget -= len(starts)
        return out

    def read(self, windows: list[tuple[int, str, int]]):
        """Yields (domain, uint8 (n, F, H, W, 3)) batches, one per (episode, domain)."""
        from simforcing.data.format import DataError, read_episode_videos

        stride, f = self.cfg.data.frame_stride, self.cfg.data.frames
        by_ep: dict[int, list[tuple[str, int]]] = {}
        for i, dom, s in windows:
            by_ep.setdefault(i, []).append((dom, s))
        for i, items in by_ep.items():
            ep = self.episodes[i]
            sim, real = read_episode_videos(self.root, self.info, ep)
            for dom in ("sim", "real"):
                video = sim if dom == "sim" else real
                starts = [s for d, s in items if d == dom]
                if not starts:
                    continue
                if video.shape[1:3] != (self.cfg.data.height, self.cfg.data.width):
                    raise DataError(f"{dom} video is {video.shape[1]}×{video.shape[2]}; expected "
                                    f"{self.cfg.data.height}×{self.cfg.data.width} (meta/info.json)", ep.episode_id,
                                    kind="bad_resolution")
                if video.shape[0] < max(starts) + self.steps:
                    raise DataError(f"{dom} video has {video.shape[0]} frames; episodes.jsonl says length "
                                    f"{ep.length}", ep.episode_id, kind="bad_length")
                idx = np.asarray(starts)[:, None] + stride * np.arange(f)[None]  # (n, F)
                yield dom, video[idx]


def fit_demo_vae(root: str | Path, cfg: Config, max_windows: int = 2000, seed: int = 0,
                 components: int | None = None, out_dir: str | Path | None = None,
                 val_windows: int = 256) -> tuple[DemoVAE, dict]:
    """Fit the demo VAE on the sim and real frames of the train + sim_pool episodes of ``root``.

    K = ``components`` (default ``cfg.model.vae.latent_channels - 48``). Returns the VAE and a report with the
    reconstruction PSNR of val windows (future frames, the ceiling of every metric) per domain, and per K; saves
    both to ``out_dir`` (config.json + vae.safetensors) when given.
    """
    t0 = time.time()
    k = cfg.model.vae.latent_channels - DEMO_MEAN_CHANNELS if components is None else int(components)
    if not 0 <= k <= DEMO_RANK:
        raise ConfigError(f"model.vae.latent_channels: the demo VAE has 48 + K channels with 0 <= K <= {DEMO_RANK} "
                          f"(4 residuals around their mean span 3·48 dimensions); got K = {k}")
    reader = _WindowReader(root, cfg, ("train", "sim_pool"))
    windows = reader.windows(np.random.default_rng(seed), max_windows)
    if not windows:
        raise ConfigError(f"data.frames: no train/sim_pool episode of {root} is long enough for a window of "
                          f"{reader.steps} steps")
    second = torch.zeros(DEMO_RESIDUAL_DIM, DEMO_RESIDUAL_DIM, dtype=torch.float64)  # sum of r r^T
    n_res = 0
    colour_sum = torch.zeros(3, dtype=torch.float64)  # sum and sum of squares of the mean channels, per colour
    colour_sq = torch.zeros(3, dtype=torch.float64)
    n_mean = 0
    for _, frames in reader.read(windows):
        s = space_to_depth(_to_video(frames))  # (n, 48, F, h, w)
        m, r = group_mean_and_residuals(s[:, :, 1:])  # (n, 48, L, h, w), (n, 192, L, h, w)
        r = r.transpose(0, 1).reshape(DEMO_RESIDUAL_DIM, -1)  # (192, N)
        second += (r @ r.T).double()
        n_res += r.shape[1]
        means = torch.cat([s[:, :, :1], m], 2)  # (n, 48, L+1, h, w): the latent mean channels
        per_colour = means.transpose(0, 1).reshape(3, -1)  # (3, N): channel = colour·16 + dy·4 + dx
        colour_sum += per_colour.sum(1, dtype=torch.float64)
        colour_sq += per_colour.pow(2).sum(1, dtype=torch.float64)
        n_mean += per_colour.shape[1]
    eigval, eigvec = torch.linalg.eigh(second / n_res)  # ascending
    eigval, eigvec = eigval.flip(0).clamp_min(0), eigvec.flip(1)  # (192,), (192, 192) by decreasing variance
    sign = torch.sign(eigvec.gather(0, eigvec.abs().argmax(0, keepdim=True)))  # largest entry positive
    eigvec = eigvec * sign
    mu = colour_sum / n_mean
    sigma = (colour_sq / n_mean - mu.pow(2)).clamp_min(1e-8).sqrt()
    coef_scale = eigval.sqrt().clamp_min(1e-3)  # unit second moment per component; floor for null directions

    def build(kk: int) -> DemoVAE:
        shift = torch.cat([mu.repeat_interleave(16), torch.zeros(kk, dtype=torch.float64)])
        scale = torch.cat([sigma.repeat_interleave(16), coef_scale[:kk]])
        return DemoVAE(eigvec[:, :kk].float(), shift.float(), scale.float())

    vae = build(k)
    fit_s = time.time() - t0
    ks = sorted({0, 8, 16, 32, 64, DEMO_RANK, k})
    psnr = evaluate_demo_vae(root, cfg, build(DEMO_RESIDUAL_DIM), ks, val_windows)
    report = {
        "fitted_on": {"data": str(Path(root).resolve()), "splits": ["train", "sim_pool"], "windows": len(windows),
                      "residual_vectors": n_res, "frames": cfg.data.frames, "frame_stride": cfg.data.frame_stride,
                      "height": cfg.data.height, "width": cfg.data.width, "seed": seed},
        "psnr_val": psnr.get(k, {}),
        "psnr_val_by_components": {str(kk): v for kk, v in psnr.items()},
        "explained_variance": float(eigval[:k].sum() / eigval.sum().clamp_min(1e-12)),
        "fit_seconds": round(fit_s, 2),
    }
    if out_dir is not None:
        vae.save(out_dir, report)
    return vae, report


def read_demo_vae_report(path: str | Path) -> dict:
    """The fit report saved beside a demo VAE (its config.json: K, channels, psnr_val, fitted_on, ...)."""
    return read_vae_config(Path(path))


@torch.no_grad()
def evaluate_demo_vae(root: str | Path, cfg: Config, vae: DemoVAE, components: list[int],
                      max_windows: int = 256) -> dict[int, dict[str, float]]:
    """Mean reconstruction PSNR of the future frames of evenly spaced val windows using the first K components of
    ``vae``, for each K in ``components``: {K: {"sim": dB, "real": dB}}.

    Zeroing the latent channels of components k >= K (their shift is 0) and decoding equals the K-component VAE.
    """
    reader = _WindowReader(root, cfg, ("val",))
    windows = reader.windows(None, max_windows)
    scores: dict[int, dict[str, list[float]]] = {k: {"sim": [], "real": []} for k in components}
    for dom, frames in reader.read(windows):
        x = _to_video(frames)  # (n, 3, F, H, W)
        z = vae.encode(x)  # (n, 48 + K_max, L+1, h, w)
        for k in components:
            z_k = z.clone()
            z_k[:, DEMO_MEAN_CHANNELS + k:] = 0
            scores[k][dom] += psnr_video(vae.decode(z_k)[:, :, 1:], x[:, :, 1:]).tolist()
    return {k: {d: round(float(np.mean(v)), 3) for d, v in s.items() if v} for k, s in scores.items()}


# ----------------------------------------------------------------------------------------------------------------------
# Command: simforcing model fit-vae
# ----------------------------------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from simforcing.cli import add_config_args

    parser.add_argument("--data", required=True, help="dataset folder (train + sim_pool frames are used)")
    parser.add_argument("--out", required=True, help="output folder: config.json + vae.safetensors")
    parser.add_argument("--components", type=int, default=None,
                        help="K principal components per 4-frame group (default: model.vae.latent_channels - 48)")
    parser.add_argument("--max-windows", type=int, default=2000, help="windows drawn for the fit")
    parser.add_argument("--seed", type=int, default=0)
    add_config_args(parser)


def run(args: argparse.Namespace) -> int:
    from simforcing.cli import config_from_args, dry_run
    from simforcing.data.format import DataError

    cfg = config_from_args(args)
    if args.dry_run:
        return dry_run(cfg)
    try:
        vae, report = fit_demo_vae(args.data, cfg, args.max_windows, args.seed, args.components, args.out)
    except DataError as e:
        print(f"simforcing model fit-vae: data error: {e}", file=sys.stderr)
        return 1
    p = report["psnr_val"]
    print(f"demo VAE: K = {vae.components}, C = {vae.latent_channels} channels, fitted on "
          f"{report['fitted_on']['windows']} windows in {report['fit_seconds']} s -> {args.out}")
    print(f"reconstruction PSNR (val, future frames; the ceiling of every metric): sim {p.get('sim', 'n/a')} dB, "
          f"real {p.get('real', 'n/a')} dB")
    if vae.latent_channels != cfg.model.vae.latent_channels:
        print(f"note: use it with --model.vae.path={args.out} --model.vae.latent_channels={vae.latent_channels}")
    return 0
