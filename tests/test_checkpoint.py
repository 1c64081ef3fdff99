"""Checkpoints: exact round trip, weights_only train state, sha256 verification, fallback, atomic writes, pruning."""

from __future__ import annotations

import errno
import json
import random

import numpy as np
import pytest
import torch

from simforcing.config import load_config
from simforcing.runs import checkpoint as ck
from simforcing.runs import folder as runfolder


def _setup(steps: int = 2):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0 / (i + 1))
    for _ in range(steps):
        model(torch.randn(5, 3)).pow(2).mean().backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    return model, opt, sched


def _save(run, step, model, opt, sched, cfg=None, **kw):
    cfg = cfg or load_config("demo")
    return ck.save_checkpoint(run, step, model, opt, sched, ck.capture_rng(), {"epoch": 1, "position": step},
                              {"action": {"min": [0.0], "max": [1.0]}}, cfg, **kw)


def test_round_trip_is_exact_and_train_state_loads_weights_only(tmp_path):
    model, opt, sched = _setup()
    path = _save(tmp_path, 7, model, opt, sched)
    assert path == tmp_path / "checkpoints" / "step_000007"
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "meta.json", "model.safetensors", "train_state.pt"]
    torch.load(path / "train_state.pt", weights_only=True)  # no pickled objects
    got = ck.load_checkpoint(path)
    assert got.step == 7 and got.meta["epoch"] == 1 and got.meta["stats"]["action"]["max"] == [1.0]
    assert got.meta["config_hash"] == ck.config_hash(load_config("demo"))
    assert set(got.meta["files"]) == {"config.json", "model.safetensors", "train_state.pt"}
    assert ck.config_hash(ck.checkpoint_config(path)) == got.meta["config_hash"]  # the stored config is the hashed one
    for k, v in model.state_dict().items():
        assert torch.equal(got.model_state[k], v)
    model2, opt2, sched2 = _setup(0)
    model2.load_state_dict(got.model_state)
    opt2.load_state_dict(got.train_state["optimizer"])
    sched2.load_state_dict(got.train_state["scheduler"])
    assert got.train_state["data"] == {"epoch": 1, "position": 7}
    # one more identical update on both gives identical weights
    x = torch.randn(5, 3)
    for m, o in ((model, opt), (model2, opt2)):
        m(x).pow(2).mean().backward()
        o.step()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters()))
    assert sched2.get_last_lr() == sched.get_last_lr()


def test_rng_states_round_trip():
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    state = ck.capture_rng()
    a = (torch.rand(3), np.random.rand(3), random.random())
    torch.manual_seed(9), np.random.seed(9), random.seed(9)
    ck.restore_rng(state)
    b = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]


@pytest.mark.parametrize("damage", ["truncate", "bitflip", "delete"])
def test_damaged_file_is_named_and_resume_falls_back(tmp_path, damage):
    model, opt, sched = _setup()
    _save(tmp_path, 1, model, opt, sched)
    newest = _save(tmp_path, 2, model, opt, sched)
    target = newest / "train_state.pt"
    data = target.read_bytes()
    if damage == "truncate":
        target.write_bytes(data[: len(data) // 2])
    elif damage == "bitflip":
        target.write_bytes(data[:10] + bytes([data[10] ^ 1]) + data[11:])
    else:
        target.unlink()
    with pytest.raises(ck.CheckpointError, match="train_state.pt") as info:
        ck.load_checkpoint(newest)
    assert info.value.path == str(target)
    with pytest.warns(UserWarning, match="step_000002 is damaged"):
        got = ck.find_resumable(tmp_path)
    assert got.step == 1


def test_missing_meta_is_an_error_and_no_valid_checkpoint_gives_none(tmp_path):
    model, opt, sched = _setup()
    path = _save(tmp_path, 3, model, opt, sched)
    (path / "meta.json").unlink()
    with pytest.raises(ck.CheckpointError, match="meta.json is missing"):
        ck.load_checkpoint(path)
    with pytest.warns(UserWarning):
        assert ck.find_resumable(tmp_path) is None


def test_failed_write_raises_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    model, opt, sched = _setup()
    good = _save(tmp_path, 1, model, opt, sched)
    real_write = ck._write_file

    def disk_full(path, write):
        if path.name == "train_state.pt":
            path.write_bytes(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(path, write)

    monkeypatch.setattr(ck, "_write_file", disk_full)
    with pytest.raises(ck.CheckpointError, match="No space left") as info:
        _save(tmp_path, 2, model, opt, sched)
    assert "step_000001 is untouched" in str(info.value)
    assert [s for s, _ in ck.list_checkpoints(tmp_path)] == [1]
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))
    ck.load_checkpoint(good)
    monkeypatch.undo()
    assert ck.find_resumable(tmp_path).step == 1


def test_keep_last_prunes_and_temporary_folders_are_ignored(tmp_path):
    model, opt, sched = _setup()
    cfg = load_config("demo", ["--train.keep_last=2"])
    for step in (1, 2, 3):
        _save(tmp_path, step, model, opt, sched, cfg)
    (tmp_path / "checkpoints" / ".tmp-step_000009-w1").mkdir()  # another writer's, unfinished
    assert [s for s, _ in ck.list_checkpoints(tmp_path)] == [2, 3]
    assert ck.latest_checkpoint(tmp_path).name == "step_000003"
    _save(tmp_path, 4, model, opt, sched, cfg)  # never removes another writer's temporary folder ...
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == [".tmp-step_000009-w1", "step_000003", "step_000004"]
    assert ck.remove_stale_temp(tmp_path) == [".tmp-step_000009-w1"]  # ... the lock holder removes stale ones
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000003", "step_000004"]


def test_on_partial_runs_before_the_folder_is_final(tmp_path):
    model, opt, sched = _setup()
    seen = {}

    def probe():
        tmp = ck.temp_dir(tmp_path / "checkpoints" / "step_000005")
        seen["weights"] = (tmp / "model.safetensors").exists()
        seen["final"] = (tmp_path / "checkpoints" / "step_000005").exists()

    _save(tmp_path, 5, model, opt, sched, on_partial=probe)
    assert seen == {"weights": True, "final": False}
    meta = json.loads((tmp_path / "checkpoints/step_000005/meta.json").read_text())
    assert meta["files"]["model.safetensors"] == ck.sha256_file(tmp_path / "checkpoints/step_000005/model.safetensors")


def test_load_model_from_run_errors_name_what_is_missing(tmp_path):
    with pytest.raises(ck.CheckpointError, match="config.json is missing"):
        runfolder.load_model_from_run(tmp_path)
    load_config("demo").save(tmp_path / "config.json")
    with pytest.raises(ck.CheckpointError, match="no valid checkpoint"):
        runfolder.load_model_from_run(tmp_path)
    with pytest.raises(ck.CheckpointError, match="no checkpoint for step 3"):
        runfolder.load_model_from_run(tmp_path, step=3)
