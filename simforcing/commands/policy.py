"""`simforcing policy train | eval` (``simforcing.policy``).

    simforcing policy train --setting action_only|unconditional|video_action --init base|RUN --data DIR --out RUN
    simforcing policy eval --runs [NAME=]RUN [...] [--run NAME RUN ...] [--per-task 10] --out DIR  (synthetic benchmark)
    simforcing policy eval --env libero --suite libero_spatial --runs RUN --out DIR                 (needs the extra)
    simforcing policy eval --env world-model --wm RUN --judge J --runs ... --out DIR         (inside a world model)
    simforcing policy agreement --sim SIM_EVAL --wm NAME=WM_EVAL ... --out DIR             (world model vs simulator)
    simforcing policy estimate --ground-truth TRIALS.csv|SIM_EVAL --wm-eval WM_EVAL --out DIR  (a few real trials
                                        correct many world-model episodes: valid intervals, ``policy.estimate``)
    simforcing policy probe --runs NAME=RUN ... --out DIR      (what action-only policies read from their frozen video
                                                                expert: a linear probe, ``policy.probe``)

A run folder whose name holds ``=`` (``sweep/lr=1e-4``) is given to ``--runs`` as it is (named by its folder) or as
``NAME=RUN``: of the ways to split an entry at an ``=``, the one whose RUN side is an existing folder is taken (an
entry that is itself a folder counts as a bare RUN); when two readings name folders, ``--run NAME RUN`` says which.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

from simforcing.commands import Given, Subcommand, note_same_inputs, note_unused_config
from simforcing.commands.runs import report_training
from simforcing.config import POLICY_SETTINGS, Config, ConfigError
from simforcing.result_files import POLICY_EVALUATION
from simforcing.runs.folder import CONFIG_FILE
from simforcing.utils import atomic_write_json, atomic_write_text, resolve_device


# -- policy train ----------------------------------------------------------------------------------------------------------
def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--setting", required=True, choices=POLICY_SETTINGS,
                        help="what the policy predicts and sees (docs/POLICY_TRANSFER.md)")
    parser.add_argument("--init", default=None, help="'base' (default: the preset's init + configured pretrained "
                        "weights) or a run folder (every compatible tensor of both experts; its checkpoint's own "
                        "config; a video base of `pretrain --method video_prior`: its video expert, the action expert "
                        "new)")
    parser.add_argument("--data", default=None, help="policy dataset folder")
    parser.add_argument("--out", default=None, help="run folder to create (or continue with --resume)")
    parser.add_argument("--preset", default=None, action=Given, help="with --init base: demo | bridge | "
                        "interndata_a1 (default: demo)")
    parser.add_argument("--config", default=None, help="with --init base: start from this config.json instead of "
                        "the preset (e.g. a world-model run's: same architecture and VAE, weights not inherited)")
    parser.add_argument("--resume", action="store_true", help="continue --out with its own config and start "
                        "(--preset and --config are not used then; an --init other than the recorded one is refused)")
    parser.add_argument("--dry-run", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--no-progress", action="store_true", help="print no progress lines")


def train_config(args: argparse.Namespace) -> Config:
    """``policy_run_config``: on --resume the run's config.json (a --config or --preset given too is said to be
    unused); with --init RUN the config its checkpoint was trained with (--preset/--config refused: they would be
    ignored); with --init base the preset or --config."""
    from simforcing.policy.configs import policy_run_config

    resume = args.out if args.resume and args.out else None
    args.init = _resumed_init(args) if resume is not None else (args.init or "base")
    if resume is None and args.init != "base" and (args.preset or args.config):
        raise ConfigError(f"--{'config' if args.config else 'preset'}: not with --init {args.init} (the policy starts "
                          "from the config that run's checkpoint was trained with); leave it out and give changes as "
                          "--section.field=value, or use --init base --config RUN/config.json for a fresh policy of "
                          "that architecture")
    cfg = policy_run_config(args.setting, args.init, args.data, args.preset or "demo", args.overrides,
                            resume_from=resume, config=args.config)
    if resume is not None and (Path(resume) / CONFIG_FILE).is_file():
        note_unused_config(args, cfg, resume)
    return cfg


def _resumed_init(args: argparse.Namespace) -> str:
    """The start of a resumed policy run: the one its init.json records (another --init is refused by name,
    ``runs.folder.check_same_init``), else --init, else base."""
    from simforcing.runs.folder import check_same_init

    return check_same_init(args.out, args.init) or args.init or "base"


def train(args: argparse.Namespace, cfg: Config) -> int:
    from simforcing.policy.train import policy_train_run

    if not args.out:
        raise ConfigError("--out: the run folder is required (e.g. --out runs/policy_action_only)")
    result = policy_train_run(cfg, args.out, args.init, args.resume, progress=not args.no_progress)
    return report_training("simforcing policy train", result)


# -- policy eval -----------------------------------------------------------------------------------------------------------
def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags by what they choose: the policy runs, where they act (and the output), the players and scenes of the
    synthetic benchmark (simulator and world model), the world model, LIBERO."""
    who = parser.add_argument_group("policy runs (every environment)")
    who.add_argument("--runs", nargs="*", default=[], metavar="[NAME=]RUN",
                     help="policy runs to evaluate (NAME labels the table row; a bare RUN is named by its folder; "
                          "a folder name may hold '=')")
    who.add_argument("--run", nargs=2, action="append", default=[], metavar=("NAME", "RUN"),
                     help="one more policy run with its row name (any folder name); repeatable")
    where = parser.add_argument_group("where they act and what is written")
    where.add_argument("--env", choices=("synthetic", "world-model", "libero"), default="synthetic",
                       help="synthetic: the MuJoCo simulator; world-model: the same scenes inside a world model "
                            "(--wm, --judge); libero: LIBERO (needs the extra)")
    where.add_argument("--out", required=True, help="folder for eval.json and eval.md (and frames.npz)")
    where.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N | auto")
    synth = parser.add_argument_group("synthetic benchmark: players and scenes (--env synthetic and world-model)")
    synth.add_argument("--expert-noise", type=float, nargs="*", default=[], metavar="SIGMA",
                       help="also the scripted expert with N(0, SIGMA^2) metres added to each action's position per "
                            "axis, one row per SIGMA")
    synth.add_argument("--no-baselines", action="store_true", help="leave out the expert / floor rows")
    synth.add_argument("--execute", type=int, default=None, help="actions executed per chunk before re-planning "
                       "(default: each run's policy.execute)")
    synth.add_argument("--per-task", type=int, default=10, help="held-out scenes per task")
    synth.add_argument("--max-steps", type=int, default=30, help="step limit of an episode")
    synth.add_argument("--scene-seed", type=int, default=None, metavar="SEED",
                       help="the seed of the held-out scenes and of the players' noise (default: 9000, every "
                            "evaluation's; another seed draws other scenes, e.g. to validate a judge where no "
                            "evaluation looked)")
    synth.add_argument("--layouts", type=int, default=None, help="the scenes' layouts (default: those of the runs' "
                       "training data, `data synth-policy --layouts`; 0 without runs)")
    synth.add_argument("--jitter", type=float, default=None, help="with --layouts, the task object's jitter in metres "
                       "(default: the runs' training data's)")
    synth.add_argument("--judge", default=None, help="the success judge (`simforcing model fit-judge`): required "
                       "with --env world-model; with --env synthetic every episode's frames also go through it")
    wm = parser.add_argument_group("world model (--env world-model)")
    wm.add_argument("--wm", default=None, help="the world-model run folder (or 'copy-first': the floor)")
    wm.add_argument("--wm-condition", choices=("rollout", "render"), default=None,
                    help="its simulation condition — rollout (the paper's: its own simulation chain) or render (the "
                         "robot's digital twin renders the executed actions); default: the run's sample.condition")
    wm.add_argument("--draws", type=int, default=1,
                    help="noise draws of the world model per (policy, scene) episode, run in one batch: each "
                         "episode records every draw's verdict (their mean a soft prediction, their disagreement a "
                         "trust feature of `policy estimate`); success rates stay draw 0's (default 1)")
    libero = parser.add_argument_group("LIBERO (--env libero)")
    libero.add_argument("--suite", default="libero_spatial",
                        help="libero_spatial | libero_object | libero_goal | libero_10")
    libero.add_argument("--trials", type=int, default=50, help="trials per task (cycling the init states)")
    libero.add_argument("--tasks", default=None, help="comma-separated task ids (default: all)")
    libero.add_argument("--gripper", choices=("open01", "libero"), default="open01",
                        help="the dataset's gripper convention (open01: FastWAM's 0 close..1 open -> x2-1, inverted, "
                             "sign; libero: -1 open/+1 close -> sign)")


