"""What the project reads back from its own folders is data (issue 45, beyond the list): a checkpoint's meta.json
whose ``files`` are not a map of sha256s, name a path leading out of the checkpoint, or whose ``step`` is not an
integer is a named CheckpointError (and the run falls back to the previous checkpoint, as for a damaged file); a run's
status.json of the wrong types reads as an unknown state, never as finished; a resumed policy keeps the start its
init.json records (another ``--init`` is refused by name). Every refusal has its control."""

from __future__ import annotations

import json

import pytest
from faultkit import ckpt, copy_run, digest, refused

from simforcing.cli import main
from simforcing.errors import CheckpointError

pytestmark = pytest.mark.faults


META_EDITS = [
    ("files a list", lambda m: {**m, "files": list(m["files"])}, "'files' must map"),
    ("files a string", lambda m: {**m, "files": "model.safetensors"}, "'files' must map"),
    ("a path out", lambda m: {**m, "files": {**m["files"], "../../config.json": "0" * 64}}, "not a file of this"),
    ("an absolute path", lambda m: {**m, "files": {**m["files"], "/etc/hostname": "0" * 64}}, "not a file of this"),
    ("step text", lambda m: {**m, "step": "six"}, "'step' must be an integer"),
]


@pytest.mark.parametrize("what,edit,needle", META_EDITS, ids=[w for w, _, _ in META_EDITS])
def test_a_malformed_meta_json_is_a_named_checkpoint_error_and_falls_back(ref, what, edit, needle, tmp_path):
    from simforcing import WorldModelPipeline
    from simforcing.runs.checkpoint import load_checkpoint

    run = copy_run(ref, tmp_path / "run")
    meta = ckpt(run, 6) / "meta.json"
    meta.write_text(json.dumps(edit(json.loads(meta.read_text()))))
    with pytest.raises(CheckpointError, match=needle):
        load_checkpoint(ckpt(run, 6))
    with pytest.warns(UserWarning, match="step_000006 is damaged"):
        pipe = WorldModelPipeline.from_run(run, device="cpu")
    assert pipe.checkpoint.step == 4  # the previous valid checkpoint
    assert load_checkpoint(ckpt(ref, 6)).step == 6  # control


def test_a_status_json_of_the_wrong_types_is_never_finished(ref, tmp_path):
    from simforcing.runs.scored import ScoredRun

    run = copy_run(ref, tmp_path / "run")
    assert ScoredRun.of(ref, ckpt(ref, 6), 6).finished  # control
    for status in ({"state": ["finished"], "total_steps": "6"}, {"state": None}, ["finished"]):
        (run / "status.json").write_text(json.dumps(status))
        rec = ScoredRun.of(run, ckpt(run, 6), 6)
        assert not rec.finished and rec.run_state == "unknown" and rec.total_steps is None


def test_a_resumed_policy_keeps_its_recorded_start(policy_run, ref, tmp_path, capsys):
    run = copy_run(policy_run, tmp_path / "policy")  # started from base (init.json)
    before = digest(run)
    words = ["policy", "train", "--setting", "action_only", "--resume", "--out", run, "--no-progress"]
    refused(words + ["--init", ref], capsys, "--init", "started from base", "init.json")
    assert digest(run) == before
    assert main([str(w) for w in words + ["--init", "base"]]) == 0  # control: the recorded start (or none given)
    assert json.loads((run / "init.json").read_text())["source"] == "base"
    capsys.readouterr()
