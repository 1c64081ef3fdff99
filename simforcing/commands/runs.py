"""Helpers of the commands that take a training run: the config of ``--ckpt`` (after its kind is checked) and the
line a training command ends with. (Apart from ``commands/__init__`` so that commands without runs start lighter.)"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from typing import Iterable, Optional

import simforcing.parallel as parallel
from simforcing.commands import config_from_args, refuse_config_with
from simforcing.config import Config, ConfigError
from simforcing.runs.folder import WORLD_MODELS, run_config


def config_for_run(args: argparse.Namespace, run: Optional[str] = None) -> Config:
    """The config ``--ckpt``'s (or ``run``'s) checkpoint (``--step``, or the newest) was trained with + command-line
    overrides (validated); a policy run is refused by name, and so are --preset/--config (the run decides the
    config). An override the loaded run cannot honour — its network, condition path, flow, losses or training, a
    few-step student's own sampler (``runs.loaded.check_sampling_overrides``) — or a condition its sampler would
    never read (``sample.condition`` oracle or render on a model that samples as w = 0: ``twin.check_twin_can_act``)
    is refused by name before any work."""
    from simforcing.runs.loaded import check_sampling_overrides
    from simforcing.twin import check_twin_can_act

    from simforcing.config import parse_overrides

    refuse_config_with(args, "--ckpt", "the run's own config is the base")
    run = args.ckpt if run is None else run
    given = parse_overrides(list(getattr(args, "overrides", None) or []))
    base = run_config(run, WORLD_MODELS, "--ckpt", "sample", step=getattr(args, "step", None),
                      leave=("probe",) if "eval.probe" in given else ())
    cfg = config_from_args(args, base=copy.deepcopy(base))
    check_sampling_overrides(base, cfg, run)
    check_twin_can_act(cfg, str(run), cfg.sample.condition)
    return cfg


def check_counts(counts: Iterable[tuple[str, Optional[float], float]]) -> None:
    """ConfigError naming the first flag of ``counts`` — (flag, value, lowest allowed) — whose value is below its
    lowest or not a finite number (None: not given). Called before any work: a count of 0 wrote an empty result
    (`generate --num-samples 0`), --fps 0 divided by zero, a guidance weight of NaN scored NaN."""
    for flag, value, low in counts:
        if value is not None and not (math.isfinite(value) and value >= low):
            kind = "an integer" if isinstance(value, int) else "a finite number"
            raise ConfigError(f"{flag}: got {value:g}; expected {kind} >= {low:g}")


def report_training(prog: str, result: dict) -> int:
    """The one line a training command ends with (stopped: how to continue; finished: the checkpoint); its exit
    code."""
    if result["state"] == "stopped":
        print(f"{prog}: stopped at step {result['step']} ({result['reason']}); continue with --resume",
              file=sys.stderr, flush=True)
    elif result["state"] == "finished" and parallel.rank() == 0:
        print(f"{prog}: finished {result['step']} steps; checkpoint {result['checkpoint']}", flush=True)
    return int(result["exit_code"])
