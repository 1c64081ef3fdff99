"""`simforcing generate`: sample a run's checkpoint on a split and write MP4/GIF/PNG files (``sample.generate_run``)."""

from __future__ import annotations

import argparse

from simforcing.commands import Subcommand, add_config_args
from simforcing.commands.runs import config_for_run
from simforcing.config import Config
from simforcing.sample import generate_run
from simforcing.utils import check_output_path, resolve_device


def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", required=True, help="training run folder (RUN with config.json + checkpoints/)")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest valid one)")
    parser.add_argument("--data", required=True, help="dataset folder")
    parser.add_argument("--split", default="val")
    parser.add_argument("--out", required=True, help="output folder for the MP4/GIF/PNG files")
    parser.add_argument("--num-samples", type=int, default=4)
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--upscale", type=int, default=4, help="nearest-neighbour upscaling for viewing")
    parser.add_argument("--fps", type=int, default=4)
    add_config_args(parser)


def generate(args: argparse.Namespace, cfg: Config) -> int:
    check_output_path(args.out, "--out")  # before any sample is generated
    device = resolve_device(args.device, "--device")
    gifs = generate_run(args.ckpt, args.data, cfg, args.split, args.num_samples, args.out, step=args.step,
                        device=device, upscale=args.upscale, fps=args.fps)
    print(f"wrote {len(gifs)} sample(s) to {args.out} (MP4, GIF and PNG strip each)")
    return 0


GENERATE = Subcommand(add_generate_arguments, generate, config_for_run)
