"""`data synth` / `data synth-policy` options that cannot act as asked are refused by name before anything is simulated
or written (issue 56: `--pauses 2 --length 2` ended in a traceback; `--pause-splits val` with no validation episode was
accepted without a word), and so are the full-scene pairing's (issue 54) and the failing operator's (issue 53) — and a
world model of a full-scene pairing sampled with a first frame masked to the arm. Every refusal has its control: the
same command with the offending option corrected works and records what it was given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simforcing.cli import main

from faultkit import pretrain_args, refused

pytestmark = pytest.mark.faults

TINY_SYNTH = ["--num-train", "1", "--num-val", "0", "--num-sim-pool", "0", "--length", "3", "--height", "16",
              "--width", "24", "--workers", "1", "--no-finalize", "--no-progress"]


def _synth(out: Path, *extra) -> list:
    return ["data", "synth", out, *TINY_SYNTH, *extra]


SYNTH_REFUSALS = [  # (what, extra words, what the refusal names)
    ("a pause in 2 frames", ["--pauses", "2", "--length", "2"], "--pauses 2 --length 2"),
    ("pauses in an empty split", ["--pauses", "1", "--pause-splits", "val"], "--pause-splits: got val"),
    ("noise in an empty split", ["--action-noise", "0.02", "--action-noise-splits", "val"],
     "--action-noise-splits: got val, but the dataset has no val episode (--num-val is 0)"),
    ("pause splits without pauses", ["--pause-splits", "train"], "--pauses is 0"),
    ("noise splits without noise", ["--action-noise-splits", "train"], "--action-noise is 0"),
    ("noise with no default split", ["--action-noise", "0.02"], "--action-noise 0.02: its default splits (sim_pool)"),
    ("failures out of range", ["--failures", "1.5"], "--failures: got 1.5"),
    ("failures in an empty split", ["--failures", "0.5", "--failure-splits", "sim_pool"],
     "--failure-splits: got sim_pool, but the dataset has no sim_pool episode"),
    ("failure splits without failures", ["--failure-splits", "train"], "--failures is 0"),
    ("a physics gap for the arm", ["--physics-gap", "0.5"], "--physics-gap: got 0.5, but the arm pairing"),
    ("a physics gap too wide", ["--pairing", "scene", "--physics-gap", "3"], "--physics-gap: got 3.0"),
    ("a negative physics gap", ["--pairing", "scene", "--physics-gap", "-0.1"], "--physics-gap: got -0.1"),
    ("layouts without layout episodes", ["--layouts", "3"], "--layouts / --jitter"),
    ("jitter without layout episodes", ["--jitter", "0.01"], "--layouts / --jitter"),
]


@pytest.mark.parametrize("what,extra,needle", SYNTH_REFUSALS, ids=[w for w, _, _ in SYNTH_REFUSALS])
def test_data_synth_names_an_option_that_cannot_act(what, extra, needle, tmp_path, capsys):
    out = tmp_path / "d"
    refused(_synth(out, *extra), capsys, "config error", needle)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_quick_with_counts_and_an_unknown_pairing_are_named(tmp_path, capsys):
    out = tmp_path / "d"
    refused(["data", "synth", out, "--quick", "--num-train", "5"], capsys, "--quick", "--num-train")
    with pytest.raises(SystemExit) as e:  # argparse's own refusal of a choice it does not know
        main(["data", "synth", str(out), "--pairing", "cube"])
    assert e.value.code == 2 and "invalid choice: 'cube'" in capsys.readouterr().err
    assert not out.exists()


def test_data_synth_controls_take_the_options_where_they_can_act(tmp_path, capsys):
    """The refused options, corrected: pauses in 3 frames, splits that hold episodes, the full-scene pairing with its
    gap, failures; the dataset records each."""
    from simforcing.data.format import read_info, read_twin_record

    out = tmp_path / "d"
    assert main([str(w) for w in _synth(out, "--pauses", "2", "--pause-splits", "train", "--action-noise", "0.02",
                                        "--action-noise-splits", "train", "--failures", "1", "--pairing", "scene",
                                        "--physics-gap", "0.5")]) == 0, capsys.readouterr().err
    synth = read_info(out)["synth"]
    assert synth["pauses"]["splits"] == ["train"] and synth["action_noise"]["splits"] == ["train"]
    assert synth["failures"]["splits"] == ["train"] and synth["physics_gap"]["scale"] == 0.5
    assert read_twin_record(out, "ep_00000")["scene"]["physics_gap"] == 0.5
    line = json.loads((out / "meta" / "episodes.jsonl").read_text().splitlines()[0])
    assert line["failure"].split("/")[0] in ("reach", "push", "grasp")
    assert "scene pairing" in capsys.readouterr().out
    assert main([str(w) for w in _synth(tmp_path / "q", "--layout-train", "1", "--layouts", "3")]) == 0
    assert read_info(tmp_path / "q")["synth"]["layouts"] == 3


SYNTH_POLICY_REFUSALS = [
    (["--per-task", "0"], "--per-task: got 0"),
    (["--num-val", "-1"], "--num-val: got -1"),
    (["--max-steps", "1"], "--max-steps: got 1"),
    (["--layouts", "-1"], "--layouts: got -1"),
    (["--layouts", "2", "--jitter", "0.5"], "--jitter: got 0.5"),
    (["--jitter", "0.01"], "--jitter: got 0.01, but without --layouts K"),
]


@pytest.mark.parametrize("extra,needle", SYNTH_POLICY_REFUSALS, ids=[n for _, n in SYNTH_POLICY_REFUSALS])
def test_data_synth_policy_names_an_option_that_cannot_act(extra, needle, tmp_path, capsys):
    out = tmp_path / "p"
    refused(["data", "synth-policy", out, "--no-progress", *extra], capsys, "config error", needle)
    assert not out.exists()


def test_data_synth_policy_control(tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["data", "synth-policy", str(out), "--per-task", "1", "--num-val", "0", "--layouts", "2", "--jitter",
                 "0.01", "--height", "16", "--width", "24", "--no-progress"]) == 0, capsys.readouterr().err
    assert json.loads((out / "meta" / "info.json").read_text())["synth"]["jitter"] == 0.01


# ----------------------------------------------------------------------------------------------------------------------
# A world model sampled on a full-scene pairing: its simulation chain cannot start from the arm alone
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scene_data(tmp_path_factory) -> Path:
    from simforcing.data.synthetic.generate import generate_dataset
    from simforcing.prep.text import finalize_dataset

    return generate_dataset(tmp_path_factory.mktemp("scene") / "data", num_train=1, num_val=1, num_sim_pool=0,
                            length=9, height=32, width=48, seed=3, progress=False, pairing="scene",
                            finish=finalize_dataset)


@pytest.fixture(scope="module")
def scene_run(tiny, scene_data, tmp_path_factory) -> Path:
    """A 2-step stage-1 run trained on the full-scene data (a run is sampled on data of its own pairing: round 9)."""
    run = tmp_path_factory.mktemp("scene_run") / "s1"
    assert main(pretrain_args(run, (scene_data, tiny[1]), "--train.max_steps=2")) == 0
    return run


def test_a_full_scene_pairing_refuses_a_first_frame_masked_to_the_arm(scene_run, scene_data, tmp_path, capsys):
    out = tmp_path / "eval"
    words = ["evaluate", "--ckpt", scene_run, "--data", scene_data, "--split", "val", "--num-samples", "1", "--out", out,
             "--device", "cpu", "--sample.n_real=2"]
    refused(words, capsys, "config error", "sample.mask_mode=mask-file", "full-scene pairing",
            "--sample.mask_mode=paired-sim")
    refused(words + ["--sample.mask_mode=sam3"], capsys, "sample.mask_mode=sam3")
    refused(words + ["--data.pairing=cube"], capsys, "data.pairing")
    assert not out.exists()
    assert main([str(w) for w in words + ["--sample.mask_mode=paired-sim"]]) == 0, capsys.readouterr().err
    assert (out / "eval.json").exists()  # control: the simulator's own first frame
