"""Helpers of the commands that take a training run: the config of ``--ckpt`` (after its kind is checked) and the
line a training command ends with. (Apart from ``commands/__init__`` so that commands without runs start lighter.)"""

from __future__ import annotations

import argparse
import sys

import simforcing.parallel as parallel
from simforcing.commands import config_from_args, refuse_config_with
from simforcing.config import Config
from simforcing.runs.folder import WORLD_MODELS, run_config


def config_for_run(args: argparse.Namespace) -> Config:
    """The config ``--ckpt``'s checkpoint (``--step``, or the newest) was trained with + command-line overrides
    (validated); a policy run is refused by name, and so are --preset/--config (the run decides the config)."""
    refuse_config_with(args, "--ckpt", "the run's own config is the base")
    return config_from_args(args, base=run_config(args.ckpt, WORLD_MODELS, "--ckpt", "sample",
                                                  step=getattr(args, "step", None)))


def report_training(prog: str, result: dict) -> int:
    """The one line a training command ends with (stopped: how to continue; finished: the checkpoint); its exit
    code."""
    if result["state"] == "stopped":
        print(f"{prog}: stopped at step {result['step']} ({result['reason']}); continue with --resume",
              file=sys.stderr, flush=True)
    elif result["state"] == "finished" and parallel.rank() == 0:
        print(f"{prog}: finished {result['step']} steps; checkpoint {result['checkpoint']}", flush=True)
    return int(result["exit_code"])
