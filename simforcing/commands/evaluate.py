"""`simforcing evaluate` and `simforcing sweep cfg | steps` (``simforcing.evaluate``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from simforcing.commands import Subcommand, add_config_args, config_from_args
from simforcing.commands.runs import check_counts, config_for_run
from simforcing.config import Config, ConfigError
from simforcing.evaluate.run import DOMAINS, evaluate_run
from simforcing.evaluate.sweeps import PAPER_STEPS, PAPER_W, sweep_cfg, sweep_steps
from simforcing.evaluate.tables import cfg_markdown, format_result, steps_markdown
from simforcing.runs.folder import WORLD_MODELS, require_kind
from simforcing.sample import BASELINES
import simforcing.result_files as result_files
from simforcing.utils import resolve_device


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", default=None, help="training run folder (required unless --baseline)")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest valid one)")
    parser.add_argument("--data", required=True, help="dataset folder")
    parser.add_argument("--split", default="val", help="the dataset split whose windows are scored")
    parser.add_argument("--num-samples", type=int, default=None, help="K windows (default: eval.num_samples)")
    parser.add_argument("--out", required=True, help="output folder for eval.json and eval.md")
    parser.add_argument("--baseline", choices=BASELINES, default=None,
                        help="score a baseline instead of a run (copy-first: the floor; vae-recon: the ceiling)")
    parser.add_argument("--domain", choices=DOMAINS, default="real",
                        help="real (the two-stage sampler) or sim (the model as a simulation world model, w = 0, on "
                             "the recorded sim videos)")
    parser.add_argument("--device", default=None, help="auto | cpu | cuda (default: train.device)")
    add_config_args(parser)


def evaluate_config(args: argparse.Namespace) -> Config:
    """The run's config + overrides with --ckpt; the preset/--config + overrides for a baseline."""
    return config_for_run(args) if args.ckpt else config_from_args(args)


WINDOW_EVAL = (("eval.json", "eval.md"), ("eval.json", (result_files.WINDOW_EVALUATION,)))  # `evaluate`'s files


def evaluate(args: argparse.Namespace, cfg: Config) -> int:
    """--out checked before any sample is generated (a run, a dataset, another command's results — a policy
    evaluation's eval.json too — or a user's files are refused) and written whole (``outputs.results_folder``)."""
    from simforcing.outputs import check_results_folder, results_folder

    check_counts((("--num-samples", args.num_samples, 1),))
    check_results_folder(args.out, "--out", "a one-window evaluation", *WINDOW_EVAL)
    device = resolve_device(args.device, "--device") if args.device else resolve_device(cfg.train.device)
    with results_folder(args.out, "--out", "a one-window evaluation", *WINDOW_EVAL) as tmp:
        res = evaluate_run(args.ckpt, args.data, cfg, args.split, args.num_samples, tmp, baseline=args.baseline,
                           step=args.step, device=device, domain=args.domain)
    print(f"{format_result(res)} -> {Path(args.out) / 'eval.json'}")
    return 0


def add_sweep_arguments(parser: argparse.ArgumentParser, steps: bool) -> None:
    if steps:
        parser.add_argument("--ckpt", required=True, help="training run folder")
        parser.add_argument("--n-sim", type=int, nargs="+", default=list(PAPER_STEPS),
                            help="simulation-rollout step counts N_s to sweep")
        parser.add_argument("--n-real", type=int, nargs="+", default=list(PAPER_STEPS),
                            help="real-rollout step counts N_r to sweep")
    else:
        parser.add_argument("--ckpts", nargs="+", required=True, help="runs trained with different conditioning.p")
    parser.add_argument("--w", type=float, nargs="+", default=list(PAPER_W), help="simulation-guidance weights w")
    parser.add_argument("--data", required=True, help="dataset folder")
    parser.add_argument("--split", default="val", help="the dataset split whose windows are scored")
    parser.add_argument("--num-samples", type=int, default=None, help="K windows (default: eval.num_samples)")
    parser.add_argument("--out", default=None, help="output folder (default: sweep_cfg / sweep_steps)")
    parser.add_argument("--device", default=None, help="auto | cpu | cuda (default: train.device)")
    add_config_args(parser)


# the sampler settings each sweep sets from its own flags (a --sample.* override of them would not be used)
SWEPT = {("sweep", "steps"): {"sample.n_sim": "--n-sim", "sample.n_real": "--n-real", "sample.w": "--w"},
         ("sweep", "cfg"): {"sample.w": "--w"}}


def sweep_config(args: argparse.Namespace) -> Config:
    """The (first) run's config + overrides: its data/sample/eval sections are used. Every run must be a world
    model (a policy run is refused by name), and take the overrides (``config_for_run``); an override of a setting
    the sweep sets itself (``SWEPT``) is refused naming the flag that sets it."""
    from simforcing.config import parse_overrides

    for key in parse_overrides(list(args.overrides or [])):
        if key in SWEPT[args.command]:
            raise ConfigError(f"--{key}: `simforcing {' '.join(args.command)}` sets it from "
                              f"{SWEPT[args.command][key]} (the values it sweeps); give them there")
    if args.command == ("sweep", "cfg"):
        for run in args.ckpts[1:]:
            require_kind(run, WORLD_MODELS, "--ckpts", "sample")
            config_for_run(args, run)
        args.ckpt = args.ckpts[0]
    return config_for_run(args)


def sweep(args: argparse.Namespace, cfg: Config) -> int:
    """--out checked before any sample (a run, a dataset, another command's results or a user's files refused: the
    sweep's three files, each written atomically, would go beside them), and so are its values (a --w of NaN or inf
    was swept into NaN scores; a step count of 0 was refused only once the run had loaded)."""
    from simforcing.outputs import check_results_folder

    steps = [] if args.command == ("sweep", "cfg") else [("--n-sim", n, 1) for n in args.n_sim] + \
        [("--n-real", n, 1) for n in args.n_real]
    check_counts([("--num-samples", args.num_samples, 1), *steps, *(("--w", w, 0) for w in args.w)])

    name, kind = (("sweep_cfg", result_files.SWEEP_CFG) if args.command == ("sweep", "cfg")
                  else ("sweep_steps", result_files.SWEEP_STEPS))
    check_results_folder(args.out or name, "--out", f"a {' '.join(args.command)} result", [f"{name}.*"],
                         (f"{name}.json", (kind,)))
    device = resolve_device(args.device, "--device") if args.device else resolve_device(cfg.train.device)
    if args.command == ("sweep", "cfg"):
        res = sweep_cfg(args.ckpts, args.data, cfg, ws=args.w, num_samples=args.num_samples,
                        out_dir=args.out or "sweep_cfg", split=args.split, device=device)
    else:
        res = sweep_steps(args.ckpt, args.data, cfg, n_sim=args.n_sim, n_real=args.n_real, ws=args.w,
                          num_samples=args.num_samples, out_dir=args.out or "sweep_steps", split=args.split,
                          device=device)
    print(cfg_markdown(res) if args.command == ("sweep", "cfg") else steps_markdown(res))
    print(f"-> {res.json}, {res.heatmap}")
    return 0


EVALUATE = Subcommand(add_evaluate_arguments, evaluate, evaluate_config)
SWEEP_CFG = Subcommand(lambda p: add_sweep_arguments(p, steps=False), sweep, sweep_config)
SWEEP_STEPS = Subcommand(lambda p: add_sweep_arguments(p, steps=True), sweep, sweep_config)
