"""`simforcing export`: a world-model run as a shareable folder (sharded safetensors, config, model card;
``simforcing.export``), loaded with ``WorldModelPipeline.from_pretrained(DIR)``."""

from __future__ import annotations

import argparse
from typing import Optional

from simforcing.commands import Subcommand
from simforcing.config import Config


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", required=True, help="world-model run folder (pretrain or train)")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest valid one)")
    parser.add_argument("--out", required=True, help="folder to write (new, empty, or an earlier export)")
    parser.add_argument("--eval", nargs="+", default=[], metavar="EVAL_DIR",
                        help="`simforcing evaluate` folders of this checkpoint: their numbers go on the model card")
    parser.add_argument("--max-shard-size", default="2GB", help="largest safetensors shard (e.g. 2GB, 500MB)")
    parser.add_argument("--allow-unfinished", action="store_true", help="export the checkpoint of a run that was "
                        "not finished (still training, stopped, killed, failed); config.json and the model card say "
                        "so. Without it such a run is refused")


def export(args: argparse.Namespace, cfg: Optional[Config]) -> int:
    from simforcing.export import export_run, parse_size

    out = export_run(args.ckpt, args.out, args.step, tuple(args.eval), parse_size(args.max_shard_size),
                     allow_unfinished=args.allow_unfinished)
    shards = len(list(out.glob("model-*-of-*.safetensors")))
    print(f"wrote {out}: config.json, {shards} safetensors shard{'s' * (shards > 1)}, README.md (the model card); "
          f"load it with WorldModelPipeline.from_pretrained({str(out)!r})")
    return 0


EXPORT = Subcommand(add_export_arguments, export)
