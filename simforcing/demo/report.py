"""The demo's results: read what its jobs wrote, summarise, and write results.json, report.md and report.html.

Units: the synthetic benchmark's states are metric, so the action-following error (the state probe's end-effector
position error, state units) is shown in centimetres.
"""

from __future__ import annotations

import base64
import html as _h
import json
import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from simforcing.config import ConfigError
from simforcing.demo.plan import (BASE_METHODS, ORACLE_CONDITION, P_RUNS, EvalKey, Plan, one_step,
                                  own_rollout_in_sim, run_tag, teacher_in_sim)
from simforcing.demo.fewstep_section import FewStepSection, collect_fewstep, fewstep_lines
from simforcing.demo.policy_results import PolicySectionResult
from simforcing.demo.rollout_section import RolloutSection, collect_rollouts, rollout_lines
from simforcing.demo.estimate_section import EvaluatorsSection, collect_estimate, estimate_lines
from simforcing.demo.scene_section import SceneSection, collect_scene, scene_lines
from simforcing.demo.fidelity_section import FidelitySection, collect_fidelity, fidelity_lines
from simforcing.demo.schedule import ScheduleSummary
from simforcing.demo.views_section import ViewsSection, collect_views, views_lines
from simforcing.demo.wm_eval_section import WorldModelEvalSection, collect_wm_eval, wm_eval_lines
from simforcing.evaluate.results import CfgSweep, StepsSweep, WindowEvaluation, WindowScores
from simforcing.evaluate.tables import cfg_markdown, steps_markdown
from simforcing.utils import atomic_write_json, atomic_write_text, fmt_num, relative_to

KEYS = ("psnr", "ssim", "psnr_arm", "af_pos", "af_pos_moving", "af_control_pos", "af_floor_pos", "lpips", "fid", "fvd",
        "latency_s", "forwards_per_sample", "num_samples")
PAIRED = ("psnr", "psnr_arm", "af_pos", "af_pos_moving")  # the paired seed differences simforcing − sft
CM = 100.0  # metres -> centimetres


@dataclass(frozen=True)
class ScoreRow:
    """One row of the report's tables: the ``KEYS`` of one evaluation's scores (``evaluate.results.WindowScores``),
    or their means over seeds (None where no seed has a value)."""

    psnr: Optional[float] = None
    ssim: Optional[float] = None
    psnr_arm: Optional[float] = None
    af_pos: Optional[float] = None
    af_pos_moving: Optional[float] = None
    af_control_pos: Optional[float] = None
    af_floor_pos: Optional[float] = None
    lpips: Optional[float] = None
    fid: Optional[float] = None
    fvd: Optional[float] = None
    latency_s: Optional[float] = None
    forwards_per_sample: Optional[float] = None
    num_samples: Optional[float] = None

    @classmethod
    def of(cls, scores: WindowScores) -> "ScoreRow":
        return cls(**{k: scores.metric(k) for k in KEYS})

    @classmethod
    def mean(cls, rows: list[Optional["ScoreRow"]]) -> "ScoreRow":
        return cls(**{k: _mean([getattr(r, k) for r in rows if r is not None]) for k in KEYS})

    def to_json(self) -> dict:
        return asdict(self)


def _read(folder: Path) -> Optional[ScoreRow]:
    """The scores of the evaluation a job wrote in ``folder`` (None where it did not finish)."""
    try:
        return ScoreRow.of(WindowEvaluation.read(folder, "the demo report").scores)
    except ConfigError:
        return None


def _mean(vals: list) -> Optional[float]:
    vals = [v for v in vals if v is not None]
    return statistics.fmean(vals) if vals else None


def _std(vals: list) -> Optional[float]:
    vals = [v for v in vals if v is not None]
    return statistics.stdev(vals) if len(vals) > 1 else None


def _sweep(kind, folder: Optional[Path]):
    """The sweep a job wrote in ``folder`` (None where none ran or it did not finish)."""
    try:
        return None if folder is None else kind.read(folder, "the demo report")
    except ConfigError:
        return None


