"""`simforcing fidelity point | curve` (``simforcing.fidelity``, docs/ROLLOUTS.md).

    simforcing fidelity point --oracle EVAL --twin ROLLOUT --wm-eval WM_EVAL --agreement AGREEMENT \\
        [--wm-name NAME] --runs STAGE1 STAGE2 --out DIR          (fidelity.json + fidelity.md: one model's fidelity)
    simforcing fidelity curve --points NAME=DIR ... --out DIR    (fidelity_curve.json/.md/.png over many models)

Every input is a folder another command wrote (``evaluate --sample.condition=oracle``, ``rollout
--sample.condition=render --rows rollout restart``, ``policy eval --env world-model``, ``policy agreement``, training
runs); each is optional, and a number whose input is not given is left out, never guessed. The inputs must be of
one world model (each records its run, checkpoint and step); ``--out`` receives the point or the curve alone (an
earlier one is replaced whole; another command's folder is refused).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

from simforcing.commands import Subcommand, note_same_inputs
from simforcing.config import Config, ConfigError


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
                        "(instead of --runs' metrics; a finite number >= 0)")
    parser.add_argument("--label", default="", help="a name for the point")
    parser.add_argument("--out", required=True, help="folder for fidelity.json and fidelity.md")


def point(args: argparse.Namespace, cfg: Optional[Config]) -> int:
    from simforcing.fidelity import POINT_FILES, fidelity_point
    from simforcing.outputs import check_results_folder

    check_results_folder(args.out, "--out", "a fidelity point", POINT_FILES)
    if not any((args.oracle, args.twin, args.wm_eval, args.agreement, args.runs, args.core_s is not None)):
        raise ConfigError("nothing to measure: give at least one of --oracle, --twin, --wm-eval, --agreement, --runs")
    p = fidelity_point(args.oracle, args.twin, args.wm_eval, args.agreement, args.wm_name, args.runs, args.core_s,
                       args.label)
    path = p.write(args.out)
    print(p.markdown().rstrip())
    print(f"wrote {path} and {path.with_suffix('.md')}")
    return 0


def add_curve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--points", nargs="+", required=True, metavar="[NAME=]DIR",
                        help="folders `simforcing fidelity point` wrote (named by NAME, else by the point's label, "
                        "else by the folder), or an earlier curve's folder (every point of it, by its names)")
    parser.add_argument("--out", required=True, help="folder for fidelity_curve.json, .md and .png")


def curve(args: argparse.Namespace, cfg: Optional[Config]) -> int:
    from simforcing.fidelity import CURVE_FILES, FidelityCurve, FidelityPoint
    from simforcing.outputs import check_results_folder

    check_results_folder(args.out, "--out", "a fidelity curve", CURVE_FILES)
    curve = FidelityCurve()
    folders: dict[str, str] = {}
    for entry in args.points:
        name, _, folder = entry.rpartition("=") if "=" in entry and not Path(entry).exists() else ("", "", entry)
        if (Path(folder) / "fidelity_curve.json").exists() and not name:  # an earlier curve: all its points
            points = FidelityCurve.read(folder, "--points").points
        else:
            p = FidelityPoint.read(folder, "--points")
            points = {name or p.label or Path(folder).name: p}
            folders[next(iter(points))] = folder
        for name, p in points.items():
            if name in curve.points:
                raise ConfigError(f"--points: two points are named {name!r}; name them NAME=DIR")
            curve.points[name] = p
    note_same_inputs(folders, "--points", "fidelity.json", "fidelity point")
    path = curve.write(args.out)
    print(curve.markdown().rstrip())
    print(f"wrote {path}, fidelity_curve.md and fidelity_curve.png")
    return 0


POINT = Subcommand(add_point_arguments, point)
CURVE = Subcommand(add_curve_arguments, curve)
