"""`simforcing bench`: every section of ``simforcing.bench`` -> FILE.json, FILE.md (tables), FILE_scaling.png."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from simforcing.bench.options import SECTIONS, BenchOptions
from simforcing.bench.report import format_tables, run_bench
from simforcing.commands import Subcommand, add_config_args, config_from_args
from simforcing.config import Config, ConfigError
from simforcing.utils import atomic_write_text, resolve_device


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
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


def bench(args: argparse.Namespace, cfg: Config) -> int:
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


SUBCOMMANDS = {("bench",): Subcommand(add_bench_arguments, bench, config_from_args)}
