"""Does a world model start a policy better than the video model it came from? The numbers with their noise.

    res = transfer_analysis(rows, episodes, specs, budget, COMPARISONS)   # a TransferAnalysis (to_json / from_json)
    md = transfer_markdown(res, probe, labels)
    note = default_note(rows, episodes, inits, labels)                     # what one seed's table can show

Every policy of a block (a setting at a training budget) is evaluated on the same held-out scenes, so two policies
differ scene by scene. Three sources of noise: the scenes (the same for every policy: paired), the policy's
training seed, and — for a world-model initialisation — the world model's own training seed.

- **Per seed**: policy A (world-model seed s, policy seed p) against policy B (the same s when B is a world model,
  the same p): the mean over scenes of (success_A − success_B), with a 95 % interval from the scenes alone (normal
  approximation of the paired difference: mean ± 1.96 · sd / √n). It holds the two trainings fixed.
- **Over seeds**: the mean success of an initialisation is the mean of its clusters — world-model seeds (each the mean
  over its policy seeds) for a world model, policy seeds for the others — and its standard error the clusters' sd /
  √k, which carries the world model's training noise, the policy's and the scenes' (each cluster mean holds all
  three). The difference A − B gets a Welch interval (t quantile at the Welch–Satterthwaite degrees of freedom).
  **Established** when that interval excludes 0; with 3 clusters a side the t quantile is large (4.3 at 2 degrees
  of freedom), so only a difference well beyond the spread of the seeds is.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import fmean, stdev
from typing import TYPE_CHECKING, Optional

import numpy as np
from scipy import stats

from simforcing.policy.closed_loop.results import EpisodeOutcome, PolicyRow

if TYPE_CHECKING:  # the probe's module loads torch and the policy runner; the statistics need neither
    from simforcing.policy.probe import ProbeResult

TASK_ORDER = ("reach", "push", "grasp")
# A − B: the paper's claim first (world model > the video model it came from), then what separates the priors
COMPARISONS = (("simforcing", "video_base"), ("sft", "video_base"), ("simforcing", "sft"), ("video_base", "random"),
               ("simforcing", "random"), ("sft", "random"), ("simforcing", "simforcing_video"),
               ("simforcing_video", "random"))


def successes(episodes: dict[str, list[EpisodeOutcome]]) -> np.ndarray:
    """One run's outcomes {task: [EpisodeOutcome]} -> float (n,) in task order."""
    return np.array([float(o.success) for t in TASK_ORDER for o in episodes.get(t, [])])


@dataclass(frozen=True)
class SceneDiff:
    """Mean of a − b over the same scenes and its 95 % interval from the scenes (normal approximation)."""

    diff: float
    ci95: list[float]
    scenes: int

    def to_json(self) -> dict:
        return {"diff": self.diff, "ci95": list(self.ci95), "scenes": self.scenes}

    @classmethod
    def from_json(cls, d: dict) -> "SceneDiff":
        return cls(float(d["diff"]), list(d["ci95"]), int(d["scenes"]))


def paired_scene_diff(a: np.ndarray, b: np.ndarray) -> SceneDiff:
    """Mean of a − b over the same scenes and its 95 % interval from the scenes (normal approximation)."""
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired_scene_diff: the two runs must cover the same scenes; got {a.shape} and {b.shape}")
    d = a - b
    se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else 0.0
    m = float(d.mean())
    return SceneDiff(m, [m - 1.96 * se, m + 1.96 * se], int(d.size))


@dataclass(frozen=True)
class RunRate:
    """One policy run of a block: its label, world-model seed (None for another initialisation), policy seed, mean
    success over every scene and per task."""

    label: str
    wm_seed: Optional[int]
    seed: int
    rate: float
    tasks: dict[str, float]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "RunRate":
        return cls(d["label"], d["wm_seed"], d["seed"], float(d["rate"]), dict(d["tasks"]))


