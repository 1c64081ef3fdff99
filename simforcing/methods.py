"""Training step functions, one per method (SPEC §3, §4, §6), and the method presets.

    loss, logs = METHODS[name](student, teacher, batch, cfg, gen)

``batch`` holds latents ``z_sim``, ``z_real`` (B, C, L+1, h, w) — ``z[:, :, :1]`` is the clean ``z_0``, ``z[:, :, 1:]``
the future — plus ``actions`` (B, A_w, action_dim), ``state0`` (B, state_dim), ``text`` (B, N, text_dim),
``text_mask`` (B, N). ``gen`` is a torch.Generator on the batch device; every random number comes from it, drawn in a
fixed order: ε, t, then (simforcing) the gate and the corruption — so all methods see the same ε and τ for one seed.

A method is a step function plus a preset. ``method_preset(cfg, name)`` sets ``train.method`` and the weights the
method implies, and leaves every other field (and the kept weights' values) as they are:

| method           | terms computed (λ from cfg.loss)          | preset zeroes          | p (gate)   | teacher |
|------------------|-------------------------------------------|------------------------|------------|---------|
| `video_prior`    | FM on single videos, λ = 1 (stage 0)      | nothing (loss unused)  | 0          | no      |
| `sim_pretrain`   | FM on sim, λ = 1 (stage 1, SPEC §3)       | nothing (loss unused)  | —          | no      |
| `sft`            | fm_real                                   | fm_sim, md_*, value_*  | 0          | no      |
| `joint_fm`       | fm_real, fm_sim                           | md_*, value_*          | 0          | no      |
| `value_distill`  | fm_real, fm_sim, value_real, value_sim    | md_*                   | 0          | yes     |
| `motion_distill` | fm_real, fm_sim, md_real, md_sim          | value_*                | 0          | yes     |
| `simforcing`     | fm_real, fm_sim, md_real, md_sim; c and g | value_*                | kept (0.7) | yes     |

`video_prior` (stage 0, ``simforcing.prior``: what stands in for Wan2.2 where no video model exists) reads
``z_video`` (B, C, L+1, h, w), single sim or real videos, and the text: text + first frame -> video. The network
gets no action tokens and no proprio-state token, whatever the batch holds (its preset records
``conditioning.action_dropout = 1``, every sample's actions dropped, and p = 0).
`sim_pretrain` drops each sample's actions with probability conditioning.action_dropout (``action_keep`` False).
A step computes only its method's terms, and of those only the ones with a weight > 0: no teacher forward without a
distillation term, no student pass on a domain without a term, no condition unless the method is `simforcing` with
p > 0 (so `simforcing` with p = 0 is `motion_distill`). Every term is weighted per sample by ``flow.loss_weight(t)``.
The two student passes (real with its gate, sim with gate 0) run as ONE forward of 2B samples.

``logs`` (floats): each computed term by name — ``fm_real``, ``fm_sim``, ``md_real``, ``md_sim``, ``value_real``,
``value_sim`` (before its λ, after the timestep weight), ``fm_video`` (video_prior) — ``loss`` (the total),
``gate_mean`` and ``corrupt_frac`` (0 when no condition is used); `sim_pretrain` adds ``action_drop_frac``. A
non-finite term raises ``losses.NonFiniteLoss(term, value)``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn

import simforcing.flow as flow
from simforcing.config import METHOD_NAMES, STAGE2_METHODS, VIDEO_PRIOR_METHOD, Config, ConfigError
from simforcing.losses import (Term, corrupt_condition, flow_matching_loss, latent_motion, motion_distill_loss,
                               region_weight, sample_gate, value_distill_loss, weighted_total)

StepFn = Callable[[nn.Module, Optional[nn.Module], dict, Config, torch.Generator], "tuple[torch.Tensor, dict]"]
TEACHER_TERMS = ("md_real", "md_sim", "value_real", "value_sim")  # the distillation terms: they read the teacher


@dataclass
class ModelInputs:
    """One network call (DESIGN "The network"); ``run(model)`` returns û (B, C, L, h, w) in float32."""

    z_t: torch.Tensor  # (B, C, L, h, w)
    tau: torch.Tensor  # (B,)
    z0: torch.Tensor  # (B, C, 1, h, w)
    actions: Optional[torch.Tensor]  # (B, A_w, action_dim); None: no action tokens (video_prior)
    state0: Optional[torch.Tensor]  # (B, state_dim); None: no state token (video_prior)
    text: torch.Tensor  # (B, N, text_dim)
    text_mask: Optional[torch.Tensor] = None  # (B, N) bool
    cond: Optional[torch.Tensor] = None  # (B, C, L+1, h, w)
    gate: Optional[torch.Tensor] = None  # (B,) float in {0, 1}
    action_keep: Optional[torch.Tensor] = None  # (B,) bool
    context_tau: Optional[torch.Tensor] = None  # (B,) noise level of a corrupted z0 (train.context_noise)

    def run(self, model: nn.Module) -> torch.Tensor:
        kw = {} if self.context_tau is None else {"context_tau": self.context_tau}
        u = model(self.z_t, self.tau, self.z0, self.actions, self.state0, self.text, text_mask=self.text_mask,
                  cond=self.cond, gate=self.gate, action_keep=self.action_keep, **kw)
        return u.float()


def concat_inputs(a: ModelInputs, b: ModelInputs) -> ModelInputs:
    """Stack two calls along the batch (B_a + B_b). A side without a condition gets cond = 0 with gate 0, which the
    network treats exactly as no condition; a side without action_keep keeps all its actions."""
    def cat(x, y, fill_x, fill_y):
        if x is None and y is None:
            return None
        return torch.cat([x if x is not None else fill_x(y), y if y is not None else fill_y(x)], dim=0)

    def gate_fill(n_like):
        return lambda other: torch.zeros(n_like, dtype=other.dtype, device=other.device)

    def keep_fill(n_like):
        return lambda other: torch.ones(n_like, dtype=torch.bool, device=other.device)

    def cond_fill(n_like):
        return lambda other: torch.zeros((n_like,) + other.shape[1:], dtype=other.dtype, device=other.device)

    def tau_fill(n_like):
        return lambda other: torch.zeros(n_like, dtype=other.dtype, device=other.device)

    ba, bb = a.z_t.shape[0], b.z_t.shape[0]
    has_cond = a.cond is not None or b.cond is not None
    if has_cond and ((a.cond is None) != (a.gate is None) or (b.cond is None) != (b.gate is None)):
        raise ValueError("concat_inputs: cond and gate must be given together")
    return ModelInputs(
        **{f: torch.cat([getattr(a, f), getattr(b, f)], dim=0)
           for f in ("z_t", "tau", "z0", "actions", "state0", "text")},
        text_mask=cat(a.text_mask, b.text_mask, keep_fill(ba), keep_fill(bb)),
        cond=cat(a.cond, b.cond, cond_fill(ba), cond_fill(bb)),
        gate=cat(a.gate, b.gate, gate_fill(ba), gate_fill(bb)),
        action_keep=cat(a.action_keep, b.action_keep, keep_fill(ba), keep_fill(bb)),
        context_tau=cat(a.context_tau, b.context_tau, tau_fill(ba), tau_fill(bb)),
    )


def paired_student_forward(student: nn.Module, real: ModelInputs,
                           sim: ModelInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Both student passes as ONE forward of 2B samples; returns (û_real, û_sim), each (B, C, L, h, w)."""
    u = concat_inputs(real, sim).run(student)  # (2B, C, L, h, w)
    return u[: real.z_t.shape[0]], u[real.z_t.shape[0]:]


