"""The benchmark's report: every section of a run into one JSON (``run_bench``), the targets checked on both clocks,
and the markdown tables."""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch

from simforcing.bench.compile_step import bench_compile, bench_precision, compile_table, precision_table
from simforcing.bench.simulator import bench_simulator, simulator_table
from simforcing.bench.measure import STATS, machine_info
from simforcing.bench.options import SCHEMA, SECTIONS, TARGETS, BenchOptions
from simforcing.bench.policy import bench_policy, format_policy
from simforcing.bench.fewstep import bench_fewstep, format_fewstep
from simforcing.bench.rollout import bench_rollout, bench_wm_policy, format_rollout
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
    if results.get("policy"):
        lines += format_policy(results["policy"])
    lines += format_rollout(results.get("rollout"), results.get("wm_policy"))
    lines += format_fewstep(results.get("fewstep"))
    if results.get("compile", {}).get("rows"):
        lines += compile_table(results["compile"])
    if results.get("precision", {}).get("rows"):
        lines += precision_table(results["precision"])
    if results.get("simulator", {}).get("rows"):
        lines += simulator_table(results["simulator"])
    tg = results.get("targets", {})
    if tg:
        def verdict(v: dict) -> str:
            return " / ".join("ok" if v[k] else "FAILED" for k in ("ok", "ok_cpu") if k in v)

        lines.append("Targets (wall clock / CPU time): " + "; ".join(f"{k} {verdict(v)}" for k, v in tg.items()))
    return "\n".join(lines)


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def _gib(x) -> str:
    return "-" if x is None else f"{x / 2**30:.1f}"


def _seconds(x) -> str:
    return "-" if x is None else f"{x:.1f}"


COMPILE_NAMES = {"off": "eager", "module": "compiled (module)", "regional": "compiled", "graphs": "CUDA graphs"}


def _compile_cell(r: dict) -> str:
    """A ``bench --gpu`` row's compile mode as run: eager / compiled / CUDA graphs, what it ran as when that differs
    (graphs off CUDA), a fallback to eager, the graphs inductor declined to capture."""
    asked = r.get("compile", "off")
    text = COMPILE_NAMES.get(asked, asked)
    ran = r.get("compile_mode", asked)
    if r.get("compile_failure"):
        text += " (failed: eager)"
    elif ran != asked:
        text += f" (ran as {COMPILE_NAMES.get(ran, ran)})"
    if r.get("cudagraph_skips"):
        text += f", {r['cudagraph_skips']} graphs not captured"
    return text


def _train_line(name: str, r: dict) -> str:
    cells = f"| {name} | {_compile_cell(r)} | {r['batch_size']} |"
    if "error" in r or "skipped" in r:
        return f"{cells} {r.get('error') or r['skipped']} | | | | | | | | |"
    return (f"{cells} {r['step_s']:.3f} | {r['fwd_bwd_s']:.3f} | {r['update_s']:.3f} | "
            f"{r['tokens_per_s']:.0f} | {_pct(r['mfu'])} | {_pct(r['of_measured_matmul'])} | {_pct(r['hfu'])} | "
            f"{_gib(r.get('peak_allocated_bytes'))} | {_seconds(r.get('compile_s'))} |")


def _gpu_header(results: dict) -> list[str]:
    m, d, plan, mo = results["machine"], results.get("device", {}), results["plan"], results.get("model", {})
    if d:
        peak = d.get("peak_bf16_flops")
        device = (f"Device: {d['name']}"
                  + (f" (compute {d['capability']}, {_gib(d['total_memory_bytes'])} GiB)" if "capability" in d else "")
                  + f", torch {m['torch']}" + (f" (CUDA {d['cuda']})" if d.get("cuda") else "")
                  + f"; dense bf16 peak {'-' if not peak else f'{peak / 1e12:.0f}'} TFLOP/s ({d['peak_source']}), "
                  f"measured {d['matmul_size']}³ bf16 matmul {d['measured_matmul_flops'] / 1e12:.1f} TFLOP/s.")
    else:
        device = f"Device: {m['device_name']} (not measured)."
    model = (f"Model: preset {plan['preset']}, {plan['num_layers']} of {plan['preset_layers']} layers"
             + (f" ({plan['layers_note']})" if plan["layers_note"] else ""))
    if mo:
        model += (f", {mo['parameters'] / 1e9:.3f} B parameters, {mo['tokens_per_sample']} tokens per sample, "
                  f"{mo['forward_flops_per_sample'] / 1e12:.3f} TFLOP per forward; random weights, fp32 weights with "
                  "bf16 autocast, activation checkpointing per layer")
    limit = results.get("time_limit_s")
    return [device, model + ".", f"Whole run: {results.get('seconds', 0):.0f} s"
            + (f" (budget {limit:.0f} s; a row past its section's share is skipped)." if limit else "."), ""]


