"""`simforcing fidelity point | curve` (``simforcing.fidelity``): each number against a computation by hand from the
files the other commands write (tests/fidelitygen.py), the world model each input was made with, the typed point and
curve read back through their one reader (the files of docs/fidelity_curve, version 1, included), the refusals that
name the file and the fix, the curve's files, the demo's job and its report section. The faults (an input of another
world model or kind, a malformed log or point file, NaN) are in tests/faults/test_faults_fidelity.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fidelitygen import agreement, metrics_run, rollout, wm_eval, window_eval, world_model

from simforcing import fidelity as F
from simforcing.cli import main
from simforcing.config import ConfigError
from simforcing.policy.closed_loop.results import SIMULATOR

DOCS_CURVE = Path(__file__).resolve().parents[1] / "docs" / "fidelity_curve"


def _inputs(tmp: Path, step: int = 3, af: float = 0.0625) -> dict:
    """Every input of one world model (the run ``tmp/stage2`` at ``step``) and its two training runs."""
    run = metrics_run(tmp / "stage2", ((1, 1.5), (2, 3.0), (3, 4.25)))
    wm = world_model(run, step)
    return dict(oracle=window_eval(tmp / "o", wm, af=af), twin=rollout(tmp / "t", wm), wm_eval=wm_eval(tmp / "s", wm),
                agreement=agreement(tmp / "a", {"wm-a": wm, "wm-b": world_model(tmp / "other")}), wm_name="wm-a",
                runs=[metrics_run(tmp / "stage1", ((10, 100.0),)), run])


def test_each_number_is_the_one_computed_by_hand(tmp_path):
    wm = world_model(tmp_path / "stage2", 600)
    o = F.OracleWindow.measure(window_eval(tmp_path / "o", wm))
    assert o.af_cm == pytest.approx(6.25) and o.psnr == 24.5 and o.floor_cm == pytest.approx(2.6) and o.windows == 80
    t = F.TwinDrift.measure(rollout(tmp_path / "t", wm))
    assert t.drift_cm == pytest.approx(100 * (0.13 - 0.095)) and t.rollout_cm == pytest.approx(13.0)
    assert t.drift_db == pytest.approx(22.5 - 20.5) and t.last_chunk_cm == pytest.approx(16.0)
    s = F.StillChange.measure(wm_eval(tmp_path / "s", wm))
    # |frame_t − frame_0| per pixel: t//2 (uint8 truncation of t/2) and t, averaged over the two episodes
    assert s.change == pytest.approx([(5 // 2 + 5) / 2, (10 // 2 + 10) / 2, (30 // 2 + 30) / 2])
    assert s.episodes == 2 and s.steps == (5, 10, 30) and s.at(30) == pytest.approx(22.5)
    i = F.Inside.measure(agreement(tmp_path / "a", {"wm-a": None, "wm-b": wm}), "wm-b")
    assert i.pearson == pytest.approx(0.6) and i.clean_expert == pytest.approx(0.6) and i.n_policies == 8
    assert F.Inside.measure(agreement(tmp_path / "a1", {"only": wm})).wm == "only"
    tr = F.TrainingCost.measure([metrics_run(tmp_path / "r1"), metrics_run(tmp_path / "r2", ((1, 2.0), (2, 10.0)))])
    assert tr.core_s == pytest.approx(14.25) and tr.not_recorded == () and tr.steps == {
        str(tmp_path / "r1"): 3, str(tmp_path / "r2"): 2}
    # every measurement says which world model made its input
    assert {m.world_model for m in (o, t, s)} == {F.WorldModelId(str(tmp_path / "stage2"), 600, wm.checkpoint)}


def test_a_point_is_one_world_model_and_records_it(tmp_path):
    p = F.fidelity_point(**_inputs(tmp_path))
    assert p.world_model == F.WorldModelId(str(tmp_path / "stage2"), 3, str(tmp_path / "stage2/checkpoints/step_000003"))
    body = p.to_json()
    assert body["format_version"] == 2 and body["world_model"]["step"] == 3
    assert {body[k]["world_model"]["run"] for k in ("oracle", "twin", "still", "inside")} == {str(tmp_path / "stage2")}
    assert "world model: " + str(tmp_path / "stage2") + " at step 3" in p.markdown()
    # the training cost of the world model's own run is read at its checkpoint's step, the other run's last row
    early = F.fidelity_point(**_inputs(tmp_path / "early", step=2))
    assert early.training.core_s == pytest.approx(100.0 + 3.0)
    assert early.training.steps == {str(tmp_path / "early/stage1"): 10, str(tmp_path / "early/stage2"): 2}
    # inputs that do not record their world model (files of an older simforcing) are said, not refused
    old = F.fidelity_point(oracle=window_eval(tmp_path / "old", None), twin=_inputs(tmp_path / "x")["twin"])
    assert old.oracle.world_model is None and old.world_model.step == 3
    assert "(not recorded by the oracle input)" in old.markdown()


def test_the_point_and_the_curve_are_read_back_through_their_types(tmp_path):
    p = F.fidelity_point(**_inputs(tmp_path), label="cfg")
    path = p.write(tmp_path / "point")
    assert F.FidelityPoint.read(tmp_path / "point", "--points") == p == F.FidelityPoint.read(path, "--points")
    assert F.FidelityPoint.from_json(json.loads(json.dumps(p.to_json()))) == p
    curve = F.FidelityCurve({"a": p, "b": F.fidelity_point(oracle=_inputs(tmp_path / "b")["oracle"])})
    curve.write(tmp_path / "curve")
    assert F.FidelityCurve.read(tmp_path / "curve", "--curve") == curve
    # the files written before the world model was recorded (format version 1) read through the same reader
    docs = F.FidelityCurve.read(DOCS_CURVE, "--curve")
    both = docs.points["2x2, both paths"]
    assert both.world_model is None and both.oracle.af_cm == pytest.approx(6.095871012657881)
    assert both.training.measured == "given" and both.training.core_s == pytest.approx(687.01)
    assert both.to_json()["training"] == {"core_s": 687.01, "runs": {}, "measured": "given"}  # as version 1 wrote it
    old = json.loads((DOCS_CURVE / "fidelity_curve.json").read_text())
    for name, point in docs.points.items():
        headline = point.headline.to_json()
        assert (headline["paired_episodes"] is None) == (point.data is None)  # the data axis: the later points only
        assert headline == pytest.approx(old["table"][name]), name  # the same numbers
        assert {k: a.to_json() for k, a in point.aims().items()} == old["points"][name]["aims"], name
    assert docs.markdown() == (DOCS_CURVE / "fidelity_curve.md").read_text()


def test_the_aims_are_compared_the_right_way_round(tmp_path):
    p = F.fidelity_point(**_inputs(tmp_path, af=0.035))
    met = {k: a.met for k, a in p.aims().items()}
    assert met == {"oracle_af_cm": True, "twin_drift_cm": False, "twin_drift_db": False, "still_30": False,
                   "pearson": False, "clean_expert": False}
    twin_only = F.fidelity_point(twin=rollout(tmp_path / "t2", world_model(tmp_path / "r")))
    assert twin_only.aims()["oracle_af_cm"].met is None  # not measured
    assert F.Aim("x", "x", 0.85, below=False).met(0.9) and not F.Aim("x", "x", 4.0).met(4.5)


@pytest.mark.parametrize("make, measure, needle", [
    (lambda d, wm: window_eval(d, wm, condition="own"), F.OracleWindow.measure, "--sample.condition=oracle"),
    (lambda d, wm: window_eval(d, wm, af=None), F.OracleWindow.measure, "--eval.probe=PROBE"),
    (lambda d, wm: rollout(d, wm, condition="own"), F.TwinDrift.measure, "--sample.condition=render"),
    (lambda d, wm: rollout(d, wm, rows=("rollout",)), F.TwinDrift.measure, "--rows rollout restart"),
    (lambda d, wm: agreement(d, {"a": wm, "b": wm}), F.Inside.measure, "say which with --wm-name"),
    (lambda d, wm: wm_eval(d, wm, env=SIMULATOR), F.StillChange.measure, "not one inside a world model"),
    (lambda d, wm: (wm_eval(d, wm) / "frames.npz").unlink(), F.StillChange.measure, "frames.npz does not exist"),
    (lambda d, wm: window_eval(d, wm), F.TwinDrift.measure, "expected a rollout-drift result"),
    (lambda d, wm: None, F.OracleWindow.measure, "does not exist"),
])
def test_inputs_of_the_wrong_kind_are_refused_by_name(tmp_path, make, measure, needle):
    folder = tmp_path / "x"
    make(folder, world_model(tmp_path / "run"))
    with pytest.raises(ConfigError) as e:
        measure(folder)
    assert needle in str(e.value) and str(folder) in str(e.value)


def test_a_run_without_core_seconds_leaves_the_cost_out_and_says_so(tmp_path):
    old = metrics_run(tmp_path / "old", ((1, None),))
    tr = F.TrainingCost.measure([old, metrics_run(tmp_path / "new")])
    assert tr.core_s is None and tr.not_recorded == (str(old),)
    p = F.fidelity_point(runs=[old])
    assert "core-seconds not recorded by" in p.markdown()


def test_point_and_curve_commands_write_their_files(tmp_path, capsys):
    pts = []
    for k, (af, core) in enumerate(((0.07, 100.0), (0.05, 400.0), (0.06, 200.0))):
        d = tmp_path / f"p{k}"
        i = _inputs(d, af=af)
        metrics_run(d / "stage2", ((3, core),))
        args = ["fidelity", "point", "--oracle", i["oracle"], "--twin", i["twin"], "--wm-eval", i["wm_eval"],
                "--agreement", i["agreement"], "--wm-name", "wm-a", "--runs", d / "stage2", "--label", f"cfg{k}",
                "--out", d / "point"]
        assert main([str(a) for a in args]) == 0
        pts.append(str(d / "point"))
    body = json.loads((tmp_path / "p0/point/fidelity.json").read_text())
    assert body["format"] == "simforcing.fidelity" and body["training"]["core_s"] == 100.0
    assert main(["fidelity", "curve", "--points", *pts, "named=" + pts[0], "--out", str(tmp_path / "c")]) == 0
    md = (tmp_path / "c/fidelity_curve.md").read_text().splitlines()
    assert [r.split("|")[1].strip() for r in md[2:]] == ["cfg0", "named", "cfg2", "cfg1"]  # by core-seconds
    assert (tmp_path / "c/fidelity_curve.png").stat().st_size > 10000
    curve = json.loads((tmp_path / "c/fidelity_curve.json").read_text())
    assert curve["table"]["cfg1"]["oracle_af_cm"] == pytest.approx(5.0)
    assert main(["fidelity", "curve", "--points", pts[0], pts[0], "--out", str(tmp_path / "c2")]) == 2
    assert "two points are named 'cfg0'" in capsys.readouterr().err
    # an earlier curve's folder gives all its points, beside new ones
    assert main(["fidelity", "curve", "--points", str(tmp_path / "c"), "extra=" + pts[1], "--out",
                 str(tmp_path / "c3")]) == 0
    again = json.loads((tmp_path / "c3/fidelity_curve.json").read_text())
    assert set(again["points"]) == {"cfg0", "named", "cfg2", "cfg1", "extra"}
    assert main(["fidelity", "curve", "--points", str(tmp_path / "c"), pts[0], "--out", str(tmp_path / "c4")]) == 2
    assert main(["fidelity", "point", "--out", str(tmp_path / "none")]) == 2
    assert "nothing to measure" in capsys.readouterr().err


def test_the_demo_measures_its_world_models_fidelity_from_what_it_wrote(tmp_path):
    """The demo's fidelity job reads the oracle evaluation, the twin rollout, the twin's world-model evaluation and
    the agreement the graph already makes (no new sampling), and the report shows it beside the aims."""
    from types import SimpleNamespace

    from simforcing.demo.fidelity_section import collect_fidelity, fidelity_lines
    from simforcing.demo.plan import (EVALUATOR, ORACLE_CONDITION, build_plan, demo_budget, evaluator_oracle,
                                      twin_condition)

    # the default demo: SimForcing's point alone — its pool is the few-step student's, another world model, which a
    # fidelity point refuses (one_world_model); the student's ranking is in the pool's own tables
    default = build_plan(tmp_path / "demo0", None, demo_budget())
    cmd = default.commands["fidelity"]
    assert f"--oracle {default.evals[ORACLE_CONDITION]}" in cmd and "--wm-eval" not in cmd and "--wm-name" not in cmd
    assert cmd.endswith(f"--runs {default.out / 'stage1'} {default.runs['simforcing']} --out {default.out / 'fidelity'}")
    assert set({j.name: j for j in default.jobs}["fidelity"].deps) == {
        f"eval {ORACLE_CONDITION.name}", f"rollout {twin_condition('simforcing').name}", "train simforcing"}
    plan = build_plan(tmp_path / "demo", None, demo_budget(), full=True)  # --full: the evaluator's
    jobs = {j.name: j for j in plan.jobs}
    cmd = plan.commands["fidelity"]  # the evaluator's student: the world model the policy sections use
    student = plan.students[EVALUATOR]
    assert f"--oracle {plan.evals[evaluator_oracle()]}" in cmd
    assert f"--twin {plan.rollouts['folders'][twin_condition('evaluator-fewstep')]}" in cmd
    assert "--wm-name evaluator-fewstep-twin" in cmd
    assert f"--runs {plan.out / 'stage1'} {plan.evaluator.run} {student}" in cmd
    assert {"estimate wm pool evaluator-fewstep-twin", "pool agreement", f"distill {EVALUATOR}"} <= \
        set(jobs["fidelity"].deps)
    no_policy = build_plan(tmp_path / "demo2", None, demo_budget(), policy=False)  # no evaluator: SimForcing's
    cmd = no_policy.commands["fidelity"]
    assert "--wm-eval" not in cmd and f"--oracle {no_policy.evals[ORACLE_CONDITION]}" in cmd
    assert f"--twin {no_policy.rollouts['folders'][twin_condition('simforcing')]}" in cmd
    assert collect_fidelity(SimpleNamespace(fidelity=tmp_path / "absent")) is None and fidelity_lines(None) == []
    d = tmp_path / "written"
    i = _inputs(d)
    F.fidelity_point(oracle=i["oracle"], runs=[i["runs"][1]]).write(d / "fid")
    section = collect_fidelity(SimpleNamespace(fidelity=d / "fid"))
    assert section.point.headline.oracle_af_cm == pytest.approx(6.25) and section.point.headline.core_s == 4.25
    saved = json.loads(json.dumps(section.to_json()))  # what results.json holds
    assert saved["table"]["oracle_af_cm"] == pytest.approx(6.25) and saved["oracle"]["af_cm"] == pytest.approx(6.25)
    assert "inside" not in saved and saved["aims"]["pearson"]["met"] is None and saved["folder"] == str(d / "fid")
    text = "\n".join(fidelity_lines(section))
    assert "How faithful the world model is" in text and "| 6.25 | ≤ 4 | no |" in text and "4 core-seconds" in text


def test_the_data_axis_reads_what_the_world_model_was_trained_on(tmp_path):
    """The point's data section: the world model's run's dataset (its config's data.root) — its paired training
    episodes, those in the policy layouts and the operators that drove them — and the curve's second plot against
    paired episodes; a dataset no longer there gives no data axis, never an error."""
    from simforcing.data.format import EpisodeInfo, write_meta

    def dataset(root, paired: int, synth: dict):
        eps = [EpisodeInfo(f"ep_{i:05d}", 33, "reach", True) for i in range(paired)] + \
            [EpisodeInfo("ep_sim", 33, "reach", False)]
        write_meta(root, {"fps": 10, "height": 32, "width": 48, "action_dim": 7, "state_dim": 7,
                          "video_layout": "separate", "synth": synth},
                   eps, {"train": [e.episode_id for e in eps], "val": [], "sim_pool": []})
        return root

    points = {}
    for name, paired, synth in (("scripted", 40, {"layout_train": 20}),
                                ("evaluator", 120, {"layout_train": 100,
                                                    "action_noise": {"sigma_max": 0.05, "splits": ["train"]},
                                                    "pauses": {"per_episode": 2, "splits": ["train"]},
                                                    "failures": {"fraction": 0.25, "splits": ["train"]}})):
        i = _inputs(tmp_path / name)
        run = Path(i["runs"][1])
        (run / "config.json").write_text(json.dumps({"data": {"root": str(dataset(tmp_path / name / "data", paired,
                                                                                     synth))}}))
        points[name] = F.fidelity_point(**i)
    assert points["scripted"].data == F.TrainingData(str(tmp_path / "scripted/data"), 40, 20, "scripted")
    d = points["evaluator"].data
    assert (d.paired, d.layout, d.action_noise, d.pauses, d.failures) == (120, 100, 0.05, 2, 0.25)
    assert d.operators == "noise ≤ 5 cm, 2 pauses, 25 % failing" and points["evaluator"].headline.paired_episodes == 120
    assert "120 paired training episodes (100 in the policy layouts)" in points["evaluator"].markdown()
    curve = F.FidelityCurve(points)
    curve.write(tmp_path / "curve")
    assert F.FidelityCurve.read(tmp_path / "curve", "--curve") == curve
    assert (tmp_path / "curve/fidelity_curve_data.png").stat().st_size > 10000
    assert "| 120 (noise ≤ 5 cm, 2 pauses, 25 % failing) |" in (tmp_path / "curve/fidelity_curve.md").read_text()
    shutil.rmtree(tmp_path / "scripted" / "data")  # the dataset gone: no data axis
    assert F.fidelity_point(**_inputs(tmp_path / "scripted")).data is None
