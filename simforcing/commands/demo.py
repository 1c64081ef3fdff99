"""`simforcing demo [--out runs/demo | runs/demo_quick with --quick | runs/demo_full with --full] [--quick] [--full]
[--seeds K] [--jobs N]`: the whole paper on the embedded synthetic benchmark (``simforcing.demo``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from simforcing.commands import Subcommand
from simforcing.config import Config, ConfigError
from simforcing.demo import demo_budget, demo_config, run_demo
from simforcing.threads import available_cores


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=None, help="output folder (default: runs/demo; with --quick runs/demo_quick, "
                        "so a smoke test never shares the demo's data and runs; with --full runs/demo_full, since its "
                        "stage 1 starts from the video base)")
    parser.add_argument("--data", default=None, help="dataset folder (default: OUT/data, generated when missing)")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny data and budgets (numbers meaningless)")
    parser.add_argument("--full", action="store_true",
                        help="also the ablations: Tab. 2 (joint_fm, random windows off, motion_distill), Tab. 3 "
                             "(value_distill), Tab. A1 (p = 0, 0.3, 1); the video base (stage 0) that stage 1 then "
                             "starts from; and the policy section as the seeds × initialisations measurement (random, "
                             "video base, sft, SimForcing × 3 world-model seeds × 3 policy seeds, two budgets, the "
                             "joint settings, 30 scenes per task, the probe: docs/POLICY_TRANSFER.md)")
    parser.add_argument("--seeds", type=int, default=1, help="stage-2 seeds (paired differences simforcing − sft)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="jobs side by side (default: the cores this process may use); results do not depend on it")
    parser.add_argument("--no-policy", action="store_true", help="leave out the policy-transfer section")
    parser.add_argument("--stage1-steps", type=int, default=None, help="stage-1 (simulation) training steps "
                        "(default: the budget's)")
    parser.add_argument("--stage2-steps", type=int, default=None, help="stage-2 (real) training steps of every "
                        "method (default: the budget's)")
    parser.add_argument("--dry-run", action="store_true", help="print the demo config and exit")


def _budget(args: argparse.Namespace):
    return demo_budget(args.quick, args.stage1_steps, args.stage2_steps)


def _out(args: argparse.Namespace) -> Path:
    if args.out:
        return Path(args.out)
    return Path(("runs/demo_quick" if args.quick else "runs/demo") + ("_full" if args.full else ""))


def _data_root(args: argparse.Namespace) -> Path:
    return Path(args.data) if args.data else _out(args) / "data"


def config(args: argparse.Namespace) -> Config:
    """The demo preset + overrides on OUT/data (or --data) and the demo VAE in OUT/vae."""
    return demo_config(_budget(args), _data_root(args), _out(args) / "vae", list(args.overrides or []))


def demo(args: argparse.Namespace, cfg: Config) -> int:
    if args.seeds < 1:
        raise ConfigError(f"--seeds: got {args.seeds}; expected an integer >= 1")
    jobs = args.jobs if args.jobs is not None else min(4, available_cores())
    if jobs < 1:
        raise ConfigError(f"--jobs: got {jobs}; expected an integer >= 1")
    return run_demo(_out(args), Path(args.data) if args.data else None, _budget(args), list(args.overrides or []),
                    args.seeds, args.full, jobs, policy=not args.no_policy)


DEMO = Subcommand(add_demo_arguments, demo, config,
                  interrupted="run the same command again to continue: finished jobs are reused and stopped training "
                              "runs resume from their last checkpoint")
