"""Instruction-embedding cache: one safetensors file per distinct instruction.

    ROOT/text_cache/info.json                 {"encoder": name, "text_dim": D, "max_tokens": N}
    ROOT/text_cache/<key>.safetensors         "embedding" float32 (n <= N, D)   key = sha1(instruction)[:20]

Filled by `simforcing data embed-text` (simforcing.prep.text); read by the dataset.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.numpy import load_file
from safetensors.torch import save_file

from simforcing.data.format import DataError
from simforcing.utils import atomic_write, atomic_write_json


def cache_dir(root: str | Path, override: str | None = None) -> Path:
    return Path(override) if override else Path(root) / "text_cache"


def instruction_key(instruction: str) -> str:
    return hashlib.sha1(instruction.encode("utf-8")).hexdigest()[:20]


def embedding_path(cache: Path, instruction: str) -> Path:
    return cache / f"{instruction_key(instruction)}.safetensors"


def save_embedding(cache: Path, instruction: str, embedding: torch.Tensor) -> None:
    """embedding: (n, D) real tokens only (no padding)."""
    emb = embedding.detach().to("cpu", torch.float32).contiguous()
    if emb.ndim != 2:
        raise ValueError(f"embedding must be (n, D), got {tuple(emb.shape)}")
    atomic_write(embedding_path(cache, instruction),
                 lambda p: save_file({"embedding": emb}, str(p), metadata={"instruction": instruction}))


def write_cache_info(cache: Path, encoder: str, text_dim: int, max_tokens: int) -> None:
    atomic_write_json(cache / "info.json", {"encoder": encoder, "text_dim": text_dim, "max_tokens": max_tokens})


def read_cache_info(cache: Path) -> dict:
    p = cache / "info.json"
    if not p.exists():
        raise DataError("text-embedding cache is missing; run `simforcing data embed-text DIR`", path=p,
                        kind="missing_text_cache")
    try:
        info = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read ({e})", path=p, kind="missing_text_cache") from e
    if not isinstance(info, dict):
        raise DataError(f"a JSON {type(info).__name__}; expected an object", path=p, kind="missing_text_cache")
    return info


def clear_cache(cache: Path) -> None:
    """Remove the info file first (a crash then forces a full recompute), then the embedding files."""
    (cache / "info.json").unlink(missing_ok=True)
    if cache.is_dir():
        for p in cache.glob("*.safetensors"):
            if re.fullmatch(r"[0-9a-f]{20}\.safetensors", p.name):  # instruction_key names only
                p.unlink()


def has_embedding(cache: Path, instruction: str) -> bool:
    return embedding_path(cache, instruction).exists()


def pad_embedding(embedding, max_tokens: int, text_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """One instruction's embedding (n, D) (numpy or a CPU tensor: real tokens only) as the network reads it: (text
    (max_tokens, D) float32, its first min(n, max_tokens) rows the embedding's and the rest zero; mask (max_tokens,)
    bool, True on those rows). The one padding of the dataset, the world-model policy evaluation and the API.
    ValueError when the embedding is not (n, ``text_dim``)."""
    emb = np.asarray(embedding, np.float32)
    if emb.ndim != 2 or emb.shape[1] != text_dim:
        raise ValueError(f"embedding has shape {emb.shape}; expected (n, {text_dim}) (model.text_dim)")
    n = min(emb.shape[0], max_tokens)
    text = np.zeros((max_tokens, text_dim), np.float32)
    text[:n] = emb[:n]
    mask = np.zeros(max_tokens, bool)
    mask[:n] = True
    return text, mask


def load_embedding(cache: Path, instruction: str, max_tokens: int, text_dim: int,
                   episode: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(text (max_tokens, D) zero-padded float32, mask (max_tokens,) bool): :func:`pad_embedding` of the cached one."""
    p = embedding_path(cache, instruction)
    if not p.exists():
        raise DataError(f"instruction {instruction!r} has no cached embedding; run `simforcing data embed-text`",
                        episode, p, kind="missing_text_embedding")
    try:
        emb = load_file(str(p))["embedding"]
    except (SafetensorError, KeyError, OSError) as e:
        raise DataError(f"cannot read the cached embedding ({e})", episode, p, kind="bad_text_embedding") from e
    try:
        return pad_embedding(emb, max_tokens, text_dim)
    except ValueError as e:
        raise DataError(str(e), episode, p, kind="bad_text_embedding") from e
