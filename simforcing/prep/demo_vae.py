"""Fitting the demo VAE (`simforcing model fit-vae`): the causal linear video autoencoder of
``simforcing.models.vae.DemoVAE`` fitted in closed form on a dataset's frames.

    vae, report = fit_demo_vae(DATA, cfg, max_windows=2000, seed=0, components=None, out_dir=VAE_DIR)

Windows (train + sim_pool, sim and real frames, at most half real) are read at the dataset's own resolution (no
resize). The residuals of each 4-frame group around its mean give the PCA basis (eigenvectors of their second-moment
matrix, by decreasing variance, sign fixed so the largest entry is positive); the mean channels are normalised per
colour, the coefficients to unit second moment. The report holds the reconstruction PSNR (one pooled MSE per video,
``evaluate.metrics.psnr_video``) of evenly spaced val windows per domain and per number of components K — the ceiling
of every metric a model in this latent space can reach.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import numpy as np
import torch

from simforcing.config import Config, ConfigError
from simforcing.data.format import DataError, read_episode_videos, read_episodes, read_info, read_splits, read_views
from simforcing.data.paired import to_unit_range
from simforcing.evaluate.metrics import psnr_video
from simforcing.models.vae import (DEMO_MEAN_CHANNELS, DEMO_RANK, DEMO_RESIDUAL_DIM, DemoVAE,
                                   group_mean_and_residuals, read_vae_config, space_to_depth)


def _to_video(frames: np.ndarray) -> torch.Tensor:
    """uint8 (N, F, H, W, 3) -> float32 (N, 3, F, H, W) in [-1, 1]."""
    return to_unit_range(torch.from_numpy(frames).permute(0, 4, 1, 2, 3))


class _WindowReader:
    """Draws windows (episode, domain, start) of a dataset and reads their frames, one decode per episode."""

    def __init__(self, root: str | Path, cfg: Config, splits: tuple[str, ...]):
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
        self.views = read_views(cfg.data.view_names, self.info, root)  # a multi-view model's VAE sees every view

    def windows(self, rng: np.random.Generator | None, max_windows: int,
                per_video: int = 8) -> list[tuple[int, str, int]]:
        """Up to ``max_windows`` windows (episode index, "sim" | "real", start), at most half of them real (when
        there are enough), a few per video so that few videos are decoded: drawn with ``rng``, or evenly spaced
        when ``rng`` is None. With several views the windows are the same and :meth:`read` takes window j of an
        episode from view j mod V."""
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
        stride, f = self.cfg.data.frame_stride, self.cfg.data.frames
        by_ep: dict[int, list[tuple[str, int]]] = {}
        for i, dom, s in windows:
            by_ep.setdefault(i, []).append((dom, s))
        for i, items in by_ep.items():
            ep = self.episodes[i]
            videos = [read_episode_videos(self.root, self.info, ep, view) for view in self.views]
            for dom, (v, view_videos) in itertools.product(("sim", "real"), enumerate(videos)):
                video = view_videos[0] if dom == "sim" else view_videos[1]
                starts = [s for j, s in enumerate(s for d, s in items if d == dom) if j % len(videos) == v]
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


NORMALIZATIONS = ("pixel", "channel")


def _window_statistics(reader: "_WindowReader", windows: list) -> tuple:
    """One pass over the windows: the residuals' principal directions (eigenvalues and eigenvectors by decreasing
    variance), the number of residual vectors, and the per-colour mean and spread of the mean channels."""
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
    mu = colour_sum / n_mean
    sigma = (colour_sq / n_mean - mu.pow(2)).clamp_min(1e-8).sqrt()
    return eigval, eigvec, n_res, mu, sigma


def fit_demo_vae(root: str | Path, cfg: Config, max_windows: int = 2000, seed: int = 0,
                 components: int | None = None, out_dir: str | Path | None = None,
                 val_windows: int = 256, normalization: str = "pixel") -> tuple[DemoVAE, dict]:
    """Fit the demo VAE on the sim and real frames of the train + sim_pool episodes of ``root``.

    K = ``components`` (default ``cfg.model.vae.latent_channels - 48``). Returns the VAE and a report with the
    reconstruction PSNR of val windows (future frames, the ceiling of every metric) per domain, and per K; saves
    both to ``out_dir`` (config.json + vae.safetensors) when given.

    ``normalization`` sets the latent scale z = (raw − shift) / scale:
    - "pixel" (default): one scale σ for every mean channel (their pooled std) and 2σ for every coefficient, so a
      squared error in the latent is the same squared error in pixels, up to one constant (a mean channel is shared
      by the 4 frames of its group, a coefficient is an orthonormal direction of the group's residuals). The flow
      loss is then a pixel loss: a high-order component of little pixel energy weighs as little as it shows.
    - "channel": every channel at unit variance (each PCA coefficient by its own spread) — the loss then weighs
      the 16th component, ~1/50 of the first mean channel's pixel energy, like the first (kept to reproduce older
      demo runs).
    """
    if normalization not in NORMALIZATIONS:
        raise ConfigError(f"normalization: got {normalization!r}; expected one of {', '.join(NORMALIZATIONS)}")
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
    eigval, eigvec, n_res, mu, sigma = _window_statistics(reader, windows)
    sign = torch.sign(eigvec.gather(0, eigvec.abs().argmax(0, keepdim=True)))  # largest entry positive
    eigvec = eigvec * sign
    coef_scale = eigval.sqrt().clamp_min(1e-3)  # unit second moment per component; floor for null directions

    pooled = sigma.pow(2).mean().sqrt()  # one spread for all mean channels

    def build(kk: int) -> DemoVAE:
        shift = torch.cat([mu.repeat_interleave(16), torch.zeros(kk, dtype=torch.float64)])
        if normalization == "pixel":
            scale = torch.cat([pooled.repeat(DEMO_MEAN_CHANNELS), (2 * pooled).repeat(kk)])
        else:
            scale = torch.cat([sigma.repeat_interleave(16), coef_scale[:kk]])
        return DemoVAE(eigvec[:, :kk].float(), shift.float(), scale.float())

    vae = build(k)
    fit_s = time.time() - t0
    ks = sorted({0, 8, 16, 32, 64, DEMO_RANK, k})
    psnr = evaluate_demo_vae(root, cfg, build(DEMO_RESIDUAL_DIM), ks, val_windows)
    report = {
        "fitted_on": {"data": str(Path(root).resolve()), "splits": ["train", "sim_pool"], "windows": len(windows),
                      "residual_vectors": n_res, "frames": cfg.data.frames, "frame_stride": cfg.data.frame_stride,
                      "height": cfg.data.height, "width": cfg.data.width, "seed": seed,
                      **({"views": list(reader.views)} if cfg.data.view_names else {})},
        "psnr_val": psnr.get(k, {}),
        "psnr_val_by_components": {str(kk): v for kk, v in psnr.items()},
        "explained_variance": float(eigval[:k].sum() / eigval.sum().clamp_min(1e-12)),
        "fit_seconds": round(fit_s, 2),
        "normalization": normalization,
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
