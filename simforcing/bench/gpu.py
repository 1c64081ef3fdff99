"""GPU readiness (`simforcing bench --gpu`, `make bench-gpu`): the 5B ``bridge`` preset with random weights on one
CUDA GPU, in bf16 with activation checkpointing, eager against compiled against CUDA graphs, in under 4 minutes.

    simforcing bench --gpu --out FILE.json [--peak-tflops X] [--preset bridge] [overrides]    (+ FILE.md)

What it runs, in this order (``plan_gpu_bench`` writes the schedule into the report before anything runs):

1. ``device``: name, memory, compute capability, the dense bf16 peak (``measure.PEAK_BF16`` by device name, or
   ``--peak-tflops``), and the bf16 matrix-product rate measured on this device (an n×n×n product on random data,
   median of timed calls), the ceiling this code can reach in practice.
2. ``train``: the plain single-process SimForcing step of ``simforcing train`` (what runs without torchrun): bf16
   autocast, per-layer activation checkpointing (``model.gradient_checkpointing``), fp32 student weights with AdamW
   (``train.build_optimizer``), the frozen teacher (``models.weights.frozen_copy``; its linear/conv weights stored in
   bf16 as ``train.teacher_autocast_weights`` makes train store them), gradient clipping — in each ``train.compile``
   mode of :data:`TRAIN_MODES` (``training.compiled``: "off" = eager, "regional" = each layer compiled, "graphs" =
   each layer compiled and captured in CUDA graphs) at the preset's batch (1) and at 8× it, or the largest batch up to
   that the memory plan fits. Each row: its warm-up steps (compiling; "graphs" also records its graphs, 2 steps), then
   forward + backward and the optimizer update timed separately (medians), the peak memory of one whole step
   (``max_memory_allocated``: weights, gradients, optimizer state, activations, the graphs' pool), tokens/s, achieved
   FLOP/s and MFU, the seconds of the warm-up beyond a step (compiling), and how many graphs inductor declined to
   capture (``cudagraph_skips``: 0 when every compiled layer replays as a CUDA graph). A compilation failure falls
   back to eager (one warning) and the row says so.
3. ``sampler``: the sampler (``sample.sampler_for``) at (N_s, N_r, w) = (1, 10, 0.6) and (1, 10, 1) on one sample, in
   each ``sample.compile`` mode of :data:`SAMPLER_MODES`: latency per sample (first-frame encode + simulation + real
   rollout + decode through a Wan2.2-architecture VAE with random weights, ``bench.inputs.bench_vae``) against the
   paper's 2.008 s and 1.245 s, its phases, network evaluations and the network's MFU over the whole latency; with fp32
   weights under bf16 autocast (as ``generate``/``evaluate`` load a run), then (CUDA only, eager) with the weights
   stored in bf16, the cast a deployment could save.
4. ``fsdp``: the FSDP2 path on one process: a process group of world size 1 (NCCL on CUDA, gloo on CPU; a file
   store, no network), ``parallel.parallelize`` of student and teacher, the step as ``train.py`` runs it under FSDP2
   (``training.step``); its loss at the same weights and noise against the plain step's, step time, peak
   memory.

Time: the whole command is planned for :data:`TIME_LIMIT_S` (4 minutes; compiling is most of it: each mode compiles
one graph per layer kind, grad mode and batch, tens of seconds). A row (or section) starts only while its section's
share of that budget (:data:`SECTION_SHARES`, from the start of the command) is not used up; one that cannot is
recorded as skipped, with the seconds used, so the command ends near its budget on a slower machine and says what it
left out. ``--tiny`` (the tests) has no budget.

FLOPs (``models.info.forward_flops``, matmuls, attention dense): a training step's model FLOPs are
``(teacher evaluations + 3 × student evaluations) × forward FLOPs`` (a backward costs two forwards), counted from the
evaluations the step actually made (forward hooks): SimForcing 1 + 3·2 = 7 units per sample, SFT 3. Hardware FLOPs add
the recomputation of every checkpointed student forward (SimForcing 9, SFT 4). MFU = model FLOPs / second / peak.

Memory plan: one step of the plain path holds fp32 student weights, gradients and AdamW moments (16 bytes/param), the
fp32 teacher (4; 2 where its linear weights are stored in bf16, kept at 4 in the plan as a margin) and, during the
optimizer update, the foreach AdamW's temporary (4): 24 bytes/param, more than the activations with checkpointing.
If that does not fit at the preset's batch in the device's memory less a reserve (5 %, at least 4 GiB:
``memory_budget``), the plan keeps fewer layers (the largest count that fits; on an 80 GB H100, 16 of 30) and the
report says so; the large batch is the largest up to 8× the preset's that fits with those layers. An out-of-memory
error in a row is recorded in that row and the run goes on.

Without CUDA the command stops with ``EXIT_NO_DEVICE`` and a named message; ``--device cpu`` runs the same schedule on
the CPU (the test suite does so with a tiny demo model), where no MFU is computed and "graphs" runs as "regional".
"""

