"""The demo report's section on the multi-view world model (issue 67): SimForcing and `sft` trained on the external and
the wrist camera together (``data.views=external,wrist``), beside the one-view SimForcing world model — each camera's
one window (PSNR, SSIM, arm PSNR, LPIPS; the action error read on the external view), the rollout with the twin
rendering both cameras, and inside the world models on the same pool of scenes: the world model's own verdict's
within-policy correlation with the simulator's per task, the clean expert per task, the trials saved with the learned
predictor beside the same predictor on the copy-the-first-frame pool (what the frames add), the worst policy's
coverage and the ranking; then Tab. 5's two-camera policies inside it. Every aim beside its measurement."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from simforcing.config import ConfigError
from simforcing.demo.estimate_section import CLEAN, _study
from simforcing.demo.plan import TWIN, EvalKey, Plan, few_step, student_of, twin_condition, views_of
from simforcing.evaluate.results import RolloutDrift, WindowEvaluation
from simforcing.fidelity import Aim
from simforcing.policy.agreement.statistics import pearson
from simforcing.policy.closed_loop.results import AgreementResult, PolicyEvaluation
from simforcing.result_files import mark, percent
from simforcing.utils import fmt_num

TASKS = ("reach", "push", "grasp")
ONE_VIEW = student_of("simforcing") + TWIN  # the one-view world model of the pool, with the twin
MULTI_VIEW = student_of(views_of("simforcing")) + TWIN
COPY_FIRST = "copy-first"
# issue 67's aims for the multi-view world model with the twin, on the pool at n = 10
AIMS = (Aim("rho_push", "own verdict's within-policy ρ on pushes", 0.5, below=False),
        Aim("rho_grasp", "own verdict's within-policy ρ on grasps", 0.5, below=False),
        Aim("clean_push", "the clean expert's pushes inside (of the pool's scenes)", 0.8, below=False),
        Aim("clean_grasp", "the clean expert's grasps inside", 0.8, below=False),
        Aim("frames_add", "trials saved over the copy-the-first-frame pool, same predictor (points)", 0.15,
            below=False),
        Aim("saved", "trials saved at n = 10", 0.50, below=False),
        Aim("coverage", "worst policy's coverage", 0.93, below=False),
        Aim("pearson", "raw in-model Pearson with the simulator", 0.90, below=False),
        Aim("wrist_gain_db", "SimForcing − sft, one window on the wrist view (PSNR dB)", 0.0, below=False))


@dataclass(frozen=True)
class WindowRow:
    """One model's one window on the held-out real windows: per camera PSNR / SSIM / arm PSNR / LPIPS, and the
    action error (the state probe on the external view, metres)."""

    views: dict
    af_pos: Optional[float] = None
    psnr: Optional[float] = None


@dataclass(frozen=True)
class PoolRow:
    """One world model on the pool: its own verdict's within-policy ρ per task, the clean expert's success per task
    inside it, the learned predictor's trials saved and worst coverage at n, the raw Pearson (None where not run)."""

    rho: dict
    clean: dict
    saved: Optional[float] = None
    coverage: Optional[float] = None
    pearson: Optional[float] = None


@dataclass
class ViewsSection:
    windows: dict[str, WindowRow]
    rollouts: dict[str, dict]  # rollout name -> its rollout row's means (psnr@<view>, af_pos, ...)
    pool: dict[str, PoolRow]
    two_camera: dict  # player -> {"sim": rate, "wm": rate}; "pearson": of the rates
    values: dict[str, Optional[float]] = field(default_factory=dict)  # the aims' measured values

    def met(self) -> dict[str, Optional[bool]]:
        return {a.key: a.met(self.values.get(a.key)) for a in AIMS}

    def to_json(self) -> dict:
        return {"windows": {k: asdict(v) for k, v in self.windows.items()}, "rollouts": self.rollouts,
                "pool": {k: asdict(v) for k, v in self.pool.items()}, "two_camera": self.two_camera,
                "aims": {a.key: {"label": a.label, "bound": a.bound, "below": a.below, "value": self.values.get(a.key),
                                 "met": self.met()[a.key]} for a in AIMS}}


# ----------------------------------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------------------------------


def _window(folder: Optional[Path]) -> Optional[WindowRow]:
    if folder is None:
        return None
    try:
        s = WindowEvaluation.read(folder, "the report's views section").scores
    except ConfigError:
        return None
    return WindowRow(dict(s.views), s.action.af_pos, s.psnr)


def _evaluation(folder: Optional[Path]) -> Optional[PolicyEvaluation]:
    try:
        return None if folder is None else PolicyEvaluation.read(folder, "the report's views section")
    except ConfigError:
        return None


