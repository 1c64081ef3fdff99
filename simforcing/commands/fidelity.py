"""`simforcing fidelity point | curve` (``simforcing.evaluate.fidelity``, docs/FAITHFUL.md).

    simforcing fidelity point --oracle EVAL --twin ROLLOUT --wm-eval WM_EVAL --agreement AGREEMENT \\
        [--wm-name NAME] --runs STAGE1 STAGE2 --out DIR          (fidelity.json + fidelity.md: one model's fidelity)
    simforcing fidelity curve --points NAME=DIR ... --out DIR    (fidelity_curve.json/.md/.png over many models)

Every input is a folder another command wrote (``evaluate --sample.condition=oracle``, ``rollout
--sample.condition=render --rows rollout restart``, ``policy eval --env world-model``, ``policy agreement``, training
runs); each is optional, and a number whose input is not given is left out, never guessed.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

from simforcing.commands import Subcommand
from simforcing.config import Config, ConfigError
from simforcing.utils import check_output_path


def add_point_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--oracle", default=None, help="a one-window evaluation made with --sample.condition=oracle")
    parser.add_argument("--twin", default=None, help="a rollout made with --sample.condition=render and the rollout "
                        "and restart rows")
    parser.add_argument("--wm-eval", default=None, help="a `policy eval --env world-model` folder (its frames.npz: "
                        "the do-nothing frame change)")
    parser.add_argument("--agreement", default=None, help="a `policy agreement` folder (Pearson inside the world "
                        "model against the simulator)")
    parser.add_argument("--wm-name", default=None, help="the world model's name in the agreement (needed when it "
                        "holds several)")
    parser.add_argument("--runs", nargs="*", default=(), help="the training runs that made the model (stage 1, "
                        "stage 2): their core-seconds are summed")
    parser.add_argument("--core-s", type=float, default=None, help="training core-seconds measured outside "
                        "(instead of --runs' metrics)")
    parser.add_argument("--label", default="", help="a name for the point")
    parser.add_argument("--out", required=True, help="folder for fidelity.json and fidelity.md")


def point(args: argparse.Namespace, cfg: Optional[Config]) -> int:
    from simforcing.evaluate.fidelity import fidelity_point, point_md, write_point

    check_output_path(args.out, "--out")
    if args.core_s is not None and args.core_s < 0:
        raise ConfigError(f"--core-s: got {args.core_s}; expected the core-seconds, >= 0")
    if not any((args.oracle, args.twin, args.wm_eval, args.agreement, args.runs, args.core_s is not None)):
        raise ConfigError("nothing to measure: give at least one of --oracle, --twin, --wm-eval, --agreement, --runs")
    p = fidelity_point(args.oracle, args.twin, args.wm_eval, args.agreement, args.wm_name, args.runs, args.core_s,
                       args.label)
    path = write_point(p, args.out)
    print(point_md(p).rstrip())
    print(f"wrote {path} and {path.with_suffix('.md')}")
    return 0


def add_curve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--points", nargs="+", required=True, metavar="[NAME=]DIR",
                        help="folders `simforcing fidelity point` wrote (named by NAME, else by the point's label, "
                        "else by the folder)")
    parser.add_argument("--out", required=True, help="folder for fidelity_curve.json, .md and .png")


def curve(args: argparse.Namespace, cfg: Optional[Config]) -> int:
    from simforcing.evaluate.fidelity import read_point, write_curve

    check_output_path(args.out, "--out")
    points = {}
    for entry in args.points:
        name, _, folder = entry.rpartition("=") if "=" in entry and not Path(entry).exists() else ("", "", entry)
        p = read_point(folder, "--points")
        name = name or p.get("label") or Path(folder).name
        if name in points:
            raise ConfigError(f"--points: two points are named {name!r}; name them NAME=DIR")
        points[name] = p
    write_curve(points, args.out)
    out = Path(args.out)
    print((out / "fidelity_curve.md").read_text().rstrip())
    print(f"wrote {out / 'fidelity_curve.json'}, fidelity_curve.md and fidelity_curve.png")
    return 0


POINT = Subcommand(add_point_arguments, point)
CURVE = Subcommand(add_curve_arguments, curve)
