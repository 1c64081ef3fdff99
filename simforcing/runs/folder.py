"""A training run's folder: the names of its files, what kind of run it is, and the one way to open it.

    RUN/run.json          RUN_RECORD     {"run_id", "kind", "stage", "created", "simforcing"}: marks a simforcing run
    RUN/.lock             LOCK_FILE      the writer's lock (simforcing.runs.locking)
    RUN/config.json       CONFIG_FILE    the resolved config, written once the run has started
    RUN/status.json       STATUS_FILE    {"state", "step", "reason", "total_steps", ...} (training.runlog)
    RUN/metrics.jsonl     METRICS_FILE   one row per logged step
    RUN/tb/               TB_DIR         TensorBoard
    RUN/loss_curves.png   LOSS_PLOT
    RUN/teacher.json      TEACHER_FILE   stage 2: the teacher checkpoint it started from
    RUN/init.json         INIT_FILE      policy, or stage 1 from a video base: what its weights were initialised from
    RUN/checkpoints/      CHECKPOINTS_DIR  (simforcing.runs.checkpoint)

Every run says what it is (``kind`` in run.json; for runs from before that, from its stage or config):
``video_base`` (``simforcing pretrain --method video_prior``, stage 0: the network trained as a plain video model, no
actions; ``simforcing.prior``), ``stage1`` (``simforcing pretrain``, the simulation world model), ``stage2``
(``simforcing train --method M``, a real-domain world model), ``fewstep`` (``simforcing distill``, a few-step
student of a stage-2 world model: ``simforcing.fewstep``) or ``policy`` (``simforcing policy train``). A command
that takes a run names the kinds it accepts and refuses the others by name, with a command that would work
(:func:`require_kind`) — before any other work. The other folders simforcing writes (a dataset, a success judge, a
command's results) are told apart by their marker files (:func:`what_folder`), so a command refuses them by name too,
wherever a run is expected and wherever it would write into one.

Opening a run (sampling, evaluation, the stage-2 teacher, policy initialisation and inference all do it this way):

    run = open_run(RUN, kinds=WORLD_MODELS, flag="--ckpt", use="sample")   # the newest valid checkpoint (or step=N)
    run.cfg                 # the config that checkpoint was trained with (its own copy, checkpoint.trained_config)
    model = run.model(device)                                             # built from run.cfg, weights loaded, eval
    cfg = run_config(RUN, ...)                                            # the same config without reading weights
"""

from __future__ import annotations

import json
import shlex
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from simforcing.version import __version__
from simforcing.config import STAGE1_METHOD, VIDEO_PRIOR_METHOD, Config, ConfigError, config_diff
from simforcing.errors import CheckpointError
from simforcing.models.world_model import build_world_model
from simforcing.runs.checkpoint import (CHECKPOINTS_DIR, CONFIG_FILE, Checkpoint, checkpoint_config,
                                        config_dict_hash, config_hash, find_resumable, list_checkpoints,
                                        load_checkpoint, load_model_state, read_meta, step_dir)
from simforcing.runs.locking import LOCK_FILE
from simforcing.utils import weights_digest

RUN_RECORD = "run.json"
STATUS_FILE = "status.json"
METRICS_FILE = "metrics.jsonl"
TB_DIR = "tb"
LOSS_PLOT = "loss_curves.png"
TEACHER_FILE = "teacher.json"
INIT_FILE = "init.json"
# what a simforcing run folder holds: a folder with any of these but no run record is someone else's
RUN_FILES = (CONFIG_FILE, METRICS_FILE, STATUS_FILE, TB_DIR, CHECKPOINTS_DIR, TEACHER_FILE, LOSS_PLOT)
# the other folders simforcing writes, by the file that marks each (checked in this order, after the run kinds)
JUDGE_META, JUDGE_FILE = "judge.json", "judge.safetensors"  # `simforcing model fit-judge` (policy.judge.success_judge)
FOLDER_MARKERS = (("meta/info.json", "a dataset (meta/info.json)"), ("episodes", "a dataset (episodes/)"),
                  (JUDGE_META, "a success judge (`simforcing model fit-judge`)"),
                  ("rollout.json", "a rollout's results (`simforcing rollout`)"),
                  ("eval.json", "an evaluation's results (eval.json)"),
                  ("agreement.json", "an agreement's results (`simforcing policy agreement`)"),
                  ("estimate.json", "an estimate's results (`simforcing policy estimate`)"),
                  ("probe.json", "a probe's results (`simforcing policy probe`)"))