def _readings(spec: str) -> list[tuple[str, str]]:
    """The (name, folder) readings of one --runs entry whose folder exists: the entry itself, or NAME=RUN split at
    any '='."""
    out = [(Path(spec).name, spec)] if Path(spec).is_dir() else []
    for i, c in enumerate(spec):
        if c == "=" and 0 < i < len(spec) - 1 and Path(spec[i + 1:]).is_dir():
            out.append((spec[:i], spec[i + 1:]))
    return out


def parse_runs(specs: list[str], pairs: list[list[str]] = ()) -> dict[str, str]:
    """Row name -> run folder from ``--runs`` entries (module docstring) and ``--run NAME RUN`` pairs. An entry
    no reading of which names an existing folder is split at its last '=' (the loader then names what is missing)."""
    out: dict[str, str] = {}
    for spec in specs:
        found = _readings(spec)
        if len(found) > 1:
            raise ConfigError(f"--runs: {spec!r} can be read as " + " or ".join(f"{n}={p}" for n, p in found)
                              + "; say which with --run NAME RUN")
        if not found:
            name, _, path = spec.rpartition("=")
            if not path:
                raise ConfigError(f"--runs: {spec!r}: expected NAME=RUN or RUN")
            found = [(name or Path(path).name, path)]
        _add_row(out, *found[0], spec)
    for name, path in pairs:
        _add_row(out, name, path, f"{name} {path}")
    return out


