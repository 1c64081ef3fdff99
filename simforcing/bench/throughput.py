"""Benchmark section 3, ``data``: windows per second through a DataLoader, from video decoding and from the latent
cache, on a small dataset written to a temporary folder."""

from __future__ import annotations

import copy
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from simforcing.bench.inputs import random_demo_vae
from simforcing.bench.options import BenchOptions
from simforcing.config import Config
from simforcing.data.format import EpisodeInfo, write_episode, write_meta
from simforcing.data.latent_cache import LatentWindowDataset
from simforcing.data.paired import PairedWindowDataset
from simforcing.data.stats import write_stats
from simforcing.data.text_cache import save_embedding, write_cache_info
from simforcing.prep.latents import encode_latent_cache


def write_bench_dataset(root: Path, cfg: Config, episodes: int, length: int, seed: int = 0) -> Path:
    """A small paired dataset at the config's resolution: smooth frames with a moving box (the arm mask), random
    actions/states, random text embeddings, stats. ``episodes`` train episodes + 1 val episode."""
    d = cfg.data
    h, w, t_len = d.height, d.width, max(length, d.window_steps)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    instructions = ("pick up the block", "open the drawer")
    infos, splits = [], {"train": [], "val": [], "sim_pool": []}
    for e in range(episodes + 1):
        eid = f"ep_{e:03d}"
        side = max(2, h // 3)
        x0 = (np.arange(t_len) * 2 + 5 * e) % max(1, w - side)  # (T,) box position
        mask = (xx[None] >= x0[:, None, None]) & (xx[None] < x0[:, None, None] + side) \
            & (yy[None] >= (h - side) // 2) & (yy[None] < (h + side) // 2)  # (T, H, W)
        base = np.stack([(xx * 255 // max(1, w - 1)), (yy * 255 // max(1, h - 1)), np.full_like(xx, 90)], -1)
        real = np.broadcast_to(base, (t_len, h, w, 3)).copy()
        real[mask] = (230, 230, 40)
        sim = np.zeros_like(real)
        sim[mask] = (200, 200, 200)
        actions = rng.uniform(-1, 1, (t_len - 1, d.action_dim)).astype(np.float32)
        states = rng.uniform(-1, 1, (t_len, d.state_dim)).astype(np.float32)
        write_episode(root, eid, sim.astype(np.uint8), real.astype(np.uint8), actions, states, mask.astype(np.uint8))
        infos.append(EpisodeInfo(eid, t_len, instructions[e % 2], True))
        splits["val" if e == episodes else "train"].append(eid)
    write_meta(root, {"fps": 10, "height": h, "width": w, "action_dim": d.action_dim, "state_dim": d.state_dim,
                      "video_layout": "separate", "sim_background": "black", "source": "simforcing.bench"},
               infos, splits)
    cache = root / "text_cache"
    g = torch.Generator().manual_seed(seed)
    for i, text in enumerate(instructions):
        save_embedding(cache, text, torch.randn(3 + i, cfg.model.text_dim, generator=g))
    write_cache_info(cache, "random-bench", cfg.model.text_dim, d.text_max_tokens)
    write_stats(root)
    return root


def _loader_pass(make_dataset: Callable[[], torch.utils.data.Dataset], batch: int, workers: int) -> dict:
    """One full pass of a fresh dataset (built before the clock starts; its decoded-episode cache empty) through a
    fresh DataLoader, as the training loop makes one per epoch: windows, seconds in all (worker start included),
    seconds to the first batch, and the windows/s overall and after the first batch (steady state)."""
    ds = make_dataset()
    t0 = time.perf_counter()
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=False, num_workers=workers)
    n = first_n = 0
    first_s = 0.0
    for item in loader:
        n += len(item["episode_id"])
        if not first_n:
            first_n, first_s = n, time.perf_counter() - t0
    total = time.perf_counter() - t0
    rest = total - first_s
    return {"workers": workers, "windows": n, "seconds": total, "first_batch_s": first_s, "windows_per_s": n / total,
            "steady_windows_per_s": (n - first_n) / rest if n > first_n and rest > 0 else None}


def _loader_passes(make_dataset: Callable, batch: int, workers: int, passes: int) -> dict:
    """The median pass (by total seconds) of ``passes`` passes."""
    runs = sorted((_loader_pass(make_dataset, batch, workers) for _ in range(passes)), key=lambda r: r["seconds"])
    return runs[(len(runs) - 1) // 2]


def bench_data(cfg: Config, opts: BenchOptions, log: Callable[[str], None]) -> dict:
    batch = opts.train_batch or cfg.train.batch_size
    out: dict = {"episodes": opts.data_episodes, "episode_length": max(opts.data_length, cfg.data.window_steps),
                 "windows_per_episode": cfg.data.windows_per_episode, "batch_size": batch,
                 "resolution": [cfg.data.height, cfg.data.width], "frames": cfg.data.frames,
                 "passes": opts.data_passes, "pixels": [], "latents": []}

    def record(kind: str, row: dict) -> None:
        out[kind].append(row)
        steady = row["steady_windows_per_s"]
        log(f"data: {kind}, {row['workers']} workers: {row['windows_per_s']:.1f} windows/s "
            f"(first batch after {row['first_batch_s'] * 1e3:.0f} ms; then "
            f"{'-' if steady is None else f'{steady:.1f}'} windows/s)")

    with tempfile.TemporaryDirectory(prefix="simforcing-bench-") as tmp:
        root = write_bench_dataset(Path(tmp) / "data", cfg, opts.data_episodes, opts.data_length)
        for nw in opts.workers:
            record("pixels", _loader_passes(lambda: PairedWindowDataset(cfg, root, ("train",), ("sim", "real")),
                                            batch, nw, opts.data_passes))
        vae_cfg = copy.deepcopy(cfg)
        if not vae_cfg.model.vae.path:
            if vae_cfg.model.vae.kind != "demo":
                out["latents"] = {"skipped": "model.vae.kind 'wan' without model.vae.path: cannot encode a cache"}
                return out
            random_demo_vae(cfg).save(Path(tmp) / "vae")
            vae_cfg.model.vae.path = str(Path(tmp) / "vae")
        cache = Path(tmp) / "cache"
        t0 = time.perf_counter()
        index = encode_latent_cache(vae_cfg, root, cache, splits=("train",), progress=False)
        enc_s = time.perf_counter() - t0
        n_enc = sum(len(e["windows"]) for e in index["episodes"])
        out["latent_encode"] = {"windows": n_enc, "seconds": enc_s, "windows_per_s": n_enc / enc_s}
        for nw in opts.workers:
            record("latents", _loader_passes(lambda: LatentWindowDataset(vae_cfg, cache, ("train",)), batch, nw,
                                             opts.data_passes))
    return out
