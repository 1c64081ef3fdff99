"""The action expert: a narrow transformer over the action sequence, one block per video block (SPEC §4b).

- ``action_in``: ``Linear(action_dim → action_hidden)``, one token per action step, 1-D RoPE over the steps (the
  whole head dimension rotates with the step index 0..A-1).
- Each block is a :class:`~simforcing.models.video_dit.DiTBlock` at width ``action_hidden`` and FFN
  ``action_ffn_dim``; its self-attention Q/K/V project ``action_hidden → heads × head_dim`` of the VIDEO expert
  (24×128 at 5B) so both streams share one joint attention, and the output projection maps back to
  ``action_hidden``; its own text cross-attention runs at ``action_hidden`` with ``action_hidden / head_dim`` heads.
- The LAST block is a :class:`KVBlock`: there is no action output head, so after the last joint attention the action
  stream feeds nothing; that block keeps only what the video tokens read (adaLN shift/scale, keys, values, K-norm).
  Its queries, output projection, cross-attention and FFN would be parameters that never receive a gradient.
- With ``model.action_head`` (the downstream policy, SPEC §9) the action expert predicts actions: its last block is a
  full :class:`DiTBlock`, the stem's head (``action.norm_out``, ``action.proj_out`` = ``Linear(action_hidden →
  action_dim)``, ``action.scale_shift_table``: the video head's names and adaLN form) maps the action tokens to a
  velocity, and the action tokens are noised: their adaLN timestep is the action flow time (Wan units, one per
  sample) instead of 0.
- ``condition_embedder``: its own time embedding + adaLN projection, evaluated at timestep 0 (actions are clean), and
  its own text projection ``text_dim → action_hidden`` (the key/value source of its cross-attentions; absent when
  the expert has a single, K/V-only, block).

Parameter names mirror the video expert's (``action.condition_embedder.*``, ``layers.{i}.action.attn1.to_q`` ...), so
``simforcing model init-action-expert`` can shrink Wan weights tensor by tensor (see ``weights.py``).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
from diffusers.models.normalization import FP32LayerNorm

from simforcing.config import ConfigError
from simforcing.models.video_dit import ConditionEmbedder, DiTBlock, Rope, _rms_fp32, apply_rope, modulate


def action_cross_heads(action_hidden: int, head_dim: int) -> int:
    """Heads of the action expert's cross-attention: action_hidden / head_dim (1024 / 128 = 8 at 5B)."""
    if action_hidden % head_dim:
        raise ConfigError(f"model.action_hidden: got {action_hidden}; expected a multiple of "
                          f"model.attention_head_dim={head_dim} (the action cross-attention uses heads of that size)")
    return action_hidden // head_dim


class KVProjection(nn.Module):
    """Keys and values only (diffusers names to_k, to_v, norm_k): ``dim -> heads × head_dim``."""

    def __init__(self, dim: int, heads: int, head_dim: int, eps: float):
        super().__init__()
        self.heads = heads
        self.to_k = nn.Linear(dim, heads * head_dim)
        self.to_v = nn.Linear(dim, heads * head_dim)
        self.norm_k = nn.RMSNorm(heads * head_dim, eps=eps, elementwise_affine=True)

    def qkv(self, x: torch.Tensor, rope: Optional[Rope] = None):
        """x (B, N, dim) -> (None, k (B, N, H, D), v (B, N, H, D))."""
        v = self.to_v(x).unflatten(2, (self.heads, -1))
        k = _rms_fp32(self.norm_k, self.to_k(x)).type_as(v).unflatten(2, (self.heads, -1))
        return None, (k if rope is None else apply_rope(k, rope)), v


