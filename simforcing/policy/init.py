"""Initialising a policy: ``--init base`` or ``--init RUN`` (a world-model run, or another policy run).

``base``: the model's own initialisation plus the configured pretrained weights (``model.weights`` = Wan2.2's video
expert and ``model.action_expert_weights`` = the Wan-derived action expert, the paper's baseline; the demo has
neither, see README "Policy transfer" for what stands in for them).

``RUN``: every tensor of the run's newest valid checkpoint (``runfolder.open_run``) whose name and shape match a policy
tensor is copied, for both experts. The policy's own tensors are listed as *new* — the action head (``action.norm_out|proj_out|
scale_shift_table``) and the parts of the last action block that a world model's K/V-only block lacks (its queries,
output projection, cross-attention, FFN; and the action text projection a one-layer world model lacks); that
block's adaLN table is *partial* (the world model's (shift, scale) rows
are the first two of the full block's six, the same modulation chunks). Any other tensor that is absent from the run
or has another shape means the run is another architecture: ConfigError listing every such tensor with both shapes.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from simforcing.config import Config, ConfigError
from simforcing.models.weights import load_configured_weights
from simforcing.runfolder import KINDS, open_run


@dataclass
class InitReport:
    source: str  # "base" or the run folder
    checkpoint: str | None = None
    inherited: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)  # in the run, not in the policy
    weights: list[str] = field(default_factory=list)  # base: the pretrained files loaded

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


def expected_new(name: str, num_layers: int) -> bool:
    """Tensors a world model cannot provide to a policy (module docstring)."""
    return bool(re.match(r"^action\.(norm_out|proj_out|scale_shift_table|condition_embedder\.text_embedder)\.?", name)
                or name.startswith(f"layers.{num_layers - 1}.action."))


def run_state(run_dir: str | Path) -> tuple[Config, dict[str, torch.Tensor], str]:
    """(the config its checkpoint was trained with, weights, checkpoint folder) of a run's newest valid checkpoint
    (``runfolder.open_run``; single-process or sharded)."""
    run = open_run(run_dir, KINDS, "--init", "init")
    return run.cfg, run.state_dict(), str(run.checkpoint.path)


@torch.no_grad()
def init_policy(model: torch.nn.Module, cfg: Config, init: str) -> InitReport:
    """Initialise ``model`` (a policy built from ``cfg``) from ``init`` = "base" or a run folder; see the module
    docstring. Raises ConfigError naming the mismatched tensors of a run of another architecture (a tensor of another
    shape, one the policy needs that the run lacks, or one the run has that the policy lacks)."""
    if init == "base":
        reports = load_configured_weights(model, cfg)
        return InitReport("base", weights=[r.summary() for r in reports])
    _, src, ckpt = run_state(init)
    rep = InitReport(str(init), ckpt)
    bad = []
    n_layers = cfg.model.num_layers
    own = model.state_dict()
    for name, t in own.items():
        s = src.get(name)
        if s is not None and tuple(s.shape) == tuple(t.shape):
            t.copy_(s.to(t.dtype))
            rep.inherited.append(name)
        elif (s is not None and name.endswith(".scale_shift_table") and expected_new(name, n_layers)
              and s.shape[1] == 2 and t.shape[1] == 6 and s.shape[2] == t.shape[2]):
            t[:, :2].copy_(s.to(t.dtype))  # a K/V-only block's (shift, scale) = the full block's first two chunks
            rep.partial.append(name)
        elif expected_new(name, n_layers) and s is None:
            rep.new.append(name)
        else:
            bad.append(f"{name}: policy {tuple(t.shape)}, run {tuple(s.shape) if s is not None else 'absent'}")
    rep.unused = sorted(set(src) - set(own))
    bad += [f"{name}: policy absent, run {tuple(src[name].shape)}" for name in rep.unused]
    if bad:
        raise ConfigError(f"--init {init}: the run is another architecture; {len(bad)} tensor(s) do not match the "
                          f"policy built from its config (+ overrides): " + "; ".join(bad[:12])
                          + (f"; … (+{len(bad) - 12})" if len(bad) > 12 else ""))
    return rep
