"""The demo report's section on which world model to judge policies in: every world model of the pool (the evaluator's
few-step student and SimForcing's, each with its own simulation chain and with the twin, `sft`'s; the teachers too with
--full) on the same 60 scenes per task — its ranking of the policies against the simulator's (Pearson, MMRV with their
95 % intervals, ``policy agreement``), what its episodes are worth as predictions of the truth (within-policy ρ,
ground-truth trials saved at n, the worst policy's coverage, the trust AUROC: ``policy estimate``'s coverage study)
and what it makes of the clean and the noisiest expert — each beside the issue's aim (``AIMS``), then the evaluator's
own estimate in full (docs/POLICY_EVALUATION.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from simforcing.config import ConfigError
from simforcing.demo.plan import EVALUATOR, TWIN, Plan, student_of, views_of
from simforcing.fidelity import Aim
from simforcing.policy.closed_loop.results import AgreementResult
from simforcing.policy.estimate.estimate import StudyPoint
from simforcing.result_files import POLICY_ESTIMATE, MalformedResult, mark, nested, percent, read_result
from simforcing.utils import fmt_num, relative_to

CLEAN, NOISIEST = "scripted expert (ceiling)", "scripted expert, noise 4 cm/step"
# the evaluator's aims (issue 53): at n = 10 ground-truth scenes per policy, over the coverage study's draws
AIMS = (Aim("coverage", "worst policy's coverage of its truth (95 % intervals)", 0.93, below=False),
        Aim("saved", "ground-truth trials saved at equal width", 0.50, below=False),
        Aim("trust_auroc", "trust AUROC (the verdict being wrong)", 0.80, below=False),
        Aim("pearson", "Pearson of the raw success rates with the simulator's", 0.90, below=False),
        Aim("mmrv", "MMRV of the raw success rates", 0.10),
        Aim("clean_expert", "the clean expert's success inside", 0.80, below=False),
        Aim("noisiest_expert", "the 4 cm/step expert's success inside", 0.20))


@dataclass(frozen=True)
class EvaluatorRow:
    """One world model of the pool: its ranking (Pearson and MMRV of the raw rates, 95 % bootstrap intervals), its
    coverage study at ``n`` (worst coverage, trials saved, trust AUROC, within-policy ρ of its verdict and of the
    learned predictor) and the two experts' success inside it (None where a job has not finished)."""

    name: str
    pearson: Optional[float] = None
    pearson_ci95: Optional[tuple] = None
    mmrv: Optional[float] = None
    mmrv_ci95: Optional[tuple] = None
    n: Optional[int] = None
    coverage: Optional[float] = None
    saved: Optional[float] = None
    trust_auroc: Optional[float] = None
    rho_verdict: Optional[float] = None
    rho_predictor: Optional[float] = None
    clean_expert: Optional[float] = None
    noisiest_expert: Optional[float] = None
    folder: Optional[str] = None  # its estimate's folder

    def met(self) -> dict[str, Optional[bool]]:
        return {a.key: a.met(getattr(self, a.key)) for a in AIMS}

    def to_json(self) -> dict:
        return {**asdict(self), "aims": self.met()}


@dataclass(frozen=True)
class EvaluatorsSection:
    """Every world model of the pool (``rows``, in the plan's order), which of them is the demo's evaluator, and the
    pool's size."""

    rows: dict[str, EvaluatorRow]
    evaluator: Optional[str]
    per_task: int
    draws: int

    def to_json(self) -> dict:
        return {"rows": {k: r.to_json() for k, r in self.rows.items()}, "evaluator": self.evaluator,
                "per_task": self.per_task, "draws": self.draws,
                "aims": {a.key: {"label": a.label, "bound": a.bound, "below": a.below} for a in AIMS}}


