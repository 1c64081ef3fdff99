"""Small shared helpers: atomic file writes, seeding, device choice, mixed precision, JSON lines."""

from __future__ import annotations

import json
import os
import random
import tempfile
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

def atomic_write(path: str | Path, write: Callable[[Path], None]) -> None:
    """Write ``path`` via ``write(tmp_path)`` then an atomic rename; a crash leaves the old file intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual permissions
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda p: p.write_text(text))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, torch.Tensor):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def append_jsonl(path: str | Path, obj: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(obj, default=_json_default) + "\n")


def read_jsonl(path: str | Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device: 'cuda' requested but no CUDA device is available; use 'cpu' or 'auto'")
    return torch.device(name)


def autocast_context(cfg, device: torch.device | str, cuda_only: bool = False):
    """bf16 autocast when ``cfg.train.mixed_precision == "bf16"`` (``cfg`` a Config), else a null context.

    CUDA: only on a device that supports bf16. Other devices (CPU): autocast too, unless ``cuda_only`` — the sampler
    keeps full precision off CUDA; training autocasts wherever it is asked to.
    """
    device = torch.device(device)
    if cfg.train.mixed_precision != "bf16":
        return nullcontext()
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16) if torch.cuda.is_bf16_supported() else nullcontext()
    if cuda_only:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
