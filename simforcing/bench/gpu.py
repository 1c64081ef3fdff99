"""Benchmark section 5, ``gpu``: the 5B preset in bf16 on one CUDA device — training and sampling tokens/s and
model-FLOPs utilisation; skipped without CUDA."""

from __future__ import annotations

import copy
from typing import Callable

import torch

from simforcing.bench.inputs import bench_model, latent_batch
from simforcing.bench.measure import flops_split, peak_bytes, peak_flops, time_calls
from simforcing.bench.options import BenchOptions
from simforcing.config import Config, load_config
from simforcing.methods import METHODS, method_preset
from simforcing.models.weights import frozen_copy
from simforcing.sample import CountingModel, real_rollout, simulation_rollout
from simforcing.utils import autocast_context


def gpu_measure(cfg: Config, device: torch.device, repeats: int, n_sim: int = 1, n_real: int = 10,
                w: float = 0.6) -> dict:
    """Training (sft, simforcing: fwd + bwd) and sampling (rollouts of (n_sim, n_real, w), no VAE) of ``cfg`` in
    bf16 autocast on ``device``: seconds, tokens/s, achieved FLOP/s and MFU against the device's peak."""
    amp = autocast_context(cfg, device, cuda_only=True)  # bf16 with train.mixed_precision "bf16" (bench_gpu sets it)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = peak_flops(name)
    fwd_flops = flops_split(cfg)["total"]
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
