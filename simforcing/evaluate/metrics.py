"""Video metrics: PSNR, SSIM, arm-region PSNR, LPIPS, FID, FVD.

Metric protocol
---------------
- Inputs: predicted and recorded (ground-truth) videos, float (B, 3, F, H, W) in [-1, 1], RGB; optional real-frame
  arm masks, bool (B, F, H, W).
- Frames compared: 1 .. F−1 — the given first frame is excluded — unless ``eval.include_first_frame`` is set.
- Values are clamped to [-1, 1] and mapped to [0, 1] (``x ↦ (x + 1)/2``, data range 1.0), no quantisation to uint8.
- PSNR, SSIM and LPIPS run at the dataset resolution (no resizing); FID and FVD resize inside their feature networks
  as those require (Inception 299×299 bilinear, I3D 224×224 inside the detector).
- PSNR: per frame ``10·log10(1 / MSE)`` (MSE over the 3 channels and all pixels; :func:`psnr_from_mse`, the
  one PSNR formula, also behind the per-video :func:`psnr_video` of the demo VAE's report), then averaged over the
  compared frames of a sample (not one pooled MSE per video); the dataset value is the mean over samples. An exact frame
  (MSE = 0) is capped at 100 dB (MSE floor 1e-10).
- SSIM: 11×11 Gaussian window, σ = 1.5, K1 = 0.01, K2 = 0.03, population (co)variances, per RGB channel and averaged
  over channels; per frame, then averaged over frames and samples. The SSIM map is averaged over the interior only
  (5-pixel border cropped), which equals scikit-image's ``structural_similarity(gaussian_weights=True, sigma=1.5,
  use_sample_covariance=False, data_range=1.0)``; torchmetrics' own mean would include the border pixels computed on
  reflect-padded input, so its full map is cropped here before averaging.
- Arm-region PSNR: for compared frame t the region is (arm mask at frame 0) ∪ (arm mask at frame t); the MSE runs
  over those pixels and all 3 channels; frames whose region is empty are skipped; a sample without any arm pixel has
  no value; the dataset value is the mean over samples that have one.
- LPIPS: v0.1 with the AlexNet trunk (lpips package weights), on each compared frame in [-1, 1], averaged per sample
  and over samples.
- FID: Inception-v3 pool3 features (2048-d, the TF FID network of pytorch-fid) of every compared frame of every
  sample, real vs. predicted, through torchmetrics' ``FrechetInceptionDistance`` with that network as the feature
  extractor.
- FVD: the Kinetics-400 I3D of StyleGAN-V (TorchScript), 400-d features of each sample's compared clip, real vs.
  predicted.
- Fréchet distance: ``‖μ₁ − μ₂‖² + Tr(Σ₁ + Σ₂ − 2(Σ₁Σ₂)^½)`` with unbiased covariances (N − 1). With fewer samples
  than feature dimensions (FID: 2048, FVD: 400) the covariances are singular; the value is still computed (see
  :func:`frechet_distance`) and the sample counts are reported (``fid_num_images``, ``fvd_num_videos``). Small-N
  FID/FVD are biased upwards and are comparable only between runs with the same N.
- A metric whose weights are not configured or not found is reported as ``None`` with a ``<metric>_reason``; no
  value is ever substituted.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import Tensor

from simforcing.evaluate.networks import LPIPS, load_fid_inception, load_i3d, load_lpips

PSNR_MSE_FLOOR = 1e-10  # caps PSNR of an exact frame at 100 dB
SSIM_KERNEL, SSIM_SIGMA = 11, 1.5
CHUNK = 32  # frames (or clips) per feature-network forward


@dataclass(frozen=True)
class MetricProtocol:
    """Which frames are compared and how values are mapped (see the module docstring)."""

    include_first_frame: bool = False

    def frames(self, video: Tensor) -> Tensor:
        """video (B, 3, F, H, W) in [-1, 1] -> compared frames (B, F', 3, H, W) in [0, 1], float64."""
        start = 0 if self.include_first_frame else 1
        if video.shape[2] <= start:
            raise ValueError(f"metrics: videos have F = {video.shape[2]} frames; with include_first_frame="
                             f"{self.include_first_frame} at least {start + 1} are needed")
        x = video[:, :, start:].clamp(-1, 1).double().add(1).div(2)
        return x.permute(0, 2, 1, 3, 4)  # (B, 3, F', H, W) -> (B, F', 3, H, W)

    def frame_indices(self, num_frames: int) -> range:
        return range(0 if self.include_first_frame else 1, num_frames)


def _check_pair(pred: Tensor, gt: Tensor) -> None:
    if pred.dim() != 5 or pred.shape[1] != 3:
        raise ValueError(f"metrics: pred must be (B, 3, F, H, W) in [-1, 1], found {tuple(pred.shape)}")
    if gt.shape != pred.shape:
        raise ValueError(f"metrics: gt shape {tuple(gt.shape)} differs from pred shape {tuple(pred.shape)}")


def _check_masks(masks: Tensor, pred: Tensor) -> None:
    b, _, f, h, w = pred.shape
    if tuple(masks.shape) != (b, f, h, w):
        raise ValueError(f"metrics: masks must be bool (B, F, H, W) = {(b, f, h, w)}, found {tuple(masks.shape)}")


def psnr_from_mse(mse: Tensor) -> Tensor:
    """PSNR (dB) for a data range of 1: ``10·log10(1 / MSE)``, an exact match capped at 100 dB (MSE floor 1e-10).
    The one PSNR formula: per frame below, per video in :func:`psnr_video`."""
    return -10.0 * torch.log10(mse.clamp(min=PSNR_MSE_FLOOR))


def psnr_video(pred: Tensor, gt: Tensor) -> Tensor:
    """One PSNR per video from one MSE pooled over all its frames, pixels and channels -> (B,) in the inputs' dtype.

    Videos (B, 3, F, H, W) in [-1, 1], pixel range taken as [0, 1]; no frame is excluded and nothing is clamped
    (the demo VAE's reconstruction report; the evaluation protocol is :func:`psnr_per_sample`)."""
    return psnr_from_mse(((pred - gt) / 2).pow(2).flatten(1).mean(1))


def psnr_per_sample(pred: Tensor, gt: Tensor, protocol: MetricProtocol = MetricProtocol()) -> Tensor:
    """Per-frame PSNR (data range 1) averaged over the compared frames -> (B,) float64."""
    _check_pair(pred, gt)
    p, g = protocol.frames(pred), protocol.frames(gt)  # (B, F', 3, H, W)
    mse = (p - g).pow(2).mean(dim=(2, 3, 4))  # (B, F')
    return psnr_from_mse(mse).mean(dim=1)


def ssim_per_sample(pred: Tensor, gt: Tensor, protocol: MetricProtocol = MetricProtocol()) -> Tensor:
    """Per-frame SSIM (Gaussian 11×11, σ 1.5, RGB channel mean, 5-px border cropped) averaged over frames -> (B,)."""
    _check_pair(pred, gt)
    p, g = protocol.frames(pred), protocol.frames(gt)  # (B, F', 3, H, W)
    b, f, c, h, w = p.shape
    r = SSIM_KERNEL // 2
    if min(h, w) <= 2 * r:
        raise ValueError(f"SSIM: frames of {h}×{w} are too small for the {SSIM_KERNEL}×{SSIM_KERNEL} window")
    full = ssim_map(p.reshape(b * f, c, h, w), g.reshape(b * f, c, h, w))  # (B·F', 3, H − 10, W − 10): the interior
    return full.mean(dim=(1, 2, 3)).reshape(b, f).mean(dim=1)


def ssim_map(x: Tensor, y: Tensor, data_range: float = 1.0) -> Tensor:
    """The SSIM map of images (N, C, H, W) over the interior where the whole Gaussian window fits (11×11, σ 1.5,
    population statistics, K1 = 0.01, K2 = 0.03): (N, C, H − 10, W − 10), float64. scikit-image's
    ``structural_similarity(gaussian_weights=True, sigma=1.5, use_sample_covariance=False)`` averages this map."""
    x, y = x.double(), y.double()
    c = x.shape[1]
    t = torch.arange(SSIM_KERNEL, dtype=torch.float64, device=x.device) - SSIM_KERNEL // 2
    g = torch.exp(-t ** 2 / (2 * SSIM_SIGMA ** 2))
    g = g / g.sum()
    kh = g.view(1, 1, -1, 1).repeat(c, 1, 1, 1)  # separable: a column then a row
    kw = g.view(1, 1, 1, -1).repeat(c, 1, 1, 1)

    def blur(z: Tensor) -> Tensor:
        return torch.nn.functional.conv2d(torch.nn.functional.conv2d(z, kh, groups=c), kw, groups=c)

    mx, my = blur(x), blur(y)
    vx, vy, cov = blur(x * x) - mx * mx, blur(y * y) - my * my, blur(x * y) - mx * my
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    return ((2 * mx * my + c1) * (2 * cov + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2))


def masked_psnr_per_sample(pred: Tensor, gt: Tensor, masks: Tensor,
                           protocol: MetricProtocol = MetricProtocol()) -> Tensor:
    """PSNR over the arm region (mask_0 ∪ mask_t) of each compared frame, averaged over frames with a non-empty
    region -> (B,) float64, NaN for a sample without any arm pixel."""
    _check_pair(pred, gt)
    _check_masks(masks, pred)
    p, g = protocol.frames(pred), protocol.frames(gt)  # (B, F', 3, H, W)
    m = masks.bool().to(p.device)
    region = m[:, :1] | m[:, list(protocol.frame_indices(m.shape[1]))]  # (B, F', H, W)
    sq = (p - g).pow(2).sum(dim=2)  # (B, F', H, W), summed over channels
    count = region.sum(dim=(2, 3)).double() * 3  # (B, F') pixel-channel values in the region
    mse = (sq * region).sum(dim=(2, 3)) / count.clamp(min=1)
    valid = count > 0
    psnr = torch.where(valid, psnr_from_mse(mse), torch.zeros_like(mse))
    n = valid.sum(dim=1)
    return torch.where(n > 0, psnr.sum(dim=1) / n.clamp(min=1), torch.full_like(n, math.nan, dtype=psnr.dtype))


@torch.no_grad()
def lpips_per_sample(pred: Tensor, gt: Tensor, model: LPIPS, protocol: MetricProtocol = MetricProtocol()) -> Tensor:
    """LPIPS of each compared frame (inputs in [-1, 1]) averaged per sample -> (B,) float64."""
    _check_pair(pred, gt)
    p, g = protocol.frames(pred), protocol.frames(gt)  # (B, F', 3, H, W) in [0, 1]
    b, f = p.shape[:2]
    dev = next(model.parameters()).device
    p = p.reshape(b * f, *p.shape[2:]).float().mul(2).sub(1)  # (B·F', 3, H, W) in [-1, 1]
    g = g.reshape(b * f, *g.shape[2:]).float().mul(2).sub(1)
    d = torch.cat([model(p[i:i + CHUNK].to(dev), g[i:i + CHUNK].to(dev)) for i in range(0, b * f, CHUNK)])
    return d.double().reshape(b, f).mean(dim=1).cpu()


# ----------------------------------------------------------------------------------------------------------------------
# Fréchet distance
# ----------------------------------------------------------------------------------------------------------------------


def _psd_eigenvalues(w: Tensor) -> Tensor:
    """Eigenvalues of a PSD matrix with round-off removed: those below ``D·eps·max`` (the rank tolerance numpy's
    matrix_rank uses) are set to 0, so a singular covariance does not add sqrt(round-off) terms."""
    tol = w.shape[0] * torch.finfo(w.dtype).eps * w.abs().max().clamp(min=torch.finfo(w.dtype).tiny)
    return torch.where(w > tol, w, torch.zeros_like(w))


def _range_factor(s1: Tensor, rank: int | None) -> Tensor:
    """R (D, k) with R Rᵀ = Σ₁ (PSD). With ``rank`` < D (Σ₁ from N samples has rank <= N − 1) the range of Σ₁ is
    found exactly as span(Σ₁ Ω) for a Gaussian Ω (D, rank) — O(D²·rank) instead of a full eigendecomposition."""
    d = s1.shape[0]
    if rank is not None and rank < d:
        omega = torch.randn(d, max(rank, 1), generator=torch.Generator().manual_seed(0), dtype=s1.dtype)
        q, _ = torch.linalg.qr(s1 @ omega)  # (D, k) orthonormal basis of range(Σ₁)
        b = q.T @ s1 @ q  # (k, k): Σ₁ = Q B Qᵀ
        w, u = torch.linalg.eigh((b + b.T) / 2)
        v = q @ u
    else:
        w, v = torch.linalg.eigh(s1)
    w = _psd_eigenvalues(w)
    keep = w > 0
    return v[:, keep] * w[keep].sqrt()  # (D, k)


def _trace_sqrt_product(s1: Tensor, s2: Tensor, rank: int | None) -> Tensor:
    """Tr((Σ₁Σ₂)^½) = Tr((Σ₁^½ Σ₂ Σ₁^½)^½): the symmetric form has the same eigenvalues and stays real.

    With Σ₁ = R Rᵀ, R (D, k) over the k non-zero eigenvalues, the non-zero eigenvalues of Σ₁^½ Σ₂ Σ₁^½ are those of
    Rᵀ Σ₂ R (k, k) — exact, and cheap when few samples make Σ₁ low-rank.
    """
    r = _range_factor(s1, rank)
    m = r.T @ s2 @ r  # (k, k)
    return _psd_eigenvalues(torch.linalg.eigvalsh((m + m.T) / 2)).sqrt().sum()


def frechet_distance(mu1, sigma1, mu2, sigma2, eps: float = 1e-6, rank: int | None = None) -> float:
    """Fréchet distance between N(μ₁, Σ₁) and N(μ₂, Σ₂): ``‖μ₁ − μ₂‖² + Tr(Σ₁) + Tr(Σ₂) − 2·Tr((Σ₁Σ₂)^½)``.

    Accepts tensors or arrays, computed in float64. Singular covariances (fewer samples than dimensions) are fine:
    the square root is taken through symmetric eigendecompositions with round-off eigenvalues (below the rank
    tolerance) set to 0; should one not converge, ``eps·I`` is added to both covariances (pytorch-fid's fallback).
    ``rank``: an upper bound on rank(Σ₁) (N₁ − 1 for N₁ samples); below D it makes the computation O(D²·rank).
    """
    mu1, mu2 = (torch.as_tensor(np.asarray(x) if not isinstance(x, Tensor) else x).double().cpu() for x in (mu1, mu2))
    s1, s2 = (torch.as_tensor(np.asarray(x) if not isinstance(x, Tensor) else x).double().cpu()
              for x in (sigma1, sigma2))
    d = mu1.shape[0]
    if mu1.shape != (d,) or mu2.shape != (d,) or s1.shape != (d, d) or s2.shape != (d, d):
        raise ValueError(f"frechet_distance: expected mu (D,) and sigma (D, D) for both sets, found "
                         f"{tuple(mu1.shape)}, {tuple(s1.shape)}, {tuple(mu2.shape)}, {tuple(s2.shape)}")
    for name, t in (("mu1", mu1), ("sigma1", s1), ("mu2", mu2), ("sigma2", s2)):
        if not torch.isfinite(t).all():
            raise ValueError(f"frechet_distance: {name} has non-finite entries")
    try:
        tr_covmean = _trace_sqrt_product(s1, s2, rank)
    except torch.linalg.LinAlgError:
        offset = torch.eye(d, dtype=torch.float64) * eps
        tr_covmean = _trace_sqrt_product(s1 + offset, s2 + offset, None)
    diff = mu1 - mu2
    return float(diff @ diff + torch.trace(s1) + torch.trace(s2) - 2 * tr_covmean)


def feature_stats(feats: Tensor) -> tuple[Tensor, Tensor]:
    """feats (N, D) -> mean (D,), unbiased covariance (D, D), float64."""
    x = feats.double()
    mu = x.mean(dim=0)
    xc = x - mu
    return mu, xc.T @ xc / (x.shape[0] - 1)


# ----------------------------------------------------------------------------------------------------------------------
# Streaming accumulation
# ----------------------------------------------------------------------------------------------------------------------


class MetricAccumulator:
    """Accumulates all metrics over batches; keeps per-sample values and features, never videos.

        acc = MetricAccumulator(cfg, device)
        for pred, gt, masks in ...: acc.update(pred, gt, masks)   # (B, 3, F, H, W) in [-1, 1], masks (B, F, H, W)
        result = acc.compute()
    """

    def __init__(self, cfg, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.protocol = MetricProtocol(include_first_frame=cfg.eval.include_first_frame)
        self.per_sample: dict[str, list] = {"psnr": [], "ssim": [], "psnr_arm": [], "lpips": []}
        self.num_frames: int | None = None
        self.masks_seen = False
        self.lpips, self.lpips_reason = load_lpips(cfg.eval.lpips_weights, self.device)
        inception, self.fid_reason = load_fid_inception(cfg.eval.inception_weights, self.device)
        self.fid = None
        if inception is not None:
            # torchmetrics takes 2 s to import (all its domains): only when FID weights are configured
            from torchmetrics.image.fid import FrechetInceptionDistance

            self.fid = FrechetInceptionDistance(feature=inception, normalize=True).to(self.device)
        self.i3d, self.fvd_reason = load_i3d(cfg.eval.i3d_weights, self.device)
        self.i3d_feats: dict[str, list[Tensor]] = {"real": [], "fake": []}

    @torch.no_grad()
    def update(self, pred: Tensor, gt: Tensor, masks: Tensor | None = None) -> None:
        _check_pair(pred, gt)
        frames = len(self.protocol.frame_indices(pred.shape[2]))
        if self.num_frames is not None and frames != self.num_frames:
            raise ValueError(f"MetricAccumulator.update: {frames} compared frames per video, earlier batches had "
                             f"{self.num_frames}; every batch must have the same frame count")
        self.num_frames = frames
        pred, gt = pred.to(self.device), gt.to(self.device)
        self.per_sample["psnr"] += psnr_per_sample(pred, gt, self.protocol).tolist()
        self.per_sample["ssim"] += ssim_per_sample(pred, gt, self.protocol).tolist()
        if masks is not None:
            self.masks_seen = True
            arm = masked_psnr_per_sample(pred, gt, torch.as_tensor(masks, device=self.device), self.protocol).tolist()
            self.per_sample["psnr_arm"] += [None if math.isnan(v) else v for v in arm]
        else:
            self.per_sample["psnr_arm"] += [None] * pred.shape[0]
        self._update_lpips(pred, gt)
        self._update_fid(pred, gt)
        self._update_fvd(pred, gt)

    def _update_lpips(self, pred: Tensor, gt: Tensor) -> None:
        if self.lpips is None:
            return
        if min(pred.shape[-2:]) < LPIPS.MIN_SIZE:
            self.lpips, self.lpips_reason = None, (f"frames of {tuple(pred.shape[-2:])} are smaller than AlexNet's "
                                                   f"minimum {LPIPS.MIN_SIZE}×{LPIPS.MIN_SIZE}")
            return
        self.per_sample["lpips"] += lpips_per_sample(pred, gt, self.lpips, self.protocol).tolist()

    def _update_fid(self, pred: Tensor, gt: Tensor) -> None:
        if self.fid is None:
            return
        for video, real in ((gt, True), (pred, False)):
            x = self.protocol.frames(video).float()  # (B, F', 3, H, W) in [0, 1]
            x = x.reshape(-1, *x.shape[2:])  # (B·F', 3, H, W)
            for i in range(0, x.shape[0], CHUNK):
                self.fid.update(x[i:i + CHUNK], real=real)

    def _update_fvd(self, pred: Tensor, gt: Tensor) -> None:
        if self.i3d is None:
            return
        for video, key in ((gt, "real"), (pred, "fake")):
            clips = self.protocol.frames(video).float().mul(2).sub(1).permute(0, 2, 1, 3, 4)  # (B, 3, F', H, W)
            for i in range(0, clips.shape[0], max(1, CHUNK // 4)):
                chunk = clips[i:i + max(1, CHUNK // 4)].contiguous()
                try:
                    feats = self.i3d(chunk, rescale=False, resize=True, return_features=True)
                except (RuntimeError, torch.jit.Error) as e:  # TorchScript raises torch.jit.Error
                    lines = [s for s in str(e).splitlines() if s.strip()] or [type(e).__name__]
                    why = lines[-1] if isinstance(e, torch.jit.Error) else lines[0]  # TorchScript: cause is last
                    self.i3d, self.fvd_reason = None, (
                        f"the I3D detector failed on clips of shape {tuple(chunk.shape)} ({why.strip()}); "
                        "the Kinetics I3D needs about 10 or more frames per clip")
                    self.i3d_feats = {"real": [], "fake": []}
                    return
                self.i3d_feats[key].append(feats.detach().double().cpu())

    def _fid_value(self) -> tuple[float | None, str | None, int]:
        if self.fid is None:
            return None, self.fid_reason, 0
        n_real, n_fake = int(self.fid.real_features_num_samples), int(self.fid.fake_features_num_samples)
        if min(n_real, n_fake) < 2:
            return None, f"FID needs >= 2 frames per set, found {n_real} real and {n_fake} predicted", n_fake
        stats = []
        for prefix, n in (("real", n_real), ("fake", n_fake)):
            mu = getattr(self.fid, f"{prefix}_features_sum").double().cpu() / n
            cov_sum = getattr(self.fid, f"{prefix}_features_cov_sum").double().cpu()
            stats += [mu, (cov_sum - n * torch.outer(mu, mu)) / (n - 1)]
        return frechet_distance(*stats, rank=n_real - 1), None, n_fake

    def _fvd_value(self) -> tuple[float | None, str | None, int]:
        if self.i3d is None:
            return None, self.fvd_reason, 0
        real, fake = torch.cat(self.i3d_feats["real"]), torch.cat(self.i3d_feats["fake"])
        if min(len(real), len(fake)) < 2:
            return None, f"FVD needs >= 2 videos per set, found {len(real)}", len(fake)
        return frechet_distance(*feature_stats(real), *feature_stats(fake), rank=len(real) - 1), None, len(fake)

    def compute(self) -> dict:
        n = len(self.per_sample["psnr"])
        if n == 0:
            raise ValueError("MetricAccumulator.compute: no samples were added (call update first)")
        out: dict = {"psnr": float(np.mean(self.per_sample["psnr"])), "ssim": float(np.mean(self.per_sample["ssim"]))}
        arm = [v for v in self.per_sample["psnr_arm"] if v is not None]
        out["psnr_arm"] = float(np.mean(arm)) if arm else None
        if not arm:
            out["psnr_arm_reason"] = ("no arm masks were given (the dataset has none)" if not self.masks_seen
                                      else "the arm masks are empty in every compared frame")
        out["lpips"] = float(np.mean(self.per_sample["lpips"])) if self.lpips is not None else None
        if out["lpips"] is None:
            out["lpips_reason"] = self.lpips_reason
        out["fid"], why, out["fid_num_images"] = self._fid_value()
        if why:
            out["fid_reason"] = why
        out["fvd"], why, out["fvd_num_videos"] = self._fvd_value()
        if why:
            out["fvd_reason"] = why
        out["num_samples"] = n
        out["num_frames_compared"] = self.num_frames
        out["protocol"] = asdict(self.protocol)
        out["per_sample"] = {k: list(v) if (k != "lpips" or self.lpips is not None) else None
                             for k, v in self.per_sample.items()}
        return out


VIEW_METRICS = ("psnr", "ssim", "psnr_arm", "lpips")  # scored per camera of a multi-view model


class ViewMetrics:
    """The frame metrics per camera of a multi-view model (``data.views``): each view's part of every frame
    (``data.paired.split_views``) scored alone with the protocol of :class:`MetricAccumulator` — PSNR, SSIM, the arm
    PSNR in that view's own arm mask, LPIPS with the accumulator's network (None where it has none).

        views = ViewMetrics(("external", "wrist"), "width", acc)
        views.update(pred, gt, masks)     # (B, 3, F, H, V·W), masks (B, F, H, V·W)
        views.compute()                   # {"external": {"psnr": ..., ...}, "wrist": {...}}
    """

    def __init__(self, names: tuple[str, ...], layout: str, acc: "MetricAccumulator"):
        self.names, self.layout, self.protocol, self.lpips = tuple(names), layout, acc.protocol, acc.lpips
        self.per_sample: dict[str, dict[str, list]] = {v: {k: [] for k in VIEW_METRICS} for v in self.names}

    @torch.no_grad()
    def update(self, pred: Tensor, gt: Tensor, masks: Tensor | None = None) -> None:
        from simforcing.data.paired import split_views  # data/ below evaluate/ (its frame layout)

        n = len(self.names)
        parts = zip(self.names, split_views(pred, n, self.layout), split_views(gt, n, self.layout),
                    split_views(torch.as_tensor(masks), n, self.layout) if masks is not None else [None] * n)
        for name, p, g, m in parts:
            col = self.per_sample[name]
            col["psnr"] += psnr_per_sample(p, g, self.protocol).tolist()
            col["ssim"] += ssim_per_sample(p, g, self.protocol).tolist()
            arm = masked_psnr_per_sample(p, g, m.to(p.device), self.protocol).tolist() if m is not None else []
            col["psnr_arm"] += [None if math.isnan(v) else v for v in arm] or [None] * p.shape[0]
            col["lpips"] += (lpips_per_sample(p, g, self.lpips, self.protocol).tolist()
                             if self.lpips is not None and min(p.shape[-2:]) >= LPIPS.MIN_SIZE else [None] * p.shape[0])

    def compute(self) -> dict[str, dict[str, float | None]]:
        """Each view's mean of each metric over the samples that have it (None where none has)."""
        def mean(xs: list) -> float | None:
            vals = [x for x in xs if x is not None]
            return float(np.mean(vals)) if vals else None
        return {v: {k: mean(col[k]) for k in VIEW_METRICS} for v, col in self.per_sample.items()}


def compute_metrics(pred: Tensor, gt: Tensor, cfg, masks: Tensor | None = None) -> dict:
    """All metrics for one set of videos (B, 3, F, H, W) in [-1, 1]; see :meth:`MetricAccumulator.compute`."""
    acc = MetricAccumulator(cfg, pred.device)
    acc.update(pred, gt, masks)
    return acc.compute()
