"""Run folders: one writer each, checked identity on --resume, nothing written before a run can start, changed
optimizer settings applied (never recorded and ignored), stage-2 runs kept out of stage 1, folders that are not runs
left alone, other writers' temporary folders and other runs' checkpoints never removed."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from faultkit import ckpt, copy_run, digest, losses, pretrain_args, status, steps, wait_for

from simforcing.cli import main
from simforcing.config import load_config
from simforcing.runs.checkpoint import load_checkpoint
from simforcing.runs.locking import is_locked

pytestmark = pytest.mark.faults


def files_of(run: Path, *names: str) -> dict[str, str]:
    """{name: sha256} of the run's own files (config.json, status.json, ...) that exist."""
    return {n: hashlib.sha256((run / n).read_bytes()).hexdigest() for n in names if (run / n).is_file()}


RUN_FILES = ("config.json", "status.json", "metrics.jsonl", "teacher.json")


# ----------------------------------------------------------------------------------------------------------------------
# One writer per run folder
# ----------------------------------------------------------------------------------------------------------------------


def _hold_lock(folder: Path) -> subprocess.Popen:
    """Another process that takes the folder's lock (the helper every writer uses) and keeps it."""
    code = ("import sys, time\nfrom simforcing.runs.locking import lock_folder\n"
            "lock = lock_folder(sys.argv[1], 'another writer')\nprint('locked', flush=True)\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    line = proc.stdout.readline()
    assert line.strip() == "locked", line + proc.stdout.read()
    return proc


def test_a_second_writer_is_refused_and_a_killed_writer_leaves_no_stuck_lock(ref, tiny, tmp_path, capsys):
    run = copy_run(ref, tmp_path / "run")
    before = files_of(run, *RUN_FILES)
    other = _hold_lock(run)
    try:
        code = main(pretrain_args(run, tiny, "--train.max_steps=8", resume=True))
        err = capsys.readouterr().err
        assert code == 2, err
        assert f"being written by process {other.pid}" in err and "one writer per folder" in err, err
        assert files_of(run, *RUN_FILES) == before and steps(run) == [4, 6]  # the second writer touched nothing
        code = main(pretrain_args(run, tiny, "--train.max_steps=8", resume=True))  # still held: still refused
        assert code == 2
        assert is_locked(run)
    finally:
        other.send_signal(signal.SIGKILL)  # a crash: the kernel drops the flock with the process
        other.wait(timeout=60)
    assert not is_locked(run)  # no stuck lock (the .lock file itself stays; it is not the lock)
    capsys.readouterr()
    with pytest.warns(UserWarning, match="train.max_steps"):
        assert main(pretrain_args(run, tiny, "--train.max_steps=8", resume=True)) == 0
    assert steps(run) == [6, 8] and status(run)["state"] == "finished"


@pytest.mark.slow
def test_two_pretrains_into_one_out_folder(tiny, tmp_path, capsys):
    """The issue's two terminals: the second `pretrain --out RUN` while the first runs is refused; the first ends
    normally with its own config, checkpoints and one metrics row per step."""
    from faultkit import spawn, stop_process

    run = tmp_path / "run"
    first = spawn(pretrain_args(run, tiny), "sleep@2:15", tmp_path)
    try:
        wait_for(lambda: (run / "metrics.jsonl").read_text().strip(), 240, "step 1 of the first run", first)
        code = main(pretrain_args(run, tiny, "--train.lr=5e-4"))
        err = capsys.readouterr().err
        assert code == 2 and f"being written by process {first.pid}" in err, err
        out, _ = first.communicate(timeout=300)
    finally:
        stop_process(first)
    assert first.returncode == 0, out
    assert [s for s, _ in losses(run)] == [1, 2, 3, 4, 5, 6]  # every step once
    assert json.loads((run / "config.json").read_text())["train"]["lr"] == load_config("demo").train.lr  # the first run's
    assert steps(run) == [4, 6] and status(run)["state"] == "finished"


# ----------------------------------------------------------------------------------------------------------------------
# Identity and refusals on --resume: nothing is written
# ----------------------------------------------------------------------------------------------------------------------


def test_refused_resume_leaves_config_and_status_untouched(ref, tiny, tmp_path, capsys):
    run = copy_run(ref, tmp_path / "run")
    before = files_of(run, *RUN_FILES)
    code = main(pretrain_args(run, tiny, "--model.num_layers=2", resume=True))
    err = capsys.readouterr().err
    assert code == 2, err
    assert "model.num_layers" in err and "trained with 1" in err and "asks 2" in err, err
    assert files_of(run, *RUN_FILES) == before  # config.json and status.json as they were
    assert status(run)["state"] == "finished" and steps(run) == [4, 6]
    with pytest.warns(UserWarning, match="train.max_steps"):  # the run was not damaged: it still resumes
        assert main(pretrain_args(run, tiny, "--train.max_steps=8", resume=True)) == 0


def test_resume_checks_config_json_against_the_checkpoints(ref, tiny, tmp_path, capsys):
    """A second writer rewrote RUN/config.json: the checkpoint's own config is the reference, so the resume is
    refused naming the field; for checkpoints without their own copy, meta.json's config_hash is checked."""
    from simforcing.config import Config

    run = copy_run(ref, tmp_path / "run")
    other = Config.load(run / "config.json")
    other.model.cross_attn_norm = False
    other.save(run / "config.json")  # what the second run wrote (a field the command line does not set again)
    before = files_of(run, *RUN_FILES)
    with pytest.warns(UserWarning, match=r"differs from the config step_000006 was trained with in "
                                         r"model\.cross_attn_norm"):
        code = main(pretrain_args(run, tiny, resume=True))
    err = capsys.readouterr().err
    assert code == 2 and "model.cross_attn_norm" in err and "trained with True" in err, err
    assert files_of(run, *RUN_FILES) == before

    # checkpoints without their own config (written before they stored it): config.json must hash to config_hash
    legacy = copy_run(ref, tmp_path / "legacy")
    for s in (4, 6):
        meta = json.loads((ckpt(legacy, s) / "meta.json").read_text())
        meta["files"].pop("config.json")
        (ckpt(legacy, s) / "meta.json").write_text(json.dumps(meta))
        (ckpt(legacy, s) / "config.json").unlink()
    cfg = Config.load(legacy / "config.json")
    cfg.flow.shift = 3.0  # not architecture: only the hash can tell
    cfg.save(legacy / "config.json")
    before = files_of(legacy, *RUN_FILES)
    code = main(pretrain_args(legacy, tiny, resume=True))
    err = capsys.readouterr().err
    assert code == 1 and "config_hash" in err and "config.json" in err and "not the config" in err, err
    assert files_of(legacy, *RUN_FILES) == before


def test_resume_applies_a_changed_lr_weight_decay_and_betas(ref, tiny, tmp_path, capsys, monkeypatch):
    """The values config.json records are the values the optimizer uses, from the first resumed update on."""
    from simforcing.training.optim import lr_factor

    used: list[list[dict]] = []
    original = torch.optim.AdamW.step

    def spy(self, *a, **k):
        used.append([{key: g[key] for key in ("lr", "betas", "weight_decay")} for g in self.param_groups])
        return original(self, *a, **k)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    run = copy_run(ref, tmp_path / "run")
    with pytest.warns(UserWarning, match="train.lr"):
        code = main(pretrain_args(run, tiny, "--train.max_steps=8", "--train.lr=2e-3", "--train.weight_decay=0.05",
                                  "--train.beta2=0.9", resume=True))
    out = capsys.readouterr().out
    assert code == 0
    assert "applied to the restored optimizer and scheduler" in out and f"train.lr {load_config('demo').train.lr} -> 0.002" in out, out
    assert "train.weight_decay 0.01 -> 0.05" in out and "(0.9, 0.95) -> (0.9, 0.9)" in out, out
    assert len(used) == 2  # steps 7 and 8
    for i, groups in enumerate(used):  # update i of 8 (0-based 6, 7); no warm-up at warmup_frac 0.05 of 8 steps
        want = 2e-3 * lr_factor(6 + i, 8, 0)
        assert math.isclose(groups[0]["lr"], want, rel_tol=1e-12), (i, groups[0]["lr"], want)
        assert groups[0]["betas"] == (0.9, 0.9) and groups[0]["weight_decay"] == 0.05
        assert groups[1]["weight_decay"] == 0.0 and groups[1]["lr"] == groups[0]["lr"]
    recorded = json.loads((run / "config.json").read_text())["train"]
    assert (recorded["lr"], recorded["weight_decay"], recorded["beta2"]) == (2e-3, 0.05, 0.9)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["lr"] for r in rows if r["step"] > 6] == [g[0]["lr"] for g in used]  # the log says what was used
    state = load_checkpoint(ckpt(run, 8)).train_state
    assert state["scheduler"]["base_lrs"] == [2e-3, 2e-3]  # and a later resume starts from it


