"""Feature networks of the perceptual metrics, written in plain torch (torchvision is never imported).

- :class:`LPIPS` — LPIPS v0.1 with the AlexNet trunk: the AlexNet ``features`` stack with torchvision's parameter
  names (``features.0.weight`` ... ``features.10.bias``, so torchvision's ``alexnet`` weights load), the LPIPS linear
  heads with the ``lpips`` package's names (``lin0.model.1.weight`` ... ``lin4.model.1.weight``, as in its
  ``weights/v0.1/alex.pth``), the scaling layer, unit normalisation over channels, spatial mean, sum over 5 layers.
- :class:`FIDInceptionV3` — the FID Inception-v3 of pytorch-fid / TF FID (``FIDInceptionA/C/E_1/E_2`` variants),
  parameter names of torchvision's ``Inception3`` so ``pt_inception-2015-12-05-*.pth`` loads; returns pool3 (N, 2048).
- :func:`load_i3d` — the Kinetics-400 I3D TorchScript detector of StyleGAN-V's FVD (``i3d_torchscript.pt``).

Weights come only from local paths (``cfg.eval.lpips_weights``, ``cfg.eval.inception_weights``,
``cfg.eval.i3d_weights``); :func:`resolve_weights` returns ``(paths, None)`` or ``(None, reason)``.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import Tensor, nn

# A folder given as cfg.eval.lpips_weights holds one file of each group (first match wins).
LPIPS_TRUNK_NAMES = ("alexnet.safetensors", "alexnet.pth", "alexnet-owt-7be5be79.pth")
LPIPS_HEAD_NAMES = ("alex.safetensors", "alex.pth")
INCEPTION_GLOB = "pt_inception-2015-12-05-*"
I3D_NAME = "i3d_torchscript.pt"


class WeightsError(ValueError):
    """A weights file exists but does not hold what the network expects. The message names the file."""


# ----------------------------------------------------------------------------------------------------------------------
# Weight files
# ----------------------------------------------------------------------------------------------------------------------


def load_state_dict(path: str | Path) -> dict[str, Tensor]:
    """A state dict from ``.safetensors`` or a ``torch.save`` file (``weights_only=True``)."""
    path = Path(path)
    if path.suffix == ".safetensors":
        return load_file(str(path))
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - re-raised with the file name
        raise WeightsError(f"{path}: cannot read a state dict ({type(e).__name__}: {e})") from e
    if isinstance(sd, dict) and "state_dict" in sd and isinstance(sd["state_dict"], dict):
        sd = sd["state_dict"]
    if not isinstance(sd, dict) or not all(isinstance(v, Tensor) for v in sd.values()):
        raise WeightsError(f"{path}: expected a state dict (name -> tensor), found {type(sd).__name__}")
    return sd


def load_exact(module: nn.Module, sd: dict[str, Tensor], path: str | Path, what: str) -> None:
    """``module.load_state_dict(sd)`` with an error naming the file, the missing/unexpected keys and bad shapes."""
    own = module.state_dict()
    optional = {k for k in own if k.endswith("num_batches_tracked")}  # absent from files converted from TF
    missing = sorted(set(own) - set(sd) - optional)
    unexpected = sorted(set(sd) - set(own))
    bad_shape = [f"{k}: file {tuple(sd[k].shape)}, expected {tuple(own[k].shape)}"
                 for k in own if k in sd and sd[k].shape != own[k].shape]
    if missing or unexpected or bad_shape:
        raise WeightsError(
            f"{path}: not {what} weights; missing keys {missing[:6]}{' ...' if len(missing) > 6 else ''}, "
            f"unexpected keys {unexpected[:6]}{' ...' if len(unexpected) > 6 else ''}, wrong shapes {bad_shape[:4]}")
    module.load_state_dict({k: v for k, v in sd.items()}, strict=False)


def resolve_weights(value: str | None, field: str, names: tuple[str, ...] | None = None,
                    glob: str | None = None) -> tuple[Path | None, str | None]:
    """Resolve one weights file from a config value: a file, or a folder holding one of ``names`` / ``glob``.

    Returns ``(path, None)`` or ``(None, reason)`` — never raises for absent weights.
    """
    if value is None:
        return None, f"{field} is not set (no weights configured)"
    p = Path(value).expanduser()
    if p.is_file():
        return p, None
    if p.is_dir():
        for name in names or ():
            if (p / name).is_file():
                return p / name, None
        if glob is not None:
            hits = sorted(q for q in p.glob(glob) if q.is_file())
            if hits:
                return hits[0], None
        want = ", ".join([*(names or ()), *([glob] if glob else [])])
        return None, f"{field}={value}: folder holds none of {want}"
    return None, f"{field}={value}: no such file or folder"


# ----------------------------------------------------------------------------------------------------------------------
# LPIPS (AlexNet trunk, v0.1)
# ----------------------------------------------------------------------------------------------------------------------


class AlexNetFeatures(nn.Module):
    """torchvision's ``alexnet().features`` (indices 0..12); returns the 5 ReLU outputs LPIPS uses.

    Output i has channels (64, 192, 384, 256, 256)[i]; the input needs H, W >= 31 (three stride-2 max pools).
    """

    CHANNELS = (64, 192, 384, 256, 256)
    TAPS = (1, 4, 7, 9, 11)  # indices of the ReLUs whose outputs are the LPIPS layers

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(),  # 0, 1
            nn.MaxPool2d(3, stride=2),  # 2
            nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(),  # 3, 4
            nn.MaxPool2d(3, stride=2),  # 5
            nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),  # 6, 7
            nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),  # 8, 9
            nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(),  # 10, 11
            nn.MaxPool2d(3, stride=2),  # 12 (not used by LPIPS; kept so indices match torchvision)
        )

    def forward(self, x: Tensor) -> list[Tensor]:
        """x (N, 3, H, W) already scaled by the LPIPS scaling layer -> 5 maps (N, C_i, H_i, W_i)."""
        outs = []
        for i, layer in enumerate(self.features[: self.TAPS[-1] + 1]):
            x = layer(x)
            if i in self.TAPS:
                outs.append(x)
        return outs


class NetLinLayer(nn.Module):
    """One LPIPS head: dropout (inactive in eval) + 1×1 conv to one channel, no bias; names ``model.1.weight``."""

    def __init__(self, channels: int):
        super().__init__()
        self.model = nn.Sequential(nn.Dropout(), nn.Conv2d(channels, 1, 1, bias=False))

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)


class LPIPS(nn.Module):
    """LPIPS v0.1 (AlexNet): ``d(x, y) = Σ_l mean_hw( w_l · (n(f_l(x)) − n(f_l(y)))² )``, n = unit norm over C.

    Inputs are images (N, 3, H, W) in [-1, 1]; output (N,) distances (0 for identical images).
    """

    MIN_SIZE = 31

    def __init__(self):
        super().__init__()
        self.register_buffer("shift", torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("scale", torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1), persistent=False)
        self.net = AlexNetFeatures()
        for i, c in enumerate(AlexNetFeatures.CHANNELS):
            self.add_module(f"lin{i}", NetLinLayer(c))
        self.eval().requires_grad_(False)

    @staticmethod
    def _unit(f: Tensor, eps: float = 1e-10) -> Tensor:
        """Normalise each spatial feature vector to unit length over channels (lpips' normalize_tensor)."""
        return f / (f.pow(2).sum(dim=1, keepdim=True).sqrt() + eps)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        if x.shape != y.shape or x.dim() != 4 or x.shape[1] != 3:
            raise ValueError(f"LPIPS: expected two (N, 3, H, W) images of equal shape, found {tuple(x.shape)} and "
                             f"{tuple(y.shape)}")
        if min(x.shape[-2:]) < self.MIN_SIZE:
            raise ValueError(f"LPIPS: frames of {tuple(x.shape[-2:])} are too small for AlexNet; expected H, W >= "
                             f"{self.MIN_SIZE}")
        n = x.shape[0]
        feats = self.net((torch.cat([x, y]) - self.shift) / self.scale)  # both images in one pass: (2N, C, h, w)
        total = x.new_zeros(n)
        for i, f in enumerate(feats):
            fx, fy = self._unit(f[:n]), self._unit(f[n:])
            total = total + getattr(self, f"lin{i}")((fx - fy).pow(2)).mean(dim=(1, 2, 3))
        return total


def load_lpips(value: str | None, device: torch.device | str = "cpu") -> tuple[LPIPS | None, str | None]:
    """LPIPS from ``cfg.eval.lpips_weights``: a folder holding ``alexnet.pth`` (torchvision's AlexNet state dict; its
    ``classifier.*`` entries are ignored) and ``alex.pth`` (the lpips v0.1 heads), or two files ``TRUNK,HEADS``.
    ``.safetensors`` versions of both are accepted. Returns ``(model, None)`` or ``(None, reason)``.
    """
    field = "eval.lpips_weights"
    if value is not None and "," in value:
        parts = [s.strip() for s in value.split(",")]
        if len(parts) != 2:
            return None, f"{field}={value}: expected a folder or two files 'TRUNK,HEADS'"
        trunk, why = resolve_weights(parts[0], field + " (AlexNet trunk)")
        heads, why2 = resolve_weights(parts[1], field + " (LPIPS heads)")
    else:
        trunk, why = resolve_weights(value, field, names=LPIPS_TRUNK_NAMES)
        heads, why2 = resolve_weights(value, field, names=LPIPS_HEAD_NAMES)
    if trunk is None or heads is None:
        return None, why or why2
    model = LPIPS()
    sd = {k: v for k, v in load_state_dict(trunk).items() if not k.startswith("classifier.")}
    load_exact(model.net, sd, trunk, "torchvision AlexNet")
    head_sd = {k: v for k, v in load_state_dict(heads).items() if k.startswith("lin")}
    lins = nn.ModuleDict({f"lin{i}": getattr(model, f"lin{i}") for i in range(5)})
    load_exact(lins, head_sd, heads, "LPIPS v0.1 alex")
    return model.to(device).eval(), None


# ----------------------------------------------------------------------------------------------------------------------
# FID Inception-v3 (pytorch-fid's variant of torchvision's Inception3)
# ----------------------------------------------------------------------------------------------------------------------


class BasicConv2d(nn.Module):
    """conv (no bias) → BatchNorm (eps 1e-3) → ReLU; names ``conv.weight``, ``bn.*`` as in torchvision."""

    def __init__(self, cin: int, cout: int, **kw):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, bias=False, **kw)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.bn(self.conv(x)))