# Where the gain is lost (the report's decomposition table, in its order): each row's label and evaluation.
DECOMPOSITION = (("simulation: copy the first frame", EvalKey("copy-first", "sim")),
                 ("simulation: VAE reconstruction", EvalKey("vae-recon", "sim")),
                 ("simulation: stage-1 teacher, 1 step", teacher_in_sim(1)),
                 ("simulation: stage-1 teacher, 10 steps", teacher_in_sim(10)),
                 ("simulation: sft student's own rollout (N_s = 1)", own_rollout_in_sim("sft")),
                 ("simulation: simforcing student's own rollout (N_s = 1) = its condition",
                  own_rollout_in_sim("simforcing")),
                 ("real: simforcing, condition = its own rollout", EvalKey("simforcing")),
                 ("real: simforcing, condition = the recorded sim video (upper bound)", ORACLE_CONDITION))


@dataclass
class DemoSummary:
    """The report's headline: per method the mean row over seeds, the paired seed differences simforcing − sft
    (``paired``: seed and the ``PAIRED`` differences; ``paired_mean``: their mean and std), whether each base method
    beats copying the first frame (PSNR, action error), whether simforcing beats sft in every seed, the share of the
    arm region's headroom (copy → VAE ceiling) closed, and the one-line summary."""

    rows: dict[str, ScoreRow]
    paired: list[dict]
    paired_mean: dict[str, dict]
    beats_copy: dict[str, dict]
    simforcing_beats_sft_every_seed: dict[str, bool]
    arm_headroom_closed: Optional[float]
    line: str

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class DemoResults:
    """Everything the report shows, read from the files the jobs wrote (results.json names each evaluation by its
    ``EvalKey.name``): every evaluation's row (``evals``, None where it did not finish), the sweeps, the videos, the
    long-rollout, world-model-evaluation and policy sections, the seconds of each job (``wall_time_reused``: the jobs
    whose seconds are an earlier run's), the budget and the commands. ``methods``, ``seeds``: the plan's."""

    methods: list[str]
    seeds: list[int]
    evals: dict[EvalKey, Optional[ScoreRow]]
    sweep_steps: Optional[StepsSweep]
    sweep_cfg: Optional[CfgSweep]
    videos: dict[str, list[str]]
    rollouts: Optional[RolloutSection]
    wm_eval: Optional[WorldModelEvalSection]
    policy: Optional[PolicySectionResult]
    wall_time_s: dict[str, float]
    summary: DemoSummary
    wall_time_reused: list[str] = field(default_factory=list)
    budget: Optional[dict] = None
    commands: dict[str, str] = field(default_factory=dict)
    fewstep: Optional[FewStepSection] = None
    estimate: Optional[EvaluatorsSection] = None  # every world model of the pool as an evaluator
    fidelity: Optional[FidelitySection] = None  # the evaluator's fidelity (``demo.fidelity_section``)
    scene: Optional[SceneSection] = None  # --full: the full-scene pairing (``demo.scene_section``)
    views: Optional[ViewsSection] = None  # the multi-view world model (``demo.views_section``)
    schedule: Optional[ScheduleSummary] = None  # what bounded the wall time (``demo.schedule``; the final report)
    progress: Optional[dict] = None  # a report written while jobs run: {"done", "jobs", "last"} (None: the final one)

    def row(self, key: EvalKey) -> Optional[ScoreRow]:
        return self.evals.get(key)

    def to_json(self) -> dict:
        """results.json: the rows grouped as the report shows them (baselines, methods by seed, extra rows, the
        decomposition) and every evaluation by name, then the sections."""
        def rows(keys) -> dict:
            return {name: None if self.row(k) is None else self.row(k).to_json() for name, k in keys}

        return {"budget": self.budget, "seeds": self.seeds,
                "baselines": rows((b, EvalKey(b)) for b in ("copy-first", "vae-recon")),
                "methods": {m: rows((str(s), EvalKey(run_tag(m, s))) for s in self.seeds) for m in self.methods},
                "extra_rows": rows((one_step(m).name, one_step(m)) for m in BASE_METHODS),
                "decomposition": rows((k.name, k) for _, k in DECOMPOSITION),
                "evals": rows((k.name, k) for k in self.evals), "sweep_steps": self.sweep_steps,
                "sweep_cfg": self.sweep_cfg, "videos": self.videos, "rollouts": self.rollouts,
                "wm_eval": self.wm_eval, "policy": self.policy, "wall_time_s": self.wall_time_s,
                "summary": self.summary.to_json(), "wall_time_reused": self.wall_time_reused,
                "commands": self.commands, "fewstep": self.fewstep, "estimate": self.estimate,
                "fidelity": self.fidelity, "scene": self.scene, "views": self.views,
                "schedule": self.schedule,
                **({"in_progress": self.progress} if self.progress else {})}


