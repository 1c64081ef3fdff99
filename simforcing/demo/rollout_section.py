"""The demo report's long-rollout section: per-chunk drift of `sft` and `simforcing` against the recorded truth (the
condition from the student's own simulation chain, and from the robot's digital twin), the paired differences
simforcing − sft (per seed, and per episode with bootstrap intervals), the control, the state input read by the
probe instead of integrated, the drift curves and one episode's rollout."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from simforcing.config import ConfigError
from simforcing.demo.plan import ORACLE_CONDITION, REMASK, SEED, Plan, probe_state, run_tag, twin_condition
from simforcing.evaluate.results import ChunkSeries, RolloutDrift
from simforcing.evaluate.rollout_media import plot_drift
from simforcing.evaluate.tables import chunk_table
from simforcing.utils import fmt_num, relative_to

METRICS = (("psnr", "PSNR (dB)", 1.0), ("psnr_arm", "arm-region PSNR (dB)", 1.0), ("af_pos", "action error (cm)", 100.0))


def _read(folder: Path) -> Optional[RolloutDrift]:
    """The rollout a job wrote (None where it did not finish, or the file is of another kind)."""
    try:
        return RolloutDrift.read(folder, "the report's rollout section")
    except ConfigError:
        return None


@dataclass
class PairedDrift:
    """simforcing − sft per chunk of one metric on the same episodes: the mean over episodes and its 95 % bootstrap
    interval per chunk, and over all chunks (the interval of the episodes' means)."""

    mean: list[float]
    ci95: list[tuple[float, float]]
    mean_all: float
    ci95_all: tuple[float, float]

    def to_json(self) -> dict:
        return {"mean": self.mean, "ci95": [list(c) for c in self.ci95], "mean_all": self.mean_all,
                "ci95_all": list(self.ci95_all)}


@dataclass
class RolloutSection:
    """What the section shows: each rollout job's result by ``EvalKey.name`` (results.json's keys), the paired
    differences simforcing − sft per metric over episodes (``paired_episodes``) and per seed (``paired_seeds``: seed ->
    metric -> per-chunk differences), and the drift curves' picture."""

    runs: dict[str, RolloutDrift]
    paired_episodes: dict[str, PairedDrift]
    paired_seeds: dict[str, dict[str, list]]
    drift_png: Optional[str] = None

    def to_json(self) -> dict:
        return {"runs": {k: r.to_json() for k, r in self.runs.items()},
                "paired_episodes": {m: d.to_json() for m, d in self.paired_episodes.items()},
                "paired_seeds": self.paired_seeds, "drift_png": self.drift_png}


def bootstrap_ci(x: np.ndarray, n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile bootstrap interval of the mean of ``x`` (NaNs dropped)."""
    x = x[~np.isnan(x)]
    if len(x) < 2:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), (n, len(x)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def _per_episode(res: RolloutDrift, row: str, metric: str) -> np.ndarray:
    series = res.rows.get(row)
    v = None if series is None else series.per_episode_chunk.get(metric)
    return np.array([[np.nan if x is None else x for x in r] for r in v], float) if v else np.zeros((0, 0))


def paired(sf: RolloutDrift, sft: RolloutDrift) -> dict[str, PairedDrift]:
    """simforcing − sft per chunk on the same episodes (rollout row): mean and 95 % bootstrap interval over
    episodes, per metric."""
    out = {}
    for metric, _, _ in METRICS:
        a, b = _per_episode(sf, "rollout", metric), _per_episode(sft, "rollout", metric)
        if a.size == 0 or a.shape != b.shape:
            continue
        d = a - b  # (episodes, chunks)
        out[metric] = PairedDrift([float(np.nanmean(d[:, k])) for k in range(d.shape[1])],
                                  [bootstrap_ci(d[:, k], seed=k) for k in range(d.shape[1])],
                                  float(np.nanmean(d)), bootstrap_ci(np.nanmean(d, axis=1)))
    return out


def collect_rollouts(plan: Plan) -> Optional[RolloutSection]:
    """The section's numbers from the rollout folders (None when the demo ran none)."""
    folders = plan.rollouts.get("folders", {}) if plan.rollouts else {}
    if not folders:
        return None
    got = {key.name: _read(folder) for key, folder in folders.items()}  # by EvalKey.name: results.json's keys
    res = RolloutSection({k: v for k, v in got.items() if v is not None}, {}, {})
    sf, sft = got.get("simforcing"), got.get("sft")
    if sf and sft:
        res.paired_episodes = paired(sf, sft)
    for seed in plan.seeds:
        a, b = got.get(run_tag("simforcing", seed)), got.get(run_tag("sft", seed))
        if a and b:
            ra, rb = a.rows["rollout"].per_chunk, b.rows["rollout"].per_chunk
            res.paired_seeds[str(seed)] = {m: [x - y if x is not None and y is not None else None
                                               for x, y in zip(ra[m], rb[m])] for m, _, _ in METRICS if m in ra}
    if sf and sft:
        png = plan.out / "rollout" / "drift.png"
        plot_drift({"sft": sft, "simforcing": sf}, png, title=f"{sf.num_episodes} held-out episodes, "
                   f"{sf.chunks} chunks of {sf.chunk_frames[0]} frames: rollout (solid), restarted from the "
                   "recorded frame at every chunk (dashed), another episode's actions (dotted)",
                   rows=("rollout", "restart", "control", "copy-first", "vae-recon", "probe floor"))
        res.drift_png = str(png)
    return res


def _rows_for_table(runs: dict[str, RolloutDrift]) -> dict[str, ChunkSeries]:
    sf, sft = runs.get("simforcing"), runs.get("sft")
    sf_twin, sft_twin = (runs.get(twin_condition(m).name) for m in ("simforcing", "sft"))
    rows = {}
    for label, src, row in (("copy the first frame", sf or sft, "copy-first"), ("VAE reconstruction", sf or sft,
                                                                                 "vae-recon"),
                            ("sft: rollout", sft, "rollout"), ("sft: restarted every chunk", sft, "restart"),
                            ("sft: another episode's actions", sft, "control"),
                            ("simforcing: rollout", sf, "rollout"), ("simforcing: restarted every chunk", sf, "restart"),
                            ("simforcing: another episode's actions", sf, "control"),
                            ("simforcing: its simulation chain vs the recorded sim video", sf, "sim chain"),
                            ("sft, twin condition: rollout", sft_twin, "rollout"),
                            ("sft, twin condition: restarted every chunk", sft_twin, "restart"),
                            ("simforcing, twin condition: rollout", sf_twin, "rollout"),
                            ("simforcing, twin condition: restarted every chunk", sf_twin, "restart"),
                            ("the twin's rendering vs the recorded sim video", sf_twin, "sim chain"),
                            ("the probe on the recorded frames (floor)", sf or sft, "probe floor")):
        if src and row in src.rows:
            rows[label] = src.rows[row]
    return rows


def _ci(mean: float, ci: tuple, scale: float) -> str:
    lo, hi = ci
    if np.isnan(lo):
        return f"{mean * scale:+.2f}"
    mark = "**" if (lo > 0 or hi < 0) else ""
    return f"{mark}{mean * scale:+.2f}{mark} [{lo * scale:+.2f}, {hi * scale:+.2f}]"


def rollout_lines(res: Optional[RolloutSection], plan: Plan) -> list[str]:
    """The report's markdown for the section."""
    if not res or not res.runs:
        return []
    runs = res.runs
    any_run = runs.get("simforcing") or next(iter(runs.values()))
    lines = ["", "## Long rollouts: the world model chunk after chunk", "",
             f"{any_run.num_episodes} held-out episodes of {any_run.frames + 1} frames (their own dataset, "
             f"never trained on), each rolled out from its recorded first frame over {any_run.horizon} actions = "
             f"{any_run.chunks} chunks; every chunk starts from the previous chunk's last generated frame (decoded, "
             "re-encoded), its condition from the student's own simulation chain continued from its own last frame, "
             "its state input integrated from the commanded actions (never the recorded state). *Restarted every "
             "chunk*: the same model, actions and noise, each chunk from the recorded frame and state (the one-window "
             "number); the gap between the two is the drift. *Twin condition* (beyond the paper): every chunk's condition "
             "rendered by the robot's digital twin from the commanded actions (`sample.condition=render`) instead of "
             "the student's own simulation chain. Values per chunk (its 8 frames), mean over episodes.", ""]
    table_rows = _rows_for_table(runs)
    for metric, title, scale in METRICS:
        lines += [f"**{title}**", "", chunk_table(table_rows, metric, 2, scale), ""]
    pe = res.paired_episodes
    if pe:
        k = len(next(iter(pe.values())).mean)
        lines += ["**simforcing − sft, rollout, the same episodes and noise** (mean over episodes [95 % bootstrap "
                  "interval]; bold: the interval excludes 0; PSNR higher is better, action error lower is better)", "",
                  "| | " + " | ".join(f"chunk {i + 1}" for i in range(k)) + " | all |", "|---" * (k + 2) + "|"]
        for metric, title, scale in METRICS:
            if metric in pe:
                d = pe[metric]
                lines.append(f"| {title} | " + " | ".join(_ci(m, c, scale) for m, c in zip(d.mean, d.ci95))
                             + f" | {_ci(d.mean_all, d.ci95_all, scale)} |")
        lines.append("")
    if len(res.paired_seeds) > 1:
        lines += ["**simforcing − sft per seed** (rollout, mean over episodes; action error in cm)", "",
                  "| seed | metric | " + " | ".join(f"chunk {i + 1}" for i in range(any_run.chunks)) + " |",
                  "|---" * (any_run.chunks + 2) + "|"]
        for seed, d in res.paired_seeds.items():
            for metric, title, scale in METRICS:
                if metric in d:
                    lines.append(f"| {seed} | {title} | " + " | ".join(
                        "—" if v is None else f"{v * scale:+.2f}" for v in d[metric]) + " |")
        lines.append("")
    states = [(m, runs.get(m), runs.get(probe_state(m).name)) for m in ("sft", "simforcing")]
    if any(p for _, _, p in states):
        lines += ["**The state input of later chunks**: integrated from the commanded actions (default) or read from "
                  "the generated frames by the state probe (chained chunk to chunk); rollout, mean over chunks:", "",
                  "| model | state input | PSNR (dB) | arm PSNR (dB) | action error (cm) |", "|---|---|---|---|---|"]
        for m, a, p in states:
            for label, r in (("integrated", a), ("probe", p)):
                if r:
                    mm = r.rows["rollout"].mean
                    lines.append(f"| {m} | {label} | {fmt_num(mm.get('psnr'), 2)} | {fmt_num(mm.get('psnr_arm'), 2)} | "
                                 f"{fmt_num(None if mm.get('af_pos') is None else 100 * mm['af_pos'], 2)} |")
        lines.append("")
    for key, label in ((REMASK, "simulation chain re-masked from the recorded arm masks"),
                       (ORACLE_CONDITION, "the recorded simulation video as every chunk's condition")):
        r = runs.get(key.name)
        if r:
            mm = r.rows["rollout"].mean
            lines.append(f"- simforcing, {label}: PSNR {fmt_num(mm.get('psnr'), 2)} dB, arm PSNR "
                         f"{fmt_num(mm.get('psnr_arm'), 2)} dB, action error "
                         f"{fmt_num(None if mm.get('af_pos') is None else 100 * mm['af_pos'], 2)} cm (rollout, "
                         "mean over chunks)")
    if res.drift_png:
        lines += ["", f"![drift curves]({relative_to(res.drift_png, plan.out)})", ""]
    for m in ("simforcing", "sft"):
        strip = plan.out / "rollout" / run_tag(m, SEED) / "videos" / "episode_000.png"
        if strip.exists():
            lines += [f"**{m}**, one episode (rows: masked first frame, simulation chain, prediction, truth; columns: "
                      f"frame 0 and every chunk's last frame; the GIF/MP4 beside it has every frame) "
                      f"![{m} rollout]({relative_to(str(strip), plan.out)})", ""]
    return lines
