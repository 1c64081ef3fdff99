"""Latent cache: windows encoded once by the frozen VAE, so training skips video decoding and the VAE encoder.
This module is the format and the reader; the writer is ``simforcing.prep.latents.encode_latent_cache``.

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

import json
import os
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from simforcing.config import Config, ConfigError
from simforcing.data.format import DataError
from simforcing.utils import weights_digest

FORMAT_NAME = "simforcing-latents"
FORMAT_VERSION = 1
INDEX_FILE = "index.json"
TEXT_FILE = "text.safetensors"
ROWS_PER_SHARD = 256


# ----------------------------------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------------------------------


def read_index(cache: str | Path) -> dict:
    p = Path(cache) / INDEX_FILE
    if not p.exists():
        raise DataError("latent cache index is missing; run `simforcing data encode`", path=p, kind="missing_cache")
    try:
        index = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read ({e})", path=p, kind="bad_cache") from e
    if not isinstance(index, dict) or index.get("format") != FORMAT_NAME:
        raise DataError(f"field 'format' is {index.get('format') if isinstance(index, dict) else None!r}; expected "
                        f"{FORMAT_NAME!r}", path=p,
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
             ("data.views", index.get("views"), cfg.data.views),  # caches before views: one view
             ("data.view_layout", index.get("view_layout", "width"), cfg.data.view_layout),
             ("model.text_dim", index["text_dim"], cfg.model.text_dim)]
    pairs += [(f"model.vae.{k}", index["vae"].get(k), getattr(v, k))
              for k in ("kind", "latent_channels", "spatial_stride", "temporal_stride")]
    for name, cached, now in pairs:
        if cached != now:
            raise ConfigError(f"{name}: the latent cache {where} was encoded with {cached!r} but the config says "
                              f"{now!r}; re-encode with `simforcing data encode` or fix the override")
    cached = index.get("vae_digest")  # a cache from before the field: not checked
    now = weights_digest(v.path) if isinstance(cached, str) and v.path else None
    if now is not None and now != cached:
        raise ConfigError(f"model.vae.path: the latent cache {where} was encoded with another VAE (weights digest "
                          f"{cached}, {index['vae'].get('path')}) than {v.path} (digest {now}), which the run would "
                          "sample with; re-encode with `simforcing data encode` and this VAE, or give the cache's")


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