# ----------------------------------------------------------------------------------------------------------------------
# Shared pieces
# ----------------------------------------------------------------------------------------------------------------------


def _latents(batch: dict, key: str, method: str) -> tuple[torch.Tensor, torch.Tensor]:
    """batch[key] (B, C, L+1, h, w) -> (z0 (B, C, 1, h, w), future (B, C, L, h, w))."""
    if key not in batch:
        raise KeyError(f"method {method}: the batch has no {key!r} (keys: {', '.join(sorted(batch))}); "
                       f"expected latents (B, C, L+1, h, w)")
    z = batch[key]
    if z.dim() != 5 or z.shape[2] < 2:
        raise ValueError(f"method {method}: batch[{key!r}] must be (B, C, L+1, h, w) with L >= 1, "
                         f"got {tuple(z.shape)}")
    return z[:, :, :1], z[:, :, 1:]


def _inputs(batch: dict, z_t: torch.Tensor, tau: torch.Tensor, z0: torch.Tensor, **kw) -> ModelInputs:
    for key in ("actions", "state0", "text"):
        if key not in batch:
            raise KeyError(f"the batch has no {key!r} (keys: {', '.join(sorted(batch))})")
    return ModelInputs(z_t, tau, z0, batch["actions"], batch["state0"], batch["text"], batch.get("text_mask"), **kw)


