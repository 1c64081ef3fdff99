"""`simforcing generate` (sample a run's checkpoint on a split: MP4/GIF/PNG files, ``sample.generate_run``) and
`simforcing rollout` (long rollouts chunk after chunk and their drift, ``evaluate.rollouts``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from simforcing.commands import Subcommand, add_config_args
from simforcing.commands.runs import check_counts, config_for_run
from simforcing.config import Config
from simforcing.evaluate.rollouts import ROWS, evaluate_rollouts
from simforcing.sample import generate_run
from simforcing.utils import fmt_num, resolve_device


def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", required=True, help="training run folder (RUN with config.json + checkpoints/)")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest valid one)")
    parser.add_argument("--data", required=True, help="dataset folder")
    parser.add_argument("--split", default="val", help="the dataset split the episodes come from")
    parser.add_argument("--out", required=True, help="output folder for the MP4/GIF/PNG files")
    parser.add_argument("--num-samples", type=int, default=4, help="windows to sample")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--upscale", type=int, default=4, help="nearest-neighbour upscaling for viewing")
    parser.add_argument("--fps", type=int, default=4, help="frames per second of the MP4/GIF")
    add_config_args(parser)


SAMPLE_FILES = ("sample_*.mp4", "sample_*.gif", "sample_*.png")  # what `generate` writes into --out


def generate(args: argparse.Namespace, cfg: Config) -> int:
    """--out checked before any sample is generated (a run, a dataset, another command's results or a user's files
    are refused) and written whole: an earlier generate's samples there are replaced, none left beside fewer new
    ones (``outputs.results_folder``). Its counts are checked first: --num-samples 0 wrote nothing and said so as a
    success, --fps 0 ended in a division by zero."""
    from simforcing.outputs import check_results_folder, results_folder

    check_counts((("--num-samples", args.num_samples, 1), ("--upscale", args.upscale, 1), ("--fps", args.fps, 1)))
    check_results_folder(args.out, "--out", "generated samples", SAMPLE_FILES)
    device = resolve_device(args.device, "--device")
    with results_folder(args.out, "--out", "generated samples", SAMPLE_FILES) as tmp:
        gifs = generate_run(args.ckpt, args.data, cfg, args.split, args.num_samples, tmp, step=args.step,
                            device=device, upscale=args.upscale, fps=args.fps)
    print(f"wrote {len(gifs)} sample(s) to {args.out} (MP4, GIF and PNG strip each)")
    return 0


GENERATE = Subcommand(add_generate_arguments, generate, config_for_run)


def add_rollout_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", required=True, help="world-model run folder (pretrain or train)")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest valid one)")
    parser.add_argument("--data", required=True, help="dataset folder (episodes holding the horizon)")
    parser.add_argument("--split", default="val", help="the dataset split the episodes come from")
    parser.add_argument("--horizon", type=int, required=True,
                        help="actions per episode to roll out (a cut last chunk when not a multiple of "
                             "data.actions_per_window)")
    parser.add_argument("--num-episodes", type=int, default=None, help="the split's first N episodes (default: all)")
    parser.add_argument("--batch-size", type=int, default=None, help="episodes advanced together (default: all)")
    parser.add_argument("--rows", nargs="+", default=list(ROWS), help="rows to score: " + ", ".join(ROWS))
    parser.add_argument("--videos", type=int, default=2, help="episodes written as MP4/GIF/PNG")
    parser.add_argument("--out", required=True, help="output folder: rollout.json, rollout.md, drift.png, videos/")
    parser.add_argument("--device", default=None, help="auto | cpu | cuda (default: train.device)")
    add_config_args(parser)


ROLLOUT_FILES = ("rollout.json", "rollout.md", "drift.png", "videos")  # what `rollout` writes into --out


def rollout(args: argparse.Namespace, cfg: Config) -> int:
    """--out, the counts and (first thing in ``evaluate_rollouts``) the horizon checked before anything is rolled
    out; the results appear at --out whole, replacing an earlier rollout there, never mixed with its files
    (``outputs.results_folder``)."""
    from simforcing.outputs import check_results_folder, results_folder

    check_results_folder(args.out, "--out", "a rollout", ROLLOUT_FILES)
    check_counts((("--num-episodes", args.num_episodes, 1), ("--batch-size", args.batch_size, 1),
                  ("--videos", args.videos, 0)))
    device = resolve_device(args.device, "--device") if args.device else None
    with results_folder(args.out, "--out", "a rollout", ROLLOUT_FILES) as tmp:
        res = evaluate_rollouts(args.ckpt, args.data, cfg, args.split, args.horizon, tmp,
                                num_episodes=args.num_episodes, batch_size=args.batch_size, step=args.step,
                                device=device, videos=args.videos, rows=args.rows)
    r = res.rows["rollout"].mean
    print(f"rollout of {res.num_episodes} episodes × {res.chunks} chunks: PSNR {fmt_num(r.get('psnr'), 2)} dB, "
          f"arm PSNR {fmt_num(r.get('psnr_arm'), 2)} dB, action error {fmt_num(r.get('af_pos'), 4)} "
          f"-> {Path(args.out) / 'rollout.json'}")
    return 0


ROLLOUT = Subcommand(add_rollout_arguments, rollout, config_for_run,
                     "nothing was written (an earlier rollout in --out is as it was); run the same command again")