def verdict_rho_per_task(truth: PolicyEvaluation, wm: PolicyEvaluation) -> dict[str, Optional[float]]:
    """Per task the mean over policies of the Pearson correlation, across that policy's scenes of the task, between
    the world model's verdict and the simulator's (the within-policy ρ of ``policy estimate``, task by task);
    policies whose verdicts or truth do not vary are left out, None where none varies."""
    out = {}
    for task in TASKS:
        rs = []
        for player, per in wm.episodes.items():
            sim = {o.scene: o.success for o in truth.episodes.get(player, {}).get(task, [])}
            pairs = [(sim[o.scene], o.success) for o in per.get(task, []) if o.scene in sim]
            if len(pairs) > 1:
                r = pearson(np.array([a for a, _ in pairs], float), np.array([b for _, b in pairs], float))
                if np.isfinite(r):
                    rs.append(r)
        out[task] = float(np.mean(rs)) if rs else None
    return out


def task_rates(ev: PolicyEvaluation, player: str) -> dict[str, Optional[float]]:
    """A player's success rate per task in an evaluation (None where it has no episode of the task)."""
    per = ev.episodes.get(player, {})
    return {t: (float(np.mean([o.success for o in per[t]])) if per.get(t) else None) for t in TASKS}


def collect_views(plan: Plan) -> Optional[ViewsSection]:
    """The section's numbers from the files the views jobs wrote; None when the demo trained no multi-view model."""
    if not plan.views:
        return None
    names = {f"{views_of('copy-first')}": EvalKey(views_of("copy-first")),
             f"{views_of('sft')}": EvalKey(views_of("sft")), f"{views_of('simforcing')}": EvalKey(views_of("simforcing")),
             f"{views_of('simforcing')} few-step": few_step(views_of("simforcing"))}
    windows = {n: r for n, k in names.items() if (r := _window(plan.evals.get(k))) is not None}
    rollouts = {}
    for key in (twin_condition("simforcing"), twin_condition(views_of("simforcing"))):
        folder = (plan.rollouts or {}).get("folders", {}).get(key)
        try:
            drift = RolloutDrift.read(folder, "the report's views section") if folder else None
        except ConfigError:
            drift = None
        if drift is not None and "rollout" in drift.rows:
            rollouts[key.name] = dict(drift.rows["rollout"].mean)
    pool: dict[str, PoolRow] = {}
    wm = plan.wm_eval or {}
    truth = _evaluation(wm.get("sim_pool"))
    try:
        agreement = AgreementResult.read(wm["pool_agreement"], "the report's views section") if wm else None
    except ConfigError:
        agreement = None
    n = plan.budget.wm_eval.estimate_n
    for name in (MULTI_VIEW, ONE_VIEW, COPY_FIRST):
        ev = _evaluation((wm.get("pool_evals") or {}).get(name))
        if ev is None or truth is None:
            continue
        study = _study(Path(wm["estimate"][name]), n) if name in (wm.get("estimate") or {}) else None
        stats = agreement.ranking.get(name, {}).get("all") if agreement is not None else None
        pool[name] = PoolRow(verdict_rho_per_task(truth, ev), task_rates(ev, CLEAN),
                             study.saved if study else None,
                             min(c["ppi"] for c in study.coverage.values()) if study else None,
                             None if stats is None or stats.pearson != stats.pearson else float(stats.pearson))
    two = {}
    tc = wm.get("two_camera")
    sims = [_evaluation(f) for f in (tc.sim if tc else [])]  # Tab. 5's evaluations in the simulator, one a policy
    sim_rows = {k: v for ev in sims if ev is not None for k, v in ev.rows.items()}
    inside = _evaluation(tc.wm) if tc else None
    if sim_rows and inside is not None:
        for player in tc.players:
            a, b = sim_rows.get(player), inside.rows.get(player)
            if a is not None and b is not None:
                two[player] = {"sim": a.average.rate, "wm": b.average.rate}
        if len(two) > 1:
            r = pearson(np.array([v["sim"] for v in two.values()]), np.array([v["wm"] for v in two.values()]))
            two["pearson"] = None if not np.isfinite(r) else float(r)
    return ViewsSection(windows, rollouts, pool, two, _values(windows, pool))


def _values(windows: dict[str, WindowRow], pool: dict[str, PoolRow]) -> dict[str, Optional[float]]:
    mv, cf = pool.get(MULTI_VIEW), pool.get(COPY_FIRST)
    sf, sft = windows.get(views_of("simforcing")), windows.get(views_of("sft"))
    wrist = None
    if sf and sft and "wrist" in sf.views and "wrist" in sft.views:
        a, b = sf.views["wrist"].get("psnr"), sft.views["wrist"].get("psnr")
        wrist = None if a is None or b is None else a - b
    return {"rho_push": mv.rho.get("push") if mv else None, "rho_grasp": mv.rho.get("grasp") if mv else None,
            "clean_push": mv.clean.get("push") if mv else None, "clean_grasp": mv.clean.get("grasp") if mv else None,
            "frames_add": (mv.saved - cf.saved) if mv and cf and mv.saved is not None and cf.saved is not None
            else None,
            "saved": mv.saved if mv else None, "coverage": mv.coverage if mv else None,
            "pearson": mv.pearson if mv else None, "wrist_gain_db": wrist}


