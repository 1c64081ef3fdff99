"""Instruction embeddings into a dataset's text cache (`simforcing data embed-text`), and the finishing step of a
freshly generated dataset.

    embed_dataset(root, cfg)          # every distinct instruction of meta/episodes.jsonl, encoded once
    finalize_dataset(root)            # min-max statistics + the demo text cache (after `data synth`)

The encoder is ``simforcing.models.text`` (it cleans each prompt as Wan2.2 does before tokenising); the cache format
is ``simforcing.data.text_cache``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from simforcing.config import Config, load_config
from simforcing.data.format import read_episodes, read_splits
from simforcing.data.stats import write_stats
from simforcing.data.text_cache import (cache_dir, clear_cache, has_embedding, read_cache_info, save_embedding,
                                        write_cache_info)
from simforcing.models.text import TextEncoder, load_text_encoder

log = logging.getLogger(__name__)


def embed_dataset(root: str | Path, cfg: Config, encoder: TextEncoder | None = None, batch_size: int = 16) -> int:
    """Embed every distinct instruction of ``root``'s meta/episodes.jsonl into the cache; returns how many were
    computed. Present embeddings are kept unless the cache was written by another encoder / dim / token limit, in
    which case the whole cache is recomputed.
    """
    cache = cache_dir(root, cfg.data.text_cache)
    instructions = sorted({ep.instruction for ep in read_episodes(root).values()})
    encoder = encoder or load_text_encoder(cfg)
    wanted = {"encoder": encoder.name, "text_dim": encoder.dim, "max_tokens": encoder.max_tokens}
    info = read_cache_info(cache) if (cache / "info.json").is_file() else None
    if info != wanted:
        if info is not None:
            log.warning("text cache %s was written by %s; recomputing every embedding with %s", cache,
                        info, wanted)
        clear_cache(cache)
        todo = instructions
    else:
        todo = [s for s in instructions if not has_embedding(cache, s)]
    cache.mkdir(parents=True, exist_ok=True)
    for i in range(0, len(todo), batch_size):
        chunk = todo[i:i + batch_size]
        for text, emb in zip(chunk, encoder.encode(chunk, batch_size)):
            save_embedding(cache, text, emb)
    write_cache_info(cache, encoder.name, encoder.dim, encoder.max_tokens)
    return len(todo)


def finalize_dataset(out: str | Path) -> None:
    """Min–max stats (train + sim_pool) and the demo text-embedding cache for a freshly generated dataset. An
    evaluation-only dataset (no train or sim_pool episode: e.g. long validation episodes for rollouts) gets the
    statistics of its val split, recorded in stats.json ``computed_on`` — a model normalises with the statistics its
    checkpoint stores, never with an evaluation set's."""
    splits = read_splits(out)
    training = [s for s in ("train", "sim_pool") if splits.get(s)]
    write_stats(out, training or ["val"])
    embed_dataset(out, load_config("demo"))
