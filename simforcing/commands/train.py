"""`simforcing pretrain` (stage 1; ``--init RUN0``: from a video base), `simforcing pretrain --method video_prior`
(stage 0, the video base: ``simforcing.prior``) and `simforcing train --method M --teacher RUN1` (stage 2); the loop
is ``simforcing.train``. Exit codes: the run's own (0 finished, 3 diverged, 75 stopped), and the errors' (cli)."""

from __future__ import annotations

import argparse
from pathlib import Path

from simforcing.commands import Subcommand, add_config_args, config_from_args, note_unused_config
from simforcing.commands.runs import report_training
from simforcing.config import PRETRAIN_METHODS, STAGE1_METHOD, STAGE2_METHODS, VIDEO_PRIOR_METHOD, Config, ConfigError
from simforcing.methods import method_preset
from simforcing.prior import video_prior_run
from simforcing.recipes import check_recipe_data, train_overrides
from simforcing.runs.folder import CONFIG_FILE, STAGE_KIND, is_run_folder, require_kind, run_config
from simforcing.train import train_run


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default=None, help="dataset folder (stage 2: default RUN1's data.root)")
    parser.add_argument("--out", default=None, help="run folder to create (or to continue with --resume); required "
                        "unless --dry-run")
    parser.add_argument("--resume", action="store_true", help="continue from the newest valid checkpoint of --out")
    parser.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")


def add_pretrain_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--method", default=STAGE1_METHOD, choices=PRETRAIN_METHODS,
                        help="sim_pretrain: stage 1, the simulation world model (default); video_prior: stage 0, the "
                        "same network as a plain video model (text + first frame -> video, no actions), what stands "
                        "in for Wan2.2 at demo scale (run kind video_base)")
    parser.add_argument("--init", default=None, metavar="RUN0",
                        help="stage 1: start from this video-base run (`pretrain --method video_prior`): every tensor "
                        "it trained; its action expert and state projection are new (RUN1/init.json). Default: "
                        "model.weights, else the model's own initialisation")
    add_config_args(parser)
    add_common_arguments(parser)


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--method", required=True, choices=STAGE2_METHODS, help="stage-2 method")
    parser.add_argument("--teacher", default=None, help="the stage-1 run folder (RUN1); optional with --resume")
    parser.add_argument("--config", default=None, help="start from this config.json instead of RUN1's (not with "
                        "--resume: the run's own config is the base)")
    parser.add_argument("--recipe", default=None, metavar="NAME",
                        help="a named recipe's stage-2 settings before your own overrides (simforcing.recipes; "
                             "evaluator: a world model to judge policies in — docs/POLICY_EVALUATION.md)")
    parser.add_argument("--dry-run", action="store_true", help="print the resolved config and exit")
    add_common_arguments(parser)


def _resumed_config(args: argparse.Namespace, stage: str) -> Config | None:
    """With --resume and a simforcing run folder in --out: that run's config.json is the base (documented
    precedence; a --config/--preset given too is said to be unused), after its kind is checked (a run of another
    kind is refused by name, with the command that continues it). A folder that is not a run is refused by the
    trainer, naming what it holds."""
    path = Path(args.out or ".") / CONFIG_FILE
    if not (args.resume and args.out and path.exists() and is_run_folder(args.out)):
        return None
    require_kind(args.out, (STAGE_KIND[stage],), "--out", f"resume_{stage}")
    cfg = Config.load(path)
    note_unused_config(args, cfg, args.out)
    return cfg


def _with_data(cfg: Config, args: argparse.Namespace) -> Config:
    if args.data:
        cfg.data.root = args.data
    return cfg.validate()


def _pretrain_stage(args: argparse.Namespace) -> str:
    """The trainer stage of `simforcing pretrain`: "video_prior" (stage 0) with --method video_prior, else
    "pretrain" (stage 1)."""
    return "video_prior" if getattr(args, "method", STAGE1_METHOD) == VIDEO_PRIOR_METHOD else "pretrain"


def pretrain_config(args: argparse.Namespace) -> Config:
    """Preset/--config (or RUN's config on --resume) + overrides, method --method (sim_pretrain by default)."""
    if getattr(args, "method", STAGE1_METHOD) == VIDEO_PRIOR_METHOD and args.init is not None:
        raise ConfigError("--init: the video prior starts from model.weights or the model's own initialisation; "
                          "--init RUN0 is for stage 1 (`simforcing pretrain --init RUN0`)")
    base = _resumed_config(args, _pretrain_stage(args))
    cfg = config_from_args(args, base=base, validate=False)
    method_preset(cfg, getattr(args, "method", STAGE1_METHOD))
    return _with_data(cfg, args)


def train_config(args: argparse.Namespace) -> Config:
    """RUN1's config (the one its newest checkpoint was trained with; or --config, or RUN2's on --resume) +
    method_preset + overrides."""
    base = _resumed_config(args, "train")
    if base is None:
        if args.config:
            base = Config.load(args.config)
        elif args.teacher:
            base = run_config(args.teacher, ("stage1",), "--teacher", "teacher")
        else:
            raise ConfigError("--teacher: stage 2 needs the stage-1 run folder (RUN1)")
        method_preset(base, args.method)
    elif base.train.method != args.method:
        raise ConfigError(f"train.method: {args.out} was trained with {base.train.method!r}, not "
                          f"{args.method!r}; resume it with the same --method")
    args.overrides = train_overrides(args) + list(getattr(args, "overrides", None) or [])
    cfg = _with_data(config_from_args(args, base=base, validate=False), args)
    check_recipe_data(args.recipe, cfg.data.root)
    return cfg


def run(args: argparse.Namespace, cfg: Config) -> int:
    stage = _pretrain_stage(args) if args.command == ("pretrain",) else "train"
    if not args.out:
        raise ConfigError("--out: the run folder is required (e.g. --out runs/stage1)")
    if stage == "video_prior":
        result = video_prior_run(cfg, args.out, args.resume, progress=not args.no_progress)
        return report_training(f"simforcing pretrain --method {VIDEO_PRIOR_METHOD}", result)
    result = train_run(cfg, args.out, stage, getattr(args, "teacher", None), args.resume,
                       progress=not args.no_progress, init=getattr(args, "init", None))
    return report_training(f"simforcing {stage}", result)


_CONTINUE = "run the same command with --resume to continue from the last checkpoint"
PRETRAIN = Subcommand(add_pretrain_arguments, run, pretrain_config, _CONTINUE)
TRAIN = Subcommand(add_train_arguments, run, train_config, _CONTINUE)