def test_stage2_runs_are_refused_by_pretrain_resume_and_as_a_teacher(ref, tiny, tmp_path, capsys):
    root, _ = tiny
    stage2 = tmp_path / "stage2"
    assert main(["train", "--method", "sft", "--teacher", str(ref), "--data", str(root), "--out", str(stage2),
                 "--no-progress", "--train.max_steps=1"]) == 0
    capsys.readouterr()
    before = files_of(stage2, *RUN_FILES)
    code = main(pretrain_args(stage2, tiny, resume=True))
    err = capsys.readouterr().err
    assert code == 2 and "stage-2 run" in err and "'sft'" in err and "simforcing train --method sft" in err, err
    assert files_of(stage2, *RUN_FILES) == before and steps(stage2) == [1]

    third = tmp_path / "stage2b"
    code = main(["train", "--method", "simforcing", "--teacher", str(stage2), "--data", str(root), "--out",
                 str(third), "--no-progress", "--train.max_steps=1"])
    err = capsys.readouterr().err
    assert code == 2 and "--teacher" in err and "stage-2 run" in err and "stage-1 run" in err, err
    assert not third.exists()


# ----------------------------------------------------------------------------------------------------------------------
# Folders that are not simforcing runs
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["config.json", "metrics.jsonl", "status.json", "tb"])
@pytest.mark.parametrize("resume", [False, True], ids=["fresh", "resume"])
def test_out_folder_holding_someone_elses_files_is_refused(tiny, tmp_path, capsys, name, resume):
    run = tmp_path / "mine"
    run.mkdir()
    if name == "tb":
        (run / "tb").mkdir()
        (run / "tb" / "events.out.tfevents.1.mine").write_bytes(b"my experiment")
    else:
        (run / name).write_text('{"mine": true}\n')
    before = digest(run)
    code = main(pretrain_args(run, tiny, resume=resume))
    err = capsys.readouterr().err
    assert code == 2, err
    assert "not a simforcing run folder" in err and name in err and "choose another folder" in err, err
    assert digest(run) == before and sorted(p.name for p in run.iterdir()) == [name]


