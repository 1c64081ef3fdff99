"""Loss curves from a run's ``metrics.jsonl`` (one JSON object per logged step), and the seeds × initialisations
policy measurement (``plot_transfer``), as PNGs.

    plot_loss_curves("runs/x/metrics.jsonl", "runs/x/loss_curves.png")       # every loss term of one run
    compare_runs({"sft": "runs/sft", "simforcing": "runs/sf"}, "cmp.png", key="fm_real")   # one term, many runs

A loss term is any numeric field whose name is ``loss`` or a known term (fm_real, fm_sim, md_real, md_sim, value_real,
value_sim); ``grad_norm`` and ``lr`` get their own panels. Curves are drawn raw (thin) and smoothed with an
exponential moving average (thick); the y axis is logarithmic when every value is positive. Figures are pyplot-free
``matplotlib.figure.Figure`` objects saved to PNG, so no display is needed and no global backend is set.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from matplotlib import ticker
from matplotlib.figure import Figure

from simforcing.runs.folder import METRICS_FILE
from simforcing.utils import atomic_write, read_jsonl

LOSS_TERMS = ("loss", "fm_real", "fm_sim", "md_real", "md_sim", "value_real", "value_sim")
SIDE_PANELS = ("grad_norm", "lr")


def load_metrics(source: str | Path | Sequence[Mapping]) -> list[dict]:
    """Records from a metrics.jsonl path, a run folder (RUN/metrics.jsonl) or an already-loaded list."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            path = path / METRICS_FILE
        if not path.exists():
            raise FileNotFoundError(f"{path}: no metrics file; expected the metrics.jsonl a training run writes")
        return read_jsonl(path)
    return [dict(r) for r in source]


def series(records: Iterable[Mapping], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one numeric field, skipping records without it or with a non-finite value."""
    steps, values = [], []
    for r in records:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and "step" in r:
            steps.append(int(r["step"]))
            values.append(float(v))
    return steps, values


def ema(values: Sequence[float], alpha: float | None = None) -> list[float]:
    """Exponential moving average with bias correction (the first value is kept as is).

    ``alpha`` defaults to 20 / len(values) clipped to [0.02, 1]: about 20 effective points whatever the run length.
    """
    if alpha is None:
        alpha = min(1.0, max(0.02, 20.0 / max(1, len(values))))
    out, acc, weight = [], 0.0, 0.0
    for v in values:
        acc = (1 - alpha) * acc + alpha * v
        weight = (1 - alpha) * weight + alpha
        out.append(acc / weight)
    return out


def _axes_grid(n: int):
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(4.0 * cols, 3.0 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    fig.subplots_adjust(left=0.08 if cols > 1 else 0.14, right=0.98, bottom=0.1 if rows > 1 else 0.16, top=0.88,
                        wspace=0.28, hspace=0.45)
    flat = [a for row in axes for a in row]
    for a in flat[n:]:
        a.set_visible(False)
    return fig, flat[:n]


def _save(fig: Figure, out_png: str | Path, title: str | None = None) -> Path:
    """The figure (with its title, if any) written atomically to ``out_png``; returns the path."""
    if title:
        fig.suptitle(title, fontsize=11)
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out_png, lambda p: fig.savefig(p, format="png", dpi=100))
    return out_png


def _draw(ax, steps: list[int], values: list[float], label: str | None, smooth: bool = True) -> None:
    """Raw values thin and their EMA thick (``smooth``), or the raw values alone; log y when all positive."""
    if smooth:
        line = ax.plot(steps, values, lw=0.6, alpha=0.35)[0]
        ax.plot(steps, ema(values), lw=1.6, color=line.get_color(), label=label)
    else:
        ax.plot(steps, values, lw=1.4, label=label)
    if smooth and values and min(values) > 0:
        ax.set_yscale("log")
        # plain "0.01" labels: the default 10^x labels go through mathtext, slow for a per-run plot
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:.3g}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.grid(alpha=0.3)
    ax.set_xlabel("step")


def plot_loss_curves(source: str | Path | Sequence[Mapping], out_png: str | Path,
                     keys: Sequence[str] | None = None, title: str | None = None) -> Path:
    """One panel per loss term present (or per name in ``keys``), plus grad_norm and lr. Returns the PNG path."""
    records = load_metrics(source)
    if keys is None:
        total = series(records, "loss")
        keys = [k for k in (*LOSS_TERMS, *SIDE_PANELS) if series(records, k)[0]]
        keys = [k for k in keys if k == "loss" or series(records, k) != total]  # a lone term equal to the total
    if not keys:
        raise ValueError(f"plot_loss_curves: no numeric field among {LOSS_TERMS + SIDE_PANELS} in {len(records)} "
                         "records; expected metrics.jsonl lines like {\"step\": 1, \"loss\": 0.5, ...}")
    fig, axes = _axes_grid(len(keys))
    for ax, key in zip(axes, keys):
        steps, values = series(records, key)
        _draw(ax, steps, values, None, smooth=key != "lr")
        ax.set_title(key, fontsize=10)
    return _save(fig, out_png, title)


def compare_runs(runs: Mapping[str, str | Path | Sequence[Mapping]], out_png: str | Path,
                 key: str = "loss", title: str | None = None) -> Path:
    """One panel: field ``key`` of several runs (label -> run folder, metrics.jsonl or records)."""
    fig, (ax,) = _axes_grid(1)
    drawn = 0
    for label, src in runs.items():
        steps, values = series(load_metrics(src), key)
        if steps:
            _draw(ax, steps, values, label)
            drawn += 1
    if not drawn:
        raise ValueError(f"compare_runs: no run has a numeric {key!r} field (runs: {', '.join(runs)})")
    ax.set_title(title or key, fontsize=10)
    ax.legend(fontsize=8)
    return _save(fig, out_png)


def plot_transfer(blocks: Sequence, labels: Mapping[str, str], out_png: str | Path,
                  title: str | None = None) -> Path:
    """The seeds × initialisations measurement (``demo.transfer_stats.TransferAnalysis.blocks``): one panel per
    setting and budget; per initialisation every run's success (dots), the mean over seed clusters (bar) and its
    95 % interval (whiskers, clipped to 0–100 %)."""
    blocks = [b for b in blocks if b.inits]
    if not blocks:
        raise ValueError("plot_transfer: no block with initialisations (expected TransferAnalysis.blocks)")
    fig, axes = _axes_grid(len(blocks))
    for ax, block in zip(axes, blocks):
        names = list(block.inits)
        for i, name in enumerate(names):
            init = block.inits[name]
            rates = [100 * r.rate for r in init.per_run]
            offsets = [(k - (len(rates) - 1) / 2) * 0.25 / max(1, len(rates) - 1) for k in range(len(rates))]
            ax.scatter([i + o for o in offsets], rates, s=14, color="0.45", zorder=2)
            mean, ci = 100 * init.stats.mean, init.stats.ci95
            lo, hi = (max(0.0, 100 * ci[0]), min(100.0, 100 * ci[1])) if ci else (mean, mean)
            ax.errorbar([i], [mean], yerr=[[mean - lo], [hi - mean]], fmt="_", markersize=22, capsize=4, color="C0",
                        zorder=3)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels([labels.get(n, n) for n in names], fontsize=8, rotation=15)
        ax.set_xlim(-0.6, len(names) - 0.4)
        ax.set_ylim(0, 100)
        ax.set_ylabel("success, %", fontsize=9)
        ax.set_title(f"{block.setting}, {block.steps} steps", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    return _save(fig, out_png, title)
