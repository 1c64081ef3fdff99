"""The docs' tables, written from recorded results, never typed by hand.

A *record* is a results file under docs/ that a command wrote: a demo run's timing and figures
(docs/demo_timing/timing.json), a benchmark, a fidelity curve, an estimate. :data:`TABLES` names every table a page
shows: the record(s) it is rendered from, the function that renders it (through the record's own typed reader and
table code where the package has them) and the command that records it again. A page holds a table between two
markers, the record named in the first::

    <!-- table NAME: from docs/RECORD.json -->
    ...
    <!-- end of table NAME -->

(``, entry "LABEL"`` after the record picks one run of a record that holds several: timing.json's). The block is the
rendering, then one line with the record's commit, machine and date, the record and the command that makes it. Where
a record does not say its commit, machine and date itself, docs/records.json does (:data:`PROVENANCE`).

    python -m simforcing.docs_tables --write      # every block of every page, and docs/RESULTS.md (every table)
    python -m simforcing.docs_tables --check      # exit 1 naming each block that is not its rendering
    python -m simforcing.docs_tables --list       # the tables: name, record, the command that records it
    python -m simforcing.docs_tables --record NAME FILE --machine M [--commit C] [--date D]
                                                  # keep a command's output as NAME's record, then --write

tests/test_docs.py fails when a block is not its rendering, when a user page (:data:`USER_PAGES`) types a figure of
a table by hand outside the blocks, when a capability page does not open with a table, or when the user pages exceed
their line budget.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import tempfile
import subprocess
import sys
from dataclasses import dataclass, fields
from os.path import relpath
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from simforcing.errors import ConfigError
from simforcing.result_files import MalformedResult, figure, nested, table_number

ROOT = Path(__file__).resolve().parents[1]
PROVENANCE = "docs/records.json"  # record path -> {"commit", "machine", "date", "note"} for records that lack them
TIMING = "docs/demo_timing/timing.json"
RESULTS_PAGE = "docs/RESULTS.md"
# the user's pages: the README, the guide, one page per capability, the results; DESIGN.md (the developers') and the
# notebook (docs/notebook/) are not among them
CAPABILITY_PAGES = ("docs/WORLD_MODELS.md", "docs/ROLLOUTS.md", "docs/POLICY_EVALUATION.md", "docs/FEWSTEP.md",
                    "docs/POLICY_TRANSFER.md", "docs/REAL_SCALE.md", "docs/BENCHMARK.md", "docs/RELIABILITY.md")
USER_PAGES = ("README.md", "docs/GUIDE.md", *CAPABILITY_PAGES, RESULTS_PAGE)
LINE_BUDGET = 1500  # the user's pages together (``wc -l``)
FIRST_SCREEN = 40  # a capability page's first table starts within its first lines
WRITE = "python -m simforcing.docs_tables --write"


class TableError(ValueError):
    """A block or record the generator cannot use: the message names the page or file and the fix."""


@dataclass(frozen=True)
class Table:
    """One table of the docs: ``records`` (paths from the repository root; the first is the one a block names),
    ``render(paths, entry)`` -> markdown, ``command``: what records it again, ``page``: the user page it answers
    for, ``caption``: its line on docs/RESULTS.md (None: not repeated there — a part of another table),
    ``extract``: the record from a command's output file (``record``; None: the output is the record as it is),
    ``one_run``: the table shows one run of a record holding several (a block's ``entry``; the newest without)."""

    name: str
    records: tuple[str, ...]
    render: Callable[[tuple[Path, ...], Optional[str]], str]
    command: str
    page: str
    caption: Optional[str]
    extract: Optional[Callable[[Any], Any]] = None
    one_run: bool = False


# ----------------------------------------------------------------------------------------------------------------------
# Records and their provenance
# ----------------------------------------------------------------------------------------------------------------------

def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TableError(f"{path}: not a readable JSON record ({e}); restore it from git or record it again") from None


def timing_entry(path: Path, label: Optional[str]) -> dict:
    """timing.json's run ``label``, or its newest run with figures when ``label`` is None; a record that is not a list
    of runs (objects) is a TableError naming it."""
    runs = _json(path)
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise TableError(f"{path}: not a list of recorded runs (JSON objects); restore it from git or record the runs "
                         "again with docs/demo_timing/record.py")
    if label is None:
        with_figures = [r for r in runs if "figures" in r]
        if not with_figures:
            raise TableError(f"{path}: no run with figures; record one with docs/demo_timing/record.py")
        return with_figures[-1]
    for r in runs:
        if r.get("label") == label:
            return r
    raise TableError(f"{path}: no entry {label!r}; its entries: {[r.get('label') for r in runs]}")


def provenance(table: Table, entry: Optional[str], root: Path) -> str:
    """"commit `C`, MACHINE, DATE" of the record a block shows: the timing entry's own, else docs/records.json's."""
    if table.records[0] == TIMING:
        if not table.one_run:
            return "Each row: its run's commit, machine and date"
        e = timing_entry(root / TIMING, entry)
        took = e.get("from_nothing_min")
        bad = [k for k in ("commit", "machine", "date") if not isinstance(e.get(k), str)]
        if bad or not (took is None or (isinstance(took, (int, float)) and not isinstance(took, bool)
                                        and took == took and abs(took) != float("inf"))):
            raise TableError(f"{root / TIMING}: entry {e.get('label')!r}: "
                             + (f"field {bad[0]!r} must be a string" if bad else
                                f"field 'from_nothing_min' must be a number of minutes; got {took!r:.40}")
                             + "; restore it from git or record it again with docs/demo_timing/record.py")
        return (f"`make demo` on a clean clone of `{e['commit']}`, {e['machine']}, {e['date']}"
                + ("" if took is None else f" ({took:.1f} minutes from nothing)"))
    index = _json(root / PROVENANCE) if (root / PROVENANCE).exists() else {}
    if not isinstance(index, dict):
        raise TableError(f"{root / PROVENANCE}: not an object of record -> its commit, machine and date; restore it "
                         "from git")
    p = index.get(table.records[0])
    if not isinstance(p, dict) or not all(isinstance(p.get(k), str) for k in ("commit", "machine", "date")):
        raise TableError(f"{PROVENANCE}: no commit, machine and date for {table.records[0]}; add them (or record "
                         f"it with `python -m simforcing.docs_tables --record {table.name} FILE --machine M`)")
    return f"commit `{p['commit']}`, {p['machine']}, {p['date']}"


# ----------------------------------------------------------------------------------------------------------------------
# The renderings
# ----------------------------------------------------------------------------------------------------------------------

def render_demo(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    """The README's demo tables (``simforcing.demo.readme_tables.render``) of one timing.json run."""
    from simforcing.demo.readme_tables import render

    e = timing_entry(paths[0], entry)
    if "figures" not in e:
        raise TableError(f"{paths[0]}: entry {e['label']!r} has no figures (recorded before they were kept)")
    return render(e)


def _figures(paths: tuple[Path, ...], entry: Optional[str]) -> dict:
    e = timing_entry(paths[0], entry)
    return e.get("figures") or {}


def render_one_window(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    f = _figures(paths, entry)
    rows = (("copy the first frame (a model that does not move)", "copy"), ("`sft`: real data only", "sft"),
            ("**SimForcing**", "simforcing"), ("SimForcing's few-step student", "student"))
    return "\n".join(["| one window, held-out real episodes, the paper's sampler | PSNR (dB) ↑ | action error (cm) ↓ |",
                      "|---|---|---|"] + [f"| {label} | {figure(f.get(f'{k}_psnr'))} | {figure(f.get(f'{k}_cm'))} |"
                                          for label, k in rows])


def render_rollouts(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    f = _figures(paths, entry)
    rows = (("its own simulation chain (the paper's sampler)", "rollout"),
            ("**the robot's digital twin** renders the condition", "rollout_twin"))
    return "\n".join(["| SimForcing, long rollouts of held-out episodes | PSNR (dB) ↑ | action error (cm) ↓ |",
                      "|---|---|---|"] + [f"| {label} | {figure(f.get(f'{k}_psnr'))} | {figure(f.get(f'{k}_cm'))} |"
                                          for label, k in rows])


DEMO_RUNS_SHOWN = 5  # the latest recorded demo runs a page shows (every one stays in timing.json)


def render_demo_runs(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    lines = ["| run (timing.json entry) | commit | date | machine | from nothing (min) | of jobs (min) | one-window "
             "table at (min of jobs) | PSNR `sft` / SimForcing | action error (cm) `sft` / SimForcing |",
             "|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for e in _json(paths[0]):  # every run read (a broken one is named), the latest shown
        f = e.get("figures") or {}
        rows.append(f"| {e['label']} | `{e['commit']}` | {e['date']} | {e['machine']} | "
                     f"{figure(e.get('from_nothing_min'), 1)} | {figure(e.get('jobs_min'), 1)} | "
                     f"{figure(e.get('one_window_table_min'), 1)} | "
                     f"{figure(f.get('sft_psnr'))} / {figure(f.get('simforcing_psnr'))} | {figure(f.get('sft_cm'))} / "
                     f"{figure(f.get('simforcing_cm'))} |")
    return "\n".join(lines + rows[-DEMO_RUNS_SHOWN:])


def render_fidelity_curve(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    """``simforcing fidelity curve``'s own table (``FidelityCurve.markdown``), read through its typed reader."""
    from simforcing.fidelity import FidelityCurve

    curve = FidelityCurve.read(paths[0], f"the docs' table from {paths[0]}")
    if not curve.points:
        raise TableError(f"{paths[0]}: a fidelity curve of no points; record one made with `simforcing fidelity curve "
                         "--points P1 P2 ...`")
    return curve.markdown().rstrip()


def evaluators_section(body: dict):
    """The demo's ``EvaluatorsSection`` from its JSON (``to_json``: rows, evaluator, per_task, draws)."""
    from simforcing.demo.estimate_section import EvaluatorRow, EvaluatorsSection

    known = {f.name for f in fields(EvaluatorRow)}

    def value(name: str, key: str, v: Any) -> Any:
        """A row's figure as the table shows it (``table_number``: NaN undefined, a word refused by its row)."""
        if key in ("name", "folder"):
            return v
        try:
            return None if v is None else [table_number(x) for x in v] if isinstance(v, list) else table_number(v)
        except (TypeError, ValueError) as e:
            raise ValueError(f"rows[{name!r}].{key}: {e}") from None

    rows = {name: EvaluatorRow(**{k: value(name, k, v) for k, v in r.items() if k in known})
            for name, r in body["rows"].items()}
    return EvaluatorsSection(rows, body.get("evaluator"), int(body["per_task"]), int(body["draws"]))


def render_evaluators(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    """The demo report's evaluators table (``simforcing.demo.estimate_section.evaluators_table``)."""
    from simforcing.demo.estimate_section import evaluators_table

    body = _json(paths[0])
    try:
        section = evaluators_section(body)
    except (KeyError, TypeError, ValueError) as e:
        raise TableError(f"{paths[0]}: not the demo's estimate section ({e!r}); record it with "
                         "`python -m simforcing.docs_tables --record evaluators RUNS/demo/results.json`") from None
    return "\n".join(evaluators_table(section))


def render_study(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    """A study of world models as evaluators (docs/evaluator_study/record.py): the evaluators' table with what each
    was trained on (paired episodes and their operators) and its condition before the figures."""
    from simforcing.demo.estimate_section import evaluators_table

    body = _json(paths[0])
    try:
        section = evaluators_section({"rows": body["rows"], "per_task": 20, "draws": 400})
        cells = {}
        for name, r in body["rows"].items():
            d = r.get("data") or {}
            trained = "—" if not d else f"{d['paired']} ({d['operators']})"
            cond = {"render": "twin", "rollout": "own chain"}.get(r.get("condition"), r.get("condition") or "—")
            cells[name] = (trained, cond + (f", {r['draws']} draws" if (r.get("draws") or 1) > 1 else ""),
                           r.get("predictor") or "learned")
    except (KeyError, TypeError, ValueError) as e:
        raise TableError(f"{paths[0]}: not a study record ({e!r}); record it with docs/evaluator_study/record.py") \
            from None
    return "\n".join(evaluators_table(section, ("paired episodes (operators)", "condition", "predictor"), cells))


def render_pairing_rollouts(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    """One window and long rollouts of both pairings (docs/evaluator_study/rollouts.py): a row per pairing and world
    model — its one-window scores, then per condition the 8-chunk rollout's mean PSNR and action error, its drift (the
    action error less the restarted one's) and how close its condition came to the recorded simulation."""
    body = _json(paths[0])
    try:
        rows: dict[tuple, dict] = {}
        for w in body["windows"]:
            rows.setdefault((w["pairing"], w["model"]), {})["window"] = (w["psnr"], w["action_error_cm"])
        for r in body["rollouts"]:
            rows.setdefault((r["pairing"], r["model"]), {})[r["condition"]] = (
                r["psnr"]["rollout"], r["action_error_cm"]["rollout"], r["drift_cm"], r["condition_psnr"],
                f"{r['episodes']} episodes × {r['chunks']} chunks")
    except (KeyError, TypeError) as e:
        raise TableError(f"{paths[0]}: not a record of windows and rollouts ({e!r}); record it with "
                         "docs/evaluator_study/rollouts.py") from None
    shape = sorted({v[4] for cells in rows.values() for k, v in cells.items() if k != "window"})
    lines = [f"| simulation | world model | one window: PSNR (dB) ↑ / action error (cm) ↓ | rollout of {', '.join(shape)}"
             ", own chain: PSNR / action error / drift (cm) ↓ | rollout, twin: PSNR / action error / drift | the "
             "condition's PSNR against the recorded simulation (dB), own chain / twin |",
             "|---|---|---|---|---|---|"]
    for (pairing, model), cells in rows.items():
        win = cells.get("window")
        roll = [cells.get(c) for c in ("own chain", "twin")]
        lines.append(f"| {pairing} | {model} | "
                     + ("—" if win is None else f"{figure(win[0])} / {figure(win[1])}") + " | "
                     + " | ".join("—" if r is None else f"{figure(r[0])} / {figure(r[1])} / {figure(r[2])}"
                                  for r in roll)
                     + " | " + " / ".join("—" if r is None else figure(r[3]) for r in roll) + " |")
    return "\n".join(lines)


def section_of(key: str, what: str) -> Callable[[Any], dict]:
    """The record from a command's output: its section ``key`` (a demo's results.json), or the output itself when it
    is that section (``rows`` at its top), else a TableError saying it is not ``what``."""
    def extract(results: Any) -> dict:
        body = results.get(key, results) if isinstance(results, dict) else None
        if not isinstance(body, dict) or not isinstance(body.get("rows"), dict):
            raise TableError(f"not {what}")
        return body
    return extract


evaluators_of = section_of("estimate", "a demo's results.json with an \"estimate\" section (the pool's rows)")


def render_estimate(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    """``policy estimate``'s coverage study (``simforcing.policy.estimate.report.study_markdown``)."""
    from simforcing.policy.estimate.estimate import StudyPoint
    from simforcing.policy.estimate.report import study_markdown
    from simforcing.result_files import POLICY_ESTIMATE, read_result

    body, _ = read_result(paths[0], POLICY_ESTIMATE, 1, f"the docs' table from {paths[0]}")
    study = body.get("study")
    if not isinstance(study, list) or not study:
        raise TableError(f"{paths[0]}: an estimate without a coverage study (its 'study' is {study!r:.40}); record one "
                         "made with --draws and --study-n")
    md = study_markdown([nested(f"study[{i}]", StudyPoint.from_json, s) for i, s in enumerate(study)])
    return md.split("\n\nWhere the trials go")[0]  # placing trials by doubt: the estimate's own estimate.md


def render_designs(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    """The coverage study under each truth (docs/real_trials_demo/designs.py): per estimate, design and n the worst
    policy's coverage (PPI and the trials alone, and which policy), the mean widths, the trials saved and what the
    predictor's within-policy ρ allows; for the learned predictor whether its refit variance was counted."""
    body = _json(paths[0])
    lines = ["| estimate | predictor | truth | disagreement prior | refit variance | n | worst coverage PPI (policy) "
             "| worst coverage trials only (policy) | width PPI / trials only | trials saved (ρ allows) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    short = {"scripted expert (ceiling)": "ceiling", "do nothing (floor)": "floor"}
    name = lambda p: short.get(p, p.replace("scripted expert, noise ", "noise "))  # noqa: E731
    try:
        for r in body["rows"]:
            truth = {"pool": "the pool's rate", "population": "the population's"}[r["design"]]
            ideal = "—" if r["saved_ideal"] is None else f"{100 * r['saved_ideal']:.0f} %"
            lines.append(
                f"| {r['name']} | {r['predictor']} | {truth} | {r.get('prior', 0.0):g} | "
                f"{('yes' if r.get('refit') else 'no') if r['predictor'] == 'learned' else '—'} | {r['n']} | "
                f"{100 * r['coverage_ppi']:.1f} % "
                f"({name(r['worst_ppi'])}) | {100 * r['coverage_ground_truth_only']:.1f} % "
                f"({name(r['worst_ground_truth_only'])}) | {100 * r['width_ppi']:.1f} / "
                f"{100 * r['width_ground_truth_only']:.1f} | {100 * r['saved']:.0f} % ({ideal}) |")
    except (KeyError, TypeError, ValueError) as e:
        raise TableError(f"{paths[0]}: not a designs record ({e!r}); record it with docs/real_trials_demo/designs.sh") \
            from None
    return "\n".join(lines)


def render_prior_sweep(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    """The disagreement prior swept (docs/real_trials_demo/prior_sweep.py): a row per pool, predictor and n — the
    worst and mean policy's coverage for each prior and the trials alone, and the trials saved."""
    bodies = [_json(p) for p in paths]
    try:
        priors = bodies[0]["priors"]
        kinds = [f"prior {p:g}" for p in priors]
        lines = ["| pool, predictor, n | " + " | ".join(f"worst / mean coverage, {k}" for k in kinds)
                 + " | trials alone | trials saved, " + " → ".join(f"{p:g}" for p in priors)
                 + " | paired differences, worst coverage, " + " → ".join(f"{p:g}" for p in priors) + " |",
                 "|---|" + "---|" * (len(kinds) + 3)]
        for path, b in zip(paths, bodies):
            if b["priors"] != priors:
                raise ValueError(f"{path}: priors {b['priors']} where the first record has {priors}")
            cov = {k: b["coverage"][k] for k in kinds + ["trials alone"]}
            cells = [f"{100 * min(c):.1f} / {100 * sum(c) / len(c):.1f} %" for c in cov.values()]
            saved = " → ".join(f"{100 * b['saved_of_all'][k]:.0f}" for k in kinds)
            link = f"[{b['name']}, `{b['predictor']}`, {b['n']}](../real_trials_demo/{b['markdown']})"
            pairs = " → ".join(f"{100 * min(b['difference_coverage'][k]):.1f}" for k in kinds)
            lines.append(f"| {link} | " + " | ".join(cells) + f" | {saved} % | {pairs} % |")
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        raise TableError(f"{paths[0]}: not a prior-sweep record ({e!r}); record it with "
                         "docs/real_trials_demo/prior_sweep.py") from None
    return "\n".join(lines)


def _ci(v: Optional[float], ci: Optional[Sequence], nd: int = 2, signed: bool = False) -> str:
    v, ci = table_number(v), None if not ci else [table_number(x) for x in ci]
    if v is None:
        return "—"
    s = f"{v:+.{nd}f}" if signed else f"{v:.{nd}f}"
    if not ci or None in ci:
        return s
    return s + (f" [{ci[0]:+.{nd}f}, {ci[1]:+.{nd}f}]" if signed else f" [{ci[0]:.{nd}f}, {ci[1]:.{nd}f}]")


def render_fewstep(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    """Each student against its teacher: the ranking (``policy agreement --reference``, read through
    ``AgreementResult``) and the 8-chunk drift (drift.json), paired on the same episodes."""
    from simforcing.policy.closed_loop.results import AgreementResult

    ag = AgreementResult.read(paths[0].parent, f"the docs' table from {paths[0]}")
    drift = _json(paths[1])
    lines = ["| world model | Pearson vs simulator [95 %] | − teacher's [95 %] | episodes with the teacher's verdict | "
             "8-chunk drift (cm) | − teacher's [95 %] |", "|---|---|---|---|---|---|"]
    for name in ag.envs:
        r, ref, d = ag.ranking[name]["all"], ag.vs_reference.get(name), drift.get(name) or {}
        k = re.fullmatch(r"K(\d+)", name)
        diff = "" if ref is None else _ci(ref.pearson_diff, ref.pearson_diff_ci95, signed=True)
        agree = "" if ref is None else f"{100 * ref.episodes_agreeing:.0f} %"
        drift_diff = ("" if not d.get("minus_teacher_ci95")
                      else _ci(d["minus_teacher_cm"], d["minus_teacher_ci95"], signed=True))
        lines.append(f"| {f'K = {k.group(1)} student' if k else name} | {_ci(r.pearson, r.pearson_ci95)} | {diff} | "
                     f"{agree} | {figure(d.get('drift_cm'))} | {drift_diff} |")
    return "\n".join(lines)


policy_section_of = section_of("policy", "a demo's results.json with a \"policy\" section, nor OUT/policy/results.json")


def render_transfer(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    """The policy section (``PolicySectionResult``): with ``demo --full`` the seeds × initialisations means (each
    initialisation's success over its runs, 95 % interval over seed clusters) per setting and budget; the default
    demo's one-seed table otherwise."""
    from simforcing.demo.policy_results import PolicySectionResult

    res = PolicySectionResult.from_json(_json(paths[0]))
    if res.full is None:
        return res.table_md.rstrip()
    blocks = res.full.transfer.blocks
    inits = list(dict.fromkeys(i for b in blocks for i in b.inits))
    lines = ["| setting, training steps | " + " | ".join(inits) + " |", "|---" * (len(inits) + 1) + "|"]
    for b in blocks:
        cells = []
        for i in inits:
            s = b.inits.get(i)
            cells.append("" if s is None else _ci(100 * s.stats.mean, None if s.stats.ci95 is None else
                                                  [100 * x for x in s.stats.ci95], nd=1))
        lines.append(f"| {b.setting}, {b.steps} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _bench(path: Path) -> dict:
    body = _json(path)
    if not isinstance(body, dict) or not str(body.get("schema", "")).startswith("simforcing-bench"):
        raise TableError(f"{path}: not a `simforcing bench` output (no simforcing-bench schema)")
    return body


BENCH_ROWS = ((1, 10, 0.0), (1, 10, 0.6), (1, 10, 1.0), (5, 20, 0.6), (20, 1, 1.0), (1, 1, 0.0))


def render_bench_cpu(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    """The sampler at the paper's settings and the training step, from ``simforcing bench``'s JSON."""
    b = _bench(paths[0])
    rows = {(r["n_sim"], r["n_real"], float(r["w"])): r for r in b["sampler"]["configs"]}
    lines = ["| sampler (N_s, N_r, w) | latency (ms) | network evaluations (= minimal) | the authors' loop (ms) | "
             "speed-up |", "|---|---|---|---|---|"]
    for key in BENCH_ROWS:
        r = rows.get(key)
        if r is not None:
            lines.append(f"| ({key[0]}, {key[1]}, {key[2]:g}) | {1e3 * r['latency_s']:.0f} | {r['forwards']}"
                         f"{'' if r['forwards'] == r['minimal_forwards'] else ' (' + str(r['minimal_forwards']) + ')'}"
                         f" | {1e3 * r['reference_latency_s']:.0f} | {r['speedup']:.2f}× |")
    t = b.get("train") or {}
    if t.get("methods"):
        ms = {k: f"{1e3 * v['fwd_bwd_s']:.0f} ms" for k, v in t["methods"].items()}
        lines += ["", f"Training step (batch {t['batch_size']}, forward + backward): "
                      + ", ".join(f"`{k}` {v}" for k, v in ms.items())
                      + f"; ratio {t['ratio_fwd_bwd']:.2f} (ideal from the network evaluations "
                        f"{t['ideal_ratio']:.2f})."]
    return "\n".join(lines)


def render_bench_rollout(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    """``simforcing bench --sections rollout,wm_policy``'s own tables (``bench.rollout.format_rollout``)."""
    from simforcing.bench.rollout import format_rollout

    b = _bench(paths[0])
    return "\n".join(format_rollout(b.get("rollout"), b.get("wm_policy"))).strip()


def render_bench_simulator(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    """``simforcing bench --sections simulator``'s own table (``bench.simulator.simulator_table``)."""
    from simforcing.bench.simulator import simulator_table

    b = _bench(paths[0])
    if not (b.get("simulator") or {}).get("rows"):
        raise TableError(f"{paths[0]}: no simulator section; record `simforcing bench --sections simulator`'s JSON")
    return "\n".join(simulator_table(b["simulator"])).strip()


def render_bench_gpu(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    """``simforcing bench --gpu``'s own tables (``bench.report.format_gpu_tables``)."""
    from simforcing.bench.report import format_gpu_tables

    return format_gpu_tables(_bench(paths[0])).strip()


def render_real_scale(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    """The 5B model on one GPU, from ``bench --gpu``'s JSON: its size, each training step and the sampler."""
    from simforcing.bench.report import COMPILE_NAMES

    b = _bench(paths[0])
    m, d = b.get("model") or {}, b.get("device") or {}

    def mode(r: dict) -> str:
        asked = r.get("compile", "off")
        return "" if asked == "off" else f", {COMPILE_NAMES.get(asked, asked)}"

    head = (f"| 5B SimForcing (`{b['plan']['preset']}` preset, {m.get('parameters', 0) / 1e9:.2f} B parameters), "
            f"one {d.get('name', b['machine']['device_name'])} | batch | seconds | the paper's | MFU | "
            "peak memory (GiB) |")
    lines = [head, "|---|---|---|---|---|---|"]
    train = [(f"`{r['method']}` training step{mode(r)}", r) for r in (b.get("train") or {}).get("rows", [])]
    if "step" in (b.get("fsdp") or {}):
        train.append(("`simforcing` step under FSDP2 (one process)", b["fsdp"]["step"]))
    for label, r in train:
        if "step_s" in r:
            lines.append(f"| {label} | {r['batch_size']} | {r['step_s']:.2f} | | {100 * r['mfu']:.1f} % | "
                         f"{r['peak_allocated_bytes'] / 2 ** 30:.1f} |")
    for r in (b.get("sampler") or {}).get("configs", []):
        if "latency_s" in r:
            paper = "" if r.get("paper_latency_s") is None else f"{r['paper_latency_s']:.2f}"
            lines.append(f"| sampler ({r['n_sim']}, {r['n_real']}, {r['w']:g}){mode(r)}, one sample with the VAE | 1 | "
                         f"{r['latency_s']:.2f} | {paper} | {100 * r['network_mfu']:.1f} % | |")
    return "\n".join(lines)


def render_faults(paths: tuple[Path, ...], entry: Optional[str]) -> str:
    """The fault-injection suite (docs/reliability/record.py's record): per test file, its tests and what ran."""
    body = _json(paths[0])
    files = body.get("files") or {}
    ran = bool(body.get("ran"))

    def cell(v) -> str:
        return "not run" if not ran else ("—" if v is None else str(v))

    tot = {k: sum((f.get(k) or 0) for f in files.values()) for k in ("tests", "passed", "failed", "skipped")}
    lines = ["| fault-injection suite (`tests/faults/`) | test files | tests | passed | failed | skipped |",
             "|---|---|---|---|---|---|",
             f"| the guarantees of RELIABILITY | {len(files)} | {tot['tests']} | {cell(tot['passed'])} | "
             f"{cell(tot['failed'])} | {cell(tot['skipped'])} |"]
    if not ran:
        lines += ["", f"*Counted by `{body.get('command')}`; not yet run in a record: "
                      "`python docs/reliability/record.py` runs the suite and records what passed.*"]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------------------
# The registry
# ----------------------------------------------------------------------------------------------------------------------

DEMO_RECORD = "`make demo` in a clean clone and `docs/demo_timing/record.py`"
TABLES: dict[str, Table] = {t.name: t for t in (
    Table("demo", (TIMING,), render_demo, DEMO_RECORD, "README.md",
          "`make demo`: one window, the few-step student, rollouts, and policies ranked inside each world model",
          one_run=True),
    Table("one_window", (TIMING,), render_one_window, DEMO_RECORD, "docs/WORLD_MODELS.md", None, one_run=True),
    Table("demo_runs", (TIMING,), render_demo_runs, DEMO_RECORD, "docs/WORLD_MODELS.md",
          "the latest recorded `make demo` runs (every one: timing.json): time and one-window figures"),
    Table("rollouts", (TIMING,), render_rollouts, DEMO_RECORD, "docs/ROLLOUTS.md", None, one_run=True),
    Table("fidelity_curve", ("docs/fidelity_curve/fidelity_curve.json",), render_fidelity_curve,
          "`docs/fidelity_curve/point.sh` per world model, then `docs/fidelity_curve/assemble.sh` "
          "(`simforcing fidelity curve --points ... --out docs/fidelity_curve`)", "docs/ROLLOUTS.md",
          "how faithful a world model is as a simulator, against its training compute"),
    Table("evaluators", ("docs/evaluators/evaluators.json",), render_evaluators,
          "`make demo`, then `python -m simforcing.docs_tables --record evaluators runs/demo/results.json "
          "--machine M --commit C`", "docs/POLICY_EVALUATION.md",
          "which world model to judge policies in", extract=evaluators_of),
    Table("evaluator_study", ("docs/evaluator_study/study.json",), render_study,
          "`docs/evaluator_study/study.sh DEMO_ROOT` (the variants; docs/evaluator_study/record.py writes the record)",
          "docs/notebook/evaluator.md", None),
    Table("full_scene", ("docs/evaluator_study/scene.json",), render_study,
          "`docs/evaluator_study/scene.sh` beside a finished `make demo`, then `docs/evaluator_study/scene_estimates.sh "
          "SCENE_STUDY DEMO_ROOT` (docs/evaluator_study/record.py)",
          "docs/POLICY_EVALUATION.md", None),
    Table("pairing_rollouts", ("docs/evaluator_study/rollouts.json",), render_pairing_rollouts,
          "`docs/evaluator_study/scene.sh` beside a finished `make demo`, then `docs/evaluator_study/scene_estimates.sh "
          "SCENE_STUDY DEMO_ROOT` (docs/evaluator_study/rollouts.py)", "docs/notebook/evaluator.md", None),
    Table("predictors", ("docs/evaluator_study/predictors.json",), render_study,
          "`docs/evaluator_study/predictors.sh DEMO_ROOT` (docs/evaluator_study/record.py)",
          "docs/POLICY_EVALUATION.md", None),
    Table("estimate", ("docs/real_trials_demo/estimate.json",), render_estimate,
          "`simforcing policy estimate --ground-truth SIM_EVAL --wm-eval WM_EVAL --predictor hand --draws 400 "
          "--study-n 5 10 20 40 --out docs/real_trials_demo` (the demo's evaluator with the twin)",
          "docs/POLICY_EVALUATION.md",
          "a few real trials correcting many world-model episodes: coverage and the trials saved"),
    Table("estimate_designs", ("docs/real_trials_demo/designs.json",), render_designs,
          "`docs/real_trials_demo/designs.sh DEMO_ROOT SCENE_STUDY` (docs/real_trials_demo/designs.py)",
          "docs/notebook/real_trials.md", None),
    Table("estimate_refit", ("docs/real_trials_demo/refit.json",), render_designs,
          "`docs/real_trials_demo/refit.sh DEMO_ROOT` (docs/real_trials_demo/designs.py)",
          "docs/notebook/real_trials.md", None),
    Table("prior_sweep", tuple(f"docs/real_trials_demo/prior_{k}.json" for k in
                               ("hand", "twin", "sft_hand", "hand_n20", "twin_n20")), render_prior_sweep,
          "`docs/real_trials_demo/prior_sweep.py` on each pool (its docstring)", "docs/notebook/real_trials.md", None),
    Table("fewstep", ("docs/fewstep_ranking/agreement.json", "docs/fewstep_ranking/drift.json"), render_fewstep,
          "`docs/fewstep_ranking/study.sh DEMO_ROOT`", "docs/FEWSTEP.md",
          "few-step students against their teacher: ranking and drift"),
    Table("transfer", ("docs/policy_transfer/policy.json",), render_transfer,
          "`make demo` (or `simforcing demo --full`), then `python -m simforcing.docs_tables --record transfer "
          "runs/demo/results.json --machine M --commit C`", "docs/POLICY_TRANSFER.md",
          "policy transfer (Tab. 5): success per initialisation", extract=policy_section_of),
    Table("real_scale", ("docs/bench_gpu.json",), render_real_scale,
          "`make bench-gpu` (`simforcing bench --gpu --out docs/bench_gpu.json`)", "docs/REAL_SCALE.md",
          "the 5B model on one GPU: training step, memory, sampler latency"),
    Table("bench_cpu", ("docs/bench_cpu.json",), render_bench_cpu,
          "`simforcing bench --out docs/bench_cpu.json`", "docs/BENCHMARK.md",
          "the sampler against the minimal network evaluations and the authors' loop, on a CPU"),
    Table("bench_rollout", ("docs/bench_cpu_rollout.json",), render_bench_rollout,
          "`simforcing bench --sections rollout,wm_policy --out docs/bench_cpu_rollout.json`", "docs/BENCHMARK.md",
          "rollouts and policies inside a world model, batched against one at a time, on a CPU"),
    Table("bench_simulator", ("docs/bench_cpu_simulator.json",), render_bench_simulator,
          "`simforcing bench --sections simulator --out FILE.json`, then `python -m simforcing.docs_tables --record "
          "bench_simulator FILE.json --machine M`", "docs/notebook/benchmark.md", None),
    Table("bench_gpu", ("docs/bench_gpu.json",), render_bench_gpu,
          "`make bench-gpu` (`simforcing bench --gpu --out docs/bench_gpu.json`)", "docs/BENCHMARK.md", None),
    Table("faults", ("docs/reliability/faults.json",), render_faults,
          "`python docs/reliability/record.py`", "docs/RELIABILITY.md",
          "the fault-injection suite"),
)}


# ----------------------------------------------------------------------------------------------------------------------
# Blocks
# ----------------------------------------------------------------------------------------------------------------------

BLOCK = re.compile(r"<!-- table (?P<name>[\w-]+): from (?P<source>\S+?)(?:, entry \"(?P<entry>[^\"]*)\")? -->\n"
                   r"(?P<body>.*?)<!-- end of table (?P=name) -->", re.S)


@dataclass(frozen=True)
class Block:
    name: str
    source: str
    entry: Optional[str]
    text: str  # the whole block, markers included
    line: int  # 1-based line of its first marker


def blocks(text: str) -> list[Block]:
    """Every table block of a page, in order."""
    return [Block(m["name"], m["source"], m["entry"], m.group(0), text.count("\n", 0, m.start()) + 1)
            for m in BLOCK.finditer(text)]


def _table(name: str, where: str) -> Table:
    if name not in TABLES:
        raise TableError(f"{where}: table {name!r} is not one of simforcing.docs_tables.TABLES ({', '.join(TABLES)})")
    return TABLES[name]


def rendering(table: Table, paths: tuple[Path, ...], entry: Optional[str] = None) -> str:
    """``table.render(paths, entry)``, a record it cannot show — a key missing, a value of the wrong type, a number
    that is not finite — a TableError naming the record, the table and the fix, never a traceback."""
    try:
        return table.render(paths, entry)
    except (TableError, ConfigError):
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, MalformedResult) as e:
        why = f"no {e.args[0]!r}" if isinstance(e, KeyError) else str(e)
        raise TableError(f"{paths[0]}: table {table.name} cannot be shown from it ({why}); restore the record from git "
                         f"or record it again: {table.command}") from None


def render_block(name: str, page: str, entry: Optional[str] = None, root: Path = ROOT) -> str:
    """The block of table ``name`` on ``page`` (a path from the root: the record's link is relative to it)."""
    table = _table(name, page)
    paths = tuple(root / r for r in table.records)
    head = f"<!-- table {name}: from {table.records[0]}" + (f", entry \"{entry}\"" if entry else "") + " -->"
    if not paths[0].exists():
        body = f"*No record yet: {table.command} writes `{table.records[0]}`.*"
    else:
        links = ", ".join(f"[{Path(r).name}]({relpath(root / r, (root / page).parent)})" for r in table.records)
        body = (rendering(table, paths, entry).rstrip() + "\n\n"
                f"*{provenance(table, entry, root)}. Record{'s' if len(table.records) > 1 else ''}: {links}"
                + (f" entry \"{entry}\"" if entry else "") + f", made by {table.command}; this table: `{WRITE}`.*")
    return f"{head}\n{body}\n<!-- end of table {name} -->"


def rewrite(text: str, page: str, root: Path = ROOT, entries: Optional[dict[str, str]] = None) -> str:
    """``text`` (the page at ``page``) with every block replaced by its rendering; ``entries``: record path -> the
    entry its blocks show from now on."""
    out, last = [], 0
    for b in blocks(text):
        table = _table(b.name, f"{page}:{b.line}")
        if b.source != table.records[0]:
            raise TableError(f"{page}:{b.line}: table {b.name} is rendered from {table.records[0]}, not {b.source}; "
                             "fix the marker")
        entry = (entries or {}).get(table.records[0], b.entry) if table.one_run else None
        start = text.index(b.text, last)
        out += [text[last:start], render_block(b.name, page, entry, root)]
        last = start + len(b.text)
    return "".join(out) + text[last:]


def results_page(root: Path = ROOT) -> str:
    """docs/RESULTS.md: every table with a caption, each under the page it answers for."""
    lines = ["# Results", "",
             "Every table of the docs on one page, written from the recorded runs under docs/ by",
             f"`{WRITE}`: none is typed by hand, each names its machine, commit and date and the command that",
             "records it again. What each capability does and how to run it: the page beside its table; how each",
             "number was reached and what was tried: the [lab notebook](notebook/README.md).", ""]
    for t in TABLES.values():
        if t.caption is None:
            continue
        page = relpath(root / t.page, (root / RESULTS_PAGE).parent)
        lines += [f"## {t.caption[0].upper() + t.caption[1:]} ([{Path(t.page).stem}]({page}))", "",
                  render_block(t.name, RESULTS_PAGE, None, root), ""]
    return "\n".join(lines)


def pages(root: Path = ROOT) -> list[str]:
    """The pages that may hold blocks: the README and every markdown page under docs/ (paths from the root)."""
    found = ["README.md"] + sorted(str(p.relative_to(root)) for p in (root / "docs").rglob("*.md"))
    return [p for p in found if (root / p).is_file()]


def write(root: Path = ROOT, entries: Optional[dict[str, str]] = None) -> list[str]:
    """Rewrite every block of every page and docs/RESULTS.md; the pages changed. Every page is rendered before any
    is written: a record that cannot be shown (a TableError) leaves every page as it was (it once left the pages
    before it rewritten and the rest not: docs from two states of the records)."""
    new = {page: results_page(root) if page == RESULTS_PAGE else rewrite((root / page).read_text(), page, root,
                                                                             entries)
           for page in pages(root)}
    if RESULTS_PAGE not in new:
        new[RESULTS_PAGE] = results_page(root)
    changed = [page for page, text in new.items() if not (root / page).is_file() or (root / page).read_text() != text]
    for page in changed:  # each page whole (a temporary sibling renamed over it)
        tmp = (root / page).with_name(f".{(root / page).name}.tmp")
        tmp.write_text(new[page])
        tmp.replace(root / page)
    return changed


def stale(root: Path = ROOT) -> list[str]:
    """Each page whose blocks (or, for docs/RESULTS.md, whose whole text) differ from their rendering."""
    out = []
    for page in pages(root):
        text = (root / page).read_text()
        want = results_page(root) if page == RESULTS_PAGE else rewrite(text, page, root)
        if want != text:
            out.append(page)
    return out


FIGURE = re.compile(r"(?<![\w.])\d+\.\d{2,}(?![\d])")  # a measured figure as the tables print it: 2+ decimals
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # commands and config values, not quoted results
# numbers a user page states that are not measurements but happen to print like a table's figure: page -> {token: why}
NOT_FIGURES = {"docs/GUIDE.md": {"0.95": "AdamW's beta2 default", "0.15": "the physics gap's ±15 % size range",
                                 "0.05": "a loss weight's and the warm-up's defaults",
                                 "0.25": "a loss weight's default (md_real)",
                                 "0.02": "eval.probe_moving_threshold's default"},
               "README.md": {"0.24": "torchvision 0.24.1, a version"}}


def figures_of(text: str) -> set[str]:
    return set(FIGURE.findall(text))


def _table_figures(block: str) -> set[str]:
    """The figures of a block's rendering, its provenance line (machine names, versions) left out."""
    return figures_of("\n".join(line for line in block.splitlines() if not line.startswith("*")
                                or "|" in line))


def hand_quoted(root: Path = ROOT) -> list[str]:
    """"page:line: figure" for every figure of a rendered table (two or more decimals, as they print them) that a
    user page types outside its blocks and outside code (:data:`NOT_FIGURES` aside): where a number of a record is
    shown, a block should be."""
    rendered = set()
    for t in TABLES.values():
        if (root / t.records[0]).exists():
            rendered |= _table_figures(render_block(t.name, RESULTS_PAGE, None, root))
    for page in USER_PAGES:
        for b in blocks((root / page).read_text()) if (root / page).exists() else []:
            rendered |= _table_figures(b.text)
    out = []
    for page in USER_PAGES:
        if not (root / page).exists():
            continue
        text = (root / page).read_text()
        for b in blocks(text):
            text = text.replace(b.text, "\n" * b.text.count("\n"))
        text = CODE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        allowed = set(NOT_FIGURES.get(page, {}))
        for i, line in enumerate(text.splitlines(), 1):
            out += [f"{page}:{i}: {x}" for x in sorted((figures_of(line) & rendered) - allowed)]
    return out


# ----------------------------------------------------------------------------------------------------------------------
# Recording a command's output as a table's record
# ----------------------------------------------------------------------------------------------------------------------

def record(name: str, source: Path, machine: str, commit: Optional[str] = None, date: Optional[str] = None,
           root: Path = ROOT) -> Path:
    """Keep ``source`` (a command's JSON output) as table ``name``'s record, its commit, machine and date in
    docs/records.json; the record's path."""
    table = _table(name, "record")
    if table.records[0] == TIMING or len(table.records) > 1:
        raise TableError(f"table {name}: its records are written by {table.command}, not by "
                         "`python -m simforcing.docs_tables --record`")
    body = _json(source)
    try:
        body = table.extract(body) if table.extract else body
    except TableError as e:
        raise TableError(f"{source}: {e}") from None
    if commit is None:
        git = subprocess.run(["git", "-C", str(source.resolve().parent), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True)
        if git.returncode != 0:
            raise TableError(f"{source}: not in a git checkout; give the commit it was made at with --commit")
        commit = git.stdout.strip()
    out, text = root / table.records[0], json.dumps(body, indent=1) + "\n"
    with tempfile.TemporaryDirectory() as tmp:  # the table renders from it, or the record there is left as it was
        (Path(tmp) / out.name).write_text(text)
        try:
            rendering(table, (Path(tmp) / out.name,))
        except (TableError, ValueError) as e:
            raise TableError(f"{source}: not recorded, {table.records[0]} is left as it was: "
                             + str(e).replace(str(Path(tmp) / out.name), "the record")) from None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    set_provenance(table.records[0], commit, machine, date or datetime.date.today().isoformat(),
                   f"recorded from {source.name} by `python -m simforcing.docs_tables --record {name}`", root)
    return out


def set_provenance(record_path: str, commit: str, machine: str, date: str, note: str, root: Path = ROOT) -> None:
    """docs/records.json's line for ``record_path`` (a path from the root)."""
    index_path = root / PROVENANCE
    index = _json(index_path) if index_path.exists() else {}
    index[record_path] = {"commit": commit, "machine": machine, "date": date, "note": note}
    index_path.write_text(json.dumps(dict(sorted(index.items())), indent=1, ensure_ascii=False) + "\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simforcing.docs_tables", description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite every block and docs/RESULTS.md")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 naming each stale page and each recorded figure typed by hand on a user page")
    ap.add_argument("--list", action="store_true", help="print every table: name, record, the command that records it")
    ap.add_argument("--record", nargs=2, metavar=("NAME", "FILE"),
                    help="keep FILE (a command's JSON output) as table NAME's record, then rewrite the pages")
    ap.add_argument("--machine", help="with --record: the machine it ran on, in words")
    ap.add_argument("--commit", help="with --record: the commit it ran at (default: FILE's checkout's HEAD)")
    ap.add_argument("--date", help="with --record: the date it ran, YYYY-MM-DD (default: today)")
    a = ap.parse_args(argv)
    if not (a.write or a.check or a.list or a.record):
        ap.error("nothing to do: give --write, --check, --list or --record NAME FILE")
    if a.record and not a.machine:
        ap.error("--record needs --machine (the machine it ran on, in words)")
    try:
        if a.record:
            print(f"{record(a.record[0], Path(a.record[1]), a.machine, a.commit, a.date)}: recorded")
            a.write = True
        if a.list:
            for t in TABLES.values():
                print(f"{t.name}: {', '.join(t.records)} <- {t.command} ({t.page})")
        if a.write:
            for page in write():
                print(f"{page}: tables rewritten")
        if a.check:
            bad, quoted = stale(), hand_quoted()
            for page in bad:
                print(f"{page}: a table differs from its record; run `{WRITE}`", file=sys.stderr)
            for q in quoted:
                print(f"{q}: a recorded figure typed by hand; show it in a table block", file=sys.stderr)
            return 1 if bad or quoted else 0
    except (TableError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
