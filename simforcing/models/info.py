"""Model size (`simforcing model info --preset P [--json]`): parameters, tokens, FLOPs and per-GPU training memory of a
preset.

The model is built on the meta device (no memory, no weights). FLOPs count matmuls analytically (2·m·n·k each; the
joint attention is counted dense over all N = N_video + N_action tokens, as SDPA computes it, masked or not).

Memory of one stage-2 training step per GPU (SimForcing: frozen teacher + two student forwards with gradients) under
FSDP2 over G GPUs, mixed precision bf16 compute / fp32 master:

- student: fp32 master params + fp32 grads + AdamW (exp_avg, exp_avg_sq) = 16 bytes/param, sharded over G;
- teacher: fp32 params, sharded over G, no grads or optimizer state;
- transient unsharded bf16 params of ~2 layers (current + prefetched) + the root, and one layer's fp32 unsharded grads;
- activations: without checkpointing ≈ (56·d + 24·inner + 4·ffn) bytes per token per layer per expert (the tensors
  our blocks save for backward under bf16 autocast: fp32 norm inputs, QK-norm / RoPE inputs, SDPA q/k/v/out, FFN
  hidden), for 2 student forwards × batch; with per-layer checkpointing only the layer inputs (bf16) are kept for
  every layer, plus one layer's full activations during its recomputation. (Checked against the bytes autograd
  saves in a bf16 forward on CPU: within ~2 %.)
Stage 1 (no teacher, one student forward) is reported alongside. CUDA context, allocator fragmentation and NCCL
buffers are not included (add ~2–4 GiB).
"""

from __future__ import annotations

import math

from simforcing.config import Config
from simforcing.models.world_model import build_world_model

GPU_COUNTS = (1, 8, 16, 32)
GIB = 1024 ** 3


def parameter_counts(cfg: Config) -> dict[str, int]:
    """Parameters per part of the world model: video expert, action expert, conditioning (the P_j, and the input's
    condition channels E with ``conditioning.path`` concat/both), state token and, with ``model.action_conditioning``
    frame/both, the per-frame action conditioning (``frame_actions``)."""
    model = build_world_model(cfg, meta=True)
    counts = {"video_expert": 0, "action_expert": 0, "condition_projections": 0, "state_token": 0}
    if model.frame_actions is not None:
        counts["frame_actions"] = 0
    for name, p in model.named_parameters():
        if ".cond_proj." in name or name.startswith("cond_embed."):
            counts["condition_projections"] += p.numel()
        elif name.startswith("frame_actions."):
            counts["frame_actions"] += p.numel()
        elif name.startswith("action.") or ".action." in name:
            counts["action_expert"] += p.numel()
        elif name.startswith("state_embed."):
            counts["state_token"] += p.numel()
        else:
            counts["video_expert"] += p.numel()
    counts["total"] = sum(counts.values())
    counts["per_layer"] = sum(p.numel() for p in model.layers[0].parameters())
    return counts


def token_counts(cfg: Config) -> dict[str, int]:
    n_video = cfg.latent_frames * cfg.tokens_per_latent_frame
    n_action = cfg.data.actions_per_window if cfg.model.has_action_expert else 0
    return {"video": n_video, "first_frame": cfg.tokens_per_latent_frame, "action": n_action,
            "text": cfg.data.text_max_tokens + 1, "joint": n_video + n_action}


def forward_flops(cfg: Config) -> dict[str, float]:
    """Matmul FLOPs of one forward pass for one sample, by part."""
    m, t = cfg.model, token_counts(cfg)
    d, f, inner = m.dim, m.ffn_dim, m.num_attention_heads * m.attention_head_dim
    nv, na, nt, n = t["video"], t["action"], t["text"], t["joint"]
    cp = m.vae.latent_channels * math.prod(m.patch_size)
    ha, fa = m.action_hidden, m.action_ffn_dim

    def block(tokens: int, width: int, ffn: int) -> float:
        self_proj = 2 * tokens * width * inner * 4  # q, k, v, out
        cross = 2 * tokens * width * width * 2 + 2 * nt * width * width * 2 + 2 * 2 * tokens * nt * width
        return self_proj + cross + 2 * 2 * tokens * width * ffn

    layers = m.num_layers
    # the last action block is K/V-only (see action_expert.py): its layer has video queries only
    kv_only = 2 * na * ha * inner * 2
    out = {"video_layers": layers * block(nv, d, f),
           "action_layers": (layers - 1) * block(na, ha, fa) + kv_only if na else 0.0,
           "joint_attention": (layers - 1) * 2 * 2 * n * n * inner + 2 * 2 * nv * n * inner,
           "condition_projections": (layers * (cfg.conditioning.path != "concat")  # P_j, and/or the input's E
                                     + (cfg.conditioning.path != "blocks")) * 2 * nv * cp * d,
           "stems": (2 * nv * cp * d * 2 + 2 * nt * (m.text_dim * d + d * d)
                     + 2 * cfg.latent_frames * (m.freq_dim * d + d * d + 6 * d * d)
                     + 2 * cfg.data.state_dim * m.text_dim
                     + (2 * nt * (m.text_dim * ha + ha * ha) * (layers > 1) + 2 * na * cfg.data.action_dim * ha
                        + 2 * (m.freq_dim * ha + ha * ha + 6 * ha * ha) if na else 0))}
    if m.has_frame_actions:  # each future latent frame's actions -> its 7·dim terms (models/frame_actions.py)
        span = m.vae.temporal_stride * cfg.data.frame_stride
        out["frame_actions"] = 2 * (cfg.latent_frames - 1) * (span * cfg.data.action_dim * ha + ha * 7 * d)
    out["total"] = float(sum(out.values()))
    return out


