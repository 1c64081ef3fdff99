"""Benchmark section ``compile`` (opt-in: ``--sections compile``): what ``train.compile`` buys and costs.

For each model variant (the preset, and with a 1×1 patch: ``model.patch_size`` (1, 1, 1), four times the tokens —
docs/notebook/faithful.md's capacity lever) and each thread count (1 and 2): a stage-1 step (``sim_pretrain``, batch 16 as
the demo's stage 1) and a stage-2 step (``simforcing``, batch 8 as the demo's stage 2) — ``training.step.train_step``
with its AdamW update — eager and compiled (``training.compiled``) on two copies of the same model, timed in turns;
the first compiled step's wall time (compiling its forward and backward, from inductor's cache as it stands: cold on
a fresh machine), and the steps after which compiling has paid for itself. The sampler's network call (one forward
of one sample under no_grad, and the batched CFG pair) eager against compiled likewise. Not in the default sections:
compiling takes minutes on a CPU.

Section ``precision`` (opt-in: ``--sections precision``, seconds): the same two training steps (the preset's model)
in fp32 against bf16 autocast (``train.mixed_precision``), at 1 and 2 threads, each on its own model copy with the
same weights, timed in turns — whether a CPU's bf16 units (AVX512-BF16, AMX) pay at the demo's sizes.
"""

from __future__ import annotations

import copy
import statistics
import time
from typing import Callable

import torch

from simforcing.bench.inputs import bench_model, latent_batch
from simforcing.bench.measure import time_round_robin
from simforcing.bench.options import BenchOptions
from simforcing.config import Config
from simforcing.methods import METHODS, ModelInputs, method_preset
from simforcing.models.weights import frozen_copy
from simforcing.training.compiled import CompiledModels
from simforcing.training.optim import build_optimizer
from simforcing.training.step import train_step

STEPS = (("sim_pretrain", 16, 2000), ("simforcing", 8, 600))  # (method, batch, the demo's steps)


def _variants(cfg: Config) -> list[tuple[str, Config]]:
    one = copy.deepcopy(cfg)
    one.model.patch_size = (1, 1, 1)
    return [("preset", cfg), ("patch 1x1", one)]


def _trainer(cfg: Config, method: str, batch: int, device: torch.device):
    """A step closure over its own model copy (same weights for every copy: same seed)."""
    mcfg = copy.deepcopy(cfg)
    if method == "sim_pretrain":
        mcfg.train.method = method
    else:
        method_preset(mcfg, method)
    student = bench_model(mcfg, device).train()
    teacher = frozen_copy(student) if method != "sim_pretrain" else None
    b = latent_batch(mcfg, batch, device)
    optimizer, _ = build_optimizer(student, mcfg, total_steps=10_000)
    params = [p for p in student.parameters() if p.requires_grad]
    gen = torch.Generator(device=device)
    count = {"i": 0}

    def step() -> None:
        count["i"] += 1
        gen.manual_seed(count["i"])
        train_step(METHODS[method], student, teacher, b, mcfg, gen, device, params, optimizer)

    return step, [student, teacher]


def _forward(cfg: Config, batch: int, device: torch.device):
    """The sampler's network call: one forward under no_grad (batch 1: a sample; 2: the batched CFG pair)."""
    model = bench_model(cfg, device)
    b = latent_batch(cfg, batch, device)
    z = b["z_real"]
    tau = torch.full((batch,), 0.5, device=device)
    gate = torch.ones(batch, device=device)
    inputs = ModelInputs(z[:, :, 1:], tau, z[:, :, :1], b["actions"], b["state0"], b["text"], b["text_mask"],
                         cond=b["z_sim"], gate=gate)

    def call() -> None:
        with torch.no_grad():
            inputs.run(model)

    return call, [model]


def _compare(make: Callable, repeats: int, device: torch.device) -> dict:
    """Eager and compiled copies timed in turns (alternating order); compile time = the first compiled call.

    Dynamo's in-memory graphs are dropped first: every comparison compiles afresh (from inductor's on-disk cache as
    it stands), and the guards of the earlier ones (grad mode, thread count, shapes) cannot use up the frames'
    recompile limit — past it dynamo runs a frame eagerly, and the "compiled" copy would be timed eager."""
    torch._dynamo.reset()
    eager, _ = make()
    compiled_fn, modules = make()
    eager()
    compiled = CompiledModels(modules, "bench compile", "module")  # whole modules, as train.compile=true
    t0 = time.perf_counter()
    compiled.run(compiled_fn)
    first = time.perf_counter() - t0
    if not compiled.active:
        return {"failure": compiled.failure}
    compiled_fn()
    te, tc = [], []
    for r in range(repeats):
        for name, fn, into in ((("e", eager, te), ("c", compiled_fn, tc)) if r % 2 == 0 else
                               (("c", compiled_fn, tc), ("e", eager, te))):
            if device.type == "cuda":
                torch.cuda.synchronize()
            s = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            into.append(time.perf_counter() - s)
    e, c = statistics.median(te), statistics.median(tc)
    return {"eager_s": e, "compiled_s": c, "speedup": statistics.median([a / b for a, b in zip(te, tc)]),
            "first_compiled_call_s": first, "break_even_calls": first / (e - c) if e > c else None}


