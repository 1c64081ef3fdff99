"""``simforcing bench``: sampler latency against the ideal work, training-step cost, data throughput, scaling.

    simforcing bench [--preset demo] [--quick] --out FILE.json      (+ FILE.md tables, FILE_scaling.png)

Models are built from the preset with random weights (``build_world_model``; the zero-initialised output head and
condition projections P_j get small random values so that every branch changes the output); no checkpoint and no
dataset are needed. Sections (``--sections``, all by default):

1. ``sampler`` — for each (N_s, N_r, w): latency per sample (SPEC §8: first-frame encode + simulation + real rollout
   + decode; one warm-up call excluded, median of 5–25 repeats — a cheap configuration repeats until its repetitions
   span 3 s —, wall clock around the whole call), the per-sample
   network evaluations it ran (``forwards``) and the minimal ones (w = 0: N_r; w = 1: N_s + N_r; else N_s + 2·N_r),
   the median time of one single-sample forward (timed right before and after each call of that configuration),
   and ``ratio = latency / (minimal × forward + decode)``. The forward is a plain ``model(...)`` call; the sampler's
   steps are cheaper (the step context computes the text/action work once per batch, ``WorldModel.step_context``;
   its cost and a step's cost are reported as ``step_context_s`` and ``forward_step_s``), and a batched pair forward
   of 2 samples may cost less than 2 single forwards, so the ratio can be < 1. Beside it the same
   configuration through :func:`reference_sample`, a plain loop as the authors' code runs it (simulation rollout
   always, both CFG branches as two sequential forwards, P_j(c) recomputed in every forward), its latency, the
   speed-up of ours, and the largest pixel difference between the two outputs (same noise: they must agree). The
   time spent inside network calls (forward hooks) splits our latency into network work and everything else.
2. ``train`` — median time of one training step (step function + backward; and with the AdamW update) and the peak
   memory of one step for ``sft`` and ``simforcing`` on the same latent batch (teacher in no-grad), their ratio, the
   per-step network evaluations counted with hooks, and the ideal ratio from forward/backward counts (a backward
   costs 2 forwards: SFT 1 + 2 = 3 units, SimForcing 1 teacher + 2 student forwards + 2 student backwards = 7).
3. ``data`` — windows per second through a DataLoader with 0/1/2 workers, from video decoding
   (PairedWindowDataset, a fresh dataset each pass, so every episode is decoded once per pass) and from the latent
   cache (LatentWindowDataset), on a small dataset written to a temporary folder.
4. ``scaling`` — one forward's time, peak memory and FLOPs (``models.info.forward_flops``: joint attention vs. the
   rest) against the number of frames and the resolution at the preset's width; a PNG plot.
5. ``gpu`` — with CUDA only: bf16, the 5B preset (fewer layers if it does not fit), training and sampling tokens/s
   and model-FLOPs utilisation against the device's dense bf16 peak; on CPU ``{"skipped": "no CUDA device"}``.

Clocks: the wall clock (the headline: ``latency_s``, ``ratio``, ``speedup``) and this process's CPU time (``*_cpu``;
with one torch thread the work done, less disturbed by other processes loading the machine, whose load average is
recorded in ``machine``). Ratios and speed-ups are medians over repetitions of per-repetition ratios of calls made
seconds apart (ours and the reference back to back in alternating order, the forward timed right before and after),
so a load that drifts during the run cancels. ``targets`` checks the issue's targets on both clocks.

Peak memory: CUDA ``max_memory_allocated`` above what was allocated before; CPU the peak of live tensor bytes from
the profiler's allocation events (``profile_memory``), the same quantity. ``--quick`` runs a subset; ``--tiny`` (for
the test suite) shrinks every section further. No timing is asserted in tests.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import math
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from simforcing.config import Config, ConfigError, load_config
from simforcing.sample import CountingModel

SCHEMA = "simforcing-bench/1"
SECTIONS = ("sampler", "train", "data", "scaling", "gpu")
FULL_GRID = [(ns, nr, w) for ns in (1, 5, 10, 20) for nr in (1, 5, 10, 20) for w in (0.0, 0.3, 0.6, 1.0)]
QUICK_GRID = [(1, 10, 0.0), (1, 10, 0.3), (1, 10, 0.6), (1, 10, 1.0), (5, 20, 0.6), (1, 1, 0.6), (20, 1, 1.0)]
TINY_GRID = [(2, 3, 0.0), (2, 3, 0.6), (2, 3, 1.0)]
# dense bf16 tensor-core peak (FLOP/s) by a substring of the CUDA device name; the first match wins
PEAK_BF16 = (("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("H800", 989e12), ("A100", 312e12),
             ("L40S", 362e12), ("L4", 121e12), ("A10G", 70e12), ("A10", 125e12), ("RTX 4090", 165e12))
# (Times field, key suffix): the wall clock (the headline) and this process's CPU time
STATS = (("wall", ""), ("cpu", "_cpu"))
TARGETS = {"sampler_ratio_max": 1.10, "speedup_at_1_10_0_min": 2.0, "speedup_min": 1.0, "train_ratio_max": 2.5}


@dataclass
class BenchOptions:
    """How much of each section runs (``for_mode``: full, ``--quick`` or ``--tiny``)."""

    mode: str = "full"
    grid: list = field(default_factory=lambda: list(FULL_GRID))
    repeats: int = 5  # timed sampler calls per configuration (after 1 warm-up), at least
    max_repeats: int = 25  # at most, when raised to span min_config_s
    min_config_s: float = 3.0  # seconds of repetitions per configuration (cheap ones repeat more)
    forward_repeats: int = 30  # timed calls of one forward / decode / encode
    train_repeats: int = 20
    train_batch: Optional[int] = None  # None: cfg.train.batch_size
    data_episodes: int = 16
    data_length: int = 48
    data_passes: int = 2
    workers: tuple = (0, 1, 2)
    scaling_frames: tuple = (21, 33, 49, 65)
    scaling_scales: tuple = (1, 2, 4)
    scaling_paper_res: bool = True  # add 224x320 to the resolution sweep
    scaling_repeats: int = 5
    gpu_repeats: int = 5

    @classmethod
    def for_mode(cls, quick: bool, tiny: bool) -> "BenchOptions":
        if tiny:
            return cls("tiny", list(TINY_GRID), repeats=1, max_repeats=1, min_config_s=0.0, forward_repeats=3,
                       train_repeats=2, train_batch=2,
                       data_episodes=2, data_length=16, data_passes=1, scaling_frames=(5, 9), scaling_scales=(1, 2),
                       scaling_paper_res=False, scaling_repeats=1, gpu_repeats=1)
        if quick:
            return cls("quick", list(QUICK_GRID), repeats=5, min_config_s=2.0, forward_repeats=20, train_repeats=12,
                       data_episodes=6,
                       data_length=40, data_passes=1, scaling_repeats=3, scaling_paper_res=False, gpu_repeats=3)
        return cls()


# ----------------------------------------------------------------------------------------------------------------------
# Measuring
# ----------------------------------------------------------------------------------------------------------------------


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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
    from torch.profiler import ProfilerActivity, profile

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


# ----------------------------------------------------------------------------------------------------------------------
# Inputs: random weights, random batches
# ----------------------------------------------------------------------------------------------------------------------


def bench_model(cfg: Config, device: torch.device, seed: int = 0):
    """``build_world_model(cfg)`` with random init, then small random values in the zero-initialised output head and
    condition projections P_j (so the condition and every branch change the output). Eval mode."""
    from simforcing.models.world_model import build_world_model

    torch.manual_seed(seed)
    model = build_world_model(cfg, device=device)
    gen = torch.Generator(device="cpu").manual_seed(seed + 1)
    with torch.no_grad():
        heads = [model.video.proj_out] + [layer.cond_proj for layer in model.layers]
        for mod in heads:
            for p in mod.parameters():
                p.copy_(0.02 * torch.randn(p.shape, generator=gen).to(p.device, p.dtype))
    return model.eval()


def random_demo_vae(cfg: Config, seed: int = 0):
    """A DemoVAE with a random orthonormal basis of K = latent_channels - 48 components, shift 0, scale 1."""
    from simforcing.models.vae import DEMO_MEAN_CHANNELS, DEMO_RESIDUAL_DIM, DemoVAE

    c = cfg.model.vae.latent_channels
    k = c - DEMO_MEAN_CHANNELS
    if not 0 <= k <= DEMO_RESIDUAL_DIM:
        raise ConfigError(f"model.vae.latent_channels: got {c}; the demo VAE has 48 + K channels, 0 <= K <= 192")
    gen = torch.Generator().manual_seed(seed)
    basis = torch.linalg.qr(torch.randn(DEMO_RESIDUAL_DIM, max(k, 1), generator=gen))[0][:, :k]  # (192, K)
    return DemoVAE(basis, torch.zeros(c), torch.ones(c))


def bench_vae(cfg: Config, device: torch.device):
    """The configured VAE when ``model.vae.path`` is set, else a random demo VAE (kind demo); None for a Wan VAE
    without weights (the sections that decode are then skipped)."""
    from simforcing.models.vae import load_vae

    if cfg.model.vae.path:
        return load_vae(cfg, device)
    if cfg.model.vae.kind == "demo":
        return random_demo_vae(cfg).to(device)
    return None


def pixel_batch(cfg: Config, b: int, device: torch.device, seed: int = 0) -> dict:
    """What the sampler reads: real/sim (B, 3, F, H, W) in [-1, 1], actions (B, A_w, A), state0 (B, S),
    text (B, N, D) with text_mask (B, N) (first half real tokens), arm_mask (B, F, H, W) (a centred box)."""
    d = cfg.data
    g = torch.Generator().manual_seed(seed)
    video = (b, 3, d.frames, d.height, d.width)
    text_mask = torch.zeros(b, d.text_max_tokens, dtype=torch.bool)
    text_mask[:, : max(1, d.text_max_tokens // 2)] = True
    arm = torch.zeros(b, d.frames, d.height, d.width, dtype=torch.bool)
    arm[:, :, d.height // 4: 3 * d.height // 4, d.width // 4: 3 * d.width // 4] = True
    batch = {"real": torch.rand(video, generator=g) * 2 - 1, "sim": torch.rand(video, generator=g) * 2 - 1,
             "actions": torch.rand(b, d.actions_per_window, d.action_dim, generator=g) * 2 - 1,
             "state0": torch.rand(b, d.state_dim, generator=g) * 2 - 1,
             "text": torch.randn(b, d.text_max_tokens, cfg.model.text_dim, generator=g), "text_mask": text_mask,
             "arm_mask": arm, "has_arm_mask": torch.ones(b, dtype=torch.bool)}
    return {k: v.to(device) for k, v in batch.items()}


def latent_batch(cfg: Config, b: int, device: torch.device, seed: int = 0) -> dict:
    """What a step function reads: z_sim, z_real (B, C, L+1, h, w) plus actions, state0, text, text_mask."""
    px = pixel_batch(cfg, b, device, seed)
    g = torch.Generator().manual_seed(seed + 7)
    shape = (b, cfg.model.vae.latent_channels, cfg.latent_frames, *cfg.latent_hw)
    out = {k: px[k] for k in ("actions", "state0", "text", "text_mask")}
    out["z_sim"] = torch.randn(shape, generator=g).to(device)
    out["z_real"] = (out["z_sim"].cpu() + 0.5 * torch.randn(shape, generator=g)).to(device)
    return out


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


# ----------------------------------------------------------------------------------------------------------------------
# 1. Sampler
# ----------------------------------------------------------------------------------------------------------------------


def minimal_forwards(n_sim: int, n_real: int, w: float) -> int:
    """Single-sample forwards the SPEC §5 sampler cannot avoid: w = 0: N_r; w = 1: N_s + N_r; else N_s + 2·N_r."""
    if w == 0.0:
        return n_real
    if w == 1.0:
        return n_sim + n_real
    return n_sim + 2 * n_real


@torch.no_grad()
def reference_sample(model: torch.nn.Module, vae, batch: dict, cfg: Config, n_sim: int, n_real: int, w: float,
                     generator: torch.Generator, masker) -> tuple[torch.Tensor, int]:
    """The plain loop of the authors' code: always the simulation rollout, then at every real step the conditional
    and the unconditional forward one after the other, each given ``cond`` (so P_j(c) is recomputed in every
    forward), u = u_u + w·(u_c − u_u). Same noise order as ``sample.sample_videos`` (ε_r, then ε_s).

    Returns (video (B, 3, F, H, W) in [-1, 1], per-sample forwards).
    """
    from simforcing.flow import euler_schedule, euler_step

    net = CountingModel(model)
    a, s0, txt, tm = batch["actions"], batch["state0"], batch["text"], batch.get("text_mask")
    z0_real = vae.encode(batch["real"][:, :, :1]).float()  # (B, C, 1, h, w)
    b, c, _, h, wd = z0_real.shape
    shape = (b, c, cfg.latent_frames - 1, h, wd)
    eps_r = torch.randn(shape, generator=generator, device=z0_real.device, dtype=torch.float32)
    eps_s = torch.randn(shape, generator=generator, device=z0_real.device, dtype=torch.float32)
    masked, _ = masker(batch)
    z0_sim = vae.encode(masked[:, :, None]).float()  # (B, C, 1, h, w)
    sched = euler_schedule(n_sim, cfg.flow.shift).tolist()
    z = eps_s
    for i in range(n_sim):
        tau = torch.full((b,), sched[i], device=z.device)
        u = net(z, tau, z0_sim, a, s0, txt, text_mask=tm)
        z = euler_step(z, u, tau, torch.full((b,), sched[i + 1], device=z.device))
    cond = torch.cat([z0_sim, z], dim=2)  # (B, C, L+1, h, w)
    ones, zeros = torch.ones(b, device=z.device), torch.zeros(b, device=z.device)
    sched = euler_schedule(n_real, cfg.flow.shift).tolist()
    z = eps_r
    for i in range(n_real):
        tau = torch.full((b,), sched[i], device=z.device)
        u_c = net(z, tau, z0_real, a, s0, txt, text_mask=tm, cond=cond, gate=ones)
        u_u = net(z, tau, z0_real, a, s0, txt, text_mask=tm, cond=cond, gate=zeros)
        z = euler_step(z, u_u + w * (u_c - u_u), tau, torch.full((b,), sched[i + 1], device=z.device))
    video = vae.decode(torch.cat([z0_real, z], dim=2)).float().clamp(-1, 1)
    return video, net.evals // b


def _unit_costs(model, vae, batch: dict, lat: dict, single_forward: Callable, n: int, device: torch.device) -> dict:
    """Median seconds (wall and CPU) of one single-sample forward (plain; as a rollout step, given the step context;
    conditioned), one pair forward (conditional + unconditional rows, as the sampler batches them), P_j(c) for all
    blocks, the step context (``WorldModel.step_context``), the first-frame encode and the decode."""
    z0, zt = lat["z_real"][:, :, :1], lat["z_real"][:, :, 1:]
    tau = torch.full((1,), 0.5, device=device)
    ctx = (lat["actions"], lat["state0"], lat["text"])
    with torch.no_grad():
        static = model.step_context(*ctx, lat["text_mask"])
        feats = model.condition_features(lat["z_sim"])
        feats2 = [torch.cat([f, torch.zeros_like(f)]) for f in feats]  # (2, N_video, dim) each
        pair = [torch.cat([x, x]) for x in (zt, tau, z0, *ctx)]
        gate2 = torch.tensor([1.0, 0.0], device=device)
        times = time_round_robin({
            "forward": single_forward,
            "forward_step": lambda: model(zt, tau, z0, *ctx, text_mask=lat["text_mask"], static=static),
            "step_context": lambda: model.step_context(*ctx, lat["text_mask"]),
            "forward_conditioned": lambda: model(zt, tau, z0, *ctx, text_mask=lat["text_mask"], cond_feats=feats,
                                                 gate=gate2[:1]),
            "pair_forward": lambda: model(*pair, text_mask=lat["text_mask"].repeat(2, 1), cond_feats=feats2,
                                          gate=gate2),
            "condition_features": lambda: model.condition_features(lat["z_sim"]),
            "encode_first_frame": lambda: vae.encode(batch["real"][:, :, :1]),
            "decode": lambda: vae.decode(lat["z_real"]),
        }, n, 3, device)
    return {f"{k}{sfx}_s": median(getattr(v, clock)) for clock, sfx in STATS for k, v in times.items()}


def _sampler_row(n_sim: int, n_real: int, w: float, ours: Callable, reference: Callable, single_forward: Callable,
                 clock: "ForwardClock", unit: dict, opts: "BenchOptions", device: torch.device) -> dict:
    """One configuration: 1 warm-up + R repetitions of [2 forwards, ours and the reference back to back in
    alternating order, 2 forwards]; medians of the latencies and of each repetition's ratio and speed-up.
    R = ``opts.repeats``, raised (up to ``opts.max_repeats``) until the repetitions span ``opts.min_config_s``
    seconds: a configuration of a few tens of milliseconds needs many repetitions to see through the machine's
    speed drift."""
    timed = {"ours": Times(), "reference": Times(), "forward": Times()}
    got: dict = {}
    in_network, paired = [], {f"{q}{sfx}": [] for q in ("ratio", "speedup") for _, sfx in STATS}
    minimal = minimal_forwards(n_sim, n_real, w)
    repeats, rep = opts.repeats, 0
    while rep <= repeats:  # repetition 0 is the warm-up
        t0 = time.perf_counter()
        fwd = time_calls(single_forward, 2, 0, device)  # the forward's cost now, right before and after
        calls = {"ours": Times(), "reference": Times()}
        for name in (("ours", "reference") if rep % 2 == 0 else ("reference", "ours")):
            fn = ours if name == "ours" else reference
            got[name] = time_call(lambda: fn(n_sim, n_real, w), device, calls[name])
            if name == "ours":
                net_s = clock.seconds
        fwd += time_calls(single_forward, 2, 0, device)
        rep += 1
        if rep == 1:
            diff = float((got["ours"].real_video - got["reference"][0]).abs().max())
            needed = math.ceil(opts.min_config_s / max(time.perf_counter() - t0, 1e-9))
            repeats = max(opts.repeats, min(opts.max_repeats, needed))
            continue
        for k in calls:
            timed[k] += calls[k]
        timed["forward"] += fwd
        in_network.append(net_s)
        for clock_name, sfx in STATS:
            lat_ours, lat_ref = getattr(calls["ours"], clock_name)[0], getattr(calls["reference"], clock_name)[0]
            paired["ratio" + sfx].append(lat_ours / (minimal * median(getattr(fwd, clock_name))
                                                     + unit[f"decode{sfx}_s"]))
            paired["speedup" + sfx].append(lat_ref / lat_ours)
    res, ref_forwards = got["ours"], got["reference"][1]
    row = {"n_sim": n_sim, "n_real": n_real, "w": w, "repeats": repeats, "forwards": res.forwards,
           "minimal_forwards": minimal,
           "reference_forwards": ref_forwards, "max_abs_diff_vs_reference": diff,
           "latency_all_s": timed["ours"].wall, "phases_last_call_s": res.timings, "in_network_s": median(in_network),
           "outside_network_fraction": median([1 - n / t for n, t in zip(in_network, timed["ours"].wall)])}
    for clock_name, sfx in STATS:
        row.update({f"latency{sfx}_s": median(getattr(timed["ours"], clock_name)),
                    f"reference_latency{sfx}_s": median(getattr(timed["reference"], clock_name)),
                    f"forward{sfx}_s": median(getattr(timed["forward"], clock_name))})
        row[f"ideal{sfx}_s"] = minimal * row[f"forward{sfx}_s"] + unit[f"decode{sfx}_s"]
        for q in ("ratio", "speedup"):
            row[q + sfx] = median(paired[q + sfx])
            row[f"{q}{sfx}_all"] = paired[q + sfx]
    return row


def bench_sampler(cfg: Config, device: torch.device, opts: BenchOptions, log: Callable[[str], None]) -> dict:
    from simforcing.masking import FirstFrameMasker
    from simforcing.sample import sample_videos

    vae = bench_vae(cfg, device)
    if vae is None:
        return {"skipped": "model.vae.kind 'wan' without model.vae.path: no VAE to encode/decode with"}
    model = bench_model(cfg, device)
    batch = pixel_batch(cfg, 1, device)
    masker = FirstFrameMasker.from_config(cfg, device)
    lat = latent_batch(cfg, 1, device)
    tau = torch.full((1,), 0.5, device=device)

    def single_forward():
        with torch.no_grad():
            return model(lat["z_real"][:, :, 1:], tau, lat["z_real"][:, :, :1], lat["actions"], lat["state0"],
                         lat["text"], text_mask=lat["text_mask"])

    clock = ForwardClock(model, device)

    def ours(n_sim, n_real, w):
        gen = torch.Generator(device=device).manual_seed(1234)
        clock.active, clock.seconds = True, 0.0
        try:
            return sample_videos(model, vae, batch, cfg, n_sim, n_real, w, generator=gen, masker=masker)
        finally:
            clock.active = False

    def reference(n_sim, n_real, w):
        gen = torch.Generator(device=device).manual_seed(1234)
        return reference_sample(model, vae, batch, cfg, n_sim, n_real, w, gen, masker)

    unit = _unit_costs(model, vae, batch, lat, single_forward, opts.forward_repeats, device)
    log(f"sampler: one forward {unit['forward_s'] * 1e3:.2f} ms (as a rollout step {unit['forward_step_s'] * 1e3:.2f}"
        f" ms; step context {unit['step_context_s'] * 1e3:.2f} ms once per rollout), pair forward "
        f"{unit['pair_forward_s'] * 1e3:.2f} ms, decode {unit['decode_s'] * 1e3:.2f} ms")
    rows = []
    for n_sim, n_real, w in opts.grid:
        row = _sampler_row(n_sim, n_real, w, ours, reference, single_forward, clock, unit, opts, device)
        rows.append(row)
        log(f"  N_s={n_sim:>2} N_r={n_real:>2} w={w:.1f}: {row['latency_s'] * 1e3:8.1f} ms ({row['forwards']} fwd, "
            f"ratio {row['ratio']:.3f}, CPU time {row['ratio_cpu']:.3f}) | reference "
            f"{row['reference_latency_s'] * 1e3:8.1f} ms ({row['reference_forwards']} fwd) | x{row['speedup']:.2f} "
            f"(CPU time x{row['speedup_cpu']:.2f}) | {row['outside_network_fraction']:.1%} outside the network")
    clock.remove()
    return {"batch_size": 1, "repeats": opts.repeats, "max_repeats": opts.max_repeats,
            "min_config_s": opts.min_config_s, "warmup": 1, **unit, "configs": rows}


# ----------------------------------------------------------------------------------------------------------------------
# 2. Training step
# ----------------------------------------------------------------------------------------------------------------------


def _count_hook(counter: dict, key: str):
    def hook(module, args, kwargs):
        z_t = args[0] if args else kwargs["z_t"]
        counter[key] = counter.get(key, 0) + int(z_t.shape[0])
    return hook


def bench_train(cfg: Config, device: torch.device, opts: BenchOptions, log: Callable[[str], None]) -> dict:
    from simforcing.methods import METHODS, method_preset
    from simforcing.models.weights import frozen_copy
    from simforcing.train import autocast_context, build_optimizer

    b = opts.train_batch or cfg.train.batch_size
    student = bench_model(cfg, device).train()
    teacher = frozen_copy(student)
    batch = latent_batch(cfg, b, device)
    counts: dict = {}
    hooks = [student.register_forward_pre_hook(_count_hook(counts, "student"), with_kwargs=True),
             teacher.register_forward_pre_hook(_count_hook(counts, "teacher"), with_kwargs=True)]
    methods = ("sft", "simforcing")
    mcfgs = {m: method_preset(copy.deepcopy(cfg), m) for m in methods}
    optimizer, _ = build_optimizer(student, cfg, total_steps=10_000)
    gen = torch.Generator(device=device)
    step = {"i": 0}

    def fwd_bwd(m: str) -> None:
        step["i"] += 1
        gen.manual_seed(step["i"])
        with autocast_context(mcfgs[m], device):
            loss, _ = METHODS[m](student, teacher, batch, mcfgs[m], gen)
        loss.backward()

    def full_step(m: str) -> None:
        fwd_bwd(m)
        torch.nn.utils.clip_grad_norm_(student.parameters(), cfg.train.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    per = {m: {"fwd_bwd": Times(), "step": Times()} for m in methods}
    for m in methods:  # warm-up (also allocates the AdamW state)
        full_step(m)
    for r in range(opts.train_repeats):  # interleaved, alternating order: drifting load hits both methods alike
        for m in (methods if r % 2 == 0 else methods[::-1]):
            per[m]["fwd_bwd"] += time_calls(lambda: fwd_bwd(m), 1, 0, device)
            optimizer.zero_grad(set_to_none=True)
            per[m]["step"] += time_calls(lambda: full_step(m), 1, 0, device)
    out: dict = {"batch_size": b, "repeats": opts.train_repeats, "optimizer": "AdamW (train.build_optimizer)",
                 "methods": {}}
    for m in methods:
        optimizer.zero_grad(set_to_none=True)
        counts.clear()
        fwd_bwd(m)
        evals = dict(counts)
        optimizer.zero_grad(set_to_none=True)
        mem = peak_bytes(lambda: fwd_bwd(m), device)
        optimizer.zero_grad(set_to_none=True)
        units = evals.get("teacher", 0) / b + 3 * evals.get("student", 0) / b
        out["methods"][m] = {**{f"{k}{sfx}_s": median(getattr(per[m][k], clock)) for clock, sfx in STATS
                                for k in ("fwd_bwd", "step")},
                             "fwd_bwd_all_s": per[m]["fwd_bwd"].wall, "peak_bytes": mem,
                             "teacher_evals_per_step": evals.get("teacher", 0),
                             "student_evals_per_step": evals.get("student", 0), "forward_units": units}
    for h in hooks:
        h.remove()
    sft, sf = out["methods"]["sft"], out["methods"]["simforcing"]
    for clock, sfx in STATS:  # median of each repetition's ratio (the two methods timed back to back)
        for k in ("fwd_bwd", "step"):
            pairs = zip(getattr(per["simforcing"][k], clock), getattr(per["sft"][k], clock))
            out[f"ratio_{k}{sfx}"] = median([a / b_ for a, b_ in pairs])
    out["ratio_peak_bytes"] = sf["peak_bytes"] / max(1, sft["peak_bytes"])
    out["ideal_ratio"] = sf["forward_units"] / sft["forward_units"]
    log(f"train: sft {sft['fwd_bwd_s'] * 1e3:.1f} ms, simforcing {sf['fwd_bwd_s'] * 1e3:.1f} ms (fwd+bwd, batch {b})"
        f" -> ratio {out['ratio_fwd_bwd']:.2f}, CPU time {out['ratio_fwd_bwd_cpu']:.2f} (ideal "
        f"{out['ideal_ratio']:.2f})")
    return out


# ----------------------------------------------------------------------------------------------------------------------
# 3. Data
# ----------------------------------------------------------------------------------------------------------------------


def write_bench_dataset(root: Path, cfg: Config, episodes: int, length: int, seed: int = 0) -> Path:
    """A small paired dataset at the config's resolution: smooth frames with a moving box (the arm mask), random
    actions/states, random text embeddings, stats. ``episodes`` train episodes + 1 val episode."""
    from simforcing.data.format import EpisodeInfo, write_episode, write_meta
    from simforcing.data.stats import write_stats
    from simforcing.data.text_cache import save_embedding, write_cache_info

    d = cfg.data
    h, w, t_len = d.height, d.width, max(length, d.window_steps)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    instructions = ("pick up the block", "open the drawer")
    infos, splits = [], {"train": [], "val": [], "sim_pool": []}
    for e in range(episodes + 1):
        eid = f"ep_{e:03d}"
        side = max(2, h // 3)
        x0 = (np.arange(t_len) * 2 + 5 * e) % max(1, w - side)  # (T,) box position
        mask = (xx[None] >= x0[:, None, None]) & (xx[None] < x0[:, None, None] + side) \
            & (yy[None] >= (h - side) // 2) & (yy[None] < (h + side) // 2)  # (T, H, W)
        base = np.stack([(xx * 255 // max(1, w - 1)), (yy * 255 // max(1, h - 1)), np.full_like(xx, 90)], -1)
        real = np.broadcast_to(base, (t_len, h, w, 3)).copy()
        real[mask] = (230, 230, 40)
        sim = np.zeros_like(real)
        sim[mask] = (200, 200, 200)
        actions = rng.uniform(-1, 1, (t_len - 1, d.action_dim)).astype(np.float32)
        states = rng.uniform(-1, 1, (t_len, d.state_dim)).astype(np.float32)
        write_episode(root, eid, sim.astype(np.uint8), real.astype(np.uint8), actions, states, mask.astype(np.uint8))
        infos.append(EpisodeInfo(eid, t_len, instructions[e % 2], True))
        splits["val" if e == episodes else "train"].append(eid)
    write_meta(root, {"fps": 10, "height": h, "width": w, "action_dim": d.action_dim, "state_dim": d.state_dim,
                      "video_layout": "separate", "sim_background": "black", "source": "simforcing.bench"},
               infos, splits)
    cache = root / "text_cache"
    g = torch.Generator().manual_seed(seed)
    for i, text in enumerate(instructions):
        save_embedding(cache, text, torch.randn(3 + i, cfg.model.text_dim, generator=g))
    write_cache_info(cache, "random-bench", cfg.model.text_dim, d.text_max_tokens)
    write_stats(root)
    return root


def _loader_pass(make_dataset: Callable[[], torch.utils.data.Dataset], batch: int, workers: int) -> dict:
    """One full pass of a fresh dataset (built before the clock starts; its decoded-episode cache empty) through a
    fresh DataLoader, as the training loop makes one per epoch: windows, seconds in all (worker start included),
    seconds to the first batch, and the windows/s overall and after the first batch (steady state)."""
    ds = make_dataset()
    t0 = time.perf_counter()
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=False, num_workers=workers)
    n = first_n = 0
    first_s = 0.0
    for item in loader:
        n += len(item["episode_id"])
        if not first_n:
            first_n, first_s = n, time.perf_counter() - t0
    total = time.perf_counter() - t0
    rest = total - first_s
    return {"workers": workers, "windows": n, "seconds": total, "first_batch_s": first_s, "windows_per_s": n / total,
            "steady_windows_per_s": (n - first_n) / rest if n > first_n and rest > 0 else None}


def _loader_passes(make_dataset: Callable, batch: int, workers: int, passes: int) -> dict:
    """The median pass (by total seconds) of ``passes`` passes."""
    runs = sorted((_loader_pass(make_dataset, batch, workers) for _ in range(passes)), key=lambda r: r["seconds"])
    return runs[(len(runs) - 1) // 2]


def bench_data(cfg: Config, opts: BenchOptions, log: Callable[[str], None]) -> dict:
    from simforcing.data.latent_cache import LatentWindowDataset, encode_latent_cache
    from simforcing.data.paired import PairedWindowDataset

    batch = opts.train_batch or cfg.train.batch_size
    out: dict = {"episodes": opts.data_episodes, "episode_length": max(opts.data_length, cfg.data.window_steps),
                 "windows_per_episode": cfg.data.windows_per_episode, "batch_size": batch,
                 "resolution": [cfg.data.height, cfg.data.width], "frames": cfg.data.frames,
                 "passes": opts.data_passes, "pixels": [], "latents": []}

    def record(kind: str, row: dict) -> None:
        out[kind].append(row)
        steady = row["steady_windows_per_s"]
        log(f"data: {kind}, {row['workers']} workers: {row['windows_per_s']:.1f} windows/s "
            f"(first batch after {row['first_batch_s'] * 1e3:.0f} ms; then "
            f"{'-' if steady is None else f'{steady:.1f}'} windows/s)")

    with tempfile.TemporaryDirectory(prefix="simforcing-bench-") as tmp:
        root = write_bench_dataset(Path(tmp) / "data", cfg, opts.data_episodes, opts.data_length)
        for nw in opts.workers:
            record("pixels", _loader_passes(lambda: PairedWindowDataset(cfg, root, ("train",), ("sim", "real")),
                                            batch, nw, opts.data_passes))
        vae_cfg = copy.deepcopy(cfg)
        if not vae_cfg.model.vae.path:
            if vae_cfg.model.vae.kind != "demo":
                out["latents"] = {"skipped": "model.vae.kind 'wan' without model.vae.path: cannot encode a cache"}
                return out
            random_demo_vae(cfg).save(Path(tmp) / "vae")
            vae_cfg.model.vae.path = str(Path(tmp) / "vae")
        cache = Path(tmp) / "cache"
        t0 = time.perf_counter()
        index = encode_latent_cache(vae_cfg, root, cache, splits=("train",), progress=False)
        enc_s = time.perf_counter() - t0
        n_enc = sum(len(e["windows"]) for e in index["episodes"])
        out["latent_encode"] = {"windows": n_enc, "seconds": enc_s, "windows_per_s": n_enc / enc_s}
        for nw in opts.workers:
            record("latents", _loader_passes(lambda: LatentWindowDataset(vae_cfg, cache, ("train",)), batch, nw,
                                             opts.data_passes))
    return out


# ----------------------------------------------------------------------------------------------------------------------
# 4. Scaling
# ----------------------------------------------------------------------------------------------------------------------


def _flops(cfg: Config) -> dict:
    from simforcing.models.info import forward_flops

    f = forward_flops(cfg)
    return {"total": f["total"], "attention": f["joint_attention"], "other": f["total"] - f["joint_attention"]}


def scaling_points(cfg: Config, opts: BenchOptions) -> list[dict]:
    """{sweep, frames, height, width}: the frame sweep at the preset's resolution (21 as Bridge, 33 as InternData-A1,
    then longer; frame stride 1, so F − 1 actions) and the resolution sweep at 21 frames (the preset's resolution ×
    each scale, plus 224×320 in the full run)."""
    d = cfg.data
    pts = [{"sweep": "frames", "frames": f, "height": d.height, "width": d.width} for f in opts.scaling_frames]
    res = [(d.height * s, d.width * s) for s in opts.scaling_scales]
    if opts.scaling_paper_res and (224, 320) not in res and 224 * 320 > res[-1][0] * res[-1][1]:
        res.append((224, 320))
    frames = 21 if 21 in opts.scaling_frames else opts.scaling_frames[-1]
    pts += [{"sweep": "resolution", "frames": frames, "height": h, "width": w} for h, w in res]
    return pts


def bench_scaling(cfg: Config, device: torch.device, opts: BenchOptions, log: Callable[[str], None]) -> dict:
    model = bench_model(cfg, device)
    rows: list[dict] = []
    done: dict = {}  # (frames, height, width) -> measured row (the sweeps share the preset's point)
    for pt in scaling_points(cfg, opts):
        key = (pt["frames"], pt["height"], pt["width"])
        if key in done:
            rows.append({**done[key], **pt})
            continue
        c = copy.deepcopy(cfg)
        c.data.frames, c.data.height, c.data.width, c.data.frame_stride = pt["frames"], pt["height"], pt["width"], 1
        try:
            c.validate()
        except ConfigError as e:
            rows.append({**pt, "skipped": str(e)})
            continue
        lat = latent_batch(c, 1, device)
        z0, zt = lat["z_real"][:, :, :1], lat["z_real"][:, :, 1:]
        tau = torch.full((1,), 0.5, device=device)

        def fwd(lat=lat, z0=z0, zt=zt, tau=tau):
            with torch.no_grad():
                return model(zt, tau, z0, lat["actions"], lat["state0"], lat["text"], text_mask=lat["text_mask"])

        secs = time_calls(fwd, opts.scaling_repeats, 1, device).median
        mem = peak_bytes(fwd, device)
        fl = _flops(c)
        n_video = c.latent_frames * c.tokens_per_latent_frame
        n_action = c.data.actions_per_window if c.model.use_action_expert else 0
        rows.append({**pt, "latent_frames": c.latent_frames, "video_tokens": n_video, "action_tokens": n_action,
                     "tokens": n_video + n_action, "forward_s": secs, "peak_bytes": mem, "flops": fl["total"],
                     "attention_flop_share": fl["attention"] / fl["total"],
                     "achieved_flops_per_s": fl["total"] / secs})
        done[key] = rows[-1]
        log(f"scaling: {pt['sweep']:<10} F={pt['frames']:>2} {pt['height']}x{pt['width']}: {n_video + n_action:>5} "
            f"tokens, {secs * 1e3:8.1f} ms, {mem / 2**20:7.1f} MiB, attention {fl['attention'] / fl['total']:.0%}")
    exponents = {}  # growth exponent d log t / d log N between the ends of each sweep (1: linear, 2: quadratic)
    for sweep in ("frames", "resolution"):
        pts = [r for r in rows if r["sweep"] == sweep and "forward_s" in r]
        if len(pts) >= 2 and pts[-1]["tokens"] > pts[0]["tokens"]:
            exponents[sweep] = math.log(pts[-1]["forward_s"] / pts[0]["forward_s"]) / math.log(
                pts[-1]["tokens"] / pts[0]["tokens"])
    return {"model_width": cfg.model.dim, "num_layers": cfg.model.num_layers, "repeats": opts.scaling_repeats,
            "frame_stride": 1, "points": rows, "time_exponents": exponents}


def plot_scaling(scaling: dict, path: Path) -> Optional[Path]:
    """Forward time and peak memory against tokens (log-log) with ∝N and ∝N² guides anchored at the first point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    pts = [r for r in scaling.get("points", []) if "forward_s" in r]
    if not pts:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, unit, scale in ((axes[0], "forward_s", "forward time (ms)", 1e3),
                                 (axes[1], "peak_bytes", "peak memory (MiB)", 1 / 2**20)):
        labelled = set()
        for sweep, marker in (("frames", "o"), ("resolution", "s")):
            rs = sorted((r for r in pts if r["sweep"] == sweep), key=lambda r: r["tokens"])
            if not rs:
                continue
            ax.plot([r["tokens"] for r in rs], [r[key] * scale for r in rs], marker=marker, label=f"{sweep} sweep")
            for r in rs:
                name = f"F{r['frames']} {r['height']}x{r['width']}"
                if name not in labelled:
                    labelled.add(name)
                    ax.annotate(name, (r["tokens"], r[key] * scale), fontsize=6, xytext=(3, -9),
                                textcoords="offset points")
        n0 = min(r["tokens"] for r in pts)
        y0 = min(r[key] for r in pts if r["tokens"] == n0) * scale
        ns = np.geomspace(n0, max(r["tokens"] for r in pts), 20)
        ax.plot(ns, y0 * ns / n0, "k--", lw=0.8, label="∝ N (linear layers)")
        ax.plot(ns, y0 * (ns / n0) ** 2, "k:", lw=0.8, label="∝ N² (attention)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(ScalarFormatter())
            axis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("tokens per sample (video + action)")
        ax.set_ylabel(unit)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"one forward, width {scaling['model_width']}, {scaling['num_layers']} layers")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------------------------------------------------
