"""`simforcing policy estimate` / ``estimate_success`` fed what real users feed them (issue 56): trial files saved by
spreadsheets, too few trials, bad numbers on the command line, world-model episodes without per-frame readings, a
simulator evaluation of other scenes or runs as the ground truth, evaluation files that were cut short or edited,
statistics at their edges, and results folders written over. Each refusal names the file, the field or flag and
what to do (no traceback, nothing written); each case has its control — the untouched input works.

The evaluations are written directly through the typed results (``tests/evalgen.py``): 4 policies × 3 tasks × 20
scenes whose truth is known; no simulator or world model runs."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from faultkit import digest, refused

from evalgen import RATES, TASKS, edited, evaluation, write_known_pool
from simforcing.cli import main
from simforcing.errors import ConfigError
from simforcing.policy.closed_loop.results import (SIMULATOR, WORLD_MODEL, EpisodeOutcome, JudgeRecord,
                                                   PolicyEvaluation)
from simforcing.runs.scored import ScoredRun

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> tuple[Path, dict, Path]:
    """(root with sim/ and wm/, the truth, a trial file of 8 scenes per policy)."""
    root, truth = write_known_pool(tmp_path_factory.mktemp("estimate_pool"))
    lines = ["policy,task,scene,success"] + [f"{p},{t},{s},{int(truth[(p, t, s)])}" for p in RATES
                                               for t in TASKS[:2] for s in range(4)]
    (root / "trials.csv").write_text("\n".join(lines) + "\n")
    return root, truth, root / "trials.csv"


def _estimate(gt, wm, out, *extra) -> list[str]:
    return ["policy", "estimate", "--ground-truth", str(gt), "--wm-eval", str(wm), "--out", str(out), *extra]


# ----------------------------------------------------------------------------------------------------------------------
# Trial files as spreadsheets save them
# ----------------------------------------------------------------------------------------------------------------------


def test_spreadsheet_trial_files_read_as_their_plain_csv(pool, tmp_path, capsys):
    """A UTF-8 byte-order mark (it once made the header read "missing policy" while it said policy), semicolons or
    tabs as separators, UTF-16, a capitalised header, CRLF, empty rows (",,,"), scenes written 17.0 and outcomes
    TRUE/FALSE: the same trials as the plain file (the control). Text that is not UTF-8 and a column named twice are
    refused naming the file and the fix."""
    from simforcing.policy.estimate.trials import read_trials, world_model_episodes

    root, _, plain = pool
    wm = world_model_episodes(root / "wm")
    want = read_trials(plain, wm)
    text = plain.read_text()
    rows = text.splitlines()
    spelled = {
        "bom.csv": ("\ufeff" + text).encode(),
        "semicolon.csv": text.replace(",", ";").encode(),
        "tabs.tsv": text.replace(",", "\t").encode(),
        "utf16.csv": text.encode("utf-16"),
        "header.csv": text.replace("policy,task,scene,success", "Policy, Task,SCENE ,Success", 1).encode(),
        "crlf.csv": text.replace("\n", "\r\n").encode(),
        "empty_rows.csv": (text + ",,,\n , , ,\n").encode(),
        "numbers.csv": "\n".join([rows[0]] + [",".join(r.split(",")[:2] + [r.split(",")[2] + ".0",
                                                                          "TRUE" if r.endswith("1") else "FALSE"])
                                              for r in rows[1:]]).encode(),
    }
    for name, data in spelled.items():
        (tmp_path / name).write_bytes(data)
        assert read_trials(tmp_path / name, wm) == want, name
    (tmp_path / "latin.csv").write_bytes((text + "café,push,1,1\n").encode("cp1252"))
    (tmp_path / "twice.csv").write_text(text.replace("success", "success,success", 1))
    for name, needle in (("latin.csv", "save the trial file as UTF-8"), ("twice.csv", "column 'success' is named "
                                                                                       "twice")):
        refused(_estimate(tmp_path / name, root / "wm", tmp_path / "out"), capsys, needle, name, code=1)
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------------------------------------------
# Too few trials, and the flag the refusal advises
# ----------------------------------------------------------------------------------------------------------------------


def test_too_few_trials_of_a_policy_are_refused_and_the_advised_flag_works(pool, tmp_path, capsys):
    """One trial per policy (it ended in a traceback) and a policy with none (it advised a --policies flag the command
    did not have) are refused naming the file and each policy's count; the advised --policies estimates the others,
    and the left-out policy's trials are said to be unused (estimate.md, estimate.json notes)."""
    root, truth, plain = pool
    one = tmp_path / "one.csv"
    one.write_text("policy,task,scene,success\n" + "".join(f"{p},reach,0,{int(truth[(p, 'reach', 0)])}\n"
                                                            for p in RATES))
    refused(_estimate(one, root / "wm", tmp_path / "o1"), capsys, "one.csv", "policy 'good' has 1 trial",
            "needs at least 2", code=1)
    no_fair = tmp_path / "no_fair.csv"
    no_fair.write_text("\n".join(r for r in plain.read_text().splitlines() if not r.startswith("fair")) + "\n")
    err = refused(_estimate(no_fair, root / "wm", tmp_path / "o2"), capsys, "no_fair.csv",
                  "policy 'fair' has no trials", "--policies good poor idle", code=1)
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()
    advised = err.split("--policies ")[1].split()
    assert main(_estimate(no_fair, root / "wm", tmp_path / "o3", "--policies", *advised, "--min-trials", "8")) == 0
    body = json.loads((tmp_path / "o3" / "estimate.json").read_text())
    assert list(body["policies"]) == ["good", "poor", "idle"] and body["notes"] == []
    assert main(_estimate(plain, root / "wm", tmp_path / "o4", "--policies", "good", "poor", "--min-trials", "8")) == 0
    body = json.loads((tmp_path / "o4" / "estimate.json").read_text())
    assert list(body["policies"]) == ["good", "poor"] and body["labelled"] == 16
    assert body["notes"] == ["8 trials of 'fair' not used (left out by --policies)",
                             "8 trials of 'idle' not used (left out by --policies)"]
    assert "Note: 8 trials of 'fair' not used" in (tmp_path / "o4" / "estimate.md").read_text()
    refused(_estimate(plain, root / "wm", tmp_path / "o5", "--policies", "expert"), capsys, "--policies: 'expert'",
            "its policies: good, fair, poor, idle")
    # the control: every policy with its trials
    assert main(_estimate(plain, root / "wm", tmp_path / "o6")) == 0


