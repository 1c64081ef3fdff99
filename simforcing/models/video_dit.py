"""The Wan2.2-TI2V DiT (the video expert), written as parts the mixture of transformers can interleave.

Parameter names follow diffusers' ``WanTransformer3DModel`` exactly (``patch_embedding``, ``condition_embedder.*``,
``blocks.{i}.attn1.to_q`` ..., ``norm_out``, ``proj_out``, ``scale_shift_table``), so a diffusers ``transformer/``
folder loads by a plain prefix rename (see ``simforcing/models/weights.py``): the stem and head live in
:class:`VideoStem` (``video.*`` in the world model), block ``i`` in ``layers.{i}.video.*``.

A block's forward is split so the world model can run ONE joint attention across experts per layer:
:meth:`DiTBlock.qkv` (adaLN + Q/K/V + QK-norm + RoPE) → joint attention → :meth:`DiTBlock.finish` (output
projection + gated residual, text cross-attention, the simulation-condition residual ``h += gate·P_j(c)``, FFN).
:class:`DiTBlock` also serves the action expert (other widths; see ``action_expert.py``).

Timesteps come per token group: ``temb`` (B, S, dim) / ``tproj`` (B, S, 6, dim) with S = 1 (one timestep per sample),
S = number of latent frames (Wan2.2 TI2V: tokens are frame-major, all tokens of a frame share the timestep) or S = N
(one per token, diffusers' 2-D timestep path). Token n belongs to group ``n // (N / S)``.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from diffusers.models.attention import FeedForward
from diffusers.models.embeddings import (PixArtAlphaTextProjection, TimestepEmbedding, Timesteps,
                                         get_1d_rotary_pos_embed)
from diffusers.models.normalization import FP32LayerNorm


class Rope:
    """RoPE tables (cos, sin), each (1, N, 1, D/2) float32, and the same per interleaved pair as :func:`apply_rope`
    multiplies by: ``cos2`` (1, N, 1, D) each cosine twice, ``sin2`` (1, N, 1, D) the sines signed (−sin, +sin).

    A plain class, not a tuple or dataclass, so FSDP2's forward-input casting (param_dtype bf16) leaves the float32
    tables alone when they are passed to each layer."""

    __slots__ = ("cos", "sin", "cos2", "sin2")

    def __init__(self, cos: torch.Tensor, sin: torch.Tensor):
        self.cos, self.sin = cos, sin
        self.cos2 = cos.repeat_interleave(2, dim=-1)
        self.sin2 = torch.stack((-sin, sin), dim=-1).flatten(-2)

    def __iter__(self):
        return iter((self.cos, self.sin))


# ----------------------------------------------------------------------------------------------------------------------
# Rotary position embedding
# ----------------------------------------------------------------------------------------------------------------------


def _freqs(dim: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Wan's 1-D rotary table for positions 0..n-1: (cos, sin) each (n, dim/2) float32 (computed in float64)."""
    cos, sin = get_1d_rotary_pos_embed(dim, n, 10000.0, use_real=True, repeat_interleave_real=True,
                                       freqs_dtype=torch.float64)
    return cos[:, 0::2], sin[:, 1::2]  # the interleaved pairs hold equal values


