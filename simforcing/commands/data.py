"""`simforcing data synth | synth-policy | check | stats | embed-text | import-lerobot | encode`.

The libraries of ``synth`` and ``synth-policy`` (MuJoCo), ``embed-text`` (transformers), ``import-lerobot`` (pyarrow)
and ``encode`` (diffusers' VAE) are imported inside their own ``run`` function: ``data check`` and ``data stats`` start
without loading them.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Optional

from simforcing.commands import Subcommand, add_config_args, add_dataset_out, config_from_args, dataset_out
from simforcing.config import Config, ConfigError
from simforcing.data.check import check_dataset
from simforcing.data.format import meta_dir
from simforcing.data.stats import STATS_KEYS, write_stats
from simforcing.data.text_cache import cache_dir
from simforcing.recipes import apply_synth_recipe
from simforcing.utils import check_output_path, resolve_device

# ----------------------------------------------------------------------------------------------------------------------
# data synth
# ----------------------------------------------------------------------------------------------------------------------


SYNTH_COUNTS = {"num_train": 20, "num_val": 16, "num_sim_pool": 300, "length": 33}  # the demo's set
QUICK_COUNTS = {"num_train": 2, "num_val": 2, "num_sim_pool": 4, "length": 17}  # --quick
# the operator options' defaults (their flags default to None: --recipe sets those not given)
SYNTH_OPERATOR_DEFAULTS = {"action_noise": 0.0, "action_noise_splits": None, "pauses": 0, "pause_splits": None,
                           "failures": 0.0, "failure_splits": None}


def add_synth_arguments(parser: argparse.ArgumentParser) -> None:
    add_dataset_out(parser)
    parser.add_argument("--num-train", type=int, default=None, help="paired training episodes (default: 20)")
    parser.add_argument("--num-val", type=int, default=None, help="paired validation episodes (default: 16)")
    parser.add_argument("--num-sim-pool", type=int, default=None, help="sim-only episodes (stage 1) (default: 300)")
    parser.add_argument("--length", type=int, default=None, help="frames per episode (default: 33)")
    parser.add_argument("--height", type=int, default=32, help="frame height (pixels)")
    parser.add_argument("--width", type=int, default=48, help="frame width (pixels, one camera)")
    parser.add_argument("--seed", type=int, default=0, help="dataset seed (scenes, motions, appearance)")
    parser.add_argument("--layout", choices=("separate", "side_by_side"), default="separate",
                        help="sim and real videos as separate files or side by side in one")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="simulation processes")
    parser.add_argument("--layout-train", type=int, default=0,
                        help="more paired training episodes in the policy benchmark's LIBERO-like scenes")
    parser.add_argument("--layouts", type=int, default=None, help="fixed layouts of those episodes (default: 2)")
    parser.add_argument("--jitter", type=float, default=None, help="their task object's jitter, metres (default: 0.03)")
    parser.add_argument("--pairing", choices=("arm", "scene"), default="arm",
                        help="what the simulation videos show: arm = the arm alone on black, its joints copied from "
                        "the real scene (BridgeData V2's pairs, the default); scene = the whole scene, plain, simulated "
                        "by physics of its own from the same start and actions (InternData-A1's pairs)")
    parser.add_argument("--physics-gap", type=float, default=None, metavar="S",
                        help="with --pairing scene: how far the simulation's physics is from the real scene's, a "
                        "scale of the stated ranges (object mass x1/2..2, sliding friction x1/1.75..1.75, size "
                        "±15%%, servo gains x2/3..1.5 at 1; 0 = the real physics) (default: 1)")
    parser.add_argument("--action-noise", type=float, default=None, metavar="SIGMA",
                        help="drive the episodes of --action-noise-splits by a noisy operator: N(0, σ²) per step and "
                        "axis on the position actions, σ ~ U(0, SIGMA) per episode (metres; 0: scripted motions only)")
    parser.add_argument("--action-noise-splits", nargs="+", default=None, choices=("train", "val", "sim_pool"),
                        help="which episodes --action-noise drives (default: sim_pool, when it holds episodes)")
    parser.add_argument("--pauses", type=int, default=None, metavar="N",
                        help="the operator of the --pause-splits episodes stops N times (0-4), holding its target "
                             "for 2-5 frames (zero actions) before the motion goes on")
    parser.add_argument("--pause-splits", nargs="+", default=None, choices=("train", "val", "sim_pool"),
                        help="which episodes --pauses applies to (default: those of train, sim_pool that hold episodes)")
    parser.add_argument("--failures", type=float, default=None, metavar="F",
                        help="a fraction F (0-1) of the --failure-splits episodes is driven by an operator that "
                        "attempts the task and fails it: misses the object by several cm, closes the gripper too "
                        "high, stops short (episodes.jsonl 'failure' says how)")
    parser.add_argument("--failure-splits", nargs="+", default=None, choices=("train", "val", "sim_pool"),
                        help="which episodes --failures applies to (default: those of train, sim_pool that hold episodes)")
    parser.add_argument("--recipe", default=None, metavar="NAME",
                        help="the operators of a named recipe (simforcing.recipes; evaluator: noisy, pausing and "
                             "failing operators in the training episodes — the data a world model that judges "
                             "policies needs); not with the options it sets")
    parser.add_argument("--views", nargs="+", default=None, metavar="VIEW",
                        help="the cameras of every episode, the external one first: external (default) or external "
                             "wrist (the wrist camera on the hand, in both looks, with its arm mask; the external "
                             "camera's files are those of the one-view dataset)")
    parser.add_argument("--quick", action="store_true", help="a tiny set: 2 train, 2 val, 4 sim-only, 17 frames")
    parser.add_argument("--overwrite", action="store_true", help="replace a dataset already in OUT")
    parser.add_argument("--no-finalize", action="store_true", help="skip min-max stats and the text cache")
    parser.add_argument("--preview", default=None, help="also write a PNG strip of the first paired episode here")
    parser.add_argument("--no-progress", action="store_true", help="print no progress lines")


def synth_counts(args: argparse.Namespace) -> dict[str, int]:
    """The episode counts and length: those given, else the demo's set; ``--quick``'s tiny set, which no count
    given beside it may change (refused by name)."""
    given = {k: getattr(args, k) for k in SYNTH_COUNTS if getattr(args, k) is not None}
    if args.quick and given:
        flags = ", ".join(f"--{k.replace('_', '-')}" for k in given)
        raise ConfigError(f"--quick: a tiny set of its own (2 train, 2 val, 4 sim-only, 17 frames); {flags} would be "
                          "ignored beside it — leave out --quick or the counts")
    return dict(QUICK_COUNTS) if args.quick else {**SYNTH_COUNTS, **given}


def synth(args: argparse.Namespace, cfg: Optional[Config]) -> int:
    # MuJoCo (and its MUJOCO_GL set-up) and the text encoder load only for this subcommand
    from simforcing.data.synthetic.generate import generate_dataset, save_preview
    from simforcing.prep.text import finalize_dataset

    out = dataset_out(args)
    c = synth_counts(args)
    apply_synth_recipe(args, SYNTH_OPERATOR_DEFAULTS)
    t0 = time.time()

    def splits(value):
        return None if value is None else tuple(value)

    out = generate_dataset(out, num_train=c["num_train"], num_val=c["num_val"], num_sim_pool=c["num_sim_pool"],
                           length=c["length"], height=args.height, width=args.width, seed=args.seed,
                           layout=args.layout, progress=not args.no_progress, workers=args.workers,
                           overwrite=args.overwrite, finish=None if args.no_finalize else finalize_dataset,
                           layout_train=args.layout_train, layouts=args.layouts, jitter=args.jitter,
                           action_noise=args.action_noise, noise_splits=splits(args.action_noise_splits),
                           pauses=args.pauses, pause_splits=splits(args.pause_splits), failures=args.failures,
                           failure_splits=splits(args.failure_splits), pairing=args.pairing,
                           physics_gap=args.physics_gap, views=splits(args.views))
    if args.preview and c["num_train"] + c["num_val"] > 0:
        save_preview(out, "ep_00000", args.preview)
    total = c["num_train"] + c["num_val"] + c["num_sim_pool"] + args.layout_train
    cams = f", views {' '.join(args.views)}" if args.views else ""
    print(f"wrote {total} episodes ({args.pairing} pairing{cams}) to {out} in {time.time() - t0:.1f} s")
    return 0


# ----------------------------------------------------------------------------------------------------------------------
# data synth-policy
# ----------------------------------------------------------------------------------------------------------------------


def add_synth_policy_arguments(parser: argparse.ArgumentParser) -> None:
    add_dataset_out(parser)
    parser.add_argument("--per-task", type=int, default=16, help="successful training demonstrations per task")
    parser.add_argument("--num-val", type=int, default=2, help="validation demonstrations per task")
    parser.add_argument("--max-steps", type=int, default=30, help="step limit of a demonstration")
    parser.add_argument("--height", type=int, default=32, help="camera height")
    parser.add_argument("--width", type=int, default=48, help="camera width (the video is two cameras wide)")
    parser.add_argument("--seed", type=int, default=100, help="dataset seed (evaluation scenes use another)")
    parser.add_argument("--layouts", type=int, default=0, help="LIBERO-like mode: every scene is one of K fixed "
                        "layouts with the task object jittered (0: every scene its own objects, camera and look)")
    parser.add_argument("--jitter", type=float, default=None, help="with --layouts: the task object's position "
                        "jitter, metres (default: 0.03)")
    parser.add_argument("--workers", type=int, default=1, help="simulation processes")
    parser.add_argument("--overwrite", action="store_true", help="replace a dataset already in OUT")
    parser.add_argument("--no-progress", action="store_true", help="print no progress lines")


def synth_policy(args: argparse.Namespace, cfg: Optional[Config]) -> int:
    from simforcing.policy.synth_data import generate_policy_dataset  # MuJoCo: only this command needs it

    if args.jitter is not None and not args.layouts:
        raise ConfigError(f"--jitter: got {args.jitter}, but without --layouts K every scene is its own and there is "
                          "no layout's task object to jitter; give --layouts K, or leave out --jitter")
    s = generate_policy_dataset(dataset_out(args), per_task=args.per_task, num_val=args.num_val,
                                max_steps=args.max_steps, height=args.height, width=args.width, seed=args.seed,
                                workers=args.workers, overwrite=args.overwrite, progress=not args.no_progress,
                                layouts=args.layouts, jitter=0.03 if args.jitter is None else args.jitter)
    surplus = s["attempted"] - s["failed"] - s["episodes"]
    print(f"wrote {s['episodes']} successful demonstrations to {s['out']} ({s['attempted']} episodes simulated: "
          f"{s['failed']} failed, {surplus} more than a task needed; both dropped)")
    return 0


# ----------------------------------------------------------------------------------------------------------------------
# data check / data stats
# ----------------------------------------------------------------------------------------------------------------------


def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", metavar="DIR", help="dataset folder")
    parser.add_argument("--skip-bad", action="store_true", help="skip and count bad episodes instead of stopping")
    add_config_args(parser)


def check(args: argparse.Namespace, cfg: Config) -> int:
    report = check_dataset(args.root, cfg, skip_bad=args.skip_bad or cfg.data.skip_bad)
    print(report.format())
    return 0


def add_stats_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", metavar="DIR", help="dataset folder")
    parser.add_argument("--splits", default="train,sim_pool", help="comma-separated splits to compute on")
    parser.add_argument("--skip-bad", action="store_true", help="leave out episodes whose lowdim.npz is bad")


def stats(args: argparse.Namespace, cfg: Optional[Config]) -> int:
    splits = tuple(s for s in args.splits.split(",") if s)
    result = write_stats(args.root, splits, skip_bad=args.skip_bad)
    for ep, why in result.get("skipped", []):
        print(f"skipped {ep}: {why}")
    print(f"statistics over {result['num_episodes']} episodes of {', '.join(splits)} -> "
          f"{meta_dir(args.root) / 'stats.json'}")
    for key in STATS_KEYS:
        lo = ", ".join(f"{v:.4g}" for v in result[key]["min"])
        hi = ", ".join(f"{v:.4g}" for v in result[key]["max"])
        print(f"  {key:<6} min [{lo}]\n  {'':<6} max [{hi}]")
    return 0


# ----------------------------------------------------------------------------------------------------------------------
# data embed-text
# ----------------------------------------------------------------------------------------------------------------------


def add_embed_text_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", help="dataset folder")
    parser.add_argument("--encoder", default=None,
                        help="local umT5 folder (sets model.text_encoder; demo preset: default seeded T5)")
    add_config_args(parser)


def embed_text_config(args: argparse.Namespace) -> Config:
    cfg = config_from_args(args)
    if args.encoder is not None:
        cfg.model.text_encoder = args.encoder
    return cfg


def embed_text(args: argparse.Namespace, cfg: Config) -> int:
    from simforcing.models.text import load_text_encoder  # transformers: only this subcommand needs it
    from simforcing.prep.text import embed_dataset

    encoder = load_text_encoder(cfg)
    n = embed_dataset(args.root, cfg, encoder)
    print(f"embedded {n} instruction(s) with {encoder.name} (D = {encoder.dim}, <= {encoder.max_tokens} tokens) "
          f"-> {cache_dir(args.root, cfg.data.text_cache)}")
    return 0


# ----------------------------------------------------------------------------------------------------------------------
# data import-lerobot
# ----------------------------------------------------------------------------------------------------------------------


def add_import_lerobot_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sim", default=None, help="simulation LeRobot v3.0 dataset folder (omit with "
                        "--wrist-camera: a real-only policy dataset)")
    parser.add_argument("--real", required=True, help="real LeRobot v3.0 dataset folder")
    parser.add_argument("--out", required=True, help="output dataset folder (simforcing format)")
    parser.add_argument("--sim-camera", nargs="+", default=None, metavar="KEY",
                        help="video feature(s) of the sim dataset (default: the only one); several: a multi-view "
                             "dataset, one per view in the order of --real-camera")
    parser.add_argument("--real-camera", nargs="+", default=None, metavar="KEY",
                        help="video feature(s) of the real dataset (default: the only one); several: a multi-view "
                             "dataset (e.g. a head and a wrist camera), the first one the scene's")
    parser.add_argument("--views", nargs="+", default=None, metavar="NAME",
                        help="the views' names in the dataset (default: external for one camera; several cameras: "
                             "the last part of each real camera key, e.g. observation.images.wrist -> wrist)")
    parser.add_argument("--camera", default=None, help="policy dataset: the external camera's video feature")
    parser.add_argument("--wrist-camera", default=None, help="policy dataset (real only, two cameras side by side, "
                        "no --sim): the wrist camera's video feature, e.g. LIBERO's observation.images.wrist_image")
    parser.add_argument("--action-key", default="action", help="the LeRobot feature holding the actions")
    parser.add_argument("--state-key", default="observation.state",
                        help="the LeRobot feature holding the proprioceptive states")
    parser.add_argument("--val-fraction", type=float, default=0.1, help="fraction of paired episodes put in val")
    parser.add_argument("--seed", type=int, default=0, help="seed of the train/val split")
    parser.add_argument("--height", type=int, default=None, help="stored height (default: the real camera's)")
    parser.add_argument("--width", type=int, default=None, help="stored width (default: the real camera's)")
    parser.add_argument("--lowdim-from", choices=("real", "sim"), default="real",
                        help="dataset whose actions/states are kept")
    parser.add_argument("--sim-background", default="black", help="what sim frames show outside the arm")
    parser.add_argument("--overwrite", action="store_true", help="replace a dataset already in OUT")
    parser.add_argument("--skip-bad", action="store_true",
                        help="skip (and count) episodes that cannot be imported, e.g. sim/real length mismatch")
    parser.add_argument("--no-progress", action="store_true", help="print no progress lines")


def _print_skipped(skipped: list[tuple[str, str, str]]) -> None:
    for _, kind, why in skipped:
        print(f"  skipped [{kind}] {why}")
    if skipped:
        print(f"{len(skipped)} bad episodes skipped")


def import_lerobot(args: argparse.Namespace, cfg: Optional[Config]) -> int:
    if args.wrist_camera is not None:  # a policy dataset: real episodes, two cameras
        from simforcing.policy.data import import_lerobot_policy

        if args.sim is not None:
            raise ConfigError("--sim: a policy dataset (--wrist-camera) is real-only; leave out --sim")
        if args.real_camera is not None and len(args.real_camera) > 1:
            raise ConfigError("--real-camera: a policy dataset (--wrist-camera) takes one external camera; give it "
                              "with --camera KEY")
        s = import_lerobot_policy(args.real, args.out, args.camera or (args.real_camera or [None])[0],
                                  args.wrist_camera,
                                  args.action_key, args.state_key, args.val_fraction, args.seed, args.height,
                                  args.width, progress=not args.no_progress, overwrite=args.overwrite,
                                  skip_bad=args.skip_bad)
        _print_skipped(s["skipped"])
        print(f"wrote the policy dataset {s['out']}: {s['train']} train, {s['val']} val episodes, two cameras at "
              f"{s['height']}x{s['width']}; next: simforcing data embed-text {s['out']}")
        return 0
    if args.sim is None:
        raise ConfigError("--sim: required for a paired world-model dataset (or give --wrist-camera for a real-only "
                          "policy dataset)")
    from simforcing.data.lerobot import import_lerobot as run_import  # pyarrow: only this subcommand needs it

    summary = run_import(args.sim, args.real, args.out, args.sim_camera, args.real_camera, args.action_key,
                         args.state_key, args.val_fraction, args.seed, args.height, args.width, args.lowdim_from,
                         args.sim_background, progress=not args.no_progress, overwrite=args.overwrite,
                         skip_bad=args.skip_bad, views=args.views)
    _print_skipped(summary["skipped"])
    cams = f" of the views {', '.join(summary['views'])}" if len(summary["views"]) > 1 else ""
    print(f"wrote {summary['out']}: {summary['train']} train, {summary['val']} val, {summary['sim_pool']} sim-only "
          f"episodes at {summary['height']}x{summary['width']}{cams}; statistics in meta/stats.json")
    if summary["skipped_real_only"]:
        print(f"skipped {len(summary['skipped_real_only'])} real episodes without a sim partner")
    print(f"next: simforcing data embed-text {summary['out']}")
    return 0


# ----------------------------------------------------------------------------------------------------------------------
# data encode
# ----------------------------------------------------------------------------------------------------------------------


def add_encode_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument("--data", required=True, help="dataset folder")
    parser.add_argument("--out", required=True, help="cache folder to create")
    parser.add_argument("--windows-per-episode", type=int, default=None,
                        help="K windows per episode drawn once and encoded (default: data.windows_per_episode)")
    parser.add_argument("--splits", nargs="+", default=["train", "sim_pool"], help="splits to encode")
    parser.add_argument("--batch-size", type=int, default=16, help="windows per VAE call")
    parser.add_argument("--no-progress", action="store_true", help="print no progress lines")


def encode_config(args: argparse.Namespace) -> Config:
    cfg = config_from_args(args)
    cfg.data.root = args.data
    return cfg


def encode(args: argparse.Namespace, cfg: Config) -> int:
    from simforcing.prep.latents import encode_latent_cache  # the VAE (diffusers): only this subcommand needs it

    check_output_path(args.out, "--out")
    index = encode_latent_cache(cfg, args.data, args.out, args.windows_per_episode, tuple(args.splits),
                                args.batch_size, resolve_device(cfg.train.device), progress=not args.no_progress)
    n = sum(len(e["windows"]) for e in index["episodes"])
    print(f"encoded {n} windows of {len(index['episodes'])} episodes into {len(index['shards'])} shards in {args.out}")
    return 0


# ----------------------------------------------------------------------------------------------------------------------
# data check-twin
# ----------------------------------------------------------------------------------------------------------------------


def add_check_twin_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument("--data", required=True, help="dataset folder (episodes with twin.json)")
    parser.add_argument("--split", default="val", help="which split's episodes to render")
    parser.add_argument("--num-episodes", type=int, default=None, help="the first N episodes of the split (all)")
    parser.add_argument("--out", default=None, help="also write the result here (JSON)")


def check_twin_out(out: str) -> None:
    """``data check-twin --out FILE`` checked before anything is rendered: a file to write (it was checked as a
    folder, so the same command run again was refused by its own result); an existing file only when it is an earlier
    check-twin result (replaced), never a file of the user's."""
    import json

    path = check_output_path(out, "--out", folder=False)
    if path.is_file():
        try:
            earlier = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError):
            earlier = None
        if not (isinstance(earlier, dict) and {"twin", "split", "episodes"} <= set(earlier)):
            raise ConfigError(f"--out: {path} is a file that `data check-twin` did not write; give a new file (or "
                              "an earlier check-twin result, which is replaced)")


