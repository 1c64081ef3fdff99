"""Statistics at their edges and the readers of the policy-evaluation chain (issue 56, round 7): `policy agreement` fed
evaluations where every policy scores alike, all successes or all failures, a single scene, a task without scenes,
a name or a folder given twice, an eval.json edited or written by another version; active inference where every
sample is alike; and the docs' tables rendered from records holding NaN, a string where a number belongs or a
missing key. Each is refused by name (the flag or file, the field, what to do) or handled as documented (an
undefined statistic is null and shown "—"), never a traceback, never a bare NaN in a file or "nan" in a table; each
case has its control.

The evaluations are written directly through the typed results (``tests/evalgen.py``); no simulator or world model
runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from faultkit import digest, refused

from evalgen import RATES, edited, evaluation
from simforcing.cli import main
from simforcing.policy.closed_loop.results import (SIMULATOR, WORLD_MODEL, AgreementResult, EpisodeOutcome,
                                                   JudgeRecord)

pytestmark = pytest.mark.faults

JUDGE = JudgeRecord({"height": 32}, 1, "weights")


def _pair(root: Path, sim, wm, per_task: int = 4, policies=tuple(RATES)) -> tuple[Path, Path]:
    """ROOT/sim and ROOT/wm: evaluations whose episode on scene s of policy p, task t succeeds where ``sim(p, s)``
    (``wm(p, s)``)."""
    evaluation(SIMULATOR, per_task, lambda p, t, s: EpisodeOutcome(s, bool(sim(p, s)), 10),
               policies=policies).write(root / "sim")
    evaluation(WORLD_MODEL, per_task, lambda p, t, s: EpisodeOutcome(s, bool(wm(p, s)), 10), policies=policies,
               judge=JUDGE).write(root / "wm")
    return root / "sim", root / "wm"


def _agreement(sim, out, *wms: str, extra=()) -> list[str]:
    return ["policy", "agreement", "--sim", *map(str, sim if isinstance(sim, list) else [sim]), "--wm", *wms,
            "--bootstrap", "20", "--out", str(out), *extra]


def _strict(text: str) -> dict:
    """JSON as the standard has it: a bare NaN or Infinity fails the test."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"the file holds {c}"))


# ----------------------------------------------------------------------------------------------------------------------
# policy agreement: statistics at their edges
# ----------------------------------------------------------------------------------------------------------------------

VARYING = lambda p, s: s < RATES[p] * 4  # noqa: E731 - good 4/4, fair 2/4, poor 1/4, idle 0/4 per task
EDGES = {"every policy alike": (lambda p, s: s < 2, lambda p, s: s < 2),
         "all successes": (lambda p, s: True, lambda p, s: True),
         "all failures": (lambda p, s: False, lambda p, s: False),
         "the world model alike for every policy": (VARYING, lambda p, s: True)}


@pytest.mark.parametrize("edge", list(EDGES))
def test_an_undefined_correlation_is_null_and_shown_as_a_dash(tmp_path, capsys, edge):
    """Success rates without spread leave Pearson and Spearman undefined: agreement.json held a bare NaN (not JSON:
    `jq` and JavaScript refuse the file); now null, read back as undefined (NaN in memory, "—" in agreement.md, None
    in a fidelity point), MMRV defined. The control: policies that differ give a finite Pearson."""
    from simforcing.fidelity import Inside

    sim, wm = _pair(tmp_path, *EDGES[edge])
    assert main(_agreement(sim, tmp_path / "out", f"w={wm}")) == 0, capsys.readouterr().err
    body = _strict((tmp_path / "out" / "agreement.json").read_text())
    stats = body["ranking"]["w"]["all"]
    assert stats["pearson"] is None and stats["spearman"] is None and stats["mmrv"] >= 0
    res = AgreementResult.read(tmp_path / "out", "--agreement")
    assert np.isnan(res.ranking["w"]["all"].pearson) and res.to_json() == body
    assert "| w | all (4) | — | — |" in (tmp_path / "out" / "agreement.md").read_text()
    assert Inside.measure(tmp_path / "out").pearson is None
    ok, good = _pair(tmp_path / "control", VARYING, VARYING)
    assert main(_agreement(ok, tmp_path / "control" / "out", f"w={good}")) == 0
    assert _strict((tmp_path / "control" / "out" / "agreement.json").read_text())["ranking"]["w"]["all"]["pearson"] \
        == pytest.approx(1.0)


