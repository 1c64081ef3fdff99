"""`simforcing distill --teacher RUN2 --steps K [--objective trajectory|progressive] [--w W] --data DIR --out RUN`:
a few-step student of a stage-2 world model (``simforcing.fewstep``). Exit codes: the run's own (0 finished,
3 diverged, 75 stopped), and the errors' (cli)."""

from __future__ import annotations

import argparse
import copy

from simforcing.commands import Subcommand, config_from_args
from simforcing.commands.runs import check_counts, report_training
from simforcing.commands.train import _resumed_config, _with_data
from simforcing.config import FEWSTEP_OBJECTIVES, Config, ConfigError
from simforcing.fewstep.stage import TEACHER_KINDS, distill_config, distill_run
from simforcing.runs.folder import run_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--teacher", default=None, help="the world model to distil: a `simforcing train` run folder "
                        "(optional with --resume: teacher.json records it)")
    parser.add_argument("--steps", type=int, default=None, help="K, the student's network evaluations per chunk "
                        "(1, 2 or 4; at most the teacher's N_r)")
    parser.add_argument("--objective", default=None, choices=FEWSTEP_OBJECTIVES,
                        help="trajectory (default): regress the teacher's ODE states from the same noise; progressive: "
                        "the teacher's steps over each jump, from the data noised to its start")
    parser.add_argument("--w", type=float, default=None, help="the guidance weight baked in (default: the "
                        "teacher's sample.w)")
    parser.add_argument("--data", default=None, help="dataset folder (default: the teacher's data.root)")
    parser.add_argument("--out", default=None, help="the student's run folder (or the one to continue with --resume)")
    parser.add_argument("--resume", action="store_true", help="continue from the newest valid checkpoint of --out")
    parser.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    parser.add_argument("--dry-run", action="store_true", help="print the resolved config and exit")


def config(args: argparse.Namespace) -> Config:
    """The teacher's config with the student's settings (or, on --resume, the run's own) + overrides. A new student
    is the teacher's network: an override of its architecture or condition path (``conditioning.path``: the input's
    condition channels; ``conditioning.representation``: what its projections read) is refused naming the field before anything is written (it once failed later, on loading the
    teacher's weights, leaving a run folder without a checkpoint)."""
    from simforcing.runs.loaded import CONDITION_FIELDS, check_teacher_architecture

    # --steps 0 passed --dry-run (refused as fewstep.steps only once the run started); --w inf was baked in
    check_counts((("--steps", args.steps, 1), ("--w", args.w, 0)))
    base = _resumed_config(args, "distill")
    if base is None:
        if not args.teacher:
            raise ConfigError("--teacher: `simforcing distill` needs the world model to distil (RUN2)")
        if args.steps is None:
            raise ConfigError("--steps: give K, the student's evaluations per chunk (1, 2 or 4)")
        base = distill_config(run_config(args.teacher, TEACHER_KINDS, "--teacher", "distill_teacher"), args.steps,
                              args.objective or "trajectory", args.w)
        cfg = _with_data(config_from_args(args, base=copy.deepcopy(base), validate=False), args)
        check_teacher_architecture(cfg, base, str(args.teacher), also=CONDITION_FIELDS)
        return cfg
    check_resumed_student(args, base)
    return _with_data(config_from_args(args, base=base, validate=False), args)


def check_resumed_student(args: argparse.Namespace, base: Config) -> None:
    """On --resume: what the student distils is its own — another --steps, --objective, --w or --teacher than the run
    records is refused by name (it would change what the resumed steps learn), before anything is written."""
    from simforcing.runs.folder import check_same_teacher

    f = base.fewstep
    for flag, given, recorded, what in (("--steps", args.steps, f.steps, "distils {} steps"),
                                        ("--objective", args.objective, f.objective, "distils with objective {!r}"),
                                        ("--w", args.w, f.w, "distils the guidance weight w = {}")):
        if given is not None and given != recorded:
            raise ConfigError(f"{flag}: {args.out} {what.format(recorded)}, not {given!r}; resume it without {flag} "
                              "(a student keeps what it distils), or start a new run in another --out")
    check_same_teacher(args.out, args.teacher)


def run(args: argparse.Namespace, cfg: Config) -> int:
    if not args.out:
        raise ConfigError("--out: the student's run folder is required (e.g. --out runs/fewstep_k4)")
    result = distill_run(cfg, args.out, args.teacher, args.resume, progress=not args.no_progress)
    return report_training("simforcing distill", result)


DISTILL = Subcommand(add_arguments, run, config, "run the same command with --resume to continue from the last "
                     "checkpoint")