def _add_row(out: dict[str, str], name: str, path: str, spec: str, flag: str = "--runs",
             fix: str = "label the runs NAME=RUN (or --run NAME RUN) with different names") -> None:
    if name in out:
        raise ConfigError(f"{flag}: {spec!r}: the row name {name!r} is given twice; {fix}")
    out[name] = path


def _task_ids(spec: Optional[str]) -> Optional[list[int]]:
    if spec is None:
        return None
    try:
        return [int(t) for t in spec.split(",")]
    except ValueError:
        raise ConfigError(f"--tasks: got {spec!r}; expected comma-separated task ids, e.g. 0,3,7") from None


EVAL_FILES = ("eval.json", "eval.md", "frames.npz")  # what `policy eval` writes into --out
POLICY_EVAL = (EVAL_FILES, ("eval.json", (POLICY_EVALUATION, None)))  # its eval.json (None: LIBERO's, untagged)


def evaluate(args: argparse.Namespace, cfg: Optional[Config]) -> int:
    """Every argument and --out checked before the first episode (``outputs.check_results_folder``); the results
    appear at --out whole, replacing an earlier evaluation there (``outputs.results_folder``)."""
    from simforcing.outputs import check_results_folder, results_folder

    check_results_folder(args.out, "--out", "a policy evaluation", *POLICY_EVAL)  # before any episode is run
    device = resolve_device(args.device, "--device")
    runs = parse_runs(args.runs, args.run)
    if args.env == "libero" and args.scene_seed is not None:
        raise ConfigError("--scene-seed: LIBERO's scenes are its own init states (--trials cycles them); the seed "
                          "applies to --env synthetic and world-model")
    if args.env == "libero":
        from simforcing.policy.closed_loop.libero import evaluate_libero

        if len(runs) != 1:
            raise ConfigError(f"--runs: LIBERO evaluates one policy run at a time; got {len(runs)}")
        res = evaluate_libero(next(iter(runs.values())), args.suite, trials=args.trials,
                              task_ids=_task_ids(args.tasks), device=device, gripper=args.gripper)
    else:
        from simforcing.policy.judge.success_judge import load_judge
        from simforcing.policy.settings import check_episode_counts

        check_episode_counts(args.per_task, args.max_steps, args.execute)
        if not runs and args.no_baselines and not args.expert_noise:
            raise ConfigError("--runs: nothing to evaluate (no runs, no --expert-noise and --no-baselines)")
        if args.env == "world-model" and not (args.wm and args.judge):
            raise ConfigError("--env world-model needs --wm RUN (or 'copy-first') and --judge JUDGE (the folder of "
                              "`simforcing model fit-judge`)")
        if (args.wm or args.wm_condition or args.draws != 1) and args.env != "world-model":
            raise ConfigError("--wm / --wm-condition / --draws: a world model is used with --env world-model only")
        try:
            judge = load_judge(args.judge, device) if args.judge else None
        except ValueError as e:
            raise ConfigError(str(e)) from e
        res = _closed_loop(args, runs, judge, device)
    with results_folder(args.out, "--out", "a policy evaluation", *POLICY_EVAL) as tmp:
        if args.env == "libero":
            atomic_write_json(tmp / "eval.json", res)
            atomic_write_text(tmp / "eval.md", res["table_md"] + "\n")
            table = res["table_md"]
        else:
            from simforcing.policy.closed_loop.tables import evaluation_markdown

            if res.frames:
                _save_frames(tmp / "frames.npz", res.frames)
            res.write(tmp)
            table = evaluation_markdown(res)
    out = Path(args.out)
    print(table)
    print(f"wrote {out / 'eval.json'} and {out / 'eval.md'}")
    return 0


