"""Training runs as the sampler and the evaluator see them, and the fields a run's network was built for.

    wm = load_world_model(RUN, cfg=None, device="cpu", step=None, data_root=DATA)  # a LoadedWorldModel
    wm.cfg, wm.model, wm.vae, wm.normalizer, wm.checkpoint                      # what every sampling caller reads
    text, text_mask = wm.text(["push the blue ball to the left"])              # padded as training pads them
    ds = eval_dataset(wm.cfg, DATA, "val", wm.stats)                           # sample i is ds[i]: one fixed window
    gen = sample_generator(wm.cfg, i)                                          # the noise of sample i, on any device

``sample.sampler_for(wm)`` is its sampler. Fields a run must match (one comparison, two lists):
- ``EVAL_FIXED_FIELDS``: an evaluation/sampling config may change the data/sample/eval sections but not what the
  network was built for (frames, resolution, action/state dims, text tokens): :func:`merge_run_config`. Every field
  outside what a loaded run honours (``SAMPLING_SECTIONS``, ``SAMPLING_TRAIN_FIELDS``) is the run's own; a caller that
  changes one (``evaluate --ckpt RUN --conditioning.path=concat``) is refused by name: :func:`check_sampling_overrides`.
- :func:`architecture_fields`: a stage-2 config starts the student from the teacher's weights, so every model field
  that changes the weights' shapes or meaning, the VAE's latent layout and the action/state dims must equal the
  teacher's: :func:`check_teacher_architecture` (a stage-2 student may add the per-frame action conditioning to an
  "expert" teacher: :data:`STUDENT_ADDITIONS`).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import torch
from torch.utils.data import default_collate

from simforcing.config import Config, ConfigError
from simforcing.data.format import dataset_pairing, read_info
from simforcing.data.paired import PairedWindowDataset
from simforcing.data.stats import Normalizer
from simforcing.data.text_cache import pad_embedding
from simforcing.masking import FirstFrameMasker
from simforcing.models.text import load_text_encoder
from simforcing.models.vae import load_vae
from simforcing.runs.folder import WORLD_MODELS, open_run

# fields a sampling/evaluation config must share with the run it loads (the network was built for them)
# the cameras a run was trained on and how its frame holds them: what it samples and what its teacher predicted
VIEW_FIELDS = ("data.views", "data.view_layout")
EVAL_FIXED_FIELDS = ("data.frames", "data.frame_stride", "data.height", "data.width", "data.action_dim",
                     "data.state_dim", "data.text_max_tokens", *VIEW_FIELDS)
# what a loaded world model takes from its caller's config (how it samples and what it is scored on); every other
# field is what the run was trained as and stays the run's (merge_run_config)
SAMPLING_SECTIONS = ("data", "sample", "eval", "rollout")
SAMPLING_TRAIN_FIELDS = ("train.device", "train.mixed_precision")
STUDENT_SAMPLER_FIELDS = ("sample.n_sim", "sample.n_real", "sample.w")  # a few-step student samples at its own
# model fields that do not change the weights' shapes or meaning (every other one is architecture)
NON_ARCH_MODEL_FIELDS = ("gradient_checkpointing", "weights", "action_expert_weights", "text_encoder", "vae")
ARCH_VAE_FIELDS = ("kind", "latent_channels", "spatial_stride", "temporal_stride")
ARCH_DATA_FIELDS = ("action_dim", "state_dim")
# how the simulation condition enters the network and what its trained projections read: kept by a resume and by a
# few-step student (a stage-2 run may choose its own)
CONDITION_FIELDS = ("conditioning.path", "conditioning.representation")


def field_value(cfg: Config, name: str) -> Any:
    """The value of a dotted field name, e.g. ``"model.vae.kind"``."""
    value: Any = cfg
    for part in name.split("."):
        value = getattr(value, part)
    return value


def differing_fields(theirs: Config, ours: Config, names: tuple[str, ...]) -> list[tuple[str, Any, Any]]:
    """(name, theirs, ours) for each field in ``names`` whose values differ (lists and tuples compare as tuples)."""
    def norm(v: Any) -> Any:
        return tuple(v) if isinstance(v, (tuple, list)) else v

    out = []
    for name in names:
        a, b = field_value(theirs, name), field_value(ours, name)
        if norm(a) != norm(b):
            out.append((name, a, b))
    return out


def architecture_fields(cfg: Config) -> tuple[str, ...]:
    """Every model field but ``NON_ARCH_MODEL_FIELDS`` (in declaration order), the VAE's latent layout and the
    action/state dims."""
    model = tuple(f"model.{f.name}" for f in dataclasses.fields(cfg.model) if f.name not in NON_ARCH_MODEL_FIELDS)
    return model + tuple(f"model.vae.{n}" for n in ARCH_VAE_FIELDS) + tuple(f"data.{n}" for n in ARCH_DATA_FIELDS)


# architecture a stage-2 student may add to its teacher's, (field, teacher's value, student's value): the tensors it
# adds start at zero (models.world_model.new_condition_tensor), so the student starts as the teacher
STUDENT_ADDITIONS = (("model.action_conditioning", "expert", "both"),)


def check_teacher_architecture(cfg: Config, teacher_cfg: Config, where: str, additions: tuple = (),
                               also: tuple[str, ...] = ()) -> None:
    """ConfigError naming the first architecture field, view field (:data:`VIEW_FIELDS`: the student predicts the
    teacher's cameras) or field of ``also`` where ``cfg`` differs from the teacher's config, but for the ``additions``
    (:data:`STUDENT_ADDITIONS`) allowed."""
    for name, theirs, ours in differing_fields(teacher_cfg, cfg, architecture_fields(cfg) + VIEW_FIELDS + also):
        if (name, theirs, ours) in additions:
            continue
        hint = "".join(f" (a student may go from {a!r} to {b!r})" for n, a, b in additions if n == name)
        raise ConfigError(f"{name}: got {ours!r} but the teacher checkpoint {where} was trained with {theirs!r}; "
                          f"the student starts from the teacher's weights, so architecture fields must match{hint}")


def merge_run_config(run_cfg: Config, cfg: Optional[Config]) -> Config:
    """The run's config (model, VAE, flow) with the data/sample/eval/rollout sections of ``cfg`` and its
    ``SAMPLING_TRAIN_FIELDS`` (the device, the precision it samples in).

    Raises ConfigError naming the first field of ``EVAL_FIXED_FIELDS`` that the run's network cannot accept.
    """
    out = copy.deepcopy(run_cfg)
    if cfg is None:
        return out
    for name, theirs, ours in differing_fields(run_cfg, cfg, EVAL_FIXED_FIELDS)[:1]:
        raise ConfigError(f"{name}: the checkpoint was trained with {theirs!r}, the evaluation config asks {ours!r}")
    for section in SAMPLING_SECTIONS:
        setattr(out, section, copy.deepcopy(getattr(cfg, section)))
    for name in SAMPLING_TRAIN_FIELDS:
        setattr(out.train, name.split(".")[1], field_value(cfg, name))
    return out


def leaf_fields(obj: Any, prefix: str = "") -> tuple[str, ...]:
    """The dotted names of every field of a config (or section) that is not itself a section."""
    out: list[str] = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        name = f"{prefix}{f.name}"
        out += leaf_fields(value, name + ".") if dataclasses.is_dataclass(value) else [name]
    return tuple(out)


def check_sampling_overrides(run_cfg: Config, cfg: Config, run: str | Path) -> None:
    """ConfigError naming the first field where ``cfg`` — the config ``run`` was trained with plus a caller's
    ``--section.field=value`` changes — differs from ``run_cfg`` in a field a loaded run cannot honour: anything
    outside ``SAMPLING_SECTIONS`` and ``SAMPLING_TRAIN_FIELDS`` (the network, its condition path, the flow, the losses,
    the training: the weights were trained as ``run_cfg`` says, and a loaded run samples as them), and for a few-step
    student a sampler's steps or weight other than its own (``STUDENT_SAMPLER_FIELDS``,
    :func:`check_student_sampler`). A change to a value the run already has is no change."""
    fixed = [n for n in leaf_fields(run_cfg) if n.split(".")[0] not in SAMPLING_SECTIONS
             and n not in SAMPLING_TRAIN_FIELDS]
    if run_cfg.fewstep.steps:
        asked = {n: ours for n, _, ours in differing_fields(run_cfg, cfg, STUDENT_SAMPLER_FIELDS)}
        check_student_sampler(run_cfg, str(run), *(asked.get(n) for n in STUDENT_SAMPLER_FIELDS),
                              flags=tuple(f"--{n}" for n in STUDENT_SAMPLER_FIELDS))
    for name, theirs, ours in differing_fields(run_cfg, cfg, tuple(fixed))[:1]:
        raise ConfigError(f"--{name}={ours}: {run} was trained with {name} = {theirs!r}, and a loaded run samples as "
                          f"it was trained (the setting would not be used); here only the {', '.join(SAMPLING_SECTIONS)}"
                          f" sections and {' / '.join(SAMPLING_TRAIN_FIELDS)} can change — leave it out, or train a run "
                          f"with --{name}={ours} and give that one")


def check_student_sampler(cfg: Config, name: str, n_sim: Optional[float], n_real: Optional[float],
                          w: Optional[float], flags: tuple[str, str, str] = ("N_s", "N_r", "w")) -> None:
    """:func:`check_student_settings` of the student ``name`` whose config is ``cfg``, the settings named
    ``flags`` in the message (``--sample.n_sim`` … where they came from the command line)."""
    f = cfg.fewstep
    for flag, got, own in zip(flags, (n_sim, n_real, w), (f.teacher_n_sim, f.steps, f.w)):
        if got is not None and float(got) != float(own):
            raise ConfigError(f"{name} is a few-step student ({f.steps} steps at the teacher's w = {f.w:g}, N_s = "
                              f"{f.teacher_n_sim}); asked {flag} = {got:g}: a student samples only at its own "
                              "settings — sweep the sampler on its teacher (RUN/teacher.json), or distil another "
                              "student (`simforcing distill --steps K`)")


def sampling_overrides(overrides: Sequence[str], leave_out: Sequence[str] = ()) -> list[str]:
    """The ``--section.field=value`` words of ``overrides`` that a loaded run honours (``SAMPLING_SECTIONS``,
    ``SAMPLING_TRAIN_FIELDS``) but for the fields ``leave_out``: what a plan that trains with ``overrides`` passes on
    to the commands that sample the runs it trained (the rest is in those runs' own configs already)."""
    from simforcing.config import parse_overrides

    return [f"--{k}={v}" for k, v in parse_overrides(list(overrides)).items()
            if (k.split(".")[0] in SAMPLING_SECTIONS or k in SAMPLING_TRAIN_FIELDS) and k not in leave_out]


# ----------------------------------------------------------------------------------------------------------------------
# A world model loaded for sampling
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointId:
    """Which weights a loaded world model holds: the run folder, its kind (``runs.folder.KIND_NAMES``), the
    checkpoint's step and folder."""

    run: Path
    kind: Optional[str]
    step: int
    path: Path


@dataclass
class LoadedWorldModel:
    """A world model ready to sample (:func:`load_world_model`): what generate, evaluate, the sweeps, long rollouts,
    the policy evaluation inside a world model, the API and the benchmark all hold, and ``sample.sampler_for``
    samples.

    ``cfg``: the run's model/VAE/flow sections with the caller's data/sample/eval/rollout ones; ``model``: the
    network in eval mode; ``normalizer``: the action/state statistics it was trained with (None when the checkpoint
    records none: the dataset's own are used); ``checkpoint``: None for weights not loaded from a run (the
    benchmark's); ``masker``: the first-frame masker its samplers share (``sample.sampler_for`` keeps the first one
    a sampler builds, so SAM3 loads once).
    """

    cfg: Config
    model: torch.nn.Module
    vae: Any
    normalizer: Optional[Normalizer]
    checkpoint: Optional[CheckpointId] = None
    masker: Optional[FirstFrameMasker] = None
    text_encoder: Any = field(default=None, repr=False)  # models.text.TextEncoder, loaded by the first text()

    def __post_init__(self) -> None:
        if self.cfg.model.action_head:
            raise ConfigError(f"{self.name} is a policy (model.action_head true), not a world model: it cannot "
                              "predict a video; give a run of `simforcing pretrain` or `simforcing train` (a policy "
                              "loads with simforcing.api.load_policy)")

    @property
    def name(self) -> str:
        """The run folder it was loaded from (as given), or what it is when not from a run."""
        return str(self.checkpoint.run) if self.checkpoint is not None else "a world model not loaded from a run"

    @property
    def stats(self) -> Optional[dict]:
        """The normalisation statistics (``eval_dataset``'s ``stats``)."""
        return None if self.normalizer is None else self.normalizer.stats

    def text(self, instructions: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """The instructions through the run's text encoder (one batch), each padded as training pads it
        (``data.text_cache.pad_embedding``): (text (B, N, D) float32, text_mask (B, N) bool), N =
        data.text_max_tokens, on the CPU."""
        if self.text_encoder is None:
            self.text_encoder = load_text_encoder(self.cfg)
        d = self.cfg.data
        padded = [pad_embedding(e, d.text_max_tokens, self.cfg.model.text_dim)
                  for e in self.text_encoder.encode(list(instructions))]
        return (torch.from_numpy(np.stack([t for t, _ in padded])),
                torch.from_numpy(np.stack([m for _, m in padded])))


def load_world_model(run_dir: str | Path, cfg: Optional[Config] = None, device: str | torch.device = "cpu",
                     step: Optional[int] = None, data_root: Optional[str | Path] = None,
                     flag: str = "--ckpt") -> LoadedWorldModel:
    """The newest valid checkpoint (or ``step``) of a world-model run, ready to sample (``runs.folder.open_run``: a
    policy run or a video base is refused by name, ``flag`` naming the argument that gave it). ``cfg`` supplies the
    data/sample/eval/rollout settings (:func:`merge_run_config`; the run's own when None); ``data_root``: the
    dataset it will sample, whose own settings fill what the config leaves open (:func:`with_dataset_settings`)."""
    # a caller's config brings its own eval section (its probe: located with the run's config, or given)
    run = open_run(run_dir, WORLD_MODELS, flag, "sample", step=step, leave=("probe",) if cfg is not None else ())
    merged = merge_run_config(run.cfg, cfg)
    if data_root is not None:
        merged = with_dataset_settings(merged, data_root)
        check_same_pairing(run_dir, trained_pairing(run.cfg, run.checkpoint.meta), merged.data.pairing, data_root,
                           "its simulation condition would be of the other domain")
    return LoadedWorldModel(merged, run.model(str(device)), load_vae(merged, device),
                            None if run.stats is None else Normalizer(run.stats),
                            CheckpointId(Path(run_dir), run.kind, run.step, run.checkpoint.path))


PAIRINGS = {"arm": "an arm pairing (its simulation videos show the arm alone)",
            "scene": "a full-scene pairing (its simulation videos show the whole scene)"}


def data_pairing(cfg: Config, root: Optional[str | Path]) -> Optional[str]:
    """The pairing a config trains or samples with: ``data.pairing`` when set, else that of the dataset ``root``
    (meta/info.json; None when there is none to read — a latent cache, a dataset moved away)."""
    if cfg.data.pairing is not None:
        return cfg.data.pairing
    if root is None or not (Path(root) / "meta" / "info.json").is_file():
        return None
    try:
        return dataset_pairing(read_info(root))
    except ValueError:  # a damaged info.json: its readers name it
        return None


def trained_pairing(cfg: Config, meta: dict) -> Optional[str]:
    """The pairing a checkpoint was trained on: its config's ``data.pairing``, else its data's (meta.json ``data``
    root, where it can still be read); None when neither says."""
    rec = meta.get("data") if isinstance(meta.get("data"), dict) else {}
    return data_pairing(cfg, rec.get("root") if rec.get("source", "dataset") == "dataset" else None)


def check_same_pairing(run: str | Path, trained: Optional[str], now: Optional[str], data: str | Path,
                       why: str) -> None:
    """ConfigError when the data ``data`` (of pairing ``now``) is not of the pairing the run ``run`` was trained on
    (``trained``): its simulation condition is of the other domain (``why`` says what that breaks and what to do).
    Unknown on either side: not checked."""
    if trained is None or now is None or trained == now:
        return
    raise ConfigError(f"--data: {data} is {PAIRINGS.get(now, repr(now))}, but {run} was trained on "
                      f"{PAIRINGS.get(trained, repr(trained))}; {why} — give data of the {trained} pairing "
                      f"(`simforcing data synth --pairing {trained}`), or a run trained on the {now} pairing")


# ----------------------------------------------------------------------------------------------------------------------
# Evaluation windows and noise
# ----------------------------------------------------------------------------------------------------------------------


def with_dataset_settings(cfg: Config, data_root: str | Path) -> Config:
    """A copy of ``cfg`` with the dataset's own settings where ``cfg`` leaves them open (None): ``data.sim_background``
    from the dataset's info.json (what its sim frames show outside the arm; the first-frame masking fills the real
    frame with it) and ``data.pairing`` (what its simulation videos show: the arm alone or the whole scene; the
    first-frame masking refuses to make an arm-alone frame for a full-scene pairing). A value set in the config
    overrides the dataset's."""
    out = copy.deepcopy(cfg)
    info = read_info(data_root)
    if out.data.sim_background is None:
        out.data.sim_background = info.get("sim_background", "black")
    if out.data.pairing is None:
        out.data.pairing = dataset_pairing(info)
    return out


def eval_dataset(cfg: Config, data_root: str | Path, split: str, stats: Optional[dict] = None):
    """The deterministic evaluation windows of a split; sample i is ``ds[i]``.

    ``eval.windows_per_episode`` = 1: one fixed window per episode (the dataset's centre window), in the split's
    episode order. K > 1: K evenly spaced starts per episode (first to last window), ordered window-major — the
    first windows of every episode, then the second ones, ... — so the first N samples always span the episodes."""
    c = copy.deepcopy(cfg)
    c.data.fixed_window, c.data.windows_per_episode = True, 1
    ds = PairedWindowDataset(c, data_root, splits=(split,), domains=("sim", "real"), stats=stats)
    k = int(cfg.eval.windows_per_episode)
    if k > 1:
        starts = [np.linspace(0, e.info.length - ds.window_steps, k).round().astype(int).tolist()
                  for e in ds.episodes]
        ds.windows = [(i, s[j]) for j in range(k) for i, s in enumerate(starts)]
    return ds


def collate_one(item: dict) -> dict:
    """One dataset item -> a batch of 1 (tensors get a leading 1, strings become lists)."""
    return default_collate([item])


def sample_generator(cfg: Config, index: int) -> torch.Generator:
    """The CPU generator of evaluation sample ``index``, seeded from (cfg.sample.seed, index): every method, weight
    and step count — on any device — sees the same noise for the same sample."""
    return torch.Generator().manual_seed(int(cfg.sample.seed) * 1_000_003 + int(index))
