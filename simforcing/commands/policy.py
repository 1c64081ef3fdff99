"""`simforcing policy train | eval` and `simforcing data synth-policy` (``simforcing.policy``).

    simforcing data synth-policy OUT (or --out OUT) [--per-task 16] [--max-steps 30]
    simforcing policy train --setting action_only|unconditional|video_action --init base|RUN --data DIR --out RUN
    simforcing policy eval --runs NAME=RUN [NAME=RUN ...] [--per-task 10] --out DIR            (synthetic benchmark)
    simforcing policy eval --env libero --suite libero_spatial --runs NAME=RUN --out DIR      (needs the extra)
    simforcing policy eval --env world-model --wm RUN --judge J --runs ... --out DIR         (inside a world model)
    simforcing policy agreement --sim SIM_EVAL --wm NAME=WM_EVAL ... --out DIR             (world model vs simulator)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from simforcing import parallel
from simforcing.commands import Subcommand, add_dataset_out, dataset_out
from simforcing.config import POLICY_SETTINGS, Config, ConfigError
from simforcing.utils import atomic_write_json, atomic_write_text


# -- data synth-policy ---------------------------------------------------------------------------------------------------
def add_synth_arguments(parser: argparse.ArgumentParser) -> None:
    add_dataset_out(parser)
    parser.add_argument("--per-task", type=int, default=16, help="successful training demonstrations per task")
    parser.add_argument("--num-val", type=int, default=2, help="validation demonstrations per task")
    parser.add_argument("--max-steps", type=int, default=30, help="step limit of a demonstration")
    parser.add_argument("--height", type=int, default=32, help="camera height")
    parser.add_argument("--width", type=int, default=48, help="camera width (the video is two cameras wide)")
    parser.add_argument("--seed", type=int, default=100, help="dataset seed (evaluation scenes use another)")
    parser.add_argument("--layouts", type=int, default=0, help="LIBERO-like mode: every scene is one of K fixed "
                        "layouts with the task object jittered (0: every scene its own objects, camera and look)")
    parser.add_argument("--jitter", type=float, default=0.03, help="with --layouts: the task object's position "
                        "jitter, metres")
    parser.add_argument("--workers", type=int, default=1, help="simulation processes")
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--no-progress", action="store_true")


def synth(args: argparse.Namespace, cfg: Optional[Config]) -> int:
    from simforcing.policy.synth_data import generate_policy_dataset  # MuJoCo: only this command needs it

    s = generate_policy_dataset(dataset_out(args), per_task=args.per_task, num_val=args.num_val,
                                max_steps=args.max_steps, height=args.height, width=args.width, seed=args.seed,
                                workers=args.workers, overwrite=args.overwrite, progress=not args.no_progress,
                                layouts=args.layouts, jitter=args.jitter)
    surplus = s["attempted"] - s["failed"] - s["episodes"]
    print(f"wrote {s['episodes']} successful demonstrations to {s['out']} ({s['attempted']} episodes simulated: "
          f"{s['failed']} failed, {surplus} more than a task needed; both dropped)")
    return 0


# -- policy train ----------------------------------------------------------------------------------------------------------
def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--setting", required=True, choices=POLICY_SETTINGS)
    parser.add_argument("--init", default="base", help="'base' (the preset's init + configured pretrained weights) "
                        "or a world-model run folder (every compatible tensor of both experts)")
    parser.add_argument("--data", default=None, help="policy dataset folder")
    parser.add_argument("--out", default=None, help="run folder to create (or continue with --resume)")
    parser.add_argument("--preset", default="demo", help="with --init base: demo | bridge | interndata_a1")
    parser.add_argument("--config", default=None, help="with --init base: start from this config.json instead of "
                        "the preset (e.g. a world-model run's: same architecture and VAE, weights not inherited)")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--no-progress", action="store_true")


def train_config(args: argparse.Namespace) -> Config:
    from simforcing.policy.configs import policy_run_config

    return policy_run_config(args.setting, args.init, args.data, args.preset, args.overrides,
                             resume_from=args.out if args.resume and args.out else None, config=args.config)


def train(args: argparse.Namespace, cfg: Config) -> int:
    from simforcing.policy.train import policy_train_run

    if not args.out:
        raise ConfigError("--out: the run folder is required (e.g. --out runs/policy_action_only)")
    result = policy_train_run(cfg, args.out, args.init, args.resume, progress=not args.no_progress)
    if result["state"] == "stopped":
        print(f"simforcing policy train: stopped at step {result['step']} ({result['reason']}); continue with "
              "--resume", file=sys.stderr, flush=True)
    elif result["state"] == "finished" and parallel.rank() == 0:
        print(f"simforcing policy train: finished {result['step']} steps; checkpoint {result['checkpoint']}",
              flush=True)
    return int(result["exit_code"])


# -- policy eval -----------------------------------------------------------------------------------------------------------
def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", nargs="*", default=[], metavar="NAME=RUN",
                        help="policy runs to evaluate (NAME labels the table row; a bare RUN is named by its folder)")
    parser.add_argument("--env", choices=("synthetic", "world-model", "libero"), default="synthetic",
                        help="synthetic: the MuJoCo simulator; world-model: the same scenes inside a world model "
                             "(--wm, --judge); libero: LIBERO (needs the extra)")
    parser.add_argument("--wm", default=None, help="world-model: the world-model run folder (or 'copy-first')")
    parser.add_argument("--judge", default=None, help="the success judge (`simforcing model fit-judge`): required "
                        "with --env world-model; with --env synthetic every episode's frames also go through it")
    parser.add_argument("--expert-noise", type=float, nargs="*", default=[], metavar="SIGMA",
                        help="synthetic, world-model: also the scripted expert with N(0, SIGMA^2) metres added to "
                             "each action's position per axis")
    parser.add_argument("--out", required=True, help="folder for eval.json and eval.md")
    parser.add_argument("--per-task", type=int, default=10, help="synthetic: held-out scenes per task")
    parser.add_argument("--max-steps", type=int, default=30, help="synthetic: step limit of an episode")
    parser.add_argument("--no-baselines", action="store_true", help="synthetic: leave out the expert / floor rows")
    parser.add_argument("--layouts", type=int, default=None, help="synthetic: the scenes' layouts (default: those of "
                        "the runs' training data, `data synth-policy --layouts`; 0 without runs)")
    parser.add_argument("--jitter", type=float, default=None, help="synthetic: with --layouts, the task object's "
                        "jitter in metres (default: the runs' training data's)")
    parser.add_argument("--execute", type=int, default=None, help="actions executed per chunk before re-planning "
                        "(default: each run's policy.execute)")
    parser.add_argument("--suite", default="libero_spatial",
                        help="libero: libero_spatial | libero_object | libero_goal | libero_10")
    parser.add_argument("--trials", type=int, default=50, help="libero: trials per task (cycling the init states)")
    parser.add_argument("--tasks", default=None, help="libero: comma-separated task ids (default: all)")
    parser.add_argument("--gripper", choices=("open01", "libero"), default="open01",
                        help="libero: the dataset's gripper convention (open01: FastWAM's 0 close..1 open -> x2-1, "
                        "inverted, sign; libero: -1 open/+1 close -> sign)")
    parser.add_argument("--device", default="cpu")


def _runs(specs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for s in specs:
        name, _, path = s.rpartition("=")
        name = name or Path(path).name
        if not path or name in out:
            raise ConfigError(f"--runs: {s!r}: " + (f"the row name {name!r} is given twice; label the runs NAME=RUN "
                                                    "with different names" if path else "expected NAME=RUN or RUN"))
        out[name] = path
    return out


def _task_ids(spec: Optional[str]) -> Optional[list[int]]:
    if spec is None:
        return None
    try:
        return [int(t) for t in spec.split(",")]
    except ValueError:
        raise ConfigError(f"--tasks: got {spec!r}; expected comma-separated task ids, e.g. 0,3,7") from None


def evaluate(args: argparse.Namespace, cfg: Optional[Config]) -> int:
    out = Path(args.out)
    runs = _runs(args.runs)
    if args.env == "libero":
        from simforcing.policy.libero import evaluate_libero

        if len(runs) != 1:
            raise ConfigError(f"--runs: LIBERO evaluates one policy run at a time; got {len(runs)}")
        res = evaluate_libero(next(iter(runs.values())), args.suite, trials=args.trials,
                              task_ids=_task_ids(args.tasks), device=args.device, gripper=args.gripper)
    else:
        from simforcing.policy.judge import load_judge

        if not runs and args.no_baselines and not args.expert_noise:
            raise ConfigError("--runs: nothing to evaluate (no runs, no --expert-noise and --no-baselines)")
        try:
            judge = load_judge(args.judge, args.device) if args.judge else None
        except ValueError as e:
            raise ConfigError(str(e)) from e
        res = _closed_loop(args, runs, judge)
    out.mkdir(parents=True, exist_ok=True)
    frames = res.pop("_frames", None)
    if frames:
        _save_frames(out / "frames.npz", frames)
    atomic_write_json(out / "eval.json", res)
    atomic_write_text(out / "eval.md", res["table_md"] + "\n")
    print(res["table_md"])
    print(f"wrote {out / 'eval.json'} and {out / 'eval.md'}")
    return 0


def _closed_loop(args: argparse.Namespace, runs: dict[str, str], judge) -> dict:
    common = dict(per_task=args.per_task, max_steps=args.max_steps, baselines=not args.no_baselines,
                  device=args.device, execute=args.execute, layouts=args.layouts, jitter=args.jitter,
                  expert_noise=args.expert_noise)
    if args.env == "world-model":
        from simforcing.policy.world_model_eval import evaluate_world_model

        if not args.wm or judge is None:
            raise ConfigError("--env world-model needs --wm RUN (or 'copy-first') and --judge DIR (`simforcing model "
                              "fit-judge`)")
        return evaluate_world_model(args.wm, judge, runs, **common)
    from simforcing.policy.evaluate import evaluate_synthetic

    if args.wm:
        raise ConfigError("--wm: a world model is used with --env world-model only")
    return evaluate_synthetic(runs, judge=judge, **common)


def _save_frames(path: Path, frames: dict) -> None:
    """OUT/frames.npz: frames uint8 (T, H, W, 3) by "player|task|scene" (the first scene of each task per player):
    what the side-by-side videos of `simforcing policy agreement` show."""
    import numpy as np

    from simforcing.utils import atomic_write

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **frames)

    atomic_write(path, write)


# -- policy agreement ------------------------------------------------------------------------------------------------------
def add_agreement_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sim", required=True, nargs="+", help="the simulator's `policy eval` folder(s) (with "
                        "--judge; several: disjoint policies on the same scenes)")
    parser.add_argument("--wm", nargs="+", required=True, metavar="NAME=EVAL",
                        help="world-model `policy eval --env world-model` folders on the same scenes")
    parser.add_argument("--out", required=True, help="folder for agreement.json, agreement.md, scatter.png, videos/")
    parser.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples of the scenes")
    parser.add_argument("--video-policy", default=None, help="the policy shown in the side-by-side videos "
                        "(default: the first learned one)")


def agreement(args: argparse.Namespace, cfg: Optional[Config]) -> int:
    from simforcing.policy.agreement import write_agreement

    if args.bootstrap < 1:
        raise ConfigError(f"--bootstrap: got {args.bootstrap}; expected an integer >= 1")
    res = write_agreement(args.sim, _runs(args.wm), args.out, args.bootstrap, args.video_policy)
    print(res["table_md"])
    print(f"wrote {Path(args.out) / 'agreement.json'}, agreement.md, scatter.png, {len(res['videos'])} videos")
    return 0


SUBCOMMANDS = {
    ("data", "synth-policy"): Subcommand(add_synth_arguments, synth),
    ("policy", "train"): Subcommand(add_train_arguments, train, train_config),
    ("policy", "eval"): Subcommand(add_eval_arguments, evaluate),
    ("policy", "agreement"): Subcommand(add_agreement_arguments, agreement),
}
