"""The README's two demo tables, written from a recorded run rather than copied by hand.

``figures(results)`` takes the numbers the README quotes out of a demo's ``results.json``;
``docs/demo_timing/record.py`` keeps them in ``timing.json`` beside that run's times, and :func:`render` of that entry
is the README's table ``demo`` (``simforcing.docs_tables``: ``python -m simforcing.docs_tables --write`` rewrites the
block, ``docs/demo_timing/record.py --readme LABEL`` points it at another run; ``tests/test_docs.py`` checks the block
is the rendering of the entry it names, so the README cannot drift from the recorded run).
"""

from __future__ import annotations

from typing import Optional

from simforcing.demo.report import CM
from simforcing.result_files import figure as _f, percent as _pct, table_number

# (figure key, world model as the pool's agreement and estimates name it); the default demo's pool (issue 68) and
# --full's other world models (older records hold them)
RANKED = (("copy_first", "copy-first"), ("simforcing_twin", "simforcing-fewstep-twin"),
          ("views_twin", "simforcing-views-fewstep-twin"), ("sft", "sft-fewstep"), ("simforcing", "simforcing-fewstep"),
          ("evaluator", "evaluator-fewstep"), ("evaluator_twin", "evaluator-fewstep-twin"))
# (figure key prefix, the views section's one-window row)
VIEW_WINDOWS = (("views_copy", "copy-first-views"), ("views_sft", "sft-views"), ("views_simforcing", "simforcing-views"))
HARNESS = "simulator frames through the judge"


def _get(d: dict, *keys) -> Optional[float]:
    """The number at ``keys`` below ``d``: None where a section or row is missing (a job that did not run or failed)
    or the statistic is undefined (null, NaN); a value of another type a ValueError naming where it is."""
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return _number(d, ".".join(map(str, keys)))


def _number(v, where: str) -> Optional[float]:
    try:
        return table_number(v)
    except ValueError as e:
        raise ValueError(f"results.json: {where}: {e}") from None


def _section(d: dict, *keys) -> dict:
    """The object at ``keys`` below ``d`` ({} where it is missing), a value that is no object a ValueError naming it."""
    for i, k in enumerate(keys):
        d = d.get(k) if isinstance(d, dict) else None
        if d is None:
            return {}
        if not isinstance(d, dict):
            raise ValueError(f"results.json: {'.'.join(keys[:i + 1])} is a JSON {type(d).__name__}, not an object; "
                             "not a demo's results.json as `simforcing demo` writes it")
    return d


def missing_sections(results: dict) -> list[str]:
    """The sections of a demo's results.json the README's tables read that it lacks (a job that failed or did not
    run): their figures are shown "—"."""
    return [k for k in ("summary", "baselines", "fewstep", "rollouts", "wm_eval", "estimate") if not results.get(k)]


def figures(results: dict) -> dict[str, Optional[float]]:
    """The README's numbers from a demo's results.json (None where the run made no such row, or a statistic was
    undefined; :func:`missing_sections` names the sections that are not there); a section or number of the wrong
    type is a ValueError naming it."""
    if not isinstance(results, dict):
        raise ValueError(f"results.json is a JSON {type(results).__name__}, not a demo's results (an object)")
    rows = _section(results, "summary", "rows")
    copy_first = _section(results, "baselines", "copy-first")
    few = _section(results, "fewstep", "windows")
    runs = _section(results, "rollouts", "runs")
    harness = _section(results, "wm_eval", "harness", "ranking", HARNESS)
    rows_ev = _section(results, "estimate", "rows")

    def cm(v: Optional[float]) -> Optional[float]:
        return None if v is None else v * CM

    out = {"copy_psnr": _get(copy_first, "psnr"), "copy_cm": cm(_get(copy_first, "af_pos"))}
    for m in ("sft", "simforcing"):
        out[f"{m}_psnr"], out[f"{m}_cm"] = _get(rows, m, "psnr"), cm(_get(rows, m, "af_pos"))
    out["student_psnr"], out["student_cm"] = _get(few, "psnr", "student"), cm(_get(few, "af_pos", "student"))
    for key, run in (("rollout", "simforcing"), ("rollout_twin", "simforcing twin")):
        mean = _section(runs, run, "rows", "rollout", "mean")
        out[f"{key}_psnr"], out[f"{key}_cm"] = _get(mean, "psnr"), cm(_get(mean, "af_pos"))
    out["pearson_harness"] = _get(harness, "all", "pearson")
    windows = _section(results, "views", "windows")
    for key, name in VIEW_WINDOWS:  # the multi-view models: the wrist view's PSNR, the action error (external view)
        out[f"{key}_wrist_psnr"] = _get(windows, name, "views", "wrist", "psnr")
        out[f"{key}_cm"] = cm(_get(windows, name, "af_pos"))
    pool = _section(results, "views", "pool")
    for key, name in (("views_twin", "simforcing-views-fewstep-twin"), ("simforcing_twin", "simforcing-fewstep-twin")):
        for task in ("push", "grasp"):
            out[f"rho_{task}_{key}"] = _get(pool, name, "rho", task)
    for key, name in RANKED:
        row = _section(rows_ev, name)
        out[f"pearson_{key}"], out[f"rho_{key}"] = _get(row, "pearson"), _get(row, "rho_predictor")
        out[f"saved_{key}"] = _get(row, "saved")
        ci = row.get("pearson_ci95") or (None, None)
        if not isinstance(ci, (list, tuple)) or len(ci) != 2:
            raise ValueError(f"results.json: estimate.rows.{name}.pearson_ci95 must be two numbers; got {ci!r:.40}")
        out[f"pearson_{key}_lo"], out[f"pearson_{key}_hi"] = (_number(v, f"estimate.rows.{name}.pearson_ci95")
                                                              for v in ci)
    return out


