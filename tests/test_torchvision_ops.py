"""torchvision's nms and roi_align in plain PyTorch (``simforcing.torchvision_ops``): results against independent
scalar references, the same results through torchvision's own functions (whichever kernels serve them here), the
stand-in registered only when torchvision's compiled ops did not load, and the environment's startup file
(``simforcing.torchvision_startup``): every process imports torchvision and diffusers without simforcing, and
``import simforcing`` changes no other library's import."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from simforcing import torchvision_ops, torchvision_startup

try:
    import torchvision
except RuntimeError as e:  # the compiled ops do not load and nothing stands in: the environment is not installed
    raise RuntimeError(f"{e}; this environment has no startup file {torchvision_startup.startup_file()}: run "
                       "`make install` (or `python -m simforcing.torchvision_startup`)") from e
from simforcing.torchvision_ops import nms, roi_align


# -- references: one box or one sample point at a time, in Python floats ---------------------------------------------
def reference_nms(boxes: list, scores: list, threshold: float) -> list[int]:
    def iou(a, b):
        w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
        return w * h / union

    keep = []
    for i in sorted(range(len(boxes)), key=lambda i: -scores[i]):
        if all(iou(boxes[i], boxes[k]) <= threshold for k in keep):
            keep.append(i)
    return keep


def reference_roi_align(feat, roi, scale: float, ph: int, pw: int, ratio: int, aligned: bool):
    """One region: feat (C, H, W) float64, roi (x1, y1, x2, y2) -> (C, ph, pw), the Mask R-CNN definition."""
    c, h, w = feat.shape
    off = 0.5 if aligned else 0.0
    x1, y1, x2, y2 = (v * scale - off for v in roi)
    rw, rh = x2 - x1, y2 - y1
    if not aligned:
        rw, rh = max(rw, 1.0), max(rh, 1.0)
    gh = ratio if ratio > 0 else math.ceil(rh / ph)
    gw = ratio if ratio > 0 else math.ceil(rw / pw)

    def sample(y, x):  # bilinear, zero outside [-1, size], clamped to the border inside it
        if y < -1.0 or y > h or x < -1.0 or x > w:
            return torch.zeros(c, dtype=feat.dtype)
        y, x = max(y, 0.0), max(x, 0.0)
        y0, x0 = min(int(y), h - 1), min(int(x), w - 1)
        y1_, x1_ = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
        ly, lx = (y - y0 if y0 < h - 1 else 0.0), (x - x0 if x0 < w - 1 else 0.0)
        return ((1 - ly) * (1 - lx) * feat[:, y0, x0] + (1 - ly) * lx * feat[:, y0, x1_]
                + ly * (1 - lx) * feat[:, y1_, x0] + ly * lx * feat[:, y1_, x1_])

    out = torch.zeros(c, ph, pw, dtype=feat.dtype)
    for i in range(ph):
        for j in range(pw):
            acc = torch.zeros(c, dtype=feat.dtype)
            for iy in range(max(gh, 0)):
                for ix in range(max(gw, 0)):
                    acc += sample(y1 + i * rh / ph + (iy + 0.5) * rh / ph / gh,
                                  x1 + j * rw / pw + (ix + 0.5) * rw / pw / gw)
            out[:, i, j] = acc / max(gh * gw, 1)
    return out


def _boxes(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Clustered boxes (n, 4) in a 40 x 40 image, so that some overlap a lot and some not at all; distinct scores."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.rand(4, 2, generator=g, dtype=torch.float64) * 30 + 5
    c = centres[torch.randint(0, 4, (n,), generator=g)] + torch.randn(n, 2, generator=g, dtype=torch.float64) * 2
    wh = torch.rand(n, 2, generator=g, dtype=torch.float64) * 8 + 2
    return torch.cat([c - wh / 2, c + wh / 2], dim=1), torch.randperm(n, generator=g).to(torch.float64) / n


# -- nms --------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("threshold", [0.1, 0.3, 0.5, 0.6])
def test_nms_matches_the_reference_directly_and_through_torchvision(threshold):
    for seed in range(3):
        boxes, scores = _boxes(40, seed)
        want = reference_nms(boxes.tolist(), scores.tolist(), threshold)
        assert 1 < len(want) < 40  # something is suppressed, something kept
        assert nms(boxes, scores, threshold).tolist() == want
        assert torchvision.ops.nms(boxes.float(), scores.float(), threshold).tolist() == want
    empty = nms(torch.zeros(0, 4), torch.zeros(0), 0.5)
    assert empty.dtype == torch.int64 and empty.shape == (0,)
    with pytest.raises(ValueError, match=r"\(N, 4\)"):
        nms(torch.zeros(3, 5), torch.zeros(3), 0.5)


def test_batched_nms_suppresses_only_within_a_category():
    boxes, scores = _boxes(40, 7)
    labels = torch.arange(40) % 3
    want = []
    for k in range(3):
        idx = (labels == k).nonzero().flatten().tolist()
        want += [idx[i] for i in reference_nms(boxes[idx].tolist(), scores[idx].tolist(), 0.3)]
    want.sort(key=lambda i: -scores[i].item())
    assert torchvision.ops.batched_nms(boxes, scores, labels, 0.3).tolist() == want


# -- roi_align --------------------------------------------------------------------------------------------------------
ROIS = [(0, 1.0, 2.0, 12.0, 9.0),  # inside
        (1, -3.0, -2.0, 6.0, 5.0),  # over the top-left border
        (0, 10.0, 6.0, 25.0, 19.0),  # over the bottom-right border
        (1, 4.2, 3.3, 4.9, 3.6),  # smaller than a pixel
        (0, 30.0, 30.0, 40.0, 40.0),  # outside
        (1, 6.0, 5.0, 3.0, 2.0)]  # inverted corners (only here: torchvision's compiled kernel fails on some)


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("ratio, scale, size", [(0, 1.0, (2, 3)), (2, 0.5, (3, 2)), (0, 0.5, (1, 1))])
def test_roi_align_matches_the_reference_directly_and_through_torchvision(aligned, ratio, scale, size):
    feat = torch.randn(2, 3, 11, 14, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    rois = torch.tensor(ROIS, dtype=torch.float64)
    want = torch.stack([reference_roi_align(feat[int(r[0])], r[1:], scale, *size, ratio, aligned) for r in ROIS])
    torch.testing.assert_close(roi_align(feat, rois, scale, *size, ratio, aligned), want)
    # as transformers' SAM3 calls it: float32, one (K_b, 4) box tensor per image
    rois, want = rois[:-1], want[:-1]
    per_image = [rois[rois[:, 0] == b, 1:].float() for b in range(2)]
    order = torch.cat([(rois[:, 0] == b).nonzero().flatten() for b in range(2)])
    got = torchvision.ops.roi_align(feat.float(), per_image, size, scale, ratio, aligned)
    torch.testing.assert_close(got, want[order].float(), rtol=1e-5, atol=1e-5)


def test_roi_align_of_a_linear_ramp_is_its_value_at_the_bin_centres():
    """Bilinear sampling reproduces a linear function, and the samples of a bin are symmetric about its centre."""
    ys, xs = torch.meshgrid(torch.arange(12.0, dtype=torch.float64), torch.arange(16.0, dtype=torch.float64),
                            indexing="ij")
    feat = (0.5 * xs - 2.0 * ys + 3.0)[None, None]  # (1, 1, 12, 16): linear in the pixel indices
    x1, y1, x2, y2 = 2.5, 1.5, 10.5, 7.5
    out = roi_align(feat, torch.tensor([[0, x1, y1, x2, y2]], dtype=torch.float64), 1.0, 3, 4, 0, True)[0, 0]
    cy = y1 - 0.5 + (torch.arange(3, dtype=torch.float64) + 0.5) * (y2 - y1) / 3
    cx = x1 - 0.5 + (torch.arange(4, dtype=torch.float64) + 0.5) * (x2 - x1) / 4
    torch.testing.assert_close(out, 0.5 * cx[None, :] - 2.0 * cy[:, None] + 3.0)


def test_roi_align_is_differentiable_in_the_features():
    feat = torch.randn(1, 2, 6, 7, dtype=torch.float64, requires_grad=True)
    rois = torch.tensor([[0, 0.5, 1.0, 5.0, 4.5]], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda f: roi_align(f, rois, 1.0, 2, 2, 2, True), (feat,))
    with pytest.raises(ValueError, match=r"\(K, 5\)"):
        roi_align(feat, rois[:, 1:], 1.0, 2, 2, 2, True)


# -- registration ------------------------------------------------------------------------------------------------------
def test_the_stand_in_serves_exactly_when_torchvision_compiled_ops_did_not_load():
    compiled = any("torchvision" in p for p in torch.ops.loaded_libraries)
    assert torchvision_ops.PROVIDED is not compiled
    assert torchvision_ops.provide_missing_ops() is torchvision_ops.PROVIDED  # idempotent
    assert torchvision.extension._has_ops()  # torchvision's own guard lets its ops through, either way
    if torchvision_ops.PROVIDED:
        with pytest.raises(NotImplementedError, match="torchvision_ops.py"):
            torch.ops.torchvision.qnms(torch.zeros(1, 4), torch.zeros(1), 0.5)


def _fresh(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter of this environment (its startup files read, nothing imported before)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_the_environment_imports_torchvision_and_diffusers_without_simforcing():
    """A fresh interpreter of the environment imports torchvision.ops and diffusers' Wan VAE, simforcing not imported
    first, and torchvision's nms works (the startup file `make install` writes where the compiled ops do not load,
    simforcing/torchvision_startup.py); diffusers asking whether torchvision is installed imports nothing."""
    code = ("import sys, importlib.util; assert 'simforcing' not in sys.modules and 'torch' not in sys.modules; "
            "assert importlib.util.find_spec('torchvision') is not None and 'torchvision' not in sys.modules; "
            "import torchvision.ops; from diffusers import AutoencoderKLWan; import torch; "
            "b = torch.tensor([[0, 0, 1, 1.0], [0, 0, 1, 1.1]]); "
            "assert torchvision.ops.nms(b, torch.tensor([1.0, 0.9]), 0.5).tolist() == [0]; print('ok')")
    out = _fresh(code)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:] + _startup_file_note()


def _startup_file_note() -> str:
    path = torchvision_startup.site_packages() / torchvision_startup.STARTUP_FILE
    return f"\n(startup file {path}: {'present' if path.exists() else 'absent; run `make install`'})"


def test_import_simforcing_changes_no_other_import_and_stays_light():
    """``import simforcing`` leaves sys.meta_path as it was and imports neither torch nor torchvision."""
    code = ("import sys; before = list(sys.meta_path); import simforcing; assert sys.meta_path == before, "
            "sys.meta_path; assert 'torch' not in sys.modules and 'torchvision' not in sys.modules; print('ok')")
    out = _fresh(code)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_the_startup_line_installs_one_finder_and_does_nothing_once_its_file_is_gone(tmp_path):
    """The startup file's line, run twice (as site may), puts one finder in sys.meta_path; a line naming a file that
    no longer exists does nothing."""
    line = torchvision_startup.startup_line()
    code = (f"import sys; n = len(sys.meta_path); exec({line!r}); exec({line!r}); "
            "assert 'torchvision' in sys.modules or [type(f).__name__ for f in sys.meta_path].count("
            "'TorchvisionFirst') == 1, sys.meta_path; "
            f"k = len(sys.meta_path); exec({torchvision_startup.startup_line(tmp_path / 'gone.py')!r}); "
            "assert len(sys.meta_path) == k; print('ok')")
    out = _fresh(code)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.parametrize("errors, code, written", [
    ([None], 0, False),  # torchvision imports as installed (a CUDA pair, or none): no startup file, a stale one removed
    (["RuntimeError: operator torchvision::nms does not exist", None], 0, True),  # the CPU wheel beside PyPI's
    (["ImportError: libjpeg.so.8: cannot open shared object file"], 1, False),  # another failure: named, no file
    (["RuntimeError: operator torchvision::nms does not exist"] * 2, 1, False)])  # the file does not help: removed
def test_make_install_writes_the_startup_file_only_where_torchvision_needs_it(tmp_path, monkeypatch, capsys, errors,
                                                                               code, written):
    target = tmp_path / torchvision_startup.STARTUP_FILE
    target.write_text("import sys\n")  # left by an earlier install
    answers = iter(errors)
    monkeypatch.setattr(torchvision_startup, "startup_file", lambda: str(target))
    monkeypatch.setattr(torchvision_startup, "torchvision_import_error", lambda: next(answers))
    assert torchvision_startup.main([]) == code
    assert target.exists() is written
    if written:
        assert target.read_text() == torchvision_startup.startup_line()
    if code:
        assert errors[-1] in capsys.readouterr().err
