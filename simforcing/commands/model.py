"""`simforcing model info | init-action-expert | fit-vae | fit-probe | fit-judge`."""

from __future__ import annotations

import argparse
import json

from simforcing.commands import Subcommand, add_config_args, config_from_args
from simforcing.config import Config, ConfigError
from simforcing.evaluate.probe import FitOptions, fit_probe, save_probe
from simforcing.models.info import format_info, model_info
from simforcing.models.weights import write_action_expert
from simforcing.policy.judge.success_judge import JudgeFitOptions, benchmark_layouts, fit_judge, save_judge
from simforcing.prep.demo_vae import NORMALIZATIONS, fit_demo_vae
from simforcing.utils import check_output_path


def add_info_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser, preset_default="bridge")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")


def info(args: argparse.Namespace, cfg: Config) -> int:
    result = model_info(cfg)
    print(json.dumps(result, indent=2) if args.json else format_info(result))
    return 0


def add_init_action_expert_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser, preset_default="bridge")
    parser.add_argument("--weights", default=None, help="Wan2.2 transformer weights (default: model.weights)")
    parser.add_argument("--out", required=True, help="output .safetensors file (set model.action_expert_weights to it)")


def init_action_expert(args: argparse.Namespace, cfg: Config) -> int:
    check_output_path(args.out, "--out", folder=False)
    tensors = write_action_expert(cfg, args.weights, args.out)
    print(f"wrote {len(tensors)} action-expert tensors ({sum(t.numel() for t in tensors.values()) / 1e6:.1f} M "
          f"parameters) to {args.out}; action.action_in keeps its init")
    return 0


def add_fit_vae_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="dataset folder (train + sim_pool frames are used)")
    parser.add_argument("--out", required=True, help="output folder: config.json + vae.safetensors")
    parser.add_argument("--components", type=int, default=None,
                        help="K principal components per 4-frame group (default: model.vae.latent_channels - 48)")
    parser.add_argument("--max-windows", type=int, default=2000, help="windows drawn for the fit")
    parser.add_argument("--seed", type=int, default=0, help="seed of the windows drawn")
    parser.add_argument("--normalization", choices=NORMALIZATIONS, default="pixel",
                        help="latent scale: 'pixel' (latent squared error = pixel squared error) or 'channel' "
                             "(every channel at unit variance)")
    add_config_args(parser)


def fit_vae(args: argparse.Namespace, cfg: Config) -> int:
    check_output_path(args.out, "--out")  # before the fit
    vae, report = fit_demo_vae(args.data, cfg, args.max_windows, args.seed, args.components, args.out,
                               normalization=args.normalization)
    p = report["psnr_val"]
    print(f"demo VAE: K = {vae.components}, C = {vae.latent_channels} channels, fitted on "
          f"{report['fitted_on']['windows']} windows in {report['fit_seconds']} s -> {args.out}")
    print(f"reconstruction PSNR (val, future frames; the ceiling of every metric): sim {p.get('sim', 'n/a')} dB, "
          f"real {p.get('real', 'n/a')} dB")
    if vae.latent_channels != cfg.model.vae.latent_channels:
        print(f"note: use it with --model.vae.path={args.out} --model.vae.latent_channels={vae.latent_channels}")
    return 0


def add_fit_probe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="dataset folder (real frames of --split, sim frames of "
                                                      "--sim-splits; arm masks, when present, for the composites)")
    parser.add_argument("--out", required=True, help="output folder: probe.safetensors + probe.json")
    parser.add_argument("--split", default="train", help="real frames to fit on")
    parser.add_argument("--sim-splits", nargs="+", default=["train", "sim_pool"], help="simulation frames to fit on")
    parser.add_argument("--val-split", default="val", help="reported only ('' to skip)")
    parser.add_argument("--steps", type=int, default=FitOptions.steps, help="optimiser steps")
    parser.add_argument("--batch-size", type=int, default=FitOptions.batch_size, help="frames per step")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initialisation and the batches")
    parser.add_argument("--position-dims", type=int, nargs="+", default=list(FitOptions.position_dims),
                        help="state entries read as the end-effector position")
    parser.add_argument("--gripper-dim", type=int, default=FitOptions.gripper_dim,
                        help="state entry of the gripper opening (-1: none)")
    add_config_args(parser)


def fit_probe_command(args: argparse.Namespace, cfg: Config) -> int:
    if args.steps < 1 or args.batch_size < 4:
        raise ConfigError(f"--steps {args.steps} / --batch-size {args.batch_size}: expected >= 1 / >= 4")
    check_output_path(args.out, "--out")  # before the fit
    opts = FitOptions(splits=(args.split,), sim_splits=tuple(args.sim_splits), val_split=args.val_split or None,
                      steps=args.steps, batch_size=args.batch_size, seed=args.seed,
                      position_dims=tuple(args.position_dims),
                      gripper_dim=None if args.gripper_dim is not None and args.gripper_dim < 0 else args.gripper_dim)
    try:
        probe, report = fit_probe(args.data, cfg.data.height, cfg.data.width, opts)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    save_probe(probe, args.out, report)
    print(f"state probe fitted in {report['fit_seconds']} s on {report['sources']['real_frames']} real + "
          f"{report['sources']['sim_frames']} simulation frames -> {args.out}")
    for split, errs in (("train", report["train"]), *(("val", report.get("val", {})),)):
        for dom, e in errs.items():
            print(f"  {split} {dom}: position error {e['pos']:.4f} (no motion: {e['no_motion_pos']:.4f})" +
                  (f", gripper error {e['grip']:.3f}" if "grip" in e else ""))
    print(f"evaluate with --eval.probe={args.out}")
    return 0