# 5. GPU
# ----------------------------------------------------------------------------------------------------------------------


def gpu_measure(cfg: Config, device: torch.device, repeats: int, n_sim: int = 1, n_real: int = 10,
                w: float = 0.6) -> dict:
    """Training (sft, simforcing: fwd + bwd) and sampling (rollouts of (n_sim, n_real, w), no VAE) of ``cfg`` in
    bf16 autocast on ``device``: seconds, tokens/s, achieved FLOP/s and MFU against the device's peak."""
    from simforcing.methods import METHODS, method_preset
    from simforcing.models.weights import frozen_copy
    from simforcing.sample import real_rollout, simulation_rollout

    amp = torch.autocast(device.type, dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = peak_flops(name)
    fwd_flops = _flops(cfg)["total"]
    tokens = cfg.latent_frames * cfg.tokens_per_latent_frame + cfg.data.actions_per_window
    b = cfg.train.batch_size
    student = bench_model(cfg, device).train()
    teacher = frozen_copy(student).to(torch.bfloat16 if device.type == "cuda" else torch.float32)
    batch = latent_batch(cfg, b, device)
    gen = torch.Generator(device=device)
    out: dict = {"batch_size": b, "tokens_per_sample": tokens, "forward_flops_per_sample": fwd_flops,
                 "peak_flops": peak, "train": {}, "sample": {}}
    for m, units in (("sft", 3), ("simforcing", 7)):
        mcfg = method_preset(copy.deepcopy(cfg), m)

        def step(m=m, mcfg=mcfg):
            gen.manual_seed(0)
            with amp:
                loss, _ = METHODS[m](student, teacher, batch, mcfg, gen)
            loss.backward()
            student.zero_grad(set_to_none=True)

        secs = time_calls(step, repeats, 1, device).median
        mem = peak_bytes(step, device)
        flops = units * fwd_flops * b
        out["train"][m] = {"step_s": secs, "tokens_per_s": b * tokens / secs, "flops_per_s": flops / secs,
                           "mfu": flops / secs / peak if peak else None, "peak_bytes": mem}
    student.eval()
    teacher = None  # free the frozen copy before the sampling measurements
    lat = latent_batch(cfg, 1, device)
    ctx = {k: lat[k] for k in ("actions", "state0", "text", "text_mask")}
    z0 = lat["z_real"][:, :, :1]
    noise = torch.randn_like(lat["z_real"][:, :, 1:])
    net = CountingModel(student)

    def rollout():
        with torch.no_grad(), amp:
            zs = simulation_rollout(net, z0, ctx, noise, n_sim, cfg.flow.shift)
            feats = student.condition_features(torch.cat([z0, zs], 2)) if w != 0 else None
            real_rollout(net, z0, ctx, noise, n_real, cfg.flow.shift, w, feats)

    secs = time_calls(rollout, repeats, 1, device).median
    net.evals = 0
    rollout()
    evals = net.evals
    out["sample"] = {"n_sim": n_sim, "n_real": n_real, "w": w, "seconds": secs, "forwards": evals,
                     "tokens_per_s": evals * tokens / secs, "flops_per_s": evals * fwd_flops / secs,
                     "mfu": evals * fwd_flops / secs / peak if peak else None}
    return out


def bench_gpu(device: torch.device, opts: BenchOptions, log: Callable[[str], None]) -> dict:
    """The 5B preset (bridge) in bf16; on out-of-memory the same with fewer layers."""
    if device.type != "cuda":
        return {"skipped": "no CUDA device"}
    for layers in (30, 15, 8, 4):
        cfg = load_config("bridge")
        cfg.model.num_layers, cfg.train.mixed_precision, cfg.train.batch_size = layers, "bf16", 1
        cfg.validate()
        try:
            res = gpu_measure(cfg, device, opts.gpu_repeats)
        except torch.cuda.OutOfMemoryError as e:
            log(f"gpu: bridge preset with {layers} layers does not fit ({str(e).splitlines()[0]})")
            torch.cuda.empty_cache()
            continue
        res.update({"preset": "bridge", "num_layers": layers, "dtype": "bf16 autocast, fp32 student weights, "
                    "bf16 teacher"})
        log(f"gpu: {layers} layers, simforcing step {res['train']['simforcing']['step_s']:.3f} s, MFU "
            f"{res['train']['simforcing']['mfu']}")
        return res
    return {"skipped": "the bridge preset does not fit even with 4 layers"}


# ----------------------------------------------------------------------------------------------------------------------
# Targets, tables, the command
# ----------------------------------------------------------------------------------------------------------------------


def _target(values: dict, bound: float, upper: bool, **extra) -> dict:
    """values: {"" | "_cpu": value}; ok / ok_cpu say whether each meets the bound."""
    ok = (lambda v: v <= bound) if upper else (lambda v: v >= bound)
    out = {"target": f"{'<=' if upper else '>='} {bound}", **extra}
    for sfx, v in values.items():
        out[f"value{sfx}"], out[f"ok{sfx}"] = v, ok(v)
    return out


def check_targets(results: dict) -> dict:
    """Each target of the issue on the wall clock (``ok``) and, on a CPU device, on process CPU time (``ok_cpu``)."""
    out: dict = {}
    sfxs = [sfx for _, sfx in STATS if sfx != "_cpu" or results["machine"]["device"] == "cpu"]
    s = results.get("sampler", {})
    if s.get("configs"):
        rows = s["configs"]
        worst = max(rows, key=lambda r: r["ratio"])
        out["sampler_ratio"] = _target({x: max(r["ratio" + x] for r in rows) for x in sfxs},
                                       TARGETS["sampler_ratio_max"], True,
                                       at=[worst["n_sim"], worst["n_real"], worst["w"]])
        at0 = [r for r in rows if (r["n_sim"], r["n_real"], r["w"]) == (1, 10, 0.0)]
        if at0:
            out["speedup_1_10_0"] = _target({x: at0[0]["speedup" + x] for x in sfxs},
                                            TARGETS["speedup_at_1_10_0_min"], False)
        slow = min(rows, key=lambda r: r["speedup"])
        out["speedup_everywhere"] = _target({x: min(r["speedup" + x] for r in rows) for x in sfxs},
                                            TARGETS["speedup_min"], False,
                                            at=[slow["n_sim"], slow["n_real"], slow["w"]])
        out["forwards_minimal"] = {"ok": all(r["forwards"] == r["minimal_forwards"] for r in rows)}
    t = results.get("train", {})
    if "ratio_fwd_bwd" in t:
        out["train_ratio"] = _target({x: t["ratio_fwd_bwd" + x] for x in sfxs}, TARGETS["train_ratio_max"], True,
                                     with_optimizer=t["ratio_step"])
    return out


def _ms(x: float) -> str:
    return f"{x * 1e3:.1f}"


def _rate(row: dict) -> str:
    steady = row["steady_windows_per_s"]
    return f"{row['windows_per_s']:.0f}" + ("" if steady is None else f" ({steady:.0f})")


def format_tables(results: dict) -> str:
    """Markdown tables of every section that ran."""
    lines: list[str] = []
    m = results["machine"]
    lines += [f"Machine: {m['device_name']}, {m['cpu_count']} CPUs, torch {m['torch']}, {m['torch_threads']} "
              f"thread(s); preset {results['settings']['preset']}, mode {results['settings']['mode']}.", ""]
    s = results.get("sampler", {})
    if s.get("configs"):
        lines += [f"Sampler (batch 1; one forward {_ms(s['forward_s'])} ms — as a rollout step "
                  f"{_ms(s['forward_step_s'])} ms after a step context of {_ms(s['step_context_s'])} ms per batch —, "
                  f"pair forward {_ms(s['pair_forward_s'])} ms, decode {_ms(s['decode_s'])} ms; medians of "
                  f"{s['repeats']}–{s['max_repeats']} repetitions (at least {s['min_config_s']:g} s per configuration)"
                  f" after 1 warm-up; ratio = latency / "
                  "(minimal forwards × one forward + decode); also on process CPU time):", "",
                  "| N_s | N_r | w | latency (ms) | forwards (= minimal) | ratio | ratio (CPU) | outside network "
                  "| reference (ms) | ref. forwards | speed-up | speed-up (CPU) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in s["configs"]:
            same = "yes" if r["forwards"] == r["minimal_forwards"] else f"NO ({r['minimal_forwards']})"
            lines.append(f"| {r['n_sim']} | {r['n_real']} | {r['w']:g} | {_ms(r['latency_s'])} | {r['forwards']} "
                         f"({same}) | {r['ratio']:.3f} | {r['ratio_cpu']:.3f} | {r['outside_network_fraction']:.1%} | "
                         f"{_ms(r['reference_latency_s'])} | "
                         f"{r['reference_forwards']} | {r['speedup']:.2f}x | {r['speedup_cpu']:.2f}x |")
        lines.append("")
    elif "skipped" in s:
        lines += [f"Sampler: skipped ({s['skipped']})", ""]
    t = results.get("train", {})
    if "methods" in t:
        lines += [f"Training step (batch {t['batch_size']}, median of {t['repeats']}):", "",
                  "| method | fwd+bwd (ms) | step with AdamW (ms) | peak memory (MiB) | teacher / student evals "
                  "| forward units |", "|---|---|---|---|---|---|"]
        for name, r in t["methods"].items():
            lines.append(f"| {name} | {_ms(r['fwd_bwd_s'])} | {_ms(r['step_s'])} | {r['peak_bytes'] / 2**20:.1f} | "
                         f"{r['teacher_evals_per_step']} / {r['student_evals_per_step']} | {r['forward_units']:g} |")
        lines += [f"| ratio | {t['ratio_fwd_bwd']:.2f} (CPU time {t['ratio_fwd_bwd_cpu']:.2f}) | {t['ratio_step']:.2f} "
                  f"(CPU time {t['ratio_step_cpu']:.2f}) | {t['ratio_peak_bytes']:.2f} | | "
                  f"ideal {t['ideal_ratio']:.2f} |", ""]
    d = results.get("data", {})
    if "pixels" in d:
        lines += [f"Data ({d['episodes']} episodes × {d['windows_per_episode']} windows of {d['frames']} frames at "
                  f"{d['resolution'][0]}x{d['resolution'][1]}, batch {d['batch_size']}; windows/s for one pass with "
                  "worker start, and after the first batch):", "",
                  "| source | " + " | ".join(f"{r['workers']} workers" for r in d["pixels"]) + " |",
                  "|---|" + "---|" * len(d["pixels"]),
                  "| video decoding | " + " | ".join(_rate(r) for r in d["pixels"]) + " |"]
        if isinstance(d.get("latents"), list) and d["latents"]:
            lines.append("| latent cache | " + " | ".join(_rate(r) for r in d["latents"]) + " |")
        lines.append("")
    sc = results.get("scaling", {})
    if sc.get("points"):
        lines += [f"Scaling (one forward, batch 1, width {sc['model_width']}, {sc['num_layers']} layers):", "",
                  "| sweep | frames | H×W | tokens | forward (ms) | peak (MiB) | attention FLOP share |",
                  "|---|---|---|---|---|---|---|"]
        for r in sc["points"]:
            if "forward_s" in r:
                lines.append(f"| {r['sweep']} | {r['frames']} | {r['height']}x{r['width']} | {r['tokens']} | "
                             f"{_ms(r['forward_s'])} | {r['peak_bytes'] / 2**20:.1f} | "
                             f"{r['attention_flop_share']:.0%} |")
        lines.append("")
    g = results.get("gpu", {})
    if g:
        if "skipped" in g:
            lines += [f"GPU: skipped ({g['skipped']})", ""]
        elif "train" in g:
            lines += [f"GPU ({g.get('preset')}, {g.get('num_layers')} layers, bf16):", "",
                      "| work | seconds | tokens/s | MFU |", "|---|---|---|---|"]
            for name, r in g["train"].items():
                lines.append(f"| train {name} | {r['step_s']:.3f} | {r['tokens_per_s']:.0f} | {r['mfu']} |")
            r = g["sample"]
            lines += [f"| sample ({r['n_sim']}, {r['n_real']}, {r['w']}) | {r['seconds']:.3f} | "
                      f"{r['tokens_per_s']:.0f} | {r['mfu']} |", ""]
    tg = results.get("targets", {})
    if tg:
        def verdict(v: dict) -> str:
            return " / ".join("ok" if v[k] else "FAILED" for k in ("ok", "ok_cpu") if k in v)

        lines.append("Targets (wall clock / CPU time): " + "; ".join(f"{k} {verdict(v)}" for k, v in tg.items()))
    return "\n".join(lines)


def run_bench(cfg: Config, opts: BenchOptions, out: Path, device: torch.device, threads: int,
              sections: tuple = SECTIONS, log: Callable[[str], None] = print) -> dict:
    """Every section in ``sections``; writes ``out`` (JSON) and the scaling plot next to it. Returns the results.
    Torch's thread count is set to ``threads`` for the run and restored after it."""
    threads_before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _run_sections(cfg, opts, out, device, threads, sections, log)
    finally:
        torch.set_num_threads(threads_before)


def _run_sections(cfg: Config, opts: BenchOptions, out: Path, device: torch.device, threads: int,
                  sections: tuple, log: Callable[[str], None]) -> dict:
    from simforcing.utils import atomic_write_json

    t0 = time.perf_counter()
    results: dict = {"schema": SCHEMA, "machine": machine_info(device, threads),
                     "settings": {"preset": cfg.preset, "mode": opts.mode, "sections": list(sections),
                                  "options": asdict(opts), "targets": TARGETS}}
    section_times = {}
    for name in sections:
        s0 = time.perf_counter()
        if name == "sampler":
            results["sampler"] = bench_sampler(cfg, device, opts, log)
        elif name == "train":
            results["train"] = bench_train(cfg, device, opts, log)
        elif name == "data":
            results["data"] = bench_data(cfg, opts, log)
        elif name == "scaling":
            results["scaling"] = bench_scaling(cfg, device, opts, log)
            png = plot_scaling(results["scaling"], out.with_name(out.stem + "_scaling.png"))
            results["scaling"]["plot"] = png.name if png else None
        elif name == "gpu":
            results["gpu"] = bench_gpu(device, opts, log)
        section_times[name] = time.perf_counter() - s0
    results["targets"] = check_targets(results)
    results["machine"]["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    results["section_seconds"] = section_times
    results["seconds"] = time.perf_counter() - t0
    atomic_write_json(out, results)
    os.chmod(out, 0o644)  # the atomic write's temporary file is private; the report is not
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from simforcing.cli import add_config_args

    add_config_args(parser)
    parser.add_argument("--out", required=True,
                        help="JSON file to write (the markdown tables and the scaling plot go next to it)")
    parser.add_argument("--quick", action="store_true", help="a subset of the grid and fewer repeats (< 2 min on CPU)")
    parser.add_argument("--tiny", action="store_true", help="smallest run, for the test suite")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (1: the demo model's ops are too small to gain from more)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset of " +
                        ", ".join(SECTIONS))


def run(args: argparse.Namespace) -> int:
    from simforcing.cli import config_from_args, dry_run
    from simforcing.utils import atomic_write_text, resolve_device

    cfg = config_from_args(args)
    if args.dry_run:
        return dry_run(cfg)
    sections = tuple(s.strip() for s in args.sections.split(",") if s.strip())
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown or not sections:
        raise ConfigError(f"--sections: got {args.sections!r}; expected a comma-separated subset of "
                          f"{', '.join(SECTIONS)}")
    if args.threads < 1:
        raise ConfigError(f"--threads: got {args.threads}; expected an integer >= 1")
    opts = BenchOptions.for_mode(args.quick, args.tiny)
    out = Path(args.out)
    results = run_bench(cfg, opts, out, resolve_device(args.device), args.threads, sections,
                        log=lambda msg: print(msg, flush=True))
    tables = format_tables(results)
    atomic_write_text(out.with_suffix(".md"), tables + "\n")
    os.chmod(out.with_suffix(".md"), 0o644)
    print()
    print(tables)
    print(f"\nwrote {out} and {out.with_suffix('.md').name} ({results['seconds']:.0f} s)")
    return 0
