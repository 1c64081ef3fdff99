"""Weights: Wan2.2 video-expert loading, action-expert init from Wan, frozen copies.

Two Wan2.2-TI2V-5B layouts load into the video expert, detected by their KEYS (not by file names):

- diffusers (``WanTransformer3DModel``): ``condition_embedder.*``, ``blocks.{i}.attn1.to_q.weight`` ...; a
  ``transformer/`` folder (``config.json`` + ``diffusion_pytorch_model*.safetensors`` + optional
  ``*.safetensors.index.json``) or a single file.
- original Wan2.2 (``blocks.{i}.self_attn.q.weight``, ``head.head.weight``, optional ``model.diffusion_model.``
  prefix): one safetensors file or a folder of shards; converted with diffusers' own
  ``convert_wan_transformer_to_diffusers`` (single-file loading utils).

diffusers names map to ours by a prefix rename: ``blocks.{i}.X`` → ``layers.{i}.video.X``, anything else → ``video.X``.
Keys that Wan cannot provide are *expected missing*: ``action.*``, ``layers.*.action.*``, ``layers.*.cond_proj.*``
(the P_j convolutions), ``cond_embed.*`` (the input's condition channels, ``conditioning.path`` concat/both),
``frame_actions.*`` (the per-frame action conditioning, ``model.action_conditioning`` frame/both), ``state_embed.*``;
they keep the model's initialisation (the P_j, ``cond_embed`` and the per-frame action term zero: the pretrained
start is exact). Other missing keys and unexpected keys are reported by name (and raise
with ``strict=True``, before anything is copied).

:func:`write_action_expert` (``simforcing model init-action-expert --preset P --weights WAN_PATH --out FILE``) writes
the action expert's initial weights (see :func:`shrink_tensor` for the exact rule); ``cfg.model.action_expert_weights``
points at that file.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

import torch
import torch.nn as nn
from safetensors import safe_open
from safetensors.torch import save_file

from simforcing.config import Config, ConfigError
from simforcing.models.world_model import build_world_model
from simforcing.utils import atomic_write, autocast_dtype

_ORIGINAL_PREFIX = "model.diffusion_model."
_IGNORED_UNEXPECTED = ("norm_added_q",)  # diffusers ignores these too (_keys_to_ignore_on_load_unexpected)
_EXPECTED_MISSING = re.compile(r"^(action\.|state_embed\.|cond_embed\.|frame_actions\.|"
                               r"layers\.\d+\.(action|cond_proj)\.)")
_ACTION_KEY = re.compile(r"^(action\.|layers\.\d+\.action\.)")


@dataclass
class LoadReport:
    """What a load did: keys are in the world model's naming."""

    path: str
    layout: str  # "diffusers", "original" or "simforcing-action-expert"
    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # wanted but absent
    expected_missing: list[str] = field(default_factory=list)  # absent by design (action expert, P_j, E, state token)
    unexpected: list[str] = field(default_factory=list)  # in the file, not in the model (file naming)

    def summary(self) -> str:
        return (f"{self.path} ({self.layout}): loaded {len(self.loaded)}, missing {len(self.missing)}, "
                f"expected-missing {len(self.expected_missing)}, unexpected {len(self.unexpected)}")


# ----------------------------------------------------------------------------------------------------------------------
# Files and layouts
# ----------------------------------------------------------------------------------------------------------------------


