"""The ``simforcing`` command: finds the subcommand, then runs it under one preamble and one error policy.

Subcommands live in ``simforcing.commands`` (one module per group, imported only when one of its commands runs),
each a ``Subcommand(add_arguments, run, config)`` that :data:`COMMANDS` names with its words. For every command,
:func:`run_subcommand`:

1. resolves the config with ``config(args)`` (preset or ``--config`` or a run's config.json, plus the
   ``--section.field=value`` overrides argparse did not know, validated); a command without a config refuses
   overrides; ``--dry-run`` prints the config and exits 0;
2. calls ``run(args, cfg)``, whose return value is the exit code (0, or a training run's 3 diverged / 75 stopped);
3. reports an expected error in one line on stderr, without a traceback:

   | error                                    | message                                    | exit |
   |------------------------------------------|--------------------------------------------|------|
   | ConfigError (bad config or argument)     | ``simforcing CMD: config error: ...``      | 2    |
   | FileExistsError (the output is there)    | ``simforcing CMD: config error: ...``      | 2    |
   | DataError                                | ``simforcing CMD: data error [kind] ...``  | 1    |
   | CheckpointError                          | ``simforcing CMD: checkpoint error: ...``  | 1    |
   | OutputError (a write failed: disk full)  | ``simforcing CMD: write error: FILE: ...`` | 1    |
   | any other OSError (the OS said no)       | ``simforcing CMD: I/O error: ...``         | 1    |
   | KeyboardInterrupt (Ctrl-C)               | ``simforcing CMD: interrupted; <how to continue>`` | 130 |

   Ctrl-C while the command's module is still being imported (torch takes seconds) is the same one line and 130.
   Any other exception is a bug and keeps its traceback. Errors: ``simforcing.errors``. (Training commands turn
   SIGINT/SIGTERM into a checkpoint and exit 75 themselves; Ctrl-C reaches this handler before or after the loop.)
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

import simforcing.inductor_cache as inductor_cache
from simforcing.version import __version__
from simforcing.errors import (EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, CheckpointError, ConfigError,
                               DataError, OutputError)

# (command words, "module:ATTRIBUTE" of its Subcommand, one-line help): the one place the command words are spelt
COMMANDS: list[tuple[tuple[str, ...], str, str]] = [
    (("data", "synth"), "simforcing.commands.data:SYNTH",
     "generate the embedded MuJoCo paired sim/real benchmark"),
    (("data", "check"), "simforcing.commands.data:CHECK",
     "validate a dataset (paired world-model or policy) and print a summary"),
    (("data", "stats"), "simforcing.commands.data:STATS",
     "compute min-max action/state statistics on the training split"),
    (("data", "embed-text"), "simforcing.commands.data:EMBED_TEXT",
     "fill the instruction-embedding cache with a (um)T5 encoder"),
    (("data", "import-lerobot"), "simforcing.commands.data:IMPORT_LEROBOT",
     "import paired sim/real LeRobot v3.0 datasets (or, with --wrist-camera, a policy dataset)"),
    (("data", "encode"), "simforcing.commands.data:ENCODE", "encode windows with the frozen VAE into a latent cache"),
    (("data", "check-twin"), "simforcing.commands.data:CHECK_TWIN",
     "render the recorded simulation videos again with the robot's digital twin and compare (PSNR per episode)"),
    (("data", "synth-policy"), "simforcing.commands.data:SYNTH_POLICY",
     "scripted-expert demonstrations of the synthetic tasks, two cameras (a policy dataset)"),
    (("model", "info"), "simforcing.commands.model:INFO", "parameters, tokens, FLOPs and per-GPU memory of a preset"),
    (("model", "init-action-expert"), "simforcing.commands.model:INIT_ACTION_EXPERT",
     "build action-expert weights from Wan2.2 weights"),
    (("model", "fit-vae"), "simforcing.commands.model:FIT_VAE", "fit the small demo VAE on a dataset's frames"),
    (("model", "fit-probe"), "simforcing.commands.model:FIT_PROBE",
     "fit the state probe behind the action-following error"),
    (("model", "fit-judge"), "simforcing.commands.model:FIT_JUDGE",
     "fit the success judge that reads task success from frames (world-model policy evaluation)"),
    (("pretrain",), "simforcing.commands.train:PRETRAIN", "stage 1: train the simulation world model (the teacher); "
     "--method video_prior: stage 0, the video base (no actions) that stage 1 can start from (--init RUN0)"),
    (("train",), "simforcing.commands.train:TRAIN",
     "stage 2: train the real-domain student with a method (sft ... simforcing)"),
    (("distill",), "simforcing.commands.distill:DISTILL",
     "a few-step student of a stage-2 world model: its guided sampler in K network evaluations per chunk"),
    (("generate",), "simforcing.commands.sample:GENERATE", "sample videos with the two-stage guided sampler"),
    (("rollout",), "simforcing.commands.sample:ROLLOUT",
     "roll a world model out chunk after chunk over whole episodes; drift against the recorded truth"),
    (("evaluate",), "simforcing.commands.evaluate:EVALUATE", "PSNR/SSIM/LPIPS/FID/FVD and latency on a split"),
    (("export",), "simforcing.commands.export:EXPORT",
     "a world-model run as a shareable folder (sharded safetensors, config, model card) for from_pretrained"),
    (("sweep", "cfg"), "simforcing.commands.evaluate:SWEEP_CFG", "Tab. A1: p x w over checkpoints"),
    (("sweep", "steps"), "simforcing.commands.evaluate:SWEEP_STEPS", "Tab. A2-A4: N_s x N_r x w with latency"),
    (("policy", "train"), "simforcing.commands.policy:TRAIN",
     "train a policy: --setting action_only|unconditional|video_action --init base|RUN"),
    (("policy", "eval"), "simforcing.commands.policy:EVAL",
     "closed-loop success (synthetic benchmark, inside a world model, or LIBERO)"),
    (("policy", "agreement"), "simforcing.commands.policy:AGREEMENT",
     "does a world model rank policies as the simulator does? correlations, MMRV, per-episode agreement"),
    (("policy", "estimate"), "simforcing.commands.policy:ESTIMATE",
     "success with valid intervals from a few ground-truth trials and many world-model episodes (PPI++)"),
    (("policy", "probe"), "simforcing.commands.policy:PROBE",
     "linear probe: what action-only policies read from their frozen video expert (hand and object positions)"),
    (("fidelity", "point"), "simforcing.commands.fidelity:POINT",
     "a world model's fidelity as a simulator: oracle error, twin drift, stillness, ranking (docs/ROLLOUTS.md)"),
    (("fidelity", "curve"), "simforcing.commands.fidelity:CURVE", "fidelity against training core-seconds -> JSON/MD/PNG"),
    (("bench",), "simforcing.commands.bench:BENCH", "latency, training-step cost, data throughput and scaling -> JSON"),
    (("demo",), "simforcing.commands.demo:DEMO", "the whole paper on the embedded synthetic benchmark"),
]


def _top_help() -> str:
    lines = ["usage: simforcing COMMAND [options] [--section.field=value ...]", "", "commands:"]
    for words, _, help_ in COMMANDS:
        lines.append(f"  {' '.join(words):<26} {help_}")
    lines += ["", "Run `simforcing COMMAND --help` for a command's options."]
    return "\n".join(lines)


def run_subcommand(sub, args: argparse.Namespace) -> int:
    """The one preamble (config, overrides, --dry-run) and the one error/exit-code policy (module docstring)."""
    prog = "simforcing " + " ".join(args.command)
    try:
        cfg = None
        if sub.config is not None:
            cfg = sub.config(args)
            if getattr(args, "dry_run", False):
                print(cfg.to_json())
                return EXIT_OK
        elif args.overrides:
            raise ConfigError(f"unrecognised arguments {args.overrides}")
        return int(sub.run(args, cfg) or 0)
    except (ConfigError, FileExistsError) as e:
        print(f"{prog}: config error: {e}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    except DataError as e:
        print(f"{prog}: data error [{e.kind}] {e}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    except CheckpointError as e:
        print(f"{prog}: checkpoint error: {e}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    except OutputError as e:
        print(f"{prog}: write error: {e}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    except OSError as e:  # the environment, not a bug: a missing permission, a full disk outside our writers ...
        print(f"{prog}: I/O error: {e}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    except KeyboardInterrupt:  # Ctrl-C: the conventional 128 + SIGINT, one line, no traceback
        print(f"\n{prog}: interrupted; {sub.interrupted}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a flag's default after its help unless the help already says it ("(default: ...)") or there is nothing
    to show (no default: None; a switch: False; an empty list)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default" in text or action.default is None or action.default is False or action.default == []:
            return text
        return super()._get_help_string(action)


def subcommand(target: str):
    """The Subcommand that ``target`` ("module:ATTRIBUTE", :data:`COMMANDS`) names."""
    module_name, attribute = target.split(":")
    return getattr(importlib.import_module(module_name), attribute)


def command_parser(words: tuple[str, ...], sub, help_: str) -> argparse.ArgumentParser:
    """The argument parser of the command ``words`` (its Subcommand ``sub``)."""
    parser = argparse.ArgumentParser(prog="simforcing " + " ".join(words), description=help_,
                                     formatter_class=HelpFormatter,
                                     epilog="Any config field can be overridden: --section.field=value")
    sub.add_arguments(parser)
    return parser


def find_command(argv: list[str]) -> tuple[tuple[str, ...], str, str] | None:
    """The entry of :data:`COMMANDS` whose words ``argv`` starts with (None: no command)."""
    for words, module, help_ in COMMANDS:
        if tuple(argv[: len(words)]) == words:
            return words, module, help_
    return None


def _run_imports() -> None:
    """What many commands import while they run, imported once by a process forking many jobs (:func:`prepare`):
    transformers' T5, the demo text encoder (models.text: data synth, synth-policy, policy eval, ...; about 3 s a
    process). Named in import statements (the only module a name from data may import is a command's, from
    :data:`COMMANDS`); one that fails is the job's to say where it needs it."""
    try:
        import transformers.models.byt5.tokenization_byt5  # noqa: F401
        import transformers.models.t5.modeling_t5  # noqa: F401
    except ImportError:
        pass


