"""Bad configuration: every mistake is a config error (exit 2) naming the field and what is allowed, raised before any
work starts — no run folder (or, for a check that needs the dataset, no model built and no checkpoint)."""

from __future__ import annotations

import json

import pytest
from faultkit import EPISODE_LENGTH, FAULT_ENV, pretrain_args, steps

from simforcing.cli import main

pytestmark = pytest.mark.faults

# (override, words the error must contain: the field, then what is allowed)
BAD_OVERRIDES = [
    (["--preset", "nope"], ["--preset", "'nope'", "demo, bridge, interndata_a1"]),
    (["--train.lrr=1e-3"], ["train.lrr", "unknown field 'lrr'", "lr,"]),
    (["--trian.lr=1e-3"], ["unknown field 'trian'", "train"]),
    (["--train.lr=0"], ["train.lr", "got 0.0", "positive"]),
    (["--train.lr=-1e-4"], ["train.lr", "got -0.0001", "positive"]),
    (["--train.lr=fast"], ["train.lr", "'fast'", "float"]),
    (["--conditioning.p=1.5"], ["conditioning.p", "1.5", "[0, 1]"]),
    (["--conditioning.p=-0.1"], ["conditioning.p", "-0.1", "[0, 1]"]),
    (["--conditioning.action_dropout=2"], ["conditioning.action_dropout", "[0, 1]"]),
    (["--data.frames=10"], ["data.frames", "got 10", "1 + 4·L"]),
    (["--data.frames=1"], ["data.frames", "got 1", "1 + 4·L"]),
    (["--data.height=30"], ["data.height", "got 30", "multiple of 8", "VAE spatial stride 4"]),
    (["--data.width=50"], ["data.width", "got 50", "multiple of 8"]),
    (["--train.batch_size=0"], ["train.batch_size", "got 0", ">= 1"]),
    (["--train.mixed_precision=fp8"], ["train.mixed_precision", "'fp8'", "'bf16' or 'no'"]),
    (["--model.action_conditioning=tokens"], ["model.action_conditioning", "'tokens'", "'expert'", "'frame'",
                                              "'both'"]),
    (["--model.action_conditioning=both", "--model.use_action_expert=false"],
     ["model.action_conditioning", "'both'", "model.use_action_expert false", "needs the action expert"]),
    (["--model.action_conditioning=frame", "--model.action_head=true"],
     ["model.action_conditioning", "'frame'", "'expert' with model.action_head"]),
]


def _refuse(words: list[str], capsys) -> str:
    """Run the command in-process; it must exit 2 and print a config error. Returns stderr."""
    code = main(words)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "config error" in err, err
    return err


@pytest.mark.parametrize("override, words", BAD_OVERRIDES, ids=[" ".join(o) for o, _ in BAD_OVERRIDES])
def test_bad_value_is_named_with_the_allowed_values_before_any_work(tiny, tmp_path, capsys, override, words):
    run = tmp_path / "run"
    err = _refuse(pretrain_args(run, tiny, *override), capsys)
    for w in words:
        assert w in err, f"{w!r} not in: {err}"
    assert not run.exists(), "a run folder was created for an invalid config"


def test_data_check_refuses_a_bad_config_too(tiny, capsys):
    err = _refuse(["data", "check", str(tiny[0]), "--data.height=33"], capsys)
    assert "data.height" in err and "multiple of 8" in err


def test_window_longer_than_every_episode_is_refused_before_the_model_is_built(tiny, tmp_path, capsys, monkeypatch):
    import simforcing.train as training  # stage 1 builds its model through this name

    def no_work(*a, **k):
        raise AssertionError("the model was built although the config cannot work")

    monkeypatch.setattr(training, "build_world_model", no_work)
    run = tmp_path / "run"
    err = _refuse(pretrain_args(run, tiny, "--data.frames=17"), capsys)  # 17 frames > 13-frame episodes
    assert "data.frames=17" in err and f"{EPISODE_LENGTH} frames" in err and "no episode is long enough" in err
    assert steps(run) == [] and not (run / "metrics.jsonl").exists()


def test_config_file_with_an_unknown_field_is_named(tiny, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"preset": "demo", "train": {"lr": 1e-3, "learning_rate": 5}}))
    run = tmp_path / "run"
    root, vae = tiny
    err = _refuse(["pretrain", "--config", str(bad), "--data", str(root), "--out", str(run)], capsys)
    assert "train: unknown field 'learning_rate'" in err and "TrainConfig" in err and "lr," in err
    assert not run.exists()
    bad.write_text("{not json")
    err = _refuse(["pretrain", "--config", str(bad), "--data", str(root), "--out", str(run)], capsys)
    assert str(bad) in err and "JSON" in err and not run.exists()


def test_malformed_fault_spec_is_a_config_error(tiny, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "explode@3")
    run = tmp_path / "run"
    err = _refuse(pretrain_args(run, tiny), capsys)
    assert FAULT_ENV in err and "'explode@3'" in err and "nan_loss@STEP" in err
    assert not run.exists()


TEACHER_MISMATCH = [
    ("--model.attention_head_dim=32", "model.attention_head_dim", "16"),
    ("--model.num_layers=2", "model.num_layers", "1"),
    ("--model.use_action_expert=false", "model.use_action_expert", "True"),
    ("--model.action_conditioning=frame", "model.action_conditioning", "'expert'"),
    ("--model.parameterization=velocity", "model.parameterization", "'x0'"),
    ("--data.action_dim=6", "data.action_dim", "7"),
]


@pytest.mark.parametrize("override, field, theirs", TEACHER_MISMATCH, ids=[f for _, f, _ in TEACHER_MISMATCH])
def test_teacher_architecture_mismatch_is_refused_before_any_work(tiny, ref, tmp_path, capsys, override, field,
                                                                  theirs):
    run = tmp_path / "stage2"
    root, _ = tiny
    err = _refuse(["train", "--method", "simforcing", "--teacher", str(ref), "--data", str(root), "--out", str(run),
                   "--no-progress", override], capsys)
    assert field in err and f"trained with {theirs}" in err and str(ref) in err, err
    assert not run.exists()


def test_unknown_method_and_missing_teacher(tiny, ref, tmp_path, capsys):
    run = tmp_path / "stage2"
    with pytest.raises(SystemExit) as e:  # argparse choices
        main(["train", "--method", "magic", "--teacher", str(ref), "--out", str(run)])
    assert e.value.code == 2 and "simforcing" in capsys.readouterr().err
    err = _refuse(["train", "--method", "sft", "--out", str(run)], capsys)
    assert "--teacher" in err and "stage-1 run folder" in err
    err = _refuse(["train", "--method", "sft", "--teacher", str(tmp_path / "nowhere"), "--out", str(run)], capsys)
    assert "nowhere" in err and "config.json" in err
    assert not run.exists()
