"""train.compile / sample.compile (training.compiled): compiled and eager steps agree in every mode (whole modules,
and each layer on its own: "regional", with and without activation checkpointing), a compiled run resumes exactly,
"graphs" says what it does off CUDA and is refused under FSDP2, and a compiler failure falls back to eager with one
named warning.

The models are tiny (two layers, width 32) so that inductor compiles them quickly once its cache holds them; the
graphs are those of the demo's blocks at another width. Tolerance: inductor fuses the blocks' elementwise chains and
reorders their float32 sums, so a compiled step is the eager function to float rounding, not bit for bit. Measured
here (torch 2.13 CPU, one thread), whole modules ("module"): the loss equal to the last bit for all three steps, every
gradient within 1.3e-6 (stage 1), 1.2e-6 (SimForcing) and 2.3e-6 (the few-step student) of its tensor's largest
entry, where two eager runs are bit-equal; each layer on its own ("regional", SimForcing and the few-step student
with the checkpoint inside the compiled layer): the loss equal to the last bit, every gradient within 1.0e-6,
9.6e-7 and 4.5e-6. The tolerances (1e-5 on the loss, 2e-5 on the
gradients and the sampled latents, all relative) leave ~10x room and stay far below what a wrong graph gives (a
dropped term or a wrong mask moves the loss by > 1e-2). Compiling from a cold cache takes about a minute per step
function on a quiet 2-core machine (6-7 minutes under a load of ~6); a second run reads inductor's cache.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch

from simforcing.bench.inputs import bench_model, latent_batch
from simforcing.config import ConfigError, load_config
from simforcing.fewstep.objective import fewstep_step
from simforcing.methods import METHODS, method_preset
from simforcing.train import train_run
from simforcing.training import compiled as compiled_module
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


def _models(method: str, *extra: str):
    cfg = _cfg(method, *extra)
    student = bench_model(cfg, torch.device("cpu")).train()
    teacher = copy.deepcopy(student).requires_grad_(False).eval() if method != "sim_pretrain" else None
    return cfg, fewstep_step if method == "fewstep" else METHODS[cfg.train.method], student, teacher


def _max_gaps(loss: float, grads: dict, eager_loss: float, eager_grads: dict) -> tuple[float, float]:
    """(relative loss gap, largest gradient gap relative to its tensor's largest entry)."""
    rel = max(((grads[k] - g).abs().max() / g.abs().max().clamp_min(1e-12)).item() for k, g in eager_grads.items())
    return abs(loss - eager_loss) / abs(eager_loss), rel


# (method, mode, activation checkpointing): stage 1; stage 2 with its frozen teacher; the student's distillation
CASES = [("sim_pretrain", "module", False), ("simforcing", "module", False), ("fewstep", "module", False),
         ("sim_pretrain", "regional", False), ("simforcing", "regional", True), ("fewstep", "regional", True)]


@pytest.mark.parametrize("method,mode,ckpt", CASES)
def test_compiled_step_agrees_with_eager(method, mode, ckpt, monkeypatch):
    monkeypatch.setitem(COMPILE_OPTIONS, "backend", BACKEND)
    torch.set_num_threads(1)
    cfg, step_fn, student, teacher = _models(method, f"--model.gradient_checkpointing={ckpt}")
    batch = latent_batch(cfg, 3, torch.device("cpu"))
    eager_loss, eager_grads = _loss_and_grads(cfg, step_fn, student, teacher, batch)
    again_loss, again_grads = _loss_and_grads(cfg, step_fn, student, teacher, batch)
    assert again_loss == eager_loss and all(torch.equal(again_grads[k], g) for k, g in eager_grads.items())
    compiled = CompiledModels([student, teacher], "train.compile", mode)
    try:
        loss, grads = _loss_and_grads(cfg, step_fn, student, teacher, batch)
        assert compiled.active and compiled.failure is None and compiled.mode == mode
        if mode == "regional":  # every layer runs its compiled region; the checkpoint moved inside it
            assert all(isinstance(layer.__dict__.get("forward"), compiled_module.Region) for m in (student, teacher)
                       if m is not None for layer in m.layers)
            assert student.gradient_checkpointing is False
        loss2, grads2 = _loss_and_grads(cfg, step_fn, student, teacher, batch)  # the compiled graphs, reused
    finally:
        compiled.uncompile()
    assert loss2 == loss and all(torch.equal(grads2[k], g) for k, g in grads.items())  # deterministic
    assert grads.keys() == eager_grads.keys()
    loss_gap, grad_gap = _max_gaps(loss, grads, eager_loss, eager_grads)
    print(f"{method} {mode} checkpointing={ckpt} {BACKEND}: loss gap {loss_gap:.2e}, gradient gap {grad_gap:.2e}")
    assert loss_gap <= LOSS_TOL and grad_gap <= GRAD_TOL
    assert student.gradient_checkpointing is ckpt and "forward" not in student.layers[0].__dict__
    loss_back, _ = _loss_and_grads(cfg, step_fn, student, teacher, batch)  # uncompiled: eager again, bit for bit
    assert loss_back == eager_loss


def _saved_bytes(cfg, step_fn, student, teacher, batch) -> int:
    """Bytes autograd keeps for the backward of one step: saved tensors, counted once per storage, but not the
    parameters (a compiled graph saves its parameter inputs, an eager checkpoint reads them from the module)."""
    storages, params = {}, {p.untyped_storage().data_ptr() for p in student.parameters()}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _loss_and_grads(cfg, step_fn, student, teacher, batch)
    return sum(storages.values())


def test_regional_compile_keeps_activation_checkpointing(monkeypatch):
    """With model.gradient_checkpointing the checkpoint runs inside each compiled layer: the step keeps about what the
    eager checkpointed step keeps for its backward (each layer's inputs; the backward graph recomputes the rest), not
    every activation (3 layers: 1.21 MiB unchecked, 0.23 checkpointed eagerly, 0.29 in compiled layers)."""
    monkeypatch.setitem(COMPILE_OPTIONS, "backend", BACKEND)
    torch.set_num_threads(1)
    saved = {}
    for ckpt in (False, True):
        cfg, step_fn, student, teacher = _models("sim_pretrain", "--model.num_layers=3",
                                                 f"--model.gradient_checkpointing={ckpt}")
        batch = latent_batch(cfg, 2, torch.device("cpu"))
        saved[("eager", ckpt)] = _saved_bytes(cfg, step_fn, student, teacher, batch)
        compiled = CompiledModels([student], "train.compile", "regional")
        try:
            saved[("regional", ckpt)] = _saved_bytes(cfg, step_fn, student, teacher, batch)
        finally:
            compiled.uncompile()
    print({k: f"{v / 2**20:.2f} MiB" for k, v in saved.items()})
    assert saved[("eager", True)] < 0.5 * saved[("eager", False)]
    assert saved[("regional", True)] < 0.5 * saved[("regional", False)]
    assert saved[("regional", True)] <= 1.5 * saved[("eager", True)]  # measured: 0.29 MiB against 0.23 (1.2 unchecked)


def test_regional_compile_under_fsdp2_agrees_and_graphs_is_refused(monkeypatch):
    """FSDP2 (one process, gloo): each sharded layer compiled after fully_shard gives the eager sharded step's loss
    and gradients; "graphs" is refused by name before anything is compiled (a ConfigError: exit 2 in a command)."""
    from simforcing import parallel
    from simforcing.bench.gpu import single_process_group

    monkeypatch.setitem(COMPILE_OPTIONS, "backend", BACKEND)
    torch.set_num_threads(1)
    cfg, step_fn, student, teacher = _models("simforcing", "--model.gradient_checkpointing=true")
    batch = latent_batch(cfg, 2, torch.device("cpu"))
    with single_process_group(torch.device("cpu")) as (mesh, _):
        parallel.parallelize(student, cfg, mesh)
        parallel.parallelize(teacher, cfg, mesh)

        def loss_and_grads():
            loss, grads = _loss_and_grads(cfg, step_fn, student, teacher, batch)
            return loss, {k: g.full_tensor() for k, g in grads.items()}

        eager_loss, eager_grads = loss_and_grads()
        with pytest.raises(ConfigError, match="train.compile: 'graphs' .* FSDP2.*train.compile=regional"):
            CompiledModels([student, teacher], "train.compile", "graphs")
        assert "forward" not in student.layers[0].__dict__ and student.gradient_checkpointing
        compiled = CompiledModels([student, teacher], "train.compile", "regional")
        try:
            loss, grads = loss_and_grads()
            assert compiled.active and compiled.failure is None
        finally:
            compiled.uncompile()
    loss_gap, grad_gap = _max_gaps(loss, grads, eager_loss, eager_grads)
    assert loss_gap <= LOSS_TOL and grad_gap <= GRAD_TOL


def test_graphs_off_cuda_runs_regional_and_says_so_once(monkeypatch, capsys):
    monkeypatch.setitem(COMPILE_OPTIONS, "backend", BACKEND)
    monkeypatch.setattr(compiled_module, "_NOTES", set())
    _, _, student, _ = _models("sim_pretrain")
    first = CompiledModels([student], "train.compile", "graphs")
    second = CompiledModels([student], "train.compile", "graphs")
    try:
        assert first.requested == "graphs" and first.mode == second.mode == "regional" and first.active
    finally:
        second.uncompile()
        first.uncompile()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "simforcing: train.compile: 'graphs' captures CUDA graphs, which need a CUDA device; on cpu it runs as "
        "'regional' (each layer compiled, no CUDA graphs)")