__all__ = ["CHECKPOINTS_DIR", "CONFIG_FILE", "LOCK_FILE"]  # re-exported: every run-folder name is importable here

# the kinds of run, what each is called, and the training stage that writes it
KIND_NAMES = {"video_base": "a video-base run (stage 0)", "stage1": "a stage-1 run", "stage2": "a stage-2 run",
              "policy": "a policy run", "fewstep": "a few-step student run"}
STAGE_KIND = {"video_prior": "video_base", "pretrain": "stage1", "train": "stage2", "policy": "policy",
              "distill": "fewstep"}
KINDS = tuple(KIND_NAMES)
WORLD_MODELS = ("stage1", "stage2", "fewstep")
# what `simforcing pretrain --init RUN` starts stage 1 from: a video base, or another stage-1 run (its whole network on
# other data or other views: the multi-view world model continues the one-view one's stage 1)
INIT_STAGE1 = ("video_base", "stage1")
INIT_POLICY = KINDS  # what `simforcing policy train --init RUN` starts from (a video base: its video expert only)


# ----------------------------------------------------------------------------------------------------------------------
# The run record
# ----------------------------------------------------------------------------------------------------------------------


def read_run_record(run_dir: str | Path) -> dict | None:
    """RUN/run.json, or None when absent or unreadable."""
    try:
        rec = json.loads((Path(run_dir) / RUN_RECORD).read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("run_id"), str) else None


def new_run_record(stage: str) -> dict:
    return {"run_id": uuid.uuid4().hex, "kind": STAGE_KIND[stage], "stage": stage, "created": time.time(),
            "simforcing": __version__}


def is_run_folder(run_dir: str | Path) -> bool:
    """A simforcing run: it has a run record, or (runs from before run records) finished checkpoints."""
    return read_run_record(run_dir) is not None or bool(list_checkpoints(run_dir))


def foreign_files(run_dir: str | Path) -> list[str]:
    """The names of ``RUN_FILES`` present in a folder that is not a simforcing run (what a run would overwrite)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir() or is_run_folder(run_dir):
        return []
    return [n for n in RUN_FILES if (run_dir / n).exists() or (run_dir / n).is_symlink()]


def check_not_foreign(run_dir: str | Path) -> None:
    """ConfigError naming the files when ``run_dir`` holds run-like files that simforcing did not write."""
    found = foreign_files(run_dir)
    if found:
        raise ConfigError(f"--out: {run_dir} is not a simforcing run folder (no {RUN_RECORD}) but holds "
                          f"{', '.join(found)}; a run would overwrite them — choose another folder or move them away")


# ----------------------------------------------------------------------------------------------------------------------
# Kinds
# ----------------------------------------------------------------------------------------------------------------------


def kind_of_config(cfg: Config, has_teacher: bool = False) -> str:
    """The kind of run a config trains: a policy (``model.action_head``), a video base (``video_prior``), stage 1
    (``sim_pretrain``) or stage 2."""
    if cfg.model.action_head:
        return "policy"
    if cfg.fewstep.steps:
        return "fewstep"
    if cfg.train.method == VIDEO_PRIOR_METHOD:
        return "video_base"
    return "stage1" if cfg.train.method == STAGE1_METHOD and not has_teacher else "stage2"


def run_kind(run_dir: str | Path) -> Optional[str]:
    """What a run folder is: run.json's ``kind``; for older runs its ``stage``, else its config.json; None when the
    folder is not a run (or its config cannot be read)."""
    run_dir = Path(run_dir)
    rec = read_run_record(run_dir) or {}
    if rec.get("kind") in KIND_NAMES:
        return rec["kind"]
    if rec.get("stage") in STAGE_KIND:
        return STAGE_KIND[rec["stage"]]
    try:
        cfg = Config.load(run_dir / CONFIG_FILE)
    except (ConfigError, OSError, ValueError):
        return None
    return kind_of_config(cfg, (run_dir / TEACHER_FILE).exists())


def what_folder(path: str | Path) -> Optional[str]:
    """What a simforcing folder is, in words: a run of its kind (:func:`describe_kind`), a dataset, a success judge
    or a command's results (``FOLDER_MARKERS``); None for a folder simforcing did not write (or no folder)."""
    path = Path(path)
    if not path.is_dir():
        return None
    kind = run_kind(path)
    if kind is not None:
        try:
            cfg = Config.load(path / CONFIG_FILE)
        except (ConfigError, OSError, ValueError):
            cfg = None
        return describe_kind(kind, cfg)
    return next((words for marker, words in FOLDER_MARKERS if (path / marker).exists()), None)