def collect(plan: Plan, wall: dict, policy: Optional[PolicySectionResult], reused: Optional[list] = None,
            budget: Optional[dict] = None) -> DemoResults:
    """Everything the report shows, from the files the jobs wrote."""
    evals = {key: _read(folder) for key, folder in plan.evals.items()}
    return DemoResults(
        methods=list(plan.methods), seeds=plan.seeds, evals=evals,
        sweep_steps=_sweep(StepsSweep, plan.sweeps.get("steps")), sweep_cfg=_sweep(CfgSweep, plan.sweeps.get("cfg")),
        videos={m: sorted(str(p) for p in (folder.glob("*.gif") if folder.exists() else []))
                for m, folder in plan.videos.items()},
        rollouts=collect_rollouts(plan), wm_eval=collect_wm_eval(plan), policy=policy, wall_time_s=wall,
        summary=summarize(evals, plan), wall_time_reused=list(reused or []), budget=budget,
        fewstep=collect_fewstep(plan), estimate=collect_estimate(plan), fidelity=collect_fidelity(plan),
        scene=collect_scene(plan), views=collect_views(plan))


def summarize(evals: dict[EvalKey, Optional[ScoreRow]], plan: Plan) -> DemoSummary:
    """Mean rows over seeds, the paired seed differences simforcing − sft, and the checks the issue asks for."""
    rows = {m: ScoreRow.mean([evals.get(EvalKey(run_tag(m, s))) for s in plan.seeds]) for m in plan.methods}
    copy_r = evals.get(EvalKey("copy-first")) or ScoreRow()
    vae_r = evals.get(EvalKey("vae-recon")) or ScoreRow()
    paired = []
    for s in plan.seeds:
        a, b = evals.get(EvalKey(run_tag("simforcing", s))), evals.get(EvalKey(run_tag("sft", s)))
        if a and b:
            paired.append({"seed": s, **{k: _diff(getattr(a, k), getattr(b, k)) for k in PAIRED}})
    diff = {k: {"mean": _mean([p[k] for p in paired]), "std": _std([p[k] for p in paired])} for k in PAIRED}

    def beats_copy(r: ScoreRow) -> dict:
        return {"psnr": None if r.psnr is None or copy_r.psnr is None else r.psnr > copy_r.psnr,
                "af_pos": None if r.af_pos is None or copy_r.af_pos is None else r.af_pos < copy_r.af_pos}

    every_seed = {k: (all((p[k] or 0) > 0 for p in paired) if k.startswith("psnr") else all((p[k] or 0) < 0
                                                                                             for p in paired))
                  for k in ("psnr_arm", "af_pos")} if paired else {}
    headroom = None
    sf, sft = rows["simforcing"], rows["sft"]
    if sf.psnr_arm is not None and copy_r.psnr_arm and vae_r.psnr_arm:
        span = vae_r.psnr_arm - copy_r.psnr_arm
        headroom = (sf.psnr_arm - copy_r.psnr_arm) / span if span else None
    line = (f"demo @ (N_s, N_r, w) = (1, 10, 0.6): copy-first {_f(copy_r.psnr)} dB / "
            f"{_f(_cm(copy_r.af_pos), 1)} cm | sft {_f(sft.psnr)} dB / {_f(_cm(sft.af_pos), 1)} cm"
            f" | simforcing {_f(sf.psnr)} dB / {_f(_cm(sf.af_pos), 1)} cm (PSNR / action error)")
    return DemoSummary(rows, paired, diff, {m: beats_copy(rows[m]) for m in BASE_METHODS}, every_seed, headroom, line)