def _study(folder: Path, n: int) -> Optional[StudyPoint]:
    """The coverage study's point at ``n`` of the estimate in ``folder``, every field typed (``StudyPoint.from_json``,
    each policy's coverage holding its PPI interval's); None where there is none or the file does not read as one (a
    record cut short or edited is "—" in the report, never a traceback or its wrong number)."""
    try:
        body, _ = read_result(folder / "estimate.json", POLICY_ESTIMATE, 1, f"the estimate section's {folder.name}")
        study = body.get("study") or []
        points = [nested(f"study[{i}]", StudyPoint.from_json, s) for i, s in enumerate(study)] \
            if isinstance(study, list) else []
    except (ConfigError, MalformedResult, AttributeError, TypeError):
        return None
    point = next((s for s in points if s.n == n), None)
    ok = point is not None and point.coverage and all("ppi" in c for c in point.coverage.values())
    return point if ok else None


def collect_estimate(plan: Plan) -> Optional[EvaluatorsSection]:
    """The section's numbers from the files the pool's jobs wrote; None when the demo has no pool or nothing of it
    finished."""
    wm = plan.wm_eval or {}
    evals = wm.get("pool_evals") or {}
    if not evals:
        return None
    try:
        agreement: Optional[AgreementResult] = AgreementResult.read(wm["pool_agreement"], "the estimate section")
    except ConfigError:
        agreement = None
    w = plan.budget.wm_eval
    rows = {}
    for name in evals:
        row = evaluator_row(name, agreement, (wm.get("estimate") or {}).get(name), w.estimate_n)
        if row is not None:
            rows[name] = row
    if not rows:
        return None
    # the demo's evaluator: the multi-view world model with the twin (issue 67), else the recipe's (--full)
    evaluator = next((e for e in (student_of(views_of("simforcing")) + TWIN, student_of(EVALUATOR) + TWIN)
                      if e in rows), None)
    return EvaluatorsSection(rows, evaluator, w.pool_per_task_full if plan.full else w.pool_per_task,
                             w.estimate_draws)


def evaluator_row(name: str, agreement: Optional[AgreementResult], estimate: Optional[Path], n: int,
                  env: Optional[str] = None) -> Optional[EvaluatorRow]:
    """World model ``name``'s row: its ranking and the experts' success inside it from ``agreement`` (as ``env``
    there, default ``name``), its coverage study at ``n`` from the ``estimate`` folder; None where neither finished."""
    env = env or name
    row: dict = {"name": name}
    stats = agreement.ranking.get(env, {}).get("all") if agreement is not None else None
    if stats is not None:
        row.update(pearson=_finite(stats.pearson), pearson_ci95=tuple(stats.pearson_ci95), mmrv=_finite(stats.mmrv),
                   mmrv_ci95=tuple(stats.mmrv_ci95))
    if agreement is not None and env in agreement.envs:
        rates = agreement.envs[env]
        row.update(clean_expert=rates[CLEAN].rate if CLEAN in rates else None,
                   noisiest_expert=rates[NOISIEST].rate if NOISIEST in rates else None)
    s = _study(Path(estimate), n) if estimate is not None else None
    if s is not None:
        row.update(n=s.n, coverage=min(c["ppi"] for c in s.coverage.values()), saved=s.saved,
                   trust_auroc=s.trust_auroc, rho_verdict=s.rho_verdict, rho_predictor=s.rho_predictor,
                   folder=str(estimate))
    return EvaluatorRow(**row) if len(row) > 1 else None


def _finite(v) -> Optional[float]:
    return None if v is None or v != v else float(v)


def _ci(v: Optional[float], ci: Optional[tuple]) -> str:
    if v is None:
        return "—"
    lo, hi = ci if ci else (None, None)
    return fmt_num(v, 2) + ("" if lo is None or hi is None else f" [{fmt_num(lo, 2)}, {fmt_num(hi, 2)}]")


