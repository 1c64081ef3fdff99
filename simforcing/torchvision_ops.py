"""torchvision's ``nms`` and ``roi_align`` in plain PyTorch, for installs where its compiled ops cannot load.

SAM3 (the ``sam3`` masking mode: transformers' ``Sam3Model`` / ``Sam3Processor``) imports torchvision, and transformers
and diffusers import it as soon as it is installed. PyPI's torchvision for Linux x86_64 is a CUDA build: its compiled
ops (``torchvision/_C.so``) link against ``libtorch_cuda.so``, so beside the CPU wheel of torch they do not load, and
``import torchvision`` stops with "operator torchvision::nms does not exist" (it registers a fake kernel for an op its
library never defined). :func:`provide_missing_ops` (run right before the first ``import torchvision`` of a process by
the environment's startup file, ``simforcing.torchvision_startup``) then defines the ops below in the ``torchvision``
namespace with plain-PyTorch kernels and tells torchvision its ops are present, so ``import torchvision``,
``torchvision.ops.nms`` / ``batched_nms`` and ``torchvision.ops.roi_align`` work:

| op          | kernel here                                                       | SAM3 uses it for                 |
|-------------|-------------------------------------------------------------------|----------------------------------|
| `nms`       | greedy suppression by IoU, as torchvision's CPU kernel            | mask generation (`batched_nms`)  |
| `roi_align` | bilinear sampling as separable weight matrices (differentiable)   | box prompts (geometry encoder)   |
| `qnms`      | none: defined only because torchvision registers its fake kernel  | -                                |

The text-prompted path of the ``sam3`` mode (``post_process_instance_segmentation``) calls neither; it needs
torchvision only to import and for its image transforms, which are plain PyTorch. Other compiled ops (``roi_pool``,
``deform_conv2d``, ...) stay absent. With a torchvision whose compiled ops load (a CUDA torch and the torchvision
built for it), nothing here is registered.
"""

from __future__ import annotations

import importlib.util
import math
import sys

import torch

PROVIDED = False  # True once the kernels below stand in for torchvision's compiled ops
_LIBRARY = None  # the torch.library fragment holding them (kept alive: dropping it would unregister the ops)

_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align": "roi_align(Tensor input, Tensor rois, float spatial_scale, int pooled_height, int pooled_width, "
                 "int sampling_ratio, bool aligned) -> Tensor",
}


