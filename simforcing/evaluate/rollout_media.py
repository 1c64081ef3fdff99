"""Pictures of long rollouts: the drift curves (PNG) and one episode's rollout as MP4 / GIF / PNG frame strip."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import numpy as np  # noqa: E402

from simforcing.media import Clip, blank_panel, frame_strip, side_by_side, to_uint8_frames, write_clip  # noqa: E402
from simforcing.evaluate.results import RolloutDrift  # noqa: E402
from simforcing.utils import atomic_write  # noqa: E402

CURVES = (("psnr", "PSNR (dB) ↑", 1.0), ("psnr_arm", "arm-region PSNR (dB) ↑", 1.0), ("af_pos", "action error (cm) ↓",
                                                                                       100.0))
STYLE = {"rollout": "-", "restart": "--", "control": ":", "sim chain": "-.", "copy-first": "-", "vae-recon": "-",
         "probe floor": "-"}
REFERENCE_COLOURS = {"copy-first": "0.55", "vae-recon": "0.2", "probe floor": "0.75"}


def plot_drift(results: dict[str, RolloutDrift], png: str | Path, title: str = "",
               rows: tuple = ("rollout", "restart", "control", "copy-first", "vae-recon", "probe floor")) -> Path:
    """Per-frame curves of ``results`` (label -> a rollout's result; the references are drawn once, from the first)
    for PSNR, arm-region PSNR and the action error; vertical lines at chunk boundaries."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    first = next(iter(results.values()))
    bounds = np.cumsum([0] + list(first.chunk_frames))
    for ax, (metric, label, scale) in zip(axes, CURVES):
        for ci, (name, res) in enumerate(results.items()):
            for row in rows:
                r = res.rows.get(row)
                vals = None if r is None else r.per_frame.get(metric)
                if not vals or (row in REFERENCE_COLOURS and ci > 0):
                    continue
                y = np.array([np.nan if v is None else v * scale for v in vals])
                x = np.arange(1, len(y) + 1)
                colour = REFERENCE_COLOURS.get(row, colours[ci % len(colours)])
                who = row if row in REFERENCE_COLOURS else f"{name} {row}".strip()
                ax.plot(x, y, STYLE.get(row, "-"), color=colour, lw=1.6, label=who)
        for b in bounds[1:-1]:
            ax.axvline(b + 0.5, color="0.85", lw=0.8, zorder=0)
        ax.set_xlabel("frame")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="best")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    png = Path(png)
    atomic_write(png, lambda p: fig.savefig(p, dpi=110, format="png"))
    plt.close(fig)
    return png


def write_rollout_media(stem: str | Path, res, j: int, batch: dict, summary: RolloutDrift, cfg, upscale: int = 4,
                        fps: int = 6) -> Clip:
    """Episode ``j`` of a rollout: ``stem.mp4`` / ``stem.gif`` with four panels side by side (masked first frame |
    simulation chain | prediction | truth) over every frame, and ``stem.png``, a strip of the same four rows at the
    chunk boundaries (frame 0, then every chunk's last frame)."""
    truth = to_uint8_frames(batch["real"][j], upscale)
    f, h, w, _ = truth.shape
    pred = to_uint8_frames(res.video[j], upscale)
    sim = (to_uint8_frames(res.sim_video[j], upscale) if res.sim_video is not None
           else blank_panel(f, h, w, "w=0: none"))
    masked = (np.repeat(to_uint8_frames(res.masked_frame[j][:, None], upscale), f, axis=0)
              if res.masked_frame is not None else blank_panel(f, h, w, "no mask"))
    eid = summary.episode_ids[j] if j < len(summary.episode_ids) else str(j)
    title = f"{eid}: {summary.horizon} actions, {summary.chunks} chunks, state {summary.state_input}"
    video = side_by_side([masked, sim, pred, truth], ["masked first frame", "simulation chain", "prediction",
                                                      "truth"], title)
    cols = np.cumsum([0] + list(summary.chunk_frames))
    return write_clip(stem, video, frame_strip([x[cols] for x in (masked, sim, pred, truth)],
                                               ["masked", "sim chain", "pred", "truth"]), fps)