# ----------------------------------------------------------------------------------------------------------------------
# Numbers on the command line and in the API
# ----------------------------------------------------------------------------------------------------------------------


def test_bad_numbers_are_refused_by_flag_before_anything_is_read(pool, tmp_path, capsys):
    """--seed -1 (it ended in numpy's traceback), --n below 2, --draws below 0, --study-n not fewer than the
    evaluation's scenes (it was silently dropped) or without --draws, --n with a trial file (it was silently
    unused), --alpha outside (0, 1): each a config error naming the flag; nothing at --out."""
    root, _, plain = pool
    sim, wm, out = root / "sim", root / "wm", tmp_path / "out"
    cases = [((plain, "--seed", "-1"), "--seed: got -1"), ((sim, "--seed", "-1"), "--seed: got -1"),
             ((sim, "--n", "1"), "--n: got 1"), ((sim, "--n", "60"), "--n: got 60"),
             ((sim, "--draws", "-1"), "--draws: got -1"),
             ((sim, "--draws", "2", "--study-n", "5", "100"), "--study-n: 100 is not fewer than the 60 scenes"),
             ((sim, "--study-n", "5"), "--study-n: the coverage study's n values are used with --draws"),
             ((plain, "--n", "5"), "--n: the trials of"), ((sim, "--alpha", "nan"), "--alpha: got nan"),
             ((sim, "--alpha", "1"), "--alpha: got 1.0")]
    for (gt, *flags), needle in cases:
        refused(_estimate(gt, wm, out, *flags), capsys, needle)
        assert not out.exists(), flags
    from simforcing import estimate_success

    for kwargs, needle in (({"seed": -1}, "--seed"), ({"seed": True}, "--seed"), ({"n": 2.5}, "--n"),
                           ({"draws": "3"}, "--draws"), ({"study_ns": [5.5], "draws": 2}, "--study-n")):
        with pytest.raises(ConfigError, match=needle):
            estimate_success(sim, wm, **kwargs)
    # the controls: the same flags in range
    assert main(_estimate(sim, wm, out, "--seed", "3", "--n", "5", "--draws", "2", "--study-n", "5", "59")) == 0
    assert json.loads((out / "estimate.json").read_text())["inputs"]["n"] == 5
    res, study = estimate_success(sim, wm, seed=0, n=2)
    assert res.labelled == 2 * len(RATES) and study == []


