"""Diverged: a NaN loss, a NaN batch or a non-finite gradient norm stops the run with exit code 3 and a message naming
the step and the term; status.json says why; no checkpoint is written after it and the last good one is left
byte-identical."""

from __future__ import annotations

import math

import pytest
from faultkit import FAULT_ENV, ckpt, copy_run, digest, losses, pretrain_args, status, steps, tmp_dirs

from simforcing.cli import main
from simforcing.runs.checkpoint import load_checkpoint

pytestmark = pytest.mark.faults

EXIT_DIVERGED = 3


def _diverge(words: list[str], capsys) -> str:
    code = main(words)
    err = capsys.readouterr().err
    assert code == EXIT_DIVERGED, err
    return err


def test_nan_loss_exits_3_naming_step_and_term(tiny, ref, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(FAULT_ENV, "nan_loss@3")
    run = tmp_path / "run"
    err = _diverge(pretrain_args(run, tiny), capsys)
    assert "diverged at step 3" in err and "non-finite loss" in err and "step_000002" in err, err
    st = status(run)
    assert st["state"] == "diverged" and st["exit_code"] == EXIT_DIVERGED and st["step"] == 2
    assert "step 3" in st["reason"] and "loss" in st["reason"] and "step_000002" in st["reason"]
    assert steps(run) == [2] and tmp_dirs(run) == []
    load_checkpoint(ckpt(run, 2))
    assert losses(run) == losses(ref)[:2] and all(math.isfinite(x) for _, x in losses(run))


def test_nan_batch_after_resume_leaves_every_checkpoint_byte_identical(tiny, ref, tmp_path, monkeypatch, capsys):
    run = copy_run(ref, tmp_path / "run")
    before = {s: digest(ckpt(run, s)) for s in (4, 6)}
    monkeypatch.setenv(FAULT_ENV, "nan_batch@8")  # step 8 would be checkpointed (ckpt_every=2)
    with pytest.warns(UserWarning, match="train.max_steps"):
        err = _diverge(pretrain_args(run, tiny, "--train.max_steps=10", resume=True), capsys)
    assert "diverged at step 8" in err and "fm_sim" in err, err  # the stage-1 term fed by the NaN latents
    st = status(run)
    assert st["state"] == "diverged" and st["step"] == 7 and "fm_sim" in st["reason"]
    assert steps(run) == [4, 6] and tmp_dirs(run) == []
    assert {s: digest(ckpt(run, s)) for s in (4, 6)} == before
    assert [s for s, _ in losses(run)] == [1, 2, 3, 4, 5, 6, 7]


def test_non_finite_gradient_norm_is_divergence_too(tiny, tmp_path, monkeypatch, capsys):
    from simforcing import parallel

    monkeypatch.setattr(parallel, "clip_grad_norm", lambda params, max_norm: float("inf"))
    run = tmp_path / "run"
    err = _diverge(pretrain_args(run, tiny, "--train.max_steps=2"), capsys)
    assert "diverged at step 1" in err and "grad_norm" in err and "none" in err, err
    st = status(run)
    assert st["state"] == "diverged" and "grad_norm" in st["reason"] and st["step"] == 0
    assert steps(run) == []
