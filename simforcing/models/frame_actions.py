"""Per-frame action conditioning (``model.action_conditioning`` frame/both; beyond the paper).

The paper's actions reach the video through the action expert's tokens in the joint attention (SPEC §4b). Here each
future latent frame's OWN actions modulate that frame's adaLN instead (or as well), after IRASim (each frame's action
modulates that frame's adaLN in every block) and the 1X world-model challenge's winner (Wan2.2-TI2V-5B with adaLN-Zero
state conditioning):

- latent frame ℓ = 1..L covers the VAE's ``temporal_stride`` (4) pixel frames 4ℓ−3..4ℓ, reached by the actions
  ``[(ℓ−1)·span, ℓ·span)`` with ``span = 4·data.frame_stride`` (Bridge 4 of 20 per frame, InternData-A1 16 of 128,
  the demo 4 of 8): the window's actions (B, A = L·span, action_dim) become L chunks (B, L, span·action_dim);
- each chunk goes through ``Linear(span·action_dim → model.action_hidden) → SiLU → Linear(→ 7·dim)``
  (:class:`FrameActionEmbedder`, ``frame_actions.linear_1/linear_2`` at the root of the world model); the last layer
  is zero at initialisation (``WorldModel.initialize_weights``), so the model starts as the one it was loaded from;
- its first 6·dim outputs are added to that frame's adaLN projection ``tproj`` (B, S, 6, dim) — the six modulation
  chunks (shift, scale, gate of the self-attention, then of the FFN) that every video block reads through its own
  ``scale_shift_table``: the action acts in every block — and its last dim outputs to that frame's ``temb``, which
  the output head's modulation reads;
- the first latent frame (the given z_0) gets nothing: its tokens keep timestep 0's modulation exactly.

Where the action term is zero (a sample whose actions are dropped, ``action_keep`` False) the frame's modulation is
the plain timestep's, bit for bit.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class FrameActionEmbedder(nn.Module):
    """Each future latent frame's actions -> its adaLN and head-modulation terms (module docstring).

    span: actions per latent frame (``vae.temporal_stride · data.frame_stride``); hidden: the MLP's width
    (``model.action_hidden``); dim: the video expert's width."""

    def __init__(self, span: int, action_dim: int, hidden: int, dim: int):
        super().__init__()
        self.span, self.action_dim, self.dim = span, action_dim, dim
        self.linear_1 = nn.Linear(span * action_dim, hidden)
        self.act = nn.SiLU()
        self.linear_2 = nn.Linear(hidden, 7 * dim)

    def forward(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """actions (B, A, action_dim) with A = L·span -> (tproj term (B, L, 6, dim), temb term (B, L, dim)) in the
        layers' dtype."""
        if actions.dim() != 3 or actions.shape[2] != self.action_dim or actions.shape[1] % self.span \
                or actions.shape[1] == 0:
            raise ValueError(f"actions: expected (B, L·{self.span}, {self.action_dim}) for the per-frame action "
                             f"conditioning (model.action_conditioning frame/both: {self.span} actions = VAE temporal "
                             f"stride × data.frame_stride per future latent frame, data.action_dim "
                             f"{self.action_dim}); got {tuple(actions.shape)}")
        b, a = actions.shape[:2]
        chunks = actions.to(self.linear_1.weight.dtype).reshape(b, a // self.span, self.span * self.action_dim)
        out = self.linear_2(self.act(self.linear_1(chunks)))  # (B, L, 7·dim)
        return out[..., : 6 * self.dim].unflatten(2, (6, self.dim)), out[..., 6 * self.dim:]

    @torch.no_grad()
    def initialize(self) -> None:
        """linear_1: xavier-uniform weight, zero bias (the world model's Linear init); linear_2: zero (adaLN-Zero: the
        action term starts at exactly nothing, and linear_1's gradient with it until linear_2 has moved)."""
        nn.init.xavier_uniform_(self.linear_1.weight)
        nn.init.zeros_(self.linear_1.bias)
        nn.init.zeros_(self.linear_2.weight)
        nn.init.zeros_(self.linear_2.bias)


def add_per_frame(t: torch.Tensor, term: torch.Tensor, frames: int) -> torch.Tensor:
    """A per-frame term added to per-group modulation: t (B, S, ...) — S = 1, S = ``frames`` or S a multiple of it
    (frame-major token groups, ``video_dit`` module docstring) — and term (B, frames − 1, ...), the future frames'
    -> (B, max(S, frames), ...) in t's dtype; the first frame's groups are t's own values, untouched."""
    b, s = t.shape[:2]
    if s == 1:
        t, s = t.expand(b, frames, *t.shape[2:]), frames
    if s % frames or term.shape[1] != frames - 1:
        raise ValueError(f"per-frame actions: {term.shape[1]} action frames for {s} timestep groups of {frames} "
                         f"latent frames; expected {frames - 1} (one per future latent frame)")
    per = s // frames
    add = term.to(t.dtype)
    if per > 1:
        add = add.repeat_interleave(per, dim=1)
    return torch.cat([t[:, :per], t[:, per:] + add], dim=1)