# ----------------------------------------------------------------------------------------------------------------------
# What the world-model episodes hold
# ----------------------------------------------------------------------------------------------------------------------


def _without_readings(src: Path, dst: Path) -> Path:
    def strip(body):
        for per in body["episodes"].values():
            for outs in per.values():
                for o in outs:
                    o.pop("frame_margin", None)
                    o.pop("frame_arm_mm", None)

    return edited(src, dst, strip)


def test_episodes_without_readings_are_estimated_with_the_verdict_and_say_so(pool, tmp_path, capsys):
    """A world-model evaluation whose episodes hold no per-frame readings (it was estimated with the learned
    predictor on the verdict alone, without a word): by default the verdict predictor, named in a note (stdout's
    table, estimate.md, estimate.json, the API's warning); --predictor learned asked for is refused naming the
    episodes. The control: with readings the default is the learned predictor and nothing is noted."""
    root, _, plain = pool
    bare = _without_readings(root / "wm", tmp_path / "bare")
    assert main(_estimate(plain, bare, tmp_path / "o1")) == 0
    assert "Note: predictor verdict (not the default learned one): 240 of the 240 episodes" in capsys.readouterr().out
    body = json.loads((tmp_path / "o1" / "estimate.json").read_text())
    assert body["predictor"] == "verdict" and "hold no per-frame readings" in body["notes"][0]
    refused(_estimate(plain, bare, tmp_path / "o2", "--predictor", "learned"), capsys, "--predictor learned",
            "hold no per-frame readings", "--predictor verdict")
    assert not (tmp_path / "o2").exists()
    from simforcing import estimate_success

    with pytest.warns(UserWarning, match="predictor verdict"):
        estimate_success(plain, bare)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res, _ = estimate_success(plain, root / "wm", min_trials=8)  # 8 trials per policy: PPI, no note
    assert res.predictor == "learned" and res.notes == []