def box_iou_row(box: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """IoU of one box (4,) with boxes (M, 4), all (x1, y1, x2, y2) -> (M,); areas without the +1 of pixel counts."""
    w = (torch.minimum(box[2], boxes[:, 2]) - torch.maximum(box[0], boxes[:, 0])).clamp(min=0)
    h = (torch.minimum(box[3], boxes[:, 3]) - torch.maximum(box[1], boxes[:, 1])).clamp(min=0)
    inter = w * h
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / (area + areas - inter)


def nms(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy non-maximum suppression: dets (N, 4) as (x1, y1, x2, y2), scores (N,) -> kept indices (K,) int64, by
    decreasing score. A box is dropped when its IoU with a kept, higher-scoring box is > ``iou_threshold``."""
    if dets.ndim != 2 or dets.shape[-1] != 4 or scores.shape != dets.shape[:1]:
        raise ValueError(f"nms: dets must be (N, 4) and scores (N,), got {tuple(dets.shape)} and {tuple(scores.shape)}")
    order = scores.argsort(descending=True, stable=True)
    boxes = dets[order]
    alive = torch.ones(len(order), dtype=torch.bool, device=dets.device)
    for i in range(len(order)):
        if alive[i]:  # a kept box suppresses the lower-scoring ones it overlaps (NaN IoU suppresses nothing)
            alive[i + 1:] &= ~(box_iou_row(boxes[i], boxes[i + 1:]) > iou_threshold)
    return order[alive]


def _sampling_weights(start: float, size: float, bins: int, grid: int, length: int, like: torch.Tensor):
    """Bilinear weights (bins * grid, length) of the ``grid`` sample points per bin along one axis of a region.

    Sample j sits at start + (j + 0.5) * size / (bins * grid); a point outside [-1, length] weighs nothing, one in
    [-1, 0) counts as 0, one at or beyond the last pixel takes that pixel alone (torchvision's boundary rules).
    """
    n = bins * grid
    pos = start + (torch.arange(n, device=like.device, dtype=torch.float64) + 0.5) * (size / max(n, 1))
    inside = ((pos >= -1.0) & (pos <= length)).to(like.dtype)
    pos = pos.clamp(min=0)
    low = pos.floor().long()
    edge = low >= length - 1
    low = torch.where(edge, length - 1, low)
    high = torch.where(edge, length - 1, low + 1)
    frac = torch.where(edge, 0.0, pos - low).to(like.dtype)
    weights = torch.zeros(n, length, device=like.device, dtype=like.dtype)
    weights.scatter_add_(1, low[:, None], ((1 - frac) * inside)[:, None])
    weights.scatter_add_(1, high[:, None], (frac * inside)[:, None])
    return weights


def roi_align(input: torch.Tensor, rois: torch.Tensor, spatial_scale: float, pooled_height: int, pooled_width: int,
              sampling_ratio: int, aligned: bool) -> torch.Tensor:
    """RoIAlign (Mask R-CNN): input (N, C, H, W), rois (K, 5) as (batch index, x1, y1, x2, y2) in image coordinates
    -> (K, C, pooled_height, pooled_width): each bin the mean of grid_h x grid_w bilinear samples.

    Box corners are scaled by ``spatial_scale`` (and shifted by -0.5 when ``aligned``; otherwise a region is at least
    1 x 1); the grid is ``sampling_ratio`` per side, or ceil(region size / bins) when it is <= 0. Differentiable in
    ``input`` (the samples are weight matrices applied to the features), not in ``rois``.
    """
    if input.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 5:
        raise ValueError(f"roi_align: input must be (N, C, H, W) and rois (K, 5), got {tuple(input.shape)} and "
                         f"{tuple(rois.shape)}")
    _, c, h, w = input.shape
    offset = 0.5 if aligned else 0.0
    out = []
    for b, x1, y1, x2, y2 in rois.tolist():
        x1, y1, x2, y2 = (v * spatial_scale - offset for v in (x1, y1, x2, y2))
        rw, rh = x2 - x1, y2 - y1
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = sampling_ratio if sampling_ratio > 0 else max(math.ceil(rh / pooled_height), 0)
        gw = sampling_ratio if sampling_ratio > 0 else max(math.ceil(rw / pooled_width), 0)
        wy = _sampling_weights(y1, rh, pooled_height, gh, h, input)  # (PH * gh, H)
        wx = _sampling_weights(x1, rw, pooled_width, gw, w, input)  # (PW * gw, W)
        samples = torch.einsum("yh,chw,xw->cyx", wy, input[int(b)], wx)  # (C, PH * gh, PW * gw)
        bins = samples.reshape(c, pooled_height, gh, pooled_width, gw).sum(dim=(2, 4))  # (C, PH, PW)
        out.append(bins / max(gh * gw, 1))
    if not out:
        return input.new_zeros(0, c, pooled_height, pooled_width)
    return torch.stack(out)  # (K, C, PH, PW)


def _quantized_nms(dets, scores, iou_threshold):
    raise NotImplementedError("torchvision::qnms (NMS on quantized boxes) needs torchvision's compiled ops, which do "
                              "not load beside this torch; simforcing's plain-PyTorch ops provide nms and roi_align "
                              "only (simforcing/torchvision_ops.py)")


def _define_missing_ops() -> None:
    """Define, in the ``torchvision`` namespace, the ops above that no loaded library defines."""
    global _LIBRARY
    kernels = {"nms": (nms, "CompositeExplicitAutograd"), "qnms": (_quantized_nms, "CompositeExplicitAutograd"),
               "roi_align": (roi_align, "CompositeImplicitAutograd")}  # implicit: autograd sees the torch ops inside
    _LIBRARY = _LIBRARY or torch.library.Library("torchvision", "FRAGMENT")
    for name, (kernel, key) in kernels.items():
        if not hasattr(torch.ops.torchvision, name):
            _LIBRARY.define(_SCHEMAS[name])
            _LIBRARY.impl(name, kernel, key)


def _is_missing_op_error(e: BaseException) -> bool:
    return "torchvision::" in str(e) and "does not exist" in str(e)


def provide_missing_ops() -> bool:
    """Make an installed torchvision importable and its nms / roi_align usable when its compiled ops do not load.

    Does nothing (and imports nothing heavy) when torchvision is not installed, or when its compiled ops loaded.
    Returns True when the plain-PyTorch kernels stand in (then and later: ``PROVIDED``).
    """
    global PROVIDED
    if PROVIDED or importlib.util.find_spec("torchvision") is None:
        return PROVIDED
    try:
        import torchvision
    except RuntimeError as e:
        if not _is_missing_op_error(e):
            raise
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]  # the half-imported package; imported again below, once the ops exist
        _define_missing_ops()
        import torchvision
    else:
        if torchvision.extension._has_ops():
            return False  # the compiled ops loaded: nothing to provide
        _define_missing_ops()
    # torchvision checks `_has_ops()` before calling an op (two modules hold a reference to it)
    holders = [torchvision.extension, sys.modules.get("torchvision.ops.roi_align")]
    if any(m is None or not hasattr(m, "_has_ops") for m in holders):
        raise ImportError(f"torchvision {torchvision.__version__}: its compiled ops do not load beside torch "
                          f"{torch.__version__}, and simforcing/torchvision_ops.py does not know where this version "
                          "checks for them; install the torchvision built for this torch (the Makefile's "
                          "TORCHVISION_SPEC, torchvision==0.28.0 for torch 2.13.0), or uninstall torchvision if "
                          "you do not use --sample.mask_mode=sam3")
    for m in holders:
        m._has_ops = _present
    PROVIDED = True
    return True


def _present() -> bool:
    return True