@dataclass(frozen=True)
class ClusterMean:
    """An initialisation's mean success over its clusters (world-model seeds, else policy seeds; ``cluster_means``)
    and its standard error and 95 % t interval over them (None with one cluster); ``runs``: the runs behind it."""

    mean: float
    se: Optional[float]
    clusters: int
    cluster_means: list[float]
    runs: int
    ci95: Optional[list[float]]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "ClusterMean":
        return cls(float(d["mean"]), d["se"], int(d["clusters"]), list(d["cluster_means"]), int(d["runs"]),
                   d.get("ci95"))


def cluster_mean(runs: list[RunRate]) -> ClusterMean:
    """Mean success over clusters (world-model seeds, else policy seeds) and its standard error (module docstring)."""
    by: dict = {}
    for r in runs:
        by.setdefault(r.wm_seed if r.wm_seed is not None else ("p", r.seed), []).append(r.rate)
    means = [fmean(v) for v in by.values()]
    k = len(means)
    se = stdev(means) / math.sqrt(k) if k > 1 else None
    m = fmean(means)
    half = stats.t.ppf(0.975, k - 1) * se if se is not None else None
    return ClusterMean(m, se, k, means, len(runs), [m - half, m + half] if half is not None else None)


@dataclass(frozen=True)
class WelchDiff:
    """A − B of two cluster means: the difference, its Welch 95 % interval and degrees of freedom, and whether it is
    established (the interval excludes 0); None where a side has one cluster."""

    diff: float
    ci95: Optional[list[float]]
    df: Optional[float]
    established: Optional[bool]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "WelchDiff":
        return cls(float(d["diff"]), d.get("ci95"), d.get("df"), d.get("established"))


def welch(a: ClusterMean, b: ClusterMean) -> WelchDiff:
    """A − B from two :func:`cluster_mean` results: the difference, its Welch 95 % interval, whether established."""
    d = a.mean - b.mean
    if a.se is None or b.se is None:
        return WelchDiff(d, None, None, None)
    va, vb = a.se ** 2, b.se ** 2
    se = math.sqrt(va + vb)
    if se == 0:
        return WelchDiff(d, [d, d], None, d != 0)
    df = (va + vb) ** 2 / ((va ** 2 / (a.clusters - 1) if va else 0) + (vb ** 2 / (b.clusters - 1) if vb else 0))
    half = float(stats.t.ppf(0.975, df)) * se
    lo, hi = d - half, d + half
    return WelchDiff(d, [lo, hi], df, bool(lo > 0 or hi < 0))


@dataclass(frozen=True)
class InitSummary:
    """One initialisation of a block: its cluster mean (``stats``) and every run's success."""

    stats: ClusterMean
    per_run: list[RunRate]

    def to_json(self) -> dict:
        return {**self.stats.to_json(), "per_run": [r.to_json() for r in self.per_run]}

    @classmethod
    def from_json(cls, d: dict) -> "InitSummary":
        return cls(ClusterMean.from_json(d), [RunRate.from_json(r) for r in d["per_run"]])


@dataclass(frozen=True)
class SeedCell:
    """A − B for one pair of runs trained at the same seeds (world-model seed, policy seed), over the scenes."""

    wm_seed: Optional[int]
    seed: int
    scenes: SceneDiff

    def to_json(self) -> dict:
        return {"wm_seed": self.wm_seed, "seed": self.seed, **self.scenes.to_json()}

    @classmethod
    def from_json(cls, d: dict) -> "SeedCell":
        return cls(d["wm_seed"], d["seed"], SceneDiff.from_json(d))


@dataclass(frozen=True)
class Comparison:
    """Initialisation ``a`` − ``b`` in one block: over seeds (Welch) and per pair of runs sharing their seeds."""

    a: str
    b: str
    welch: WelchDiff
    cells: list[SeedCell]

    @property
    def cells_a_better(self) -> int:
        return sum(c.scenes.ci95[0] > 0 for c in self.cells)

    @property
    def cells_b_better(self) -> int:
        return sum(c.scenes.ci95[1] < 0 for c in self.cells)

    def to_json(self) -> dict:
        return {"a": self.a, "b": self.b, **self.welch.to_json(), "cells": [c.to_json() for c in self.cells],
                "cells_a_better": self.cells_a_better, "cells_b_better": self.cells_b_better}

    @classmethod
    def from_json(cls, d: dict) -> "Comparison":
        return cls(d["a"], d["b"], WelchDiff.from_json(d), [SeedCell.from_json(c) for c in d["cells"]])


