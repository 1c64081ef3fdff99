"""train.compile (training.compiled): compiled and eager steps agree, a compiled run resumes exactly, and a compiler
failure falls back to eager with one named warning.

The models are tiny (two layers, width 32) so that inductor compiles them quickly once its cache holds them; the
graphs are those of the demo's blocks at another width. Tolerance: inductor fuses the blocks' elementwise chains and
reorders their float32 sums, so a compiled step is the eager function to float rounding, not bit for bit. Measured
here (torch 2.13 CPU, one thread): the loss equal to the last bit for all three steps, every gradient within
1.3e-6 (stage 1), 1.2e-6 (SimForcing) and 2.3e-6 (the few-step student) of its tensor's largest entry, where two
eager runs are bit-equal. The tolerances (1e-5 on the loss, 2e-5 on the gradients, both relative) leave ~10x room
and stay far below what a wrong graph gives (a dropped term or a wrong mask moves the loss by > 1e-2). Compiling
from a cold cache takes about a minute per step function on a quiet 2-core machine (6-7 minutes under a load of ~6); a second run reads
inductor's cache.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch

from simforcing.bench.inputs import bench_model, latent_batch
from simforcing.config import load_config
from simforcing.fewstep.objective import fewstep_step
from simforcing.methods import METHODS, method_preset
from simforcing.train import train_run
from simforcing.training.compiled import COMPILE_OPTIONS, CompiledModels
from simforcing.training.step import forward_backward
from test_train import TINY, losses, tiny, tiny_cfg  # noqa: F401  (tiny: the session's dataset fixture)

LOSS_TOL = 1e-5
GRAD_TOL = 2e-5
MODEL = ["--model.num_layers=2", "--model.num_attention_heads=2", "--model.attention_head_dim=16",
         "--model.ffn_dim=64", "--model.freq_dim=32", "--model.action_hidden=32", "--model.action_ffn_dim=64",
         "--model.text_dim=32", "--data.text_max_tokens=8", "--data.frames=5"]


def _cfg(method: str, *extra: str):
    cfg = load_config("demo", MODEL + list(extra))
    if method == "fewstep":
        cfg.fewstep.steps, cfg.fewstep.teacher_n_real = 1, 2
        return method_preset(cfg, "simforcing")
    cfg.train.method = method
    return cfg if method == "sim_pretrain" else method_preset(cfg, method)


def _loss_and_grads(cfg, step_fn, student, teacher, batch) -> tuple[float, dict]:
    gen = torch.Generator().manual_seed(3)
    student.zero_grad(set_to_none=True)
    loss, _ = forward_backward(step_fn, student, teacher, batch, cfg, gen, torch.device("cpu"))
    return float(loss.detach()), {n: p.grad.clone() for n, p in student.named_parameters() if p.grad is not None}


# AOT autograd without code generation: the same capture of each step function as inductor's (dynamo, its guards,
# the backward graph), in seconds instead of a minute per step function from a cold cache; inductor itself (the
# compiler train.compile uses, whose rounding gap the tolerances above were measured on) runs a whole stage-1 run in
# the compiled-resume test below (its losses against eager's, its exact resume). Measuring the gap on inductor again:
# SIMFORCING_TEST_INDUCTOR=1.
BACKEND = "inductor" if os.environ.get("SIMFORCING_TEST_INDUCTOR") == "1" else "aot_eager"


@pytest.mark.parametrize("method,backend", [("sim_pretrain", BACKEND), ("simforcing", BACKEND),
                                            ("fewstep", BACKEND)])
def test_compiled_step_agrees_with_eager(method, backend, monkeypatch):
    monkeypatch.setitem(COMPILE_OPTIONS, "backend", backend)
    torch.set_num_threads(1)
    cfg = _cfg(method)
    step_fn = fewstep_step if method == "fewstep" else METHODS[method]
    student = bench_model(cfg, torch.device("cpu")).train()
    teacher = copy.deepcopy(student).requires_grad_(False).eval() if method != "sim_pretrain" else None
    batch = latent_batch(cfg, 3, torch.device("cpu"))
    eager_loss, eager_grads = _loss_and_grads(cfg, step_fn, student, teacher, batch)
    again_loss, again_grads = _loss_and_grads(cfg, step_fn, student, teacher, batch)
    assert again_loss == eager_loss and all(torch.equal(again_grads[k], g) for k, g in eager_grads.items())
    compiled = CompiledModels([student, teacher], "train.compile")
    try:
        loss, grads = _loss_and_grads(cfg, step_fn, student, teacher, batch)
        assert compiled.active and compiled.failure is None
        loss2, grads2 = _loss_and_grads(cfg, step_fn, student, teacher, batch)  # the compiled graphs, reused
    finally:
        compiled._uncompile()
    assert loss2 == loss and all(torch.equal(grads2[k], g) for k, g in grads.items())  # deterministic
    assert abs(loss - eager_loss) <= LOSS_TOL * abs(eager_loss)
    assert grads.keys() == eager_grads.keys()
    for name, g in eager_grads.items():
        scale = g.abs().max().item()
        assert (grads[name] - g).abs().max().item() <= GRAD_TOL * max(scale, 1e-12), name
    loss_back, _ = _loss_and_grads(cfg, step_fn, student, teacher, batch)  # uncompiled: eager again, bit for bit
    assert loss_back == eager_loss


def test_a_compiler_failure_falls_back_to_eager_with_one_warning(monkeypatch, capsys):
    cfg = _cfg("sim_pretrain")
    student = bench_model(cfg, torch.device("cpu")).train()
    batch = latent_batch(cfg, 2, torch.device("cpu"))
    eager_loss, eager_grads = _loss_and_grads(cfg, METHODS["sim_pretrain"], student, None, batch)

    def broken(*args, **kwargs):  # what a missing C++ compiler or an inductor bug looks like at the first call
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\n  (a long compiler traceback)")

    student.compile(backend=lambda gm, inputs: broken())
    compiled = CompiledModels([], "train.compile")  # the modules' compiled calls set by hand above
    compiled.modules, compiled.active = [student], True
    calls = {"reset": 0}

    def attempt():
        return _loss_and_grads(cfg, METHODS["sim_pretrain"], student, None, batch)

    loss, grads = compiled.run(attempt, reset=lambda: calls.update(reset=calls["reset"] + 1))
    err = capsys.readouterr().err
    assert loss == eager_loss and all(torch.equal(grads[k], g) for k, g in eager_grads.items())
    assert calls["reset"] == 1 and not compiled.active and student._compiled_call_impl is None
    assert err.count("simforcing: train.compile: compilation failed") == 1 and "Traceback" not in err
    assert "continuing without it" in err and "No working C++ compiler" in err
    compiled.run(attempt)  # later steps: eager, no second warning
    assert capsys.readouterr().err == ""


def test_torch_compile_refusing_at_setup_leaves_eager(monkeypatch, capsys):
    cfg = _cfg("sim_pretrain")
    student = bench_model(cfg, torch.device("cpu"))
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: (_ for _ in ()).throw(
        RuntimeError("torch.compile is not supported on this Python")))
    compiled = CompiledModels([student], "train.compile")
    assert not compiled.active and compiled.run(lambda: 7) == 7
    assert capsys.readouterr().err.count("train.compile: compilation failed (RuntimeError: torch.compile") == 1


def test_a_genuine_error_is_raised_not_swallowed(capsys):
    compiled = CompiledModels([], "train.compile")
    compiled.active = True

    def attempt():
        raise ValueError("z0: expected (B, C, 1, h, w)")

    with pytest.raises(ValueError, match="z0: expected"):
        compiled.run(attempt)
    assert "compilation failed" not in capsys.readouterr().err


@pytest.mark.slow
def test_compiled_run_resumes_exactly(tiny, tmp_path, monkeypatch):  # noqa: F811
    """A compiled stage-1 run stopped at step 3 and resumed (compiled again) logs exactly the losses of an
    uninterrupted compiled run, and ends at the same weights (bit for bit: the rotary tables are made outside the
    compiled graph, so a process's first step compiles the graph of every later step — before, the resumed run's
    first step ran another graph and its weights differed by rounding while the logged losses agreed)."""
    from test_train import _raise_sigterm_at

    from simforcing.runs.checkpoint import load_checkpoint
    torch.set_num_threads(1)
    cfg = tiny_cfg(*tiny, "--train.max_steps=6", "--train.ckpt_every=10", "--train.compile=true",
                   "--train.threads=1")
    full = train_run(cfg, tmp_path / "full", "pretrain", progress=False)
    assert full["state"] == "finished"
    _raise_sigterm_at(monkeypatch, 3)
    part = train_run(cfg, tmp_path / "part", "pretrain", progress=False)
    assert part["state"] == "stopped" and part["step"] == 3
    monkeypatch.undo()
    again = train_run(cfg, tmp_path / "part", "pretrain", resume=True, progress=False)
    assert again["state"] == "finished" and again["step"] == 6
    assert losses(tmp_path / "part") == losses(tmp_path / "full")
    a = load_checkpoint(tmp_path / "full/checkpoints/step_000006").model_state
    b = load_checkpoint(tmp_path / "part/checkpoints/step_000006").model_state
    assert all(torch.equal(a[k], b[k]) for k in a)
    eager = train_run(tiny_cfg(*tiny, "--train.max_steps=6", "--train.ckpt_every=10", "--train.threads=1"),
                      tmp_path / "eager", "pretrain", progress=False)
    assert eager["state"] == "finished"
    for (s1, compiled_loss), (s2, eager_loss) in zip(losses(tmp_path / "full"), losses(tmp_path / "eager")):
        assert s1 == s2 and abs(compiled_loss - eager_loss) <= 1e-4 * abs(eager_loss)  # 6 steps: rounding grows


# -- sample.compile: the sampler's network calls ---------------------------------------------------------------------------
def _sampler_setup(compile_: bool):
    from test_sample import random_sampler_batch, tiny_cfg as sample_cfg, tiny_model, tiny_vae

    cfg = sample_cfg()
    cfg.sample.compile = compile_
    return cfg, tiny_model(cfg), tiny_vae(), random_sampler_batch(cfg)


@torch.no_grad()
def test_compiled_sampler_agrees_with_eager(monkeypatch):
    """The guided sampler at (1, 2, 0.6) — the simulation rollout, the CFG pair, the Euler steps — with its network
    compiled gives the eager latents to float rounding (aot_eager: the same capture as inductor's; the gap measured
    on the training step above holds for these forwards), and the model's weights are untouched."""
    from simforcing.sample import GuidedSampler

    monkeypatch.setitem(COMPILE_OPTIONS, "backend", BACKEND)
    torch.set_num_threads(1)
    cfg, model, vae, batch = _sampler_setup(False)
    eager = GuidedSampler(model, vae, cfg, n_sim=1, n_real=2, w=0.6)(batch, torch.Generator().manual_seed(4))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    cfg.sample.compile = True
    sampler = GuidedSampler(model, vae, cfg, n_sim=1, n_real=2, w=0.6)
    try:
        assert sampler.compiled.active
        out = sampler(batch, torch.Generator().manual_seed(4))
        again = sampler(batch, torch.Generator().manual_seed(4))
        assert sampler.compiled.failure is None
    finally:
        sampler.compiled._uncompile()
    scale = eager.real_latents.abs().max().item()
    assert (out.real_latents - eager.real_latents).abs().max().item() <= GRAD_TOL * scale
    assert torch.equal(again.real_latents, out.real_latents) and out.forwards == eager.forwards
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


