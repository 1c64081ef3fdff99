"""`simforcing fidelity point | curve` on inputs that are wrong: of another kind (a simulator evaluation as --wm-eval),
of two world models, with a malformed training log or point file, with NaN. Each refused by name (the flag, the file,
the field, what to do) with exit 2 and no traceback — or handled as documented (an undefined statistic is null) —
and each beside its control, the untouched input, which works. Nothing an earlier command wrote is lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from faultkit import refused
from fidelitygen import agreement, metrics_run, rollout, wm_eval, window_eval, world_model

from simforcing.cli import main
from simforcing.policy.closed_loop.results import SIMULATOR

pytestmark = pytest.mark.faults


def _point(tmp: Path, *extra, out: str = "point", **given) -> list:
    """``fidelity point`` words over one world model's inputs (``given`` replaces one: flag -> folder)."""
    wm = world_model(tmp / "stage2", 3)
    metrics_run(tmp / "stage2")
    inputs = {"--oracle": tmp / "o", "--twin": tmp / "t", "--wm-eval": tmp / "s", "--agreement": tmp / "a"}
    makers = {"--oracle": window_eval, "--twin": rollout, "--wm-eval": wm_eval,
              "--agreement": lambda d, w: agreement(d, {"wm": w})}
    for flag, folder in inputs.items():
        if not folder.exists():
            makers[flag](folder, wm)
    inputs.update({"--" + k.lstrip("-").replace("_", "-"): v for k, v in given.items()})
    words = ["fidelity", "point", *(w for kv in inputs.items() for w in kv), "--wm-name", "wm", "--runs",
             tmp / "stage2", *extra, "--out", tmp / out]
    return [str(w) for w in words]


def test_a_simulator_evaluation_as_wm_eval_is_refused_as_the_wrong_kind(tmp_path, capsys):
    sim = wm_eval(tmp_path / "sim", world_model(tmp_path / "stage2", 3), env=SIMULATOR)
    refused(_point(tmp_path, wm_eval=sim), capsys, "--wm-eval", str(sim / "eval.json"),
            "a simulator evaluation", "not one inside a world model", "policy eval --env world-model")
    assert not (tmp_path / "point").exists()
    assert main(_point(tmp_path)) == 0  # control: the world-model evaluation


@pytest.mark.parametrize("flag", ["--oracle", "--twin", "--wm-eval", "--agreement"])
def test_an_input_of_another_world_model_is_refused_by_name(tmp_path, capsys, flag):
    other = world_model(tmp_path / "elsewhere", 3)
    maker = {"--oracle": window_eval, "--twin": rollout, "--wm-eval": wm_eval,
             "--agreement": lambda d, w: agreement(d, {"wm": w})}[flag]
    folder = maker(tmp_path / "other", other)
    err = refused(_point(tmp_path, **{flag[2:].replace("-", "_"): folder}), capsys, flag, str(folder),
                  str(tmp_path / "elsewhere"), str(tmp_path / "stage2"), "one world model")
    assert "at step 3" in err
    assert main(_point(tmp_path)) == 0  # control: every input of the same world model


def test_an_input_of_another_checkpoint_of_the_same_run_is_refused(tmp_path, capsys):
    later = rollout(tmp_path / "later", world_model(tmp_path / "stage2", 6))
    refused(_point(tmp_path, twin=later), capsys, "--twin", "at step 6", "at step 3")


def test_training_runs_without_the_world_models_run_are_refused(tmp_path, capsys):
    stage1 = metrics_run(tmp_path / "stage1")
    words = _point(tmp_path)
    words[words.index("--runs") + 1] = str(stage1)
    refused(words, capsys, "--runs", str(tmp_path / "stage2"), "not one of the training runs", str(stage1))
    words.insert(words.index("--runs") + 2, str(tmp_path / "stage2"))
    assert main(words) == 0  # control: stage 1 and the world model's own run


@pytest.mark.parametrize("core", ['"abc"', "NaN", "-3", "true"])
def test_a_malformed_core_s_in_the_training_log_is_refused_by_name(tmp_path, capsys, core):
    words = _point(tmp_path)
    log = tmp_path / "stage2" / "metrics.jsonl"
    good = log.read_text()
    log.write_text(good + '{"step": 3, "core_s": ' + core + "}\n")
    refused(words, capsys, "--runs", str(log), "line 4", "core_s", "--core-s")
    log.write_text(good)
    assert main(words) == 0  # control


def test_a_torn_training_log_is_refused_by_name(tmp_path, capsys):
    words = _point(tmp_path)
    log = tmp_path / "stage2" / "metrics.jsonl"
    log.write_text(log.read_text() + '{"step": 4, "co')
    refused(words, capsys, "--runs", str(log), "line 4", "not a metrics row")


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_core_s_flag_that_is_not_a_number_of_seconds_is_refused(tmp_path, capsys, value):
    refused(_point(tmp_path, "--core-s", value), capsys, "--core-s", "a finite number >= 0")
    assert main(_point(tmp_path, "--core-s", "12.5")) == 0  # control
    assert json.loads((tmp_path / "point/fidelity.json").read_text())["training"]["core_s"] == 12.5


