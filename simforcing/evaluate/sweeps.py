"""Sampler sweeps (paper App. Tab. A1–A4) -> JSON, markdown tables in the paper's layout and a heatmap PNG.

    simforcing sweep cfg   --ckpts RUN_p0 RUN_p03 RUN_p07 RUN_p1 --data DIR [--w 0 0.3 0.6 1] [--num-samples K]
    simforcing sweep steps --ckpt RUN --data DIR [--n-sim 1 5 10 20] [--n-real 1 5 10 20] [--w 0 0.3 0.6 1]

`sweep cfg` (Tab. A1): rows = the condition-retention probability p each checkpoint was trained with (read from the
run's config), columns = the guidance weight w; PSNR / SSIM. `sweep steps` (Tab. A2 PSNR, A3 SSIM, A4 latency):
rows = (N_s, N_r), columns = w.

All configurations see the same windows and the same noise per sample (evaluate.run). Reuse, stated in the outputs:
- within one checkpoint, the simulation rollout of sample i with N_s steps is computed once and shared by every N_r and
  w > 0 that needs it; each configuration's latency still includes that rollout's measured time;
- w = 0 runs no simulation, so its predictions do not depend on N_s: it is evaluated once per N_r (at the first N_s)
  and copied to the other N_s rows (``reused_from`` names the source). Its latency has no simulation cost — unlike
  the paper's implementation, which ran the unused simulation at w = 0.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from simforcing.config import Config, ConfigError
from simforcing.evaluate.results import CfgSweep, StepsSweep, SweepRow
from simforcing.evaluate.run import evaluate_sampler, sweep_probe
from simforcing.evaluate.tables import cfg_markdown, has_values, steps_markdown
from simforcing.runs.scored import ScoredRun
from simforcing.runs.loaded import eval_dataset, load_world_model
from simforcing.sample import sampler_for
from simforcing.utils import atomic_write, atomic_write_json, atomic_write_text, resolve_device

PAPER_W = (0.0, 0.3, 0.6, 1.0)
PAPER_STEPS = (1, 5, 10, 20)
NOTES = ("w = 0 rows: predictions are invariant to N_s (no simulation rollout runs); evaluated at the first N_s and "
         "reused for the others (see reused_from); their latency has no simulation cost.",
         "Simulation rollouts are shared across N_r and w > 0 of one N_s; each configuration's latency includes the "
         "full measured simulation time.",
         "Latency: mean over samples after the first (warm-up) of each configuration; includes first-frame encoding, "
         "simulation, real generation and decoding.")


def _device(cfg: Optional[Config], device) -> torch.device:
    return torch.device(device) if device is not None else resolve_device(cfg.train.device if cfg else "auto")


def sweep_steps(run_dir: str | Path, data_root: str | Path, cfg: Optional[Config] = None,
                n_sim: Sequence[int] = PAPER_STEPS, n_real: Sequence[int] = PAPER_STEPS, ws: Sequence[float] = PAPER_W,
                num_samples: Optional[int] = None, out_dir: str | Path = "sweep_steps", split: str = "val",
                device=None, step: Optional[int] = None, progress: bool = True) -> StepsSweep:
    """Tab. A2–A4 for one checkpoint. Writes OUT/sweep_steps.json, OUT/sweep_steps.md, OUT/sweep_steps.png."""
    dev = _device(cfg, device)
    wm = load_world_model(run_dir, cfg, dev, step, data_root)
    cfg = wm.cfg
    k = cfg.eval.num_samples if num_samples is None else int(num_samples)
    ds = eval_dataset(cfg, data_root, split, wm.stats)
    probe = sweep_probe(cfg, dev)
    rows: list[SweepRow] = []
    w0: dict[int, SweepRow] = {}  # n_real -> the evaluated w = 0 row
    for ns in n_sim:
        cache: dict = {}  # (sample, n_sim) -> SimRollout, shared by every n_real and w of this n_sim
        for nr in n_real:
            for w in ws:
                if float(w) == 0.0 and nr in w0:
                    rows.append(replace(w0[nr], n_sim=ns, reused_from={"n_sim": w0[nr].n_sim, "n_real": nr}))
                    continue
                sampler = sampler_for(wm, ns, nr, w)
                res = evaluate_sampler(sampler, ds, cfg, k, dev, sim_cache=cache, progress=progress,
                                       desc=f"N_s={ns} N_r={nr} w={w:g}", probe=probe)
                row = SweepRow.of(res, w, ns, nr)
                if float(w) == 0.0:
                    w0[nr] = row
                rows.append(row)
    out = Path(out_dir)
    keys = [(ns, nr) for ns in n_sim for nr in n_real]
    tables = {metric: _grid(rows, keys, ws, lambda r: (r.n_sim, r.n_real), metric)
              for metric in ("psnr", "ssim", "latency_s", "af_pos")}
    scored = ScoredRun.of(run_dir, str(wm.checkpoint.path), wm.checkpoint.step)
    result = StepsSweep(run=str(run_dir), checkpoint_step=wm.checkpoint.step, checkpoint=scored, split=split,
                        num_samples=k, n_sim=list(n_sim), n_real=list(n_real), w=[float(w) for w in ws],
                        mask_mode=cfg.sample.mask_mode, seed=cfg.sample.seed, configs=rows, tables=tables,
                        heatmap=str(out / "sweep_steps.png"), json=str(out / "sweep_steps.json"),
                        notes=[*NOTES, *[n for n in [scored.unfinished_note(str(run_dir))] if n]])
    heatmap(result.heatmap, tables, [f"({a},{b})" for a, b in keys], [f"{w:g}" for w in ws], "(N_s, N_r)",
            {"psnr": "PSNR (dB)", "ssim": "SSIM", "latency_s": "latency (s)",
             **({"af_pos": "action error"} if has_values(tables["af_pos"]) else {})})
    result.table_md = steps_markdown(result)
    atomic_write_json(out / "sweep_steps.json", result.to_json())
    atomic_write_text(out / "sweep_steps.md", result.table_md)
    return result


def sweep_cfg(run_dirs: Sequence[str | Path], data_root: str | Path, cfg: Optional[Config] = None,
              ws: Sequence[float] = PAPER_W, num_samples: Optional[int] = None, out_dir: str | Path = "sweep_cfg",
              split: str = "val", device=None, progress: bool = True) -> CfgSweep:
    """Tab. A1: checkpoints trained with different p × guidance weights w. Writes OUT/sweep_cfg.{json,md,png}.

    p is read from each run's config (conditioning.p); each checkpoint runs its own simulation rollouts (at
    sample.n_sim), shared across its w > 0.
    """
    if not run_dirs:
        raise ConfigError("sweep cfg: --ckpts needs at least one run folder")
    dev = _device(cfg, device)
    rows: list[SweepRow] = []
    keys: list[tuple] = []
    k = None
    scored: dict[str, ScoredRun] = {}
    for run_dir in run_dirs:
        wm = load_world_model(run_dir, copy.deepcopy(cfg) if cfg is not None else None, dev, data_root=data_root)
        c = wm.cfg
        scored[str(run_dir)] = ScoredRun.of(run_dir, str(wm.checkpoint.path), wm.checkpoint.step)
        p = float(c.conditioning.p)  # the run's own (merge_run_config keeps its conditioning section)
        key = (p, Path(run_dir).name)
        keys.append(key)
        k = c.eval.num_samples if num_samples is None else int(num_samples)
        ds = eval_dataset(c, data_root, split, wm.stats)
        probe = sweep_probe(c, dev)
        cache: dict = {}
        for w in ws:
            sampler = sampler_for(wm, w=w)
            res = evaluate_sampler(sampler, ds, c, k, dev, sim_cache=cache, progress=progress,
                                   desc=f"p={p:g} w={w:g}", probe=probe)
            used = sampler.settings()
            rows.append(SweepRow.of(res, w, used["n_sim"], used["n_real"], p=p, run=str(run_dir),
                                    checkpoint_step=wm.checkpoint.step))
        del wm
    dup = len({p for p, _ in keys}) < len(keys)
    labels = [f"p={p:g}" + (f" ({name})" if dup else "") for p, name in keys]
    tables = {m: _grid(rows, keys, ws, lambda r: (r.p, Path(r.run).name), m) for m in ("psnr", "ssim", "af_pos")}
    out = Path(out_dir)
    result = CfgSweep(runs=[str(r) for r in run_dirs], checkpoints=scored, split=split, num_samples=k,
                      w=[float(w) for w in ws], configs=rows, tables=tables, row_labels=labels,
                      heatmap=str(out / "sweep_cfg.png"), json=str(out / "sweep_cfg.json"))
    titles = {"psnr": "PSNR (dB)", "ssim": "SSIM", **({"af_pos": "action error"} if has_values(tables["af_pos"])
                                                     else {})}
    heatmap(result.heatmap, tables, labels, [f"{w:g}" for w in ws], "training p", titles)
    result.table_md = cfg_markdown(result)
    atomic_write_json(out / "sweep_cfg.json", result.to_json())
    atomic_write_text(out / "sweep_cfg.md", result.table_md + "\n")
    return result


# ----------------------------------------------------------------------------------------------------------------------
# Tables and heatmaps
# ----------------------------------------------------------------------------------------------------------------------


def _grid(rows: list[SweepRow], keys: list[tuple], ws: Sequence[float], key_of, metric: str) -> list[list]:
    """Rows in ``keys`` order × columns in ``ws`` order of ``metric`` (None where missing)."""
    at = {(key_of(r), r.w): getattr(r, metric) for r in rows}
    return [[at.get((key, float(w))) for w in ws] for key in keys]


def heatmap(path: str | Path, tables: dict, row_labels: Sequence[str], col_labels: Sequence[str], row_title: str,
            titles: dict) -> None:
    """One panel per metric (rows × columns, values written in the cells), saved as a PNG (a pyplot-free Figure, so
    no display and no global backend state)."""
    n = len(titles)
    fig = Figure(figsize=(3.2 * n + 1, 0.45 * len(row_labels) + 1.6))
    axes = fig.subplots(1, n, squeeze=False)
    for ax, (metric, title) in zip(axes[0], titles.items()):
        grid = np.array([[np.nan if v is None else v for v in row] for row in tables[metric]], dtype=float)
        cmap = "viridis_r" if metric.startswith("latency") else "viridis"
        im = ax.imshow(grid, cmap=cmap, aspect="auto")
        ax.set_xticks(range(len(col_labels)), col_labels)
        ax.set_yticks(range(len(row_labels)), row_labels)
        ax.set_xlabel("w")
        ax.set_ylabel(row_title)
        ax.set_title(title)
        for i in range(grid.shape[0]):
            for j in range(grid.shape[1]):
                if np.isfinite(grid[i, j]):
                    r, g, b, _ = im.cmap(im.norm(grid[i, j]))
                    ink = "k" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "w"  # readable on the cell colour
                    ax.text(j, i, f"{grid[i, j]:.3g}", ha="center", va="center", color=ink, fontsize=7)
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=110))
