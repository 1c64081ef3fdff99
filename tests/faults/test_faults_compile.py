"""Compilation that cannot work (issue #56 and its neighbours): inductor's cache folder unusable
(``TORCHINDUCTOR_CACHE_DIR`` a file, or below a file), a compiler that fails only at the backward, a compile mode that
does not exist. Each ends in the documented one line — a run goes on eagerly with the eager run's numbers, or a
config error names the field — never a traceback; each has its control (the same call on good input works).

Before the fix, an unusable cache folder failed every command that builds a network at its import (torch creates the
folder when ``torch._dynamo`` is imported, which diffusers does), compile on or off: a traceback, exit 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from faultkit import losses, pretrain_args, refused

from simforcing import inductor_cache
from simforcing.cli import main
from simforcing.training import compiled as compiled_module
from simforcing.training.compiled import COMPILE_OPTIONS, CompiledModels

pytestmark = pytest.mark.faults

ONE_LINE = "simforcing: {field}: compilation failed (TORCHINDUCTOR_CACHE_DIR={path} is a file, not a folder; " \
           "point TORCHINDUCTOR_CACHE_DIR at a writable folder or unset it); continuing without it"
SHORT = ["--train.max_steps=2", "--train.threads=1"]  # one thread: the runs compare bit for bit


def _simforcing(args: list, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """``simforcing ARGS`` in a fresh process (torch's compiler imports there) with ``env`` added."""
    exe = Path(sys.executable).with_name("simforcing")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "simforcing"]
    clean = {k: v for k, v in os.environ.items() if k not in (inductor_cache.ENV, inductor_cache.PROBLEM_ENV)}
    return subprocess.run(cmd + [str(a) for a in args], env={**clean, "OMP_NUM_THREADS": "1", **env}, cwd=cwd,
                          capture_output=True, text=True, timeout=900)