def check_twin(args: argparse.Namespace, cfg: Config) -> int:
    from simforcing.twin import check_twin as run_check  # MuJoCo (the synthetic twin) loads only here
    from simforcing.utils import atomic_write_json

    if args.num_episodes is not None and args.num_episodes < 1:
        raise ConfigError(f"--num-episodes: got {args.num_episodes}; expected an integer >= 1")
    if args.out:
        check_twin_out(args.out)
    res = run_check(cfg, args.data, args.split, args.num_episodes)
    print(f"twin {res.twin!r} against the recorded simulation videos of {len(res.episodes)} {args.split} episodes "
          f"(PSNR dB; the VAE's own reconstruction is the ceiling a condition goes through):")
    for e in res.episodes:
        print(f"  {e['episode_id']}  mean {e['psnr_mean']:6.2f}  worst frame {e['psnr_min']:6.2f}  {e['instruction']}")
    print(f"all: mean {res.mean:.2f} dB, worst frame {res.worst_frame:.2f} dB")
    if args.out:
        atomic_write_json(args.out, res.to_json())
    return 0


SYNTH = Subcommand(add_synth_arguments, synth)
SYNTH_POLICY = Subcommand(add_synth_policy_arguments, synth_policy)
CHECK = Subcommand(add_check_arguments, check, config_from_args)
STATS = Subcommand(add_stats_arguments, stats)
EMBED_TEXT = Subcommand(add_embed_text_arguments, embed_text, embed_text_config)
IMPORT_LEROBOT = Subcommand(add_import_lerobot_arguments, import_lerobot)
ENCODE = Subcommand(add_encode_arguments, encode, encode_config)
CHECK_TWIN = Subcommand(add_check_twin_arguments, check_twin, config_from_args)
