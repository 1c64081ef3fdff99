"""The benchmark's report: every section of a run into one JSON (``run_bench``), the targets checked on both clocks,
and the markdown tables."""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch

from simforcing.bench.gpu import bench_gpu
from simforcing.bench.measure import STATS, machine_info
from simforcing.bench.options import SCHEMA, SECTIONS, TARGETS, BenchOptions
from simforcing.bench.sampler import bench_sampler
from simforcing.bench.scaling import bench_scaling, plot_scaling
from simforcing.bench.throughput import bench_data
from simforcing.bench.train_step import bench_train
from simforcing.config import Config
from simforcing.utils import atomic_write_json


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
