"""Latent cache: windows encoded once by the frozen VAE, so training skips video decoding and the VAE encoder.

    simforcing data encode --preset demo --data DIR --out CACHE [--windows-per-episode K] [--splits train sim_pool]
    simforcing train ... --data.latent_cache=CACHE          (or pretrain)

Layout:

    CACHE/index.json               {"format": "simforcing-latents", "version", "data_root", "seed", "windows_per_episode",
                                    "fixed_window", "frames", "frame_stride", "height", "width", "vae": {kind, path,
                                    latent_channels, spatial_stride, temporal_stride}, "latent_shape": [C, L+1, h, w],
                                    "text_max_tokens", "text_dim", "stats", "shards": [{"file", "rows", "paired"}],
                                    "episodes": [{"episode_id", "split", "has_real", "instruction_key",
                                                  "windows": [[shard, row, start], ...]}]}
    CACHE/shard_00000.safetensors  z_sim float32 (N, C, L+1, h, w), z_real (paired shards only), actions (N, A_w, A)
                                   and states (N, F, S) min-max normalised with ``stats``
    CACHE/text.safetensors         one tensor per distinct instruction (key = text_cache.instruction_key): (n, D)

Windows and random windows. Training on pixels draws ``data.windows_per_episode`` fresh random windows per episode
every epoch (PairedWindowDataset, from (train.seed, epoch)). The cache cannot hold every possible window, so
``data encode`` draws K windows per episode ONCE (the dataset's epoch-0 draw with ``windows_per_episode = K``, from
the cache seed = train.seed) and encodes them. :class:`LatentWindowDataset` then draws, every epoch,
``data.windows_per_episode`` of those K cached windows per episode (without replacement when windows_per_episode
<= K, else with replacement and a warning), seeded by (train.seed, epoch). So the windows vary across epochs but
come from a fixed pool of K per episode: K = windows_per_episode gives the same windows every epoch (like one
epoch's draw repeated, reshuffled); K = windows_per_episode × epochs approaches fresh windows. With
``data.fixed_window`` the cache holds the one centre window per episode and every epoch uses it, exactly as the
pixel dataset does. Actions and states are normalised at encode time with the dataset's statistics (stored in the
index); a run that passes other statistics (e.g. stage 2 with its teacher's) is refused.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from simforcing.config import Config, ConfigError
from simforcing.data.format import DataError
from simforcing.data.text_cache import instruction_key
from simforcing.utils import atomic_write, atomic_write_json

FORMAT_NAME = "simforcing-latents"
FORMAT_VERSION = 1
INDEX_FILE = "index.json"
TEXT_FILE = "text.safetensors"
ROWS_PER_SHARD = 256


# ----------------------------------------------------------------------------------------------------------------------
# Encoding
# ----------------------------------------------------------------------------------------------------------------------


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
        from safetensors.torch import save_file

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
    from tqdm import tqdm

    from simforcing.data.check import PAIRED_SPLITS
    from simforcing.data.paired import PairedWindowDataset
    from simforcing.models.vae import load_vae

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
        "width": cfg.data.width, "vae": dict(vars(cfg.model.vae)), "latent_shape": [c, lat, h, w],
        "text_max_tokens": cfg.data.text_max_tokens, "text_dim": cfg.model.text_dim, "stats": stats,
        "splits": list(splits), "shards": writer.shards, "episodes": episodes,
    }
    atomic_write_json(out / INDEX_FILE, index)
    return index


def _write_text(out: Path, texts: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    tensors = {k: v.to(torch.float32).contiguous() for k, v in texts.items()}
    atomic_write(out / TEXT_FILE, lambda p: save_file(tensors, str(p)))


# ----------------------------------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------------------------------


def read_index(cache: str | Path) -> dict:
    p = Path(cache) / INDEX_FILE
    if not p.exists():
        raise DataError("latent cache index is missing; run `simforcing data encode`", path=p, kind="missing_cache")
    try:
        index = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise DataError(f"cannot read ({e})", path=p, kind="bad_cache") from e
    if index.get("format") != FORMAT_NAME:
        raise DataError(f"field 'format' is {index.get('format')!r}; expected {FORMAT_NAME!r}", path=p,
                        kind="bad_cache")
    return index


def check_compatible(index: dict, cfg: Config, where: Path) -> None:
    """ConfigError naming the first config field that differs from what the cache was encoded with."""
    v = cfg.model.vae
    pairs = [("data.frames", index["frames"], cfg.data.frames),
             ("data.frame_stride", index["frame_stride"], cfg.data.frame_stride),
             ("data.height", index["height"], cfg.data.height), ("data.width", index["width"], cfg.data.width),
             ("data.text_max_tokens", index["text_max_tokens"], cfg.data.text_max_tokens),
             ("data.fixed_window", index["fixed_window"], cfg.data.fixed_window),
             ("model.text_dim", index["text_dim"], cfg.model.text_dim)]
    pairs += [(f"model.vae.{k}", index["vae"].get(k), getattr(v, k))
              for k in ("kind", "latent_channels", "spatial_stride", "temporal_stride")]
    for name, cached, now in pairs:
        if cached != now:
            raise ConfigError(f"{name}: the latent cache {where} was encoded with {cached!r} but the config says "
                              f"{now!r}; re-encode with `simforcing data encode` or fix the override")


class LatentWindowDataset(torch.utils.data.Dataset):
    """Cached latent windows; items like PairedWindowDataset's but with ``z_sim``/``z_real`` (C, L+1, h, w) instead
    of pixels. See the module docstring for how epochs draw from the K cached windows per episode."""

    def __init__(self, cfg: Config, cache: str | Path, splits: Sequence[str] = ("train",),
                 domains: Sequence[str] = ("sim", "real"), epoch: int = 0, stats: dict | None = None):
        self.cfg, self.cache, self.domains = cfg, Path(cache), tuple(domains)
        self.index = read_index(self.cache)
        check_compatible(self.index, cfg, self.cache)
        self.stats = self.index["stats"]
        if stats is not None and not _same_stats(stats, self.stats):
            raise DataError("the cache's actions/states were normalised with other statistics than this run's "
                            "(e.g. the teacher checkpoint's); re-encode the cache from the same dataset stats",
                            path=self.cache / INDEX_FILE, kind="stats_mismatch")
        want_real = "real" in self.domains
        self.episodes = []
        for ep in self.index["episodes"]:
            if ep["split"] not in splits:
                continue
            if want_real and not ep["has_real"]:
                if ep["split"] in ("train", "val"):
                    raise DataError("cached without real latents but domains include 'real'", ep["episode_id"],
                                    self.cache / INDEX_FILE, kind="unpaired_episode")
                continue
            self.episodes.append(ep)
        if not self.episodes:
            raise DataError(f"no cached episode in splits {list(splits)} (cached splits: {self.index['splits']})",
                            path=self.cache / INDEX_FILE, kind="empty_split")
        k, want = self.index["windows_per_episode"], cfg.data.windows_per_episode
        if want > k and not cfg.data.fixed_window:
            warnings.warn(f"data.windows_per_episode={want} > the {k} cached windows per episode: drawing with "
                          f"replacement (encode with --windows-per-episode >= {want} to avoid repeats)", stacklevel=2)
        self._texts: dict[str, torch.Tensor] | None = None
        self._handles: dict[int, object] = {}
        self._pid = os.getpid()
        self.windows: list[tuple[int, int]] = []  # (episode number, cached window number)
        self.set_epoch(epoch)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        if self.cfg.data.fixed_window:
            self.windows = [(i, 0) for i in range(len(self.episodes))]
            return
        rng = np.random.default_rng([int(self.cfg.train.seed), self.epoch, 0x1A7E])
        want = self.cfg.data.windows_per_episode
        out = []
        for i, ep in enumerate(self.episodes):
            k = len(ep["windows"])
            picks = rng.choice(k, size=want, replace=want > k)
            out += [(i, int(j)) for j in picks]
        self.windows = out

    def __len__(self) -> int:
        return len(self.windows)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_handles"], state["_texts"] = {}, None
        return state

    def _shard(self, number: int):
        from safetensors import safe_open

        if self._pid != os.getpid():
            self._handles, self._pid = {}, os.getpid()
        h = self._handles.get(number)
        if h is None:
            path = self.cache / self.index["shards"][number]["file"]
            if not path.resolve().is_relative_to(self.cache.resolve()):
                raise DataError("shard path in index.json points outside the cache folder", path=path,
                                kind="bad_cache")
            try:
                h = self._handles[number] = safe_open(str(path), framework="pt")
            except Exception as e:  # noqa: BLE001 - safetensors raises several error types
                raise DataError(f"cannot open shard ({e})", path=path, kind="bad_cache") from e
        return h

    def _text(self, key: str) -> tuple[torch.Tensor, torch.Tensor]:
        from safetensors.torch import load_file

        if self._texts is None:
            self._texts = load_file(str(self.cache / TEXT_FILE))
        emb = self._texts[key]  # (n, D)
        n_max, dim = self.cfg.data.text_max_tokens, self.cfg.model.text_dim
        n = min(emb.shape[0], n_max)
        text = torch.zeros(n_max, dim)
        text[:n] = emb[:n]
        mask = torch.zeros(n_max, dtype=torch.bool)
        mask[:n] = True
        return text, mask

    def __getitem__(self, index: int) -> dict:
        ep_number, w = self.windows[index]
        ep = self.episodes[ep_number]
        shard, row, start = ep["windows"][w]
        h = self._shard(shard)
        item = {f"z_{d}": h.get_slice(f"z_{d}")[row] for d in self.domains}
        item["actions"] = h.get_slice("actions")[row]
        item["states"] = h.get_slice("states")[row]
        item["state0"] = item["states"][0].clone()
        item["text"], item["text_mask"] = self._text(ep["instruction_key"])
        item["episode_id"], item["start"] = ep["episode_id"], int(start)
        return item


def _same_stats(a: dict, b: dict) -> bool:
    try:
        return all(np.allclose(np.asarray(a[k][m], np.float64), np.asarray(b[k][m], np.float64), rtol=0, atol=1e-9)
                   for k in ("action", "state") for m in ("min", "max"))
    except (KeyError, TypeError, ValueError):
        return False


# ----------------------------------------------------------------------------------------------------------------------
# Command: simforcing data encode
# ----------------------------------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from simforcing.cli import add_config_args

    add_config_args(parser)
    parser.add_argument("--data", required=True, help="dataset folder")
    parser.add_argument("--out", required=True, help="cache folder to create")
    parser.add_argument("--windows-per-episode", type=int, default=None,
                        help="K windows per episode drawn once and encoded (default: data.windows_per_episode)")
    parser.add_argument("--splits", nargs="+", default=["train", "sim_pool"], help="splits to encode")
    parser.add_argument("--batch-size", type=int, default=16, help="windows per VAE call")
    parser.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    from simforcing.cli import config_from_args, dry_run
    from simforcing.utils import resolve_device

    cfg = config_from_args(args)
    cfg.data.root = args.data
    if args.dry_run:
        return dry_run(cfg)
    try:
        index = encode_latent_cache(cfg, args.data, args.out, args.windows_per_episode, tuple(args.splits),
                                    args.batch_size, resolve_device(cfg.train.device), progress=not args.no_progress)
    except (DataError, FileExistsError) as e:
        print(f"simforcing data encode: {e}", flush=True)
        return 1
    n = sum(len(e["windows"]) for e in index["episodes"])
    print(f"encoded {n} windows of {len(index['episodes'])} episodes into {len(index['shards'])} shards in {args.out}")
    return 0