def _finish(terms: dict[str, Term], lambdas: dict[str, float], extra: dict[str, float]) -> tuple[torch.Tensor, dict]:
    """Total = Σ λ·term (``losses.weighted_total``: logs every term and the total, NaN/inf named); adds ``extra``."""
    loss, logs = weighted_total({name: (lambdas[name], term.value) for name, term in terms.items()})
    logs.update(extra)
    return loss, logs


# ----------------------------------------------------------------------------------------------------------------------
# Stage 0: the video prior
# ----------------------------------------------------------------------------------------------------------------------


def video_prior_step(student: nn.Module, teacher: Optional[nn.Module], batch: dict, cfg: Config,
                     gen: torch.Generator) -> tuple[torch.Tensor, dict]:
    """Flow matching on single videos ``z_video``: text + first frame -> video. No action tokens and no state token
    reach the network (``actions=None``, ``state0=None``), whatever the batch holds."""
    z0, z = _latents(batch, "z_video", VIDEO_PRIOR_METHOD)
    if "text" not in batch:
        raise KeyError(f"the batch has no 'text' (keys: {', '.join(sorted(batch))})")
    b = z.shape[0]
    eps = torch.randn(z.shape, generator=gen, device=z.device, dtype=z.dtype)
    tau, t = flow.sample_tau(b, cfg.flow, gen, z.device)
    u_hat = ModelInputs(flow.add_noise(z, eps, tau), tau, z0, None, None, batch["text"],
                        batch.get("text_mask")).run(student)
    term = flow_matching_loss(u_hat, flow.velocity_target(z, eps), flow.loss_weight(t, cfg.flow))
    return _finish({"fm_video": term}, {"fm_video": 1.0}, {"gate_mean": 0.0, "corrupt_frac": 0.0})


# ----------------------------------------------------------------------------------------------------------------------
# Stage 1
# ----------------------------------------------------------------------------------------------------------------------


def sim_pretrain_step(student: nn.Module, teacher: Optional[nn.Module], batch: dict, cfg: Config,
                      gen: torch.Generator) -> tuple[torch.Tensor, dict]:
    """SPEC §3: flow matching on z_sim; each sample's actions dropped with prob. conditioning.action_dropout."""
    z0, z = _latents(batch, "z_sim", "sim_pretrain")
    b = z.shape[0]
    eps = torch.randn(z.shape, generator=gen, device=z.device, dtype=z.dtype)
    tau, t = flow.sample_tau(b, cfg.flow, gen, z.device)
    keep = torch.rand(b, generator=gen, device=z.device) >= cfg.conditioning.action_dropout
    u_hat = _inputs(batch, flow.add_noise(z, eps, tau), tau, z0, action_keep=keep).run(student)
    term = flow_matching_loss(u_hat, flow.velocity_target(z, eps), flow.loss_weight(t, cfg.flow))
    extra = {"gate_mean": 0.0, "corrupt_frac": 0.0, "action_drop_frac": float((~keep).float().mean())}
    return _finish({"fm_sim": term}, {"fm_sim": 1.0}, extra)


# ----------------------------------------------------------------------------------------------------------------------
# Stage 2
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    """Which loss terms a stage-2 method computes (weights from cfg.loss) and whether it conditions on c."""

    name: str
    terms: tuple[str, ...]
    condition: bool = False