def test_a_single_scene_two_policies_and_a_reference_give_valid_json(tmp_path, capsys):
    """One scene per task (every bootstrap draw the same scenes), two policies, and --reference against a world model
    that sees no spread (its paired Pearson difference undefined): finite where defined, null elsewhere. One policy
    is refused (an empty comparison: nothing to rank), naming the count."""
    sim, wm = _pair(tmp_path, lambda p, s: p == "good", lambda p, s: p == "good", per_task=1,
                    policies=("good", "idle"))
    flat = _pair(tmp_path / "flat", lambda p, s: True, lambda p, s: True, per_task=1, policies=("good", "idle"))[1]
    assert main(_agreement(sim, tmp_path / "out", f"w={wm}", f"flat={flat}", extra=("--reference", "w"))) == 0
    body = _strict((tmp_path / "out" / "agreement.json").read_text())
    assert body["ranking"]["w"]["all"]["pearson"] == pytest.approx(1.0)
    assert body["ranking"]["flat"]["all"]["pearson"] is None
    assert body["vs_reference"]["flat"]["pearson_diff"] is None
    assert AgreementResult.read(tmp_path / "out", "here").to_json() == body
    one, one_wm = _pair(tmp_path / "one", lambda p, s: True, lambda p, s: True, policies=("good",))
    refused(_agreement(one, tmp_path / "o1", f"w={one_wm}"), capsys, "the evaluations hold 1 policies",
            "at least 2")
    assert not (tmp_path / "o1").exists()


def test_a_task_without_scenes_is_refused_by_name(tmp_path, capsys):
    """An eval.json whose task lists no scenes (cut short or edited: `policy eval` draws at least one) ended in an
    IndexError traceback of the bootstrap; now a config error naming the flag, the file and the task."""
    sim, wm = _pair(tmp_path, VARYING, lambda p, s: s < 2)

    def empty(body):
        body["scenes"]["grasp"] = []
        for p in body["episodes"]:
            body["episodes"][p]["grasp"] = []
        for p in body["rows"]:
            body["rows"][p]["tasks"]["grasp"] = {"successes": 0, "episodes": 0, "rate": None, "ci95": [0, 1]}

    bad_sim, bad_wm = edited(sim, tmp_path / "bad_sim", empty), edited(wm, tmp_path / "bad_wm", empty)
    refused(_agreement(bad_sim, tmp_path / "o", f"w={bad_wm}"), capsys, "--sim", str(bad_sim / "eval.json"),
            "task 'grasp' of 'tasks' has no scenes")
    refused(["policy", "estimate", "--ground-truth", bad_sim, "--wm-eval", bad_wm, "--out", tmp_path / "o"], capsys,
            "--wm-eval", "task 'grasp'")
    assert not (tmp_path / "o").exists()
    assert main(_agreement(sim, tmp_path / "o", f"w={wm}")) == 0  # control


