"""The world model: Wan2.2-TI2V video expert + action expert as one mixture of transformers (SPEC §4, §4b).

Public entry (DESIGN.md "The network")::

    u_hat = model(z_t, tau, z0, actions, state0, text, text_mask=None,
                  cond=None, gate=None, cond_feats=None, action_keep=None)

Inside, the video expert sees the FULL latent ``x = [z0; z_t]`` (B, C, L+1, h, w) with Wan2.2-TI2V per-token
timesteps (first-latent-frame tokens 0, future tokens ``flow.wan_timestep(τ)`` = 1000·τ); the output keeps the future
frames. The initial proprio state becomes one extra text-context token ``state_embed(state0)`` (Linear state_dim →
text_dim) appended to ``text`` for both experts' cross-attention (and to ``text_mask`` as True). When ``text_mask`` is
given, cross-attention ignores padding tokens (Wan itself attends its zero padding; our text cache pads to
``data.text_max_tokens``).

Parameter layout (FSDP2 shards each entry of ``model.layers``, then the root):
``video.*`` (patch embedding, time/text embedding, head), ``action.*`` (action input, its time/text embedding),
``state_embed.*``, ``layers.{i}.video.*`` (a Wan block, diffusers names), ``layers.{i}.action.*``,
``layers.{i}.cond_proj.*`` (P_i, a Conv3d with kernel = stride = patch, zero at init); with ``conditioning.path``
"concat" or "both", ``cond_embed.*`` (E, the condition's channels of the input's patch embedding: a bias-free Conv3d
with kernel = stride = patch, zero at init); with ``model.action_conditioning`` "frame" or "both", ``frame_actions.*``
(each future latent frame's actions -> that frame's adaLN terms, its last layer zero at init: ``frame_actions.py``).

How the actions reach the video (``model.action_conditioning``): "expert" (the paper) — the action expert's tokens in
every layer's joint attention —; "frame" — each future latent frame's own actions added to that frame's adaLN
projection, which every video block reads, and to the head's modulation; no action expert (``self.action`` None) —;
"both". ``action_keep`` False drops a sample's actions from every path alike (its video rows see no action token,
its per-frame term is exactly zero).

Where the simulation condition c enters (``conditioning.path``): "blocks" (the paper) adds ``g·P_j(c)`` to the video
stream of every block; "concat" adds ``g·E(c)`` to the patch-embedded input, which is the patch embedding of the
channel concatenation [x; g·c] with kernel [W_x | E] (Wan2.2's ``patch_embedding`` keeps its shape and keys, so its
weights and a stage-1 checkpoint load unchanged, E zero) — the P_j then stay zero and frozen; "both" does both. The
gate g (B,) in {0, 1} drops every path alike: a gate-0 sample adds exact zeros, so it equals the unconditioned model.

Attention modes (``model.attention_mode``, see ``mot.py``): "world_model" (default), "bidirectional" (plain Wan2.2,
no mask — for parity checks), "policy_unconditional", "policy_video_action".

The downstream policy (SPEC §9) is this network built with ``model.action_head`` (a full last action block, an action
output head, noised action tokens with their own timestep) and a policy attention mode: :meth:`policy_forward` returns
(û_video, û_action); :meth:`observation_context` + :meth:`action_velocity` are the same action computation with the
observation's video features computed once per chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import simforcing.flow as flow
from simforcing.config import ACTION_CONDITIONINGS, Config, ConfigError
from simforcing.models import mot
from simforcing.models.action_expert import ActionStem, KVBlock, action_block
from simforcing.models.frame_actions import FrameActionEmbedder, add_per_frame
from simforcing.models.video_dit import (DiTBlock, Rope, VideoStem, add_gated_condition, sequence_rope,
                                         video_rope)


def patchify(x: torch.Tensor, patch: tuple) -> torch.Tensor:
    """(B, C, F, H, W) -> (B, N, C·pt·ph·pw): non-overlapping patches, tokens frame-major (the order of a Conv3d with
    kernel = stride = patch, flattened), each patch ordered like that Conv3d's flattened weight (C, pt, ph, pw)."""
    b, c, f, h, w = x.shape
    pt, ph, pw = patch
    x = x.reshape(b, c, f // pt, pt, h // ph, ph, w // pw, pw).permute(0, 2, 4, 6, 1, 3, 5, 7)
    return x.reshape(b, (f // pt) * (h // ph) * (w // pw), c * pt * ph * pw)


@dataclass
class LayerInputs:
    """Everything a layer needs besides the two hidden streams (shared by all layers of one forward)."""

    tproj_v: torch.Tensor  # (B, S, 6, dim) video adaLN projection
    ctx_v: torch.Tensor  # (B, M, dim) text context at video width
    rope_v: Rope
    attn_mask: Optional[torch.Tensor]  # (B or 1, 1, N, N) bool or None
    ctx_mask: Optional[torch.Tensor]  # (B, 1, 1, M) bool or None
    tproj_a: Optional[torch.Tensor] = None  # (B, 1, 6, action_hidden)
    ctx_a: Optional[torch.Tensor] = None  # (B, M, action_hidden)
    rope_a: Optional[Rope] = None
    cond: Optional[torch.Tensor] = None  # (B, N_video, C·pt·ph·pw) patches of the simulation latent
    gate: Optional[torch.Tensor] = None  # (B,) float


@dataclass
class ContextParts:
    """What a forward derives from the context (text + state token, actions) alone, not from z_t or τ."""

    ctx_v: torch.Tensor  # (B, M, dim) text context at video width
    ctx_mask: Optional[torch.Tensor]  # (B, 1, 1, M) bool or None
    ha: Optional[torch.Tensor] = None  # (B, A, action_hidden) action tokens entering layer 0
    tproj_a: Optional[torch.Tensor] = None  # (B, 1, 6, action_hidden) action adaLN projection (timestep 0)
    ctx_a: Optional[torch.Tensor] = None  # (B, M, action_hidden)
    rope_a: Optional[Rope] = None
    frame_tproj: Optional[torch.Tensor] = None  # (B, L, 6, dim) each future latent frame's action term of tproj
    frame_temb: Optional[torch.Tensor] = None  # (B, L, dim) and of temb (the head's modulation)


POLICY_MODES = ("policy_unconditional", "policy_video_action")


def new_condition_tensor(name: str) -> bool:
    """Whether a tensor may be absent from a checkpoint the model starts from: the input's condition channels
    (``cond_embed.*``, ``conditioning.path`` concat/both) and the per-frame action conditioning (``frame_actions.*``,
    ``model.action_conditioning`` both) — a stage-2 run that turns them on starts from a stage-1 run (or a video
    base, or Wan2.2) without them, and they start at zero (the action term's last layer), as the P_j do."""
    return name.startswith(("cond_embed.", "frame_actions."))


@dataclass
class ObservationContext:
    """A policy chunk's observation, computed once by :meth:`WorldModel.observation_context` and read by every action
    denoising step (:meth:`WorldModel.action_velocity`)."""

    video_kv: list  # per layer: the first-frame video tokens' (k, v), each (B, n_first, H, D)
    cross_kv_a: list  # per layer: the action cross-attention's (k, v) of the text + state context
    ctx_a: torch.Tensor  # (B, M, action_hidden)
    ctx_mask: Optional[torch.Tensor]  # (B, 1, 1, M) bool or None


@dataclass
class StepContext:
    """The step-invariant part of a rollout, computed once by :meth:`WorldModel.step_context` and passed to every
    forward of that rollout (``model(..., static=ctx)``): the state token and text/action embeddings, each layer's
    cross-attention keys/values of the text context (video and action expert), the attention mask, and — in the
    world-model attention mode, where action tokens never attend to video tokens, so the whole action stream depends
    on (actions, state, text) alone — every layer's action keys/values: the action expert runs once per rollout
    instead of once per step. A forward given it returns what a plain forward returns (bit for bit without the
    precomputed action stream; to float rounding with it, as its attention runs over the action tokens alone).

    ``sources`` are the (actions, state0, text, text_mask) tensors it was built from: a forward checks that it is
    called with the very same tensors (identity), so a context cannot be reused for another batch by mistake.
    """

    sources: tuple
    parts: ContextParts
    cross_kv: list  # per layer: (video (k, v), action (k, v) or None), each (B, M, H, D)
    action_kv: Optional[list]  # per layer: the action stream's (k, v) (B, A, H, D); None: the stream sees video
    masks: dict  # (n_first, n_video, n_action) -> attention mask (built on first use)

    def check(self, actions, state0, text, text_mask) -> None:
        if any(a is not b for a, b in zip(self.sources, (actions, state0, text, text_mask))):
            raise ValueError("static: this StepContext was built from other (actions, state0, text, text_mask) "
                             "tensors; build one per batch with model.step_context(actions, state0, text, text_mask) "
                             "and pass those same tensors to every forward that uses it")


class MoTLayer(nn.Module):
    """One layer: the video block, the action block (optional; a K/V-only block in the last layer) and P_j."""

    def __init__(self, video: DiTBlock, action: Optional[nn.Module], cond_proj: nn.Conv3d):
        super().__init__()
        self.video = video
        self.action = action
        self.cond_proj = cond_proj

    def condition_feature(self, patches: torch.Tensor) -> torch.Tensor:
        """P_j(c) from the condition's patches (:func:`patchify` of c (B, C, F, H, W)) -> (B, N_video, dim), the video
        token layout. The Conv3d's kernel equals its stride, so it is one matrix product per token (much cheaper
        than a convolution call and its backward at these sizes); the parameter stays the Conv3d."""
        w = self.cond_proj.weight
        return F.linear(patches.to(w.dtype), w.flatten(1), self.cond_proj.bias)

    def cross_kv(self, parts: ContextParts) -> tuple:
        """This layer's cross-attention keys/values of the context: (video (k, v), action (k, v) or None)."""
        kv_a = None
        if parts.ctx_a is not None and isinstance(self.action, DiTBlock):  # the last (K/V-only) block has none
            kv_a = self.action.attn2.cross_kv(parts.ctx_a)
        return self.video.attn2.cross_kv(parts.ctx_v), kv_a

    def action_stream(self, ha: torch.Tensor, parts: ContextParts, kv_a: Optional[tuple]):
        """This layer's action block run alone — valid when action tokens attend to action tokens only (the
        world-model mask): ha (B, A, action_hidden) -> (k, v) (B, A, H, D) for the video queries of the joint
        attention, and the action stream after this layer (None after the last, K/V-only block)."""
        mod_a = self.action.modulation(parts.tproj_a)
        q, k, v = self.action.qkv(ha, mod_a, parts.rope_a)
        if q is None:
            return (k, v), None
        o = mot.joint_attention([q], [k], [v], None)[0]  # action -> action, all allowed
        return (k, v), self.action.finish(ha, o, mod_a, parts.ctx_a, parts.ctx_mask, cross_kv=kv_a)

    def forward(self, hv: torch.Tensor, ha: Optional[torch.Tensor], inp: LayerInputs,
                cond_feat: Optional[torch.Tensor] = None, cross_kv: Optional[tuple] = None,
                action_kv: Optional[tuple] = None):
        """hv (B, Nv, dim), ha (B, A, action_hidden) or None -> the same two streams after this layer.
        cross_kv: :meth:`cross_kv` of this forward's context, if already computed (a StepContext); action_kv: the
        action keys/values of this layer from :meth:`action_stream` (then ``ha`` is None and stays None)."""
        kv_v, kv_a = cross_kv if cross_kv is not None else (None, None)
        mod_v = self.video.modulation(inp.tproj_v)
        streams = [self.video.qkv(hv, mod_v, inp.rope_v)]  # [(q, k, v)], each (B, N, H, D)
        use_action = ha is not None and self.action is not None
        if action_kv is not None:
            streams.append((None, *action_kv))
        elif use_action:
            mod_a = self.action.modulation(inp.tproj_a)
            streams.append(self.action.qkv(ha, mod_a, inp.rope_a))
        qs, ks, vs = zip(*streams)
        outs = mot.joint_attention(qs, ks, vs, inp.attn_mask)  # [video out, action out or None]
        if inp.gate is not None and cond_feat is None and inp.cond is not None:
            cond_feat = self.condition_feature(inp.cond)  # inp.cond holds the condition's patches
        hv = self.video.finish(hv, outs[0], mod_v, inp.ctx_v, inp.ctx_mask, cond_feat, inp.gate, kv_v)
        if use_action and outs[1] is not None:
            ha = self.action.finish(ha, outs[1], mod_a, inp.ctx_a, inp.ctx_mask, cross_kv=kv_a)
        return hv, ha


class WorldModel(nn.Module):
    """û = F_θ(z_t, τ, z0, actions, state0, text, c, g) — see the module docstring and DESIGN.md."""

    def __init__(self, cfg: Config, attention_mode: str = "world_model"):
        super().__init__()
        m, d = cfg.model, cfg.data
        if m.qk_norm != "rms_norm_across_heads":
            raise ConfigError(f"model.qk_norm: got {m.qk_norm!r}; expected 'rms_norm_across_heads' (Wan2.2)")
        if tuple(m.patch_size)[0] != 1:
            raise ConfigError(f"model.patch_size: got {m.patch_size}; expected temporal patch 1 (Wan2.2-TI2V), so "
                              "the first latent frame keeps its own tokens")
        if m.action_conditioning not in ACTION_CONDITIONINGS:
            raise ConfigError(f"model.action_conditioning: got {m.action_conditioning!r}; expected one of "
                              f"{', '.join(ACTION_CONDITIONINGS)}")
        if attention_mode not in mot.MASK_MODES:
            raise ConfigError(f"attention_mode: got {attention_mode!r}; expected one of {', '.join(mot.MASK_MODES)}")
        self.attention_mode = attention_mode
        self.parameterization = m.parameterization
        self.tau_min = float(m.tau_min)
        self.first_frame_skip = bool(m.first_frame_skip)
        self.gradient_checkpointing = bool(m.gradient_checkpointing)
        self.patch_size = tuple(m.patch_size)
        self.head_dim = m.attention_head_dim
        self.rope_max_seq_len = m.rope_max_seq_len
        self.latent_channels = m.vae.latent_channels
        self.use_action_expert = m.has_action_expert
        self.cond_motion = cfg.conditioning.representation == "motion"
        self.cond_blocks = cfg.conditioning.path in ("blocks", "both")  # h_j += g·P_j(c) in every block
        self.cond_concat = cfg.conditioning.path in ("concat", "both")  # g·c beside the noisy latent at the input
        dim = m.dim
        self.video = VideoStem(m.vae.latent_channels, dim, self.patch_size, m.freq_dim, m.text_dim, m.eps)
        if m.action_head and not m.use_action_expert:
            raise ConfigError("model.action_head: True needs model.use_action_expert: True (the head reads the "
                              "action expert's tokens)")
        self.action_head = bool(m.action_head)
        if m.has_frame_actions and (m.action_head or attention_mode in POLICY_MODES):
            raise ConfigError(f"model.action_conditioning: got {m.action_conditioning!r}; expected 'expert' for a "
                              f"policy (model.action_head, attention mode {attention_mode!r}): its video tokens never "
                              "read the actions")
        self.action = ActionStem(d.action_dim, m.action_hidden, m.freq_dim, m.text_dim,
                                 with_text=m.num_layers > 1 or m.action_head, head=m.action_head, eps=m.eps) \
            if self.use_action_expert else None
        self.state_embed = nn.Linear(d.state_dim, m.text_dim)
        self.layers = nn.ModuleList([
            MoTLayer(DiTBlock(dim, m.ffn_dim, m.num_attention_heads, m.attention_head_dim, m.num_attention_heads,
                              m.eps, m.cross_attn_norm),
                     action_block(m, last=i == m.num_layers - 1) if self.use_action_expert else None,
                     nn.Conv3d(m.vae.latent_channels, dim, kernel_size=self.patch_size, stride=self.patch_size))
            for i in range(m.num_layers)])
        # the condition's channels of the input patch embedding (conditioning.path concat/both); no bias, so g = 0
        # (zero channels) adds exactly nothing, as in a channel concatenation. Zero, built without a random draw: one
        # seed gives every other tensor alike whatever the path
        self.cond_embed = None
        if self.cond_concat:
            embed = nn.Conv3d(m.vae.latent_channels, dim, kernel_size=self.patch_size, stride=self.patch_size,
                              bias=False, device="meta")
            self.cond_embed = embed.to_empty(device=self.video.patch_embedding.weight.device)
            with torch.no_grad():
                self.cond_embed.weight.zero_()
        # each future latent frame's actions -> its adaLN terms (action_conditioning frame/both); built without a random
        # draw and initialised last (initialize_weights), so one seed gives every other tensor alike whatever the mode
        self.frame_actions = None
        if m.has_frame_actions:
            span = m.vae.temporal_stride * d.frame_stride
            with torch.device("meta"):
                frame = FrameActionEmbedder(span, d.action_dim, m.action_hidden, dim)
            self.frame_actions = frame.to_empty(device=self.video.patch_embedding.weight.device)
            with torch.no_grad():  # finite until initialize_weights draws linear_1 (the action term stays zero)
                for p in self.frame_actions.parameters():
                    p.zero_()
        if not self.cond_blocks:  # the P_j stay in the state dict (a stage-1 checkpoint loads as is), zero and frozen
            for layer in self.layers:
                layer.cond_proj.requires_grad_(False)
        self._rope_cache: dict = {}

    # -- initialisation ------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def initialize_weights(self) -> "WorldModel":
        """Every parameter, Wan's init (works after ``to_empty`` on a meta-built model).

        Linear: xavier-uniform weight, zero bias; patch embedding: xavier on the flattened kernel; time and text
        embedders: normal(0, 0.02); adaLN tables: randn / sqrt(width); norms: ones/zeros; the output head
        ``video.proj_out``: zero (so ``x0`` + ``first_frame_skip`` starts as "copy the first latent frame"); with
        ``model.action_head`` the action head ``action.proj_out``: zero (the policy starts at velocity 0); every
        P_j (``layers.*.cond_proj``): weight and bias zero, and so the input's condition channels ``cond_embed``
        (``conditioning.path`` concat/both): at init the condition changes nothing; the per-frame action term
        ``frame_actions`` (``model.action_conditioning`` frame/both): its last layer zero, its first drawn after every
        other tensor (the others equal those of the model without it, seed for seed).
        """
        own = set(map(id, self.frame_actions.modules())) if self.frame_actions is not None else set()
        for mod in self.modules():
            if id(mod) in own:
                continue
            if isinstance(mod, nn.Linear):
                nn.init.xavier_uniform_(mod.weight)
                if mod.bias is not None:
                    nn.init.zeros_(mod.bias)
            elif isinstance(mod, (nn.LayerNorm, nn.RMSNorm)):
                mod.reset_parameters()
            elif isinstance(mod, nn.Conv3d) and mod is not self.cond_embed:  # E: zero below, no random draw, so
                mod.reset_parameters()  # one seed gives every other tensor of every conditioning.path alike
                nn.init.xavier_uniform_(mod.weight.view(mod.weight.shape[0], -1))
            elif isinstance(mod, (DiTBlock, KVBlock)):
                mod.scale_shift_table.copy_(torch.randn_like(mod.scale_shift_table) / mod.dim**0.5)
        for emb in [self.video.condition_embedder] + ([self.action.condition_embedder] if self.action else []):
            for sub in (emb.time_embedder, emb.text_embedder):
                for lin in sub.modules() if sub is not None else ():
                    if isinstance(lin, nn.Linear):
                        nn.init.normal_(lin.weight, std=0.02)
        tables = [self.video.scale_shift_table] + ([self.action.scale_shift_table] if self.action_head else [])
        for table in tables:
            table.copy_(torch.randn_like(table) / table.shape[-1] ** 0.5)
        for head in [self.video.proj_out] + ([self.action.proj_out] if self.action_head else []):
            nn.init.zeros_(head.weight)  # video: "copy the first frame" with x0 + first_frame_skip; actions: u = 0
            nn.init.zeros_(head.bias)
        for layer in self.layers:
            nn.init.zeros_(layer.cond_proj.weight)
            nn.init.zeros_(layer.cond_proj.bias)
        if self.cond_embed is not None:
            nn.init.zeros_(self.cond_embed.weight)
        if self.frame_actions is not None:
            self.frame_actions.initialize()
        return self

    # -- conditioning --------------------------------------------------------------------------------------------
    @property
    def num_condition_features(self) -> int:
        """How many tensors :meth:`condition_features` returns: one per layer (P_j) and/or one for the input (E)."""
        return len(self.layers) * self.cond_blocks + self.cond_concat

    def condition_features(self, cond: torch.Tensor) -> list[torch.Tensor]:
        """Every feature of the condition once: cond (B, C, L+1, h, w) -> list of (B, N_video, dim): P_j(c), one per
        layer (``conditioning.path`` blocks/both), then E(c), the input's (concat/both).

        For a sampler that reuses them across steps (``cond_feats=``); each entry is used as ``gate·feature``, so a
        batch's unconditioned rows may carry zeros. Call it on an unsharded model (FSDP shards P_j with its layer).
        """
        patches = self._condition_patches(cond)
        feats = [layer.condition_feature(patches) for layer in self.layers] if self.cond_blocks else []
        return feats + ([self.input_condition_feature(patches)] if self.cond_concat else [])

    def input_condition_feature(self, patches: torch.Tensor) -> torch.Tensor:
        """E(c) from the condition's patches (:meth:`_condition_patches`) -> (B, N_video, dim): the condition
        channels' share of the input patch embedding (one matrix product per token, like
        :meth:`MoTLayer.condition_feature`; the parameter stays the Conv3d ``cond_embed``)."""
        w = self.cond_embed.weight
        return F.linear(patches.to(w.dtype), w.flatten(1))

    def _condition_patches(self, cond: torch.Tensor) -> torch.Tensor:
        """The condition's patches (B, N_video, C·pt·ph·pw), of c itself (the paper) or, with
        ``conditioning.representation = motion``, of (c_0, c_1 − c_0, …, c_L − c_0): every future token then reads
        where the simulated arm is at its frame AND where it was at the first — where the real arm must appear and
        where it must disappear — in its own patch."""
        if self.cond_motion:
            cond = torch.cat([cond[:, :, :1], cond[:, :, 1:] - cond[:, :, :1]], dim=2)
        return patchify(cond, self.patch_size)

    # -- the network --------------------------------------------------------------------------------------------------
    @torch.compiler.disable
    def _rope(self, key: tuple, make) -> Rope:
        """The rotary tables of ``key``, made once (``make``) and cached. Outside any compiled graph
        (``train.compile``): the graph of a model's first call is then the graph of every later call — a resumed run
        compiles the same graph as the run it continues, so its steps round alike."""
        if key not in self._rope_cache:
            self._rope_cache[key] = make()
        return self._rope_cache[key]

    def context_parts(self, context: torch.Tensor, context_mask: Optional[torch.Tensor],
                      actions: Optional[torch.Tensor], action_timestep: Optional[torch.Tensor] = None) -> ContextParts:
        """The step-invariant embeddings of one forward: context (B, M, text_dim) (state token already appended),
        context_mask (B, M) bool or None, actions (B, A, action_dim) or None; action_timestep (B,) in Wan units
        (the policy's noised actions) or None (clean actions, timestep 0)."""
        dtype = self.video.patch_embedding.weight.dtype
        b, device = context.shape[0], context.device
        parts = ContextParts(self.video.embed_text(context.to(dtype)),
                             None if context_mask is None else context_mask.to(torch.bool).view(b, 1, 1, -1))
        if actions is not None and self.action is not None:
            parts.ha, parts.tproj_a, parts.ctx_a = self.action.embed(actions, context.to(dtype), action_timestep)
            parts.rope_a = self._rope(("a", actions.shape[1], device),
                                      lambda: sequence_rope(actions.shape[1], self.head_dim, device))
        if actions is not None and self.frame_actions is not None:
            parts.frame_tproj, parts.frame_temb = self.frame_actions(actions)
        return parts

    def backbone(self, x: torch.Tensor, timestep: torch.Tensor, context: Optional[torch.Tensor],
                 context_mask: Optional[torch.Tensor] = None, actions: Optional[torch.Tensor] = None,
                 attn_mask: Optional[torch.Tensor] | str = "auto", cond: Optional[torch.Tensor] = None,
                 gate: Optional[torch.Tensor] = None, cond_feats: Optional[list] = None,
                 action_keep: Optional[torch.Tensor] = None, static: Optional[StepContext] = None) -> torch.Tensor:
        """The raw network on the full latent, Wan-style.

        x (B, C, F, H, W) all latent frames; timestep (B,) or (B, S) in Wan units [0, 1000] (S groups of
        frame-major tokens, e.g. S = F frames or S = N tokens); context (B, M, text_dim) (state token already
        appended); context_mask (B, M) bool or None; actions (B, A, action_dim) or None (no action tokens);
        attn_mask "auto" (built from ``attention_mode``), None (full attention) or a (B|1, 1, N, N) bool tensor;
        static: a :class:`StepContext` of this context (then context, context_mask and actions are not read).
        Returns the head output (B, C, F, H, W) in float32.
        """
        hv, _, temb, grid = self._trunk(x, timestep, context, context_mask, actions, attn_mask, cond, gate,
                                        cond_feats, action_keep, static)
        return self.video.head(hv, temb, grid).float()

    def _trunk(self, x, timestep, context, context_mask=None, actions=None, attn_mask="auto", cond=None, gate=None,
               cond_feats=None, action_keep=None, static=None, action_timestep=None):
        """:meth:`backbone` up to the heads: -> (video tokens (B, Nv, dim), action tokens (B, A, action_hidden) or
        None, temb (B, S, dim), grid). ``action_timestep`` (B,): the noised actions' timestep (policy)."""
        b, _, f, h, w = x.shape
        pt, ph, pw = self.patch_size
        if f % pt or h % ph or w % pw:
            raise ValueError(f"latent (F, H, W) = {(f, h, w)} is not divisible by model.patch_size {self.patch_size}")
        grid = (f // pt, h // ph, w // pw)
        dtype = self.video.patch_embedding.weight.dtype
        hv = self.video.patchify(x.to(dtype))  # (B, Nv, dim)
        n_video, n_first = hv.shape[1], grid[1] * grid[2]
        parts = static.parts if static is not None else self.context_parts(context, context_mask, actions,
                                                                            action_timestep)
        temb, tproj_v = self.video.embed_time(timestep.to(x.device), dtype)  # diffusers: the context's dtype
        if parts.frame_tproj is not None:
            temb, tproj_v = self._with_frame_actions(temb, tproj_v, parts, grid[0], action_keep)
        rope_v = self._video_rope(grid, x.device)
        n_action = 0 if parts.ha is None else parts.ha.shape[1]
        if isinstance(attn_mask, str):
            if attn_mask != "auto":
                raise ValueError(f"attn_mask: got {attn_mask!r}; expected 'auto', None or a bool tensor")
            key = (n_first, n_video, n_action)
            if static is not None and action_keep is None and key in static.masks:
                attn_mask = static.masks[key]
            else:
                attn_mask = mot.build_mask(self.attention_mode, n_first, n_video, n_action,
                                           action_keep if n_action else None, device=x.device)
                if static is not None and action_keep is None:
                    static.masks[key] = attn_mask
        if cond is not None and cond.shape != x.shape:
            raise ValueError(f"cond: expected shape {tuple(x.shape)} (B, C, L+1, h, w) like the full latent; "
                             f"got {tuple(cond.shape)}")
        if cond_feats is not None and len(cond_feats) != self.num_condition_features:
            raise ValueError(f"cond_feats: expected {self.num_condition_features} tensors (model.condition_features: "
                             f"one per layer and/or the input's); got {len(cond_feats)}")
        use_cond = gate is not None and (cond is not None or cond_feats is not None)
        patches = self._condition_patches(cond) if use_cond and cond_feats is None else None
        if use_cond and self.cond_concat:  # the patch embedding of [x; g·c]: + g·E(c)
            e = cond_feats[-1] if cond_feats is not None else self.input_condition_feature(patches)
            hv = add_gated_condition(hv, e, gate)
        in_blocks = use_cond and self.cond_blocks
        inp = LayerInputs(tproj_v, parts.ctx_v, rope_v, attn_mask, parts.ctx_mask, parts.tproj_a, parts.ctx_a,
                          parts.rope_a, patches if in_blocks else None, gate if in_blocks else None)
        action_kv = static.action_kv if static is not None else None
        ha = parts.ha if action_kv is None else None
        for j, layer in enumerate(self.layers):
            feat = cond_feats[j] if in_blocks and cond_feats is not None else None
            kv = static.cross_kv[j] if static is not None else None
            akv = action_kv[j] if action_kv is not None else None
            if self.gradient_checkpointing and torch.is_grad_enabled():
                hv, ha = checkpoint(layer, hv, ha, inp, feat, kv, akv, use_reentrant=False)
            else:
                hv, ha = layer(hv, ha, inp, feat, kv, akv)
        return hv, ha, temb, grid

    def _with_frame_actions(self, temb: torch.Tensor, tproj: torch.Tensor, parts: ContextParts, frames: int,
                            action_keep: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """temb (B, S, dim) and tproj (B, S, 6, dim) with each future latent frame's action term added
        (``frame_actions.py``); a sample with ``action_keep`` False gets exact zeros. ``frames``: latent frames F
        (the first gets nothing)."""
        if parts.frame_tproj.shape[1] != frames - 1:
            span = self.frame_actions.span
            raise ValueError(f"actions: {parts.frame_tproj.shape[1] * span} actions make "
                             f"{parts.frame_tproj.shape[1]} latent frames of {span} (model.action_conditioning "
                             f"frame/both); the latent has {frames - 1} future frames: expected "
                             f"{(frames - 1) * span} actions")
        t_term, e_term = parts.frame_tproj, parts.frame_temb
        if action_keep is not None:
            keep = action_keep.to(device=t_term.device, dtype=torch.bool).view(-1, 1, 1)  # (B, 1, 1)
            t_term, e_term = torch.where(keep[..., None], t_term, 0.0), torch.where(keep, e_term, 0.0)
        return add_per_frame(temb, e_term, frames), add_per_frame(tproj, t_term, frames)

    def _video_rope(self, grid: tuple, device) -> Rope:
        return self._rope(("v", grid, device), lambda: video_rope(*grid, self.head_dim, self.rope_max_seq_len, device))

    def _with_state(self, text: torch.Tensor, text_mask: Optional[torch.Tensor], state0: Optional[torch.Tensor]):
        """Append the proprio state token: -> context (B, M+1, text_dim), mask (B, M+1) bool (or M and as given
        when ``state0`` is None)."""
        if state0 is None:
            return text, text_mask
        b = text.shape[0]
        tok = self.state_embed(state0.to(self.state_embed.weight.dtype))[:, None]  # (B, 1, text_dim)
        context = torch.cat([text.to(tok.dtype), tok], dim=1)  # (B, M+1, text_dim)
        if text_mask is None:
            return context, None
        ones = torch.ones(b, 1, dtype=torch.bool, device=text_mask.device)
        return context, torch.cat([text_mask.to(torch.bool), ones], dim=1)  # (B, M+1)

    def step_context(self, actions: Optional[torch.Tensor], state0: Optional[torch.Tensor], text: torch.Tensor,
                     text_mask: Optional[torch.Tensor] = None) -> StepContext:
        """Everything of a forward that depends only on (actions, state0, text, text_mask): call it once per rollout
        (under the rollout's no_grad/autocast) and pass ``static=`` to each step's forward. Like
        :meth:`condition_features`, call it on an unsharded model. Memory: per layer the text keys and values,
        (B, M, dim) twice for the video expert (+ the action expert's, at its width), and the action keys/values
        (B, A, heads·head_dim) twice."""
        context, ctx_mask = self._with_state(text, text_mask, state0)
        parts = self.context_parts(context, ctx_mask, actions)
        cross_kv = [layer.cross_kv(parts) for layer in self.layers]
        action_kv = None
        if parts.ha is not None and self.attention_mode == "world_model":  # action rows see action columns only
            action_kv, ha = [], parts.ha
            for layer, (_, kv_a) in zip(self.layers, cross_kv):
                kv, ha = layer.action_stream(ha, parts, kv_a)
                action_kv.append(kv)
        return StepContext((actions, state0, text, text_mask), parts, cross_kv, action_kv, {})

    def forward(self, z_t: torch.Tensor, tau: torch.Tensor, z0: torch.Tensor, actions: Optional[torch.Tensor],
                state0: Optional[torch.Tensor], text: torch.Tensor, text_mask: Optional[torch.Tensor] = None,
                cond: Optional[torch.Tensor] = None, gate: Optional[torch.Tensor] = None,
                cond_feats: Optional[list] = None, action_keep: Optional[torch.Tensor] = None,
                static: Optional[StepContext] = None, context_tau: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Velocity û (B, C, L, h, w) float32. Shapes and semantics: DESIGN.md "The network".

        ``actions=None`` runs without action tokens; ``state0=None`` appends no state token; ``static``: the
        :meth:`step_context` of these same (actions, state0, text, text_mask) tensors (same result, less work).
        ``context_tau`` (B,): the noise level of ``z0`` when it is a corrupted context (``train.context_noise``,
        after GameNGen), read by the first-frame tokens as their flow time; None: a clean first latent (timestep 0,
        Wan2.2 TI2V)."""
        if z0.shape[2] != 1 or z0.shape[:2] != z_t.shape[:2] or z0.shape[3:] != z_t.shape[3:]:
            raise ValueError(f"z0: expected (B, C, 1, h, w) matching z_t {tuple(z_t.shape)}; got {tuple(z0.shape)}")
        b, lat = z_t.shape[0], z_t.shape[2]
        tau = tau.to(device=z_t.device, dtype=torch.float32).reshape(b)
        x = torch.cat([z0.to(z_t.dtype), z_t], dim=2)  # (B, C, L+1, h, w)
        future = flow.wan_timestep(tau)[:, None].expand(b, lat)  # (B, L) in Wan units
        first = torch.zeros(b, 1, device=z_t.device) if context_tau is None else \
            flow.wan_timestep(context_tau.to(device=z_t.device, dtype=torch.float32).reshape(b, 1))
        timestep = torch.cat([first, future], 1)  # (B, L+1): the first frame at 0 (or its context noise level)
        if static is not None:
            static.check(actions, state0, text, text_mask)
            context = ctx_mask = None
        else:
            context, ctx_mask = self._with_state(text, text_mask, state0)
        if gate is not None:
            gate = gate.to(device=z_t.device, dtype=torch.float32).reshape(b)
        out = self.backbone(x, timestep, context, ctx_mask, actions, "auto", cond, gate, cond_feats, action_keep,
                            static)
        return self._video_velocity(out[:, :, 1:], z_t, z0, tau)

    def _video_velocity(self, head: torch.Tensor, z_t: torch.Tensor, z0: torch.Tensor,
                        tau: torch.Tensor) -> torch.Tensor:
        """The future frames' head output (B, C, L, h, w) -> the velocity (``model.parameterization``)."""
        if self.parameterization == "velocity":
            return head
        x_hat = z0.float() + head if self.first_frame_skip else head  # z0 broadcasts over the L future frames
        return (z_t.float() - x_hat) / tau.clamp(min=self.tau_min).view(-1, 1, 1, 1, 1)

    # -- the policy (model.action_head, SPEC §9) ----------------------------------------------------------------------
    def _require_policy(self) -> None:
        if not self.action_head or self.attention_mode not in POLICY_MODES:
            raise ValueError(f"the policy calls need a model built with model.action_head=true and a policy attention "
                             f"mode ({', '.join(POLICY_MODES)}); got action_head={self.action_head}, "
                             f"attention_mode={self.attention_mode!r}")

    def policy_forward(self, z_t: Optional[torch.Tensor], tau_v: Optional[torch.Tensor], z0: torch.Tensor,
                       a_t: torch.Tensor, tau_a: torch.Tensor, state0: Optional[torch.Tensor], text: torch.Tensor,
                       text_mask: Optional[torch.Tensor] = None) -> tuple[Optional[torch.Tensor], torch.Tensor]:
        """The policy network: (û_video, û_action).

        z_t (B, C, L, h, w) noisy future latents at flow time tau_v (B,), or None (the observation alone: the
        action-only setting, or actions without video); z0 (B, C, 1, h, w) the clean observation latent (timestep 0);
        a_t (B, A, action_dim) noisy actions at flow time tau_a (B,) (their tokens' adaLN timestep is 1000·tau_a);
        state0 (B, state_dim) the proprio token; text (B, N, text_dim), text_mask (B, N).
        Returns û_video (B, C, L, h, w) float32 (None when z_t is None) and û_action (B, A, action_dim) float32.
        Who sees whom is ``attention_mode``: "policy_unconditional" (actions see the first frame only) or
        "policy_video_action" (actions see every video token); video tokens never see actions."""
        self._require_policy()
        if z0.dim() != 5 or z0.shape[2] != 1:
            raise ValueError(f"z0: expected (B, C, 1, h, w); got {tuple(z0.shape)}")
        b = z0.shape[0]
        x = z0 if z_t is None else torch.cat([z0.to(z_t.dtype), z_t], dim=2)  # (B, C, 1 [+ L], h, w)
        timestep = torch.zeros(b, x.shape[2], device=z0.device)  # first latent frame: timestep 0
        if z_t is not None:
            timestep[:, 1:] = flow.wan_timestep(tau_v.to(device=z0.device, dtype=torch.float32)).reshape(b, 1)
        t_a = flow.wan_timestep(tau_a.to(device=z0.device, dtype=torch.float32)).reshape(b)
        context, ctx_mask = self._with_state(text, text_mask, state0)
        hv, ha, temb, grid = self._trunk(x, timestep, context, ctx_mask, a_t, action_timestep=t_a)
        u_a = self.action.head(ha, t_a)
        if z_t is None:
            return None, u_a
        out = self.video.head(hv, temb, grid).float()[:, :, 1:]
        return self._video_velocity(out, z_t, z0, tau_v.to(z0.device, torch.float32).reshape(b)), u_a

    def observation_context(self, z0: torch.Tensor, state0: Optional[torch.Tensor], text: torch.Tensor,
                            text_mask: Optional[torch.Tensor] = None) -> "ObservationContext":
        """What every action denoising step of a chunk reads from the observation, computed ONCE per chunk: the video
        expert on the first latent frame alone (timestep 0) and its per-layer keys/values, the text/state context and
        every action layer's cross-attention keys/values. Valid for the action-only and unconditional settings, where
        action tokens attend to first-frame video tokens only and those never see later tokens, so the first frame's
        features are what a full forward computes (to float rounding). z0 (B, C, 1, h, w)."""
        self._require_policy()
        dtype = self.video.patch_embedding.weight.dtype
        b = z0.shape[0]
        context, ctx_mask = self._with_state(text, text_mask, state0)
        parts = self.context_parts(context, ctx_mask, None)
        ctx_a = self.action.condition_embedder.text_embedder(context.to(dtype))  # (B, M, action_hidden)
        grid = (1, z0.shape[3] // self.patch_size[1], z0.shape[4] // self.patch_size[2])
        hv = self.video.patchify(z0.to(dtype))  # (B, n_first, dim)
        _, tproj_v = self.video.embed_time(torch.zeros(b, 1, device=z0.device), dtype)
        rope_v = self._video_rope(grid, z0.device)
        video_kv, cross_kv_a = [], []
        for j, layer in enumerate(self.layers):
            mod_v = layer.video.modulation(tproj_v)
            q, k, v = layer.video.qkv(hv, mod_v, rope_v)
            video_kv.append((k, v))  # (B, n_first, H, D) each
            if j < len(self.layers) - 1:  # the last layer's video output feeds nothing the actions read
                o = mot.joint_attention([q], [k], [v], None)[0]  # first frame -> first frame
                hv = layer.video.finish(hv, o, mod_v, parts.ctx_v, parts.ctx_mask)
            cross_kv_a.append(layer.action.attn2.cross_kv(ctx_a))
        return ObservationContext(video_kv, cross_kv_a, ctx_a, parts.ctx_mask)

    def action_velocity(self, obs: "ObservationContext", a_t: torch.Tensor, tau_a: torch.Tensor) -> torch.Tensor:
        """û_action (B, A, action_dim) float32 for noisy actions a_t at flow time tau_a (B,), reading the cached
        :meth:`observation_context`: only the action expert runs (its queries over [first-frame keys/values; its
        own]), as :meth:`policy_forward` without future video computes it."""
        self._require_policy()
        dtype = self.video.patch_embedding.weight.dtype
        b, n = a_t.shape[:2]
        t_a = flow.wan_timestep(tau_a.to(device=a_t.device, dtype=torch.float32)).reshape(b)
        tproj = self.action.condition_embedder.time_projection(t_a).unflatten(1, (6, -1)).unsqueeze(1)
        ha = self.action.action_in(a_t.to(dtype))  # (B, A, action_hidden)
        rope_a = self._rope(("a", n, a_t.device), lambda: sequence_rope(n, self.head_dim, a_t.device))
        for layer, (k_v, v_v), kv_a in zip(self.layers, obs.video_kv, obs.cross_kv_a):
            mod_a = layer.action.modulation(tproj)
            q, k, v = layer.action.qkv(ha, mod_a, rope_a)
            o = mot.joint_attention([q], [torch.cat([k_v, k], 1)], [torch.cat([v_v, v], 1)], None)[0]
            ha = layer.action.finish(ha, o, mod_a, obs.ctx_a, obs.ctx_mask, cross_kv=kv_a)
        return self.action.head(ha, t_a)


def build_world_model(cfg: Config, device="cpu", meta: bool = False, attention_mode: str = "world_model") -> WorldModel:
    """Build the world model for ``cfg`` (``attention_mode``: see :class:`WorldModel`; the policy uses its own).

    meta=False: parameters on ``device``, initialised by :meth:`WorldModel.initialize_weights`.
    meta=True: on the meta device, uninitialised (for counting, or for ``to_empty(device=...)`` then
    ``initialize_weights()`` / weight loading, e.g. before FSDP2 sharding). Pretrained weights are not loaded here:
    see ``simforcing.models.weights.load_configured_weights``.
    """
    if meta:
        with torch.device("meta"):
            return WorldModel(cfg, attention_mode)
    with torch.device(device):
        model = WorldModel(cfg, attention_mode)
    return model.initialize_weights()
