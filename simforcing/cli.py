"""The ``simforcing`` command. Parses the command line, then calls one function per subcommand.

Each subcommand lives in its own module, imported only when that subcommand runs, and exposes
``add_arguments(parser)`` and ``run(args) -> int``. Config overrides (``--section.field=value``) that argparse does
not know are collected into ``args.overrides`` and applied by :func:`config_from_args`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from simforcing.config import Config, ConfigError, load_config

# (command words, module, one-line help)
COMMANDS: list[tuple[tuple[str, ...], str, str]] = [
    (("data", "synth"), "simforcing.data.synthetic.generate", "generate the embedded MuJoCo paired sim/real benchmark"),
    (("data", "check"), "simforcing.data.check", "validate a paired dataset and print a summary"),
    (("data", "stats"), "simforcing.data.stats", "compute min-max action/state statistics on the training split"),
    (("data", "embed-text"), "simforcing.models.text", "fill the instruction-embedding cache with a (um)T5 encoder"),
    (("data", "import-lerobot"), "simforcing.data.lerobot", "import paired sim/real LeRobot v3.0 datasets"),
    (("data", "encode"), "simforcing.data.latent_cache", "encode windows with the frozen VAE into a latent cache"),
    (("model", "info"), "simforcing.models.info", "parameters, tokens, FLOPs and per-GPU memory of a preset"),
    (("model", "init-action-expert"), "simforcing.models.weights", "build action-expert weights from Wan2.2 weights"),
    (("model", "fit-vae"), "simforcing.models.vae", "fit the small demo VAE on a dataset's frames"),
    (("pretrain",), "simforcing.train", "stage 1: train the simulation world model (the teacher)"),
    (("train",), "simforcing.train", "stage 2: train the real-domain student with a method (sft ... simforcing)"),
    (("generate",), "simforcing.sample", "sample videos with the two-stage guided sampler"),
    (("evaluate",), "simforcing.evaluate.run", "PSNR/SSIM/LPIPS/FID/FVD and latency on a split"),
    (("sweep", "cfg"), "simforcing.evaluate.sweeps", "Tab. A1: p x w over checkpoints"),
    (("sweep", "steps"), "simforcing.evaluate.sweeps", "Tab. A2-A4: N_s x N_r x w with latency"),
    (("bench",), "simforcing.bench", "latency, training-step cost, data throughput and scaling -> JSON"),
    (("demo",), "simforcing.demo", "the whole paper on the embedded synthetic benchmark"),
]


def add_config_args(parser: argparse.ArgumentParser, preset_default: str | None = "demo") -> None:
    """--preset, --config (a run's config.json) and --dry-run; overrides go after them as --section.field=value."""
    parser.add_argument("--preset", default=preset_default, help="demo | bridge | interndata_a1")
    parser.add_argument("--config", default=None, help="start from this config.json instead of a preset")
    parser.add_argument("--dry-run", action="store_true", help="print the resolved config and exit")


def config_from_args(args: argparse.Namespace, base: Config | None = None, validate: bool = True) -> Config:
    """Preset (or --config, or ``base``) + overrides from the command line, validated."""
    from simforcing.config import apply_overrides, parse_overrides

    if base is not None:
        cfg = base
    elif getattr(args, "config", None):
        cfg = Config.load(args.config)
    else:
        cfg = load_config(args.preset or "demo")
    apply_overrides(cfg, parse_overrides(getattr(args, "overrides", []) or []))
    return cfg.validate() if validate else cfg


def dry_run(cfg: Config) -> int:
    print(cfg.to_json())
    return 0


def _top_help() -> str:
    lines = ["usage: simforcing COMMAND [options] [--section.field=value ...]", "", "commands:"]
    for words, _, help_ in COMMANDS:
        lines.append(f"  {' '.join(words):<26} {help_}")
    lines += ["", "Run `simforcing COMMAND --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_top_help())
        return 0 if argv else 2
    if argv[0] == "--version":
        from simforcing import __version__

        print(__version__)
        return 0
    match = None
    for words, module, help_ in COMMANDS:
        if tuple(argv[: len(words)]) == words:
            match = (words, module, help_)
            break
    if match is None:
        groups = sorted({w[0] for w, _, _ in COMMANDS if len(w) > 1})
        if argv[0] in groups:
            subs = [w[1] for w, _, _ in COMMANDS if w[0] == argv[0]]
            print(f"usage: simforcing {argv[0]} {{{','.join(subs)}}} ...", file=sys.stderr if argv[1:] else sys.stdout)
            for w, _, h in COMMANDS:
                if w[0] == argv[0]:
                    print(f"  {' '.join(w):<26} {h}")
            return 0 if argv[1:] in ([], ["-h"], ["--help"]) else 2
        print(f"simforcing: unknown command {argv[0]!r}\n\n{_top_help()}", file=sys.stderr)
        return 2
    words, module_name, help_ = match
    mod = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog="simforcing " + " ".join(words), description=help_,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                     epilog="Any config field can be overridden: --section.field=value")
    if hasattr(mod, "add_arguments_for"):
        mod.add_arguments_for(words, parser)
    else:
        mod.add_arguments(parser)
    args, rest = parser.parse_known_args(argv[len(words):])
    args.overrides = rest
    args.command = words
    try:
        if hasattr(mod, "run_for"):
            return int(mod.run_for(words, args) or 0)
        return int(mod.run(args) or 0)
    except ConfigError as e:
        print(f"simforcing {' '.join(words)}: config error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