def _record_layer0(model: torch.nn.Module) -> list:
    """[(what the compiled function returned, what the layer call returned)] of each call of model.layers[0]."""
    layer, calls = model.layers[0], []
    fn = layer.forward.fn

    def record(*args, **kwargs):
        calls.append([fn(*args, **kwargs)])
        return calls[-1][0]

    layer.forward.fn = record
    layer.register_forward_hook(lambda module, args, out: calls[-1].append(out))
    return calls


def test_the_graphs_branches_on_a_cpu(monkeypatch, capsys):
    """What "graphs" adds to "regional", run on a CPU where no CUDA graph can be captured (the device check answered
    yes, the reduce-overhead mode left out): each step begins with cudagraph_mark_step_begin; a layer call that needs
    no backward (the frozen teacher's, under no_grad or not) returns copies of the compiled function's outputs (out of
    the graphs' pool), a call with gradients (the student's) its outputs themselves; the step's numbers are eager's."""
    monkeypatch.setitem(COMPILE_OPTIONS, "backend", BACKEND)
    monkeypatch.setattr(compiled_module, "GRAPHS_MODE", None)
    monkeypatch.setattr(compiled_module, "_on_cuda", lambda modules: True)
    marks = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    torch.set_num_threads(1)
    cfg, step_fn, student, teacher = _models("simforcing", "--model.gradient_checkpointing=true")
    batch = latent_batch(cfg, 2, torch.device("cpu"))
    eager_loss, eager_grads = _loss_and_grads(cfg, step_fn, student, teacher, batch)
    compiled = CompiledModels([student, teacher], "train.compile", "graphs")
    try:
        assert compiled.mode == "graphs" and compiled.active
        student_calls, teacher_calls = _record_layer0(student), _record_layer0(teacher)
        teacher_args = []
        teacher.layers[0].register_forward_pre_hook(lambda module, args: teacher_args.append(args))
        loss, grads = compiled.run(lambda: _loss_and_grads(cfg, step_fn, student, teacher, batch))
        compiled.run(lambda: teacher.layers[0](*teacher_args[0]))  # the frozen layer with gradients on: no backward
    finally:
        compiled.uncompile()
    assert marks == [1, 1] and capsys.readouterr().err == ""
    assert len(student_calls) == 1 and len(teacher_calls) == 2
    for raw, returned in teacher_calls:  # no_grad, then a frozen module's call with gradients on: copies
        assert all(torch.equal(r, c) and r.untyped_storage().data_ptr() != c.untyped_storage().data_ptr()
                   for r, c in zip(raw, returned) if r is not None)
    (raw, returned), = student_calls
    assert returned is raw
    loss_gap, grad_gap = _max_gaps(loss, grads, eager_loss, eager_grads)
    assert loss_gap <= LOSS_TOL and grad_gap <= GRAD_TOL