def add_fit_judge_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, nargs="+",
                        help="datasets with objects.npz (paired: `data synth --layout-train N`; policy: `data "
                             "synth-policy --layouts K`): their train episodes with one task object")
    parser.add_argument("--out", required=True, help="output folder: judge.safetensors + judge.json")
    parser.add_argument("--sim-episodes", type=int, default=0,
                        help="also this many simulator rollouts of the policy benchmark (the expert at several noise "
                             "levels, scenes of another seed than any evaluation)")
    parser.add_argument("--sim-frames", type=int, default=None,
                        help="render only this many frames of each rollout (the first, those nearest the task's "
                             "decision threshold, the rest at random; default: all): more scenes for the same time")
    parser.add_argument("--layouts", type=int, default=None, help="the rollouts' layouts (default: the datasets')")
    parser.add_argument("--jitter", type=float, default=0.03, help="the rollouts' task-object jitter (m)")
    parser.add_argument("--consecutive", type=int, default=JudgeFitOptions.consecutive,
                        help="judged frames in a row that make an episode's success")
    parser.add_argument("--steps", type=int, default=JudgeFitOptions.steps, help="optimiser steps")
    parser.add_argument("--batch-size", type=int, default=JudgeFitOptions.batch_size, help="frames per step")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initialisation and the batches")
    parser.add_argument("--cameras", type=int, choices=(1, 2), default=1,
                        help="what it reads: 1, the external camera; 2, [external | wrist] side by side (a judge of "
                             "multi-view world models: the contact where the wrist camera sees it; the datasets need "
                             "the wrist camera)")
    add_config_args(parser)


MAX_SIM_EPISODES = 20_000  # --sim-episodes: far beyond any fit, below what the frames' memory could hold


def fit_judge_command(args: argparse.Namespace, cfg: Config) -> int:
    """Every argument, --out and the datasets checked before any frame is read; the judge appears at --out whole
    (``outputs.results_folder``): an interrupted or refused fit leaves nothing that loads as a judge."""
    from pathlib import Path

    from simforcing.outputs import check_results_folder, results_folder
    from simforcing.policy.judge.success_judge import JUDGE_FILE, JUDGE_META, check_dataset_folder

    if args.steps < 1 or args.batch_size < 4:
        raise ConfigError(f"--steps {args.steps} / --batch-size {args.batch_size}: expected >= 1 / >= 4")
    if not 0 <= args.sim_episodes <= MAX_SIM_EPISODES:
        raise ConfigError(f"--sim-episodes: got {args.sim_episodes}; expected a count in [0, {MAX_SIM_EPISODES}]")
    if args.sim_frames is not None and args.sim_frames < 2:
        raise ConfigError(f"--sim-frames: got {args.sim_frames}; expected at least 2 rendered frames per rollout (the "
                          "first and one more), or leave it out for all")
    if args.consecutive < 1:
        raise ConfigError(f"--consecutive: got {args.consecutive}; expected an integer >= 1")
    owned = (JUDGE_FILE, JUDGE_META)
    check_results_folder(args.out, "--out", "a success judge", owned)  # before the frames are read
    for root in args.data:
        check_dataset_folder(Path(root))
    opts = JudgeFitOptions(steps=args.steps, batch_size=args.batch_size, seed=args.seed, consecutive=args.consecutive)
    rollouts = None
    if args.sim_episodes:
        from simforcing.policy.judge.sim_frames import simulated_frames  # MuJoCo: only with rollouts

        layouts = args.layouts if args.layouts is not None else benchmark_layouts(args.data)
        rollouts = simulated_frames(args.sim_episodes, cfg.data.height, cfg.data.width, layouts, args.jitter,
                                    frames=args.sim_frames, cameras=args.cameras)
    judge = fit_judge(args.data, cfg.data.height, cfg.data.width, opts, rollouts=rollouts, cameras=args.cameras)
    with results_folder(args.out, "--out", "a success judge", owned) as tmp:
        save_judge(judge, tmp)
    r = judge.report
    print(f"success judge fitted in {r['fit_seconds']} s on {r['frames']} frames of {r['episodes']} episodes "
          f"({r['rollout_frames']} from simulator rollouts) "
          f"(layouts {judge.benchmark['layouts']}, {judge.cameras} camera{'s' if judge.cameras > 1 else ''}) -> "
          f"{args.out}; training error (m): {r['train_mean_abs_error_m']}")
    return 0


INFO = Subcommand(add_info_arguments, info, config_from_args)
INIT_ACTION_EXPERT = Subcommand(add_init_action_expert_arguments, init_action_expert, config_from_args)
FIT_VAE = Subcommand(add_fit_vae_arguments, fit_vae, config_from_args)
FIT_PROBE = Subcommand(add_fit_probe_arguments, fit_probe_command, config_from_args)
FIT_JUDGE = Subcommand(add_fit_judge_arguments, fit_judge_command, config_from_args,
                       "nothing was written; run the same command again")