from __future__ import annotations

import contextlib
import copy
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Optional

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import simforcing.parallel as parallel
from simforcing.bench.inputs import bench_model, bench_vae, bench_world_model, latent_batch, pixel_batch
from simforcing.bench.measure import machine_info, peak_flops, time_calls
from simforcing.config import Config, ConfigError
from simforcing.methods import METHODS, method_preset
from simforcing.models.info import activation_bytes, forward_flops, parameter_counts, token_counts
from simforcing.models.weights import frozen_copy, store_teacher_for_autocast
from simforcing.runs.loaded import LoadedWorldModel
from simforcing.sample import sampler_for
from simforcing.sampler_batch import SamplerBatch
from simforcing.training.compiled import CompiledModels
from simforcing.training.optim import build_optimizer
from simforcing.training.step import apply_update, clip_gradients, forward_backward
from simforcing.utils import atomic_write_json

SCHEMA = "simforcing-bench-gpu/2"
TIME_LIMIT_S = 240.0  # the whole command on one GPU (issue #55: under 4 minutes)
# the share of TIME_LIMIT_S (from the benchmark's start, after torch's import) by which a section's rows must start
SECTION_SHARES = {"train": 0.55, "sampler": 0.8, "fsdp": 0.9}
TRAIN_MODES = ("off", "graphs", "regional")  # train.compile: eager, CUDA graphs, compiled (the fallback to graphs)
SAMPLER_MODES = ("off", "graphs")  # sample.compile
LARGE_BATCH = 8  # the large batch, in preset batches
# the paper's latency per sample (seconds) at (N_s, N_r, w)
PAPER_LATENCY_S = {(1, 10, 0.6): 2.008, (1, 10, 1.0): 1.245}
GIB = 2 ** 30
# memory the plan leaves free for the CUDA context, the allocator's rounding and fragmentation: the larger of the two
MEMORY_RESERVE_FRACTION, MEMORY_RESERVE_MIN = 0.05, 4 * GIB
# bytes per parameter at the peak of one plain single-process step (see the module docstring)
BYTES_PER_PARAM = {"student": 16, "teacher": 4, "optimizer_temporary": 4}


@dataclass
class GpuPlan:
    """What ``run_gpu_bench`` runs, in order; written into the report before anything runs."""

    preset: str
    num_layers: int  # layers kept (the preset's unless the memory plan cut them)
    preset_layers: int
    batch_size: int  # the preset's per-GPU batch
    train_rows: list  # [(method, batch, train.compile mode)]
    sampler_configs: list  # [(n_sim, n_real, w)]
    sampler_modes: list  # sample.compile modes, each at every sampler config
    train_repeats: int
    sampler_repeats: int
    fsdp_repeats: int
    matmul_size: int
    device_memory_bytes: Optional[int]
    predicted_peak_bytes: int
    memory_budget_bytes: Optional[int]
    layers_note: str = ""
    batch_note: str = ""
    time_limit_s: Optional[float] = TIME_LIMIT_S  # None: no budget (--tiny)
    sections: list = field(default_factory=lambda: ["device", "train", "sampler", "fsdp"])


def bench_config(cfg: Config) -> Config:
    """The benchmark's config: ``cfg`` with bf16 mixed precision and per-layer activation checkpointing."""
    cfg = copy.deepcopy(cfg)
    cfg.train.mixed_precision = "bf16"
    cfg.model.gradient_checkpointing = True
    return cfg.validate()


def predicted_peak_bytes(cfg: Config, params: int, batch: int) -> int:
    """Peak bytes of one plain single-process SimForcing step of ``params`` parameters at ``batch``: the larger of the
    optimizer update (weights, gradients, moments, teacher, foreach temporary: 24 bytes/param) and the forward (the
    same less the gradients and the temporary, plus the bf16 weight copies autocast caches and the activations of
    the student's forward of 2·batch samples)."""
    per = BYTES_PER_PARAM
    update = params * (per["student"] + per["teacher"] + per["optimizer_temporary"])
    forward = params * (per["student"] - 4 + per["teacher"] + 2) + 2 * batch * activation_bytes(cfg, True)
    return int(max(update, forward))


def memory_budget(device_memory: int) -> int:
    """Bytes a step may fill on a device of ``device_memory`` bytes (the rest is the reserve)."""
    return int(device_memory - max(MEMORY_RESERVE_MIN, MEMORY_RESERVE_FRACTION * device_memory))


