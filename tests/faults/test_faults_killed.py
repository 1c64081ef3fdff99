"""Killed: ``simforcing pretrain`` SIGKILLed twice — in the middle of a step, then in the middle of a checkpoint
write — and resumed each time. Nothing half-written is ever taken for a checkpoint, the previous checkpoint stays
byte-identical and loadable, and the final run logs exactly the losses of an uninterrupted one with bit-identical
weights.
"""

from __future__ import annotations

import signal

import pytest
from faultkit import (checkpointed, ckpt, digest, losses, pretrain_args, same_weights, spawn, status, steps,
                      stop_process, tmp_dirs, wait_for, wait_until_holding)

from simforcing.cli import main
from simforcing.runs.checkpoint import CheckpointError, load_checkpoint, verify_checkpoint
from simforcing.runs.folder import load_model_from_run

pytestmark = [pytest.mark.faults, pytest.mark.slow]

TIMEOUT = 240  # seconds to reach a step in a fresh process (imports are slow on a loaded 2-core machine)


def _sigkill(proc) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL


def test_sigkill_mid_step_and_mid_checkpoint_write_then_resume_matches_an_uninterrupted_run(tiny, ref, tmp_path):
    run = tmp_path / "run"

    # 1. killed in the middle of step 3 (held there after backward, before the optimizer update)
    proc = spawn(pretrain_args(run, tiny), "sleep@3:600", tmp_path)
    try:
        wait_for(checkpointed(run, 2), TIMEOUT, "checkpoint 2", proc)
        wait_until_holding(proc, TIMEOUT)
        _sigkill(proc)
    finally:
        stop_process(proc)
    assert steps(run) == [2] and tmp_dirs(run) == []
    load_checkpoint(ckpt(run, 2))
    assert losses(run) == losses(ref)[:2]
    first = digest(ckpt(run, 2))

    # 2. resumed, then killed while checkpoint 4 is being written (weights on disk, folder not finalised)
    proc = spawn(pretrain_args(run, tiny, resume=True), "ckpt_sleep@4:600", tmp_path)
    partial = run / "checkpoints" / f".tmp-step_000004-w{proc.pid}"  # the writer's own temporary folder
    writing = (partial / "model.safetensors", ckpt(run, 4) / "model.safetensors")  # wherever the writer puts it
    try:
        wait_for(lambda: any(p.exists() for p in writing), TIMEOUT, "the write of checkpoint 4", proc)
        wait_until_holding(proc, TIMEOUT)
        _sigkill(proc)
    finally:
        stop_process(proc)
    assert steps(run) == [2], "a half-written folder was taken for a checkpoint"
    with pytest.raises(CheckpointError, match="meta.json"):
        verify_checkpoint(partial)  # the kill really hit the write
    assert digest(ckpt(run, 2)) == first  # the previous checkpoint is byte-identical ...
    _, _, meta = load_model_from_run(run)  # ... and what the sampler loads
    assert meta["step"] == 2
    assert [s for s, _ in losses(run)] == [1, 2, 3, 4]

    # 3. resumed in-process to the end: the same losses and weights as the uninterrupted reference
    assert main(pretrain_args(run, tiny, resume=True)) == 0
    assert losses(run) == losses(ref)  # steps 1-6 once each, exactly equal (crossing an epoch)
    assert steps(run) == [4, 6] and tmp_dirs(run) == []
    assert same_weights(ckpt(run, 6), ckpt(ref, 6))
    assert status(run)["state"] == "finished" and status(run)["step"] == 6