def test_a_simulator_evaluation_of_other_scenes_or_runs_is_no_ground_truth(pool, tmp_path, capsys):
    """A simulator evaluation made with another step limit (it was accepted as the truth), another jitter or
    dataset seed, or whose policy of the same name scored another checkpoint is refused naming each difference;
    nothing is written. The control: the matching evaluation, and one holding more policies than the world model's
    (the truth of every world-model episode is still there)."""
    root, truth, _ = pool
    sim = PolicyEvaluation.read(root / "sim", "--ground-truth")
    wm = PolicyEvaluation.read(root / "wm", "--wm-eval")
    variants = {"steps": (replace(sim, max_steps=50), "max_steps 30 here, 50 there"),
                "jitter": (replace(sim, jitter=0.03), "jitter 0.0 here, 0.03 there"),
                "seed": (replace(sim, seed=6), "seed 5 here, 6 there")}
    for name, (ev, needle) in variants.items():
        ev.write(tmp_path / name)
        refused(_estimate(tmp_path / name, root / "wm", tmp_path / f"o_{name}"), capsys, needle,
                "not the ground truth of the world-model evaluation", "--max-steps")
        assert not (tmp_path / f"o_{name}").exists()
    scored = {"good": ScoredRun("/runs/good", "/runs/good/checkpoints/step_000004", 4, True)}
    replace(wm, runs=scored, learned=["good"]).write(tmp_path / "wm_run")
    other = {"good": ScoredRun("/runs/good", "/runs/good/checkpoints/step_000002", 2, True)}
    replace(sim, runs=other, learned=["good"]).write(tmp_path / "sim_run")
    refused(_estimate(tmp_path / "sim_run", tmp_path / "wm_run", tmp_path / "o_run"), capsys, "policy 'good' scored",
            "step_000004", "step_000002")
    # the controls: the same run in both; a simulator evaluation with one more policy
    replace(sim, runs=scored, learned=["good"]).write(tmp_path / "sim_same")
    assert main(_estimate(tmp_path / "sim_same", tmp_path / "wm_run", tmp_path / "o_same")) == 0
    more = evaluation(SIMULATOR, 20, lambda p, t, s: EpisodeOutcome(s, truth.get((p, t, s), True), 10),
                      policies=(*RATES, "extra"))
    more.write(tmp_path / "sim_more")
    assert main(_estimate(tmp_path / "sim_more", root / "wm", tmp_path / "o_more")) == 0
    assert "extra" not in json.loads((tmp_path / "o_more" / "estimate.json").read_text())["policies"]


# ----------------------------------------------------------------------------------------------------------------------
# Evaluation files cut short or edited (every numeric field read back)
# ----------------------------------------------------------------------------------------------------------------------


def _episode(body) -> dict:
    return body["episodes"]["good"]["push"][0]