def activation_bytes(cfg: Config, checkpointing: bool) -> float:
    """Saved activations of ONE student forward for one sample (see the module docstring)."""
    m, t = cfg.model, token_counts(cfg)
    inner = m.num_attention_heads * m.attention_head_dim
    per_layer = t["video"] * (56 * m.dim + 24 * inner + 4 * m.ffn_dim)
    if t["action"]:
        per_layer += t["action"] * (56 * m.action_hidden + 24 * inner + 4 * m.action_ffn_dim)
    if not checkpointing:
        return m.num_layers * per_layer
    inputs = 2 * (t["video"] * m.dim + t["action"] * m.action_hidden)  # bf16 layer inputs
    return m.num_layers * inputs + per_layer


def memory_table(cfg: Config, params: dict[str, int]) -> list[dict]:
    p, per_layer = params["total"], params["per_layer"]
    root = p - cfg.model.num_layers * per_layer
    batch = cfg.train.batch_size
    rows = []
    for gpus in GPU_COUNTS:
        for ckpt in (False, True):
            student = 16 * p / gpus
            teacher = 4 * p / gpus
            gathered = 2 * (2 * per_layer + root) + 4 * per_layer
            act = activation_bytes(cfg, ckpt) * batch
            stage2 = student + teacher + gathered + 2 * act
            stage1 = student + gathered + act
            rows.append({"gpus": gpus, "checkpointing": ckpt, "student_gib": student / GIB,
                         "teacher_gib": teacher / GIB, "gathered_gib": gathered / GIB,
                         "activations_gib": 2 * act / GIB, "stage2_total_gib": stage2 / GIB,
                         "stage1_total_gib": stage1 / GIB})
    return rows


def model_info(cfg: Config) -> dict:
    """Everything ``model info`` prints, as a dict."""
    params = parameter_counts(cfg)
    flops = forward_flops(cfg)
    return {"preset": cfg.preset, "parameters": params, "tokens": token_counts(cfg), "forward_flops": flops,
            "train_step_flops_per_sample": {"no_checkpointing": 7 * flops["total"],
                                            "checkpointing": 9 * flops["total"]},
            "batch_size_per_gpu": cfg.train.batch_size, "memory": memory_table(cfg, params)}


def _human(v: float) -> str:
    """1.234e12 -> '1.234 T' (T, G, M, k)."""
    for div, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3f} {unit}"
    return f"{v:.0f} "


def format_info(info: dict) -> str:
    p, t, fl = info["parameters"], info["tokens"], info["forward_flops"]
    lines = [f"preset {info['preset']}",
             "parameters: " + ", ".join(f"{k} {_human(v).replace(' G', ' B')}" for k, v in p.items()
                                        if k != "per_layer"),
             f"tokens per sample: video {t['video']} (first frame {t['first_frame']}) + action {t['action']} "
             f"= {t['joint']} joint; text context {t['text']} (incl. the state token)",
             "forward FLOPs per sample: " + ", ".join(f"{k} {_human(v)}" for k, v in fl.items()),
             f"train-step FLOPs per sample (teacher fwd + 2 student fwd/bwd): "
             f"{_human(info['train_step_flops_per_sample']['no_checkpointing'])} "
             f"({_human(info['train_step_flops_per_sample']['checkpointing'])} with checkpointing)",
             f"memory per GPU, batch {info['batch_size_per_gpu']} per GPU, FSDP2 (GiB; excl. CUDA context/NCCL):",
             f"{'GPUs':>5} {'ckpt':>5} {'student':>8} {'teacher':>8} {'gathered':>9} {'activ.':>8} "
             f"{'stage2':>8} {'stage1':>8}"]
    for r in info["memory"]:
        lines.append(f"{r['gpus']:>5} {'yes' if r['checkpointing'] else 'no':>5} {r['student_gib']:>8.2f} "
                     f"{r['teacher_gib']:>8.2f} {r['gathered_gib']:>9.2f} {r['activations_gib']:>8.2f} "
                     f"{r['stage2_total_gib']:>8.2f} {r['stage1_total_gib']:>8.2f}")
    return "\n".join(lines)