def plan_gpu_bench(cfg: Config, device_memory: Optional[int], tiny: bool = False) -> GpuPlan:
    """The schedule for ``cfg`` (already through :func:`bench_config`) on a device of ``device_memory`` bytes (None:
    no limit, e.g. the CPU): the most layers whose predicted peak at the preset's batch fits :func:`memory_budget`,
    then the largest batch up to ``LARGE_BATCH`` × the preset's that fits with them (``--tiny``: the preset's batch
    alone)."""
    counts = parameter_counts(cfg)
    total, per_layer, layers = counts["total"], counts["per_layer"], cfg.model.num_layers
    b = cfg.train.batch_size

    def predicted(keep: int, batch: int) -> int:
        return predicted_peak_bytes(cfg, total - (layers - keep) * per_layer, batch)

    budget = memory_budget(device_memory) if device_memory else None
    keep = layers
    while budget is not None and keep > 1 and predicted(keep, b) > budget:
        keep -= 1
    note = "" if keep == layers else (
        f"{layers} layers need {predicted(layers, b) / GIB:.1f} GiB at the peak of a step; {keep} fit in "
        f"{budget / GIB:.1f} of {device_memory / GIB:.1f} GiB")
    large = b if tiny else LARGE_BATCH * b
    while budget is not None and large > b and predicted(keep, large) > budget:
        large -= b
    batch_note = "" if tiny or large == LARGE_BATCH * b else (
        f"batch {LARGE_BATCH * b} needs {predicted(keep, LARGE_BATCH * b) / GIB:.1f} GiB; {large} is the largest "
        "that fits")
    batches = sorted({b, large})
    rows = [("simforcing", batch, mode) for mode in TRAIN_MODES for batch in batches]
    return GpuPlan(preset=cfg.preset, num_layers=keep, preset_layers=layers, batch_size=b, train_rows=rows,
                   sampler_configs=list(PAPER_LATENCY_S), sampler_modes=list(SAMPLER_MODES),
                   train_repeats=1 if tiny else 3, sampler_repeats=1 if tiny else 3, fsdp_repeats=1 if tiny else 2,
                   matmul_size=256 if tiny else 8192, device_memory_bytes=device_memory,
                   predicted_peak_bytes=predicted(keep, max(batches)), memory_budget_bytes=budget, layers_note=note,
                   batch_note=batch_note, time_limit_s=None if tiny else TIME_LIMIT_S)


class Budget:
    """The command's time budget: a section's rows start only while its share of the plan's limit is left."""

    def __init__(self, limit_s: Optional[float], clock: Callable[[], float] = time.perf_counter):
        self.limit_s, self.clock, self.start = limit_s, clock, clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def skip_reason(self, section: str) -> Optional[str]:
        """None while ``section`` may start another row; else why not (the seconds used and the section's share)."""
        if self.limit_s is None:
            return None
        share = SECTION_SHARES[section] * self.limit_s
        used = self.elapsed()
        if used < share:
            return None
        return (f"skipped: {used:.0f} s of the {self.limit_s:.0f} s budget used, past the {share:.0f} s by which "
                f"{section} rows must start")


# ----------------------------------------------------------------------------------------------------------------------
# Arithmetic
# ----------------------------------------------------------------------------------------------------------------------


def step_flop_units(teacher_evals: int, student_evals: int, batch: int, checkpointing: bool) -> tuple[float, float]:
    """(model, hardware) forward units per sample of one training step from the evaluations it made: a teacher
    evaluation is a forward (1), a student one forward + backward (3); checkpointing recomputes each student forward
    in backward (+1, hardware only)."""
    t, s = teacher_evals / batch, student_evals / batch
    return t + 3 * s, t + (4 if checkpointing else 3) * s


def rates(flops: float, seconds: float, peak: Optional[float], measured: Optional[float]) -> dict:
    """Achieved FLOP/s and MFU against the datasheet peak and against the measured matmul rate (None where unknown)."""
    fps = flops / seconds
    return {"flops_per_s": fps, "mfu": fps / peak if peak else None,
            "of_measured_matmul": fps / measured if measured else None}


def resolve_peak(device_name: str, peak_tflops: Optional[float]) -> tuple[Optional[float], str]:
    """(FLOP/s, where it came from): ``--peak-tflops`` when given, else the table entry for the device's name."""
    if peak_tflops is not None:
        if peak_tflops <= 0:
            raise ConfigError(f"--peak-tflops: got {peak_tflops}; expected a positive number (dense bf16 TFLOP/s)")
        return peak_tflops * 1e12, "--peak-tflops"
    value = peak_flops(device_name)
    return value, ("table (measure.PEAK_BF16)" if value else "unknown device: pass --peak-tflops")


# ----------------------------------------------------------------------------------------------------------------------
# Measurements
# ----------------------------------------------------------------------------------------------------------------------


