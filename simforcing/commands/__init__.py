"""The `simforcing` subcommands: arguments in, library call, a short report out. The work is in the library.

Each module holds the subcommands of one group (``data``, ``model``, ``train``, ``sample``, ``evaluate``, ``policy``,
``bench``, ``demo``), each a module attribute holding a :class:`Subcommand`; ``simforcing.cli.COMMANDS`` names them
with their words (the one place the words are spelt). ``simforcing.cli`` finds the command, builds its parser,
resolves its config with ``Subcommand.config`` (preset or ``--config`` or a run's config, plus
``--section.field=value`` overrides, validated), answers ``--dry-run``, calls ``Subcommand.run(args, cfg)`` and turns
the errors of ``simforcing.errors`` into messages and exit codes — once, for every command. The helpers of commands
that take a run folder are in ``commands.runs`` (they load torch and the model code; ``data check`` does not).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Callable, Optional

from simforcing.config import Config, ConfigError, apply_overrides, load_config, parse_overrides


@dataclass(frozen=True)
class Subcommand:
    """One command: its arguments, its config (None: the command takes no config and no overrides) and its run."""

    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Optional[Config]], int]
    config: Optional[Callable[[argparse.Namespace], Config]] = None
    interrupted: str = "run the same command again"  # what is said after Ctrl-C (exit 130)


def add_dataset_out(parser: argparse.ArgumentParser) -> None:
    """The dataset folder a generator writes, as OUT or --out OUT (read back with :func:`dataset_out`)."""
    parser.add_argument("out", nargs="?", default=None, help="dataset folder to write (or --out)")
    parser.add_argument("--out", dest="out_opt", default=None, help="dataset folder to write")


def dataset_out(args: argparse.Namespace) -> str:
    if (args.out is None) == (args.out_opt is None):
        raise ConfigError("OUT: give the dataset folder once, as OUT or --out OUT")
    return args.out or args.out_opt


class Given(argparse.Action):
    """Store the value and note that the option was given, so a default can be told from a choice."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.given = frozenset(getattr(namespace, "given", None) or ()) | {self.dest}


def given(args: argparse.Namespace, dest: str) -> bool:
    """Whether option ``dest`` was on the command line (``--config``: set at all; ``--preset``: typed, not defaulted)."""
    return dest in (getattr(args, "given", None) or ()) or (dest == "config" and getattr(args, "config", None))


def note_same_inputs(named: dict[str, str], flag: str, file: str, what: str) -> None:
    """Say so (stderr, a ``note:`` line) when two names of ``named`` (name -> folder holding ``file``) are one input:
    the same folder (however spelt) or a copy of it (``file`` byte-identical) — one world model compared with itself
    under two names, whose every statistic against the other name is a tautology. Not refused: it is a control."""
    import hashlib
    from pathlib import Path

    seen: dict[object, str] = {}
    for name, folder in named.items():
        f = Path(folder) / file
        keys = [Path(folder).resolve()] + ([hashlib.sha256(f.read_bytes()).hexdigest()] if f.is_file() else [])
        for key in keys:
            if key in seen and seen[key] != name:
                how = "the same folder" if isinstance(key, Path) else f"copies of one {file}"
                print(f"note: {flag}: {seen[key]!r} and {name!r} are {how} ({folder}): one {what} compared with "
                      "itself — the two agree by construction", file=sys.stderr, flush=True)
                break
            seen.setdefault(key, name)


def add_config_args(parser: argparse.ArgumentParser, preset_default: str | None = "demo") -> None:
    """--preset, --config (a run's config.json) and --dry-run; overrides go after them as --section.field=value."""
    parser.add_argument("--preset", default=preset_default, action=Given, help="demo | bridge | interndata_a1")
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


def refuse_config_with(args: argparse.Namespace, flag: str, why: str) -> None:
    """ConfigError when --preset or --config was given where ``flag`` decides the config (they would be unused)."""
    for dest in ("config", "preset"):
        if given(args, dest):
            raise ConfigError(f"--{dest}: not with {flag} ({why}); leave it out and give changes as "
                              "--section.field=value")


def note_unused_config(args: argparse.Namespace, run_cfg: Config, run: str) -> None:
    """On --resume the run's own config is the base (documented precedence): say so when --config, or a --preset
    other than the run's, was given too."""
    unused = [f"--config {args.config}"] if given(args, "config") else []
    if given(args, "preset") and args.preset != run_cfg.preset:
        unused.append(f"--preset {args.preset}")
    if unused:
        print(f"note: --resume continues {run} with its own config (preset {run_cfg.preset!r}); "
              f"{' and '.join(unused)} not used — give changes as --section.field=value", file=sys.stderr,
              flush=True)
