"""Run kinds: every run folder says what it is (stage-1 world model, stage-2 world model, policy), every command that
takes a run checks the kind it needs before any work and refuses the others by name with a command that would work;
and every run is opened from the config its checkpoint was trained with (also the policy's copies)."""

from __future__ import annotations

import json
import re
import shlex
import warnings

import pytest
from faultkit import copy_run, quiet_eval_args, status, steps, refused

from simforcing.cli import main

pytestmark = pytest.mark.faults


def _suggested(err: str) -> list[str]:
    """The `simforcing ...` commands a refusal suggests (backticked), as argument lists."""
    return [shlex.split(c)[1:] for c in re.findall(r"`(simforcing [^`]+)`", err)]


def test_every_run_folder_records_its_kind(ref, stage2, policy_run):
    kinds = {p: json.loads((p / "run.json").read_text())["kind"] for p in (ref, stage2, policy_run)}
    assert kinds == {ref: "stage1", stage2: "stage2", policy_run: "policy"}


def test_world_model_commands_refuse_a_policy_run_by_name(policy_run, ref, tiny, tmp_path, capsys):
    root, _ = tiny
    o = tmp_path / "out"
    for words in (["evaluate", "--ckpt", policy_run, "--data", root, "--out", o],
                  ["generate", "--ckpt", policy_run, "--data", root, "--out", o],
                  ["sweep", "steps", "--ckpt", policy_run, "--data", root, "--out", o],
                  ["sweep", "cfg", "--ckpts", ref, policy_run, "--data", root, "--out", o]):
        err = refused(words, capsys, str(policy_run), "is a policy run", "policy.setting 'action_only'",
                       "simforcing policy eval --runs")
    assert not o.exists()
    err = refused(["train", "--method", "sft", "--teacher", policy_run, "--data", root, "--out", o, "--no-progress"],
                   capsys, "--teacher", "is a policy run", "stage 2 starts from a stage-1 run")
    assert "stage-2 run" not in err and not o.exists()


def test_pretrain_resume_of_a_policy_run_names_it_and_the_suggestion_works(policy_run, tiny, tmp_path, capsys):
    """The issue's case: called "a stage-2 run" and sent to `train --resume`, which refused it in turn."""
    run = copy_run(policy_run, tmp_path / "policy")
    before = (run / "config.json").read_text()
    err = refused(["pretrain", "--resume", "--out", run, "--no-progress"], capsys, "is a policy run",
                   "simforcing pretrain --resume cannot continue it")
    assert "stage-2" not in err and (run / "config.json").read_text() == before
    err = refused(["train", "--method", "sft", "--resume", "--out", run, "--no-progress"], capsys, "is a policy run")
    [suggestion] = _suggested(err)
    assert suggestion[:2] == ["policy", "train"] and "--resume" in suggestion
    with pytest.warns(UserWarning, match="train.max_steps"):  # the command it names does continue it
        assert main(suggestion + ["--no-progress", "--train.max_steps=3"]) == 0
    assert steps(run)[-1] == 3 and status(run)["state"] == "finished"


def test_policy_commands_refuse_world_model_runs_by_name(ref, stage2, policy_data, tiny, tmp_path, capsys):
    refused(quiet_eval_args(tmp_path / "e", str(ref)), capsys, "is a stage-1 run", "`policy eval` scores policy runs",
             f"simforcing evaluate --ckpt {ref}")
    run = copy_run(ref, tmp_path / "stage1")
    err = refused(["policy", "train", "--setting", "action_only", "--resume", "--out", run, "--data", policy_data,
                    "--no-progress"], capsys, "is a stage-1 run", "simforcing policy train --resume cannot continue")
    assert _suggested(err) == [["pretrain", "--resume", "--out", str(run)]]
    err = refused(["train", "--method", "sft", "--resume", "--out", run, "--no-progress"], capsys,
                   "is a stage-1 run", "simforcing train --resume cannot continue it")
    assert _suggested(err) == [["pretrain", "--resume", "--out", str(run)]]
    err = refused(["train", "--method", "simforcing", "--teacher", stage2, "--out", tmp_path / "x", "--no-progress"],
                   capsys, "is a stage-2 run", "stage 2 starts from a stage-1 run")
    assert f"--teacher {ref}" in err  # the stage-1 run it started from


def test_runs_from_before_kinds_are_recognised(policy_run, ref, tiny, tmp_path, capsys):
    """run.json without "kind" (or no run.json at all): the kind comes from the run's stage or config."""
    old_policy = copy_run(policy_run, tmp_path / "old_policy")
    rec = json.loads((old_policy / "run.json").read_text())
    rec.pop("kind")
    (old_policy / "run.json").write_text(json.dumps(rec))
    old_wm = copy_run(ref, tmp_path / "old_wm")
    (old_wm / "run.json").unlink()
    refused(["evaluate", "--ckpt", old_policy, "--data", tiny[0], "--out", tmp_path / "o"], capsys,
             "is a policy run")
    refused(quiet_eval_args(tmp_path / "e", str(old_wm)), capsys, "is a stage-1 run")
    # a resume writes the kind into the older record
    with pytest.warns(UserWarning, match="train.max_steps"):
        assert main(["pretrain", "--resume", "--out", str(old_wm), "--no-progress", "--train.max_steps=7"]) == 0
    assert json.loads((old_wm / "run.json").read_text())["kind"] == "stage1"


def test_policy_runs_are_opened_with_their_checkpoints_own_config(policy_run, ref, policy_data, tiny, tmp_path,
                                                                   capsys):
    """RUN/config.json rewritten (another architecture and setting, as a resume with other fields or a hand edit
    leaves it): inference and `policy train --init RUN` still build the network the checkpoint was trained with
    (they used to read RUN/config.json and failed to load the weights)."""
    from simforcing.policy.infer import PolicyRunner
    from simforcing.policy.init import run_state

    run = copy_run(policy_run, tmp_path / "policy")
    cfg = json.loads((run / "config.json").read_text())
    cfg["model"]["ffn_dim"], cfg["policy"]["setting"] = 48, "unconditional"
    (run / "config.json").write_text(json.dumps(cfg))
    with pytest.warns(UserWarning, match="differs from the config"):
        runner = PolicyRunner.load(run)
    assert runner.cfg.model.ffn_dim == 64 and runner.cfg.policy.setting == "action_only"
    assert runner.scored.step == 2 and runner.scored.checkpoint.endswith("step_000002")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_cfg, state, _ = run_state(run)
    assert run_cfg.model.ffn_dim == 64 and state["layers.0.video.ffn.net.0.proj.weight"].shape[0] == 64
    wm = copy_run(ref, tmp_path / "wm")
    cfg = json.loads((wm / "config.json").read_text())
    cfg["model"]["ffn_dim"] = 48
    (wm / "config.json").write_text(json.dumps(cfg))
    assert main(["policy", "train", "--setting", "action_only", "--init", str(wm), "--data", str(policy_data),
                 "--out", str(tmp_path / "p"), "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["ffn_dim"] == 64