def _ranked(f: dict, key: str, label: str) -> str:
    """One pool row; a Pearson left undefined in a row that was estimated (its verdicts all alike: the copy-first
    "world model" never shows a success) says so rather than "—" (a figure not recorded)."""
    lo, hi = f.get(f"pearson_{key}_lo"), f.get(f"pearson_{key}_hi")
    ci = "" if lo is None or hi is None else f" [{_f(lo)}, {_f(hi)}]"
    pearson = f.get(f"pearson_{key}")
    shown = ("undefined (one verdict for every policy)" if pearson is None and f.get(f"saved_{key}") is not None
             else _f(pearson))
    return f"| {label} | {shown}{ci} | {_f(f.get(f'rho_{key}'))} | {_pct(f.get(f'saved_{key}'))} |"


def render(entry: dict) -> str:
    """The two tables of one timing.json entry's ``figures`` (its commit, machine and date: the block's last line,
    ``simforcing.docs_tables``); a figure the entry lacks (recorded before it was kept) or left undefined is "—"."""
    f = entry["figures"]

    def v(key: str) -> str:
        return _f(f.get(key))

    lines = ["| `make demo`, held-out real episodes | PSNR (dB) ↑ | action error (cm) ↓ |", "|---|---|---|",
             f"| one window: copy the first frame / `sft` / **SimForcing** | {v('copy_psnr')} / {v('sft_psnr')} / "
             f"**{v('simforcing_psnr')}** | {v('copy_cm')} / {v('sft_cm')} / **{v('simforcing_cm')}** |",
             f"| SimForcing's few-step student: one window in 2 network evaluations instead of 21 | "
             f"{v('student_psnr')} | {v('student_cm')} |",
             f"| SimForcing, 8-chunk rollout: condition from its own simulation chain / **from the robot's digital "
             f"twin** | {v('rollout_psnr')} / **{v('rollout_twin_psnr')}** | {v('rollout_cm')} / "
             f"**{v('rollout_twin_cm')}** |",
             f"| both cameras, one window on the wrist camera: copy the first frame / `sft` / **SimForcing** | "
             f"{v('views_copy_wrist_psnr')} / {v('views_sft_wrist_psnr')} / **{v('views_simforcing_wrist_psnr')}** | "
             f"{v('views_copy_cm')} / {v('views_sft_cm')} / **{v('views_simforcing_cm')}** |", "",
             "| `make demo`, 8 policies on 60 held-out scenes each | Pearson with the simulator's ranking [95 %] ↑ "
             "| within-policy ρ ↑ | real trials saved at n = 10 ↑ |", "|---|---|---|---|",
             f"| the simulator's own frames through the success judge (its harness check, 15 scenes) | "
             f"{v('pearson_harness')} | | |",
             _ranked(f, "copy_first", "a \"world model\" that copies the first frame (the actions alone)"),
             _ranked(f, "simforcing_twin", "inside SimForcing's few-step student, with the robot's digital twin"),
             _ranked(f, "views_twin", "inside **SimForcing on both cameras** (external + wrist), with the twin")]
    return "\n".join(lines)
