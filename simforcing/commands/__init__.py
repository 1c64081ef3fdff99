"""The `simforcing` subcommands: arguments in, library call, a short report out. The work is in the library.

Each module holds the subcommands of one group (``data``, ``model``, ``train``, ``sample``, ``evaluate``, ``bench``,
``demo``) as ``SUBCOMMANDS``: command words -> :class:`Subcommand`. ``simforcing.cli`` finds the command, builds its
parser, resolves its config with ``Subcommand.config`` (preset or ``--config`` or a run's config.json, plus
``--section.field=value`` overrides, validated), answers ``--dry-run``, calls ``Subcommand.run(args, cfg)`` and turns
the errors of ``simforcing.errors`` into messages and exit codes — once, for every command.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from simforcing.config import Config, ConfigError, apply_overrides, load_config, parse_overrides


@dataclass(frozen=True)
class Subcommand:
    """One command: its arguments, its config (None: the command takes no config and no overrides) and its run."""

    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Optional[Config]], int]
    config: Optional[Callable[[argparse.Namespace], Config]] = None


def add_dataset_out(parser: argparse.ArgumentParser) -> None:
    """The dataset folder a generator writes, as OUT or --out OUT (read back with :func:`dataset_out`)."""
    parser.add_argument("out", nargs="?", default=None, help="dataset folder to write (or --out)")
    parser.add_argument("--out", dest="out_opt", default=None, help="dataset folder to write")


def dataset_out(args: argparse.Namespace) -> str:
    if (args.out is None) == (args.out_opt is None):
        raise ConfigError("OUT: give the dataset folder once, as OUT or --out OUT")
    return args.out or args.out_opt


def add_config_args(parser: argparse.ArgumentParser, preset_default: str | None = "demo") -> None:
    """--preset, --config (a run's config.json) and --dry-run; overrides go after them as --section.field=value."""
    parser.add_argument("--preset", default=preset_default, help="demo | bridge | interndata_a1")
    parser.add_argument("--config", default=None, help="start from this config.json instead of a preset")
    parser.add_argument("--dry-run", action="store_true", help="print the resolved config and exit")


def config_from_args(args: argparse.Namespace, base: Config | None = None, validate: bool = True) -> Config:
    """Preset (or --config, or ``base``) + overrides from the command line, validated."""
    if base is not None:
        cfg = base
    elif getattr(args, "config", None):
        cfg = Config.load(args.config)
    else:
        cfg = load_config(args.preset or "demo")
    apply_overrides(cfg, parse_overrides(getattr(args, "overrides", []) or []))
    return cfg.validate() if validate else cfg


def config_for_run(args: argparse.Namespace) -> Config:
    """The run's config.json (``--ckpt``) + command-line overrides (validated). --preset/--config are ignored."""
    path = Path(args.ckpt) / "config.json"
    if not path.exists():
        raise ConfigError(f"--ckpt: {path} is missing; expected a training run folder written by `simforcing train`")
    return config_from_args(args, base=Config.load(path))