def test_a_cache_folder_that_is_a_file_trains_eagerly_with_one_line(tiny, tmp_path):
    """`train.compile` with TORCHINDUCTOR_CACHE_DIR naming a file: exit 0, the one line, the eager run's losses bit for
    bit (compilation given up before the first step), the file untouched. Control: the same run eagerly, in this
    process."""
    cache = tmp_path / "cache"
    cache.write_text("not a folder\n")
    assert main(pretrain_args(tmp_path / "eager", tiny, *SHORT)) == 0
    proc = _simforcing(pretrain_args(tmp_path / "compiled", tiny, *SHORT, "--train.compile=true"),
                       {inductor_cache.ENV: str(cache)}, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count(ONE_LINE.format(field="train.compile", path=cache)) == 1, proc.stderr[-3000:]
    assert losses(tmp_path / "compiled") == losses(tmp_path / "eager")
    assert cache.read_text() == "not a folder\n"


def test_any_command_runs_with_a_cache_folder_below_a_file(tmp_path):
    """Nothing compiled (`model info` imports the network, hence torch's compiler): it runs as with a good folder and
    says nothing about compiling; no private folder left behind. Control: the same command with a good folder."""
    (tmp_path / "file").write_text("x")
    good = _simforcing(["model", "info", "--preset", "demo"], {inductor_cache.ENV: str(tmp_path / "good")}, tmp_path)
    bad = _simforcing(["model", "info", "--preset", "demo"], {inductor_cache.ENV: str(tmp_path / "file/sub"),
                                                               "TMPDIR": str(tmp_path)}, tmp_path)
    assert good.returncode == bad.returncode == 0, bad.stderr[-3000:]
    assert bad.stdout == good.stdout and "Traceback" not in bad.stderr and "compil" not in bad.stderr
    assert not list(tmp_path.glob("simforcing-inductor-*"))  # the private folder was removed at exit


def test_guard_records_why_and_gives_torch_a_private_folder(tmp_path):
    (tmp_path / "file").write_text("x")
    env = {inductor_cache.ENV: str(tmp_path / "file/sub")}
    why = inductor_cache.guard(env)
    assert why.startswith(f"TORCHINDUCTOR_CACHE_DIR={tmp_path / 'file/sub'}: cannot create the folder (")
    assert why.endswith("; point TORCHINDUCTOR_CACHE_DIR at a writable folder or unset it")
    assert env[inductor_cache.PROBLEM_ENV] == why and Path(env[inductor_cache.ENV]).is_dir()
    assert inductor_cache.problem(env) == why  # a process started with this environment knows it too
    for good in ({inductor_cache.ENV: str(tmp_path / "new/cache")}, {}):  # controls: a folder made, or none asked
        before = dict(good)
        assert inductor_cache.guard(good) is None and good == before
    assert (tmp_path / "new/cache").is_dir()


@torch.no_grad()
def test_sample_compile_with_an_unusable_cache_samples_eagerly(tmp_path, monkeypatch, capsys):
    """`sample.compile` with the cache folder a file: the one line, the eager samples bit for bit. Control: a good
    folder compiles (the sampler's network compiled, no line)."""
    from test_compile import _sampler_setup

    from simforcing.sample import GuidedSampler

    cfg, model, vae, batch = _sampler_setup(False)
    eager = GuidedSampler(model, vae, cfg, n_sim=1, n_real=2, w=0.6)(batch, torch.Generator().manual_seed(2))
    cfg.sample.compile = "regional"
    monkeypatch.delenv(inductor_cache.PROBLEM_ENV, raising=False)
    monkeypatch.setenv(inductor_cache.ENV, str(tmp_path))
    good = GuidedSampler(model, vae, cfg, n_sim=1, n_real=2, w=0.6)
    assert good.compiled.active and capsys.readouterr().err == ""
    good.compiled.uncompile()
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv(inductor_cache.ENV, str(tmp_path / "file"))
    sampler = GuidedSampler(model, vae, cfg, n_sim=1, n_real=2, w=0.6)
    out = sampler(batch, torch.Generator().manual_seed(2))
    err = capsys.readouterr().err
    assert err == ONE_LINE.format(field="sample.compile", path=tmp_path / "file") + "\n"
    assert not sampler.compiled.active and torch.equal(out.real_latents, eager.real_latents)


def test_a_compiler_that_fails_only_at_the_backward(monkeypatch, capsys):
    """The forward compiles, the backward's compilation raises (at the first backward): the step is taken again
    eagerly — the eager step's loss and gradients bit for bit — with the one line. Control: the same compiler with a
    working backward compiles the step (no line, the eager numbers to rounding)."""
    from test_compile import GRAD_TOL, LOSS_TOL, _loss_and_grads, _max_gaps, _models
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop

    from simforcing.bench.inputs import latent_batch

    def broken_backward(gm, example_inputs):
        raise RuntimeError("backward lowering failed: no kernel for this op")

    torch.set_num_threads(1)
    cfg, step_fn, student, teacher = _models("sim_pretrain", "--model.gradient_checkpointing=true")
    batch = latent_batch(cfg, 2, torch.device("cpu"))
    eager_loss, eager_grads = _loss_and_grads(cfg, step_fn, student, teacher, batch)
    for bw, fails in ((boxed_nop, False), (broken_backward, True)):
        torch._dynamo.reset()  # graphs of the other compiler would be reused
        monkeypatch.setitem(COMPILE_OPTIONS, "backend", aot_autograd(fw_compiler=boxed_nop, bw_compiler=bw))
        compiled = CompiledModels([student], "train.compile", "regional")  # (each mode runs its attempts alike)
        try:
            loss, grads = compiled.run(lambda: _loss_and_grads(cfg, step_fn, student, teacher, batch),
                                       reset=lambda: student.zero_grad(set_to_none=True))
        finally:
            compiled.uncompile()
        err = capsys.readouterr().err
        if fails:
            assert compiled.failure is not None and "Traceback" not in err
            assert err.count("simforcing: train.compile: compilation failed (") == 1 and \
                "backward lowering failed" in err and err.rstrip().endswith("continuing without it")
            assert loss == eager_loss and all(torch.equal(grads[k], g) for k, g in eager_grads.items())
        else:
            assert compiled.failure is None and err == ""
            loss_gap, grad_gap = _max_gaps(loss, grads, eager_loss, eager_grads)
            assert loss_gap <= LOSS_TOL and grad_gap <= GRAD_TOL


def test_an_unknown_compile_mode_is_a_config_error(tiny, tmp_path, capsys):
    refused(pretrain_args(tmp_path / "run", tiny, "--train.compile=fast"), capsys,
            "--train.compile: got 'fast'; expected one of off, module, regional, graphs (true = module, false = off)")
    assert not (tmp_path / "run").exists()
    assert main(pretrain_args(tmp_path / "run", tiny, "--train.compile=regional", "--dry-run")) == 0  # control
    assert '"compile": "regional"' in capsys.readouterr().out
    assert compiled_module.compile_mode("TRUE", "x") == "module" and compiled_module.compile_mode(0, "x") == "off"


def test_graphs_in_a_sharded_run_is_refused_before_any_work(tiny, tmp_path, monkeypatch, capsys):
    """`train.compile=graphs` under torchrun (WORLD_SIZE > 1: FSDP2): exit 2 naming the field and `regional`, before
    a process group, a run folder or a model. Controls: one process, or "regional" in a sharded run, pass the check."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    refused(pretrain_args(tmp_path / "run", tiny, "--train.compile=graphs"), capsys,
            "train.compile: 'graphs' (CUDA graphs) cannot run under FSDP2", "use train.compile=regional",
            "(world size 2)")
    assert not (tmp_path / "run").exists()
    compiled_module.check_sharded_run("train.compile", "graphs", 1)
    compiled_module.check_sharded_run("train.compile", "regional", 2)