def _avg3(x: Tensor) -> Tensor:
    """TF's 3×3 SAME average pool: padded zeros are not counted (the FID network's patch)."""
    return F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)


class FIDInceptionA(nn.Module):
    """35×35 block: 1×1 | 1×1→5×5 | 1×1→3×3→3×3 | avgpool→1×1; out 224 + pool_features channels."""

    def __init__(self, cin: int, pool_features: int):
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 64, kernel_size=1)
        self.branch5x5_1 = BasicConv2d(cin, 48, kernel_size=1)
        self.branch5x5_2 = BasicConv2d(48, 64, kernel_size=5, padding=2)
        self.branch3x3dbl_1 = BasicConv2d(cin, 64, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, kernel_size=3, padding=1)
        self.branch_pool = BasicConv2d(cin, pool_features, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([self.branch1x1(x), b5, b3, self.branch_pool(_avg3(x))], 1)


class InceptionB(nn.Module):
    """35→17 reduction (torchvision's, unpatched): 3×3/2 | 1×1→3×3→3×3/2 | maxpool/2; out 480 + C_in channels."""

    def __init__(self, cin: int):
        super().__init__()
        self.branch3x3 = BasicConv2d(cin, 384, kernel_size=3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(cin, 64, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, kernel_size=3, stride=2)

    def forward(self, x: Tensor) -> Tensor:
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([self.branch3x3(x), b3, F.max_pool2d(x, 3, stride=2)], 1)


class FIDInceptionC(nn.Module):
    """17×17 block with factorised 7×7 convolutions; out 768 channels."""

    def __init__(self, cin: int, c7: int):
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 192, kernel_size=1)
        self.branch7x7_1 = BasicConv2d(cin, c7, kernel_size=1)
        self.branch7x7_2 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7_3 = BasicConv2d(c7, 192, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = BasicConv2d(cin, c7, kernel_size=1)
        self.branch7x7dbl_2 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = BasicConv2d(c7, 192, kernel_size=(1, 7), padding=(0, 3))
        self.branch_pool = BasicConv2d(cin, 192, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        d = x
        for i in range(1, 6):
            d = getattr(self, f"branch7x7dbl_{i}")(d)
        return torch.cat([self.branch1x1(x), b7, d, self.branch_pool(_avg3(x))], 1)


class InceptionD(nn.Module):
    """17→8 reduction (torchvision's, unpatched); out 512 + C_in channels."""

    def __init__(self, cin: int):
        super().__init__()
        self.branch3x3_1 = BasicConv2d(cin, 192, kernel_size=1)
        self.branch3x3_2 = BasicConv2d(192, 320, kernel_size=3, stride=2)
        self.branch7x7x3_1 = BasicConv2d(cin, 192, kernel_size=1)
        self.branch7x7x3_2 = BasicConv2d(192, 192, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7x3_3 = BasicConv2d(192, 192, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7x3_4 = BasicConv2d(192, 192, kernel_size=3, stride=2)

    def forward(self, x: Tensor) -> Tensor:
        b3 = self.branch3x3_2(self.branch3x3_1(x))
        b7 = self.branch7x7x3_4(self.branch7x7x3_3(self.branch7x7x3_2(self.branch7x7x3_1(x))))
        return torch.cat([b3, b7, F.max_pool2d(x, 3, stride=2)], 1)


class FIDInceptionE(nn.Module):
    """8×8 block with split 1×3/3×1 branches; out 2048 channels. ``pool="avg"`` is pytorch-fid's ``FIDInceptionE_1``
    (TF average pool without padded zeros); ``pool="max"`` is ``FIDInceptionE_2`` (the TF graph max-pools here)."""

    def __init__(self, cin: int, pool: str):
        super().__init__()
        self.pool = pool
        self.branch1x1 = BasicConv2d(cin, 320, kernel_size=1)
        self.branch3x3_1 = BasicConv2d(cin, 384, kernel_size=1)
        self.branch3x3_2a = BasicConv2d(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3_2b = BasicConv2d(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = BasicConv2d(cin, 448, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(448, 384, kernel_size=3, padding=1)
        self.branch3x3dbl_3a = BasicConv2d(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = BasicConv2d(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.branch_pool = BasicConv2d(cin, 192, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        s = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(s), self.branch3x3_2b(s)], 1)
        d = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        bd = torch.cat([self.branch3x3dbl_3a(d), self.branch3x3dbl_3b(d)], 1)
        pooled = _avg3(x) if self.pool == "avg" else F.max_pool2d(x, 3, stride=1, padding=1)
        return torch.cat([self.branch1x1(x), b3, bd, self.branch_pool(pooled)], 1)


class FIDInceptionV3(nn.Module):
    """The FID Inception-v3 up to the pool3 features, as a torchmetrics FID feature extractor.

    Input: (N, 3, H, W) uint8 in [0, 255] or float in [0, 1]; resized to 299×299 (bilinear, align_corners=False) as
    pytorch-fid does, mapped to [-1, 1]. Output: (N, 2048). ``num_features`` tells torchmetrics the size.
    """

    num_features = 2048

    def __init__(self):
        super().__init__()
        self.Conv2d_1a_3x3 = BasicConv2d(3, 32, kernel_size=3, stride=2)
        self.Conv2d_2a_3x3 = BasicConv2d(32, 32, kernel_size=3)
        self.Conv2d_2b_3x3 = BasicConv2d(32, 64, kernel_size=3, padding=1)
        self.Conv2d_3b_1x1 = BasicConv2d(64, 80, kernel_size=1)
        self.Conv2d_4a_3x3 = BasicConv2d(80, 192, kernel_size=3)
        self.Mixed_5b = FIDInceptionA(192, pool_features=32)
        self.Mixed_5c = FIDInceptionA(256, pool_features=64)
        self.Mixed_5d = FIDInceptionA(288, pool_features=64)
        self.Mixed_6a = InceptionB(288)
        self.Mixed_6b = FIDInceptionC(768, c7=128)
        self.Mixed_6c = FIDInceptionC(768, c7=160)
        self.Mixed_6d = FIDInceptionC(768, c7=160)
        self.Mixed_6e = FIDInceptionC(768, c7=192)
        self.Mixed_7a = InceptionD(768)
        self.Mixed_7b = FIDInceptionE(1280, pool="avg")
        self.Mixed_7c = FIDInceptionE(2048, pool="max")
        self.eval().requires_grad_(False)

    def forward(self, images: Tensor) -> Tensor:
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"FIDInceptionV3: expected images (N, 3, H, W), found {tuple(images.shape)}")
        x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
        if tuple(x.shape[-2:]) != (299, 299):
            x = F.interpolate(x, size=(299, 299), mode="bilinear", align_corners=False)
        x = 2.0 * x - 1.0
        x = self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x)))  # (N, 64, 147, 147)
        x = F.max_pool2d(x, 3, stride=2)  # (N, 64, 73, 73)
        x = self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x))  # (N, 192, 71, 71)
        x = F.max_pool2d(x, 3, stride=2)  # (N, 192, 35, 35)
        for name in ("5b", "5c", "5d", "6a", "6b", "6c", "6d", "6e", "7a", "7b", "7c"):
            x = getattr(self, f"Mixed_{name}")(x)  # ... -> (N, 2048, 8, 8)
        return x.mean(dim=(2, 3))  # (N, 2048) pool3


def load_fid_inception(value: str | None, device: torch.device | str = "cpu"
                       ) -> tuple[FIDInceptionV3 | None, str | None]:
    """FID Inception from ``cfg.eval.inception_weights``: the file ``pt_inception-2015-12-05-6726825d.pth`` (or a
    folder holding ``pt_inception-2015-12-05-*``). The classifier ``fc.*`` (1008 classes) is not needed and dropped.
    Returns ``(model, None)`` or ``(None, reason)``.
    """
    path, why = resolve_weights(value, "eval.inception_weights", glob=INCEPTION_GLOB)
    if path is None:
        return None, why
    model = FIDInceptionV3()
    sd = {k: v for k, v in load_state_dict(path).items() if not k.startswith(("fc.", "AuxLogits."))}
    load_exact(model, sd, path, "FID Inception-v3 (pytorch-fid)")
    return model.to(device).eval(), None


# ----------------------------------------------------------------------------------------------------------------------
# I3D (FVD)
# ----------------------------------------------------------------------------------------------------------------------


def load_i3d(value: str | None, device: torch.device | str = "cpu") -> tuple[torch.jit.ScriptModule | None,
                                                                            str | None]:
    """The StyleGAN-V I3D detector from ``cfg.eval.i3d_weights`` (``i3d_torchscript.pt`` or a folder holding it).

    Call convention: ``detector(videos, rescale=False, resize=True, return_features=True)`` with videos float
    (N, 3, T, H, W) in [-1, 1] -> (N, 400) logits-layer features (resized to 224×224 inside the detector).
    """
    path, why = resolve_weights(value, "eval.i3d_weights", names=(I3D_NAME,))
    if path is None:
        return None, why
    try:
        detector = torch.jit.load(str(path), map_location=device)
    except Exception as e:  # noqa: BLE001 - re-raised with the file name
        raise WeightsError(f"{path}: not a TorchScript I3D detector ({type(e).__name__}: {e})") from e
    return detector.eval(), None