# ----------------------------------------------------------------------------------------------------------------------
# Checkpoint writes: per-writer temporary folders, pruning this run's own checkpoints only
# ----------------------------------------------------------------------------------------------------------------------


def test_a_checkpoint_write_keeps_other_writers_temp_folders_and_other_runs_checkpoints(ref, tiny, tmp_path,
                                                                                       monkeypatch):
    import simforcing.runs.checkpoint as checkpoint

    run = copy_run(ref, tmp_path / "run")
    foreign = ckpt(run, 1)  # a checkpoint another run left in this folder (older than all of ours)
    shutil.copytree(ckpt(ref, 4), foreign)
    meta = json.loads((foreign / "meta.json").read_text())
    (foreign / "meta.json").write_text(json.dumps({**meta, "step": 1, "run_id": "another-run"}))
    other_tmp = run / "checkpoints" / ".tmp-step_000099-w999999"
    original = checkpoint._write_file

    def write(path: Path, fn) -> None:  # another writer's unfinished folder appears while we write
        other_tmp.mkdir(exist_ok=True)
        original(path, fn)

    monkeypatch.setattr(checkpoint, "_write_file", write)
    with pytest.warns(UserWarning, match="train.max_steps"):
        assert main(pretrain_args(run, tiny, "--train.max_steps=10", resume=True)) == 0  # writes 8 and 10
    assert other_tmp.is_dir(), "a checkpoint write removed another writer's temporary folder"
    assert steps(run) == [1, 8, 10], "pruning removed another run's checkpoint (or kept too many of ours)"
    assert (foreign / "meta.json").exists()