def describe_kind(kind: str, cfg: Optional[Config]) -> str:
    """"a stage-2 run (a real-domain world model, train.method 'sft')" and the like."""
    if kind == "video_base":
        return "a video-base run (stage 0, the video prior: trained without actions)"
    if kind == "stage1":
        return "a stage-1 run (the simulation world model)"
    if kind == "stage2":
        return f"a stage-2 run (a real-domain world model, train.method {cfg.train.method if cfg else '?'!r})"
    if kind == "fewstep":
        steps = cfg.fewstep.steps if cfg else "?"
        return f"a few-step student run (fewstep.steps {steps}, distilled from a world model)"
    return f"a policy run (policy.setting {cfg.policy.setting if cfg else '?'!r})"


def resume_command(run_dir: str | Path, kind: str, cfg: Optional[Config] = None) -> str:
    """The command that continues a run of ``kind`` (its config is the run's own, so nothing else is needed)."""
    out = shlex.quote(str(run_dir))
    if kind == "video_base":
        return f"simforcing pretrain --method {VIDEO_PRIOR_METHOD} --resume --out {out}"
    if kind == "stage1":
        return f"simforcing pretrain --resume --out {out}"
    if kind == "stage2":
        return f"simforcing train --method {cfg.train.method if cfg else 'METHOD'} --resume --out {out}"
    if kind == "fewstep":
        return f"simforcing distill --resume --out {out}"
    return f"simforcing policy train --setting {cfg.policy.setting if cfg else 'SETTING'} --resume --out {out}"


