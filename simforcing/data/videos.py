"""Single videos for the video prior (stage 0, ``simforcing.prior``): no actions, no states.

    ds = VideoWindowDataset(cfg, root)        # every sim window of train + sim_pool, every real window of train
    ds.set_epoch(3)                            # redraw the windows, as PairedWindowDataset does
    item = ds[0]                               # {"video": (3, F, H, W) in [-1, 1], "text", "text_mask", "domain", ...}

The videos the world models see, stage 1 (sim of train + sim_pool) and stage 2 (sim and real of train) together, each
window on its own: a sim window and a real window of the same paired episode are two items. Windows, frames and text
follow :class:`simforcing.data.paired.PairedWindowDataset` (two of them, one per domain); ``len(ds)`` = sim windows +
real windows. The validation split is never read. ``counts``: episodes per domain; ``episodes``, ``skipped``,
``dropped``: as a PairedWindowDataset's (both domains).
"""

from __future__ import annotations

from pathlib import Path

import torch

from simforcing.config import Config
from simforcing.data.paired import PairedWindowDataset

SPLITS = {"sim": ("train", "sim_pool"), "real": ("train",)}


class VideoWindowDataset(torch.utils.data.Dataset):
    def __init__(self, cfg: Config, root: str | Path, epoch: int = 0, stats: dict | None = None):
        self.parts = {dom: PairedWindowDataset(cfg, root, splits, (dom,), epoch, stats)
                      for dom, splits in SPLITS.items()}
        self.stats = self.parts["sim"].stats  # stored with the checkpoints like every run's (actions are not used)
        sim, real = self.parts["sim"], self.parts["real"]
        self.skipped = sim.skipped + [s for s in real.skipped if s not in sim.skipped]
        self.dropped = sim.dropped + [s for s in real.dropped if s not in sim.dropped]  # shorter than one window
        self.episodes = sim.episodes + real.episodes  # what the checkpoints record (training.checks.data_record)
        self.counts = {dom: len(p.episodes) for dom, p in self.parts.items()}  # episodes per domain

    def set_epoch(self, epoch: int) -> None:
        for part in self.parts.values():
            part.set_epoch(epoch)

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts.values())

    def __getitem__(self, index: int) -> dict:
        for dom, part in self.parts.items():
            if index < len(part):
                item = part[index]
                return {"video": item[dom], "text": item["text"], "text_mask": item["text_mask"], "domain": dom,
                        "episode_id": item["episode_id"], "start": item["start"]}
            index -= len(part)
        raise IndexError(f"index beyond the {len(self)} windows")
