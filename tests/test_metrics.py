"""Metrics against independent references (scikit-image, numpy, scipy) and the feature networks with random weights
saved by the tests under the official key names."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch
import torch.nn.functional as F
from skimage.metrics import peak_signal_noise_ratio, structural_similarity
from torch import Tensor, nn

from simforcing.config import load_config
from simforcing.evaluate.metrics import (MetricAccumulator, MetricProtocol, compute_metrics, feature_stats,
                                         frechet_distance, masked_psnr_per_sample, psnr_per_sample, ssim_per_sample)
from simforcing.evaluate.networks import FIDInceptionV3, WeightsError, load_lpips


def _videos(b=2, f=5, h=24, w=32, noise=0.15, seed=0) -> tuple[Tensor, Tensor]:
    """Smooth ground truth and a noisy prediction, (B, 3, F, H, W) in [-1, 1] (prediction may leave the range)."""
    g = torch.Generator().manual_seed(seed)
    gt = F.avg_pool3d(torch.rand(b, 3, f, h, w, generator=g) * 2 - 1, (1, 5, 5), stride=1, padding=(0, 2, 2)) * 2
    pred = gt + noise * torch.randn(gt.shape, generator=g)
    return pred.clamp(-1.2, 1.2), gt.clamp(-1, 1)


def _unit_np(x: Tensor) -> np.ndarray:
    """(B, 3, F, H, W) in [-1, 1] -> numpy (B, F, H, W, 3) in [0, 1] as the protocol maps values."""
    return ((x.clamp(-1, 1).double().numpy() + 1) / 2).transpose(0, 2, 3, 4, 1)


# ----------------------------------------------------------------------------------------------------------------------
# PSNR / SSIM / arm-region PSNR
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("include_first", [False, True])
def test_psnr_is_per_frame_average_matching_skimage(include_first):
    pred, gt = _videos()
    got = psnr_per_sample(pred, gt, MetricProtocol(include_first_frame=include_first))
    p, g = _unit_np(pred), _unit_np(gt)
    frames = range(0 if include_first else 1, pred.shape[2])
    ref = [np.mean([peak_signal_noise_ratio(g[b, t], p[b, t], data_range=1.0) for t in frames]) for b in range(2)]
    np.testing.assert_allclose(got.numpy(), ref, rtol=0, atol=1e-9)
    assert got.shape == (2,) and 10 < got.min() < 40


def test_psnr_of_exact_frames_is_capped_not_infinite():
    _, gt = _videos(b=1)
    assert psnr_per_sample(gt, gt).item() == pytest.approx(100.0)


def test_ssim_matches_skimage_gaussian_window():
    pred, gt = _videos(h=32, w=40)
    got = ssim_per_sample(pred, gt)
    p, g = _unit_np(pred), _unit_np(gt)
    ref = [np.mean([structural_similarity(g[b, t], p[b, t], gaussian_weights=True, sigma=1.5,
                                          use_sample_covariance=False, channel_axis=-1, data_range=1.0)
                    for t in range(1, pred.shape[2])]) for b in range(2)]
    np.testing.assert_allclose(got.numpy(), ref, atol=1e-6)
    assert 0.2 < got.min() < 0.99
    assert ssim_per_sample(gt, gt).numpy() == pytest.approx(1.0, abs=1e-9)


def test_masked_psnr_matches_numpy_reference():
    pred, gt = _videos(b=3, f=5)
    rng = np.random.default_rng(1)
    masks = np.zeros((3, 5, 24, 32), dtype=bool)
    masks[0] = rng.random((5, 24, 32)) > 0.7  # sample 0: random arm pixels in every frame
    masks[1, 2, 5:9, 3:10] = True  # sample 1: frame 0 empty, only frame 2 has an arm -> frames 1, 3, 4 skipped
    # sample 2: no arm pixels at all -> no value
    got = masked_psnr_per_sample(pred, gt, torch.from_numpy(masks))
    p, g = _unit_np(pred), _unit_np(gt)
    for b in range(2):
        vals = []
        for t in range(1, 5):
            region = masks[b, 0] | masks[b, t]
            if region.any():
                mse = ((p[b, t] - g[b, t]) ** 2)[region].mean()  # (n_pixels, 3) -> all channels
                vals.append(10 * np.log10(1.0 / mse))
        assert got[b].item() == pytest.approx(np.mean(vals), abs=1e-9)
    assert math.isnan(got[2].item())
    # the arm region is not the whole frame: the masked value differs from the plain PSNR
    assert abs(got[0].item() - psnr_per_sample(pred[:1], gt[:1]).item()) > 1e-3


def test_shape_errors_name_what_was_expected():
    pred, gt = _videos()
    with pytest.raises(ValueError, match="gt shape"):
        psnr_per_sample(pred, gt[:, :, :3])
    with pytest.raises(ValueError, match=r"masks must be bool \(B, F, H, W\)"):
        masked_psnr_per_sample(pred, gt, torch.zeros(2, 5, 24, dtype=torch.bool))


# ----------------------------------------------------------------------------------------------------------------------
# Fréchet distance
# ----------------------------------------------------------------------------------------------------------------------


def _scipy_frechet(mu1, s1, mu2, s2) -> float:
    covmean = scipy.linalg.sqrtm(s1 @ s2)
    return float(np.sum((mu1 - mu2) ** 2) + np.trace(s1) + np.trace(s2) - 2 * np.trace(np.real(covmean)))


def test_frechet_distance_matches_scipy_sqrtm():
    rng = np.random.default_rng(0)
    d = 24
    a = rng.normal(size=(400, d)) @ rng.normal(size=(d, d)) * 0.3
    b = rng.normal(size=(400, d)) @ rng.normal(size=(d, d)) * 0.3 + 0.5
    mu1, s1 = a.mean(0), np.cov(a, rowvar=False)
    mu2, s2 = b.mean(0), np.cov(b, rowvar=False)
    assert frechet_distance(mu1, s1, mu2, s2) == pytest.approx(_scipy_frechet(mu1, s1, mu2, s2), rel=1e-8)
    assert frechet_distance(mu1, s1, mu1, s1) == pytest.approx(0.0, abs=1e-8)
    # feature_stats is the unbiased estimate np.cov computes
    mu, s = feature_stats(torch.from_numpy(a))
    np.testing.assert_allclose(s.numpy(), s1, atol=1e-12)
    np.testing.assert_allclose(mu.numpy(), mu1, atol=1e-12)


def test_frechet_distance_with_singular_covariances():
    """Fewer samples than dimensions: still computed; equals the eigenvalue form torchmetrics uses."""
    from torchmetrics.image.fid import _compute_fid

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(6, 32, generator=g, dtype=torch.float64), torch.randn(6, 32, generator=g, dtype=torch.float64)
    (mu1, s1), (mu2, s2) = feature_stats(a), feature_stats(b + 1)
    got = frechet_distance(mu1, s1, mu2, s2)
    ref = float(_compute_fid(mu1, s1, mu2, s2))
    assert math.isfinite(got) and got == pytest.approx(ref, rel=1e-6)
    # the low-rank path (rank <= N - 1 known from the sample count) gives the same value
    assert frechet_distance(mu1, s1, mu2, s2, rank=5) == pytest.approx(got, rel=1e-9)
    assert abs(frechet_distance(mu1, s1, mu1, s1, rank=5)) < 1e-10 * float(s1.trace())


# ----------------------------------------------------------------------------------------------------------------------
# LPIPS
# ----------------------------------------------------------------------------------------------------------------------

ALEXNET_SHAPES = {  # torchvision alexnet().features, indices 0, 3, 6, 8, 10
    "features.0": (64, 3, 11, 11), "features.3": (192, 64, 5, 5), "features.6": (384, 192, 3, 3),
    "features.8": (256, 384, 3, 3), "features.10": (256, 256, 3, 3)}


def _write_lpips_weights(folder, seed=0):
    g = torch.Generator().manual_seed(seed)
    trunk = {}
    for name, shape in ALEXNET_SHAPES.items():
        fan_in = shape[1] * shape[2] * shape[3]
        trunk[f"{name}.weight"] = torch.randn(shape, generator=g) * math.sqrt(2.0 / fan_in)
        trunk[f"{name}.bias"] = torch.zeros(shape[0])
    trunk["classifier.6.bias"] = torch.zeros(1000)  # torchvision files carry the classifier: must be ignored
    heads = {f"lin{i}.model.1.weight": torch.rand(1, c, 1, 1, generator=g) * 0.1
             for i, c in enumerate((64, 192, 384, 256, 256))}
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(trunk, folder / "alexnet.pth")
    torch.save(heads, folder / "alex.pth")
    return folder


def test_lpips_with_official_key_names(tmp_path):
    folder = _write_lpips_weights(tmp_path / "lpips")
    model, why = load_lpips(str(folder))
    assert why is None and model is not None
    assert model.net.features[3].weight.shape == (192, 64, 5, 5)
    pred, gt = _videos(b=2, f=3, h=40, w=48)
    x, y = pred[:, :, 1].clamp(-1, 1), gt[:, :, 1]  # (2, 3, H, W)
    d_xy, d_yx, d_xx = model(x, y), model(y, x), model(x, x)
    assert d_xx.abs().max() < 1e-6
    assert (d_xy > 1e-4).all()
    torch.testing.assert_close(d_xy, d_yx)
    far = model(x, -y)
    assert (far > d_xy).all()  # an inverted image is farther than a noisy one
    # two-file form "TRUNK,HEADS"
    model2, why2 = load_lpips(f"{folder / 'alexnet.pth'},{folder / 'alex.pth'}")
    assert why2 is None
    torch.testing.assert_close(model2(x, y), d_xy)


def test_lpips_weights_with_wrong_keys_name_the_file(tmp_path):
    folder = _write_lpips_weights(tmp_path / "bad")
    torch.save({"lin0.model.1.weight": torch.zeros(1, 64, 1, 1)}, folder / "alex.pth")
    with pytest.raises(WeightsError, match=r"alex\.pth.*missing keys \['lin1\.model\.1\.weight'"):
        load_lpips(str(folder))


# ----------------------------------------------------------------------------------------------------------------------
# FID Inception
# ----------------------------------------------------------------------------------------------------------------------


def _write_inception_weights(folder):
    """Random He-initialised weights as a torchvision Inception3 state dict like pytorch-fid's file (fc of 1008
    classes, no num_batches_tracked entries)."""
    torch.manual_seed(0)
    net = FIDInceptionV3()
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
    sd = {k: v for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")}
    sd["fc.weight"], sd["fc.bias"] = torch.zeros(1008, 2048), torch.zeros(1008)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(sd, folder / "pt_inception-2015-12-05-00000000.pth")
    return folder


def test_inception_features_and_fid_through_torchmetrics(tmp_path):
    cfg = load_config("demo")
    cfg.eval.inception_weights = str(_write_inception_weights(tmp_path / "inception"))
    acc = MetricAccumulator(cfg)
    net = acc.fid.inception  # the FIDInceptionV3 loaded from the file, as torchmetrics' feature extractor
    assert isinstance(net, FIDInceptionV3)
    sd = net.state_dict()
    # torchvision Inception3 names and the FID variants' shapes; 21,785,568 = torchvision's 27,161,264 minus
    # AuxLogits (3,326,696) and fc (2,049,000)
    assert sd["Conv2d_1a_3x3.conv.weight"].shape == (32, 3, 3, 3)
    assert sd["Mixed_5b.branch_pool.conv.weight"].shape == (32, 192, 1, 1)
    assert sd["Mixed_6e.branch7x7dbl_5.conv.weight"].shape == (192, 192, 1, 7)
    assert sd["Mixed_7c.branch3x3dbl_3b.bn.running_var"].shape == (384,)
    assert sum(p.numel() for p in net.parameters()) == 21_785_568

    _, gt = _videos(b=2, f=2, h=32, w=48)  # one compared frame per video -> 2 images per set
    frames = (gt[:, :, 1].clamp(-1, 1) + 1) / 2  # (2, 3, H, W) in [0, 1]
    with torch.no_grad():
        feats = net(frames)
    assert feats.shape == (2, 2048) and torch.isfinite(feats).all()
    assert (feats[0] - feats[1]).abs().max() > 1e-3  # different frames, different features

    acc.update(gt.flip(0), gt)  # same set of frames, other order: per-sample metrics differ, FID is ~0
    out = acc.compute()
    assert out["fid_num_images"] == 2 and "fid_reason" not in out
    torch.testing.assert_close(acc.fid.real_features_sum.float(), feats.sum(0), rtol=1e-4, atol=1e-4)
    assert abs(out["fid"]) < 1e-6 * float(feats.pow(2).sum())
    assert out["psnr"] < 60  # the pairs themselves differ


# ----------------------------------------------------------------------------------------------------------------------
# FVD with a tiny scripted detector
# ----------------------------------------------------------------------------------------------------------------------


class TinyDetector(nn.Module):
    """Stand-in with the StyleGAN-V I3D call convention; rejects other arguments, ranges and clips < min_frames."""

    def __init__(self, min_frames: int = 2):
        super().__init__()
        self.min_frames = min_frames
        self.proj = nn.Linear(24, 400)

    def forward(self, x: Tensor, rescale: bool = False, resize: bool = False, return_features: bool = False) -> Tensor:
        if rescale or not resize or not return_features:
            raise RuntimeError("expected rescale=False, resize=True, return_features=True")
        if x.dim() != 5 or x.shape[1] != 3 or bool(x.min() < -1.0) or bool(x.max() > 1.0):
            raise RuntimeError("expected videos (N, 3, T, H, W) in [-1, 1]")
        if x.shape[2] < self.min_frames:
            raise RuntimeError("clip too short")
        return self.proj(F.adaptive_avg_pool3d(x, [2, 2, 2]).flatten(1))  # (N, 400)


def _write_detector(path, min_frames=2):
    torch.manual_seed(0)
    torch.jit.script(TinyDetector(min_frames)).save(str(path))
    return path


def test_fvd_with_scripted_detector(tmp_path):
    _write_detector(tmp_path / "i3d_torchscript.pt")
    cfg = load_config("demo")
    cfg.eval.i3d_weights = str(tmp_path)  # a folder holding i3d_torchscript.pt
    pred, gt = _videos(b=4, f=5)
    same = compute_metrics(gt, gt, cfg)
    diff = compute_metrics(pred, gt, cfg)
    assert abs(same["fvd"]) < 1e-9 and same["fvd_num_videos"] == 4
    det = torch.jit.load(str(tmp_path / "i3d_torchscript.pt"))
    kw = dict(rescale=False, resize=True, return_features=True)
    with torch.no_grad():
        fr = det(gt[:, :, 1:], **kw).double()
        ff = det(pred[:, :, 1:].clamp(-1, 1), **kw).double()
    assert diff["fvd"] == pytest.approx(frechet_distance(*feature_stats(fr), *feature_stats(ff)), rel=1e-6)
    assert diff["fvd"] > 1e-4


def test_fvd_reports_a_detector_failure_instead_of_a_number(tmp_path):
    path = _write_detector(tmp_path / "short.pt", min_frames=10)
    cfg = load_config("demo")
    cfg.eval.i3d_weights = str(path)
    out = compute_metrics(*_videos(b=2, f=5), cfg)
    assert out["fvd"] is None and "clip too short" in out["fvd_reason"]


# ----------------------------------------------------------------------------------------------------------------------
# compute_metrics / MetricAccumulator
# ----------------------------------------------------------------------------------------------------------------------


def test_unconfigured_or_missing_weights_are_reported_not_computed(tmp_path):
    cfg = load_config("demo")
    cfg.eval.i3d_weights = str(tmp_path / "nowhere.pt")
    pred, gt = _videos(b=2, f=5)
    out = compute_metrics(pred, gt, cfg)
    assert out["lpips"] is None and "eval.lpips_weights is not set" in out["lpips_reason"]
    assert out["fid"] is None and "eval.inception_weights is not set" in out["fid_reason"]
    assert out["fvd"] is None and "nowhere.pt: no such file" in out["fvd_reason"]
    assert out["psnr_arm"] is None and "no arm masks" in out["psnr_arm_reason"]
    assert out["num_samples"] == 2 and out["num_frames_compared"] == 4
    assert out["psnr"] == pytest.approx(psnr_per_sample(pred, gt).mean().item())
    assert out["ssim"] == pytest.approx(ssim_per_sample(pred, gt).mean().item())
    assert out["per_sample"]["psnr_arm"] == [None, None] and out["per_sample"]["lpips"] is None
    empty = compute_metrics(pred, gt, cfg, masks=torch.zeros(2, 5, 24, 32, dtype=torch.bool))
    assert empty["psnr_arm"] is None and "empty" in empty["psnr_arm_reason"]


def test_streaming_accumulator_equals_one_batch(tmp_path):
    cfg = load_config("demo")
    cfg.eval.lpips_weights = str(_write_lpips_weights(tmp_path / "lpips"))
    cfg.eval.i3d_weights = str(_write_detector(tmp_path / "i3d.pt"))
    pred, gt = _videos(b=4, f=5, h=32, w=40)
    masks = torch.from_numpy(np.random.default_rng(0).random((4, 5, 32, 40)) > 0.8)
    whole = compute_metrics(pred, gt, cfg, masks=masks)
    acc = MetricAccumulator(cfg)
    acc.update(pred[:3], gt[:3], masks[:3])
    acc.update(pred[3:], gt[3:], masks[3:])
    parts = acc.compute()
    for key in ("psnr", "ssim", "psnr_arm", "lpips", "fvd"):
        assert parts[key] == pytest.approx(whole[key], rel=1e-6), key
    assert len(parts["per_sample"]["lpips"]) == 4 and parts["lpips"] > 0
    with pytest.raises(ValueError, match="same frame count"):
        acc.update(pred[:, :, :3], gt[:, :, :3])