def _recorded_source(run_dir: Path, name: str, key: str) -> Optional[str]:
    """The run folder a run recorded as its teacher (teacher.json "run") or initialisation (init.json "source")."""
    try:
        value = json.loads((run_dir / name).read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value != "base" else None


def check_same_teacher(run_dir: str | Path, teacher_run: Optional[str | Path], flag: str = "--teacher") -> None:
    """On ``--resume``: ConfigError when ``teacher_run`` is not the teacher RUN/teacher.json records (a student, stage
    2 or a distillation, keeps the teacher it was started from: another one would be recorded beside the first
    teacher's checkpoint, or train the rest of the run against other weights). None, or the same folder spelt another
    way, passes; a recorded teacher that is no longer there lets the given one stand in, with a warning."""
    if teacher_run is None:
        return
    recorded = _recorded_source(Path(run_dir), TEACHER_FILE, "run")
    if recorded is None or Path(recorded).resolve() == Path(teacher_run).resolve():
        return
    if not Path(recorded).is_dir():
        warnings.warn(f"{flag}: {run_dir} was started from {recorded} (its {TEACHER_FILE}), which is no longer there; "
                      f"resuming with {teacher_run} in its place", stacklevel=2)
        return
    raise ConfigError(f"{flag}: {run_dir} was started from the teacher {recorded} ({TEACHER_FILE}), not "
                      f"{teacher_run}; a resumed run keeps its teacher — resume without {flag} (or with the recorded "
                      "one), or start a new run in another --out")


def read_init_source(run_dir: str | Path) -> Optional[str]:
    """RUN/init.json's ``source`` ("base" or a run folder); None when the run recorded none (no init.json). Before
    the run's first checkpoint a file that does not read as a record — cut short, not an object, a source that is no
    string — is a CheckpointError naming it (taken for no record, a resume started from other weights without a
    word); once the run has checkpoints its weights come from them, and such a file reads as no record."""
    path = Path(run_dir) / INIT_FILE
    if not path.exists():
        return None
    try:
        source = json.loads(path.read_text()).get("source")
        problem = None if isinstance(source, str) and source else \
            f"field 'source' must be \"base\" or the run folder the run started from; got {source!r:.60}"
    except (OSError, ValueError, AttributeError) as e:
        source, problem = None, f"cannot read the start the run recorded ({type(e).__name__}: {e})"
    if problem is None or list_checkpoints(run_dir):
        return source if problem is None else None
    raise CheckpointError(f"{problem}; the run has no checkpoint yet, so a resume starts again from what it records "
                          "— restore it (the file --init wrote), or start a new run", path)


def check_same_init(run_dir: str | Path, init: Optional[str], flag: str = "--init") -> Optional[str]:
    """On ``--resume``: the start RUN/init.json records ("base" or a run folder; None when the run recorded none
    yet: :func:`read_init_source`), and ConfigError when ``init`` (given: not None) names another one — a run stopped
    before its first checkpoint would otherwise start again from what the resume names, not from what it started
    with."""
    source = read_init_source(run_dir)
    if source is None:
        return None
    if init is None:
        same = True
    elif "base" in (init, source):
        same = init == source
    else:
        same = Path(init).resolve() == Path(source).resolve()
    if not same:
        raise ConfigError(f"{flag}: {run_dir} started from {source} ({INIT_FILE}), not {init}; a resumed run keeps "
                          f"its start — resume without {flag}, or start a new run in another --out")
    return source


def recorded_init(run_dir: str | Path) -> Optional[str]:
    """The run folder RUN/init.json records as the run's start (``pretrain --init RUN0``, ``policy train --init
    RUN``), or None (no init.json, or a start from the preset's own weights); a damaged init.json is named
    (:func:`read_init_source`)."""
    source = read_init_source(run_dir)
    return None if source == "base" else source


def _suggestion(run_dir: Path, kind: str, use: str, cfg: Optional[Config]) -> str:
    """What would work instead, for a run of ``kind`` given where ``use`` needs another kind."""
    q = shlex.quote(str(run_dir))
    if kind == "video_base" and not use.startswith("resume_"):  # stage 0: what starts from it
        return (f"start stage 1 from it with `simforcing pretrain --init {q} --data DATA --out RUN1`, or a policy with "
                f"`simforcing policy train --setting action_only --init {q} --data POLICY_DATA --out POLICY_RUN`")
    if use == "sample":  # generate / evaluate / sweep: a world model
        return (f"score a policy in closed loop with `simforcing policy eval --runs {q} --out EVAL`")
    if use == "policy":  # policy eval: a policy
        return (f"evaluate the world model with `simforcing evaluate --ckpt {q} --data DATA --out EVAL`, or train a "
                f"policy from it with `simforcing policy train --setting action_only --init {q} --data POLICY_DATA "
                "--out POLICY_RUN` and evaluate that")
    if use in ("teacher", "distill_teacher") and kind == "fewstep":  # a student teaches nothing: its teacher can
        source = _recorded_source(run_dir, TEACHER_FILE, "run")
        return (f"use the world model it was distilled from: `--teacher {shlex.quote(source)}`" if source else
                "give the world model it was distilled from (its teacher.json)")
    if use == "distill_teacher":
        return "give the folder of a `simforcing train` run (a stage-2 world model)"
    if use == "teacher":  # stage 2: a stage-1 run
        source = _recorded_source(run_dir, TEACHER_FILE, "run") if kind == "stage2" else \
            _recorded_source(run_dir, INIT_FILE, "source")
        if source is not None and run_kind(source) == "stage1":
            return f"use the stage-1 run it started from: `--teacher {shlex.quote(source)}`"
        return "give the folder of a `simforcing pretrain` run: `--teacher RUN1`"
    if use == "init_stage1":  # pretrain --init: a video base or a stage-1 run
        return ("give the folder of a `simforcing pretrain --method video_prior` run or of a stage-1 run "
                "(`--init RUN0`), or leave --init out (model.weights, else the model's own initialisation)")
    return f"continue it with `{resume_command(run_dir, kind, cfg)}`"  # a resume of another kind


# what each use of a run needs, said in the refusal
USE_NEEDS = {"sample": "this command samples a world model", "policy": "`policy eval` scores policy runs",
             "teacher": "stage 2 starts from a stage-1 run",
             "distill_teacher": "`simforcing distill` distils a stage-2 world model",
             "resume_distill": "simforcing distill --resume cannot continue it",
             "init_stage1": "`simforcing pretrain --init` starts stage 1 from a video base or a stage-1 run",
             "init": "`simforcing policy train --init` starts from a video base, a world model or a policy",
             "resume_video_prior": f"simforcing pretrain --method {VIDEO_PRIOR_METHOD} --resume cannot continue it",
             "resume_pretrain": "simforcing pretrain --resume cannot continue it",
             "resume_train": "simforcing train --resume cannot continue it",
             "resume_policy": "simforcing policy train --resume cannot continue it"}


def require_kind(run_dir: str | Path, kinds: tuple[str, ...], flag: str, use: str) -> Optional[str]:
    """The kind of ``run_dir``; ConfigError naming it and a command that would work when it is not one of ``kinds``,
    or naming what it is when it is another simforcing folder (a dataset, a judge, results: :func:`what_folder`).
    None when the folder is not a recognisable run (the caller's own checks name what is missing)."""
    kind = run_kind(run_dir)
    if kind is None:
        other = what_folder(run_dir)
        if other is not None:
            raise ConfigError(f"{flag}: {run_dir} is {other}, not a training run; {USE_NEEDS[use]} (expected "
                              f"{' or '.join(KIND_NAMES[k] for k in kinds)})")
        return None
    if kind in kinds:
        return kind
    try:
        cfg = Config.load(Path(run_dir) / CONFIG_FILE)
    except (ConfigError, OSError, ValueError):
        cfg = None
    raise ConfigError(f"{flag}: {run_dir} is {describe_kind(kind, cfg)}; {USE_NEEDS[use]} (expected "
                      f"{' or '.join(KIND_NAMES[k] for k in kinds)}); {_suggestion(Path(run_dir), kind, use, cfg)}")


# ----------------------------------------------------------------------------------------------------------------------
# Opening a run
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class _MetaOnly:
    """A checkpoint known by its folder and meta.json only (enough to find the config it was trained with)."""

    path: Path
    meta: dict


def trained_config(run_dir: str | Path, ckpt: "Checkpoint | _MetaOnly") -> tuple[Config, list[str]]:
    """(the config ``ckpt`` was trained with, the fields in which RUN/config.json differs from it).

    The checkpoint's own config.json when it has one. Checkpoints from before that: RUN/config.json, which must then
    be the config the checkpoint was written with (its hash equals meta.json's ``config_hash``) — otherwise nobody
    knows what the weights were trained with, and CheckpointError names both."""
    cfg_path = Path(run_dir) / CONFIG_FILE
    if not cfg_path.exists():
        raise CheckpointError("config.json is missing; expected a run folder written by `simforcing pretrain/train`",
                              cfg_path)
    try:
        run_cfg = Config.load(cfg_path)
    except ConfigError as e:
        raise CheckpointError(f"cannot read the run's config ({e})", cfg_path) from e
    own = checkpoint_config(ckpt.path)
    if own is not None:
        return own, config_diff(own, run_cfg)
    recorded = ckpt.meta.get("config_hash")
    # config.json as written (a field added to Config since is not in it; loaded, it holds the field's default and
    # hashed otherwise: an old checkpoint was refused), or as loaded (a config.json a later version wrote again)
    if recorded and recorded not in (config_dict_hash(json.loads(cfg_path.read_text())), config_hash(run_cfg)):
        raise CheckpointError(f"config_hash {config_hash(run_cfg)} differs from {recorded} in {ckpt.path.name}"
                              f"/meta.json: config.json is not the config this checkpoint was written with (was it "
                              "rewritten by another run?) and the checkpoint holds no copy; restore config.json",
                              cfg_path)
    return run_cfg, []


def newest_readable(run_dir: str | Path) -> Optional[_MetaOnly]:
    """The newest checkpoint whose meta.json reads (no file verified), or None."""
    for _, path in reversed(list_checkpoints(run_dir)):
        try:
            return _MetaOnly(path, read_meta(path))
        except CheckpointError:
            continue  # damaged: find_resumable warns about it and falls back the same way
    return None


@dataclass
class Run:
    """An opened run: its folder, kind, one verified checkpoint and the config that checkpoint was trained with."""

    path: Path
    kind: Optional[str]
    checkpoint: Checkpoint
    cfg: Config

    @property
    def step(self) -> int:
        return self.checkpoint.step

    @property
    def stats(self) -> Optional[dict]:
        """The action/state normalisation statistics the weights were trained with."""
        return self.checkpoint.meta.get("stats")

    @property
    def meta(self) -> dict:
        """meta.json of the checkpoint plus ``path`` (its folder)."""
        return dict(self.checkpoint.meta, path=str(self.checkpoint.path))

    def model(self, device: str | torch.device = "cpu", attention_mode: Optional[str] = None) -> torch.nn.Module:
        """The network built from ``cfg`` (with ``attention_mode`` when given), the checkpoint's weights loaded
        strictly, on ``device``, in eval mode."""
        kw = {"attention_mode": attention_mode} if attention_mode is not None else {}
        model = build_world_model(self.cfg, device="cpu", **kw)
        load_model_state(self.checkpoint, model)
        return model.to(device).eval()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The checkpoint's weights (a sharded checkpoint is read through a model of the run's architecture)."""
        if self.checkpoint.model_state is not None:
            return self.checkpoint.model_state
        return self.model().state_dict()


def _checkpoint(run_dir: Path, step: Optional[int], checkpoint: Optional[Path], weights: bool) -> Checkpoint:
    if checkpoint is not None:
        return load_checkpoint(checkpoint, weights=weights, train_state=False)
    if step is None:
        ckpt = find_resumable(run_dir, weights=weights, train_state=False)
        if ckpt is None:
            raise CheckpointError("no valid checkpoint in checkpoints/", run_dir)
        return ckpt
    available = [s for s, _ in list_checkpoints(run_dir)]
    if step not in available:
        raise CheckpointError(f"no checkpoint for step {step}; available steps: {available}", run_dir)
    return load_checkpoint(step_dir(run_dir, step), weights=weights, train_state=False)


INPUTS = "inputs"  # checkpoint meta.json: the VAE and state probe a run was trained with (inputs_record)
# what a run reads besides its checkpoint: meta.json "inputs" key -> (the config field, what it is in words)
INPUT_FIELDS = {"vae": ("model.vae.path", "VAE"), "probe": ("eval.probe", "state probe")}


def _input_path(cfg: Config, name: str) -> Optional[str]:
    return cfg.model.vae.path if name == "vae" else cfg.eval.probe


def _set_input_path(cfg: Config, name: str, value: Optional[str]) -> None:
    if name == "vae":
        cfg.model.vae.path = value
    else:
        cfg.eval.probe = value


def inputs_record(cfg: Config) -> dict:
    """What a checkpoint records (meta.json ``inputs``) of the folders a run is trained with besides its data: for the
    VAE (``model.vae.path``) and the state probe (``eval.probe``), each that is there, its folder (absolute) and the
    digest of its weights (``utils.weights_digest``) — so that a run opened elsewhere is never given another VAE or
    probe found at the same relative path (:func:`located`)."""
    out = {}
    for name in INPUT_FIELDS:
        path = _input_path(cfg, name)
        digest = weights_digest(path) if path else None
        if digest is not None:
            out[name] = {"path": str(Path(path).resolve()), "digest": digest}
    return out


def recorded_inputs(meta: dict, where: Path) -> dict[str, dict]:
    """meta.json ``inputs`` of a checkpoint (folder ``where``): {} for a checkpoint written before the record (its
    run opens as before: the folder its config names); an entry that is not ``{"path": str, "digest": str}`` is a
    CheckpointError naming the field (an edited meta.json is never taken for a record)."""
    rec = meta.get(INPUTS)
    if rec is None:
        return {}
    if not isinstance(rec, dict):
        raise CheckpointError(f"field {INPUTS!r} must be an object; got {rec!r:.60}", where / "meta.json")
    for name, entry in rec.items():
        if name not in INPUT_FIELDS or not isinstance(entry, dict) or \
                not all(isinstance(entry.get(k), str) for k in ("path", "digest")):
            raise CheckpointError(f"field {INPUTS}.{name} must be {{\"path\": folder, \"digest\": weights digest}} "
                                  f"of the {', '.join(INPUT_FIELDS)}; got {entry!r:.80}", where / "meta.json")
    return rec


def located(cfg: Config, run_dir: str | Path, checkpoint: "Checkpoint | _MetaOnly | None" = None,
            leave: tuple[str, ...] = ()) -> Config:
    """``cfg`` (a run's, modified) with each folder it names that using the run reads (the VAE, the state probe:
    ``INPUT_FIELDS``; but those of ``leave``, which the caller gives itself) where it is. A run records the paths it
    was given, relative to where it was started (`make demo`'s runs name ``runs/demo/vae``), so a relative folder that
    does not exist from the working directory is taken from the nearest folder above ``run_dir`` where it does.

    A checkpoint that records the VAE and probe it was trained with (meta.json ``inputs``: :func:`inputs_record`) is
    given only those: of the folders found (from the working directory, then each folder above the run, nearest
    first, then the absolute folder recorded at training) the first whose weights have the recorded digest; found
    folders that all hold other weights (another demo's VAE beside a copied run, a VAE fitted again in place) are a
    ConfigError naming the run, the field, both folders and what to do. A checkpoint from before the record opens
    with the first folder found, as before. A path found nowhere is left as it is (its loader names it)."""
    run_dir = Path(run_dir)
    above = run_dir.resolve().parents
    recorded = recorded_inputs(checkpoint.meta, checkpoint.path) if checkpoint is not None else {}
    for name, (field, what) in INPUT_FIELDS.items():
        p = _input_path(cfg, name)
        if not p or name in leave:
            continue
        found = [p] if Path(p).exists() else []
        if not Path(p).is_absolute():
            found += [str(base / p) for base in above if (base / p).exists()]
        rec = recorded.get(name)
        if rec is None:
            _set_input_path(cfg, name, found[0] if found else p)
            continue
        digests = {f: weights_digest(f) for f in dict.fromkeys(found)}
        same = [f for f, d in digests.items() if d == rec["digest"]]
        if not same and Path(rec["path"]).resolve() not in {Path(f).resolve() for f in found} and \
                weights_digest(rec["path"]) == rec["digest"]:
            same = [rec["path"]]  # a moved or copied run whose own folder is still where it was trained
        if same:
            _set_input_path(cfg, name, same[0])
            continue
        other = next((f for f, d in digests.items() if d is not None), None)
        if other is None:  # nothing found, or folders without weights: the loader names them
            _set_input_path(cfg, name, found[0] if found else p)
            continue
        where = "" if other == p else f" (the nearest folder above the run holding {p})"
        use = "decode its latents with" if name == "vae" else "be scored by"
        raise ConfigError(
            f"{field}: {run_dir} was trained with the {what} {rec['path']} (weights digest {rec['digest']}, "
            f"{checkpoint.path.name}/meta.json '{INPUTS}'), but {p} is {Path(other).resolve()}{where}, another "
            f"{what} (digest {digests[other]}): the run would {use} the wrong {what}. Open the run from a directory "
            f"where {p} is its own {what}, or put its own {what} back at {rec['path']}")
    return cfg


def check_same_vae(cfg: Config, run_dir: str | Path, checkpoint: "Checkpoint | _MetaOnly", why: str) -> None:
    """ConfigError when the VAE ``cfg`` trains with (``model.vae.path``, where it is there) is not the one the run
    ``run_dir`` was trained with (``checkpoint``'s meta.json ``inputs``): a teacher or a run started from (the
    weights would read another autoencoder's latents), or the run resumed (it would go on in other latents); ``why``
    says so, and what to do. A checkpoint from before the record, or a VAE folder not there (a latent cache's run), is
    not checked."""
    rec = recorded_inputs(checkpoint.meta, checkpoint.path).get("vae")
    path = cfg.model.vae.path
    digest = weights_digest(path) if path else None
    if rec is None or digest is None or digest == rec["digest"]:
        return
    raise ConfigError(f"model.vae.path: {path} (weights digest {digest}) is not the VAE {run_dir} was trained with "
                      f"({rec['path']}, digest {rec['digest']}: {checkpoint.path.name}/meta.json '{INPUTS}'); {why}")


def open_run(run_dir: str | Path, kinds: tuple[str, ...] = KINDS, flag: str = "--ckpt", use: str = "sample",
             step: Optional[int] = None, checkpoint: Optional[str | Path] = None, weights: bool = True,
             leave: tuple[str, ...] = ()) -> Run:
    """Check the run's kind (:func:`require_kind`), then verify and read its newest valid checkpoint (or ``step``,
    or the folder ``checkpoint``) and the config it was trained with, its VAE and probe where they are
    (:func:`located`; ``leave``: those the caller gives itself). A RUN/config.json that differs from it is said in a
    warning; the checkpoint's own config is the one used."""
    run_dir = Path(run_dir)
    kind = require_kind(run_dir, kinds, flag, use)
    if not (run_dir / CONFIG_FILE).exists():
        raise CheckpointError("config.json is missing; expected a run folder written by `simforcing pretrain/train`",
                              run_dir / CONFIG_FILE)
    ckpt = _checkpoint(run_dir, step, Path(checkpoint) if checkpoint is not None else None, weights)
    cfg, differs = trained_config(run_dir, ckpt)
    if differs:
        warnings.warn(f"{run_dir / CONFIG_FILE} differs from the config {ckpt.path.name} was trained with in "
                      f"{', '.join(differs[:8])}; the model is built from the checkpoint's own config", stacklevel=2)
    return Run(run_dir, kind, ckpt, located(cfg, run_dir, ckpt, leave))


def run_config(run_dir: str | Path, kinds: tuple[str, ...] = KINDS, flag: str = "--ckpt", use: str = "sample",
               step: Optional[int] = None, leave: tuple[str, ...] = ()) -> Config:
    """The config :func:`open_run` would give (the newest checkpoint whose metadata reads, or ``step``), after the
    same kind check, without reading or verifying weights (for resolving a command's config before any work);
    ``leave``: the inputs (``INPUT_FIELDS``) the caller gives itself, not located (:func:`located`)."""
    run_dir = Path(run_dir)
    require_kind(run_dir, kinds, flag, use)
    if step is not None and (step_dir(run_dir, step) / "meta.json").exists():
        ref: Optional[_MetaOnly] = _MetaOnly(step_dir(run_dir, step), read_meta(step_dir(run_dir, step)))
    else:
        ref = newest_readable(run_dir) if step is None else None
    if ref is None:  # no checkpoint to speak for it (yet): the run's config.json
        path = run_dir / CONFIG_FILE
        if not path.exists():
            raise ConfigError(f"{flag}: {path} is missing; expected a training run folder written by `simforcing "
                              "pretrain/train/policy train`")
        return own_sampler(located(Config.load(path), run_dir, leave=leave))
    return own_sampler(located(trained_config(run_dir, ref)[0], run_dir, ref, leave))


def own_sampler(cfg: Config) -> Config:
    """``cfg`` with a few-step student's ``sample`` section set to the sampler it samples with — N_s its teacher's,
    N_r its K, w the weight it distilled — (a student's config once kept its teacher's N_r, so `--sample.n_real=10`
    on a K = 1 student read as no change and was dropped without a word); any other run's config as it is."""
    f = cfg.fewstep
    if f.steps > 0:
        cfg.sample.n_sim, cfg.sample.n_real, cfg.sample.w = f.teacher_n_sim, f.steps, f.w
    return cfg


def load_model_from_run(run_dir: str | Path, device: str | torch.device = "cpu",
                        step: Optional[int] = None) -> tuple[Config, torch.nn.Module, dict]:
    """(cfg, model in eval mode on ``device``, meta) of a world-model run (:func:`open_run`): ``meta`` is the
    checkpoint's meta.json plus ``path``; ``meta["stats"]`` holds the normalisation statistics."""
    run = open_run(run_dir, WORLD_MODELS, step=step)
    return run.cfg, run.model(device), run.meta


# ----------------------------------------------------------------------------------------------------------------------
# What a run reports about itself
# ----------------------------------------------------------------------------------------------------------------------


def read_status(run_dir: str | Path) -> dict:
    """RUN/status.json ({} when absent or unreadable)."""
    try:
        st = json.loads((Path(run_dir) / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return st if isinstance(st, dict) else {}

