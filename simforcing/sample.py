"""Inference (SPEC §5): the two-stage guided sampler, the baselines as samplers, and ``generate_run`` (the work of
`simforcing generate`). Loading a run and the evaluation windows/noise: ``simforcing.runs``.

    1. x^s_0 = masked real first frame (simforcing.masking)          -> z^s_0 = VAE(x^s_0),  z^r_0 = VAE(x^r_0)
    2. simulation rollout, N_s Euler steps from noise, no condition  -> c = (z^s_0, ẑ^s_{1:L})   (fixed from here on)
    3. real rollout, N_r Euler steps from noise:  u = u_u + w·(u_c − u_u)
           u_c = R(z, τ, z^r_0, a, …, P(c), g = 1),   u_u = R(z, τ, z^r_0, a, …, g = 0)
    4. decode (z^r_0, ẑ^r_{1:L}) with the VAE

No wasted work: w = 0 runs neither the simulation rollout nor the conditional branch (N_r forwards per sample); w = 1
runs only the conditional branch (N_s + N_r); any other w runs both branches as ONE batched forward of 2B samples per
step (N_s + 2·N_r per-sample evaluations). P_j(c) is computed once per sample (``model.condition_features``) and reused
at every step. Likewise everything a step's forward derives from (actions, state, text) alone — text embeddings and
cross-attention keys/values, the attention mask, and the whole action stream (action tokens never attend to video
tokens) — is computed once per batch (``WorldModel.step_context``), shared by the simulation and a w = 1 real
rollout, so a rollout step costs less than a plain forward (skipped when only one forward would use it). ``forwards`` counts per-sample network evaluations,
measured from the calls actually made.

Noise: ε_r (the real rollout) is drawn from the generator first, then ε_s (simulation) — both always, so the real
rollout of a sample sees the same noise whatever w, N_s or N_r, and a simulation rollout can be reused across
configurations (sweeps). Everything runs under ``torch.no_grad``; bf16 autocast on CUDA when
``cfg.train.mixed_precision == "bf16"`` (``utils.autocast_context(..., cuda_only=True)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Protocol, Sequence

import torch

from simforcing.config import Config, ConfigError
from simforcing.errors import DataError
from simforcing.flow import euler_schedule, euler_step
from simforcing.masking import FirstFrameMasker
from simforcing.media import write_sample_media
from simforcing.runs import collate_one, eval_dataset, load_run, sample_generator, with_dataset_settings
from simforcing.timing import Stopwatch
from simforcing.utils import autocast_context

BASELINES = ("copy-first", "vae-recon")
CONTEXT_KEYS = ("actions", "state0", "text", "text_mask")  # what a rollout's step context is built from


# ----------------------------------------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class SimRollout:
    """A finished simulation rollout, reusable by any real rollout of the same sample and seed."""

    latents: torch.Tensor  # (B, C, L+1, h, w) the condition c = (z^s_0, ẑ^s_{1:L})
    masked_frame: torch.Tensor  # (B, 3, H, W) x^s_0 in [-1, 1]
    n_sim: int
    seconds: float  # masking + encode of x^s_0 + the N_s steps
    forwards: int  # per-sample network evaluations (= n_sim)


@dataclass
class SampleResult:
    """What one sampler call produced for a batch of B windows."""

    real_video: torch.Tensor  # (B, 3, F, H, W) in [-1, 1]
    real_latents: Optional[torch.Tensor]  # (B, C, L+1, h, w): z^r_0 then ẑ^r_{1:L}; None for copy-first
    sim_latents: Optional[torch.Tensor] = None  # (B, C, L+1, h, w) = c; None when no simulation rollout ran
    sim_video: Optional[torch.Tensor] = None  # (B, 3, F, H, W) decoded c (only when asked: not in the latency)
    masked_frame: Optional[torch.Tensor] = None  # (B, 3, H, W) x^s_0
    forwards: int = 0  # per-sample network evaluations (w=0: N_r; w=1: N_s+N_r; else N_s+2·N_r)
    timings: dict = field(default_factory=dict)  # seconds per phase for the whole batch (see evaluate.latency)
    sim: Optional[SimRollout] = None
    sim_reused: bool = False

    @property
    def latency(self) -> float:
        """Seconds for the batch: first-frame encode + simulation + real rollout + decode (evaluate.latency)."""
        return float(sum(self.timings.values()))


class Sampler(Protocol):
    name: str

    def __call__(self, batch: dict, generator: Optional[torch.Generator] = None) -> SampleResult: ...

    def settings(self) -> dict: ...


# ----------------------------------------------------------------------------------------------------------------------
# The guided sampler
# ----------------------------------------------------------------------------------------------------------------------


def guided_velocity(u_c: torch.Tensor, u_u: torch.Tensor, w: float) -> torch.Tensor:
    """u = u_u + w·(u_c − u_u)."""
    return u_u + w * (u_c - u_u)


def model_device(model: torch.nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}


class CountingModel:
    """Calls the model and counts per-sample evaluations (a forward over 2B samples counts 2B)."""

    def __init__(self, model: torch.nn.Module):
        self.model, self.evals = model, 0

    def __call__(self, z_t: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        self.evals += z_t.shape[0]
        return self.model(z_t, *args, **kwargs)


def step_kwargs(model: torch.nn.Module, actions, state0, text, text_mask, uses: int) -> dict:
    """``{"static": model.step_context(...)}`` — the text/action work of a rollout's forwards, done once — for a model
    that offers it (the WorldModel) when ``uses`` >= 2 forwards will share it (for one forward it is only extra work);
    ``{}`` otherwise, and for any other model with the forward signature."""
    if uses < 2 or not hasattr(model, "step_context"):
        return {}
    return {"static": model.step_context(actions, state0, text, text_mask)}


def simulation_rollout(net: CountingModel, z0_sim: torch.Tensor, ctx: dict, noise: torch.Tensor, n_sim: int,
                       shift: float) -> torch.Tensor:
    """N_s Euler steps from ε_s with no condition (gate None). z0_sim (B,C,1,h,w), noise (B,C,L,h,w) -> ẑ^s_{1:L}.
    ctx: actions, state0, text, text_mask, and optionally "once" (:func:`step_kwargs` of them, built here if absent)."""
    sched = euler_schedule(n_sim, shift).tolist()
    b = noise.shape[0]
    a, s0, txt, tm = ctx["actions"], ctx["state0"], ctx["text"], ctx["text_mask"]
    once = ctx["once"] if "once" in ctx else step_kwargs(net.model, a, s0, txt, tm, uses=n_sim)
    z = noise
    for i in range(n_sim):
        tau = torch.full((b,), sched[i], device=z.device)
        u = net(z, tau, z0_sim, a, s0, txt, text_mask=tm, **once)
        z = euler_step(z, u.float(), tau, torch.full((b,), sched[i + 1], device=z.device))
    return z


def real_rollout(net: CountingModel, z0_real: torch.Tensor, ctx: dict, noise: torch.Tensor, n_real: int, shift: float,
                 w: float, cond_feats: Optional[list] = None) -> torch.Tensor:
    """N_r Euler steps from ε_r with the guided velocity. cond_feats: P_j(c) per block, each (B, N_video, dim).

    w = 0: unconditional forwards only; w = 1: conditional only; else both halves in one forward of 2B samples
    (rows [0, B) conditional with gate 1, rows [B, 2B) unconditional with gate 0 and zero features). The step context
    is ctx["once"] when given (B samples), built here otherwise (and always for the 2B batch).
    """
    sched = euler_schedule(n_real, shift).tolist()
    b = noise.shape[0]
    dev = noise.device
    a, s0, txt, tm = ctx["actions"], ctx["state0"], ctx["text"], ctx["text_mask"]
    both = w not in (0.0, 1.0)
    if w != 0.0 and cond_feats is None:
        raise ValueError(f"real_rollout: w = {w} needs the condition features P_j(c); got None")
    if both:  # inputs of the 2B batch, built once: (2B, ...) = [conditional; unconditional]
        z0_2, a_2, s0_2, txt_2 = (torch.cat([x, x]) for x in (z0_real, a, s0, txt))
        tm_2 = torch.cat([tm, tm]) if tm is not None else None
        feats_2 = [torch.cat([f, torch.zeros_like(f)]) for f in cond_feats]
        gate_2 = torch.cat([torch.ones(b, device=dev), torch.zeros(b, device=dev)])
        once = step_kwargs(net.model, a_2, s0_2, txt_2, tm_2, uses=n_real)
    else:
        once = ctx["once"] if "once" in ctx else step_kwargs(net.model, a, s0, txt, tm, uses=n_real)
    z = noise
    for i in range(n_real):
        tau = torch.full((b,), sched[i], device=dev)
        if w == 0.0:
            u = net(z, tau, z0_real, a, s0, txt, text_mask=tm, **once)
        elif w == 1.0:
            u = net(z, tau, z0_real, a, s0, txt, text_mask=tm, cond_feats=cond_feats,
                    gate=torch.ones(b, device=dev), **once)
        else:
            u2 = net(torch.cat([z, z]), torch.cat([tau, tau]), z0_2, a_2, s0_2, txt_2, text_mask=tm_2,
                     cond_feats=feats_2, gate=gate_2, **once)  # (2B, C, L, h, w)
            u = guided_velocity(u2[:b].float(), u2[b:].float(), w)
        z = euler_step(z, u.float(), tau, torch.full((b,), sched[i + 1], device=dev))
    return z


Generators = Optional[torch.Generator | Sequence[torch.Generator]]


def _draw_noise(z0: torch.Tensor, num_future: int, generator: Generators):
    """(ε_r, ε_s), each (B, C, L, h, w) like z0 (B, C, 1, h, w): ε_r first, then ε_s, drawn on the generator's
    device (a CPU generator gives the same noise whatever device the model runs on), then moved to z0's device.

    ``generator`` may be one generator for the batch or a sequence of B, one per sample: sample i then draws its own
    (ε_r, ε_s) from generator i, so a batch of B samples sees the noise of B calls with one sample each."""
    if generator is not None and not isinstance(generator, torch.Generator):
        gens = list(generator)
        if len(gens) != z0.shape[0]:
            raise ValueError(f"generator: got {len(gens)} generators for a batch of {z0.shape[0]} samples")
        pairs = [_draw_noise(z0[i:i + 1], num_future, g) for i, g in enumerate(gens)]
        return torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs])
    shape = (z0.shape[0], z0.shape[1], num_future, z0.shape[3], z0.shape[4])
    where = generator.device if generator is not None else z0.device
    eps_r = torch.randn(shape, generator=generator, device=where, dtype=torch.float32)
    eps_s = torch.randn(shape, generator=generator, device=where, dtype=torch.float32)
    return eps_r.to(z0.device), eps_s.to(z0.device)


@torch.no_grad()
def sample_videos(model: torch.nn.Module, vae, batch: dict, cfg: Config, n_sim: Optional[int] = None,
                  n_real: Optional[int] = None, w: Optional[float] = None,
                  generator: Generators = None, masker: Optional[FirstFrameMasker] = None,
                  decode_sim: bool = False, reuse_sim: Optional[SimRollout] = None,
                  sim_first_frame: Optional[torch.Tensor] = None) -> SampleResult:
    """The two-stage guided sampler on a batch of paired windows (see the module docstring).

    batch: ``real`` (B, 3, F, H, W) (its first frame is the given observation; F = 1 is enough), ``actions``
    (B, A_w, action_dim), ``state0`` (B, S), ``text`` (B, N, D), ``text_mask`` (B, N), plus what the masker needs.
    n_sim/n_real/w default to cfg.sample. ``generator``: one for the batch or one per sample (:func:`_draw_noise`).
    ``reuse_sim``: a SimRollout of the same batch and seed with the same N_s (its time and forwards are charged to
    this call). Pass ``masker`` when calling repeatedly (SAM3 would otherwise load on every call).
    ``sim_first_frame`` (B, 3, H, W): x^s_0 itself — the simulation rollout starts from it and no masking runs (a
    long rollout continues its simulation chain from its own last frame, ``simforcing.rollout``).
    Returns a SampleResult; ``forwards`` is per sample.
    """
    n_sim = cfg.sample.n_sim if n_sim is None else int(n_sim)
    n_real = cfg.sample.n_real if n_real is None else int(n_real)
    w = float(cfg.sample.w if w is None else w)
    if n_sim < 1 or n_real < 1 or w < 0:
        raise ConfigError(f"sample: got n_sim={n_sim}, n_real={n_real}, w={w}; expected step counts >= 1 and w >= 0")
    w = effective_w(cfg, w)
    device = model_device(model)
    batch = to_device(batch, device)
    ctx = {k: batch.get(k) for k in CONTEXT_KEYS}
    net = CountingModel(model)
    sw = Stopwatch(device)
    num_future = cfg.latent_frames - 1
    amp = autocast_context(cfg, device, cuda_only=True)  # the network only; the VAE runs in its own precision
    with sw.phase("encode_first_frame"):
        z0_real = vae.encode(batch["real"][:, :, :1]).float()  # (B, C, 1, h, w)
    eps_r, eps_s = _draw_noise(z0_real, num_future, generator)
    sim = None
    if w != 0.0 and reuse_sim is not None:
        if reuse_sim.n_sim != n_sim:
            raise ValueError(f"reuse_sim: the rollout has n_sim={reuse_sim.n_sim}; this call asks n_sim={n_sim}")
        sim = reuse_sim
        sw.add("simulation", sim.seconds)
    elif w != 0.0 and cfg.sample.condition == "oracle":  # analysis: c = the window's recorded sim video
        if "sim" not in batch:
            raise ConfigError("sample.condition=oracle: the batch has no recorded 'sim' video to condition on")
        with sw.phase("simulation"):
            c = vae.encode(batch["sim"]).float()  # (B, C, L+1, h, w)
        sim = SimRollout(c, batch["sim"][:, :, 0], 0, sw.times["simulation"], 0)
    elif w != 0.0:
        with sw.phase("simulation"):
            if sim_first_frame is not None:
                masked = sim_first_frame.to(device)
            else:
                masker = masker or FirstFrameMasker.from_config(cfg, device)
                masked, _ = masker(batch)
            z0_sim = vae.encode(masked[:, :, None]).float()  # (B, C, 1, h, w)
            with amp:
                uses = n_sim + (n_real if w == 1.0 else 0)  # a w = 1 real rollout shares it
                ctx["once"] = step_kwargs(model, *(ctx[k] for k in CONTEXT_KEYS), uses=uses)
                zs = simulation_rollout(net, z0_sim, ctx, eps_s, n_sim, cfg.flow.shift)
            c = torch.cat([z0_sim, zs], dim=2)  # (B, C, L+1, h, w)
        sim = SimRollout(c, masked, n_sim, sw.times["simulation"], net.evals // z0_real.shape[0])
    with sw.phase("real"), amp:
        feats = model.condition_features(sim.latents) if sim is not None else None
        zr = real_rollout(net, z0_real, ctx, eps_r, n_real, cfg.flow.shift, w, feats)
    real_latents = torch.cat([z0_real, zr.float()], dim=2)  # (B, C, L+1, h, w)
    with sw.phase("decode"):
        video = vae.decode(real_latents).float().clamp(-1, 1)
    sim_video = vae.decode(sim.latents).float().clamp(-1, 1) if (decode_sim and sim is not None) else None
    b = z0_real.shape[0]
    forwards = net.evals // b + (sim.forwards if (sim is not None and reuse_sim is not None) else 0)
    return SampleResult(real_video=video, real_latents=real_latents, sim_latents=sim.latents if sim else None,
                        sim_video=sim_video, masked_frame=sim.masked_frame if sim else None, forwards=forwards,
                        timings=dict(sw.times), sim=sim, sim_reused=reuse_sim is not None)


def effective_w(cfg: Config, w: float) -> float:
    """A model trained with ``conditioning.p = 0`` (sft, joint_fm, value/motion distillation) never saw a condition:
    its zero-initialised ``cond_proj`` stayed zero, so its conditional branch equals the unconditional one and any w
    gives the w = 0 sample. It samples as w = 0 (no simulation rollout, N_r forwards instead of N_s + 2 N_r)."""
    return 0.0 if cfg.conditioning.p == 0.0 else float(w)


class GuidedSampler:
    """``sample_videos`` with fixed settings: ``sampler(batch, generator) -> SampleResult``."""

    name = "simforcing-sampler"

    def __init__(self, model, vae, cfg: Config, n_sim: Optional[int] = None, n_real: Optional[int] = None,
                 w: Optional[float] = None, masker: Optional[FirstFrameMasker] = None, decode_sim: bool = False):
        self.model, self.vae, self.cfg, self.decode_sim = model, vae, cfg, decode_sim
        self.n_sim = cfg.sample.n_sim if n_sim is None else int(n_sim)
        self.n_real = cfg.sample.n_real if n_real is None else int(n_real)
        self.w_asked = float(cfg.sample.w if w is None else w)
        self.w = effective_w(cfg, self.w_asked)
        # SAM3 is loaded once here, and only when a simulation rollout will run
        self.masker = masker or (FirstFrameMasker.from_config(cfg, model_device(model)) if self.w != 0 else None)

    def __call__(self, batch: dict, generator: Generators = None, reuse_sim: Optional[SimRollout] = None,
                 sim_first_frame: Optional[torch.Tensor] = None) -> SampleResult:
        return sample_videos(self.model, self.vae, batch, self.cfg, self.n_sim, self.n_real, self.w, generator,
                             self.masker, self.decode_sim, reuse_sim, sim_first_frame)

    def settings(self) -> dict:
        out = {"sampler": self.name, "n_sim": self.n_sim, "n_real": self.n_real, "w": self.w,
               "condition": self.cfg.sample.condition,
               "mask_mode": self.cfg.sample.mask_mode, "seed": self.cfg.sample.seed, "shift": self.cfg.flow.shift}
        if self.w != self.w_asked:
            out["w_asked"] = self.w_asked  # an unconditioned model (conditioning.p = 0): see effective_w
        return out


class CopyFirstSampler:
    """Baseline floor: every frame = the given real first frame. No model, no VAE."""

    name = "copy-first"

    def __call__(self, batch: dict, generator: Optional[torch.Generator] = None) -> SampleResult:
        real = batch["real"]  # (B, 3, F, H, W)
        sw = Stopwatch(real.device)
        with sw.phase("copy"):
            video = real[:, :, :1].expand_as(real).clone()
        return SampleResult(real_video=video, real_latents=None, timings=dict(sw.times))

    def settings(self) -> dict:
        return {"sampler": self.name}


class VaeReconSampler:
    """Baseline ceiling: decode(encode(ground truth)) — what any latent model can at best reproduce."""

    name = "vae-recon"

    def __init__(self, vae, device: torch.device | str = "cpu"):
        self.vae, self.device = vae, torch.device(device)

    @torch.no_grad()
    def __call__(self, batch: dict, generator: Optional[torch.Generator] = None) -> SampleResult:
        real = batch["real"].to(self.device)
        sw = Stopwatch(self.device)
        with sw.phase("encode"):
            z = self.vae.encode(real)
        with sw.phase("decode"):
            video = self.vae.decode(z).float().clamp(-1, 1)
        return SampleResult(real_video=video, real_latents=z, timings=dict(sw.times))

    def settings(self) -> dict:
        return {"sampler": self.name}


# ----------------------------------------------------------------------------------------------------------------------
# Sampling a run to files (`simforcing generate`)
# ----------------------------------------------------------------------------------------------------------------------


def generate_run(run_dir: str | Path, data_root: str | Path, cfg: Optional[Config], split: str, num_samples: int,
                 out_dir: str | Path, step: Optional[int] = None, device: str | torch.device = "cpu",
                 upscale: int = 4, fps: int = 4) -> list[str]:
    """Sample the first ``num_samples`` windows of ``split``; write per sample ``sample_XXX.{mp4,gif,png}`` with four
    panels (masked first frame | simulation rollout | prediction | ground truth). Returns the GIF paths."""
    cfg, model, vae, meta = load_run(run_dir, cfg, device, step)
    cfg = with_dataset_settings(cfg, data_root)
    device = model_device(model)
    ds = eval_dataset(cfg, data_root, split, meta.get("stats") if isinstance(meta, dict) else None)
    masker = FirstFrameMasker.from_config(cfg, device)
    sampler = GuidedSampler(model, vae, cfg, masker=masker, decode_sim=True)
    out = Path(out_dir)
    gifs = []
    for i in range(min(num_samples, len(ds))):
        batch = collate_one(ds[i])
        res = sampler(batch, sample_generator(cfg, i))
        masked = res.masked_frame if res.masked_frame is not None else _display_mask(masker, batch, device)
        title = (f"{batch['episode_id'][0]} @ {int(batch['start'][0])}  N_s={sampler.n_sim} N_r={sampler.n_real} "
                 f"w={sampler.w:g}")
        files = write_sample_media(out / f"sample_{i:03d}", None if masked is None else masked[0],
                                   None if res.sim_video is None else res.sim_video[0], res.real_video[0],
                                   batch["real"][0], title=title, sim_label=f"w={sampler.w:g}: none",
                                   upscale=upscale, fps=fps)
        gifs.append(str(files["gif"]))
    return gifs


def _display_mask(masker: FirstFrameMasker, batch: dict, device) -> Optional[torch.Tensor]:
    """x^s_0 for the first panel when the sampler did not need it (w = 0); None when it cannot be built."""
    try:
        return masker(to_device(batch, device))[0]
    except (DataError, ConfigError):
        return None
