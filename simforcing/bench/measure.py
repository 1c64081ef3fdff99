"""The benchmark's clocks and memory: repeated timed calls on the wall clock and this process's CPU time (device
synchronised around each, ``simforcing.timing``), peak tensor memory, the time spent inside a model's forwards, the
machine, and the FLOPs split of one forward."""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch
from torch.profiler import ProfilerActivity, profile

from simforcing.config import Config
from simforcing.models.info import forward_flops
from simforcing.timing import synchronize

# dense bf16 tensor-core peak (FLOP/s, the datasheets' sparse figures halved) by a substring of the CUDA device name,
# case-insensitive; the first match wins, so the PCIe/NVL parts come before the SXM names they contain. Override:
# `bench --gpu --peak-tflops X`.
PEAK_BF16 = (("H200 NVL", 835e12), ("H200", 989e12), ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12),
             ("H800", 989e12), ("A100", 312e12), ("A800", 312e12), ("L40S", 362e12), ("L4", 121e12),
             ("A10G", 70e12), ("A10", 125e12), ("RTX 4090", 165e12))
# (Times field, key suffix): the wall clock (the headline) and this process's CPU time
STATS = (("wall", ""), ("cpu", "_cpu"))


@dataclass
class Times:
    """Seconds of repeated calls: wall clock and this process's CPU time (all its threads). On a CPU device with one
    torch thread the CPU time is the work done, nearly unaffected by other processes loading the machine (not by the
    host slowing the whole VM down); on CUDA only the wall clock means anything."""

    wall: list = field(default_factory=list)
    cpu: list = field(default_factory=list)

    def __iadd__(self, other: "Times") -> "Times":
        self.wall += other.wall
        self.cpu += other.cpu
        return self

    @property
    def median(self) -> float:
        return float(statistics.median(self.wall))


def time_call(fn: Callable[[], object], device: torch.device, into: Optional[Times] = None):
    """Run ``fn`` once (device synchronised before and after); its times are appended to ``into``. Returns fn()."""
    synchronize(device)
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    synchronize(device)
    if into is not None:
        into.wall.append(time.perf_counter() - w0)
        into.cpu.append(time.process_time() - c0)
    return out


def time_calls(fn: Callable[[], object], repeats: int, warmup: int, device: torch.device) -> Times:
    """Times of ``repeats`` calls of ``fn`` after ``warmup`` untimed calls."""
    return time_round_robin({"fn": fn}, repeats, warmup, device)["fn"]


def time_round_robin(fns: dict[str, Callable[[], object]], repeats: int, warmup: int,
                     device: torch.device) -> dict[str, Times]:
    """Times of ``repeats`` rounds that call every function once, in turn, after ``warmup`` untimed rounds: each
    function is timed over the same stretch of time, so their medians compare even while the machine's speed drifts
    (on this VM the same forward takes 13 ms for some seconds and 23 ms for the next, in CPU time too)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {k: Times() for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            time_call(fn, device, times[k])
    return times


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (the profiler's native start/stop lines); restored on exit, errors included."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes of tensors allocated by ``fn`` above what was live before the call.

    CUDA: ``torch.cuda.max_memory_allocated``. CPU: the running sum of the profiler's allocation/free events in time
    order (each event's self memory), whose maximum is the peak of live tensor bytes.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - base)
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    live = peak = 0
    for ev in sorted(prof.events(), key=lambda e: e.time_range.start):
        live += ev.self_cpu_memory_usage
        peak = max(peak, live)
    return int(peak)


def machine_info(device: torch.device, threads: int) -> dict:
    cpu_model = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    info = {"cpu_count": os.cpu_count(), "cpu_usable": usable, "cpu_model": cpu_model,
            "torch_threads": threads, "torch": torch.__version__, "python": platform.python_version(),
            "platform": platform.platform(), "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({cpu_model})",
            "load_average_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    if device.type == "cuda":
        info["cuda"] = torch.version.cuda
        info["peak_bf16_flops"] = peak_flops(info["device_name"])
    return info


def peak_flops(device_name: str) -> Optional[float]:
    for key, value in PEAK_BF16:
        if key.lower() in device_name.lower():
            return value
    return None


class ForwardClock:
    """Wall-clock seconds spent inside ``model``'s forward calls while ``active`` (forward pre/post hooks), so a
    sampler's latency splits into network time and everything else."""

    def __init__(self, model: torch.nn.Module, device: torch.device):
        self.device, self.active, self.seconds, self._t0 = device, False, 0.0, 0.0
        self._hooks = [model.register_forward_pre_hook(self._pre), model.register_forward_hook(self._post)]

    def _pre(self, module, args) -> None:
        if self.active:
            synchronize(self.device)
            self._t0 = time.perf_counter()

    def _post(self, module, args, output) -> None:
        if self.active:
            synchronize(self.device)
            self.seconds += time.perf_counter() - self._t0

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()


def flops_split(cfg: Config) -> dict:
    """FLOPs of one forward (``models.info.forward_flops``): total, joint attention and the rest."""
    f = forward_flops(cfg)
    return {"total": f["total"], "attention": f["joint_attention"], "other": f["total"] - f["joint_attention"]}
