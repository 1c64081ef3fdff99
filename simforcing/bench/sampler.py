"""Benchmark section 1, ``sampler``: latency per sample against the minimal forwards and a reference loop written
like the authors' (see the package docstring)."""

from __future__ import annotations

import math
import time
from typing import Callable

import torch

from simforcing.bench.inputs import bench_model, bench_vae, bench_world_model, latent_batch, pixel_batch
from simforcing.bench.measure import STATS, ForwardClock, Times, median, time_call, time_calls, time_round_robin
from simforcing.bench.options import BenchOptions
from simforcing.config import Config
from simforcing.flow import euler_schedule, euler_step
from simforcing.sample import CountingModel, sampler_for
from simforcing.sampler_batch import SamplerBatch


def minimal_forwards(n_sim: int, n_real: int, w: float) -> int:
    """Single-sample forwards the SPEC §5 sampler cannot avoid: w = 0: N_r; w = 1: N_s + N_r; else N_s + 2·N_r."""
    if w == 0.0:
        return n_real
    if w == 1.0:
        return n_sim + n_real
    return n_sim + 2 * n_real


@torch.no_grad()
def reference_sample(model: torch.nn.Module, vae, batch: SamplerBatch, cfg: Config, n_sim: int, n_real: int,
                     w: float, generator: torch.Generator, masker) -> tuple[torch.Tensor, int]:
    """The plain loop of the authors' code: always the simulation rollout, then at every real step the conditional
    and the unconditional forward one after the other, each given ``cond`` (so P_j(c) is recomputed in every
    forward), u = u_u + w·(u_c − u_u). Same noise order as ``sample.sample_videos`` (ε_r, then ε_s).

    Returns (video (B, 3, F, H, W) in [-1, 1], per-sample forwards).
    """
    net = CountingModel(model)
    ctx = {"actions": batch.actions, "state0": batch.state0, "text": batch.text, "text_mask": batch.text_mask}
    z0_real = vae.encode(batch.first_frame[:, :, None]).float()  # (B, C, 1, h, w)
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
        u = net(z_t=z, tau=tau, z0=z0_sim, **ctx)
        z = euler_step(z, u, tau, torch.full((b,), sched[i + 1], device=z.device))
    cond = torch.cat([z0_sim, z], dim=2)  # (B, C, L+1, h, w)
    ones, zeros = torch.ones(b, device=z.device), torch.zeros(b, device=z.device)
    sched = euler_schedule(n_real, cfg.flow.shift).tolist()
    z = eps_r
    for i in range(n_real):
        tau = torch.full((b,), sched[i], device=z.device)
        u_c = net(z_t=z, tau=tau, z0=z0_real, **ctx, cond=cond, gate=ones)
        u_u = net(z_t=z, tau=tau, z0=z0_real, **ctx, cond=cond, gate=zeros)
        z = euler_step(z, u_u + w * (u_c - u_u), tau, torch.full((b,), sched[i + 1], device=z.device))
    video = vae.decode(torch.cat([z0_real, z], dim=2)).float().clamp(-1, 1)
    return video, net.evals // b


def _unit_costs(model, vae, batch: SamplerBatch, lat: dict, single_forward: Callable, n: int,
                device: torch.device) -> dict:
    """Median seconds (wall and CPU) of one single-sample forward (plain; as a rollout step, given the step context;
    conditioned), one pair forward (conditional + unconditional rows, as the sampler batches them), P_j(c) for all
    blocks, the step context (``WorldModel.step_context``), the first-frame encode and the decode."""
    z0, zt = lat["z_real"][:, :, :1], lat["z_real"][:, :, 1:]
    tau = torch.full((1,), 0.5, device=device)
    ctx = {k: lat[k] for k in ("actions", "state0", "text", "text_mask")}
    with torch.no_grad():
        static = model.step_context(**ctx)
        feats = model.condition_features(lat["z_sim"])
        feats2 = [torch.cat([f, torch.zeros_like(f)]) for f in feats]  # (2, N_video, dim) each
        pair = {k: torch.cat([v, v]) for k, v in dict(z_t=zt, tau=tau, z0=z0, **ctx).items()}
        gate2 = torch.tensor([1.0, 0.0], device=device)
        times = time_round_robin({
            "forward": single_forward,
            "forward_step": lambda: model(z_t=zt, tau=tau, z0=z0, **ctx, static=static),
            "step_context": lambda: model.step_context(**ctx),
            "forward_conditioned": lambda: model(z_t=zt, tau=tau, z0=z0, **ctx, cond_feats=feats, gate=gate2[:1]),
            "pair_forward": lambda: model(**pair, cond_feats=feats2, gate=gate2),
            "condition_features": lambda: model.condition_features(lat["z_sim"]),
            "encode_first_frame": lambda: vae.encode(batch.first_frame[:, :, None]),
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
    vae = bench_vae(cfg, device)
    model = bench_model(cfg, device)
    batch = pixel_batch(cfg, 1, device)
    wm = bench_world_model(cfg, model, vae, device)
    lat = latent_batch(cfg, 1, device)
    tau = torch.full((1,), 0.5, device=device)

    def single_forward():
        with torch.no_grad():
            return model(z_t=lat["z_real"][:, :, 1:], tau=tau, z0=lat["z_real"][:, :, :1], actions=lat["actions"],
                         state0=lat["state0"], text=lat["text"], text_mask=lat["text_mask"])

    clock = ForwardClock(model, device)
    samplers = {(n_sim, n_real, w): sampler_for(wm, n_sim, n_real, w) for n_sim, n_real, w in opts.grid}

    def ours(n_sim, n_real, w):
        gen = torch.Generator(device=device).manual_seed(1234)
        clock.active, clock.seconds = True, 0.0
        try:
            return samplers[(n_sim, n_real, w)](batch, gen)
        finally:
            clock.active = False

    def reference(n_sim, n_real, w):
        gen = torch.Generator(device=device).manual_seed(1234)
        return reference_sample(model, vae, batch, cfg, n_sim, n_real, w, gen, wm.masker)

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