def bench_compile(cfg: Config, device: torch.device, opts: BenchOptions, log: Callable[[str], None]) -> dict:
    threads_before = torch.get_num_threads()
    repeats = max(2, opts.train_repeats // 2)
    rows = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for variant, vcfg in _variants(cfg):
                for method, batch, demo_steps in STEPS:
                    b = batch if opts.mode != "tiny" else 2
                    r = _compare(lambda: _trainer(vcfg, method, b, device), repeats, device)
                    rows.append({"what": f"train {method}", "variant": variant, "threads": threads, "batch": b,
                                 "demo_steps": demo_steps, **r})
                    log(f"compile: {variant}, {threads} thread(s), {method} batch {b}: " + _line(r))
                for batch in (1, 2):
                    r = _compare(lambda: _forward(vcfg, batch, device), repeats * 3, device)
                    rows.append({"what": "sampler forward", "variant": variant, "threads": threads, "batch": batch,
                                 **r})
                    log(f"compile: {variant}, {threads} thread(s), sampler forward batch {batch}: " + _line(r))
    finally:
        torch.set_num_threads(threads_before)
    return {"rows": rows, "repeats": repeats, "torch": torch.__version__}


def bench_precision(cfg: Config, device: torch.device, opts: BenchOptions, log: Callable[[str], None]) -> dict:
    """fp32 against bf16 autocast for the stage-1 and SimForcing steps, 1 and 2 threads (module docstring)."""
    threads_before = torch.get_num_threads()
    repeats = max(2, opts.train_repeats)
    rows = []
    try:
        for method, batch, _ in STEPS:
            b = batch if opts.mode != "tiny" else 2
            steps = {}
            for precision in ("no", "bf16"):
                pcfg = copy.deepcopy(cfg)
                pcfg.train.mixed_precision = precision
                steps[precision] = _trainer(pcfg, method, b, device)[0]
            for threads in (1, 2):
                torch.set_num_threads(threads)
                t = {k: v.median for k, v in time_round_robin(steps, repeats, 2, device).items()}
                rows.append({"what": f"train {method}", "threads": threads, "batch": b, "fp32_s": t["no"],
                             "bf16_s": t["bf16"], "bf16_speedup": t["no"] / t["bf16"]})
                log(f"precision: {threads} thread(s), {method} batch {b}: fp32 {t['no'] * 1e3:.1f} ms, "
                    f"bf16 autocast {t['bf16'] * 1e3:.1f} ms")
    finally:
        torch.set_num_threads(threads_before)
    for r in rows:  # two threads against one, per precision
        one = next(o for o in rows if o["what"] == r["what"] and o["threads"] == 1)
        r["fp32_vs_one_thread"] = one["fp32_s"] / r["fp32_s"]
    return {"rows": rows, "repeats": repeats, "torch": torch.__version__}


def precision_table(p: dict) -> list[str]:
    lines = [f"Training step precision on this CPU (fp32 against bf16 autocast, timed in turns, medians of "
             f"{p['repeats']}):", "",
             "| step | threads | batch | fp32 (ms) | bf16 autocast (ms) | bf16 speed-up | fp32 against 1 thread |",
             "|---|---|---|---|---|---|---|"]
    for r in p["rows"]:
        lines.append(f"| {r['what']} | {r['threads']} | {r['batch']} | {r['fp32_s'] * 1e3:.1f} | "
                     f"{r['bf16_s'] * 1e3:.1f} | {r['bf16_speedup']:.2f}x | {r['fp32_vs_one_thread']:.2f}x |")
    return lines + [""]


def _line(r: dict) -> str:
    if "failure" in r:
        return f"compile failed ({r['failure']})"
    return (f"eager {r['eager_s'] * 1e3:.1f} ms, compiled {r['compiled_s'] * 1e3:.1f} ms ({r['speedup']:.2f}x), "
            f"first compiled call {r['first_compiled_call_s']:.1f} s")


def compile_table(c: dict) -> list[str]:
    lines = [f"Compiled network calls (`train.compile`; eager and compiled copies timed in turns, medians of "
             f"{c['repeats']}):", "",
             "| call | variant | threads | batch | eager (ms) | compiled (ms) | speed-up | first compiled call (s) | "
             "break-even (calls) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in c["rows"]:
        if "failure" in r:
            lines.append(f"| {r['what']} | {r['variant']} | {r['threads']} | {r['batch']} | compile failed: "
                         f"{r['failure']} | | | | |")
            continue
        be = f"{r['break_even_calls']:.0f}" if r["break_even_calls"] is not None else "never"
        lines.append(f"| {r['what']} | {r['variant']} | {r['threads']} | {r['batch']} | {r['eager_s'] * 1e3:.1f} | "
                     f"{r['compiled_s'] * 1e3:.1f} | {r['speedup']:.2f}x | {r['first_compiled_call_s']:.1f} | {be} |")
    return lines + [""]
