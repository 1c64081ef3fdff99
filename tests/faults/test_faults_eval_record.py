"""Every evaluation can be traced to what it scored: eval.json records the run folder, the checkpoint and its step,
and whether the run was finished; a run that was not (still training, stopped, killed) is said in the table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from faultkit import copy_run, quiet_eval_args

from simforcing.cli import main

pytestmark = pytest.mark.faults


def _still_training(run: Path) -> subprocess.Popen:
    """Make ``run`` look like a run being trained: status.json "running" and its lock held by another process."""
    st = json.loads((run / "status.json").read_text())
    (run / "status.json").write_text(json.dumps({**st, "state": "running", "total_steps": 10}))
    code = ("import sys, time\nfrom simforcing.runs.locking import lock_folder\n"
            "lock = lock_folder(sys.argv[1], 'simforcing policy train')\nprint('locked', flush=True)\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_policy_eval_records_what_it_scored(policy_run, tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(quiet_eval_args(out, f"p={policy_run}")) == 0
    rec = json.loads((out / "eval.json").read_text())["runs"]["p"]
    assert rec["run"] == str(policy_run.resolve()) and rec["step"] == 2 and rec["finished"] is True
    assert rec["checkpoint"] == str(policy_run / "checkpoints" / "step_000002") and rec["run_state"] == "finished"
    assert "unfinished" not in (out / "eval.md").read_text()


def test_a_policy_run_still_training_is_marked_in_the_table(policy_run, tmp_path, capsys):
    run = copy_run(policy_run, tmp_path / "training")
    holder = _still_training(run)
    try:
        out = tmp_path / "eval"
        assert main(quiet_eval_args(out, f"p={run}")) == 0
    finally:
        holder.kill()
        holder.wait()
    res = json.loads((out / "eval.json").read_text())
    assert res["runs"]["p"]["finished"] is False and res["runs"]["p"]["run_state"] == "running"
    md = (out / "eval.md").read_text()
    assert "| p (unfinished run, step 2) |" in md, md
    assert "Note: p: the run was not finished (running) — scored its checkpoint at step 2 of 10" in md, md
    assert "unfinished run, step 2" in capsys.readouterr().out  # the printed table says it too


def test_a_world_model_evaluation_records_its_checkpoint_and_an_unfinished_run(ref, tiny, tmp_path, capsys):
    run = copy_run(ref, tmp_path / "run")
    st = json.loads((run / "status.json").read_text())
    (run / "status.json").write_text(json.dumps({**st, "state": "stopped"}))
    out = tmp_path / "eval"
    assert main(["evaluate", "--ckpt", str(run), "--data", str(tiny[0]), "--out", str(out), "--num-samples", "1",
                 "--sample.n_real=1", "--eval.action_control=false"]) == 0
    rec = json.loads((out / "eval.json").read_text())["checkpoint"]
    assert rec["step"] == 6 and rec["checkpoint"].endswith("step_000006") and rec["finished"] is False
    assert rec["run_state"] == "stopped"
    md = (out / "eval.md").read_text()
    assert "(unfinished run)" in md.splitlines()[0] and "the run was not finished (stopped)" in md, md
