"""Benchmark section 4, ``scaling``: one forward's time, peak memory and FLOPs against the number of frames and the
resolution, and its plot."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, ScalarFormatter

from simforcing.bench.inputs import bench_model, latent_batch
from simforcing.bench.measure import flops_split, peak_bytes, time_calls
from simforcing.bench.options import BenchOptions
from simforcing.config import Config, ConfigError


def scaling_points(cfg: Config, opts: BenchOptions) -> list[dict]:
    """{sweep, frames, height, width}: the frame sweep at the preset's resolution (21 as Bridge, 33 as InternData-A1,
    then longer; frame stride 1, so F − 1 actions) and the resolution sweep at 21 frames (the preset's resolution ×
    each scale, plus 224×320 in the full run)."""
    d = cfg.data
    pts = [{"sweep": "frames", "frames": f, "height": d.height, "width": d.width} for f in opts.scaling_frames]
    res = [(d.height * s, d.width * s) for s in opts.scaling_scales]
    if opts.scaling_paper_res and (224, 320) not in res and 224 * 320 > res[-1][0] * res[-1][1]:
        res.append((224, 320))
    frames = 21 if 21 in opts.scaling_frames else opts.scaling_frames[-1]
    pts += [{"sweep": "resolution", "frames": frames, "height": h, "width": w} for h, w in res]
    return pts


def bench_scaling(cfg: Config, device: torch.device, opts: BenchOptions, log: Callable[[str], None]) -> dict:
    model = bench_model(cfg, device)
    rows: list[dict] = []
    done: dict = {}  # (frames, height, width) -> measured row (the sweeps share the preset's point)
    for pt in scaling_points(cfg, opts):
        key = (pt["frames"], pt["height"], pt["width"])
        if key in done:
            rows.append({**done[key], **pt})
            continue
        c = copy.deepcopy(cfg)
        c.data.frames, c.data.height, c.data.width, c.data.frame_stride = pt["frames"], pt["height"], pt["width"], 1
        try:
            c.validate()
        except ConfigError as e:
            rows.append({**pt, "skipped": str(e)})
            continue
        lat = latent_batch(c, 1, device)
        z0, zt = lat["z_real"][:, :, :1], lat["z_real"][:, :, 1:]
        tau = torch.full((1,), 0.5, device=device)

        def fwd(lat=lat, z0=z0, zt=zt, tau=tau):
            with torch.no_grad():
                return model(zt, tau, z0, lat["actions"], lat["state0"], lat["text"], text_mask=lat["text_mask"])

        secs = time_calls(fwd, opts.scaling_repeats, 1, device).median
        mem = peak_bytes(fwd, device)
        fl = flops_split(c)
        n_video = c.latent_frames * c.tokens_per_latent_frame
        n_action = c.data.actions_per_window if c.model.has_action_expert else 0
        rows.append({**pt, "latent_frames": c.latent_frames, "video_tokens": n_video, "action_tokens": n_action,
                     "tokens": n_video + n_action, "forward_s": secs, "peak_bytes": mem, "flops": fl["total"],
                     "attention_flop_share": fl["attention"] / fl["total"],
                     "achieved_flops_per_s": fl["total"] / secs})
        done[key] = rows[-1]
        log(f"scaling: {pt['sweep']:<10} F={pt['frames']:>2} {pt['height']}x{pt['width']}: {n_video + n_action:>5} "
            f"tokens, {secs * 1e3:8.1f} ms, {mem / 2**20:7.1f} MiB, attention {fl['attention'] / fl['total']:.0%}")
    exponents = {}  # growth exponent d log t / d log N between the ends of each sweep (1: linear, 2: quadratic)
    for sweep in ("frames", "resolution"):
        pts = [r for r in rows if r["sweep"] == sweep and "forward_s" in r]
        if len(pts) >= 2 and pts[-1]["tokens"] > pts[0]["tokens"]:
            exponents[sweep] = math.log(pts[-1]["forward_s"] / pts[0]["forward_s"]) / math.log(
                pts[-1]["tokens"] / pts[0]["tokens"])
    return {"model_width": cfg.model.dim, "num_layers": cfg.model.num_layers, "repeats": opts.scaling_repeats,
            "frame_stride": 1, "points": rows, "time_exponents": exponents}


def plot_scaling(scaling: dict, path: Path) -> Optional[Path]:
    """Forward time and peak memory against tokens (log-log) with ∝N and ∝N² guides anchored at the first point."""
    pts = [r for r in scaling.get("points", []) if "forward_s" in r]
    if not pts:
        return None
    fig = Figure(figsize=(11, 4.2))
    axes = fig.subplots(1, 2)
    for ax, key, unit, scale in ((axes[0], "forward_s", "forward time (ms)", 1e3),
                                 (axes[1], "peak_bytes", "peak memory (MiB)", 1 / 2**20)):
        labelled = set()
        for sweep, marker in (("frames", "o"), ("resolution", "s")):
            rs = sorted((r for r in pts if r["sweep"] == sweep), key=lambda r: r["tokens"])
            if not rs:
                continue
            ax.plot([r["tokens"] for r in rs], [r[key] * scale for r in rs], marker=marker, label=f"{sweep} sweep")
            for r in rs:
                name = f"F{r['frames']} {r['height']}x{r['width']}"
                if name not in labelled:
                    labelled.add(name)
                    ax.annotate(name, (r["tokens"], r[key] * scale), fontsize=6, xytext=(3, -9),
                                textcoords="offset points")
        n0 = min(r["tokens"] for r in pts)
        y0 = min(r[key] for r in pts if r["tokens"] == n0) * scale
        ns = np.geomspace(n0, max(r["tokens"] for r in pts), 20)
        ax.plot(ns, y0 * ns / n0, "k--", lw=0.8, label="∝ N (linear layers)")
        ax.plot(ns, y0 * (ns / n0) ** 2, "k:", lw=0.8, label="∝ N² (attention)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(ScalarFormatter())
            axis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("tokens per sample (video + action)")
        ax.set_ylabel(unit)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"one forward, width {scaling['model_width']}, {scaling['num_layers']} layers")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
