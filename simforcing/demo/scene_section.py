"""`demo --full`'s section on the benchmark's second pairing (issue 54): a simulation of the whole scene — arm and
objects, plain, with physics of its own — paired with the same real episodes (``data synth --pairing scene``). The
paper's one-window table on it, the long rollouts with the world model's own simulation chain against the full-scene
twin, and the policies on the arm pairing's pool (the same real scenes, the same truth) judged three ways: by the
simulator alone (the twin's own verdict, SureSim's predictor), inside the world model with the full-scene twin as its
condition, and inside it with its own chain — each a row of the evaluators' table (``demo.estimate_section``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from simforcing.config import ConfigError
from simforcing.demo.estimate_section import EvaluatorRow, EvaluatorsSection, evaluator_row, evaluators_table
from simforcing.demo.plan import Plan
from simforcing.evaluate.results import RolloutDrift, WindowEvaluation
from simforcing.policy.closed_loop.results import AgreementResult

TWIN_ENV = "scene-simforcing-fewstep-twin"  # the pool's evaluation whose twin also gave its own verdict


@dataclass
class SceneSection:
    """What the section shows (None / empty where a job has not finished): the one-window rows (copy-first, `sft`,
    SimForcing: PSNR and action error in cm), the rollouts' mean rows (own chain, twin), the predictors' rows."""

    windows: dict = field(default_factory=dict)
    rollouts: dict = field(default_factory=dict)
    predictors: dict[str, EvaluatorRow] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"windows": self.windows, "rollouts": self.rollouts,
                "predictors": {k: r.to_json() for k, r in self.predictors.items()}}


def collect_scene(plan: Plan) -> Optional[SceneSection]:
    if not plan.scene:
        return None
    sc, section = plan.scene, SceneSection()
    for name, folder in sc.evals.items():
        try:
            scores = WindowEvaluation.read(folder, f"the full-scene section's {name}").scores
        except ConfigError:
            continue
        section.windows[name] = {"psnr": scores.psnr, "af_pos": scores.action.af_pos}
    for name, folder in sc.rollouts.items():
        try:
            r = RolloutDrift.read(folder, f"the full-scene section's {name}")
        except ConfigError:
            continue
        section.rollouts[name] = {k: r.rows[k].mean for k in ("rollout", "restart") if k in r.rows}
    try:
        agreement: Optional[AgreementResult] = AgreementResult.read(sc.agreement, "the full-scene section")
    except ConfigError:
        agreement = None
    n = plan.budget.wm_eval.estimate_n
    for key, folder in sc.estimates.items():
        env = TWIN_ENV if key == "scene-simulator" else key.split(" (")[0]
        row = evaluator_row(key, agreement, folder, n, env=env)
        if row is not None:
            if key == "scene-simulator":  # its ranking and success rates are the twin's own, not the world model's
                row = EvaluatorRow(key, n=row.n, coverage=row.coverage, saved=row.saved,
                                   trust_auroc=row.trust_auroc, rho_verdict=row.rho_verdict,
                                   rho_predictor=row.rho_predictor, folder=row.folder)
            section.predictors[key] = row
    return section if (section.windows or section.rollouts or section.predictors) else None


def _f(v: Optional[float], scale: float = 1.0) -> str:
    return "—" if v is None else f"{scale * v:.2f}"


def scene_lines(section: Optional[SceneSection], plan: Plan) -> list[str]:
    if section is None:
        return []
    lines = ["", "## The second pairing: a simulation of the whole scene (--full)", "",
             "The same real episodes paired with a simulation of the whole scene — arm and objects, plain, with "
             "physics of its own (object masses, frictions and sizes and the servos perturbed per episode: `data "
             "synth --pairing scene --physics-gap 1`) — as InternData-A1 pairs them; its own VAE and stage 1, `sft` and "
             "SimForcing from it.", ""]
    if section.windows:
        lines += ["| one window (held-out real episodes) | PSNR (dB) | action error (cm) |", "|---|---|---|"]
        for name, r in section.windows.items():
            lines.append(f"| {name} | {_f(r.get('psnr'))} | {_f(r.get('af_pos'), 100)} |")
        lines.append("")
    if section.rollouts:
        lines += ["| SimForcing, 8-chunk rollout | rollout PSNR | rollout action error (cm) | restarted (cm) |",
                  "|---|---|---|---|"]
        for name, r in section.rollouts.items():
            ro, re = r.get("rollout", {}), r.get("restart", {})
            lines.append(f"| {'full-scene twin' if 'twin' in name else 'own simulation chain'} | "
                         f"{_f(ro.get('psnr'))} | {_f(ro.get('af_pos'), 100)} | {_f(re.get('af_pos'), 100)} |")
        lines.append("")
    if section.predictors:
        table = EvaluatorsSection(section.predictors, None, plan.budget.wm_eval.pool_per_task_full,
                                  plan.budget.wm_eval.estimate_draws)
        lines += ["Predicting the policies' real success on the arm pairing's pool (the same real scenes and truth): "
                  "`scene-simulator` is the twin's own verdict (its physics, the world model's frames unused); "
                  "`(learned)` the cross-fitted predictor of each episode's features (with the twin, its verdict "
                  "among them), `(verdict)` the world model's verdict alone.", "", *evaluators_table(table), ""]
    return lines