def evaluators_table(section: EvaluatorsSection, columns: tuple[str, ...] = (),
                     cells: Optional[dict[str, tuple[str, ...]]] = None) -> list[str]:
    """One row per world model, the aims' row first; ✓/✗ beside each value against its aim. ``columns``: more
    columns after the world model's name, each row's ``cells`` for them (by the row's name)."""
    more = "".join(f" {c} |" for c in columns)
    head = (f"| world model |{more} Pearson vs simulator [95 %] | MMRV [95 %] | within-policy ρ: verdict / predictor "
            "| trials saved | worst coverage | trust AUROC | clean expert inside | 4 cm/step expert inside |")
    aims = {a.key: a for a in AIMS}

    def aim(key: str, pct: bool = False) -> str:
        a = aims[key]
        return ("≤ " if a.below else "≥ ") + (f"{100 * a.bound:.0f} %" if pct else f"{a.bound:g}")

    lines = [head, "|---|" + "---|" * len(columns) + "---|---|---|---|---|---|---|---|",
             f"| *aim* |{' |' * len(columns)} {aim('pearson')} | {aim('mmrv')} | (≈ 0.71 saves half) | "
             f"{aim('saved', True)} | "
             f"{aim('coverage', True)} | {aim('trust_auroc')} | {aim('clean_expert', True)} | "
             f"{aim('noisiest_expert', True)} |"]
    for name, r in section.rows.items():
        m = r.met()
        label = f"**{name}** (the demo's evaluator)" if name == section.evaluator else name
        extra = "".join(f" {c} |" for c in (cells or {}).get(name, ("",) * len(columns)))
        lines.append(f"| {label} |{extra} {_ci(r.pearson, r.pearson_ci95)}{mark(m['pearson'])} | "
                     f"{_ci(r.mmrv, r.mmrv_ci95)}{mark(m['mmrv'])} | {fmt_num(r.rho_verdict, 2)} / "
                     f"{fmt_num(r.rho_predictor, 2)} | {percent(r.saved)}{mark(m['saved'])} | "
                     f"{'—' if r.coverage is None else f'{100 * r.coverage:.1f} %'}{mark(m['coverage'])} | "
                     f"{fmt_num(r.trust_auroc, 2)}{mark(m['trust_auroc'])} | "
                     f"{percent(r.clean_expert)}{mark(m['clean_expert'])} | "
                     f"{percent(r.noisiest_expert)}{mark(m['noisiest_expert'])} |")
    return lines


def estimate_lines(section: Optional[EvaluatorsSection], plan: Plan) -> list[str]:
    if not section:
        return []
    w = plan.budget.wm_eval
    lines = ["", "## Which world model to judge policies in", "",
             f"Every world model on the same pool of {section.per_task} held-out scenes per task (8 policies, "
             f"{3 * section.per_task * 8} episodes each), against the simulator's verdict on every episode: the raw "
             "ranking (Pearson, MMRV; 95 % bootstrap intervals over scenes) and, with "
             f"{w.estimate_n} ground-truth scenes per policy drawn {section.draws} times, what its episodes are worth "
             "as predictions (`policy estimate`: the within-policy correlation ρ of its verdict and of the learned "
             "predictor with the truth, the ground-truth trials the prediction-powered interval saves at equal width, "
             "the worst policy's coverage, the trust AUROC). `-fewstep`: the few-step student (2 network evaluations "
             "per chunk); `-twin`: the robot's digital twin renders its condition. ✓/✗: the evaluator's aims "
             "(issue 53). What to record on a robot and how to read an estimate: docs/POLICY_EVALUATION.md.", "",
             *evaluators_table(section), ""]
    ev = section.rows.get(section.evaluator) if section.evaluator else None
    if ev is not None and ev.folder:
        folder = Path(ev.folder)
        lines += [f"### The evaluator's estimate in full (`{ev.name}`)", ""]
        try:
            lines += (folder / "estimate.md").read_text().rstrip().splitlines()
        except OSError:
            pass
        for png in ("estimates.png", "coverage.png"):
            if (folder / png).exists():
                lines += ["", f"![{png}]({relative_to(folder / png, plan.out)})"]
        lines.append("")
    return lines