def format_gpu_tables(results: dict) -> str:
    """Markdown of a ``bench --gpu`` report (``simforcing.bench.gpu``): device, training steps, FSDP2, sampler."""
    lines = _gpu_header(results)
    t, f, s = results.get("train", {}), results.get("fsdp", {}), results.get("sampler", {})
    if t.get("rows") or "step" in f:
        lines += ["Training step (one process; fwd+bwd, then gradient clipping + AdamW; frozen fp32 teacher resident; "
                  "train.compile: eager, compiled = each layer compiled (regional), CUDA graphs = each layer compiled "
                  "and replayed as a CUDA graph; MFU = model FLOPs (teacher fwd + 3 × student fwd, no recomputation) "
                  "/ s / peak; HFU counts the recomputation; peak = max allocated during one step, weights and "
                  "optimizer state included; warm-up = the seconds of the warm-up steps beyond a step, compiling; "
                  f"predicted peak {_gib(t.get('predicted_peak_bytes'))} GiB):", "",
                  "| step | train.compile | batch | step (s) | fwd+bwd (s) | clip + AdamW (s) | tokens/s | MFU | "
                  "of measured matmul | HFU | peak memory (GiB) | warm-up (s) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += [_train_line(r["method"], r) for r in t.get("rows", [])]
        if "step" in f:
            lines.append(_train_line(f"simforcing, FSDP2 ({f['backend']}, world size 1, {f['param_dtype']} params)",
                                     f["step"]))
        lines.append("")
    if "step" in f:
        lines += [f"FSDP2 on one process: parameters sharded as DTensors: {f['parameters_are_dtensors']}; SimForcing "
                  f"loss at the same weights and noise {f['loss_fsdp']:.6g} against {f['loss_plain']:.6g} without "
                  f"FSDP (relative difference {f['loss_relative_difference']:.1e}); gradient norm "
                  f"{f['grad_norm_fsdp']:.6g} against {f['grad_norm_plain']:.6g} "
                  f"({f['grad_norm_relative_difference']:.1e}).", ""]
    elif "error" in f or "skipped" in f:
        lines += [f"FSDP2: {f.get('error') or f['skipped']}", ""]
    if s.get("configs"):
        lines += [f"Sampler (batch 1, {s['vae']} VAE ({s['vae_parameters'] / 1e6:.0f} M parameters, random weights, "
                  f"{s['vae_dtype']}); sample.compile as the training step's; latency per sample = first-frame "
                  "encode + simulation + real rollout + decode, median of the timed samples after the warm-up ones; "
                  "warm-up = their seconds beyond a sample, compiling):", "",
                  "| N_s | N_r | w | weights | sample.compile | latency (s) | paper (s) | ours / paper | forwards | "
                  "phases (ms) | network MFU | warm-up (s) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        extra = s.get("bf16_weights")
        for r in s["configs"] + (extra if isinstance(extra, list) else []):
            cells = f"| {r['n_sim']} | {r['n_real']} | {r['w']:g} | {r['weights']} | {_compile_cell(r)} |"
            if "skipped" in r:
                lines.append(f"{cells} {r['skipped']} | | | | | | |")
                continue
            phases = ", ".join(f"{k} {v * 1e3:.0f}" for k, v in r["phases_s"].items())
            paper = "-" if r["paper_latency_s"] is None else f"{r['paper_latency_s']:.3f}"
            ratio = "-" if r["ratio_to_paper"] is None else f"{r['ratio_to_paper']:.3f}"
            lines.append(f"{cells} {r['latency_s']:.3f} | {paper} | {ratio} | {r['forwards']} | {phases} | "
                         f"{_pct(r['network_mfu'])} | {_seconds(r.get('compile_s'))} |")
        if isinstance(extra, dict):
            lines += ["", f"With bf16 weights: {extra['error']}"]
        lines.append("")
    elif "error" in s:
        lines += [f"Sampler: {s['error']}", ""]
    return "\n".join(lines).rstrip() + "\n"


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
        elif name == "policy":
            results["policy"] = bench_policy(cfg, device, opts, log)
        elif name == "rollout":
            results["rollout"] = bench_rollout(cfg, device, opts, log)
        elif name == "wm_policy":
            results["wm_policy"] = bench_wm_policy(cfg, device, opts, log)
        elif name == "fewstep":
            results["fewstep"] = bench_fewstep(cfg, device, opts, log)
        elif name == "compile":
            results["compile"] = bench_compile(cfg, device, opts, log)
        elif name == "precision":
            results["precision"] = bench_precision(cfg, device, opts, log)
        elif name == "simulator":
            results["simulator"] = bench_simulator(opts, log)
        section_times[name] = time.perf_counter() - s0
    results["targets"] = check_targets(results)
    results["machine"]["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    results["section_seconds"] = section_times
    results["seconds"] = time.perf_counter() - t0
    atomic_write_json(out, results)
    os.chmod(out, 0o644)  # the atomic write's temporary file is private; the report is not
    return results
