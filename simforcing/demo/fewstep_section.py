"""The demo report's section on the few-step student of the SimForcing world model (``simforcing distill``,
docs/FEWSTEP.md), measured against its teacher on the same windows, episodes and noise: one-window scores with paired
differences, rollout drift, and policy evaluation inside the world model — success, agreement with the simulator and
episodes per minute."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from simforcing.config import ConfigError
from simforcing.demo.plan import STUDENT, EvalKey, Plan, few_step
from simforcing.demo.rollout_section import METRICS, PairedDrift, paired
from simforcing.evaluate.results import RolloutDrift, WindowEvaluation
from simforcing.fewstep.job import compare
from simforcing.policy.closed_loop.results import AgreementResult, PolicyEvaluation

TEACHER = "simforcing"
# the one-window scores compared: key, label, scale (metres -> cm), digits
WINDOW_ROWS = (("psnr", "PSNR (dB)", 1.0, 2), ("psnr_arm", "arm-region PSNR (dB)", 1.0, 2),
               ("af_pos", "action error (cm)", 100.0, 2), ("latency_s", "latency per window (ms)", 1000.0, 0))


@dataclass
class FewStepSection:
    """What the section shows (None where its job did not finish)."""

    steps: int
    windows: Optional[dict] = None  # fewstep.job.compare of the teacher's and the student's eval.json
    rollout: dict = field(default_factory=dict)  # "teacher"/"student" -> {"rollout", "restart": mean rows}
    rollout_paired: dict[str, PairedDrift] = field(default_factory=dict)  # student − teacher (rollout_section.paired)
    forwards_per_episode: dict = field(default_factory=dict)  # "teacher"/"student" -> network evaluations
    wm: dict = field(default_factory=dict)  # "teacher"/"student" -> {"pearson", "mmrv", "episodes_per_minute", ...}

    def to_json(self) -> dict:
        return {"steps": self.steps, "windows": self.windows, "rollout": self.rollout,
                "rollout_paired": {m: d.to_json() for m, d in self.rollout_paired.items()},
                "forwards_per_episode": self.forwards_per_episode, "wm": self.wm}


def _read(kind, folder, what: str):
    """``kind.read(folder)`` (WindowEvaluation, RolloutDrift), or None where the job did not finish."""
    try:
        return None if folder is None else kind.read(folder, what)
    except ConfigError:
        return None


def _wm_row(plan: Plan, agreement: Optional[AgreementResult], name: str) -> Optional[dict]:
    """One world model's agreement with the simulator (all players) and its evaluation's speed."""
    try:
        ev = PolicyEvaluation.read(plan.wm_eval["pool_evals"][name], f"the few-step section's {name}")
    except (ConfigError, KeyError):
        return None
    stats = agreement.ranking.get(name, {}).get("all") if agreement is not None else None
    row = {"episodes": sum(r.average.episodes for r in ev.rows.values()), "seconds": ev.seconds,
           "episodes_per_minute": ev.episodes_per_minute,
           "success": {p: r.average.rate for p, r in ev.rows.items()}}
    if stats is not None:
        row.update(pearson=stats.pearson, mmrv=stats.mmrv)
    return row


def collect_fewstep(plan: Plan) -> Optional[FewStepSection]:
    """The section's numbers from the files the demo's jobs wrote (None when the demo has no student)."""
    if plan.student is None:
        return None
    section = FewStepSection(plan.budget.fewstep.steps)
    keys = {"teacher": EvalKey(TEACHER), "student": few_step()}
    evals = [_read(WindowEvaluation, plan.evals.get(key), f"the few-step section's {who}") for who, key in keys.items()]
    if all(evals):
        section.windows = compare(*(e.scores for e in evals))
    folders = plan.rollouts.get("folders", {}) if plan.rollouts else {}
    rolls: dict[str, RolloutDrift] = {}
    for who, key in keys.items():
        if (r := _read(RolloutDrift, folders.get(key), f"the few-step section's {who} rollout")) is not None:
            rolls[who] = r
            section.rollout[who] = {row: r.rows[row].mean for row in ("rollout", "restart") if row in r.rows}
            section.forwards_per_episode[who] = r.forwards_per_episode
    if len(rolls) == 2:
        section.rollout_paired = paired(rolls["student"], rolls["teacher"])
    if plan.wm_eval:
        try:
            agreement = AgreementResult.read(plan.wm_eval["pool_agreement"], "the few-step section")
        except ConfigError:
            agreement = None
        section.wm = {who: row for who, name in (("teacher", TEACHER), ("student", STUDENT))
                      if (row := _wm_row(plan, agreement, name)) is not None}
        ref = agreement.vs_reference.get(STUDENT) if agreement is not None else None
        if ref is not None and "student" in section.wm:
            section.wm["student"]["vs_teacher"] = ref.to_json()
    return section


def _num(v: Optional[float], scale: float = 1.0, digits: int = 2, signed: bool = False) -> str:
    if v is None or v != v:
        return "—"
    return f"{v * scale:{'+' if signed else ''}.{digits}f}"


def _window_lines(w: dict) -> list[str]:
    lines = ["| | teacher | student | student − teacher, paired [95 % interval] | relative |",
             "|---|---|---|---|---|"]
    for key, label, scale, digits in WINDOW_ROWS:
        row = w.get(key)
        if row is None:
            continue
        p = row.get("paired")
        ci = "[—]" if p is None or p["ci95"] is None else (f"[{_num(p['ci95'][0], scale, digits, True)}, "
                                                          f"{_num(p['ci95'][1], scale, digits, True)}]")
        diff = "—" if p is None else f"{_num(p['mean'], scale, digits, True)} {ci}"
        rel = "—" if row.get("relative") is None else f"{100 * row['relative']:+.1f} %"
        lines.append(f"| {label} | {_num(row['teacher'], scale, digits)} | {_num(row['student'], scale, digits)} | "
                     f"{diff} | {rel} |")
    f = w["forwards_per_sample"]
    lines.append(f"| network evaluations per window | {_num(f['teacher'], 1, 0)} | {_num(f['student'], 1, 0)} | | |")
    return lines


def _rollout_lines(s: FewStepSection) -> list[str]:
    lines = ["| | network evaluations / episode | rollout | restarted every chunk | drift |", "|---|---|---|---|---|"]
    for who in ("teacher", "student"):
        r = s.rollout.get(who)
        if not r or "rollout" not in r or "restart" not in r:
            continue
        for metric, title, scale in METRICS:
            a, b = r["rollout"].get(metric), r["restart"].get(metric)
            drift = None if a is None or b is None else a - b
            lines.append(f"| {who}, {title} | {_num(s.forwards_per_episode.get(who), 1, 0)} | {_num(a, scale)} | "
                         f"{_num(b, scale)} | {_num(drift, scale, 2, True)} |")
    for metric, title, scale in METRICS:
        d = s.rollout_paired.get(metric)
        if d:
            lo, hi = d.ci95_all
            lines.append(f"| student − teacher, rollout, {title} (paired over episodes) | | "
                         f"{_num(d.mean_all, scale, 2, True)} [{_num(lo, scale, 2, True)}, "
                         f"{_num(hi, scale, 2, True)}] | | |")
    return lines


def _wm_lines(s: FewStepSection) -> list[str]:
    t, st = s.wm.get("teacher"), s.wm.get("student")
    lines = ["| world model | Pearson vs simulator | MMRV | episodes | seconds | episodes / minute |",
             "|---|---|---|---|---|---|"]
    for who, r in (("teacher", t), ("student", st)):
        if r:
            lines.append(f"| {who} | {_num(r.get('pearson'))} | {_num(r.get('mmrv'))} | {r['episodes']} | "
                         f"{_num(r['seconds'], 1, 0)} | {_num(r['episodes_per_minute'], 1, 0)} |")
    ref = (st or {}).get("vs_teacher")
    if ref:
        lo, hi = ref["pearson_diff_ci95"]
        lines += ["", f"Paired with its teacher on the same episodes: the same verdict in "
                      f"{100 * ref['episodes_agreeing']:.0f} % of them, Pearson with the teacher's success per policy "
                      f"{_num(ref['to_reference']['pearson'])}, Pearson vs the simulator minus the teacher's "
                      f"{_num(ref['pearson_diff'], signed=True)} [{_num(lo, signed=True)}, {_num(hi, signed=True)}] "
                      "(95 %, the same scene draws; the aim: within 0.05 — docs/FEWSTEP.md measures it on 60 scenes "
                      "per policy)."]
    if t and st and t.get("episodes_per_minute") and st.get("episodes_per_minute"):
        lines += ["", f"The student runs {st['episodes_per_minute'] / t['episodes_per_minute']:.1f}× the teacher's "
                      "episodes per minute in this run (jobs ran side by side: `simforcing bench --sections fewstep` "
                      "measures the speed-up on a quiet machine). Success per policy of both is in the table above "
                      f"(column `{STUDENT}`)."]
    return lines


def fewstep_lines(s: Optional[FewStepSection]) -> list[str]:
    """The report's markdown for the section."""
    if s is None or not (s.windows or s.rollout or s.wm):
        return []
    steps = f"{s.steps} step" + ("s" if s.steps > 1 else "")
    lines = ["", f"## The few-step student: the SimForcing world model in {steps}", "",
             f"`simforcing distill --steps {s.steps}` fine-tunes the SimForcing world model so that its "
             f"conditional branch, integrated in {steps}, reproduces the paper's guided sampler (1, 10, 0.6) from the same noise "
             "(docs/FEWSTEP.md). Teacher and student are scored on the same windows, episodes and noise.", ""]
    if s.windows:
        lines += ["**One window** (the paper's protocol, the windows above):", "", *_window_lines(s.windows), ""]
    if s.rollout:
        lines += ["**Long rollouts** (the held-out long episodes; action error in cm; drift = rollout − restarted):",
                  "", *_rollout_lines(s), ""]
    if s.wm:
        lines += ["**Policies evaluated inside the world model** (all players):", "", *_wm_lines(s), ""]
    return lines
