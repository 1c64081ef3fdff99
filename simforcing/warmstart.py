"""Starting a run from another run's weights, and saying what was taken.

    report = init_from_run(model, cfg, RUN0)    # `simforcing pretrain --init RUN0`: every tensor the run trained
    load_start_weights(model, cfg)              # no run to start from: Wan2.2 weights when configured
    check_init_run(cfg, RUN0)                   # read-only, before any work: a video base of this architecture
    cfg, weights, ckpt = run_state(RUN, kinds)  # the newest valid checkpoint's config and tensors (runs.folder.open_run)

The paper trains its world model from Wan2.2; at demo scale, where no video model exists, stage 1 starts from the
video base (``simforcing.prior``, ``pretrain --method video_prior``, run kind ``video_base``) the same way:
``pretrain --init RUN0`` (a video-base run, or a stage-1 run — its whole network, continued on other data or other
views, ``data.views``: the multi-view world model's stage 1 starts from the one-view one's —: ``runs.folder
.INIT_STAGE1``). A run hands on only what it trained. A video base never saw an action or a state, so its action expert (``action.*``, ``layers.N.action.*``), its
proprio-state projection (``state_embed.*``), its simulation-condition projections (``layers.N.cond_proj.*``,
zero; ``cond_embed.*`` too with ``conditioning.path`` concat/both) and its per-frame action conditioning
(``frame_actions.*``, ``model.action_conditioning`` frame/both) were never trained: they are *new* in the report and
keep the model's own initialisation (:func:`untrained_by`) — so a video base of any ``model.action_conditioning``
starts a stage 1 of any other (the action side the run has and the model lacks is left *unused*). Every other tensor
of the model must be in the run with the same shape; architecture fields (``runs.loaded.architecture_fields``) must
match: otherwise a ConfigError names the field or the tensors. The report (``RUN/init.json``) has the layout of
``policy train --init``'s (``policy.init``, which uses the same rule).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from simforcing.config import VIDEO_PRIOR_METHOD, Config, ConfigError
from simforcing.errors import CheckpointError
from simforcing.models.weights import load_configured_weights
from simforcing.models.world_model import new_condition_tensor
from simforcing.runs.checkpoint import list_checkpoints
from simforcing.runs.folder import CHECKPOINTS_DIR, INIT_STAGE1, check_same_vae, newest_readable, open_run, run_config
from simforcing.runs.loaded import architecture_fields, differing_fields


@dataclass
class InitReport:
    source: str  # "base" or the run folder
    checkpoint: str | None = None
    inherited: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)  # in the run, not in the model
    weights: list[str] = field(default_factory=list)  # base: the pretrained files loaded
    source_method: str | None = None  # the run's train.method (video_prior: its action side is new)

    def summary(self) -> str:
        if self.source == "base":
            return f"init base: {', '.join(self.weights) or 'the model initialisation (no pretrained weights set)'}"
        return (f"init {self.source} ({self.checkpoint}): inherited {len(self.inherited)} tensors, partial "
                f"{len(self.partial)} ({', '.join(self.partial) or '-'}), new {len(self.new)} "
                f"({_short(self.new)}), unused {len(self.unused)}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def _short(names: list[str], n: int = 6) -> str:
    return ", ".join(names[:n]) + (f", … (+{len(names) - n})" if len(names) > n else "") if names else "-"


def is_action_side(name: str) -> bool:
    """What a video prior never trains: the action expert, the state projection, the condition projections (P_j and
    the input's condition channels), the per-frame action conditioning."""
    return (name.startswith(("action.", "state_embed.", "cond_embed.", "frame_actions.")) or ".action." in name
            or ".cond_proj." in name)


def untrained_by(run_cfg: Config) -> Callable[[str], bool]:
    """name -> True for the tensors the run never trained (a video prior's action side; none for any other run)."""
    if run_cfg.train.method == VIDEO_PRIOR_METHOD and not run_cfg.model.action_head:
        return is_action_side
    return lambda name: False


def run_state(run_dir: str | Path, kinds: tuple[str, ...], flag: str = "--init",
              use: str = "init") -> tuple[Config, dict[str, torch.Tensor], str]:
    """(the config its checkpoint was trained with, weights, checkpoint folder) of a run's newest valid checkpoint
    (``runs.folder.open_run``: the kind checked first; single-process or sharded)."""
    run = open_run(run_dir, kinds, flag, use)
    return run.cfg, run.state_dict(), str(run.checkpoint.path)


def check_init_run(cfg: Config, run_dir: str | Path, flag: str = "--init") -> Config:
    """Read-only, before any work: ``run_dir`` is a video-base or stage-1 run (``runs.folder.INIT_STAGE1``) with
    checkpoints whose architecture fields equal ``cfg``'s (its views may differ: the network is the same); returns
    its config. ConfigError naming the kind, the field or the missing file; CheckpointError when it holds no
    checkpoint."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{flag}: {run_dir} is not a folder; expected the run folder of `simforcing pretrain "
                          "--method video_prior` or of a stage-1 run (RUN0)")
    run_cfg = run_config(run_dir, INIT_STAGE1, flag, "init_stage1")
    fields = architecture_fields(cfg)
    if untrained_by(run_cfg)("action."):  # its action side never trained: any action conditioning starts from it
        fields = tuple(f for f in fields if f != "model.action_conditioning")
    for name, theirs, ours in differing_fields(run_cfg, cfg, fields)[:1]:
        raise ConfigError(f"{name}: got {ours!r} but {flag} {run_dir} was trained with {theirs!r}; the run starts "
                          "from its weights, so architecture fields must match (pass the same --preset/overrides)")
    if not list_checkpoints(run_dir):
        raise CheckpointError(f"{flag}: no checkpoint in this run", run_dir / CHECKPOINTS_DIR)
    ref = newest_readable(run_dir)
    if ref is not None:
        check_same_vae(cfg, run_dir, ref, f"stage 1 starts from its weights, which read that VAE's latents — train "
                       f"with --model.vae.path set to that VAE (or a copy of it), or give {flag} a run trained with "
                       "this VAE")
    return run_cfg


@torch.no_grad()
def init_from_run(model: torch.nn.Module, cfg: Config, run_dir: str | Path, flag: str = "--init") -> InitReport:
    """Copy every tensor the video base or stage-1 run ``run_dir`` trained into ``model`` (built from ``cfg``); see
    the module docstring."""
    check_init_run(cfg, run_dir, flag)
    run_cfg, src, ckpt = run_state(run_dir, INIT_STAGE1, flag, "init_stage1")
    untrained = untrained_by(run_cfg)
    rep = InitReport(str(run_dir), ckpt, source_method=run_cfg.train.method)
    bad = []
    own = model.state_dict()
    for name, t in own.items():
        s = src.get(name)
        if s is None and (new_condition_tensor(name) or untrained(name)):  # fresh: zero (the condition channels,
            rep.new.append(name)  # like the P_j; the per-frame action term) or an action side the run never had
        elif s is None or tuple(s.shape) != tuple(t.shape):
            bad.append(f"{name}: model {tuple(t.shape)}, run {tuple(s.shape) if s is not None else 'absent'}")
        elif untrained(name):
            rep.new.append(name)
        else:
            t.copy_(s.to(t.dtype))
            rep.inherited.append(name)
    rep.unused = sorted(set(src) - set(own))
    bad += [f"{name}: model absent, run {tuple(src[name].shape)}" for name in rep.unused if not untrained(name)]
    if bad:
        raise ConfigError(f"{flag} {run_dir}: the run is another architecture; {len(bad)} tensor(s) do not match: "
                          + "; ".join(bad[:12]) + (f"; … (+{len(bad) - 12})" if len(bad) > 12 else ""))
    return rep


def load_start_weights(model: torch.nn.Module, cfg: Config) -> None:
    """A start from no run: Wan2.2 video-expert weights (model.weights) and action-expert weights
    (model.action_expert_weights) when configured; otherwise the model keeps its own init (demo)."""
    if cfg.model.weights or cfg.model.action_expert_weights:
        try:
            load_configured_weights(model, cfg)
        except (OSError, ValueError, KeyError, RuntimeError) as e:
            field = "model.weights" if cfg.model.weights and str(cfg.model.weights) in str(e) else \
                "model.weights / model.action_expert_weights"
            raise ConfigError(f"{field}: cannot load the start weights ({type(e).__name__}: {e}); expected a "
                              "diffusers transformer folder, an original Wan2.2 safetensors checkpoint, or the "
                              "safetensors file written by `simforcing model init-action-expert`") from e
