"""Pictures of the world-model policy evaluation: the agreement scatter plot and side-by-side episode videos."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from simforcing.media import BLANK, Clip, _text, frame_strip, side_by_side, write_clip  # noqa: E402
from simforcing.policy.closed_loop.results import AgreementResult  # noqa: E402
from simforcing.utils import atomic_write  # noqa: E402

MARKERS = "osD^v<>Ph*X"


def _bar(r) -> list[list[float]]:
    """A rate's error bar [[below], [above]]: a Wilson bound at 0 % or 100 % may sit a rounding error past the rate
    (1.0 against 0.9999999999999999), which matplotlib refuses as a negative length."""
    return [[max(0.0, r.rate - r.ci95[0])], [max(0.0, r.ci95[1] - r.rate)]]


def scatter_plot(res: AgreementResult, png: str | Path) -> Path:
    """World-model success against simulator success, one marker per policy, a colour per world model, the 95 %
    intervals as error bars and the y = x line."""
    fig, ax = plt.subplots(figsize=(6.2, 6.0))
    ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--", label="y = x")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ci, (env, rows) in enumerate(res.envs.items()):
        for pi, p in enumerate(res.players):
            x, y = res.sim[p], rows[p]
            ax.errorbar(x.rate, y.rate, xerr=_bar(x), yerr=_bar(y), fmt=MARKERS[pi % len(MARKERS)],
                        color=colours[ci % len(colours)], ms=6, alpha=0.85, capsize=2, lw=0.8,
                        label=env if pi == 0 else None)
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("success in the simulator")
    ax.set_ylabel("success judged inside the world model")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    keys = "; ".join(f"{MARKERS[i % len(MARKERS)]} {p}" for i, p in enumerate(res.players))
    ax.set_title("policies: " + keys, fontsize=6, wrap=True)
    fig.tight_layout()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(png, lambda p: fig.savefig(p, dpi=120, format="png"))
    plt.close(fig)
    return png


def _annotate(frames: np.ndarray, verdicts: list, upscale: int) -> np.ndarray:
    """uint8 (T, H, W, 3) -> upscaled, each frame with the judge's verdict written on it ("✓ success" / "·")."""
    out = frames.repeat(upscale, axis=1).repeat(upscale, axis=2)
    res = []
    for t, f in enumerate(out):
        v = verdicts[t] if t < len(verdicts) else None
        label = "" if v is None else ("judge: success" if v else "judge: -")
        res.append(_text(np.ascontiguousarray(f), (2, 2), label, fill=(80, 255, 80) if v else (255, 255, 255)))
    return np.stack(res)


def episode_video(stem: str | Path, panels: dict[str, tuple[np.ndarray, list]], title: str, upscale: int = 4,
                  fps: int = 4) -> Clip:
    """One episode side by side: ``panels`` label -> (frames uint8 (T, H, W, 3), per-frame judge verdicts); shorter
    panels hold their last frame. Writes stem.mp4, stem.gif and stem.png (rows = panels, every 4th frame)."""
    t = max(len(f) for f, _ in panels.values())
    rows = []
    for frames, verdicts in panels.values():
        pad = np.concatenate([frames, np.repeat(frames[-1:], t - len(frames), axis=0)]) if len(frames) < t else frames
        vpad = list(verdicts) + [verdicts[-1] if verdicts else None] * (t - len(verdicts))
        rows.append(_annotate(pad, vpad, upscale))
    wide = max(r.shape[2] for r in rows)  # a multi-view world model's frames hold both cameras: the others padded
    rows = [r if r.shape[2] == wide else np.pad(r, ((0, 0), (0, 0), (0, wide - r.shape[2]), (0, 0)),
                                                 constant_values=BLANK) for r in rows]
    video = side_by_side(rows, list(panels), title)
    cols = np.arange(0, t, 4)
    return write_clip(stem, video, frame_strip([r[cols] for r in rows], list(panels), label_w=110), fps)