def _memory(device: torch.device) -> dict:
    if device.type != "cuda":
        return {}
    return {"peak_allocated_bytes": int(torch.cuda.max_memory_allocated(device)),
            "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(device))}


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def _free(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def matmul_rate(device: torch.device, n: int, repeats: int = 10) -> float:
    """FLOP/s of an n×n×n bf16 matrix product on random data (median of ``repeats`` after 3 warm-ups)."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    a, b = (torch.randn(n, n, generator=gen).to(device, torch.bfloat16) for _ in range(2))
    secs = time_calls(lambda: a @ b, repeats, 3, device).median
    return 2 * n ** 3 / secs


def device_section(device: torch.device, plan: GpuPlan, peak_tflops: Optional[float]) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak, source = resolve_peak(name, peak_tflops) if device.type == "cuda" else (None, "not a CUDA device")
    out = {"name": name, "peak_bf16_flops": peak, "peak_source": source,
           "matmul_size": plan.matmul_size, "measured_matmul_flops": matmul_rate(device, plan.matmul_size)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        out.update({"total_memory_bytes": int(props.total_memory), "capability": f"{props.major}.{props.minor}",
                    "multiprocessors": props.multi_processor_count, "cuda": torch.version.cuda,
                    "bf16_supported": torch.cuda.is_bf16_supported()})
    return out


def _count_hook(counter: dict, key: str):
    def hook(module, args, kwargs):
        z_t = args[0] if args else kwargs["z_t"]
        counter[key] = counter.get(key, 0) + int(z_t.shape[0])
    return hook


class StepTimer:
    """One training step as ``train.py`` takes it (``training.step``: autocast, the method's step, backward, the
    one clipping, AdamW), callable in its two halves so that both are timed; its network calls in a ``train.compile``
    mode (:meth:`compile`), run as ``TrainStep`` runs them (``CompiledModels.run``: a new CUDA-graph step, the
    fallback to eager)."""

    def __init__(self, student, teacher, cfg: Config, device: torch.device):
        self.student, self.teacher, self.cfg, self.device = student, teacher, cfg, device
        self.optimizer, _ = build_optimizer(student, cfg, total_steps=10_000)
        self.params = [p for p in student.parameters() if p.requires_grad]
        self.gen = torch.Generator(device=device)
        self.seed = 0
        self.compiled = CompiledModels([], "train.compile", "off")

    def compile(self, mode: str) -> CompiledModels:
        """The network calls in ``mode`` from now on (the previous mode's removed, dynamo's graphs and CUDA graph
        pools released: each mode and batch compiles afresh and its peak memory is its own)."""
        self.compiled.uncompile()
        torch._dynamo.reset()
        _free(self.device)
        self.compiled = CompiledModels([self.student, self.teacher], "train.compile", mode)
        return self.compiled

    def fwd_bwd(self, method: str, batch: dict) -> None:
        self.seed += 1
        seed, cfg = self.seed, method_config(self.cfg, method)

        def attempt() -> None:
            self.gen.manual_seed(seed)
            forward_backward(METHODS[method], self.student, self.teacher, batch, cfg, self.gen, self.device)

        self.compiled.run(attempt, reset=lambda: self.optimizer.zero_grad(set_to_none=True))

    def update(self) -> None:
        apply_update(self.params, self.optimizer, None, self.cfg.train.grad_clip)

    def step(self, method: str, batch: dict) -> None:
        self.fwd_bwd(method, batch)
        self.update()

    def close(self) -> None:
        self.compiled.uncompile()
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer.state.clear()
        self.optimizer = None


def method_config(cfg: Config, method: str) -> Config:
    """``cfg`` with ``method``'s preset (a copy)."""
    return method_preset(copy.deepcopy(cfg), method)


def warmup_calls(compiled: CompiledModels) -> int:
    """Untimed calls before timing: 1 (compiling, or the first use of AdamW's state); CUDA graphs 2 (CUDA graph trees
    run a new graph once to warm up, record it at the next call and replay it from the third)."""
    return 2 if compiled.active and compiled.mode == "graphs" else 1


def cudagraph_skips() -> int:
    """Graphs inductor compiled but declined to capture as CUDA graphs so far (its counter; 0 without CUDA)."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])


def compile_fields(compiled: CompiledModels, requested: str, warm: list, steady_s: float, skips_before: int,
                   device: torch.device) -> dict:
    """What a row records of its compile mode: asked and run ("graphs" off CUDA runs as "regional"), a failure that
    fell back to eager, the warm-up calls and their seconds beyond a steady call (compiling, recording graphs), the
    graphs inductor declined to capture (CUDA only)."""
    return {"compile": requested, "compile_mode": "off" if compiled.failure else compiled.mode,
            "compile_failure": compiled.failure, "warmup_calls": len(warm), "warmup_s": warm,
            "compile_s": max(0.0, sum(warm) - len(warm) * steady_s),
            "cudagraph_skips": cudagraph_skips() - skips_before if device.type == "cuda" else None}


def train_row(timer: StepTimer, method: str, b: int, mode: str, repeats: int, fwd_flops: float, tokens: int,
              peak: Optional[float], measured: Optional[float]) -> dict:
    """One method at batch ``b`` with its network calls in ``mode`` (``train.compile``): warm-up steps
    (:func:`warmup_calls`), then ``repeats`` steps with forward + backward and the update timed apart; the peak memory
    of the last step."""
    cfg, device = timer.cfg, timer.device
    batch = latent_batch(cfg, b, device)
    compiled = timer.compile(mode)
    skips = cudagraph_skips()
    warm: list = []  # the first warm-up step also allocates AdamW's state
    while len(warm) < warmup_calls(compiled):  # (a compilation failure: the first step fell back to eager)
        warm += time_calls(lambda: timer.step(method, batch), 1, 0, device).wall
    fb, up, counts = [], [], {}
    for r in range(repeats):
        if r == repeats - 1:
            _reset_peak(device)
        hooks = [] if r else [  # the first timed step counts the step's evaluations (hooks on the root: a few µs)
            timer.student.register_forward_pre_hook(_count_hook(counts, "student"), with_kwargs=True),
            timer.teacher.register_forward_pre_hook(_count_hook(counts, "teacher"), with_kwargs=True)]
        try:
            fb += time_calls(lambda: timer.fwd_bwd(method, batch), 1, 0, device).wall
        finally:
            for h in hooks:
                h.remove()
        up += time_calls(timer.update, 1, 0, device).wall
    mem = _memory(device)
    units, hw_units = step_flop_units(counts.get("teacher", 0), counts.get("student", 0), b,
                                      cfg.model.gradient_checkpointing)
    step_s = statistics.median(f + u for f, u in zip(fb, up))
    fwd_bwd_s = statistics.median(fb)
    flops = units * fwd_flops * b
    row = {"method": method, "batch_size": b, **compile_fields(compiled, mode, warm, step_s, skips, device),
           "repeats": repeats, "fwd_bwd_s": fwd_bwd_s,
           "update_s": statistics.median(up), "step_s": step_s, "step_all_s": [f + u for f, u in zip(fb, up)],
           "teacher_evals": counts.get("teacher", 0), "student_evals": counts.get("student", 0),
           "model_flop_units": units, "hardware_flop_units": hw_units, "model_flops_per_step": flops,
           "tokens_per_s": b * tokens / step_s, "samples_per_s": b / step_s, **mem}
    row.update({k: v for k, v in rates(flops, step_s, peak, measured).items()})
    row["fwd_bwd_mfu"] = flops / fwd_bwd_s / peak if peak else None
    row["hfu"] = hw_units * fwd_flops * b / step_s / peak if peak else None
    return row


def sampler_rows(wm: LoadedWorldModel, batch: SamplerBatch, plan: GpuPlan, mode: str, fwd_flops: float, tokens: int,
                 peak: Optional[float], log: Callable[[str], None], weights: str, budget: Budget) -> list[dict]:
    """Latency per sample of the world model's sampler (``sample.sampler_for``) at each planned (N_s, N_r, w) with
    ``sample.compile`` = ``mode`` (warm-up calls: :func:`warmup_calls`; median of the repeats), its phases and network
    evaluations, against the paper's. A configuration past the sampler's share of the budget: a skipped row."""
    rows = []
    mcfg = copy.deepcopy(wm.cfg)
    mcfg.sample.compile = mode
    wm = replace(wm, cfg=mcfg)
    for n_sim, n_real, w in plan.sampler_configs:
        head = {"weights": weights, "n_sim": n_sim, "n_real": n_real, "w": w, "compile": mode}
        why = budget.skip_reason("sampler")
        if why:
            rows.append({**head, "skipped": why})
            log(f"gpu sampler ({n_sim}, {n_real}, {w:g}), {weights}, sample.compile={mode}: {why}")
            continue
        sampler = sampler_for(wm, n_sim, n_real, w)
        compiled, skips = sampler.compiled, cudagraph_skips()
        gen = torch.Generator(device="cpu")
        warm, timed = [], []
        try:
            while len(warm) < warmup_calls(compiled):
                gen.manual_seed(1234)
                warm.append(sampler(batch, gen).latency)
            for _ in range(plan.sampler_repeats):
                gen.manual_seed(1234)
                timed.append(sampler(batch, gen))
        finally:
            compiled.uncompile()
        lat = statistics.median(r.latency for r in timed)
        phases = {k: statistics.median(r.timings[k] for r in timed) for k in timed[0].timings}
        network_s = phases.get("simulation", 0.0) + phases.get("real", 0.0)
        fwd = timed[0].forwards
        paper = PAPER_LATENCY_S.get((n_sim, n_real, w))
        rows.append({**head, **compile_fields(compiled, mode, warm, lat, skips, batch.first_frame.device),
                     "repeats": plan.sampler_repeats,
                     "latency_s": lat, "latency_all_s": [r.latency for r in timed], "phases_s": phases,
                     "forwards": fwd, "paper_latency_s": paper, "ratio_to_paper": lat / paper if paper else None,
                     "speedup_vs_paper": paper / lat if paper else None, "network_tokens_per_s": fwd * tokens / lat,
                     "network_mfu": fwd * fwd_flops / lat / peak if peak else None,
                     "network_mfu_in_rollouts": fwd * fwd_flops / network_s / peak if peak and network_s > 0 else None,
                     "finite": bool(torch.isfinite(timed[-1].real_video).all())})
        log(f"gpu sampler ({n_sim}, {n_real}, {w:g}), {weights}, sample.compile={mode}: {lat:.3f} s per sample "
            f"({fwd} forwards; paper {paper if paper else '-'} s); "
            + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in phases.items()))
    return rows


@contextlib.contextmanager
def params_in(model: torch.nn.Module, dtype: torch.dtype):
    """The model's parameters (not its buffers) in ``dtype`` inside the block, each back in its own dtype after it
    (the teacher's linear weights stay in the bf16 ``store_teacher_for_autocast`` gave them, for the FSDP2 section)."""
    before = [(p, p.dtype) for p in model.parameters()]
    for p, _ in before:
        p.data = p.data.to(dtype)
    try:
        yield model
    finally:
        for p, was in before:
            p.data = p.data.to(was)


def sampler_section(student, spare, cfg: Config, device: torch.device, plan: GpuPlan, fwd_flops: float, tokens: int,
                    peak: Optional[float], log: Callable[[str], None], budget: Budget) -> dict:
    """The sampler as ``simforcing generate``/``evaluate`` run it (fp32 weights, bf16 autocast on CUDA) in each planned
    ``sample.compile`` mode, then (eager) with the weights stored in bf16 (``spare``, a model of the same
    architecture, converted and restored): what a deployment that keeps bf16 weights would gain (no fp32 -> bf16 cast
    of the weights in every forward)."""
    t0 = time.perf_counter()
    vae = bench_vae(cfg, device)
    out: dict = {"vae": getattr(vae, "kind", type(vae).__name__), "vae_dtype": "float32",
                 "vae_build_s": time.perf_counter() - t0, "vae_parameters": sum(p.numel() for p in vae.parameters()),
                 "batch_size": 1}
    batch = pixel_batch(cfg, 1, device)
    student.eval()
    wm = bench_world_model(cfg, student, vae, device)
    out["configs"] = []
    for mode in plan.sampler_modes:
        torch._dynamo.reset()  # each mode compiles afresh; CUDA graph pools of the last one released
        _free(device)
        out["configs"] += sampler_rows(wm, batch, plan, mode, fwd_flops, tokens, peak, log,
                                       "fp32, bf16 autocast" if device.type == "cuda" else "fp32", budget)
    torch._dynamo.reset()
    if device.type == "cuda":  # off CUDA the sampler does not autocast, so bf16 weights would not run
        try:
            with params_in(spare, torch.bfloat16):
                out["bf16_weights"] = sampler_rows(replace(wm, model=spare), batch, plan, "off", fwd_flops, tokens,
                                                   peak, log, "bf16, bf16 autocast", budget)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:  # an extra: its failure is recorded, not fatal
            out["bf16_weights"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
            log(f"gpu sampler with bf16 weights: {out['bf16_weights']['error']}")
    return out


@contextlib.contextmanager
def single_process_group(device: torch.device):
    """A process group of world size 1 in this process (NCCL on CUDA, gloo otherwise) on a file store, and its
    device mesh; destroyed on exit. Refused when a group already exists (under torchrun)."""
    if dist.is_initialized():
        raise ConfigError("bench --gpu: a process group already exists (torchrun?); the GPU benchmark runs as one "
                          "plain process and builds its own group of world size 1")
    backend = "nccl" if device.type == "cuda" else "gloo"
    with tempfile.TemporaryDirectory(prefix="simforcing-pg-") as tmp:
        store = dist.FileStore(os.path.join(tmp, "store"), 1)
        kwargs = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend, store=store, rank=0, world_size=1, **kwargs)
        try:
            yield init_device_mesh(device.type, (1,)), backend
        finally:
            dist.destroy_process_group()


def loss_and_grad_norm(student, teacher, cfg: Config, batch: dict, device: torch.device, seed: int) -> tuple:
    """(loss, global gradient norm) of one SimForcing forward + backward at noise ``seed``; gradients cleared after."""
    gen = torch.Generator(device=device).manual_seed(seed)
    loss, _ = forward_backward(METHODS["simforcing"], student, teacher, batch, method_config(cfg, "simforcing"), gen,
                               device)
    params = [p for p in student.parameters() if p.requires_grad]
    norm = clip_gradients(params, 0.0)  # max_norm <= 0: measured, not clipped
    for p in params:
        p.grad = None
    return float(loss.detach()), norm


def _relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def fsdp_section(student, teacher, cfg: Config, device: torch.device, plan: GpuPlan, fwd_flops: float, tokens: int,
                 peak: Optional[float], measured: Optional[float], log: Callable[[str], None]) -> dict:
    """The same student and teacher sharded by ``parallel.parallelize`` on a one-process mesh: the SimForcing loss and
    gradient norm at the same weights and noise as without FSDP, then timed steps."""
    b = plan.batch_size
    batch = latent_batch(cfg, b, device)
    student.train()
    loss_plain, norm_plain = loss_and_grad_norm(student, teacher, cfg, batch, device, seed=777)
    _free(device)
    with single_process_group(device) as (mesh, backend):
        t0 = time.perf_counter()
        parallel.parallelize(student, cfg, mesh)
        parallel.parallelize(teacher, cfg, mesh)
        shard_s = time.perf_counter() - t0
        sharded = all(hasattr(p, "full_tensor") for p in student.parameters())
        loss_fsdp, norm_fsdp = loss_and_grad_norm(student, teacher, cfg, batch, device, seed=777)
        timer = StepTimer(student, teacher, cfg, device)
        row = train_row(timer, "simforcing", b, "off", plan.fsdp_repeats, fwd_flops, tokens, peak, measured)
        timer.close()
        dtype = parallel.mixed_precision_dtype(cfg, device)
    rel, rel_norm = _relative(loss_fsdp, loss_plain), _relative(norm_fsdp, norm_plain)
    log(f"gpu fsdp2 ({backend}, world size 1): step {row['step_s']:.3f} s; loss {loss_fsdp:.6g} vs {loss_plain:.6g} "
        f"without FSDP (relative difference {rel:.1e}), gradient norm {norm_fsdp:.6g} vs {norm_plain:.6g} ({rel_norm:.1e})")
    return {"backend": backend, "world_size": 1, "param_dtype": str(dtype).replace("torch.", ""),
            "reduce_dtype": "float32", "parameters_are_dtensors": sharded, "shard_s": shard_s,
            "loss_plain": loss_plain, "loss_fsdp": loss_fsdp, "loss_relative_difference": rel,
            "grad_norm_plain": norm_plain, "grad_norm_fsdp": norm_fsdp, "grad_norm_relative_difference": rel_norm,
            "step": row}


# ----------------------------------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------------------------------


def _oom_message(e: BaseException) -> str:
    return f"out of memory: {str(e).splitlines()[0]}"


def _planned_config(cfg: Config, device: torch.device, tiny: bool) -> tuple[Config, GpuPlan]:
    """The benchmark's config (``bench_config``) with the plan's layer count, and the plan."""
    cfg = bench_config(cfg)
    mem = int(torch.cuda.get_device_properties(device).total_memory) if device.type == "cuda" else None
    plan = plan_gpu_bench(cfg, mem, tiny)
    if plan.num_layers != cfg.model.num_layers:
        cfg.model.num_layers = plan.num_layers
        cfg.validate()
    return cfg, plan


def _build_models(cfg: Config, device: torch.device, log: Callable[[str], None]) -> tuple:
    """(student, frozen teacher, forward FLOPs per sample, tokens per sample, the report's "model" block)."""
    s0 = time.perf_counter()
    fwd_flops = forward_flops(cfg)["total"]
    tokens = token_counts(cfg)["joint"]
    _reset_peak(device)
    student = bench_model(cfg, device).train()
    teacher = frozen_copy(student)
    cast = store_teacher_for_autocast(teacher, cfg, device)  # as `simforcing train` stores it (training.loop)
    build_s = time.perf_counter() - s0
    params = sum(p.numel() for p in student.parameters())
    model = {"preset": cfg.preset, "num_layers": cfg.model.num_layers, "parameters": params,
             "tokens_per_sample": tokens, "forward_flops_per_sample": fwd_flops,
             "dtype": "fp32 weights, bf16 autocast", "gradient_checkpointing": True,
             "teacher": "frozen copy, linear/conv weights in bf16" if cast else "frozen fp32 copy", "build_s": build_s,
             **_memory(device)}
    log(f"gpu: {cfg.preset} with {cfg.model.num_layers} layers, {params / 1e9:.3f} B parameters, {tokens} tokens per "
        f"sample, {fwd_flops / 1e12:.3f} TFLOP per forward; built in {build_s:.1f} s")
    return student, teacher, fwd_flops, tokens, model


def train_section(student, teacher, cfg: Config, device: torch.device, plan: GpuPlan, fwd_flops: float, tokens: int,
                  peak: Optional[float], measured: Optional[float], log: Callable[[str], None],
                  budget: Budget) -> dict:
    """Every planned (method, batch, compile mode) row; an out-of-memory error is recorded in its row and the next
    one runs; a row past the training section's share of the budget is recorded as skipped."""
    rows = []
    timer = StepTimer(student, teacher, cfg, device)
    for method, b, mode in plan.train_rows:
        head = {"method": method, "batch_size": b, "compile": mode}
        what = f"gpu train {method} batch {b} train.compile={mode}"
        why = budget.skip_reason("train")
        if why:
            rows.append({**head, "skipped": why})
            log(f"{what}: {why}")
            continue
        try:
            row = train_row(timer, method, b, mode, plan.train_repeats, fwd_flops, tokens, peak, measured)
        except torch.cuda.OutOfMemoryError as e:
            timer.optimizer.zero_grad(set_to_none=True)
            timer.compile("off")  # the graphs' pool released
            row = {**head, "error": _oom_message(e)}
            log(f"{what}: {row['error']}")
        else:
            log(f"{what}: step {row['step_s']:.3f} s (fwd+bwd {row['fwd_bwd_s']:.3f} s, update {row['update_s']:.3f} "
                f"s), {row['tokens_per_s']:.0f} tokens/s, MFU {row['mfu']}, peak "
                f"{row.get('peak_allocated_bytes', 0) / GIB:.1f} GiB, warm-up {sum(row['warmup_s']):.1f} s"
                + (f"; compilation failed: {row['compile_failure']}" if row["compile_failure"] else ""))
        rows.append(row)
    timer.close()
    del timer
    torch._dynamo.reset()
    _free(device)
    return {"predicted_peak_bytes": plan.predicted_peak_bytes, "rows": rows}


def run_gpu_bench(cfg: Config, device: torch.device, out_path, peak_tflops: Optional[float] = None,
                  tiny: bool = False, log: Callable[[str], None] = print) -> dict:
    """Every section of the plan on ``device``, rows past their section's share of the time budget skipped; the
    report (written to ``out_path`` after each section, so a run cut short keeps what it measured). Returns the
    results."""
    cfg, plan = _planned_config(cfg, device, tiny)
    budget = Budget(plan.time_limit_s)
    results: dict = {"schema": SCHEMA, "machine": machine_info(device, torch.get_num_threads()),
                     "plan": asdict(plan), "time_limit_s": plan.time_limit_s, "section_seconds": {}}
    for note in (plan.layers_note, plan.batch_note):
        if note:
            log(f"gpu: {note}")

    def save(section: str, s0: float) -> None:
        results["section_seconds"][section] = time.perf_counter() - s0
        results["seconds"] = budget.elapsed()
        results["within_time_limit"] = plan.time_limit_s is None or results["seconds"] <= plan.time_limit_s
        atomic_write_json(out_path, results)
        os.chmod(out_path, 0o644)

    s0 = time.perf_counter()
    dev = results["device"] = device_section(device, plan, peak_tflops)
    peak, measured = dev["peak_bf16_flops"], dev["measured_matmul_flops"]
    log(f"gpu: {dev['name']}, peak {peak / 1e12 if peak else '?'} TFLOP/s ({dev['peak_source']}), measured bf16 "
        f"matmul {measured / 1e12:.1f} TFLOP/s")
    save("device", s0)

    s0 = time.perf_counter()
    student, teacher, fwd_flops, tokens, results["model"] = _build_models(cfg, device, log)
    results["train"] = train_section(student, teacher, cfg, device, plan, fwd_flops, tokens, peak, measured, log,
                                     budget)
    save("train", s0)

    s0 = time.perf_counter()
    try:
        results["sampler"] = sampler_section(student, teacher, cfg, device, plan, fwd_flops, tokens, peak, log,
                                             budget)
    except torch.cuda.OutOfMemoryError as e:
        results["sampler"] = {"error": _oom_message(e)}
    torch._dynamo.reset()
    _free(device)
    save("sampler", s0)

    s0 = time.perf_counter()
    _reset_peak(device)
    why = budget.skip_reason("fsdp")
    try:
        results["fsdp"] = {"skipped": why} if why else \
            fsdp_section(student, teacher, cfg, device, plan, fwd_flops, tokens, peak, measured, log)
    except torch.cuda.OutOfMemoryError as e:
        results["fsdp"] = {"error": _oom_message(e)}
    if why:
        log(f"gpu fsdp2: {why}")
    save("fsdp", s0)
    return results