def safetensors_files(path: str | Path) -> list[Path]:
    """A safetensors file, or the shards of a folder (from its ``*.safetensors.index.json`` when present)."""
    p = Path(path)
    if p.is_file():
        if p.suffix != ".safetensors":
            raise ValueError(f"{p}: expected a .safetensors file (or a folder of them); got {p.suffix or 'no suffix'}")
        return [p]
    if not p.is_dir():
        raise FileNotFoundError(f"{p}: no such weights file or folder")
    indexes = sorted(p.glob("*.safetensors.index.json"))
    if indexes:
        try:
            weight_map = json.loads(indexes[0].read_text())["weight_map"]
        except (OSError, json.JSONDecodeError, KeyError) as e:
            raise ValueError(f"{indexes[0]}: cannot read 'weight_map' ({e})") from e
        files = [p / name for name in sorted(set(weight_map.values()))]
        absent = [str(f) for f in files if not f.is_file()]
        if absent:
            raise FileNotFoundError(f"{indexes[0]}: lists shards that do not exist: {', '.join(absent)}")
        return files
    files = sorted(p.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{p}: no *.safetensors files in this folder")
    return files


def detect_layout(keys: list[str], where: str) -> str:
    """'diffusers' or 'original' from the key names; ValueError naming ``where`` otherwise."""
    ks = [k[len(_ORIGINAL_PREFIX):] if k.startswith(_ORIGINAL_PREFIX) else k for k in keys]
    if any(k.startswith("condition_embedder.") or ".attn1." in k for k in ks):
        return "diffusers"
    if any(".self_attn." in k or k.startswith(("head.head.", "time_embedding.")) for k in ks):
        return "original"
    raise ValueError(f"{where}: not a Wan transformer checkpoint: expected diffusers keys (condition_embedder.*, "
                     f"blocks.N.attn1.*) or original Wan2.2 keys (blocks.N.self_attn.*, head.head.*); "
                     f"first keys: {', '.join(sorted(keys)[:5])}")


def ours_from_diffusers(key: str) -> str:
    """diffusers ``WanTransformer3DModel`` key -> world-model key."""
    m = re.match(r"^blocks\.(\d+)\.(.*)$", key)
    return f"layers.{m.group(1)}.video.{m.group(2)}" if m else f"video.{key}"


def diffusers_from_ours(key: str) -> Optional[str]:
    """World-model key -> diffusers key, or None for keys that are not part of the video expert."""
    m = re.match(r"^layers\.(\d+)\.video\.(.*)$", key)
    if m:
        return f"blocks.{m.group(1)}.{m.group(2)}"
    return key[len("video."):] if key.startswith("video.") else None


def _file_shapes(files: list[Path]) -> dict[str, tuple]:
    """file key -> tensor shape, read from the safetensors headers only."""
    shapes = {}
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            for k in sf.keys():
                shapes[k] = tuple(sf.get_slice(k).get_shape())
    return shapes


def _check_shapes(model: nn.Module, shapes: dict[str, tuple], where: str) -> None:
    """Every (model key -> file shape) must match before anything is copied; the model must be materialised."""
    if any(p.is_meta for p in model.parameters()):
        raise ValueError(f"{where}: the model is on the meta device; call to_empty(device=...) and "
                         "initialize_weights() before loading weights")
    ours = model.state_dict()
    bad = [f"{k}: expected shape {tuple(ours[k].shape)}, file has {s}" for k, s in shapes.items()
           if tuple(ours[k].shape) != s]
    if bad:
        raise ValueError(f"{where}: tensor shapes do not match the model ({len(bad)}): " + "; ".join(bad[:10]))


def _to_diffusers_names(tensors: dict, layout: str) -> dict:
    if layout == "diffusers":
        return tensors
    # imported here: diffusers' single-file utils take about a second to import, and only the original Wan layout
    # needs them (every `simforcing` command that builds a model imports this module)
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

    return convert_wan_transformer_to_diffusers(dict(tensors))


def _key_map(keys: list[str], layout: str) -> dict[str, str]:
    """file key -> diffusers key (renaming only; the converter runs on empty placeholders)."""
    if layout == "diffusers":
        return {k: k for k in keys}
    out = {}
    for k in keys:  # the converter renames key by key; run it on a placeholder to learn each new name
        (new,) = _to_diffusers_names({k: torch.empty(0)}, layout).keys()
        out[k] = new
    return out


def read_video_expert(path: str | Path, wanted: Optional[set] = None) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (world-model key, tensor) for every tensor of a Wan checkpoint (either layout), shard by shard.

    ``wanted``: only these world-model keys are read from disk."""
    files = safetensors_files(path)
    layout = detect_layout(list(_file_shapes(files)), str(path))
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            names = _key_map(list(sf.keys()), layout)
            for file_key, dkey in names.items():
                ours = ours_from_diffusers(dkey)
                if wanted is None or ours in wanted:
                    yield ours, sf.get_tensor(file_key)


# ----------------------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------------------


def _check_diffusers_config(model: nn.Module, path: Path) -> None:
    """Compare a diffusers ``config.json`` (when present) with the model's structure; ConfigError on a mismatch."""
    cfg_file = path / "config.json" if path.is_dir() else None
    if cfg_file is None or not cfg_file.is_file():
        return
    try:
        conf = json.loads(cfg_file.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{cfg_file}: unreadable config.json ({e})") from e
    if conf.get("_class_name") != "WanTransformer3DModel":
        return  # e.g. the original Wan2.2 repository's own config.json; tensor shapes are checked below
    block = model.layers[0].video
    ours = {"num_layers": len(model.layers), "num_attention_heads": block.attn1.heads,
            "attention_head_dim": block.attn1.head_dim, "ffn_dim": block.ffn.net[2].in_features,
            "in_channels": model.video.patch_embedding.in_channels,
            "patch_size": list(model.video.patch_size),
            "text_dim": model.video.condition_embedder.text_embedder.linear_1.in_features}
    field_of = {"num_layers": "model.num_layers", "num_attention_heads": "model.num_attention_heads",
                "attention_head_dim": "model.attention_head_dim", "ffn_dim": "model.ffn_dim",
                "in_channels": "model.vae.latent_channels", "patch_size": "model.patch_size",
                "text_dim": "model.text_dim"}
    for name, val in ours.items():
        if name in conf and (list(conf[name]) if isinstance(conf[name], (list, tuple)) else conf[name]) != val:
            raise ConfigError(f"{field_of[name]}: the model has {val} but {cfg_file} says {name}={conf[name]}")


def _assign(model: nn.Module, items: Iterator[tuple[str, torch.Tensor]], where: str) -> list[str]:
    params = dict(model.state_dict(keep_vars=True))
    loaded = []
    with torch.no_grad():
        for key, t in items:
            dst = params[key]
            dst.copy_(t.to(dst.dtype))
            loaded.append(key)
    return loaded


def _raise_if_strict(report: LoadReport, strict: bool) -> None:
    if strict and (report.missing or report.unexpected):
        raise ValueError(f"{report.path}: cannot load the {report.layout} weights strictly: missing keys "
                         f"{report.missing or 'none'}; unexpected keys {report.unexpected or 'none'}")


def load_video_expert_weights(model: nn.Module, path: str | Path, strict: bool = True) -> LoadReport:
    """Load Wan2.2 transformer weights (diffusers folder/file or original layout) into ``model``'s video expert.

    Checks every key and shape before copying anything. Returns a :class:`LoadReport`; with ``strict`` a missing
    video-expert key or an unexpected file key raises ValueError naming them."""
    path = Path(path)
    files = safetensors_files(path)
    file_shapes = _file_shapes(files)
    layout = detect_layout(list(file_shapes), str(path))
    _check_diffusers_config(model, path)
    model_keys = set(model.state_dict().keys())
    got, unexpected = {}, []
    for fk, dk in _key_map(list(file_shapes), layout).items():
        ours = ours_from_diffusers(dk)
        if ours in model_keys:
            got[ours] = file_shapes[fk]
        elif not any(s in fk for s in _IGNORED_UNEXPECTED):
            unexpected.append(fk)
    absent = sorted(model_keys - set(got))
    report = LoadReport(str(path), layout, unexpected=sorted(unexpected),
                        missing=[k for k in absent if not _EXPECTED_MISSING.match(k)],
                        expected_missing=[k for k in absent if _EXPECTED_MISSING.match(k)])
    _raise_if_strict(report, strict)
    _check_shapes(model, got, str(path))
    report.loaded = _assign(model, read_video_expert(path, wanted=set(got)), str(path))
    return report


def load_action_expert_weights(model: nn.Module, path: str | Path, strict: bool = True) -> LoadReport:
    """Load a file written by ``simforcing model init-action-expert`` (world-model key names).

    ``action.action_in.*`` is expected missing (no Wan counterpart: it keeps the model's init)."""
    f = Path(path)
    if not f.is_file() or f.suffix != ".safetensors":
        raise ValueError(f"{f}: expected the single .safetensors file written by `model init-action-expert`")
    if getattr(model, "action", None) is None:
        raise ConfigError(f"model.action_expert_weights={path} was given, but the model has no action expert "
                          "(model.use_action_expert false or model.action_conditioning 'frame')")
    shapes = _file_shapes([f])
    keys = list(shapes)
    model_keys = {k for k in model.state_dict() if _ACTION_KEY.match(k)}
    absent = sorted(model_keys - set(keys))
    report = LoadReport(str(path), "simforcing-action-expert",
                        unexpected=sorted(k for k in keys if k not in model_keys),
                        missing=[k for k in absent if not k.startswith("action.action_in.")],
                        expected_missing=[k for k in absent if k.startswith("action.action_in.")])
    _raise_if_strict(report, strict)
    _check_shapes(model, {k: s for k, s in shapes.items() if k in model_keys}, str(f))

    def items():
        with safe_open(str(f), framework="pt") as sf:
            for k in keys:
                if k in model_keys:
                    yield k, sf.get_tensor(k)

    report.loaded = _assign(model, items(), str(path))
    return report


def load_configured_weights(model: nn.Module, cfg: Config, strict: bool = True) -> list[LoadReport]:
    """``cfg.model.weights`` into the video expert, then ``cfg.model.action_expert_weights`` (each when set)."""
    reports = []
    if cfg.model.weights:
        reports.append(load_video_expert_weights(model, cfg.model.weights, strict))
    if cfg.model.action_expert_weights:
        reports.append(load_action_expert_weights(model, cfg.model.action_expert_weights, strict))
    return reports


def frozen_copy(model: nn.Module) -> nn.Module:
    """A deep copy in eval mode with every parameter frozen (the teacher)."""
    teacher = copy.deepcopy(model)
    teacher.eval()
    teacher.requires_grad_(False)
    return teacher


AUTOCAST_MODULES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)  # whose weights autocast casts on every call


def store_autocast_weights(frozen: nn.Module, dtype: torch.dtype) -> int:
    """Store the weights and biases of a frozen model's linear and convolution layers in ``dtype`` once, the casts
    autocast to ``dtype`` otherwise makes on every call: autocast caches the casts of trainable weights within its
    context, but not of frozen ones, so a frozen teacher paid two casts per layer per forward (a sixth of a bf16
    SimForcing step's operations were casts, docs/notebook/benchmark.md). The same values reach every product — its
    outputs under that autocast are bit-identical (``tests/test_compile.py``) — and its memory halves. Only for a
    model that runs under autocast to ``dtype`` (outside it the products would be in ``dtype``) and has no gradients.
    Returns the number of tensors stored."""
    if any(p.requires_grad for p in frozen.parameters()):
        raise ValueError("store_autocast_weights: the model has trainable parameters; expected a frozen model "
                         "(frozen_copy)")
    n = 0
    for module in frozen.modules():
        if isinstance(module, AUTOCAST_MODULES):
            for name in ("weight", "bias"):
                p = getattr(module, name, None)
                if p is not None and p.dtype != dtype:
                    p.data = p.data.to(dtype)
                    n += 1
    return n


def store_teacher_for_autocast(teacher: nn.Module, cfg: Config, device: torch.device) -> bool:
    """:func:`store_autocast_weights` on a single-process frozen teacher where training autocasts on ``device`` and
    ``train.teacher_autocast_weights`` is on (a sharded teacher gets bf16 from FSDP2's policy instead). Returns
    whether it stored them."""
    dtype = autocast_dtype(cfg, device)
    if dtype is None or not cfg.train.teacher_autocast_weights:
        return False
    store_autocast_weights(teacher, dtype)
    return True


# ----------------------------------------------------------------------------------------------------------------------
# Action expert from the video expert
# ----------------------------------------------------------------------------------------------------------------------


def action_source_key(key: str) -> Optional[str]:
    """Action-expert key -> the video-expert key it is shrunk from (None for ``action.action_in.*``)."""
    if key.startswith("action.action_in."):
        return None
    if key.startswith("action."):
        return "video." + key[len("action."):]
    return re.sub(r"^layers\.(\d+)\.action\.", r"layers.\1.video.", key)


def shrink_tensor(src: torch.Tensor, shape: tuple, key: str) -> torch.Tensor:
    """Shrink a video-expert tensor to an action-expert shape. The rule, dimension by dimension:

    - equal sizes are kept (e.g. the heads×head_dim side of the self-attention q/k/v/out and its QK-norms);
    - a smaller size keeps the FIRST entries (dim→action_hidden, ffn→action_ffn_dim; for head-aligned dims of the
      cross-attention this keeps whole heads). ``condition_embedder.time_proj`` (6·dim outputs) is sliced per
      modulation chunk: the first action_hidden of each of the 6 chunks;
    - a 2-D ``.weight`` (a Linear, out × in) whose INPUT dim shrank from n_in to m_in is multiplied by
      ``sqrt(n_in / m_in)``, so for unit-variance inputs the output variance is preserved (a sum over fewer terms);
      biases, norm weights and adaLN tables are sliced without rescaling.
    """
    out = src
    if len(shape) != src.dim():
        raise ValueError(f"{key}: cannot shrink a {tuple(src.shape)} tensor to {tuple(shape)}")
    for d, (s, t) in enumerate(zip(src.shape, shape)):
        if t == s:
            continue
        if t > s:
            raise ValueError(f"{key}: the action expert wants {t} along dim {d} but the video tensor has only {s}")
        if "time_proj." in key and d == 0:
            if s % 6 or t % 6:
                raise ValueError(f"{key}: expected 6 modulation chunks along dim 0; got {s} -> {t}")
            out = out.unflatten(0, (6, s // 6))[:, : t // 6].flatten(0, 1)
        else:
            out = out.narrow(d, 0, t)
    out = out.clone()
    if key.endswith(".weight") and out.dim() == 2 and src.shape[1] != shape[1]:
        out = (out.float() * math.sqrt(src.shape[1] / shape[1])).to(src.dtype)
    return out


def action_expert_shapes(cfg: Config) -> dict[str, tuple]:
    """Every action-expert tensor of the model ``cfg`` builds: world-model key -> shape (built on the meta device)."""
    if not cfg.model.has_action_expert:
        raise ConfigError(f"model.use_action_expert: {cfg.model.use_action_expert}, model.action_conditioning: "
                          f"{cfg.model.action_conditioning!r}; there is no action expert to initialise")
    return {k: tuple(v.shape) for k, v in build_world_model(cfg, meta=True).state_dict().items()
            if _ACTION_KEY.match(k)}


def action_expert_from_video(cfg: Config, video: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Action-expert tensors (world-model keys) shrunk from video-expert tensors (world-model keys)."""
    out = {}
    for key, shape in action_expert_shapes(cfg).items():
        src_key = action_source_key(key)
        if src_key is None:
            continue
        if src_key not in video:
            raise ValueError(f"video weights lack {src_key}, needed for the action expert's {key}")
        out[key] = shrink_tensor(video[src_key], shape, key)
    return out


def write_action_expert(cfg: Config, src: str | Path | None, out: str | Path) -> dict[str, torch.Tensor]:
    """The action expert's initial weights shrunk from the Wan2.2 video-expert weights at ``src`` (default
    ``cfg.model.weights``), written to the safetensors file ``out``; returns the tensors."""
    src = src or cfg.model.weights
    if not src:
        raise ConfigError("model.weights: not set and no --weights given; expected the Wan2.2 transformer weights")
    needed = {action_source_key(k) for k in action_expert_shapes(cfg)} - {None}
    video = dict(read_video_expert(src, wanted=needed))
    tensors = action_expert_from_video(cfg, video)
    meta = {"format": "simforcing-action-expert", "source": str(src), "action_hidden": str(cfg.model.action_hidden),
            "action_ffn_dim": str(cfg.model.action_ffn_dim), "rule": "slice first entries; sqrt(n_in/m_in) on inputs"}
    atomic_write(out, lambda p: save_file({k: v.contiguous() for k, v in tensors.items()}, str(p), meta))
    return tensors