def _stage2_step(recipe: Recipe, student: nn.Module, teacher: Optional[nn.Module], batch: dict, cfg: Config,
                 gen: torch.Generator) -> tuple[torch.Tensor, dict]:
    lambdas = {name: float(getattr(cfg.loss, name)) for name in recipe.terms}
    active = {name for name, lam in lambdas.items() if lam > 0}
    if not active:
        raise ConfigError(f"loss.{recipe.terms[0]}: method {recipe.name} has every weight at 0 "
                          f"({', '.join(f'loss.{n}' for n in recipe.terms)}); expected at least one > 0")
    need_teacher = bool(active & set(TEACHER_TERMS))
    need_real = bool(active & {"fm_real", "md_real", "value_real"})
    need_sim_student = bool(active & {"fm_sim", "md_sim", "value_sim"})
    if need_teacher and teacher is None:
        raise ValueError(f"method {recipe.name}: terms {sorted(active)} need the frozen teacher, got teacher=None")

    zr0, zr = _latents(batch, "z_real", recipe.name)
    zs0, zs = _latents(batch, "z_sim", recipe.name) if (need_teacher or need_sim_student) else (None, None)
    b = zr.shape[0]
    # 1. one ε and one τ per sample, shared by both domains
    eps = torch.randn(zr.shape, generator=gen, device=zr.device, dtype=zr.dtype)
    tau, t = flow.sample_tau(b, cfg.flow, gen, zr.device)
    weight = flow.loss_weight(t, cfg.flow)
    zr_t = flow.add_noise(zr, eps, tau)
    zs_t = flow.add_noise(zs, eps, tau) if zs is not None else None
    # 2-3. gate and (possibly corrupted) condition c from the whole sim latent; corruption touches only c
    real_kw: dict = {}
    extra = {"gate_mean": 0.0, "corrupt_frac": 0.0}
    if recipe.condition and cfg.conditioning.p > 0 and need_real:
        gate = sample_gate(b, cfg.conditioning.p, gen, zr.device)
        c, applied = corrupt_condition(batch["z_sim"], cfg.conditioning, gen)
        real_kw = {"cond": c, "gate": gate.to(zr.dtype)}
        extra = {"gate_mean": float(gate.mean()), "corrupt_frac": float(applied.float().mean())}
    # beyond the paper: the student's first latents degraded (train.context_ghost / context_noise)
    real_z0, sim_z0, ctx_kw = student_context(zr0, zs0, batch, cfg, gen)
    # 4. forward passes: teacher (no grad), student real (c, g) + student sim (no condition) as one batch
    zhat_s = m_s = None
    if need_teacher:
        with torch.no_grad():
            u_s = _inputs(batch, zs_t, tau, zs0).run(teacher)
        zhat_s = flow.clean_estimate(zs_t, tau, u_s).detach()
        m_s = latent_motion(zs0, zhat_s)
    real_in = _inputs(batch, zr_t, tau, real_z0, **real_kw, **ctx_kw) if need_real else None
    sim_in = _inputs(batch, zs_t, tau, sim_z0, **ctx_kw) if need_sim_student else None
    if real_in is not None and sim_in is not None:
        u_r, u_ss = paired_student_forward(student, real_in, sim_in)
    else:
        u_r = real_in.run(student) if real_in is not None else None
        u_ss = sim_in.run(student) if sim_in is not None else None
    # 5-6. clean estimates, motions and the weighted terms (the arm's region weighted with loss.arm_weight)
    rw = arm_region(batch, cfg, recipe.name)
    terms: dict[str, Term] = {}
    if "fm_real" in active:
        terms["fm_real"] = flow_matching_loss(u_r, flow.velocity_target(zr, eps), weight, rw)
    if "fm_sim" in active:
        terms["fm_sim"] = flow_matching_loss(u_ss, flow.velocity_target(zs, eps), weight, rw)
    zhat_r = flow.clean_estimate(zr_t, tau, u_r) if u_r is not None else None
    zhat_ss = flow.clean_estimate(zs_t, tau, u_ss) if u_ss is not None else None
    if "md_real" in active:
        terms["md_real"] = motion_distill_loss(latent_motion(zr0, zhat_r), m_s, weight, rw)
    if "md_sim" in active:
        terms["md_sim"] = motion_distill_loss(latent_motion(zs0, zhat_ss), m_s, weight, rw)
    if "value_real" in active:
        terms["value_real"] = value_distill_loss(zhat_r, zhat_s, weight, rw)
    if "value_sim" in active:
        terms["value_sim"] = value_distill_loss(zhat_ss, zhat_s, weight, rw)
    return _finish(terms, lambdas, extra)