def video_rope(frames: int, height: int, width: int, head_dim: int, max_seq_len: int, device) -> Rope:
    """Wan's 3-D RoPE for a (frames, height, width) token grid (post-patch): (cos, sin) each (1, N, 1, head_dim/2).

    The head dimension splits as in diffusers' ``WanRotaryPosEmbed``: h = w = 2·(head_dim // 6), t = the rest.
    """
    if max(frames, height, width) > max_seq_len:
        raise ValueError(f"video RoPE: token grid {frames}x{height}x{width} exceeds model.rope_max_seq_len="
                         f"{max_seq_len}")
    h_dim = w_dim = 2 * (head_dim // 6)
    t_dim = head_dim - h_dim - w_dim
    parts = []
    for dim, n, view in ((t_dim, frames, (frames, 1, 1)), (h_dim, height, (1, height, 1)),
                         (w_dim, width, (1, 1, width))):
        cos, sin = _freqs(dim, n)
        parts.append([t.view(*view, -1).expand(frames, height, width, -1) for t in (cos, sin)])
    cos = torch.cat([p[0] for p in parts], dim=-1).reshape(1, frames * height * width, 1, head_dim // 2)
    sin = torch.cat([p[1] for p in parts], dim=-1).reshape(1, frames * height * width, 1, head_dim // 2)
    return Rope(cos.to(device), sin.to(device))


def sequence_rope(n: int, head_dim: int, device) -> Rope:
    """1-D RoPE over positions 0..n-1 using the whole head dimension: (cos, sin) each (1, n, 1, head_dim/2)."""
    cos, sin = _freqs(head_dim, n)
    return Rope(cos[None, :, None].to(device), sin[None, :, None].to(device))


def apply_rope(x: torch.Tensor, rope: Rope) -> torch.Tensor:
    """Rotate interleaved pairs (x1, x2) of x (B, N, H, D) by the angle whose (cos, sin) rope holds (1, N, 1, D/2):
    (x1·cos − x2·sin, x1·sin + x2·cos), computed in float32.

    Written as ``x·cos2 + swap(x)·sin2`` (swap: each pair's two values exchanged; ``Rope`` holds the interleaved
    tables): three contiguous passes instead of strided halves and a stack. Every output is the same IEEE sum of the
    same two products (x2·(−sin) is −(x2·sin) exactly), so values and gradients equal the halves' form bit for bit
    (``tests/test_video_dit.py``)."""
    xf = x.float()
    swapped = xf.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)  # (x2, x1) per pair
    return (xf * rope.cos2 + swapped * rope.sin2).type_as(x)


# ----------------------------------------------------------------------------------------------------------------------
# Modulation helpers (token groups, see the module docstring)
# ----------------------------------------------------------------------------------------------------------------------


def _grouped(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, N, d) -> (B, S, N/S, d)."""
    if x.shape[1] % groups:
        raise ValueError(f"timestep groups: {x.shape[1]} tokens do not split into {groups} equal groups")
    return x.unflatten(1, (groups, x.shape[1] // groups))


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x (B, N, d) · (1 + scale) + shift with shift/scale (B, S, 1, d); float32 result (B, N, d)."""
    return (_grouped(x, shift.shape[1]) * (1 + scale) + shift).flatten(1, 2)


def gated_add(h: torch.Tensor, y: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """h + y·gate in float32 with gate (B, S, 1, d); returns h's dtype, (B, N, d) — a fresh tensor, not a view (FSDP2
    warns about a layer that returns a view)."""
    return (h.float() + (_grouped(y.float(), gate.shape[1]) * gate).flatten(1, 2)).type_as(h)


def add_gated_condition(h: torch.Tensor, feat: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """h + gate·feat for h, feat (B, N, d) and gate (B,) float, in h's dtype: how every path of the simulation
    condition (``h_j += g·P_j(c)`` in a block, the input's ``g·E(c)``) enters a stream. A gate-0 sample adds exact
    zeros — ``torch.where``, not a bare product — even where the feature is inf/NaN."""
    g = gate.to(torch.float32).view(-1, 1, 1)  # (B, 1, 1)
    return h + torch.where(g != 0, g * feat.float(), 0.0).to(h.dtype)


# ----------------------------------------------------------------------------------------------------------------------
# Attention parameters (diffusers WanAttention names), computation split for the joint attention
# ----------------------------------------------------------------------------------------------------------------------


def _rms_forward(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, ...]:
    """``F.rms_norm``'s operations on the CPU, in its order (so its values bit for bit): x·rsqrt(mean(x²) + eps)·w.
    Returns (the output, x·rsqrt(...), rsqrt(...))."""
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True).add_(eps))
    xhat = x * r
    return xhat * weight, xhat, r


class _RMSNorm(torch.autograd.Function):
    """RMS norm over the last dimension with a hand-written backward. Autograd through ``F.rms_norm``'s composite
    records six operations and replays about fifteen in backward; the closed form is seven passes:
    dw = Σ g·x̂ and dx = r·(g·w − x̂·mean(g·w·x̂)) with x̂ = x·r, r = rsqrt(mean(x²) + eps). The forward is
    :func:`_rms_forward`; gradients agree with autograd's to float32 rounding (``tests/test_video_dit.py``)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        y, xhat, r = _rms_forward(x, weight, eps)
        ctx.save_for_backward(xhat, r, weight)
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        xhat, r, weight = ctx.saved_tensors
        gw = g * weight
        dw = (g * xhat).flatten(0, -2).sum(0) if ctx.needs_input_grad[1] else None
        dx = None
        if ctx.needs_input_grad[0]:
            dx = gw.sub_(xhat * (gw * xhat).mean(-1, keepdim=True)).mul_(r)
        return dx, dw, None


def _rms_fp32(norm: nn.RMSNorm, x: torch.Tensor) -> torch.Tensor:
    """RMS QK-norm across heads computed in float32 whatever the input/weight dtypes: (B, N, inner) float32.
    The values of ``F.rms_norm``; on the CPU under autograd through :class:`_RMSNorm`'s closed-form backward (other
    devices keep ``F.rms_norm``, which has a fused kernel there)."""
    x, weight = x.float(), norm.weight.float()
    if x.device.type != "cpu" or len(norm.normalized_shape) != 1 or x.shape[-1] != weight.shape[0]:
        return F.rms_norm(x, norm.normalized_shape, weight, norm.eps)
    eps = norm.eps if norm.eps is not None else torch.finfo(torch.float32).eps
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _RMSNorm.apply(x, weight, eps)
    return _rms_forward(x, weight, eps)[0]


class Attention(nn.Module):
    """Q/K/V/out projections + RMS QK-norm across heads. ``dim`` -> ``heads × head_dim`` -> ``dim``.

    Same parameter names as diffusers' ``WanAttention``: to_q, to_k, to_v, to_out.0, norm_q, norm_k.
    """

    def __init__(self, dim: int, heads: int, head_dim: int, eps: float):
        super().__init__()
        inner = heads * head_dim
        self.heads, self.head_dim = heads, head_dim
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(dim, inner)
        self.to_v = nn.Linear(dim, inner)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim)])
        self.norm_q = nn.RMSNorm(inner, eps=eps, elementwise_affine=True)
        self.norm_k = nn.RMSNorm(inner, eps=eps, elementwise_affine=True)

    def qkv(self, x: torch.Tensor, context: Optional[torch.Tensor] = None, rope: Optional[Rope] = None):
        """x (B, N, dim), context (B, M, dim) or None (self-attention) -> q (B, N, H, D), k, v (B, M, H, D)."""
        ctx = x if context is None else context
        v = self.to_v(ctx).unflatten(2, (self.heads, -1))
        q = _rms_fp32(self.norm_q, self.to_q(x)).type_as(v).unflatten(2, (self.heads, -1))
        k = _rms_fp32(self.norm_k, self.to_k(ctx)).type_as(v).unflatten(2, (self.heads, -1))
        if rope is not None:
            q, k = apply_rope(q, rope), apply_rope(k, rope)
        return q, k, v

    def out(self, o: torch.Tensor) -> torch.Tensor:
        """o (B, N, H, D) -> (B, N, dim)."""
        return self.to_out[0](o.flatten(2))

    def cross_kv(self, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of a cross-attention: context (B, M, dim) -> k, v (B, M, H, D). They depend on the text
        context alone, so a sampler computes them once per rollout (``WorldModel.step_context``)."""
        v = self.to_v(context).unflatten(2, (self.heads, -1))
        k = _rms_fp32(self.norm_k, self.to_k(context)).type_as(v).unflatten(2, (self.heads, -1))
        return k, v

    def cross(self, x: torch.Tensor, context: Optional[torch.Tensor], context_mask: Optional[torch.Tensor],
              kv: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
        """Cross-attention x (B, N, dim) -> context (B, M, dim); context_mask (B, 1, 1, M) bool or None.
        ``kv``: this context's precomputed :meth:`cross_kv` (then ``context`` is not read)."""
        k, v = self.cross_kv(context) if kv is None else kv
        q = _rms_fp32(self.norm_q, self.to_q(x)).type_as(v).unflatten(2, (self.heads, -1))
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           attn_mask=context_mask)  # (B, H, N, D)
        return self.out(o.transpose(1, 2).type_as(q))


# ----------------------------------------------------------------------------------------------------------------------
# One transformer block (video expert; also the action expert at its own widths)
# ----------------------------------------------------------------------------------------------------------------------


class DiTBlock(nn.Module):
    """A Wan block: adaLN self-attention, cross-attention (with its norm), FFN; diffusers ``WanTransformerBlock`` names.

    dim: the stream width; ``heads × head_dim``: self-attention width (joint with the other expert);
    ``cross_heads × head_dim`` must equal ``dim`` (cross-attention runs at the stream width).
    """

    def __init__(self, dim: int, ffn_dim: int, heads: int, head_dim: int, cross_heads: int, eps: float,
                 cross_attn_norm: bool):
        super().__init__()
        self.dim = dim
        self.norm1 = FP32LayerNorm(dim, eps, elementwise_affine=False)
        self.attn1 = Attention(dim, heads, head_dim, eps)
        self.attn2 = Attention(dim, cross_heads, dim // cross_heads, eps)
        self.norm2 = FP32LayerNorm(dim, eps, elementwise_affine=True) if cross_attn_norm else nn.Identity()
        self.ffn = FeedForward(dim, inner_dim=ffn_dim, activation_fn="gelu-approximate")
        self.norm3 = FP32LayerNorm(dim, eps, elementwise_affine=False)
        self.scale_shift_table = nn.Parameter(torch.randn(1, 6, dim) / dim**0.5)

    def modulation(self, tproj: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """tproj (B, S, 6, dim) -> six (B, S, 1, dim) float32: shift/scale/gate for attention, then for the FFN."""
        return (self.scale_shift_table.unsqueeze(0) + tproj.float()).chunk(6, dim=2)

    def qkv(self, h: torch.Tensor, mod: tuple, rope: Rope):
        """h (B, N, dim) -> q, k, v (B, N, H, D) for the joint self-attention."""
        shift, scale = mod[0], mod[1]
        x = modulate(self.norm1(h.float()), shift, scale).type_as(h)
        return self.attn1.qkv(x, rope=rope)

    def finish(self, h: torch.Tensor, attn: torch.Tensor, mod: tuple, context: torch.Tensor,
               context_mask: Optional[torch.Tensor], cond_feat: Optional[torch.Tensor] = None,
               gate: Optional[torch.Tensor] = None,
               cross_kv: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
        """Rest of the block. h (B, N, dim); attn (B, N, H, D) joint-attention output for this stream;
        context (B, M, dim); cond_feat (B, N, dim) = P_j(c) and gate (B,) float: ``h += gate·P_j(c)`` after the
        cross-attention, before the FFN (skipped entirely when either is None); cross_kv: the cross-attention's
        keys/values of ``context`` if already computed. Returns (B, N, dim)."""
        h = gated_add(h, self.attn1.out(attn), mod[2])
        x = self.norm2(h.float()).type_as(h)
        h = h + self.attn2.cross(x, context, context_mask, cross_kv)
        if cond_feat is not None and gate is not None:
            h = add_gated_condition(h, cond_feat, gate)
        x = modulate(self.norm3(h.float()), mod[3], mod[4]).type_as(h)
        return gated_add(h, self.ffn(x), mod[5])


# ----------------------------------------------------------------------------------------------------------------------
# Stem and head of the video expert
# ----------------------------------------------------------------------------------------------------------------------


class ConditionEmbedder(nn.Module):
    """Timestep embedding (+ the adaLN projection ``time_proj``) and the text projection, with the names of diffusers'
    ``WanTimeTextImageEmbedding`` (TI2V-5B has no image embedder). Built from diffusers' embedding layers here, not
    imported: importing ``diffusers.models.transformers`` loads every transformer of diffusers (~1.5 s per process).
    ``with_text=False`` leaves out the text projection (the action expert with a single, K/V-only block)."""

    def __init__(self, dim: int, freq_dim: int, time_proj_dim: int, text_dim: int, with_text: bool = True):
        super().__init__()
        self.timesteps_proj = Timesteps(num_channels=freq_dim, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.time_embedder = TimestepEmbedding(in_channels=freq_dim, time_embed_dim=dim)
        self.act_fn = nn.SiLU()
        self.time_proj = nn.Linear(dim, time_proj_dim)
        self.text_embedder = PixArtAlphaTextProjection(text_dim, dim, act_fn="gelu_tanh") if with_text else None


class VideoStem(nn.Module):
    """Patch embedding, time/text embedding, output norm + head + unpatchify (diffusers names)."""

    def __init__(self, in_channels: int, dim: int, patch_size: tuple, freq_dim: int, text_dim: int, eps: float):
        super().__init__()
        self.patch_size = tuple(patch_size)
        self.patch_embedding = nn.Conv3d(in_channels, dim, kernel_size=self.patch_size, stride=self.patch_size)
        self.condition_embedder = ConditionEmbedder(dim, freq_dim, dim * 6, text_dim)
        self.norm_out = FP32LayerNorm(dim, eps, elementwise_affine=False)
        self.proj_out = nn.Linear(dim, in_channels * math.prod(self.patch_size))
        self.scale_shift_table = nn.Parameter(torch.randn(1, 2, dim) / dim**0.5)

    def patchify(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, C, F, H, W) -> tokens (B, N, dim), N = F/pt · H/ph · W/pw, frame-major."""
        return self.patch_embedding(x).flatten(2).transpose(1, 2).contiguous()

    def embed(self, timestep: torch.Tensor, context: torch.Tensor):
        """timestep (B,) or (B, S) in Wan units [0, 1000]; context (B, M, text_dim).

        Returns temb (B, S, dim), tproj (B, S, 6, dim) (S = 1 for a (B,) timestep), context (B, M, dim)."""
        temb, tproj = self.embed_time(timestep, context.dtype)
        return temb, tproj, self.embed_text(context)

    def embed_time(self, timestep: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The time half of diffusers' ``WanTimeTextImageEmbedding``: timestep (B,) or (B, S) -> temb (B, S, dim) in
        ``dtype`` (the context's, as diffusers casts it), tproj (B, S, 6, dim)."""
        emb = self.condition_embedder
        ts = timestep.reshape(timestep.shape[0], -1)  # (B, S)
        t = emb.timesteps_proj(ts.flatten()).unflatten(0, ts.shape)  # (B, S, freq_dim)
        t = t.to(emb.time_embedder.linear_1.weight.dtype)
        temb = emb.time_embedder(t).to(dtype)
        return temb, emb.time_proj(emb.act_fn(temb)).unflatten(2, (6, -1))

    def embed_text(self, context: torch.Tensor) -> torch.Tensor:
        """The text half: context (B, M, text_dim) -> (B, M, dim)."""
        return self.condition_embedder.text_embedder(context)

    def head(self, h: torch.Tensor, temb: torch.Tensor, grid: tuple[int, int, int]) -> torch.Tensor:
        """h (B, N, dim), temb (B, S, dim), grid (F', H', W') post-patch -> (B, C, F, H, W)."""
        shift, scale = (self.scale_shift_table.unsqueeze(0) + temb.unsqueeze(2)).chunk(2, dim=2)  # (B, S, 1, dim)
        x = modulate(self.norm_out(h.float()), shift, scale).type_as(h)
        x = self.proj_out(x)  # (B, N, C·pt·ph·pw)
        b, (f, hh, ww), (pt, ph, pw) = h.shape[0], grid, self.patch_size
        x = x.reshape(b, f, hh, ww, pt, ph, pw, -1)
        x = x.permute(0, 7, 1, 4, 2, 5, 3, 6)  # (B, C, F', pt, H', ph, W', pw)
        return x.flatten(6, 7).flatten(4, 5).flatten(2, 3)  # (B, C, F, H, W)
