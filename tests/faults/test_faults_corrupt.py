"""Corrupt files: damaged checkpoints (named errors, fall-back on --resume), failed checkpoint writes (disk full), and
byte-level damage to dataset files (the named errors of ``data check`` and of training)."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from faultkit import (ckpt, copy_run, digest, losses, pretrain_args, same_weights, status, steps, tmp_dirs)

from simforcing.cli import main
from simforcing.runs.checkpoint import CheckpointError, find_resumable, load_checkpoint
from simforcing.runs.folder import load_model_from_run

pytestmark = pytest.mark.faults


def truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def flip(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x40
    p.write_bytes(bytes(data))


def delete(p: Path) -> None:
    p.unlink()


DAMAGE = [("model.safetensors", truncate), ("model.safetensors", flip), ("model.safetensors", delete),
          ("train_state.pt", truncate), ("train_state.pt", flip), ("meta.json", truncate), ("meta.json", delete)]


# ----------------------------------------------------------------------------------------------------------------------
# Damaged checkpoints
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, damage", DAMAGE, ids=[f"{n}-{d.__name__}" for n, d in DAMAGE])
def test_damaged_checkpoint_is_named_and_readers_fall_back(ref, tmp_path, name, damage):
    run = copy_run(ref, tmp_path / "run")
    damage(ckpt(run, 6) / name)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(ckpt(run, 6))
    assert e.value.path.endswith(name) and name in str(e.value) and "step_000006" in str(e.value)
    with pytest.raises(CheckpointError, match=name):
        load_model_from_run(run, step=6)  # an explicit step never falls back
    with pytest.warns(UserWarning, match=rf"step_000006 is damaged .*{name}"):
        _, _, meta = load_model_from_run(run)  # the sampler's default: the newest valid checkpoint
    assert meta["step"] == 4
    with pytest.warns(UserWarning, match="falling back"):
        assert find_resumable(run).step == 4


def test_resume_falls_back_past_a_truncated_train_state(ref, tiny, tmp_path, capsys):
    run = copy_run(ref, tmp_path / "run")
    truncate(ckpt(run, 6) / "train_state.pt")
    with pytest.warns(UserWarning, match=r"step_000006 is damaged .*train_state\.pt"):
        code = main(pretrain_args(run, tiny, resume=True))
    assert code == 0, capsys.readouterr().err
    assert "from step_000004 (step 4)" in capsys.readouterr().out
    assert losses(run) == losses(ref)  # steps 5-6 recomputed from step 4 give the same numbers
    load_checkpoint(ckpt(run, 6))  # the damaged folder was replaced by a verified one
    assert same_weights(ckpt(run, 6), ckpt(ref, 6)) and status(run)["state"] == "finished"


def test_resume_with_every_checkpoint_damaged_fails_with_a_named_error(ref, tiny, tmp_path, capsys):
    run = copy_run(ref, tmp_path / "run")
    flip(ckpt(run, 4) / "model.safetensors")
    truncate(ckpt(run, 6) / "meta.json")
    with pytest.warns(UserWarning) as record:
        code = main(pretrain_args(run, tiny, resume=True))
    err = capsys.readouterr().err
    assert code == 1 and "every checkpoint is damaged" in err and "checkpoints" in err, err
    texts = " ".join(str(w.message) for w in record)
    assert "step_000004" in texts and "model.safetensors" in texts and "step_000006" in texts and "meta.json" in texts
    st = status(run)
    assert st["state"] == "failed" and "every checkpoint is damaged" in st["reason"]
    assert steps(run) == [4, 6]  # nothing deleted or rewritten


def test_stage2_starts_from_the_previous_teacher_checkpoint_when_the_newest_is_damaged(ref, tiny, tmp_path, capsys):
    teacher = copy_run(ref, tmp_path / "teacher")
    flip(ckpt(teacher, 6) / "model.safetensors")
    run = tmp_path / "stage2"
    with pytest.warns(UserWarning, match=r"step_000006 is damaged .*model\.safetensors"):
        code = main(["train", "--method", "sft", "--teacher", str(teacher), "--data", str(tiny[0]), "--out",
                     str(run), "--no-progress", "--train.max_steps=1"])
    assert code == 0, capsys.readouterr().err
    rec = json.loads((run / "teacher.json").read_text())
    assert rec["step"] == 4 and Path(rec["checkpoint"]).name == "step_000004"


# ----------------------------------------------------------------------------------------------------------------------
# A failed checkpoint write (disk full)
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("victim", ["model.safetensors", "meta.json"])
def test_disk_full_during_a_checkpoint_write_keeps_the_previous_checkpoints(ref, tiny, tmp_path, monkeypatch, capsys,
                                                                           victim):
    import simforcing.runs.checkpoint as checkpoint

    run = copy_run(ref, tmp_path / "run")
    before = {s: digest(ckpt(run, s)) for s in (4, 6)}
    original = checkpoint._write_file

    def write(path: Path, fn) -> None:
        if path.parent.name.startswith(".tmp-step_000008") and path.name == victim:
            path.write_bytes(b"\0" * 64)  # a partial file, then the device is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        original(path, fn)

    monkeypatch.setattr(checkpoint, "_write_file", write)
    with pytest.warns(UserWarning, match="changed config fields: train.max_steps"):
        code = main(pretrain_args(run, tiny, "--train.max_steps=8", resume=True))  # steps 7, 8; the write of 8 fails
    err = capsys.readouterr().err
    assert code == 1, err
    assert "step_000008" in err and "No space left on device" in err and "step_000006 is untouched" in err, err
    st = status(run)
    assert st["state"] == "failed" and "No space left" in st["reason"]
    assert steps(run) == [4, 6] and tmp_dirs(run) == []
    assert {s: digest(ckpt(run, s)) for s in (4, 6)} == before
    load_checkpoint(ckpt(run, 6))


# ----------------------------------------------------------------------------------------------------------------------
# Damaged dataset files
# ----------------------------------------------------------------------------------------------------------------------


def _lowdim(root: Path) -> Path:
    return root / "episodes/train_000/lowdim.npz"


def _drop_actions(root: Path) -> None:
    with np.load(_lowdim(root)) as z:
        states = z["states"]
    np.savez_compressed(_lowdim(root), states=states)


def _stats(root: Path, text: str | bytes) -> None:
    p = root / "meta/stats.json"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())


def _stats_nan(root: Path) -> None:
    d = json.loads((root / "meta/stats.json").read_text())
    d["state"]["max"][2] = float("nan")
    _stats(root, json.dumps(d))


DATA_DAMAGE = {  # name -> (damage, kind, file named, episode named or None)
    "video_bytes_truncated": (lambda r: truncate(r / "episodes/train_000/sim.mp4"), "unreadable_video", "sim.mp4",
                              "train_000"),
    "real_video_empty": (lambda r: (r / "episodes/train_000/real.mp4").write_bytes(b""), "unreadable_video",
                         "real.mp4", "train_000"),
    "npz_bytes_truncated": (lambda r: truncate(_lowdim(r)), "unreadable_file", "lowdim.npz", "train_000"),
    "npz_missing_column": (_drop_actions, "missing_field", "lowdim.npz", "train_000"),
    "stats_binary_garbage": (lambda r: _stats(r, b"\xff\xfe\x00garbage"), "unreadable_meta", "stats.json", None),
    "stats_truncated_json": (lambda r: _stats(r, '{"action": {"min": [0,'), "unreadable_meta", "stats.json", None),
    "stats_wrong_type": (lambda r: _stats(r, '{"action": "min", "state": []}'), "bad_stats", "stats.json", None),
    "stats_nan": (_stats_nan, "bad_stats", "stats.json", None),
}


@pytest.fixture
def data_copy(tiny, tmp_path) -> Path:
    return Path(shutil.copytree(tiny[0], tmp_path / "ds"))


@pytest.mark.parametrize("name", list(DATA_DAMAGE))
def test_damaged_data_file_gets_the_named_error_of_data_check(data_copy, capsys, name):
    damage, kind, file, episode = DATA_DAMAGE[name]
    damage(data_copy)
    assert main(["data", "check", str(data_copy)]) == 1
    err = capsys.readouterr().err
    assert f"[{kind}]" in err and file in err and (episode is None or f"episode {episode}" in err), err
    if episode is None:  # dataset-level damage is never skipped
        assert main(["data", "check", str(data_copy), "--skip-bad"]) == 1
    else:
        assert main(["data", "check", str(data_copy), "--skip-bad"]) == 0
        assert "1 bad episodes skipped" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["video_bytes_truncated", "stats_binary_garbage"])
def test_training_on_damaged_data_fails_with_the_named_error(data_copy, tiny, tmp_path, capsys, name):
    damage, kind, file, episode = DATA_DAMAGE[name]
    damage(data_copy)
    run = tmp_path / "run"
    code = main(pretrain_args(run, (data_copy, tiny[1])))
    err = capsys.readouterr().err
    assert code == 1 and file in err and (episode is None or f"episode {episode}" in err), err
    assert status(run)["state"] == "failed" and file in status(run)["reason"]
    assert steps(run) == []
