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

# (figure key, world model as the pool's agreement and estimates name it)
RANKED = (("sft", "sft-fewstep"), ("simforcing", "simforcing-fewstep"), ("simforcing_twin", "simforcing-fewstep-twin"),
          ("evaluator", "evaluator-fewstep"), ("evaluator_twin", "evaluator-fewstep-twin"))
HARNESS = "simulator frames through the judge"


def _get(d: dict, *keys) -> Optional[float]:
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return float(d)


def figures(results: dict) -> dict[str, Optional[float]]:
    """The README's numbers from a demo's results.json (None where the run made no such row)."""
    rows = (results.get("summary") or {}).get("rows") or {}
    copy_first = (results.get("baselines") or {}).get("copy-first") or {}
    few = (results.get("fewstep") or {}).get("windows") or {}
    runs = (results.get("rollouts") or {}).get("runs") or {}
    wm_eval = results.get("wm_eval") or {}
    harness = ((wm_eval.get("harness") or {}).get("ranking") or {}).get(HARNESS) or {}
    rows_ev = (results.get("estimate") or {}).get("rows") or {}

    def cm(v: Optional[float]) -> Optional[float]:
        return None if v is None else v * CM

    out = {"copy_psnr": _get(copy_first, "psnr"), "copy_cm": cm(_get(copy_first, "af_pos"))}
    for m in ("sft", "simforcing"):
        out[f"{m}_psnr"], out[f"{m}_cm"] = _get(rows, m, "psnr"), cm(_get(rows, m, "af_pos"))
    out["student_psnr"], out["student_cm"] = _get(few, "psnr", "student"), cm(_get(few, "af_pos", "student"))
    for key, run in (("rollout", "simforcing"), ("rollout_twin", "simforcing twin")):
        mean = ((runs.get(run) or {}).get("rows") or {}).get("rollout", {}).get("mean", {})
        out[f"{key}_psnr"], out[f"{key}_cm"] = _get(mean, "psnr"), cm(_get(mean, "af_pos"))
    out["pearson_harness"] = _get(harness, "all", "pearson")
    for key, name in RANKED:
        row = rows_ev.get(name) or {}
        out[f"pearson_{key}"], out[f"rho_{key}"] = _get(row, "pearson"), _get(row, "rho_predictor")
        out[f"saved_{key}"] = _get(row, "saved")
        ci = row.get("pearson_ci95") or (None, None)
        out[f"pearson_{key}_lo"], out[f"pearson_{key}_hi"] = (None if v is None else float(v) for v in ci)
    return out


def _f(v: Optional[float]) -> str:
    return "—" if v is None else f"{v:.2f}"


def _pct(v: Optional[float]) -> str:
    return "—" if v is None else f"{100 * v:.0f} %"


def _ranked(f: dict, key: str, label: str) -> str:
    ci = "" if f.get(f"pearson_{key}_lo") is None else f" [{_f(f[f'pearson_{key}_lo'])}, {_f(f[f'pearson_{key}_hi'])}]"
    return (f"| {label} | {_f(f.get(f'pearson_{key}'))}{ci} | {_f(f.get(f'rho_{key}'))} | "
            f"{_pct(f.get(f'saved_{key}'))} |")


def render(entry: dict) -> str:
    """The two tables of one timing.json entry's ``figures`` (its commit, machine and date: the block's last line,
    ``simforcing.docs_tables``)."""
    f = entry["figures"]
    lines = ["| `make demo`, held-out real episodes | PSNR (dB) ↑ | action error (cm) ↓ |", "|---|---|---|",
             f"| one window: copy the first frame / `sft` / **SimForcing** | {_f(f['copy_psnr'])} / "
             f"{_f(f['sft_psnr'])} / **{_f(f['simforcing_psnr'])}** | {_f(f['copy_cm'])} / {_f(f['sft_cm'])} / "
             f"**{_f(f['simforcing_cm'])}** |",
             f"| SimForcing's few-step student: one window in 2 network evaluations instead of 21 | "
             f"{_f(f['student_psnr'])} | {_f(f['student_cm'])} |",
             f"| SimForcing, 8-chunk rollout: condition from its own simulation chain / **from the robot's digital "
             f"twin** | {_f(f['rollout_psnr'])} / **{_f(f['rollout_twin_psnr'])}** | {_f(f['rollout_cm'])} / "
             f"**{_f(f['rollout_twin_cm'])}** |", "",
             "| `make demo`, 8 policies on 60 held-out scenes each | Pearson with the simulator's ranking [95 %] ↑ "
             "| within-policy ρ ↑ | real trials saved at n = 10 ↑ |", "|---|---|---|---|",
             f"| the simulator's own frames through the success judge (its harness check, 15 scenes) | "
             f"{_f(f.get('pearson_harness'))} | | |",
             _ranked(f, "sft", "inside `sft`'s few-step student"),
             _ranked(f, "simforcing", "inside SimForcing's few-step student (the paper's data)"),
             _ranked(f, "simforcing_twin", "the same, with the robot's digital twin"),
             _ranked(f, "evaluator", "inside **the evaluator** (the same, trained on evaluation data)"),
             _ranked(f, "evaluator_twin", "inside **the evaluator, with the twin**")]
    return "\n".join(lines)
