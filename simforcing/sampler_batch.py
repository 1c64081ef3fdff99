"""The sampler's input: one typed batch of B windows to predict, whoever builds it.

    batch = SamplerBatch.from_collated(collate_one(ds[i]))     # an evaluation window (``runs.loaded.eval_dataset``)
    batch = SamplerBatch(first_frame, actions, state0, text, text_mask, arm_mask=mask)   # a robot's observation
    res = sampler(batch.to(device), generator)                # ``sample.Sampler``

The model sees the real first frame, the window's actions, the state and the text. Everything else is optional and
says where the simulation branch starts or what was recorded:

- ``arm_mask``: the first frame's arm mask, read by ``sample.mask_mode = mask-file`` (``masking.FirstFrameMasker``);
- ``sim_first_frame``: x^s_0 itself — the simulation rollout starts from it and no masking runs (a long rollout
  continues its simulation chain from its own last frame, ``simforcing.rollout``);
- ``recorded_sim``: the window's recorded simulation video — frame 0 for ``mask_mode = paired-sim``, all ``F`` frames
  for ``sample.condition = oracle`` (the encoded recording is the condition);
- ``rendered_sim``: the window's simulation video rendered by the robot's digital twin from the window's actions
  (``sample.condition = render``, ``simforcing.twin.TwinLoop``): all ``F`` frames are the condition;
- ``recorded_real``: the window's recorded real video, the ground truth: only the ``vae-recon`` ceiling reads it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class SamplerBatch:
    """B windows for a sampler (module docstring). Pixels in [-1, 1]; actions and states normalised with the run's
    statistics (``data.stats.Normalizer``)."""

    first_frame: torch.Tensor  # (B, 3, H, W) x^r_0, the given real observation
    actions: torch.Tensor  # (B, A_w, action_dim) A_w = data.actions_per_window
    state0: torch.Tensor  # (B, S) the state at the first frame
    text: torch.Tensor  # (B, N, D) instruction embeddings, zero-padded to N = data.text_max_tokens
    text_mask: Optional[torch.Tensor]  # (B, N) bool: the real tokens
    arm_mask: Optional[torch.Tensor] = None  # (B, H, W) bool: the first frame's arm (mask-file)
    sim_first_frame: Optional[torch.Tensor] = None  # (B, 3, H, W) x^s_0 given: no masking
    recorded_sim: Optional[torch.Tensor] = None  # (B, 3, F', H, W) recorded sim video (paired-sim: F' >= 1; oracle: F)
    recorded_real: Optional[torch.Tensor] = None  # (B, 3, F, H, W) recorded real video (the vae-recon ceiling)
    rendered_sim: Optional[torch.Tensor] = None  # (B, 3, F, H, W) the twin's rendering of the window (render)
    context_tau: Optional[torch.Tensor] = None  # (B,) the noise level the network is told z^r_0 carries (None: 0)
    episode_ids: Optional[list[str]] = None  # the windows' episodes, for error messages

    def to(self, device: str | torch.device) -> "SamplerBatch":
        """The batch with every tensor on ``device`` (a tensor already there is the same object)."""
        moved = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return SamplerBatch(**{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in moved.items()})

    @classmethod
    def from_collated(cls, item: dict) -> "SamplerBatch":
        """The batch of collated dataset items (``runs.loaded.collate_one(ds[i])``, a ``PairedWindowDataset`` batch):
        ``real`` (B, 3, F, H, W), ``sim`` (when loaded), ``actions``, ``state0``, ``text``, ``text_mask``,
        ``arm_mask`` (B, F, H, W) with ``has_arm_mask`` (B,) (used only when every window has one) and
        ``episode_id``."""
        has_mask = bool(torch.as_tensor(item["has_arm_mask"]).all())
        return cls(first_frame=item["real"][:, :, 0], actions=item["actions"], state0=item["state0"],
                   text=item["text"], text_mask=item["text_mask"],
                   arm_mask=item["arm_mask"][:, 0] if has_mask else None, recorded_sim=item.get("sim"),
                   recorded_real=item["real"], episode_ids=list(item["episode_id"]))