@dataclass(frozen=True)
class TransferBlock:
    """One setting at one training budget: every initialisation's summary and the comparisons asked for."""

    setting: str
    steps: int
    inits: dict[str, InitSummary]
    comparisons: list[Comparison]

    def to_json(self) -> dict:
        return {"setting": self.setting, "steps": self.steps,
                "inits": {k: v.to_json() for k, v in self.inits.items()},
                "comparisons": [c.to_json() for c in self.comparisons]}

    @classmethod
    def from_json(cls, d: dict) -> "TransferBlock":
        return cls(d["setting"], int(d["steps"]), {k: InitSummary.from_json(v) for k, v in d["inits"].items()},
                   [Comparison.from_json(c) for c in d["comparisons"]])


@dataclass(frozen=True)
class TransferAnalysis:
    """The seeds × initialisations measurement (module docstring): its blocks in setting and budget order, the
    held-out scenes per task and the comparisons (A, B) asked for."""

    blocks: list[TransferBlock]
    scenes_per_task: Optional[int]
    comparisons: list[list[str]]

    def to_json(self) -> dict:
        return {"blocks": [b.to_json() for b in self.blocks], "scenes_per_task": self.scenes_per_task,
                "comparisons": self.comparisons}

    @classmethod
    def from_json(cls, d: dict) -> "TransferAnalysis":
        return cls([TransferBlock.from_json(b) for b in d["blocks"]], d.get("scenes_per_task"),
                   [list(c) for c in d["comparisons"]])


def _paired_cells(runs_a: list[RunRate], runs_b: list[RunRate], v: dict[str, np.ndarray]) -> list[SeedCell]:
    """A − B over the scenes for every pair of runs at the same policy seed and (both world models) world-model
    seed; ``v``: each run's successes in scene order."""
    cells = []
    for ra in runs_a:
        for rb in runs_b:
            same_wm = rb.wm_seed is None or ra.wm_seed is None or rb.wm_seed == ra.wm_seed
            if rb.seed == ra.seed and same_wm:
                cells.append(SeedCell(ra.wm_seed if ra.wm_seed is not None else rb.wm_seed, ra.seed,
                                      paired_scene_diff(v[ra.label], v[rb.label])))
    return cells


def transfer_analysis(rows: dict[str, PolicyRow], episodes: dict, specs: dict, budget: dict,
                      comparisons=COMPARISONS) -> TransferAnalysis:
    """The measurement from the rows/episodes of the evaluations and the specs of ``demo.policy_section`` (label -> setting,
    init, wm_seed, seed, steps)."""
    blocks: dict = {}
    v: dict[str, np.ndarray] = {}
    for label, s in specs.items():
        if label not in episodes or episodes[label] is None:
            continue
        v[label] = successes(episodes[label])
        tasks = {t: rows[label].tasks[t].rate for t in TASK_ORDER if label in rows and t in rows[label].tasks}
        run = RunRate(label, s["wm_seed"], s["seed"], float(v[label].mean()), tasks)
        blocks.setdefault((s["setting"], s["steps"]), {}).setdefault(s["init"], []).append(run)
    out = []
    for (setting, steps), inits in blocks.items():
        summary = {init: InitSummary(cluster_mean(runs), runs) for init, runs in inits.items()}
        comps = [Comparison(a, b, welch(summary[a].stats, summary[b].stats), _paired_cells(inits[a], inits[b], v))
                 for a, b in comparisons if a in inits and b in inits]
        out.append(TransferBlock(setting, steps, summary, comps))
    order = {"action_only": 0, "unconditional": 1, "video_action": 2}
    out.sort(key=lambda blk: (order.get(blk.setting, 9), blk.steps))
    return TransferAnalysis(out, budget.get("full_eval_per_task"), [list(c) for c in comparisons])