class KVBlock(nn.Module):
    """The last action block: adaLN (shift, scale) + keys/values for the joint attention, nothing after it."""

    def __init__(self, dim: int, heads: int, head_dim: int, eps: float):
        super().__init__()
        self.norm1 = FP32LayerNorm(dim, eps, elementwise_affine=False)
        self.attn1 = KVProjection(dim, heads, head_dim, eps)
        self.scale_shift_table = nn.Parameter(torch.randn(1, 2, dim) / dim**0.5)
        self.dim = dim

    def modulation(self, tproj: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """tproj (B, S, 6, dim) -> (shift, scale), each (B, S, 1, dim) float32 (the first two adaLN chunks)."""
        return (self.scale_shift_table.unsqueeze(0) + tproj[:, :, :2].float()).chunk(2, dim=2)

    def qkv(self, h: torch.Tensor, mod: tuple, rope: Rope):
        """h (B, A, dim) -> (None, k, v) with k, v (B, A, H, D)."""
        x = modulate(self.norm1(h.float()), mod[0], mod[1]).type_as(h)
        return self.attn1.qkv(x, rope)


def action_block(m, last: bool) -> nn.Module:
    """Action-expert block for ``m = cfg.model``: a full :class:`DiTBlock`, or a :class:`KVBlock` when ``last`` (and
    the model has no action output, ``m.action_head`` False)."""
    if last and not m.action_head:
        return KVBlock(m.action_hidden, m.num_attention_heads, m.attention_head_dim, m.eps)
    return DiTBlock(m.action_hidden, m.action_ffn_dim, m.num_attention_heads, m.attention_head_dim,
                    action_cross_heads(m.action_hidden, m.attention_head_dim), m.eps, m.cross_attn_norm)


class ActionConditionEmbedder(ConditionEmbedder):
    """The video expert's condition embedder at the action width (diffusers ``WanTimeTextImageEmbedding`` names),
    with the calls the action expert makes."""

    def __init__(self, dim: int, freq_dim: int, text_dim: int, with_text: bool):
        super().__init__(dim, freq_dim, dim * 6, text_dim, with_text)

    def forward(self, timestep: torch.Tensor, context: torch.Tensor):
        """timestep (B,), context (B, M, text_dim) -> tproj (B, 6·dim), context (B, M, dim) or None."""
        temb = self.embed_time(timestep)
        ctx = self.text_embedder(context) if self.text_embedder is not None else None
        return self.time_proj(self.act_fn(temb)), ctx

    def time_projection(self, timestep: torch.Tensor) -> torch.Tensor:
        """timestep (B,) in Wan units -> the adaLN projection (B, 6·dim) (the first value of :meth:`forward`)."""
        return self.time_proj(self.act_fn(self.embed_time(timestep)))

    def embed_time(self, timestep: torch.Tensor) -> torch.Tensor:
        """timestep (B,) in Wan units -> temb (B, dim) (the action head's modulation source)."""
        t = self.timesteps_proj(timestep).to(self.time_embedder.linear_1.weight.dtype)  # (B, freq_dim)
        return self.time_embedder(t)


class ActionStem(nn.Module):
    """Input projection + time / text embedding of the action expert; with ``head`` (the policy) also the output head
    (``norm_out``, ``proj_out``, ``scale_shift_table``; ``proj_out`` zero at init, see
    ``WorldModel.initialize_weights``, so an untrained policy predicts the velocity 0)."""

    def __init__(self, action_dim: int, hidden: int, freq_dim: int, text_dim: int, with_text: bool,
                 head: bool = False, eps: float = 1e-6):
        super().__init__()
        self.action_in = nn.Linear(action_dim, hidden)
        self.condition_embedder = ActionConditionEmbedder(hidden, freq_dim, text_dim, with_text)
        self.has_head = head
        if head:
            self.norm_out = FP32LayerNorm(hidden, eps, elementwise_affine=False)
            self.proj_out = nn.Linear(hidden, action_dim)
            self.scale_shift_table = nn.Parameter(torch.randn(1, 2, hidden) / hidden**0.5)

    def head(self, h: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
        """The action output: h (B, A, hidden) after the last block, timestep (B,) in Wan units -> (B, A, action_dim)
        float32."""
        temb = self.condition_embedder.embed_time(timestep.reshape(-1))  # (B, hidden)
        shift, scale = (self.scale_shift_table.unsqueeze(0) + temb[:, None, None].float()).chunk(2, dim=2)
        x = modulate(self.norm_out(h.float()), shift, scale).type_as(h)  # shift, scale (B, 1, 1, hidden)
        return self.proj_out(x).float()

    def embed(self, actions: torch.Tensor, context: torch.Tensor, timestep: Optional[torch.Tensor] = None):
        """actions (B, A, action_dim), context (B, M, text_dim), timestep (B,) in Wan units or None (clean actions:
        0) -> tokens (B, A, hidden), tproj (B, 1, 6, hidden), context (B, M, hidden) or None."""
        if timestep is None:
            timestep = torch.zeros(actions.shape[0], device=actions.device)  # clean actions: timestep 0
        tproj, ctx = self.condition_embedder(timestep.to(actions.device).reshape(-1), context)
        tokens = self.action_in(actions.to(self.action_in.weight.dtype))
        return tokens, tproj.unflatten(1, (6, -1)).unsqueeze(1), ctx  # (B, A, h), (B, 1, 6, h), (B, M, h)