def test_a_name_or_a_folder_given_twice(tmp_path, capsys):
    """Two --wm entries of one name were refused naming --runs (a flag `policy agreement` does not have): now --wm;
    one --sim folder given twice (also spelt another way) was refused as policies "in more than one" evaluation: now
    named as given twice. The control: one evaluation under two names is two rows (equal by construction)."""
    sim, wm = _pair(tmp_path, VARYING, VARYING)
    err = refused(_agreement(sim, tmp_path / "o", f"w={wm}", f"w={wm}"), capsys, "--wm:", "'w' is given twice",
                  "NAME=EVAL")
    assert "--runs" not in err
    refused(_agreement([sim, f"{tmp_path}/./sim"], tmp_path / "o", f"w={wm}"), capsys,
            "--sim:", "is given twice", f"also as {sim}")
    assert not (tmp_path / "o").exists()
    assert main(_agreement(sim, tmp_path / "o", f"w={wm}", f"v={wm}")) == 0
    body = _strict((tmp_path / "o" / "agreement.json").read_text())
    assert body["episode_agreement"]["w"] == body["episode_agreement"]["v"]


def _first_row(body) -> dict:
    return body["rows"]["good"]


EDITS = {  # an eval.json edited or written by another version -> what the refusal names
    "a NaN success rate": (lambda b: _first_row(b)["average"].__setitem__("rate", float("nan")),
                           "average: field 'rate' must be a number in [0, 1]"),
    "a rate above 1": (lambda b: _first_row(b)["tasks"]["reach"].__setitem__("rate", 7),
                       "tasks['reach']: field 'rate'"),
    "an interval of one number": (lambda b: _first_row(b)["average"].__setitem__("ci95", [0.5]),
                                  "field 'ci95' must be two numbers in [0, 1]"),
    "a judge that is a word": (lambda b: b.__setitem__("judge", "x"), "judge: expected an object"),
    "a judge's benchmark that is a number": (lambda b: b["judge"].__setitem__("benchmark", 1),
                                             "judge: field 'benchmark' must be an object"),
    "runs as a list": (lambda b: b.__setitem__("runs", ["a"]), "field 'runs' must be an object"),
    "a NaN speed": (lambda b: b.__setitem__("episodes_per_minute", float("nan")),
                    "field 'episodes_per_minute' must be a finite number"),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_eval_json_of_another_version_is_refused_by_field(tmp_path, capsys, edit):
    """Each was read without a word (a NaN rate shown in the demo's tables, a judge "x" ended in "'str' object has no
    attribute 'get'"): a config error naming --wm, the file and the field; nothing written. The control: the
    untouched evaluation (the tests above)."""
    sim, wm = _pair(tmp_path, VARYING, VARYING)
    change, needle = EDITS[edit]
    bad = edited(wm, tmp_path / "bad", change)
    refused(_agreement(sim, tmp_path / "o", f"w={bad}"), capsys, "--wm w", str(bad / "eval.json"), needle)
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------------------------------------------------
# policy estimate: active inference where every sample is alike
# ----------------------------------------------------------------------------------------------------------------------


def test_active_inference_with_every_sample_alike_keeps_an_interval():
    """Every verdict and every trial a success: the active-inference mean's plug-in variance is 0 and its interval was
    [1, 1] (the coverage study's "where the trials go" reported width 0.0 from 5 trials); now the labelled outcomes'
    Agresti–Caffo variance stands in, as for the PPI terms. The control: samples that vary keep the plain CLT
    interval exactly."""
    from scipy import stats

    from simforcing.policy.estimate.ppi import active_mean

    n = 40
    labelled = np.arange(n) % 8 == 0
    alike = active_mean(np.ones(n), np.ones(n), labelled, np.full(n, 0.125))
    assert alike.estimate == 1 and alike.lo < 0.9 and alike.hi == 1
    rng = np.random.default_rng(0)
    f, y = (rng.random(n) < 0.6).astype(float), (rng.random(n) < 0.6).astype(float)
    est = active_mean(f, y, labelled, np.full(n, 0.125))
    z = f + np.where(labelled, (y - f) / 0.125, 0.0)
    half = stats.norm.ppf(0.975) * z.std(ddof=1) / np.sqrt(n)
    assert (est.lo, est.hi) == pytest.approx((max(0, z.mean() - half), min(1, z.mean() + half)))


def test_a_coverage_study_of_alike_samples_reports_no_zero_width(tmp_path, capsys):
    """The same through `policy estimate --draws`: every trial and verdict a success; no interval of width 0 in
    estimate.json, and no NaN."""
    sim, wm = _pair(tmp_path, lambda p, s: True, lambda p, s: True, per_task=20)
    assert main(["policy", "estimate", "--ground-truth", str(sim), "--wm-eval", str(wm), "--out", str(tmp_path / "o"),
                 "--predictor", "verdict", "--n", "5", "--draws", "3", "--study-n", "5"]) == 0
    study = _strict((tmp_path / "o" / "estimate.json").read_text())["study"][0]
    assert all(w > 0 for per in study["width"].values() for w in per.values()), study["width"]


# ----------------------------------------------------------------------------------------------------------------------
# The docs' tables from records that are not what their tables show
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture()
def tree(tmp_path) -> Path:
    """README.md and docs/ (no pictures) copied: a root the generator reads and writes like the repository."""
    from simforcing.docs_tables import ROOT

    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("*.png", "*.csv"))
    return tmp_path