def test_nan_in_an_input_is_refused_or_recorded_as_undefined(tmp_path, capsys):
    words = _point(tmp_path)
    ev = tmp_path / "o" / "eval.json"
    body = json.loads(ev.read_text())
    ev.write_text(json.dumps({**body, "af_pos": float("nan")}))
    refused(words, capsys, "--oracle", str(ev), "af_pos")
    ev.write_text(json.dumps(body))
    # an agreement's statistic with no spread is NaN there: undefined, recorded as null and shown as "—"
    agreement(tmp_path / "a", {"wm": world_model(tmp_path / "stage2", 3)}, pearson=[float("nan")])
    assert main(words) == 0
    saved = (tmp_path / "point/fidelity.json").read_text()
    assert "NaN" not in saved and json.loads(saved)["inside"]["pearson"] is None
    assert "| inside the world model: Pearson with the simulator | — | ≥ 0.85 | not measured |" in capsys.readouterr().out


@pytest.mark.parametrize("path, value", [(("ranking", "wm", "all", "pearson"), "abc"),
                                         (("ranking", "wm", "all", "pearson_ci95"), "abc"),
                                         (("envs", "wm", "scripted expert (ceiling)", "rate"), [0.5]),
                                         (("ranking", "wm", "all", "pearson"), float("inf"))])
def test_an_ill_typed_agreement_is_refused_by_name(tmp_path, capsys, path, value):
    words = _point(tmp_path)
    f = tmp_path / "a" / "agreement.json"
    good = f.read_text()
    body = json.loads(good)
    node = body
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    f.write_text(json.dumps(body))
    refused(words, capsys, "--agreement", str(f), f"field {path[-1]!r}"[:-1], "policy agreement")
    f.write_text(good)
    assert main(words) == 0  # control


@pytest.mark.parametrize("field, value, needle", [
    (("oracle", "af_cm"), "abc", "field 'af_cm' must be a finite number; got 'abc'"),
    (("twin", "drift_cm"), float("nan"), "field 'drift_cm' must be a finite number"),
    (("still", "change"), [1.0, "x", 2.0], "field 'change[1]' must be a finite number"),
    (("training", "core_s"), "12", "field 'core_s' must be a finite number"),
    (("world_model", "step"), "3", "field 'step' must be an integer"),
    (("oracle", "windows"), None, "field 'windows' must be an integer"),
    # within range and whole (round 7): each was drawn or tabled without a word
    (("oracle", "windows"), -3, "field 'windows' must be >= 1"),
    (("training", "core_s"), -5.0, "field 'core_s' must be >= 0"),
    (("inside", "clean_expert"), 7.0, "field 'clean_expert' must be within [0, 1]"),
    (("inside", "pearson_ci95"), [0.5], "field 'pearson_ci95' must be an interval of two numbers"),
    (("still", "steps"), [5, 10], "one frame change per step; got 2 steps and 3 changes"),
])
def test_a_malformed_point_file_is_refused_by_the_curve_by_name(tmp_path, capsys, field, value, needle):
    assert main(_point(tmp_path, out="p1")) == 0
    f = tmp_path / "p1" / "fidelity.json"
    good = f.read_text()
    body = json.loads(good)
    body[field[0]][field[1]] = value
    f.write_text(json.dumps(body))
    curve = ["fidelity", "curve", "--points", str(tmp_path / "p1"), "--out", str(tmp_path / "curve")]
    refused(curve, capsys, "--points", str(f), field[0], needle, "simforcing fidelity point")
    assert not (tmp_path / "curve").exists()
    f.write_text(good)
    assert main(curve) == 0  # control


def test_damaged_frames_are_refused_by_name(tmp_path, capsys):
    words = _point(tmp_path)
    frames = tmp_path / "s" / "frames.npz"
    good = frames.read_bytes()
    frames.write_bytes(good[: len(good) // 2])
    refused(words, capsys, "--wm-eval", str(frames), "cannot be read", "policy eval --env world-model")
    import numpy as np

    np.savez(frames, **{"do nothing (floor)|reach|0": np.zeros((3, 4, 6), np.float32)})
    refused(words, capsys, "--wm-eval", str(frames), "not uint8 frames (T, H, W, 3)")
    frames.write_bytes(good)
    assert main(words) == 0  # control


def test_a_missing_input_is_refused_by_name(tmp_path, capsys):
    gone = tmp_path / "no_such_eval"
    refused(_point(tmp_path, oracle=gone), capsys, "--oracle", str(gone), "does not exist", "simforcing evaluate")


def test_nothing_an_earlier_command_wrote_is_lost(tmp_path, capsys):
    """--out on another command's folder is refused and that folder kept as it was; an earlier point or curve in
    --out is replaced whole."""
    words = _point(tmp_path)
    before = (tmp_path / "o" / "eval.json").read_bytes()
    onto_input = words[:-1] + [str(tmp_path / "o")]
    refused(onto_input, capsys, "--out", str(tmp_path / "o"), "choose another folder")
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["eval.json", "eval.md"]
    assert (tmp_path / "o" / "eval.json").read_bytes() == before
    assert main(words) == 0 and main(words) == 0  # an earlier point in --out: replaced
    point = (tmp_path / "point" / "fidelity.json").read_bytes()
    curve = ["fidelity", "curve", "--points", str(tmp_path / "point")]
    refused(curve + ["--out", str(tmp_path / "point")], capsys, "--out", str(tmp_path / "point"))
    assert (tmp_path / "point" / "fidelity.json").read_bytes() == point
    assert main(curve + ["--out", str(tmp_path / "curve")]) == 0 and main(curve + ["--out", str(tmp_path / "curve")]) == 0