def _pts(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "—"
    return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"


def _ci(ci: list | None) -> str:
    return "—" if ci is None else f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"


def transfer_markdown(res: TransferAnalysis, probe: Optional[ProbeResult], labels: dict) -> str:
    """The seeds × initialisations tables, the paired differences and the probe (module docstring)."""
    lines = [f"### Seeds × initialisations ({res.scenes_per_task} held-out scenes per task, success %)", ""]
    for blk in res.blocks:
        lines += [f"**{blk.setting}, {blk.steps} steps**", "",
                  "| initialisation | runs | success per run (WM seed / policy seed) | mean | 95 % interval "
                  "(over clusters) | reach · push · grasp |", "|---|---|---|---|---|---|"]
        for init, s in blk.inits.items():
            per = ", ".join(f"{_pts(r.rate)}" + (f" ({r.wm_seed}/{r.seed})" if r.wm_seed is not None
                                                 else f" (–/{r.seed})") for r in s.per_run)
            tasks = " · ".join(_pts(fmean([r.tasks.get(t, 0.0) for r in s.per_run])) for t in TASK_ORDER)
            lines.append(f"| {labels.get(init, init)} | {s.stats.runs} | {per} | **{_pts(s.stats.mean)}** | "
                         f"{_ci(s.stats.ci95).replace('+', '')} | {tasks} |")
        lines += ["", "| A − B | per seed: difference [95 % interval from the scenes] | A better / B better (per seed, "
                  "interval excludes 0) | mean | 95 % interval (Welch, over seeds) | established |",
                  "|---|---|---|---|---|---|"]
        for c in blk.comparisons:
            cells = "; ".join(f"{_pts(x.scenes.diff, True)} {_ci(x.scenes.ci95)}" for x in c.cells)
            w = c.welch
            est = "—" if w.established is None else ("**yes**" if w.established else "no")
            lines.append(f"| {labels.get(c.a, c.a)} − {labels.get(c.b, c.b)} | {cells} | "
                         f"{c.cells_a_better} / {c.cells_b_better} of {len(c.cells)} | "
                         f"**{_pts(w.diff, True)}** | {_ci(w.ci95)} | {est} |")
        lines.append("")
    if probe:
        lines += ["### What the frozen video expert gives an action-only policy (linear probe, held-out scenes)", "",
                  probe.table_md, "",
                  f"Ridge read-out of each layer's first-frame keys and values (no state token), fitted on "
                  f"{probe.n_fit} frames of the training scenes, scored on {probe.n_test} frames of held-out "
                  "scenes: RMS 3-D error and R². 'layout mean' = knowing which of the layouts the scene is and "
                  "nothing else (the object moves only by the layout's jitter)."]
    return "\n".join(lines)


def default_note(rows: dict, episodes: dict, inits: dict, labels: dict) -> str:
    """What the default one-seed table can and cannot show, with its paired differences over the scenes."""
    by_init = {inits[k]: k for k in rows}
    parts = []
    for a, b in COMPARISONS:
        if a in by_init and b in by_init and episodes.get(by_init[a]) and episodes.get(by_init[b]):
            d = paired_scene_diff(successes(episodes[by_init[a]]), successes(episodes[by_init[b]]))
            parts.append(f"{labels.get(a, a)} − {labels.get(b, b)}: {_pts(d.diff, True)} points {_ci(d.ci95)}")
    n = next((len(successes(e)) for e in episodes.values() if e), None)
    text = ("One world model and one policy seed per row; success % with 95 % Wilson intervals over the scenes. "
            "What this table can show: whether a policy learnt the task at all (against the floor and the expert), "
            "and, paired over the same scenes, how two rows differ for these two trainings")
    if parts:
        text += f" ({'; '.join(parts)}; intervals from the {n} scenes only)"
    text += (". What it cannot show: which initialisation is the better start — another world-model seed or policy "
             "seed moves a row by more than these intervals; `simforcing demo --full` measures that noise "
             "(docs/notebook/video_prior.md). A run of the same commands on another machine or under load differs "
             "within the intervals.")
    return text
