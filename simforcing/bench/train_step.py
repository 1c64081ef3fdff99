"""Benchmark section 2, ``train``: one training step (``training.step``, as the train loop takes it) of ``sft`` and
``simforcing`` on the same latent batch — time, peak memory, network evaluations and the ideal ratio from
forward/backward counts."""

from __future__ import annotations

import copy
from typing import Callable

import torch

from simforcing.bench.inputs import bench_model, latent_batch
from simforcing.bench.measure import STATS, Times, median, peak_bytes, time_calls
from simforcing.bench.options import BenchOptions
from simforcing.config import Config
from simforcing.methods import METHODS, method_preset
from simforcing.models.weights import frozen_copy
from simforcing.training.optim import build_optimizer
from simforcing.training.step import apply_update, forward_backward


def _count_hook(counter: dict, key: str):
    def hook(module, args, kwargs):
        z_t = args[0] if args else kwargs["z_t"]
        counter[key] = counter.get(key, 0) + int(z_t.shape[0])
    return hook


def bench_train(cfg: Config, device: torch.device, opts: BenchOptions, log: Callable[[str], None]) -> dict:
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
    params = [p for p in student.parameters() if p.requires_grad]
    gen = torch.Generator(device=device)
    step = {"i": 0}

    def fwd_bwd(m: str) -> None:  # training.step: the train loop's autocast, step function and backward
        step["i"] += 1
        gen.manual_seed(step["i"])
        forward_backward(METHODS[m], student, teacher, batch, mcfgs[m], gen, device)

    def full_step(m: str) -> None:  # and its clipping and optimizer update
        fwd_bwd(m)
        apply_update(params, optimizer, None, cfg.train.grad_clip)

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