def prepare(argv: list[str]) -> str | None:
    """Import what :func:`main` imports for the command ``argv`` names (its module, after the same
    ``inductor_cache.guard``), and :func:`_run_imports`, and run nothing: the fork server of ``simforcing.jobs`` calls it
    before it forks a job, so that the job starts with its imports done. Returns why this process should fork no job
    (None: it may): the guard gave it a private inductor cache folder, removed when the process that made it exits
    (one inherited from the process that started it is that process's). An import that fails here fails again in the
    job, in its own log."""
    match = find_command(argv)
    if match is None:
        return None
    given = os.environ.get(inductor_cache.ENV)
    problem = inductor_cache.guard()
    if problem is not None and os.environ.get(inductor_cache.ENV) != given:
        return f"a private inductor cache folder of its own ({problem})"
    subcommand(match[1])
    _run_imports()
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_top_help())
        return 0 if argv else 2
    if argv[0] == "--version":
        print(__version__)
        return 0
    match = find_command(argv)
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
    words, target, help_ = match
    inductor_cache.guard()  # an unusable TORCHINDUCTOR_CACHE_DIR would fail torch's compiler at its import
    try:  # importing the command's module imports torch (seconds): Ctrl-C there is an interrupt like any other
        sub = subcommand(target)
    except KeyboardInterrupt:
        print(f"\nsimforcing {' '.join(words)}: interrupted while starting, before any work; run the same command "
              "again", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    parser = command_parser(words, sub, help_)
    args, rest = parser.parse_known_args(argv[len(words):])
    args.overrides = rest
    args.command = words
    return run_subcommand(sub, args)


if __name__ == "__main__":
    sys.exit(main())
