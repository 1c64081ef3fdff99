"""No work lost to a late error, and no information lost on the command line: outputs, devices and flags are checked
before anything expensive runs; run folders with any legal name (``=`` included) reach every command; options that
would be ignored (``--config``/``--preset`` with ``--init RUN``, ``--policy.setting`` next to ``--setting``) are named
errors, or said to be unused where the precedence is documented (``--resume``)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from faultkit import copy_run, policy_args, quiet_eval_args

from simforcing.cli import main

pytestmark = pytest.mark.faults


def _named(words: list, capsys, code: int, *needles: str) -> str:
    got = main([str(w) for w in words])
    err = capsys.readouterr().err
    assert got == code and "Traceback" not in err, f"{words}: exit {got}\n{err}"
    assert all(n in err for n in needles), f"{words}:\n{err}"
    return err


def _never(monkeypatch, module, name: str) -> None:
    """Fail the test if ``module.name`` (the expensive work) is called."""
    def fail(*a, **k):
        raise AssertionError(f"{name} ran before the error was found")
    monkeypatch.setattr(module, name, fail)


# ----------------------------------------------------------------------------------------------------------------------
# Outputs and devices, before any work
# ----------------------------------------------------------------------------------------------------------------------


def test_an_output_under_a_file_is_refused_before_any_episode_or_simulation(policy_run, tmp_path, capsys,
                                                                            monkeypatch):
    """`policy eval --out` whose parent is a file used to fail after every episode had run (hours on LIBERO);
    `data synth-policy` simulated everything, then failed with the wrong cause (File exists)."""
    import simforcing.policy.closed_loop.evaluate as pe
    import simforcing.policy.synth_data as sd

    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    _never(monkeypatch, pe, "evaluate_synthetic")
    _never(monkeypatch, sd, "_job")
    _named(quiet_eval_args(afile / "eval", str(policy_run)), capsys, 2, "--out", f"{afile} is a file")
    _named(["data", "synth-policy", afile / "ds", "--per-task", "1", "--num-val", "0", "--no-progress"], capsys, 2,
           f"{afile} is a file")
    _named(["evaluate", "--ckpt", policy_run, "--data", tmp_path, "--out", afile], capsys, 2)  # (a policy run)
    assert afile.read_text() == "not a folder"


def test_an_unavailable_device_is_a_named_error_in_every_command(ref, policy_run, tiny, tmp_path, capsys):
    root, _ = tiny
    o = tmp_path / "o"
    bad = ["foo"] + ([] if torch.cuda.is_available() else ["cuda"])
    for device in bad:
        for words in (["generate", "--ckpt", ref, "--data", root, "--out", o, "--device", device],
                      ["evaluate", "--ckpt", ref, "--data", root, "--out", o, "--device", device],
                      ["sweep", "steps", "--ckpt", ref, "--data", root, "--out", o, "--device", device],
                      quiet_eval_args(o, str(policy_run)) + ["--device", device],
                      ["bench", "--out", o / "b.json", "--tiny", "--device", device]):
            _named(words, capsys, 2, "--device", repr(device))
    if not torch.cuda.is_available():
        _named(["pretrain", "--data", root, "--out", o, "--no-progress", "--train.device=cuda",
                f"--model.vae.path={tiny[1]}"], capsys, 2, "train.device", "no such CUDA device")
    assert not o.exists()


# ----------------------------------------------------------------------------------------------------------------------
# Run folders with any legal name
# ----------------------------------------------------------------------------------------------------------------------


def test_a_run_folder_with_an_equals_sign_reaches_policy_eval(policy_run, tmp_path, capsys):
    """`sweep/lr=1e-4` could not be given to `policy eval --runs` in any spelling."""
    run = copy_run(policy_run, tmp_path / "sweep" / "lr=1e-4")
    out = tmp_path / "eval"  # the three spellings at once: a bare RUN, NAME=RUN, --run NAME RUN
    assert main(quiet_eval_args(out, str(run), f"best={run}") + ["--run", "third", str(run)]) == 0, \
        capsys.readouterr().err
    rec = json.loads((out / "eval.json").read_text())["runs"]
    assert list(rec) == ["lr=1e-4", "best", "third"] and {r["run"] for r in rec.values()} == {str(run.resolve())}
    # a spelling that names two folders is refused, naming both readings and the way out
    (tmp_path / "sweep" / "lr").mkdir()
    shutil.copytree(run, tmp_path / "1e-4")
    import os
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        _named(quiet_eval_args(tmp_path / "x", "sweep/lr=1e-4"), capsys, 2, "can be read as", "--run NAME RUN")
    finally:
        os.chdir(here)


def test_run_folders_with_an_equals_sign_reach_the_other_commands(ref, tiny, tmp_path, capsys):
    run = copy_run(ref, tmp_path / "sweep" / "lr=1e-4")
    with pytest.warns(UserWarning, match="train.max_steps"):
        assert main(["pretrain", "--resume", "--out", str(run), "--no-progress", "--train.max_steps=7"]) == 0
    assert main(["evaluate", "--ckpt", str(run), "--data", str(tiny[0]), "--out", str(tmp_path / "e=1"),
                 "--num-samples", "1", "--sample.n_real=1", "--eval.action_control=false"]) == 0
    assert json.loads((tmp_path / "e=1" / "eval.json").read_text())["checkpoint"]["step"] == 7


# ----------------------------------------------------------------------------------------------------------------------
# Options that would be ignored
# ----------------------------------------------------------------------------------------------------------------------


def test_options_that_would_be_ignored_are_named(ref, policy_run, policy_data, tiny, tmp_path, capsys):
    _, vae = tiny
    out = tmp_path / "p"
    for extra in (["--config", str(ref / "config.json")], ["--preset", "bridge"]):
        _named(["policy", "train", "--setting", "action_only", "--init", ref, "--data", policy_data, "--out", out,
                *extra], capsys, 2, f"{extra[0]}: not with --init {ref}")
    _named(policy_args(out, policy_data, vae, "--policy.setting=unconditional"), capsys, 2,
           "--policy.setting=unconditional", "--setting action_only")
    _named(policy_args(out, policy_data, vae, "--model.action_head=false"), capsys, 2, "--model.action_head=false")
    _named(["evaluate", "--ckpt", ref, "--data", tiny[0], "--out", out, "--preset", "bridge"], capsys, 2,
           "--preset: not with --ckpt")
    assert not out.exists()
    # --resume: the run's own config is the base (documented); a --config given too is said to be unused
    run = copy_run(policy_run, tmp_path / "run")
    assert main(["policy", "train", "--setting", "action_only", "--resume", "--out", str(run), "--no-progress",
                 "--config", str(ref / "config.json")]) == 0
    err = capsys.readouterr().err
    assert f"--resume continues {run} with its own config" in err and "not used" in err, err