def student_context(zr0: torch.Tensor, zs0: Optional[torch.Tensor], batch: dict, cfg: Config,
                    gen: torch.Generator) -> tuple[torch.Tensor, Optional[torch.Tensor], dict]:
    """The student's first latents as a degraded context, against the drift of long rollouts (beyond the paper; the
    targets, the motions' anchors and the teacher keep the clean z0, so the student learns to predict the recorded
    future from a degraded start, as a long rollout hands it one). Drawn after every other random number of the step:

    - ``train.context_ghost`` = a_max > 0: the real z0 blended with the pose of F − 1 frames earlier,
      z0' = (1 − a)·z0 + a·z_prev,0, a ~ U(0, a_max) per sample (``z_real_prev``: the trainer's two-chunk windows) —
      the blur of poses a rollout's later chunks start from;
    - ``train.context_noise`` = σ_max > 0 (after GameNGen): both domains' z0' = (1 − σ)·z0' + σ·η, σ ~ U(0, σ_max)
      per sample, η ~ N(0, I) per domain, and σ passed to the network as the first frame's flow time.

    Returns (real z0, sim z0, {"context_tau": σ} or {})."""
    a_max, sigma_max = float(cfg.train.context_ghost), float(cfg.train.context_noise)
    b, dev = zr0.shape[0], zr0.device
    if a_max > 0:
        if "z_real_prev" not in batch:
            raise ValueError("train.context_ghost: the batch has no 'z_real_prev' (the chunk before each window); "
                             "the trainer reads two-chunk windows when context_ghost > 0 (methods.rollout_windows)")
        a = (a_max * torch.rand(b, generator=gen, device=dev)).view(-1, 1, 1, 1, 1).to(zr0.dtype)
        zr0 = (1 - a) * zr0 + a * batch["z_real_prev"][:, :, :1]
    if sigma_max <= 0:
        return zr0, zs0, {}
    sigma = sigma_max * torch.rand(b, generator=gen, device=dev)
    noisy = [None if z is None else flow.add_noise(z, torch.randn(z.shape, generator=gen, device=z.device,
                                                                  dtype=z.dtype), sigma) for z in (zr0, zs0)]
    return noisy[0], noisy[1], {"context_tau": sigma}


def arm_region(batch: dict, cfg: Config, method: str) -> Optional[torch.Tensor]:
    """``losses.region_weight`` of the batch's arm masks with strength ``loss.arm_weight`` (B, 1, L, h, w), or None
    when the weight is 0. Samples without a mask (``has_arm_mask`` False) weight every position alike. The sim and
    real frames of a pair show the arm at the same pixels, so one weight serves both domains' terms."""
    strength = float(cfg.loss.arm_weight)
    if strength <= 0:
        return None
    if "arm_mask" not in batch:
        raise ConfigError(f"loss.arm_weight={strength}: method {method}'s batches carry no arm masks (a latent cache "
                          "has none); train from the dataset's frames, or set --loss.arm_weight=0")
    mask = batch["arm_mask"].bool()  # (B, F, H, W)
    if "has_arm_mask" in batch:
        mask = mask & batch["has_arm_mask"].bool().view(-1, 1, 1, 1)
    v = cfg.model.vae
    return region_weight(mask, v.temporal_stride, v.spatial_stride, strength)


RECIPES: dict[str, Recipe] = {
    "sft": Recipe("sft", ("fm_real",)),
    "joint_fm": Recipe("joint_fm", ("fm_real", "fm_sim")),
    "value_distill": Recipe("value_distill", ("fm_real", "fm_sim", "value_real", "value_sim")),
    "motion_distill": Recipe("motion_distill", ("fm_real", "fm_sim", "md_real", "md_sim")),
    "simforcing": Recipe("simforcing", ("fm_real", "fm_sim", "md_real", "md_sim"), condition=True),
}


def _stage2(name: str) -> StepFn:
    recipe = RECIPES[name]

    def step(student, teacher, batch, cfg, gen):
        return _stage2_step(recipe, student, teacher, batch, cfg, gen)

    step.__name__ = f"{name}_step"
    step.__doc__ = f"Stage-2 method {name!r}: terms {', '.join(recipe.terms)}" + (" with simulation conditioning."
                                                                                 if recipe.condition else ".")
    return step


METHODS: dict[str, StepFn] = {VIDEO_PRIOR_METHOD: video_prior_step, "sim_pretrain": sim_pretrain_step,
                               **{name: _stage2(name) for name in RECIPES}}
assert tuple(RECIPES) == STAGE2_METHODS and tuple(METHODS) == METHOD_NAMES, "one method list: config.METHOD_NAMES"

