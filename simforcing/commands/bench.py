"""`simforcing bench`: every section of ``simforcing.bench`` -> FILE.json, FILE.md (tables), FILE_scaling.png;
`simforcing bench --gpu`: GPU readiness (``simforcing.bench.gpu``) -> FILE.json, FILE.md."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from simforcing.bench.gpu import run_gpu_bench
from simforcing.bench.options import OPT_IN_SECTIONS, SECTIONS, BenchOptions
from simforcing.bench.report import format_gpu_tables, format_tables, run_bench
from simforcing.commands import Subcommand, add_config_args, config_from_args
from simforcing.config import Config, ConfigError
from simforcing.errors import EXIT_NO_DEVICE, EXIT_OK
from simforcing.utils import atomic_write_text, check_output_path, resolve_device


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser, preset_default=None)
    parser.add_argument("--out", required=True,
                        help="JSON file to write (the markdown tables and the scaling plot go next to it)")
    parser.add_argument("--quick", action="store_true", help="a subset of the grid and fewer repeats (< 2 min on CPU)")
    parser.add_argument("--tiny", action="store_true", help="smallest run, for the test suite")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (1: the demo model's ops are too small to gain from more)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset of " +
                        ", ".join(SECTIONS) + f" (the default: all), or {', '.join(OPT_IN_SECTIONS)} (opt-in: "
                        "compiled training steps and sampler calls against eager, minutes on a CPU; the training steps "
                        "in fp32 against bf16 autocast at 1 and 2 threads; the synthetic benchmark's simulator per "
                        "frame: the servo controller against its stepped loop, the IK, the renders)")
    parser.add_argument("--gpu", action="store_true",
                        help="GPU readiness instead: the bridge preset (5B, random weights) on one CUDA GPU in bf16 "
                             "with activation checkpointing: the SimForcing training step eager, compiled and in CUDA "
                             "graphs (train.compile off/regional/graphs) at batch 1 and 8 (peak memory, tokens/s, "
                             "MFU), sampler latency against the paper eager and in CUDA graphs, FSDP2 on one process "
                             f"(under 4 minutes); without CUDA it stops with exit code {EXIT_NO_DEVICE} unless "
                             "--device cpu")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="--gpu: the device's dense bf16 peak in TFLOP/s for MFU (default: by device name, "
                             "H100/H200/A100 and others; see simforcing.bench.measure.PEAK_BF16)")


def config_for_bench(args: argparse.Namespace) -> Config:
    """--preset (default: bridge with --gpu, demo otherwise) or --config, plus overrides."""
    if not args.preset and not args.config:
        args.preset = "bridge" if args.gpu else "demo"
    return config_from_args(args)


def bench(args: argparse.Namespace, cfg: Config) -> int:
    if args.gpu:
        return bench_gpu(args, cfg)
    if args.peak_tflops is not None:
        raise ConfigError("--peak-tflops: only with --gpu")
    sections = tuple(s.strip() for s in args.sections.split(",") if s.strip())
    unknown = [s for s in sections if s not in SECTIONS + OPT_IN_SECTIONS]
    if unknown or not sections:
        raise ConfigError(f"--sections: got {args.sections!r}; expected a comma-separated subset of "
                          f"{', '.join(SECTIONS + OPT_IN_SECTIONS)}")
    if args.threads < 1:
        raise ConfigError(f"--threads: got {args.threads}; expected an integer >= 1")
    opts = BenchOptions.for_mode(args.quick, args.tiny)
    out = check_output_path(args.out, "--out", folder=False)
    results = run_bench(cfg, opts, out, resolve_device(args.device, "--device"), args.threads, sections,
                        log=lambda msg: print(msg, flush=True))
    tables = format_tables(results)
    atomic_write_text(out.with_suffix(".md"), tables + "\n")
    os.chmod(out.with_suffix(".md"), 0o644)
    print()
    print(tables)
    print(f"\nwrote {out} and {out.with_suffix('.md').name} ({results['seconds']:.0f} s)")
    return 0


def no_cuda_message() -> str:
    why = "this torch is a CPU build" if torch.version.cuda is None else \
        f"torch (CUDA {torch.version.cuda}) sees no GPU"
    return (f"simforcing bench --gpu: no CUDA device ({why}; torch {torch.__version__}); the GPU benchmark needs one "
            f"CUDA GPU and ran nothing (exit code {EXIT_NO_DEVICE}). On a GPU machine install a CUDA torch (README, "
            "GPU users). To run its schedule on the CPU with a small model: --device cpu --preset demo --tiny")


def bench_gpu(args: argparse.Namespace, cfg: Config) -> int:
    """`bench --gpu` (simforcing.bench.gpu). No CUDA device: a named message on stderr and EXIT_NO_DEVICE."""
    if args.quick:
        raise ConfigError("--quick: not with --gpu (its schedule is fixed; --tiny shrinks it for tests)")
    if args.device not in ("auto", "cuda", "cpu"):
        raise ConfigError(f"--device: got {args.device!r}; expected auto, cuda or cpu")
    check_output_path(args.out, "--out", folder=False)
    if args.device != "cpu" and not torch.cuda.is_available():
        print(no_cuda_message(), file=sys.stderr, flush=True)
        return EXIT_NO_DEVICE
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("bench --gpu: runs as one plain process (not under torchrun); it builds its own process "
                          "group of world size 1 for the FSDP2 check")
    device = torch.device("cpu") if args.device == "cpu" else torch.device("cuda", torch.cuda.current_device())
    out = Path(args.out)
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    try:
        results = run_gpu_bench(cfg, device, out, args.peak_tflops, args.tiny, log=lambda msg: print(msg, flush=True))
    finally:
        torch.set_num_threads(threads)
    tables = format_gpu_tables(results)
    atomic_write_text(out.with_suffix(".md"), tables)
    os.chmod(out.with_suffix(".md"), 0o644)
    print()
    print(tables, end="")
    print(f"\nwrote {out} and {out.with_suffix('.md').name} ({results['seconds']:.0f} s)")
    return EXIT_OK


BENCH = Subcommand(add_bench_arguments, bench, config_for_bench)
