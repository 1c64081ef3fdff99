"""Stopped: SIGTERM (a subprocess) or SIGINT (in-process) in the middle of a step finishes that step, writes a
checkpoint at it even off the ``ckpt_every`` schedule, records status "stopped" and exits with 75; ``--resume``
continues from that step and reproduces the uninterrupted run exactly, also when the step draws from the global RNGs."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import numpy as np
import torch

import pytest
from faultkit import (FAULT_ENV, checkpointed, ckpt, losses, pretrain_args, same_weights, spawn, status, steps,
                      stop_process, wait_for, wait_until_holding)

from simforcing.cli import main
from simforcing.runs.checkpoint import load_checkpoint

pytestmark = pytest.mark.faults

EXIT_STOPPED = 75
TIMEOUT = 240


@pytest.mark.slow
def test_sigterm_checkpoints_the_current_step_exits_75_and_resume_matches(tiny, ref, tmp_path):
    run = tmp_path / "run"
    proc = spawn(pretrain_args(run, tiny), "sleep@3:600", tmp_path)
    try:
        wait_for(checkpointed(run, 2), TIMEOUT, "checkpoint 2", proc)
        wait_until_holding(proc, TIMEOUT)  # inside step 3, after backward, before the optimizer update
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)  # the 600 s hold is cut short by the signal
    finally:
        stop_process(proc)
    assert proc.returncode == EXIT_STOPPED, out
    assert "stopped at step 3" in out and "--resume" in out, out
    st = status(run)
    assert st["state"] == "stopped" and st["step"] == 3 and st["exit_code"] == EXIT_STOPPED
    assert "SIGTERM" in st["reason"]
    assert steps(run) == [2, 3]  # 3 is off the ckpt_every=2 schedule: written because of the signal
    assert load_checkpoint(ckpt(run, 3)).train_state["data"]["position"] == 3
    assert losses(run) == losses(ref)[:3]

    assert main(pretrain_args(run, tiny, resume=True)) == 0
    assert losses(run) == losses(ref)
    assert same_weights(ckpt(run, 6), ckpt(ref, 6)) and status(run)["state"] == "finished"


def test_sigint_is_a_stop_too(tiny, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(FAULT_ENV, "sleep@2:600")
    run = tmp_path / "run"
    received = []
    previous = signal.signal(signal.SIGINT, lambda *a: received.append(a))  # a stray SIGINT must not stop pytest

    def interrupt() -> None:
        try:
            wait_for(lambda: (run / "metrics.jsonl").read_text().strip(), 120, "step 1")
        except AssertionError:
            return
        time.sleep(1.0)  # inside step 2's hold
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=interrupt, daemon=True)
    thread.start()
    try:
        code = main(pretrain_args(run, tiny))
    finally:
        thread.join(timeout=5)
        signal.signal(signal.SIGINT, previous)
    err = capsys.readouterr().err
    assert code == EXIT_STOPPED, err
    assert not received  # the trainer's handler, not ours, took the signal
    st = status(run)
    assert st["state"] == "stopped" and st["step"] == 2 and "SIGINT" in st["reason"]
    assert steps(run) == [2] and [s for s, _ in losses(run)] == [1, 2]


def _rows(run) -> list[dict]:
    import json

    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_resume_restores_every_global_rng(tiny, tmp_path, monkeypatch):
    """A step function that also draws from the global torch, numpy and python RNGs resumes exactly."""
    from simforcing.methods import METHODS

    original = METHODS["sim_pretrain"]
    calls = {"n": 0, "stop_at": None}

    def step(student, teacher, batch, cfg, gen):
        loss, logs = original(student, teacher, batch, cfg, gen)
        probe = float(torch.rand(())) + float(np.random.rand()) + random.random()
        calls["n"] += 1
        if calls["n"] == calls["stop_at"]:
            signal.raise_signal(signal.SIGTERM)  # taken by the trainer: finish the step, checkpoint, exit 75
        return loss + 1e-3 * probe, {**logs, "loss": logs["loss"] + 1e-3 * probe, "rng_probe": probe}

    monkeypatch.setitem(METHODS, "sim_pretrain", step)
    full, part = tmp_path / "full", tmp_path / "part"
    assert main(pretrain_args(full, tiny)) == 0
    calls.update(n=0, stop_at=3)
    assert main(pretrain_args(part, tiny)) == EXIT_STOPPED and steps(part) == [2, 3]
    torch.manual_seed(1234), np.random.seed(1234), random.seed(1234)  # the resuming process's RNGs differ
    assert main(pretrain_args(part, tiny, resume=True)) == 0
    assert [r["rng_probe"] for r in _rows(part)] == [r["rng_probe"] for r in _rows(full)]
    assert losses(part) == losses(full) and same_weights(ckpt(part, 6), ckpt(full, 6))