def _check_wm_condition(wm: str, condition: Optional[str]) -> None:
    """With the twin's rendering as the world model's condition (``--wm-condition render``, or the run's own
    sample.condition): a world model that never reads the condition (trained without it, or w = 0) is refused by
    name before any episode (``twin.check_twin_can_act``)."""
    from simforcing.runs.folder import WORLD_MODELS, run_config
    from simforcing.twin import check_twin_can_act

    if wm == "copy-first" or not Path(wm).is_dir():
        return  # the baseline, or a folder the environment names itself
    cfg = run_config(wm, WORLD_MODELS, "--wm", "sample")
    if (condition or cfg.sample.condition) == "render":
        check_twin_can_act(cfg, wm)


def _closed_loop(args: argparse.Namespace, runs: dict[str, str], judge, device):
    """The synthetic benchmark's evaluation (``policy.closed_loop.results.PolicyEvaluation``) in the simulator or a
    world model."""
    common = dict(per_task=args.per_task, max_steps=args.max_steps, baselines=not args.no_baselines,
                  device=device, execute=args.execute, layouts=args.layouts, jitter=args.jitter,
                  expert_noise=args.expert_noise)
    if args.scene_seed is not None:
        common["seed"] = args.scene_seed
    if args.env == "world-model":
        from simforcing.policy.closed_loop.world_model_eval import evaluate_world_model

        _check_wm_condition(args.wm, args.wm_condition)
        return evaluate_world_model(args.wm, judge, runs, condition=args.wm_condition, draws=args.draws, **common)
    from simforcing.policy.closed_loop.evaluate import evaluate_synthetic

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
    parser.add_argument("--reference", default=None, metavar="NAME",
                        help="one of the --wm names (e.g. a few-step student's teacher): every other world model "
                        "against it on the same episodes, and its change in agreement with the simulator, paired")