def _broken(gm, example_inputs):  # what a missing C++ compiler or an inductor bug looks like at the first call
    raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\n  (a long compiler traceback)")


@pytest.mark.parametrize("mode", ["module", "regional"])  # ("graphs" on a CPU is "regional")
def test_a_compiler_failure_falls_back_to_eager_with_one_warning(mode, monkeypatch, capsys):
    cfg = _cfg("sim_pretrain", "--model.gradient_checkpointing=true")
    student = bench_model(cfg, torch.device("cpu")).train()
    batch = latent_batch(cfg, 2, torch.device("cpu"))
    eager_loss, eager_grads = _loss_and_grads(cfg, METHODS["sim_pretrain"], student, None, batch)
    monkeypatch.setitem(COMPILE_OPTIONS, "backend", _broken)
    torch._dynamo.reset()  # graphs compiled by earlier tests in this process would be reused, never reaching _broken
    compiled = CompiledModels([student], "train.compile", mode)
    assert compiled.active
    calls = {"reset": 0}

    def attempt():
        return _loss_and_grads(cfg, METHODS["sim_pretrain"], student, None, batch)

    loss, grads = compiled.run(attempt, reset=lambda: calls.update(reset=calls["reset"] + 1))
    err = capsys.readouterr().err
    assert loss == eager_loss and all(torch.equal(grads[k], g) for k, g in eager_grads.items())
    assert calls["reset"] == 1 and not compiled.active and student._compiled_call_impl is None
    assert "forward" not in student.layers[0].__dict__ and student.gradient_checkpointing is True
    assert err.count("simforcing: train.compile: compilation failed") == 1 and "Traceback" not in err
    assert "continuing without it" in err and "No working C++ compiler" in err
    compiled.run(attempt)  # later steps: eager, no second warning
    assert capsys.readouterr().err == ""