_ALL_TERMS = ("fm_real", "fm_sim", "md_real", "md_sim", "value_real", "value_sim")  # loss.* weights of terms


def needs_teacher(cfg: Config) -> bool:
    """Whether ``cfg.train.method`` computes a distillation term (one of ``TEACHER_TERMS`` with a weight > 0), i.e.
    whether a step reads the frozen teacher (the table's last column)."""
    recipe = RECIPES.get(cfg.train.method)
    return recipe is not None and any(t in TEACHER_TERMS and getattr(cfg.loss, t) > 0 for t in recipe.terms)


def method_preset(cfg: Config, name: str) -> Config:
    """Set cfg.train.method = name, zero the weights of terms the method does not compute and, for every method but
    simforcing, conditioning.p = 0 (see the table above; video_prior also records action_dropout = 1). Modifies
    ``cfg`` in place and returns it."""
    if name not in METHODS:
        raise ConfigError(f"train.method: got {name!r}; expected one of {', '.join(METHOD_NAMES)}")
    cfg.train.method = name
    if name == VIDEO_PRIOR_METHOD:  # what the step does, recorded in the run's config
        cfg.conditioning.p, cfg.conditioning.action_dropout = 0.0, 1.0
        return cfg
    if name == "sim_pretrain":
        return cfg
    recipe = RECIPES[name]
    for term in _ALL_TERMS:
        if term not in recipe.terms:
            setattr(cfg.loss, term, 0.0)
    if not recipe.condition:
        cfg.conditioning.p = 0.0
    return cfg


# ----------------------------------------------------------------------------------------------------------------------
# Training on the model's own rollouts (train.rollout_prob)
# ----------------------------------------------------------------------------------------------------------------------


def needs_previous_chunk(cfg: Config) -> bool:
    """Whether a step reads the chunk before its window (``*_prev``): training on own rollouts, or on first frames
    ghosted with an earlier pose (``train.context_ghost``)."""
    return cfg.train.rollout_prob > 0 or cfg.train.context_ghost > 0


def rollout_windows(cfg: Config) -> Config:
    """The data config of a run that reads the previous chunk (:func:`needs_previous_chunk`): windows of two chunks
    (2F − 1 frames; the second is the training window); ``cfg`` itself otherwise."""
    if not needs_previous_chunk(cfg):
        return cfg
    c = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, frames=2 * cfg.data.frames - 1))
    return c


@torch.no_grad()
def own_first_frames(student: nn.Module, vae, batch: dict, cfg: Config, gen: torch.Generator,
                     domain: str) -> dict:
    """The window's first latent replaced, with probability ``train.rollout_prob`` per sample, by the student's own
    prediction of that frame: one Euler step from noise over the previous chunk of the same episode (its
    conditional mean: no condition, no gradient), decoded, its last frame re-encoded as a first frame — what a long
    rollout hands the next chunk (``simforcing.rollout``); the targets stay the recorded future. The batch carries
    the previous chunk as ``z_<domain>_prev``, ``actions_prev``, ``state0_prev`` (the trainer's two-chunk windows).
    Returns a new batch (``rollout_frac`` in it: the share replaced)."""
    key = f"z_{domain}"
    z = batch[key]
    sel = torch.rand(z.shape[0], generator=gen, device=gen.device).to(z.device) < cfg.train.rollout_prob
    out = dict(batch, rollout_frac=sel.float().mean())
    if not bool(sel.any()):
        return out
    prev = batch[f"{key}_prev"][sel]  # (b, C, L+1, h, w)
    z0, future = prev[:, :, :1], prev[:, :, 1:]
    noise = torch.randn(future.shape, generator=gen, device=gen.device).to(future)
    tau = torch.ones(prev.shape[0], device=z.device)
    mask = batch.get("text_mask")
    u = student(noise, tau, z0, batch["actions_prev"][sel], batch["state0_prev"][sel], batch["text"][sel],
                text_mask=None if mask is None else mask[sel]).float()
    video = vae.decode(torch.cat([z0, flow.clean_estimate(noise, tau, u)], dim=2))  # (b, 3, F, H, W)
    replaced = z.clone()
    replaced[sel, :, :1] = vae.encode(video[:, :, -1:].clamp(-1, 1)).to(z.dtype)
    out[key] = replaced
    return out