AGREEMENT_FILES = ("agreement.json", "agreement.md", "scatter.png", "videos")  # what `policy agreement` writes


def agreement(args: argparse.Namespace, cfg: Optional[Config]) -> int:
    """The evaluations and --out checked before anything is computed; the results appear at --out whole, replacing
    an earlier agreement there (``outputs.results_folder``: no old video beside new results)."""
    from simforcing.outputs import check_results_folder, results_folder
    from simforcing.policy.agreement.statistics import write_agreement

    if args.bootstrap < 1:
        raise ConfigError(f"--bootstrap: got {args.bootstrap}; expected an integer >= 1")
    check_results_folder(args.out, "--out", "an agreement", AGREEMENT_FILES)
    wms = {}
    for spec in args.wm:
        name, _, path = spec.partition("=")
        if not name or not path:
            raise ConfigError(f"--wm: {spec!r}: expected NAME=EVAL_FOLDER")
        _add_row(wms, name, path, spec, "--wm", "label the world-model evaluations NAME=EVAL with different names")
    note_same_inputs(wms, "--wm", "eval.json", "world-model evaluation")
    with results_folder(args.out, "--out", "an agreement", AGREEMENT_FILES) as tmp:
        res = write_agreement(args.sim, wms, args.out, args.bootstrap, args.video_policy, args.reference, into=tmp)
    print((Path(args.out) / "agreement.md").read_text().rstrip())
    print(f"wrote {Path(args.out) / 'agreement.json'}, agreement.md, scatter.png, {len(res.videos)} videos")
    return 0


# -- policy estimate -------------------------------------------------------------------------------------------------------
def add_estimate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ground-truth", required=True, help="a trial file (CSV or JSONL: policy,task,scene,success "
                        "— real-robot trials of scenes the world-model evaluation ran) or a simulator `policy eval` "
                        "folder of the same scenes (then --n scenes are drawn as the labelled ones)")
    parser.add_argument("--wm-eval", required=True, help="the `policy eval --env world-model` folder")
    parser.add_argument("--out", required=True, help="folder for estimate.json, estimate.md, episodes.csv, "
                        "estimates.png (and coverage.png)")
    parser.add_argument("--n", type=int, default=None, help="with a simulator evaluation: ground-truth scenes "
                        "drawn per policy (the same scenes for every policy; default 10)")
    parser.add_argument("--draws", type=int, default=0, help="with a simulator evaluation: repeat the estimate over "
                        "this many draws of the labelled scenes and measure coverage (0: none)")
    parser.add_argument("--study-n", type=int, nargs="+", default=None, help="with --draws: the coverage study's n "
                        "values, each fewer than the evaluation's scenes (default: those of 5 10 20 40 that are)")
    parser.add_argument("--study-design", default="pool", choices=("pool", "population"),
                        help="with --draws: the truth each interval must hold — pool: the rate over the evaluation's "
                             "scenes (the labelled drawn from them); population: the rate of the population they "
                             "sample, each draw a fresh pool of scenes drawn with replacement (what a user's robot "
                             "faces; the pool design flatters every interval)")
    parser.add_argument("--policies", nargs="+", default=None, metavar="NAME",
                        help="the policies to estimate, as the world-model evaluation names them (default: all; the "
                             "trials of the others are not used)")
    parser.add_argument("--predictor", default=None, choices=("learned", "verdict", "twin", "hand", "actions"),
                        help="learned (cross-fitted from each episode's features; the default where the episodes "
                             "hold per-frame readings, else verdict) | verdict (the world model's own verdict; with "
                             "--draws the share of draws judged successful) | twin (a full-scene twin's own verdict, "
                             "the world model's frames ignored: the simulator as the predictor) | hand (reach from "
                             "where the executed actions put the hand, push and grasp from the world model's "
                             "verdict) | actions (the same with the objects left in place: no world model, the "
                             "control)")
    parser.add_argument("--alpha", type=float, default=0.05, help="1 − the intervals' level")
    parser.add_argument("--min-trials", type=int, default=10, help="ground-truth trials a policy (or a task) needs "
                        "before the world model may narrow its interval; below, the trials' own interval (from a "
                        "handful the weight cannot be estimated and the interval runs short: docs/POLICY_EVALUATION.md)")
    parser.add_argument("--disagreement-prior", type=float, default=None, help="pseudo-episodes of disagreement "
                        "each way (default 0.1) that the interval's correlation of outcomes and predictions "
                        "counts: ten trials often hold none of a good predictor's rare errors, and the interval "
                        "would run short "
                        "(docs/POLICY_EVALUATION.md; 0: the trials' own correlation)")
    parser.add_argument("--no-refit-variance", dest="refit_variance", action="store_false", help="the learned "
                        "predictor's interval without its refit variance (how much the cross-fitted predictor moves "
                        "with the trials it was fitted on: docs/POLICY_EVALUATION.md) — the interval before "
                        "2026-12-07, short of its level against a policy's rate")
    parser.add_argument("--seed", type=int, default=0, help="the draw of the labelled scenes and of the folds "
                        "(an integer >= 0)")


