"""Writing a latent cache (`simforcing data encode`): K windows per episode encoded once by the frozen VAE.

    encode_latent_cache(cfg, DATA, CACHE, windows_per_episode=K, splits=("train", "sim_pool"))

The format, how epochs draw from the K cached windows and the reader (``LatentWindowDataset``) are in
``simforcing.data.latent_cache``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import save_file
from tqdm import tqdm

from simforcing.config import Config, ConfigError
from simforcing.data.check import PAIRED_SPLITS
from simforcing.data.latent_cache import FORMAT_NAME, FORMAT_VERSION, INDEX_FILE, ROWS_PER_SHARD, TEXT_FILE
from simforcing.data.paired import PairedWindowDataset
from simforcing.data.text_cache import instruction_key
from simforcing.models.vae import load_vae
from simforcing.utils import atomic_write, atomic_write_json, weights_digest


class _ShardWriter:
    """Buffers encoded rows and writes a safetensors shard every ``rows`` rows; :meth:`flush` at the end of each split
    so a shard never mixes paired and sim-only rows."""

    def __init__(self, out: Path, rows: int):
        self.out, self.rows = out, rows
        self.buffer: dict[str, list[torch.Tensor]] = {}
        self.shards: list[dict] = []

    def add(self, tensors: dict[str, torch.Tensor]) -> tuple[int, int]:
        """Add one row; returns (shard number, row in that shard)."""
        for k, v in tensors.items():
            self.buffer.setdefault(k, []).append(v.detach().to("cpu", torch.float32).contiguous())
        where = (len(self.shards), len(self.buffer["z_sim"]) - 1)
        if len(self.buffer["z_sim"]) >= self.rows:
            self.flush()
        return where

    def flush(self) -> None:
        if not self.buffer:
            return
        name = f"shard_{len(self.shards):05d}.safetensors"
        tensors = {k: torch.stack(v) for k, v in self.buffer.items()}  # (N, ...) per key
        atomic_write(self.out / name, lambda p: save_file(tensors, str(p)))
        self.shards.append({"file": name, "rows": int(tensors["z_sim"].shape[0]), "paired": "z_real" in tensors})
        self.buffer = {}


def encode_latent_cache(cfg: Config, data_root: str | Path, out: str | Path, windows_per_episode: int | None = None,
                        splits: Sequence[str] = ("train", "sim_pool"), batch_size: int = 16,
                        device: str | torch.device = "cpu", progress: bool = True) -> dict:
    """Encode K windows per episode of ``splits`` into ``out``; returns the index (also written to index.json)."""
    out = Path(out)
    if (out / INDEX_FILE).exists():
        raise FileExistsError(f"{out / INDEX_FILE}: a latent cache is already there; choose another --out")
    k = int(windows_per_episode or cfg.data.windows_per_episode)
    if k < 1:
        raise ConfigError(f"--windows-per-episode: got {k}; expected an integer >= 1")
    enc_cfg = copy.deepcopy(cfg)
    enc_cfg.data.windows_per_episode = k
    vae = load_vae(cfg, device)
    out.mkdir(parents=True, exist_ok=True)
    writer = _ShardWriter(out, ROWS_PER_SHARD)
    texts: dict[str, torch.Tensor] = {}
    episodes: list[dict] = []
    stats = None
    for split in splits:
        domains = ("sim", "real") if split in PAIRED_SPLITS else ("sim",)
        ds = PairedWindowDataset(enc_cfg, data_root, splits=(split,), domains=domains, epoch=0)
        stats = ds.stats if stats is None else stats
        paired = "real" in domains
        by_episode: dict[str, dict] = {}
        bar = tqdm(total=len(ds), desc=f"encode {split}", disable=not progress, dynamic_ncols=True)
        for lo in range(0, len(ds), batch_size):
            items = [ds[i] for i in range(lo, min(lo + batch_size, len(ds)))]
            with torch.no_grad():
                z = {d: vae.encode(torch.stack([it[d] for it in items]).to(device)) for d in domains}
            for j, it in enumerate(items):
                eid = it["episode_id"]
                if eid not in by_episode:
                    n = int(it["text_mask"].sum())
                    key = instruction_key(ds.episodes[ds.windows[lo + j][0]].info.instruction)
                    texts.setdefault(key, it["text"][:n].clone())
                    by_episode[eid] = {"episode_id": eid, "split": split, "has_real": paired,
                                       "instruction_key": key, "windows": []}
                    episodes.append(by_episode[eid])
                row = {"z_sim": z["sim"][j], "actions": it["actions"], "states": it["states"]}
                if paired:
                    row["z_real"] = z["real"][j]
                shard, r = writer.add(row)
                by_episode[eid]["windows"].append([shard, r, int(it["start"])])
            bar.update(len(items))
        bar.close()
        writer.flush()
    _write_text(out, texts)
    c, lat = cfg.model.vae.latent_channels, cfg.latent_frames
    h, w = cfg.latent_hw
    index = {
        "format": FORMAT_NAME, "version": FORMAT_VERSION, "data_root": str(Path(data_root).resolve()),
        "seed": cfg.train.seed, "windows_per_episode": k, "fixed_window": cfg.data.fixed_window,
        "frames": cfg.data.frames, "frame_stride": cfg.data.frame_stride, "height": cfg.data.height,
        "width": cfg.data.width, "views": cfg.data.views, "view_layout": cfg.data.view_layout,
        "vae": dict(vars(cfg.model.vae)), "latent_shape": [c, lat, h, w],
        "vae_digest": weights_digest(cfg.model.vae.path),
        "text_max_tokens": cfg.data.text_max_tokens, "text_dim": cfg.model.text_dim, "stats": stats,
        "splits": list(splits), "shards": writer.shards, "episodes": episodes,
    }
    atomic_write_json(out / INDEX_FILE, index)
    return index


def _write_text(out: Path, texts: dict[str, torch.Tensor]) -> None:
    tensors = {k: v.to(torch.float32).contiguous() for k, v in texts.items()}
    atomic_write(out / TEXT_FILE, lambda p: save_file(tensors, str(p)))