@torch.no_grad()
def test_a_sampler_compile_failure_samples_eagerly_on_the_same_noise(monkeypatch, capsys):
    from simforcing.sample import GuidedSampler

    cfg, model, vae, batch = _sampler_setup(False)
    gen = torch.Generator().manual_seed(9)
    eager = GuidedSampler(model, vae, cfg, n_sim=1, n_real=2, w=0.6)(batch, gen)

    def broken(gm, inputs):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")

    monkeypatch.setitem(COMPILE_OPTIONS, "backend", broken)
    torch._dynamo.reset()  # graphs compiled by earlier tests in this process would be reused, never reaching `broken`
    cfg.sample.compile = True
    sampler = GuidedSampler(model, vae, cfg, n_sim=1, n_real=2, w=0.6)
    out = sampler(batch, torch.Generator().manual_seed(9))  # the failed attempt drew noise: restored, drawn again
    err = capsys.readouterr().err
    assert torch.equal(out.real_latents, eager.real_latents) and not sampler.compiled.active
    assert err.count("simforcing: sample.compile: compilation failed") == 1 and "Traceback" not in err
    assert model._compiled_call_impl is None


@pytest.mark.parametrize("method", ["simforcing", "fewstep"])
def test_a_teacher_stored_in_autocast_dtype_gives_the_same_step_with_fewer_casts(method):
    """train.teacher_autocast_weights (models.weights.store_autocast_weights): under bf16 autocast the frozen
    teacher's linear/conv weights stored in bf16 once give the step's loss and every gradient bit for bit, with fewer
    dtype casts (autocast re-cast the frozen weights on every call)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from simforcing.models.weights import frozen_copy, store_autocast_weights

    class Casts(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket is torch.ops.aten._to_copy:
                Casts.n += 1
            return func(*args, **(kwargs or {}))

    cfg = _cfg(method, "--train.mixed_precision=bf16")
    step_fn = fewstep_step if method == "fewstep" else METHODS[cfg.train.method]
    student = bench_model(cfg, torch.device("cpu")).train()
    batch = latent_batch(cfg, 2, torch.device("cpu"))
    teacher = frozen_copy(student)
    cast = frozen_copy(student)
    assert store_autocast_weights(cast, torch.bfloat16) > 0
    assert {p.dtype for m in cast.modules() if isinstance(m, torch.nn.Linear) for p in m.parameters()} == \
        {torch.bfloat16}
    results = []
    for t in (teacher, cast):
        Casts.n = 0
        with Casts():
            results.append(_loss_and_grads(cfg, step_fn, student, t, batch) + (Casts.n,))
    (loss_a, grads_a, casts_a), (loss_b, grads_b, casts_b) = results
    assert loss_a == loss_b and grads_a.keys() == grads_b.keys()
    assert all(torch.equal(grads_a[k], grads_b[k]) for k in grads_a)
    assert casts_b < casts_a
    with pytest.raises(ValueError, match="frozen"):
        store_autocast_weights(student, torch.bfloat16)