EDITS = {  # what was done to eval.json -> what the refusal names
    "a policy listed without episodes": (lambda b: b["episodes"].pop("fair"), "policy 'fair' has a row"),
    "a policy's episodes emptied": (lambda b: b["episodes"].__setitem__("fair", {}), "policy 'fair' has a row"),
    "a task cut short": (lambda b: b["episodes"]["fair"]["push"].pop(), "task push: its row counts"),
    "a scene twice": (lambda b: _episode(b).__setitem__("scene", 1), "two episodes on scene 1"),
    "a scene not drawn": (lambda b: _episode(b).__setitem__("scene", 99), "scenes [99] the evaluation did not"),
    "success as a string": (lambda b: _episode(b).__setitem__("success", "false"), "field 'success' must be true"),
    "a fractional scene": (lambda b: _episode(b).__setitem__("scene", 1.5), "field 'scene' must be an integer"),
    "a negative scene": (lambda b: _episode(b).__setitem__("scene", -1), "field 'scene' must be an integer >= 0"),
    "per-frame verdicts as a word": (lambda b: _episode(b).__setitem__("frame_judged", "yes"), "'frame_judged'"),
    "a NaN per-frame verdict": (lambda b: _episode(b).__setitem__("frame_judged", [float("nan")]),
                                "'frame_judged' must be a list of true/false"),
    "a fractional seed": (lambda b: b.__setitem__("seed", 5.5), "field 'seed' must be an integer"),
    "a NaN jitter": (lambda b: b.__setitem__("jitter", float("nan")), "field 'jitter' must be a finite number"),
    "a step limit below 1": (lambda b: b.__setitem__("max_steps", 0), "field 'max_steps' must be an integer >= 1"),
    "a resolution of one number": (lambda b: b.__setitem__("resolution", [32]), "field 'resolution'"),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_evaluation_cut_short_or_edited_is_refused_by_field(pool, tmp_path, capsys, edit):
    """Each edit of a world-model evaluation (--wm-eval) and of the simulator's (--ground-truth) is a config error
    naming the flag, the file and the field (a policy the evaluation lists without episodes once disappeared from the
    estimate; "false" read as a success; a per-frame verdict "yes" ended in a traceback); the agreement's --sim reads
    the same way. Nothing is written. The control: the untouched files (the test above and below)."""
    root, _, plain = pool
    change, needle = EDITS[edit]
    for flag, src in (("--wm-eval", "wm"), ("--ground-truth", "sim")):
        bad = edited(root / src, tmp_path / src, change)
        gt, wm = (plain, bad) if flag == "--wm-eval" else (bad, root / "wm")
        if flag == "--ground-truth" and "frame_judged" in edit:
            continue  # the simulator's episodes record no per-frame verdicts without a judge
        refused(_estimate(gt, wm, tmp_path / "out"), capsys, flag, str(bad / "eval.json"), needle)
        assert not (tmp_path / "out").exists()
    refused(["policy", "agreement", "--sim", str(tmp_path / "sim"), "--wm", f"a={root / 'wm'}", "--out",
             str(tmp_path / "agreement")], capsys, "--sim", needle)
    assert not (tmp_path / "agreement").exists()


# ----------------------------------------------------------------------------------------------------------------------
# Statistics at their edges
# ----------------------------------------------------------------------------------------------------------------------


def test_differences_at_the_edges_keep_an_interval():
    """Two policies that succeeded in every trial differ by 0 with an interval of some width around it, not [0, 0];
    2 successes of 2 against 0 of 2 is no sure difference (it was [1, 1] and ranked the two surely); the control: a
    difference of trials that vary keeps the paired t-interval exactly."""
    from scipy import stats

    from simforcing.policy.estimate.ppi import PolicyTerms, difference, ppi_terms, rank_intervals

    ids = tuple(("reach", i) for i in range(10))
    every = PolicyTerms(ppi_terms(np.ones(10), np.full(10, 0.5), np.full(40, 0.5)), ids, ())
    d = difference(every, every)
    assert d.estimate == 0 and d.lo < -0.1 and d.hi > 0.1
    two, none = (PolicyTerms(ppi_terms(y, np.full(2, 0.5), []), ids[:2], ()) for y in (np.ones(2), np.zeros(2)))
    d = difference(two, none)
    assert d.estimate == 1 and d.lo <= 0
    assert rank_intervals({"two": two, "none": none}) == {"two": (1, 2), "none": (1, 2)}
    rng = np.random.default_rng(3)
    ya, yb = (rng.random(12) < 0.7).astype(float), (rng.random(12) < 0.4).astype(float)
    a, b = (PolicyTerms(ppi_terms(y, y, [], lam=0.0), tuple(("push", i) for i in range(12)), ())
            for y in (ya, yb))
    half = stats.t.ppf(0.975, 11) * np.sqrt(np.var(ya - yb, ddof=1) / 12)
    d = difference(a, b)
    assert (d.lo, d.hi) == pytest.approx((max(-1, d.estimate - half), min(1, d.estimate + half)))


def test_a_single_windows_difference_has_no_interval():
    """The few-step student against its teacher on one window (``fewstep.job.paired_difference``): the difference
    with no interval (it was a zero-width one) and the demo's table says so; the control: two windows get one."""
    from simforcing.demo.fewstep_section import _window_lines
    from simforcing.fewstep.job import paired_difference

    one = paired_difference([20.0, None], [21.0, 22.0])
    assert one == {"mean": 1.0, "ci95": None, "n": 1}
    table = _window_lines({"psnr": {"teacher": 20.0, "student": 21.0, "relative": 0.05, "paired": one},
                           "forwards_per_sample": {"teacher": 21, "student": 2}})
    assert "| PSNR (dB) | 20.00 | 21.00 | +1.00 [—] | +5.0 % |" in table
    two = paired_difference([20.0, 20.0], [21.0, 22.0])
    assert two["n"] == 2 and two["ci95"][0] < 1.5 < two["ci95"][1]


def test_one_policy_all_failures_and_a_coverage_study_of_one_policy(pool, tmp_path, capsys):
    """A single policy (an empty comparison: no differences, rank 1–1) with a coverage study, whose ranking Pearson is
    undefined: reported as "—" and null, with no NaN in estimate.json and no warning; a policy that never succeeds
    (all failures) is estimated at 0 inside its interval."""
    root, _, _ = pool
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(_estimate(root / "sim", root / "wm", tmp_path / "one", "--policies", "idle", "--n", "4",
                              "--draws", "3", "--study-n", "4")) == 0
    text = (tmp_path / "one" / "estimate.json").read_text()
    body = json.loads(text, parse_constant=lambda c: pytest.fail(f"estimate.json holds {c}"))
    assert body["differences"] == {} and body["policies"]["idle"]["rank"] == [1, 1]
    assert body["study"][0]["pearson_ppi"] is None and "| — / — / — |" in capsys.readouterr().out
    ppi = body["policies"]["idle"]["average"]["ppi"]
    assert ppi["estimate"] == 0 and ppi["ci"][0] == 0 < ppi["ci"][1]


# ----------------------------------------------------------------------------------------------------------------------
# Results folders written over
# ----------------------------------------------------------------------------------------------------------------------


def test_estimate_and_agreement_folders_are_whole_or_untouched(pool, tmp_path, capsys):
    """`policy estimate --out` the world-model evaluation's own folder (it wrote beside eval.json), or a folder of a
    user's files, is refused and left byte-identical; an estimate with a coverage study replaced by one without
    leaves no stale coverage.png; a refused estimate leaves the earlier one byte-identical. `policy agreement --out`
    the same (the control: an agreement of matching evaluations, then again into its own folder)."""
    root, _, plain = pool
    before = digest(root / "wm")
    refused(_estimate(root / "sim", root / "wm", root / "wm"), capsys, "--out", "an evaluation's results")
    assert digest(root / "wm") == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    refused(_estimate(root / "sim", root / "wm", mine), capsys, "holds files that are not an estimate (notes.txt)")
    out = tmp_path / "est"
    assert main(_estimate(root / "sim", root / "wm", out, "--draws", "2", "--study-n", "5")) == 0
    assert (out / "coverage.png").is_file()
    assert main(_estimate(plain, root / "wm", out)) == 0
    assert not (out / "coverage.png").exists() and json.loads((out / "estimate.json").read_text())["study"] == []
    earlier = digest(out)
    refused(_estimate(plain, root / "wm", out, "--seed", "-1"), capsys, "--seed")
    assert digest(out) == earlier and sorted(p.name for p in tmp_path.iterdir()) == ["est", "mine"]  # no temporary
    judge = JudgeRecord({"height": 32}, 1, "weights")
    evaluation(SIMULATOR, 4, lambda p, t, s: EpisodeOutcome(s, s < RATES[p] * 4, 10)).write(tmp_path / "sim")
    evaluation(WORLD_MODEL, 4, lambda p, t, s: EpisodeOutcome(s, s < 2, 10), judge=judge).write(tmp_path / "wm")
    agree = ["policy", "agreement", "--sim", str(tmp_path / "sim"), "--wm", f"w={tmp_path / 'wm'}", "--bootstrap",
             "5", "--out"]
    refused(agree + [str(mine)], capsys, "holds files that are not an agreement (notes.txt)")
    refused(agree + [str(tmp_path / "wm")], capsys, "an evaluation's results")
    assert (mine / "notes.txt").read_text() == "my notes"
    assert main(agree + [str(tmp_path / "agreement")]) == 0
    body = json.loads((tmp_path / "agreement" / "agreement.json").read_text())
    assert body["scatter"] == str(tmp_path / "agreement" / "scatter.png") and Path(body["scatter"]).is_file()
    assert main(agree + [str(tmp_path / "agreement")]) == 0  # an earlier agreement there is replaced whole
    assert sorted(p.name for p in (tmp_path / "agreement").iterdir()) == ["agreement.json", "agreement.md",
                                                                         "scatter.png"]
