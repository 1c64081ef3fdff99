"""Initialising a policy: ``--init base`` or ``--init RUN`` (a world-model run, or another policy run).

``base``: the model's own initialisation plus the configured pretrained weights (``model.weights`` = Wan2.2's video
expert and ``model.action_expert_weights`` = the Wan-derived action expert, the paper's baseline; the demo has
neither, see docs/POLICY_TRANSFER.md for what stands in for them).

``RUN``: every tensor of the run's newest valid checkpoint (``runs.folder.open_run``) whose name and shape match a
policy tensor is copied, for both experts. The policy's own tensors are listed as *new* — the action head
(``action.norm_out|proj_out|scale_shift_table``) and the parts of the last action block that a world model's K/V-only
block lacks (its queries, output projection, cross-attention, FFN; and the action text projection a one-layer world
model lacks); that block's adaLN table is *partial* (the world model's (shift, scale) rows are the first two of the
full block's six, the same modulation chunks). Any other tensor that is absent from the run or has another shape means
the run is another architecture: ConfigError listing every such tensor with both shapes.

A world model's per-frame action conditioning (``frame_actions.*``, ``model.action_conditioning`` frame/both) is not a
policy's (its actions are its output): it is left *unused*; a world model without an action expert ("frame") gives a
policy its video expert only (``policy.init_from=video``, or a ConfigError says so).

A video-base run (``pretrain --method video_prior``, run kind ``video_base``: what stands in for Wan2.2 at demo scale)
hands on its video expert only: its action expert, state projection and condition projections were never trained
(``warmstart.untrained_by``), so they are listed as *new* and keep the policy's own initialisation — the paper's
baseline "Wan2.2 + an action-expert initialisation", with the model's own init as the action expert's.
``policy.init_from=video`` treats any run so: only its video expert is handed on (what a world model's video expert
gives a policy without its trained action expert).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from simforcing.config import Config, ConfigError
from simforcing.models.weights import load_configured_weights
from simforcing.runs.folder import INIT_POLICY
from simforcing.warmstart import InitReport, is_action_side, untrained_by
from simforcing.warmstart import run_state as _run_state

__all__ = ["InitReport", "expected_new", "init_policy", "run_state"]


def expected_new(name: str, num_layers: int) -> bool:
    """Tensors a world model cannot provide to a policy (module docstring)."""
    return bool(re.match(r"^action\.(norm_out|proj_out|scale_shift_table|condition_embedder\.text_embedder)\.?", name)
                or name.startswith(f"layers.{num_layers - 1}.action."))


def run_state(run_dir: str | Path) -> tuple[Config, dict[str, torch.Tensor], str]:
    """(the config its checkpoint was trained with, weights, checkpoint folder) of a run's newest valid checkpoint
    (``runs.folder.open_run``; single-process or sharded)."""
    return _run_state(run_dir, INIT_POLICY, "--init", "init")


@torch.no_grad()
def init_policy(model: torch.nn.Module, cfg: Config, init: str) -> InitReport:
    """Initialise ``model`` (a policy built from ``cfg``) from ``init`` = "base" or a run folder; see the module
    docstring. Raises ConfigError naming the mismatched tensors of a run of another architecture (a tensor of another
    shape, one the policy needs that the run lacks, or one the run has that the policy lacks)."""
    if init == "base":
        reports = load_configured_weights(model, cfg)
        return InitReport("base", weights=[r.summary() for r in reports])
    run_cfg, src, ckpt = run_state(init)
    never_trained = untrained_by(run_cfg)
    if not run_cfg.model.has_action_expert and cfg.policy.init_from != "video" and not never_trained("action."):
        raise ConfigError(f"--init {init}: the run has no action expert (model.action_conditioning="
                          f"{run_cfg.model.action_conditioning!r}, model.use_action_expert "
                          f"{run_cfg.model.use_action_expert}) and a policy needs one; --policy.init_from=video hands "
                          "on its video expert alone")
    if cfg.policy.init_from == "video":  # the video expert only: the action side stays the policy's own
        def untrained(name: str) -> bool:
            return is_action_side(name) or never_trained(name)
    else:
        untrained = never_trained
    rep = InitReport(str(init), ckpt, source_method=run_cfg.train.method)
    bad = []
    n_layers = cfg.model.num_layers
    own = model.state_dict()
    for name, t in own.items():
        s = src.get(name)
        same = s is not None and tuple(s.shape) == tuple(t.shape)
        kv_table = (s is not None and name.endswith(".scale_shift_table") and expected_new(name, n_layers)
                    and s.shape[1] == 2 and t.shape[1] == 6 and s.shape[2] == t.shape[2])
        absent_ok = s is None and (expected_new(name, n_layers) or is_action_side(name))
        if (same or kv_table or absent_ok) and untrained(name):
            rep.new.append(name)  # the run has it (or lacks a policy-only part) but never trained it
        elif same:
            t.copy_(s.to(t.dtype))
            rep.inherited.append(name)
        elif kv_table:
            t[:, :2].copy_(s.to(t.dtype))  # a K/V-only block's (shift, scale) = the full block's first two chunks
            rep.partial.append(name)
        elif expected_new(name, n_layers) and s is None:
            rep.new.append(name)
        else:
            bad.append(f"{name}: policy {tuple(t.shape)}, run {tuple(s.shape) if s is not None else 'absent'}")
    rep.unused = sorted(set(src) - set(own))
    bad += [f"{name}: policy absent, run {tuple(src[name].shape)}" for name in rep.unused
            if not name.startswith("frame_actions.")]  # a world model's input path, not a policy's
    if bad:
        raise ConfigError(f"--init {init}: the run is another architecture; {len(bad)} tensor(s) do not match the "
                          f"policy built from its config (+ overrides): " + "; ".join(bad[:12])
                          + (f"; … (+{len(bad) - 12})" if len(bad) > 12 else ""))
    return rep
