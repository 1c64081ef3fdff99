"""`simforcing fidelity point | curve` (``simforcing.evaluate.fidelity``): each number against a computation by hand
from the files the other commands write, the refusals that name the file and the fix, the curve's files, the demo's
job and its report section."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simforcing.cli import main
from simforcing.config import ConfigError
from simforcing.evaluate import fidelity as F
from simforcing.result_files import AGREEMENT, ROLLOUT_DRIFT, WINDOW_EVALUATION, tagged


def _eval(folder: Path, condition: str = "oracle", af: float = 0.0625, psnr: float = 24.5) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    body = {"psnr": psnr, "psnr_arm": 15.0, "af_pos": af, "af_floor_pos": 0.026, "num_samples": 80,
            "latency_s": 0.2, "sampler": {"condition": condition, "w": 1.0}}
    (folder / "eval.json").write_text(json.dumps(tagged(WINDOW_EVALUATION, 2, body)))
    return folder


def _rollout(folder: Path, condition: str = "render", rows=("rollout", "restart")) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    chunks = {"rollout": [0.10, 0.12, 0.14, 0.16], "restart": [0.09, 0.09, 0.10, 0.10]}
    psnr = {"rollout": [22.0, 21.0, 20.0, 19.0], "restart": [23.0, 22.5, 22.5, 22.0]}
    body = {"chunks": 4, "num_episodes": 2, "sampler": {"condition": condition},
            "rows": {r: {"mean": {"af_pos": float(np.mean(chunks[r])), "psnr": float(np.mean(psnr[r]))},
                         "per_chunk": {"af_pos": chunks[r], "psnr": psnr[r]}} for r in rows}}
    (folder / "rollout.json").write_text(json.dumps(tagged(ROLLOUT_DRIFT, 2, body)))
    return folder


def _frames(folder: Path) -> Path:
    """Two do-nothing episodes whose frame t differs from frame 0 by t/2 (first) and t (second) in every pixel, and
    an expert episode that must not be read."""
    folder.mkdir(parents=True, exist_ok=True)
    t = np.arange(31, dtype=np.float64)[:, None, None, None]
    base = np.full((31, 4, 6, 3), 100.0)
    np.savez(folder / "frames.npz", **{"do nothing (floor)|reach|0": (base + t / 2).astype(np.uint8),
                                       "do nothing (floor)|push|1": (base - t).astype(np.uint8),
                                       "scripted expert (ceiling)|reach|0": (base + 3 * t).astype(np.uint8)})
    return folder


def _agreement(folder: Path, wms=("wm-a", "wm-b")) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    ranking = {"simulator frames through the judge": {"all": {"pearson": 0.99}}}
    ranking.update({w: {"all": {"pearson": 0.5 + 0.1 * i, "pearson_ci95": [0.1, 0.8], "spearman": 0.4, "mmrv": 0.2,
                                "n_policies": 8}} for i, w in enumerate(wms)})
    envs = {w: {"scripted expert (ceiling)": {"rate": 0.4 + 0.2 * i, "ci95": [0.2, 0.7]}} for i, w in enumerate(wms)}
    body = {"ranking": ranking, "envs": envs, "players": [], "scenes": 15}
    (folder / "agreement.json").write_text(json.dumps(tagged(AGREEMENT, 2, body)))
    return folder


def _run(folder: Path, core=(1.5, 3.0, 4.25)) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": i + 1, "core_s": c}) + "\n"
                                                  for i, c in enumerate(core)))
    return folder


def test_each_number_is_the_one_computed_by_hand(tmp_path):
    o = F.oracle_window(_eval(tmp_path / "o"))
    assert o["af_cm"] == pytest.approx(6.25) and o["psnr"] == 24.5 and o["floor_cm"] == pytest.approx(2.6)
    t = F.twin_drift(_rollout(tmp_path / "t"))
    assert t["drift_cm"] == pytest.approx(100 * (0.13 - 0.095)) and t["rollout_cm"] == pytest.approx(13.0)
    assert t["drift_db"] == pytest.approx(22.5 - 20.5) and t["last_chunk_cm"] == pytest.approx(16.0)
    s = F.still_change(_frames(tmp_path / "s"))
    # |frame_t − frame_0| per pixel: t//2 (uint8 truncation of t/2) and t, averaged over the two episodes
    assert s["change"] == pytest.approx([(5 // 2 + 5) / 2, (10 // 2 + 10) / 2, (30 // 2 + 30) / 2])
    assert s["episodes"] == 2 and s["steps"] == [5, 10, 30]
    i = F.inside(_agreement(tmp_path / "a"), "wm-b")
    assert i["pearson"] == pytest.approx(0.6) and i["clean_expert"] == pytest.approx(0.6) and i["n_policies"] == 8
    assert F.inside(_agreement(tmp_path / "a1", ("only",)))["wm"] == "only"
    tr = F.training_core_s([_run(tmp_path / "r1"), _run(tmp_path / "r2", (2.0, 10.0))])
    assert tr["core_s"] == pytest.approx(14.25) and tr["not_recorded"] == []


def test_the_aims_are_compared_the_right_way_round(tmp_path):
    p = F.fidelity_point(oracle=_eval(tmp_path / "o", af=0.035), twin=_rollout(tmp_path / "t"),
                         wm_eval=_frames(tmp_path / "s"), agreement=_agreement(tmp_path / "a"), wm_name="wm-a",
                         runs=[_run(tmp_path / "r")])
    met = {k: v["met"] for k, v in p["aims"].items()}
    assert met == {"oracle_af_cm": True, "twin_drift_cm": False, "twin_drift_db": False, "still_30": False,
                   "pearson": False, "clean_expert": False}
    assert F.fidelity_point(twin=_rollout(tmp_path / "t"))["aims"]["oracle_af_cm"]["met"] is None  # not measured
    assert F.Aim("x", "x", 0.85, below=False).met(0.9) and not F.Aim("x", "x", 4.0).met(4.5)


@pytest.mark.parametrize("make, call, needle", [
    (lambda d: _eval(d, condition="own"), F.oracle_window, "--sample.condition=oracle"),
    (lambda d: _rollout(d, condition="own"), F.twin_drift, "--sample.condition=render"),
    (lambda d: _rollout(d, rows=("rollout",)), F.twin_drift, "--rows rollout restart"),
    (lambda d: _agreement(d), F.inside, "say which with --wm-name"),
    (lambda d: d.mkdir(), F.still_change, "frames.npz"),
    (lambda d: _eval(d), F.twin_drift, "expected a rollout-drift result"),
])
def test_inputs_of_the_wrong_kind_are_refused_by_name(tmp_path, make, call, needle):
    folder = tmp_path / "x"
    make(folder)
    with pytest.raises(ConfigError) as e:
        call(folder)
    assert needle in str(e.value) and str(folder) in str(e.value)


def test_a_run_without_core_seconds_leaves_the_cost_out_and_says_so(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    (old / "metrics.jsonl").write_text(json.dumps({"step": 1, "time": 3.0}) + "\n")
    tr = F.training_core_s([old, _run(tmp_path / "new")])
    assert tr["core_s"] is None and tr["not_recorded"] == [str(old)]
    p = F.fidelity_point(runs=[old])
    assert "core-seconds not recorded by" in F.point_md(p)


def test_point_and_curve_commands_write_their_files(tmp_path, capsys):
    pts = []
    for k, (af, core) in enumerate(((0.07, (100.0,)), (0.05, (400.0,)), (0.06, (200.0,)))):
        d = tmp_path / f"p{k}"
        args = ["fidelity", "point", "--oracle", str(_eval(d / "o", af=af)), "--twin", str(_rollout(d / "t")),
                "--wm-eval", str(_frames(d / "s")), "--agreement", str(_agreement(d / "a")), "--wm-name", "wm-a",
                "--runs", str(_run(d / "r", core)), "--label", f"cfg{k}", "--out", str(d / "point")]
        assert main(args) == 0
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
    assert main(["fidelity", "point", "--out", str(tmp_path / "none")]) == 2
    assert "nothing to measure" in capsys.readouterr().err


def test_the_demo_measures_its_world_models_fidelity_from_what_it_wrote(tmp_path):
    """The demo's fidelity job reads the oracle evaluation, the twin rollout, the twin's world-model evaluation and
    the agreement the graph already makes (no new sampling), and the report shows it beside the aims."""
    from types import SimpleNamespace

    from simforcing.demo.fidelity_section import collect_fidelity, fidelity_lines
    from simforcing.demo.plan import ORACLE_CONDITION, build_plan, demo_budget, twin_condition

    plan = build_plan(tmp_path / "demo", None, demo_budget())
    jobs = {j.name: j for j in plan.jobs}
    cmd = plan.commands["fidelity"]
    assert f"--oracle {plan.evals[ORACLE_CONDITION]}" in cmd
    assert f"--twin {plan.rollouts['folders'][twin_condition('simforcing')]}" in cmd
    assert "--wm-name simforcing-twin" in cmd and f"--runs {plan.out / 'stage1'} {plan.runs['simforcing']}" in cmd
    assert {"wm-eval world model simforcing-twin", "wm-eval agreement", "train simforcing"} <= set(jobs["fidelity"].deps)
    no_policy = build_plan(tmp_path / "demo2", None, demo_budget(), policy=False)
    assert "--wm-eval" not in no_policy.commands["fidelity"]
    assert collect_fidelity(SimpleNamespace(fidelity=tmp_path / "absent")) is None and fidelity_lines(None) == []
    d = tmp_path / "written"
    F.write_point(F.fidelity_point(oracle=_eval(d / "o"), runs=[_run(d / "r")]), d / "fid")
    section = collect_fidelity(SimpleNamespace(fidelity=d / "fid"))
    assert section["table"]["oracle_af_cm"] == pytest.approx(6.25) and section["table"]["core_s"] == 4.25
    text = "\n".join(fidelity_lines(section))
    assert "How faithful the world model is" in text and "| 6.25 | ≤ 4 | no |" in text and "4 core-seconds" in text