def test_regional_needs_layers_and_an_unknown_mode_is_named():
    with pytest.raises(ConfigError, match="sample.compile: 'regional' compiles each layer of model.layers; a Linear "
                                          "has none; use sample.compile=module"):
        CompiledModels([torch.nn.Linear(2, 2)], "sample.compile", "regional")
    with pytest.raises(ConfigError, match="train.compile: got 'fast'; expected one of off, module, regional, graphs"):
        CompiledModels([], "train.compile", "fast")
    assert CompiledModels([torch.nn.Linear(2, 2)], "train.compile", False).mode == "off"


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
@pytest.mark.parametrize("setting", ["true", "graphs"])
def test_compiled_run_resumes_exactly(setting, tiny, tmp_path, monkeypatch, capsys):  # noqa: F811
    """A compiled stage-1 run stopped at step 3 and resumed (compiled again) logs exactly the losses of an
    uninterrupted compiled run, and ends at the same weights (bit for bit: the rotary tables are made outside the
    compiled graph, so a process's first step compiles the graph of every later step — before, the resumed run's
    first step ran another graph and its weights differed by rounding while the logged losses agreed). With inductor,
    whole modules (`true`, as before the modes) and "graphs", which on this CPU runs each layer compiled ("regional")
    and says so once."""
    from test_train import _raise_sigterm_at

    from simforcing.runs.checkpoint import load_checkpoint
    torch.set_num_threads(1)
    compiled_module._NOTES.discard("train.compile")  # as in a fresh process: the "graphs" line not printed yet
    cfg = tiny_cfg(*tiny, "--train.max_steps=6", "--train.ckpt_every=10", f"--train.compile={setting}",
                   "--train.threads=1")
    full = train_run(cfg, tmp_path / "full", "pretrain", progress=False)
    assert full["state"] == "finished"
    err = capsys.readouterr().err
    assert "compilation failed" not in err
    assert err.count("'graphs' captures CUDA graphs, which need a CUDA device; on cpu it runs as 'regional'") == \
        (setting == "graphs")
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
@pytest.mark.parametrize("mode", ["module", "regional", "graphs"])
def test_compiled_sampler_agrees_with_eager(mode, monkeypatch):
    """The guided sampler at (1, 2, 0.6) — the simulation rollout, the CFG pair (batch 2) beside the batch-1 calls, the
    Euler steps — with its network compiled gives the eager latents to float rounding (aot_eager: the same capture as
    inductor's; the gap measured on the training step above holds for these forwards), and the model's weights are
    untouched. "graphs": its branches as on CUDA (the device check answered yes, reduce-overhead left out): a
    sampler call marks a new CUDA-graph step and every layer's outputs are copies."""
    from simforcing.sample import GuidedSampler

    monkeypatch.setitem(COMPILE_OPTIONS, "backend", BACKEND)
    marks = []
    if mode == "graphs":
        monkeypatch.setattr(compiled_module, "GRAPHS_MODE", None)
        monkeypatch.setattr(compiled_module, "_on_cuda", lambda modules: True)
        monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    torch.set_num_threads(1)
    cfg, model, vae, batch = _sampler_setup(False)
    eager = GuidedSampler(model, vae, cfg, n_sim=1, n_real=2, w=0.6)(batch, torch.Generator().manual_seed(4))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    cfg.sample.compile = mode
    sampler = GuidedSampler(model, vae, cfg, n_sim=1, n_real=2, w=0.6)
    try:
        assert sampler.compiled.active and sampler.compiled.mode == mode
        out = sampler(batch, torch.Generator().manual_seed(4))
        again = sampler(batch, torch.Generator().manual_seed(4))
        assert sampler.compiled.failure is None
    finally:
        sampler.compiled.uncompile()
    scale = eager.real_latents.abs().max().item()
    gap = (out.real_latents - eager.real_latents).abs().max().item() / scale
    print(f"sampler {mode} {BACKEND}: latent gap {gap:.2e}")
    assert gap <= GRAD_TOL
    assert torch.equal(again.real_latents, out.real_latents) and out.forwards == eager.forwards
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert marks == ([1, 1] if mode == "graphs" else [])


@torch.no_grad()
@pytest.mark.parametrize("mode", ["module", "regional"])
def test_a_sampler_compile_failure_samples_eagerly_on_the_same_noise(mode, monkeypatch, capsys):
    from simforcing.sample import GuidedSampler

    cfg, model, vae, batch = _sampler_setup(False)
    gen = torch.Generator().manual_seed(9)
    eager = GuidedSampler(model, vae, cfg, n_sim=1, n_real=2, w=0.6)(batch, gen)
    monkeypatch.setitem(COMPILE_OPTIONS, "backend", _broken)
    torch._dynamo.reset()  # graphs compiled by earlier tests in this process would be reused, never reaching _broken
    cfg.sample.compile = mode
    sampler = GuidedSampler(model, vae, cfg, n_sim=1, n_real=2, w=0.6)
    out = sampler(batch, torch.Generator().manual_seed(9))  # the failed attempt drew noise: restored, drawn again
    err = capsys.readouterr().err
    assert torch.equal(out.real_latents, eager.real_latents) and not sampler.compiled.active
    assert err.count("simforcing: sample.compile: compilation failed") == 1 and "Traceback" not in err
    assert model._compiled_call_impl is None and "forward" not in model.layers[0].__dict__


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