def _edit_record(root: Path, record: str, edit) -> None:
    body = json.loads((root / record).read_text())
    edit(body)
    (root / record).write_text(json.dumps(body))


def _figures(body, key, value):
    body[-1]["figures"][key] = value


RECORD_EDITS = {  # a record edited -> the table it breaks and what the TableError names
    "a string where a PSNR belongs": ("docs/demo_timing/timing.json", lambda b: _figures(b, "sft_psnr", "abc"),
                                      "'abc' where a finite number belongs"),
    "an infinite action error": ("docs/demo_timing/timing.json", lambda b: _figures(b, "sft_cm", float("inf")),
                                 "inf where a finite number belongs"),
    "a run without its label": ("docs/demo_timing/timing.json", lambda b: b[0].pop("label"), "no 'label'"),
    "a bench row without its latency": ("docs/bench_cpu.json",
                                        lambda b: b["sampler"]["configs"][0].pop("latency_s"), "no 'latency_s'"),
    "an evaluator's Pearson as a word": ("docs/evaluators/evaluators.json",
                                         lambda b: next(iter(b["rows"].values())).__setitem__("pearson", "high"),
                                         "not the demo's estimate section (ValueError(\"rows['"),
    "a curve of no points": ("docs/fidelity_curve/fidelity_curve.json",
                             lambda b: b.update(points={}, table={}), "a fidelity curve of no points"),
    "an estimate without its study": ("docs/real_trials_demo/estimate.json", lambda b: b.update(study=[]),
                                      "without a coverage study"),
    "a NaN coverage in the study": ("docs/real_trials_demo/estimate.json",
                                    lambda b: next(iter(b["study"][0]["coverage"].values())).__setitem__(
                                        "ppi", float("nan")), "field 'coverage'"),
}


@pytest.mark.parametrize("edit", list(RECORD_EDITS))
def test_a_record_a_table_cannot_show_is_named(tree, edit):
    """`python -m simforcing.docs_tables --write` on each ended in a traceback (KeyError, "Unknown format code 'f' for
    object of type 'str'") or wrote a partial table; now a TableError naming the record and the command that records
    it again (the command line: `error: …`, exit 2), and no page is rewritten. The control: the untouched records
    render as the pages show them."""
    from simforcing import docs_tables as D

    assert D.stale(tree) == []  # the control
    record, change, needle = RECORD_EDITS[edit]
    _edit_record(tree, record, change)
    pages = {p: (tree / p).read_text() for p in D.pages(tree)}
    with pytest.raises(D.TableError, match="cannot be shown|of no points|without a coverage study|not the demo") as e:
        D.write(tree)
    assert str(tree / record) in str(e.value) and needle in str(e.value)
    assert {p: (tree / p).read_text() for p in D.pages(tree)} == pages