def estimate(args: argparse.Namespace, cfg: Optional[Config]) -> int:
    """Every flag and --out checked before anything is read; --out written whole (``policy.estimate.run_estimate``)."""
    from simforcing.policy.estimate import run_estimate

    res, study = run_estimate(args.ground_truth, args.wm_eval, args.out, args.n, args.draws, args.study_n,
                              args.predictor, args.alpha, args.seed, policies=args.policies,
                              min_trials=args.min_trials, design=args.study_design, prior=args.disagreement_prior,
                              refit=args.refit_variance)
    print((Path(args.out) / "estimate.md").read_text().rstrip())
    print(f"wrote {Path(args.out) / 'estimate.json'}, estimate.md, episodes.csv, estimates.png"
          + (", coverage.png" if study else ""))
    return 0


# -- policy probe ----------------------------------------------------------------------------------------------------------
def add_probe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", nargs="+", required=True, metavar="NAME=RUN",
                        help="action-only policy runs (their frozen video expert is their initialisation's)")
    parser.add_argument("--out", required=True, help="folder for probe.json and probe.md")
    parser.add_argument("--train-scenes", type=int, default=40, help="fitting scenes per task (training seed)")
    parser.add_argument("--test-scenes", type=int, default=20, help="held-out scenes per task (evaluation seed)")
    parser.add_argument("--max-steps", type=int, default=30, help="step limit of a scene's scripted motion")
    parser.add_argument("--layouts", type=int, default=None, help="the scenes' layouts (default: the runs' data's)")
    parser.add_argument("--jitter", type=float, default=None, help="with --layouts: the task object's jitter, m")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N | auto")


PROBE_FILES = ("probe.json", "probe.md")  # what `policy probe` writes


def probe(args: argparse.Namespace, cfg: Optional[Config]) -> int:
    from simforcing.outputs import check_results_folder, results_folder
    from simforcing.policy.probe import probe_runs

    check_results_folder(args.out, "--out", "a probe", PROBE_FILES)
    res = probe_runs(parse_runs(args.runs), args.train_scenes, args.test_scenes, args.max_steps, args.layouts,
                     args.jitter, resolve_device(args.device))
    out = Path(args.out)
    with results_folder(out, "--out", "a probe", PROBE_FILES) as tmp:
        res.write(tmp)
    print(res.table_md)
    print(f"wrote {out / 'probe.json'} and {out / 'probe.md'}")
    return 0


TRAIN = Subcommand(add_train_arguments, train, train_config,
                   "run the same command with --resume to continue from the last checkpoint")
EVAL = Subcommand(add_eval_arguments, evaluate, interrupted="nothing was written; run the same command again")
AGREEMENT = Subcommand(add_agreement_arguments, agreement)
PROBE = Subcommand(add_probe_arguments, probe)
ESTIMATE = Subcommand(add_estimate_arguments, estimate)