def _diff(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a - b if a is not None and b is not None else None


def _cm(v: Optional[float]) -> Optional[float]:
    return None if v is None else v * CM


def _f(v, nd=2) -> str:
    return fmt_num(v, nd)


def _pm(mean, std, nd=2, scale=1.0) -> str:
    if mean is None:
        return "—"
    return f"{mean * scale:+.{nd}f}" + (f" ± {std * scale:.{nd}f}" if std is not None else "")


# ----------------------------------------------------------------------------------------------------------------------
# report.md / report.html
# ----------------------------------------------------------------------------------------------------------------------

_HEAD = ("| | PSNR ↑ | SSIM ↑ | arm PSNR ↑ | action error (cm) ↓ | … moving frames (cm) ↓ | … with another window's "
         "actions (cm) | probe floor (cm) |", "|---|---|---|---|---|---|---|---|")


def _row(label: str, r: Optional[ScoreRow]) -> str:
    r = r or ScoreRow()
    return (f"| {label} | {_f(r.psnr)} | {_f(r.ssim, 4)} | {_f(r.psnr_arm)} | {_f(_cm(r.af_pos))} | "
            f"{_f(_cm(r.af_pos_moving))} | {_f(_cm(r.af_control_pos))} | {_f(_cm(r.af_floor_pos))} |")


def _ablation_table(res: DemoResults, names: list[tuple[str, str]]) -> list[str]:
    lines = ["| run | PSNR ↑ | arm PSNR ↑ | action error (cm) ↓ | seeds |", "|---|---|---|---|---|"]
    for label, name in names:
        per = [r for r in (res.row(EvalKey(run_tag(name, s))) for s in res.seeds) if r]
        cell = []
        for k, scale in (("psnr", 1), ("psnr_arm", 1), ("af_pos", CM)):
            m, s = _mean([getattr(r, k) for r in per]), _std([getattr(r, k) for r in per])
            cell.append("—" if m is None else f"{m * scale:.2f}" + (f" ± {s * scale:.2f}" if s is not None else ""))
        lines.append(f"| {label} | {' | '.join(cell)} | {len(per)} |")
    return lines


def _split_sizes(plan: Plan) -> tuple:
    """(paired training episodes, sim-only episodes) of the demo's dataset, as its splits say (the budget's sizes
    when they cannot be read)."""
    try:
        splits = json.loads((plan.data / "meta" / "splits.json").read_text())
        return len(splits["train"]), len(splits["sim_pool"])
    except (OSError, ValueError, KeyError, TypeError):
        return plan.budget.num_train + plan.budget.layout_train, plan.budget.num_sim_pool


def report_markdown(res: DemoResults, plan: Plan, commands: dict) -> str:
    """The demo's report.md: one section function per part, in reading order."""
    sections = (_windows_section(res, plan), _paired_section(res.summary), _decomposition_section(res),
                _ablation_section(res, plan), _sweep_section(res, plan), rollout_lines(res.rollouts, plan),
                _policy_section(res.policy, plan), wm_eval_lines(res.wm_eval, plan), estimate_lines(res.estimate, plan),
                views_lines(res.views, plan), fidelity_lines(res.fidelity), scene_lines(res.scene, plan), fewstep_lines(res.fewstep),
                _media_section(res, plan), _wall_time_and_commands(res, commands))
    return "\n".join(line for section in sections for line in section)


def _progress_lines(progress: Optional[dict]) -> list[str]:
    if not progress:
        return []
    return [f"> **In progress: {progress['done']} of {progress['jobs']} jobs done** (the last: {progress['last']}). "
            "This report is rewritten as each job finishes; a dash is a number whose job has not run yet.", ""]


def _windows_section(res: DemoResults, plan: Plan) -> list[str]:
    """The paper's protocol: held-out windows at its sampler, floor and ceiling, the one-step rows, the checks."""
    s, copy_r = res.summary, res.row(EvalKey("copy-first"))
    n = None if copy_r is None else copy_r.num_samples
    train, pool = _split_sizes(plan)
    lines = ["# SimForcing demo report", "", *_progress_lines(res.progress),
             f"Embedded synthetic MuJoCo benchmark: plentiful simulation ({pool} sim-only episodes), scarce real data "
             f"({train} paired training episodes), one arm, a real appearance gap. All stage-2 methods start from the "
             "same stage-1 checkpoint and see the same real data for the same steps.", "",
             f"## Held-out real validation windows ({'—' if n is None else n} windows), the paper's sampler (N_s, N_r, w) = (1, 10, 0.6)", "",
             *_HEAD,
             _row("copy the first frame (floor)", copy_r),
             _row("VAE reconstruction (ceiling)", res.row(EvalKey("vae-recon")))]
    for m in plan.methods if not plan.full else BASE_METHODS:
        lines.append(_row(f"{m} (mean of {len(plan.seeds)} seed{'s' if len(plan.seeds) > 1 else ''})",
                          s.rows[m]))
    lines += ["", "Extra rows — the one-step prediction (N_r = 1, the network's conditional mean):", "", *_HEAD]
    for m in BASE_METHODS:
        lines.append(_row(one_step(m).name, res.row(one_step(m))))
    lines += ["", "Action error: a state probe (`simforcing model fit-probe`) reads the end-effector position change "
                  "from the first frame in every generated frame; the error is its distance to the recorded position, "
                  "averaged over frames 1–8 (moving frames: only those where the arm is more than 2 cm from its start; "
                  "floor: the probe on the recorded frames; another window's actions: the same model, noise and first "
                  "frame driven by the actions of another validation window)."]
    checks = s.beats_copy
    return lines + ["", "**Checks**: " + "; ".join(
        f"{m} beats copying the first frame on PSNR: {_yes(c['psnr'])}, on action error: {_yes(c['af_pos'])}"
        for m, c in checks.items())]


def _paired_section(s: DemoSummary) -> list[str]:
    """simforcing − sft per seed and their mean ± std; the arm region's headroom closed."""
    lines = []
    if s.paired:
        lines += ["", "## Paired seeds: simforcing − sft", "",
                  "| seed | PSNR (dB) | arm PSNR (dB) | action error (cm) | moving frames (cm) |", "|---|---|---|---|---|"]
        for p in s.paired:
            lines.append(f"| {p['seed']} | {_pm(p['psnr'], None)} | {_pm(p['psnr_arm'], None)} | "
                         f"{_pm(p['af_pos'], None, 2, CM)} | {_pm(p['af_pos_moving'], None, 2, CM)} |")
        d = s.paired_mean
        lines.append(f"| mean ± std | {_pm(d['psnr']['mean'], d['psnr']['std'])} | "
                     f"{_pm(d['psnr_arm']['mean'], d['psnr_arm']['std'])} | "
                     f"{_pm(d['af_pos']['mean'], d['af_pos']['std'], 2, CM)} | "
                     f"{_pm(d['af_pos_moving']['mean'], d['af_pos_moving']['std'], 2, CM)} |")
        every = s.simforcing_beats_sft_every_seed
        lines += ["", f"simforcing beats sft in every seed — arm-region PSNR: {_yes(every.get('psnr_arm'))}, "
                      f"action error: {_yes(every.get('af_pos'))}."]
    if s.arm_headroom_closed is not None:
        lines += ["", f"Arm-region headroom closed by simforcing (copy → VAE ceiling): "
                      f"{100 * s.arm_headroom_closed:.0f} %."]
    return lines


def _decomposition_section(res: DemoResults) -> list[str]:
    """Where the gain is lost: the teacher and the students in simulation, the oracle condition."""
    return ["", "## Where the gain is lost", "",
            "The same windows; simulation rows score the model on the recorded simulation video (the arm on black) "
            "with its gate off, as the two-stage sampler's first stage runs it.", "", *_HEAD,
            *(_row(label, res.row(key)) for label, key in DECOMPOSITION)]


def _ablation_section(res: DemoResults, plan: Plan) -> list[str]:
    """--full: Tab. 2, Tab. 3 and Tab. A1 over seeds."""
    if not plan.full:
        return []
    lines = ["", "## Ablations (mean ± std over seeds)", "", "**Tab. 2** (random windows off = simforcing with "
             "one fixed window per trajectory, our reading of 'trajectory augmentation')", "",
             *_ablation_table(res, [("sft", "sft"), ("joint_fm", "joint_fm"),
                                    ("simforcing, random windows off", "simforcing_fixed_window"),
                                    ("motion_distill", "motion_distill"), ("simforcing", "simforcing")]),
             "", "**Tab. 3** (latent value vs motion distillation)", "",
             *_ablation_table(res, [("value_distill", "value_distill"), ("motion_distill", "motion_distill")]),
             "", "**Tab. A1** training runs (p at the default w = 0.6)", "",
             *_ablation_table(res, [(f"p = {p}", r) for p, r in zip(("0", "0.3", "0.7", "1"), P_RUNS)])]
    if res.sweep_cfg:
        lines += ["", cfg_markdown(res.sweep_cfg), "", f"![Tab. A1]({relative_to(res.sweep_cfg.heatmap, plan.out)})"]
    return lines


def _sweep_section(res: DemoResults, plan: Plan) -> list[str]:
    sw = res.sweep_steps
    if not sw:
        return []
    return ["", f"## Sweep N_r × w (N_s = 1, simforcing, {sw.num_samples} windows)", "", steps_markdown(sw), "",
            f"![sweep heatmap]({relative_to(sw.heatmap, plan.out)})"]


def _policy_section(pol: Optional[PolicySectionResult], plan: Plan) -> list[str]:
    """Tab. 5 at demo scale (and with --full the seeds × initialisations measurement)."""
    if pol is None:
        return []
    lines = ["", "## Policy transfer (paper Tab. 5): closed-loop success on held-out scenes", "",
             pol.table_md, "", _policy_setup(pol.budget) +
             "Success % with 95 % Wilson intervals; every policy on the same scenes. One world model and one "
             "policy seed per row: a difference inside the intervals is not established "
             "(docs/notebook/policy_transfer.md: three policy seeds, and world models retrained under load, where the "
             "rows tie). "
             "Initialisations: " + "; ".join(f"{k}: {v.inherited} tensors inherited, {v.new} new"
                                             for k, v in pol.init.items())]
    if pol.full:  # demo --full: the seeds × initialisations measurement (demo.transfer_section)
        lines += ["", pol.full.note, "", pol.full.transfer_md]
        if pol.full.transfer_png:
            lines += ["", f"![success per policy run]({relative_to(pol.full.transfer_png, plan.out)})"]
    return lines


def _media_section(res: DemoResults, plan: Plan) -> list[str]:
    """The sample videos and every run's loss curves."""
    lines = ["", "## Videos (masked first frame | simulation rollout | prediction | ground truth)", ""]
    for m, files in res.videos.items():
        for f in files:
            lines += [f"**{m}** ![{m}]({relative_to(f, plan.out)})", ""]
    lines += ["## Loss curves", ""]
    for name in ["video_base", "stage1", *plan.runs]:  # video_base: --full only
        png = plan.out / name / "loss_curves.png"
        if png.exists():
            lines += [f"{name}: ![{name} loss]({name}/loss_curves.png)", ""]
    return lines


def _wall_time_and_commands(res: DemoResults, commands: dict) -> list[str]:
    reused = set(res.wall_time_reused)
    lines = ["## Wall time", ""]
    if reused:
        lines += [f"{len(reused)} jobs were reused from an earlier run (marked; their seconds are that run's); the "
                  "total is this run's.", ""]
    sched = res.schedule
    if sched is not None and sched.chain:
        lines += [f"The slots held jobs for {sched.busy_s:.0f} slot-seconds and stood idle {sched.idle_s:.0f} of "
                  f"{sched.wall_s:.0f} s of jobs; the chain of jobs that bounded the wall time, each after what it "
                  "waited for (a dependency, or a slot another job freed):", "",
                  "| job | waited for | seconds |", "|---|---|---|"]
        lines += [f"| {job} | {why} | {sec:.0f} |" for job, why, sec in sched.chain] + [""]
    lines += ["| job | seconds |", "|---|---|"]
    lines += [f"| {k}{' (reused)' if k in reused else ''} | {v:.0f} |" for k, v in res.wall_time_s.items()]
    lines += ["", "## Commands behind each number", "", "```bash"]
    lines += [f"# {k}\n{v}" for k, v in commands.items()]
    return lines + ["```", ""]


def _policy_setup(b: dict) -> str:
    if not b:
        return ""
    scenes = (f"LIBERO-like scenes ({b['layouts']} fixed layouts, the task object jittered by "
              f"±{100 * b['jitter']:.0f} cm)" if b.get("layouts") else "every scene its own objects, camera and look")
    return (f"{scenes}; {b['per_task']} scripted demonstrations per task, action-only policies trained "
            f"{b['train_steps']} steps of batch {b['batch_size']}, {b['eval_per_task']} held-out scenes per task, "
            f"at most {b['max_steps']} steps, {b['execute']} actions executed per chunk. ")


def _yes(v) -> str:
    return "—" if v is None else ("yes" if v else "**no**")


def write_report(plan: Plan, res: DemoResults, commands: dict) -> None:
    res.commands = commands
    atomic_write_json(plan.out / "results.json", res.to_json())
    md = report_markdown(res, plan, commands)
    atomic_write_text(plan.out / "report.md", md)
    atomic_write_text(plan.out / "report.html", markdown_html(md, plan.out))


def markdown_html(md: str, out: Path) -> str:
    """A self-contained HTML page: the markdown's tables and text, images inlined as base64."""
    body = []
    in_code = False
    table: list[str] = []

    def flush_table():
        if not table:
            return
        rows = [r.strip("|").split("|") for r in table if not set(r.replace("|", "").strip()) <= set("-: ")]
        body.append("<table>" + "".join(
            "<tr>" + "".join(f"<{'th' if i == 0 else 'td'}>{_inline(c.strip())}</{'th' if i == 0 else 'td'}>"
                             for c in row) + "</tr>" for i, row in enumerate(rows)) + "</table>")
        table.clear()

    for line in md.splitlines():
        if line.startswith("```"):
            flush_table()
            body.append("</pre>" if in_code else "<pre>")
            in_code = not in_code
            continue
        if in_code:
            body.append(_h.escape(line))
            continue
        if line.startswith("|"):
            table.append(line)
            continue
        flush_table()
        imgs = re.findall(r"!\[([^\]]*)\]\(([^)]+)\)", line)
        if imgs:
            for alt, src in imgs:
                p = out / src
                if p.exists():
                    mime = "image/gif" if p.suffix == ".gif" else "image/png"
                    data = base64.b64encode(p.read_bytes()).decode()
                    body.append(f"<figure><img src='data:{mime};base64,{data}' alt='{_h.escape(alt)}'/>"
                                f"<figcaption>{_h.escape(alt)}</figcaption></figure>")
            continue
        if line.startswith("#"):
            n = len(line) - len(line.lstrip("#"))
            body.append(f"<h{n}>{_h.escape(line[n:].strip())}</h{n}>")
        elif line.strip():
            body.append(f"<p>{_inline(line)}</p>")
    flush_table()
    style = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:4px 8px}img{image-rendering:pixelated;max-width:100%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>SimForcing demo</title><style>{style}</style>"
            f"</head><body>{''.join(body)}</body></html>")


def _inline(text: str) -> str:
    """Escape, then **bold** and `code`."""
    t = _h.escape(text)
    t = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", t)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", t)