def test_an_undefined_figure_is_a_dash_never_nan(tree):
    """A figure recorded as NaN (a statistic left undefined) or not recorded at all (an entry older than the figure)
    is shown "—": the README's demo table held "nan" and a missing key was a KeyError. The control: the figure
    itself."""
    from simforcing import docs_tables as D

    _edit_record(tree, "docs/demo_timing/timing.json", lambda b: _figures(b, "sft_psnr", float("nan")))
    _edit_record(tree, "docs/demo_timing/timing.json", lambda b: b[-1]["figures"].pop("pearson_harness"))
    D.write(tree)
    readme = next(b.text for b in D.blocks((tree / "README.md").read_text()) if b.name == "demo")
    assert "nan" not in readme.lower() and "/ — / **" in readme and "(its harness check, 15 scenes) | — |" in readme
    assert "| `sft`: real data only | — |" in (tree / "docs/WORLD_MODELS.md").read_text()


def test_a_record_that_cannot_be_shown_is_not_recorded(tree, tmp_path):
    """`docs_tables --record evaluators results.json` of a demo whose estimate section holds a word where a number
    belongs overwrote the good record and then failed to render it; now refused before anything is written (the
    record byte-identical). The control: the same section with the number records (tests/test_docs.py too)."""
    from simforcing import docs_tables as D

    record = tree / "docs/evaluators/evaluators.json"
    section = json.loads(record.read_text())
    before = digest(record.parent)
    name = next(iter(section["rows"]))
    bad = tmp_path / "results.json"
    bad.write_text(json.dumps({"estimate": {**section, "rows": {name: {**section["rows"][name], "saved": "half"}}}}))
    with pytest.raises(D.TableError, match="not recorded, docs/evaluators/evaluators.json is left as it was"):
        D.record("evaluators", bad, "m", commit="c0ffee0", date="2027-01-02", root=tree)
    assert digest(record.parent) == before
    bad.write_text(json.dumps({"estimate": section}))
    D.record("evaluators", bad, "m", commit="c0ffee0", date="2027-01-02", root=tree)


def test_a_demo_results_json_with_a_missing_or_ill_typed_section(tmp_path):
    """``readme_tables.figures`` (docs/demo_timing/record.py keeps them): a results.json whose jobs failed lacks
    sections — their figures are None ("—" in the README), ``missing_sections`` names them; a section or a figure
    of the wrong type is a ValueError naming where it is (it was an AttributeError or a float() traceback); an
    undefined statistic (NaN) is None. The control: a whole section gives its figure."""
    from simforcing.demo.readme_tables import figures, missing_sections, render

    partial = {"summary": {"rows": {"sft": {"psnr": 20.5, "af_pos": 0.031}}}}
    got = figures(partial)
    assert got["sft_psnr"] == 20.5 and got["sft_cm"] == pytest.approx(3.1) and got["pearson_sft"] is None
    assert missing_sections(partial) == ["baselines", "fewstep", "rollouts", "wm_eval", "estimate"]
    assert "| inside **SimForcing on both cameras** (external + wrist), with the twin | — | — | — |" in \
        render({"figures": got})
    nan = {**partial, "estimate": {"rows": {"sft-fewstep": {"pearson": float("nan"), "pearson_ci95": [None, None]}}}}
    assert figures(nan)["pearson_sft"] is None
    for bad, needle in (({"summary": []}, "summary is a JSON list"),
                        ({"estimate": {"rows": {"sft-fewstep": {"pearson": "high"}}}},
                         "estimate.rows.sft-fewstep.pearson_ci95|pearson: 'high'"),
                        ({"estimate": {"rows": {"sft-fewstep": {"pearson": 0.5, "pearson_ci95": "wide"}}}},
                         "pearson_ci95 must be two numbers"),
                        ([], "not a demo's results")):
        with pytest.raises(ValueError, match=needle):
            figures(bad)