# ----------------------------------------------------------------------------------------------------------------------
# The report's lines
# ----------------------------------------------------------------------------------------------------------------------


def views_lines(section: Optional[ViewsSection], plan: Plan) -> list[str]:
    if section is None:
        return []
    lines = ["", "## The multi-view world model: the wrist camera beside the external camera", "",
             "`sft` and SimForcing trained on both cameras side by side in one frame (`--data.views=external,wrist`; "
             "stage 1 continued from the one-view stage 1 on both cameras), on the paper's data for its steps. One "
             "window on the same held-out windows, each camera scored alone (the action error: the state probe on the "
             "external view):", "",
             "| model | external PSNR ↑ | wrist PSNR ↑ | wrist SSIM ↑ | wrist arm PSNR ↑ | wrist LPIPS ↓ | "
             "action error (cm) ↓ |", "|---|---|---|---|---|---|---|"]
    for name, r in section.windows.items():
        ext, wr = r.views.get("external", {}), r.views.get("wrist", {})
        lines.append(f"| {name} | {fmt_num(ext.get('psnr'), 2)} | {fmt_num(wr.get('psnr'), 2)} | "
                     f"{fmt_num(wr.get('ssim'), 4)} | {fmt_num(wr.get('psnr_arm'), 2)} | {fmt_num(wr.get('lpips'), 4)} | "
                     f"{fmt_num(None if r.af_pos is None else 100 * r.af_pos, 2)} |")
    if section.rollouts:
        lines += ["", "Rollouts of 8 chunks with the robot's digital twin rendering the condition (both cameras for "
                      "the multi-view model):", "", "| rollout | PSNR ↑ | external PSNR ↑ | wrist PSNR ↑ | action error "
                      "(cm) ↓ |", "|---|---|---|---|---|"]
        for name, m in section.rollouts.items():
            af = m.get("af_pos")
            ext = m.get("psnr@external", m.get("psnr"))  # a one-view rollout: its one camera is the external
            lines.append(f"| {name} | {fmt_num(m.get('psnr'), 2)} | {fmt_num(ext, 2)} | "
                         f"{fmt_num(m.get('psnr@wrist'), 2)} | {fmt_num(None if af is None else 100 * af, 2)} |")
    if section.pool:
        lines += ["", "Inside the world models, on the pool (the simulator's verdict on every episode the truth): "
                      "the world model's own verdict's within-policy ρ per task, the clean expert's success per task, "
                      "the learned predictor's trials saved at n = 10 and the worst policy's coverage, the raw "
                      "Pearson:", "",
                  "| world model | ρ reach | ρ push | ρ grasp | clean expert: reach / push / grasp | trials saved | "
                  "worst coverage | Pearson |", "|---|---|---|---|---|---|---|---|"]
        for name, r in section.pool.items():
            c = r.clean
            lines.append(f"| {name} | {fmt_num(r.rho.get('reach'), 2)} | {fmt_num(r.rho.get('push'), 2)} | "
                         f"{fmt_num(r.rho.get('grasp'), 2)} | {percent(c.get('reach'))} / {percent(c.get('push'))} / "
                         f"{percent(c.get('grasp'))} | {percent(r.saved)} | "
                         f"{'—' if r.coverage is None else f'{100 * r.coverage:.1f} %'} | {fmt_num(r.pearson, 2)} |")
    two = {k: v for k, v in section.two_camera.items() if k != "pearson"}
    if two:
        lines += ["", "Tab. 5's policies, which read the external and the wrist camera, on Tab. 5's held-out "
                      "scenes: in the simulator (Tab. 5's evaluations) and inside the multi-view world model with the "
                      f"twin (Pearson of the rates {fmt_num(section.two_camera.get('pearson'), 2)}):", "",
                  "| policy | simulator | inside |", "|---|---|---|"]
        lines += [f"| {k} | {percent(v['sim'])} | {percent(v['wm'])} |" for k, v in two.items()]
    met = section.met()
    lines += ["", "Issue 67's aims for the multi-view world model with the twin:", "", "| aim | bound | measured |",
              "|---|---|---|"]
    for a in AIMS:
        v = section.values.get(a.key)
        pct = a.key not in ("rho_push", "rho_grasp", "pearson", "wrist_gain_db")
        shown = ("—" if v is None else (f"{100 * v:.0f} %" if pct else fmt_num(v, 2))) + mark(met[a.key])
        bound = ("≤ " if a.below else "≥ ") + (f"{100 * a.bound:.0f} %" if pct else f"{a.bound:g}")
        lines.append(f"| {a.label} | {bound} | {shown} |")
    return lines
