"""Mixture of transformers: one joint attention over the video and action token streams, and its masks.

Every layer of the world model runs each expert's own Q/K/V projections, concatenates the two token streams
``[video; action]`` and calls ``F.scaled_dot_product_attention`` ONCE with a boolean mask (True = may attend),
then splits the result back so each expert applies its own output projection (SPEC §4b).

Token layout of the concatenated sequence (N = n_video + n_action):

    [0, n_first)            first-latent-frame video tokens (the clean z_0, timestep 0)
    [n_first, n_video)      future-frame video tokens
    [n_video, N)            action tokens

Masks (rows are queries, columns are keys), one builder per mode:

- :func:`world_model_mask` — the world model (pretrain and every stage-2 method): video↔video bidirectional except
  that first-frame tokens do not see future-frame tokens; video→action allowed (blocked per sample where
  ``action_keep`` is False); action→action allowed; action→video NOT allowed.
- :func:`policy_unconditional_mask` — downstream policy, "unconditional": action→first-frame video tokens only;
  video never sees actions.
- :func:`policy_video_action_mask` — downstream policy, "video + action": action→all video tokens; video never sees
  actions.
- "action-only" (paper §VLA, after FastWAM) is a *training-time* option, not a mask: ``policy_video_action_mask``
  over the observation's tokens only, the video expert frozen (``policy.settings.freeze_for_setting``) and no video
  loss; the action head (``model.action_head``) and the policy step (``policy.steps``) train the actions.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F

MASK_MODES = ("world_model", "bidirectional", "policy_unconditional", "policy_video_action")


def _video_block(n_first: int, n_video: int, device) -> torch.Tensor:
    """(n_video, n_video) bool: bidirectional, except first-frame rows do not see future-frame columns."""
    m = torch.ones(n_video, n_video, dtype=torch.bool, device=device)
    m[:n_first, n_first:] = False
    return m


def _check_sizes(n_first: int, n_video: int, n_action: int) -> None:
    if not (0 < n_first <= n_video) or n_action < 0:
        raise ValueError(f"attention mask: expected 0 < n_first <= n_video and n_action >= 0; got n_first={n_first}, "
                         f"n_video={n_video}, n_action={n_action}")


def _video_only(n_first: int, n_video: int, n_action: int, device) -> torch.Tensor:
    """(N, N) bool with only the video↔video block set (:func:`_video_block`); the mode builders add the rest."""
    _check_sizes(n_first, n_video, n_action)
    m = torch.zeros(n_video + n_action, n_video + n_action, dtype=torch.bool, device=device)
    m[:n_video, :n_video] = _video_block(n_first, n_video, device)
    return m


def world_model_mask(n_first: int, n_video: int, n_action: int, action_keep: Optional[torch.Tensor] = None,
                     device=None) -> torch.Tensor:
    """World-model mask, (1, 1, N, N) bool, or (B, 1, N, N) when ``action_keep`` (B,) bool is given.

    ``action_keep[b] == False`` removes sample b's actions: its video rows see no action column.
    """
    if action_keep is not None:
        device = action_keep.device
    n = n_video + n_action
    m = _video_only(n_first, n_video, n_action, device)
    m[:n_video, n_video:] = True  # video -> action
    m[n_video:, n_video:] = True  # action -> action (action -> video stays False)
    m = m[None, None]  # (1, 1, N, N)
    if action_keep is None or n_action == 0:
        return m
    keep = action_keep.to(torch.bool).view(-1, 1, 1, 1)  # (B, 1, 1, 1)
    m = m.expand(keep.shape[0], 1, n, n).clone()  # (B, 1, N, N)
    m[:, :, :n_video, n_video:] &= keep
    return m


def bidirectional_mask(n_first: int, n_video: int, n_action: int, device=None) -> Optional[torch.Tensor]:
    """Plain Wan2.2 attention: everything sees everything. Returns None (no mask) — the fastest SDPA path."""
    _check_sizes(n_first, n_video, n_action)
    return None


def policy_unconditional_mask(n_first: int, n_video: int, n_action: int, device=None) -> torch.Tensor:
    """Policy "unconditional" mask (1, 1, N, N): action→first-frame video tokens and action→action; video never sees
    actions; video↔video as in :func:`world_model_mask`."""
    m = _video_only(n_first, n_video, n_action, device)
    m[n_video:, :n_first] = True
    m[n_video:, n_video:] = True
    return m[None, None]


def policy_video_action_mask(n_first: int, n_video: int, n_action: int, device=None) -> torch.Tensor:
    """Policy "video + action" mask (1, 1, N, N): action→all video tokens and action→action; video never sees
    actions; video↔video as in :func:`world_model_mask`."""
    m = _video_only(n_first, n_video, n_action, device)
    m[n_video:, :] = True
    return m[None, None]


def build_mask(mode: str, n_first: int, n_video: int, n_action: int, action_keep: Optional[torch.Tensor] = None,
               device=None) -> Optional[torch.Tensor]:
    """Dispatch on ``mode`` (one of :data:`MASK_MODES`). ``action_keep`` only matters for "world_model"."""
    if mode == "world_model":
        return world_model_mask(n_first, n_video, n_action, action_keep, device)
    if mode == "bidirectional":
        return bidirectional_mask(n_first, n_video, n_action, device)
    if mode == "policy_unconditional":
        return policy_unconditional_mask(n_first, n_video, n_action, device)
    if mode == "policy_video_action":
        return policy_video_action_mask(n_first, n_video, n_action, device)
    raise ValueError(f"attention mode: got {mode!r}; expected one of {', '.join(MASK_MODES)}")


def joint_attention(qs: Sequence[Optional[torch.Tensor]], ks: Sequence[torch.Tensor], vs: Sequence[torch.Tensor],
                    mask: Optional[torch.Tensor]) -> list[Optional[torch.Tensor]]:
    """One SDPA over the concatenated streams.

    qs/ks/vs: per stream (B, N_i, H, D). A stream whose query is None only provides keys/values (the last action
    block); such streams must come last. mask: (B or 1, 1, ΣN_i, ΣN_i) bool or None (its rows for query-less streams
    are dropped). Returns per stream (B, N_i, H, D), or None for a query-less stream.
    """
    with_q = [q for q in qs if q is not None]
    if any(q is not None for q in qs[len(with_q):]):
        raise ValueError("joint_attention: streams without queries must come after all streams with queries")
    k = torch.cat(list(ks), dim=1).transpose(1, 2)  # (B, H, N, D)
    v = torch.cat(list(vs), dim=1).transpose(1, 2)
    q = torch.cat(with_q, dim=1).transpose(1, 2)  # (B, H, N_q, D), N_q <= N
    if mask is not None:
        if mask.shape[-1] != k.shape[2]:
            raise ValueError(f"joint_attention: mask covers {mask.shape[-1]} tokens; the streams hold {k.shape[2]}")
        mask = mask[:, :, : q.shape[2]]  # (B|1, 1, N_q, N)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2)  # (B, N_q, H, D)
    outs: list[Optional[torch.Tensor]] = list(out.split([t.shape[1] for t in with_q], dim=1))
    return outs + [None] * (len(qs) - len(with_q))
