"""Inference (SPEC §5): the two-stage guided sampler, the baselines as samplers, and ``generate_run`` (the work of
`simforcing generate`). Its input is a ``sampler_batch.SamplerBatch``; a run loaded for sampling is a
``runs.loaded.LoadedWorldModel``, and :func:`sampler_for` is its sampler.

    1. x^s_0 = masked real first frame (simforcing.masking)          -> z^s_0 = VAE(x^s_0),  z^r_0 = VAE(x^r_0)
    2. simulation rollout, N_s Euler steps from noise, no condition  -> c = (z^s_0, ẑ^s_{1:L})   (fixed from here on)
    3. real rollout, N_r Euler steps from noise:  u = u_u + w·(u_c − u_u)
           u_c = R(z, τ, z^r_0, a, …, P(c), g = 1),   u_u = R(z, τ, z^r_0, a, …, g = 0)
    4. decode (z^r_0, ẑ^r_{1:L}) with the VAE

Where c comes from is one seam, a ``ConditionSource`` (``sample.condition``): steps 1–2 (``rollout``), the
window's recorded sim video (``oracle``) or the robot's digital twin rendering the window's actions (``render``,
``simforcing.twin``). Both rollouts are one integration loop (:func:`integrate`) of a velocity
function; the network is called with its inputs by name (``CountingModel.velocity``). Every sampler has the
``Sampler`` signature: ``sampler(batch, generator) -> SampleResult`` and ``settings()``.

No wasted work: w = 0 runs neither the simulation rollout nor the conditional branch (N_r forwards per sample); w = 1
runs only the conditional branch (N_s + N_r); any other w runs both branches as ONE batched forward of 2B samples per
step (N_s + 2·N_r per-sample evaluations). P_j(c) is computed once per sample (``model.condition_features``) and reused
at every step. Likewise everything a step's forward derives from (actions, state, text) alone — text embeddings and
cross-attention keys/values, the attention mask, and the whole action stream (action tokens never attend to video
tokens) — is computed once per batch (``WorldModel.step_context``, carried by ``StepInputs``), shared by the
simulation and a w = 1 real rollout, so a rollout step costs less than a plain forward (skipped when only one
forward would use it). ``forwards`` counts per-sample network evaluations, measured from the calls actually made.

Noise: ε_r (the real rollout) is drawn from the generator first, then ε_s (simulation) — both always, so the real
rollout of a sample sees the same noise whatever w, N_s or N_r, and a simulation rollout can be reused across
configurations (sweeps). Everything runs under ``torch.no_grad``; bf16 autocast on CUDA when
``cfg.train.mixed_precision == "bf16"`` (``utils.autocast_context(..., cuda_only=True)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

import torch

from simforcing.config import Config, ConfigError
from simforcing.errors import DataError
from simforcing.flow import euler_schedule, euler_step
from simforcing.masking import FirstFrameMasker
from simforcing.media import write_sample_media
from simforcing.models.world_model import StepContext
from simforcing.runs.loaded import (LoadedWorldModel, check_student_sampler, collate_one, eval_dataset, load_world_model,
                                    sample_generator)
from simforcing.sampler_batch import SamplerBatch
from simforcing.timing import Stopwatch
from simforcing.training.compiled import CompiledModels
from simforcing.utils import autocast_context

BASELINES = ("copy-first", "vae-recon")


# ----------------------------------------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class SimRollout:
    """A finished simulation rollout, reusable by any real rollout of the same sample and seed."""

    latents: torch.Tensor  # (B, C, L+1, h, w) the condition c = (z^s_0, ẑ^s_{1:L})
    masked_frame: torch.Tensor  # (B, 3, H, W) x^s_0 in [-1, 1]
    n_sim: int  # the N_s it was made for (a real rollout reusing it asks the same)
    seconds: float  # masking + encode of x^s_0 + the N_s steps
    forwards: int  # per-sample network evaluations (n_sim; 0 for a source that runs no network)


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


Generators = Optional[torch.Generator | Sequence[torch.Generator]]  # one for the batch, or one per sample


class Sampler(Protocol):
    """What generate, evaluate, the sweeps, long rollouts, the policy evaluation inside a world model and the API
    call: B windows in, B predicted windows out."""

    name: str

    def __call__(self, batch: SamplerBatch, generator: Generators = None) -> SampleResult: ...

    def settings(self) -> dict:
        """What the outputs record about the sampler (JSON)."""
        ...


# ----------------------------------------------------------------------------------------------------------------------
# The network's inputs and the integration loop
# ----------------------------------------------------------------------------------------------------------------------


def guided_velocity(u_c: torch.Tensor, u_u: torch.Tensor, w: float) -> torch.Tensor:
    """u = u_u + w·(u_c − u_u)."""
    return u_u + w * (u_c - u_u)


def model_device(model: torch.nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


@dataclass
class StepInputs:
    """What every forward of one rollout reads besides z_t, τ and the condition, and the work done once for them.

    ``context``: the model's step context of (actions, state0, text, text_mask) — the text/action work of every
    forward, computed once (``WorldModel.step_context``) and checked by identity against these very tensors — or
    None (each forward does that work itself)."""

    z0: torch.Tensor  # (B, C, 1, h, w) the clean first latent: z^r_0 (real rollout) or z^s_0 (simulation rollout)
    actions: Optional[torch.Tensor]  # (B, A_w, action_dim) normalised
    state0: Optional[torch.Tensor]  # (B, S) normalised
    text: torch.Tensor  # (B, N, D)
    text_mask: Optional[torch.Tensor]  # (B, N) bool
    context: Optional[StepContext] = None
    context_tau: Optional[torch.Tensor] = None  # (B,) the noise level z0 is said to carry (train.context_noise)

    def with_context(self, model: torch.nn.Module, uses: int) -> "StepInputs":
        """These inputs with ``model.step_context`` of them when ``uses`` >= 2 forwards will share it and the model
        offers it (for one forward it is only extra work; a model with the forward signature alone has none); these
        inputs themselves otherwise, and when they already hold a context."""
        if self.context is not None or uses < 2 or not hasattr(model, "step_context"):
            return self
        return replace(self, context=model.step_context(self.actions, self.state0, self.text, self.text_mask))

    def doubled(self) -> "StepInputs":
        """The inputs of a batched CFG pair, (2B, ...) = [these; these], without a context."""
        def two(x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
            return None if x is None else torch.cat([x, x])

        return StepInputs(two(self.z0), two(self.actions), two(self.state0), two(self.text), two(self.text_mask),
                          context_tau=two(self.context_tau))


class CountingModel:
    """The network as the sampler calls it — every input by name — counting per-sample evaluations (a forward over
    2B samples counts 2B)."""

    def __init__(self, model: torch.nn.Module):
        self.model, self.evals = model, 0

    def __call__(self, **inputs) -> torch.Tensor:
        """One forward with the network's keyword inputs (``z_t``, ``tau``, ``z0``, ``actions``, ...)."""
        self.evals += inputs["z_t"].shape[0]
        return self.model(**inputs)

    def velocity(self, z_t: torch.Tensor, tau: torch.Tensor, step: StepInputs,
                 cond_feats: Optional[list] = None, gate: Optional[torch.Tensor] = None) -> torch.Tensor:
        """û (B, C, L, h, w) at (z_t, τ) for ``step``'s inputs (given its context when it holds one); ``cond_feats``
        P_j(c) per block and ``gate`` (B,) for a conditioned forward, None for an unconditioned one."""
        extra = {} if step.context is None else {"static": step.context}
        if step.context_tau is not None:
            extra["context_tau"] = step.context_tau
        return self(z_t=z_t, tau=tau, z0=step.z0, actions=step.actions, state0=step.state0, text=step.text,
                    text_mask=step.text_mask, cond_feats=cond_feats, gate=gate, **extra)


Velocity = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (z (B, C, L, h, w), τ (B,)) -> u like z


def integrate(velocity: Velocity, noise: torch.Tensor, n_steps: int, shift: float) -> torch.Tensor:
    """dz/dτ = u from τ = 1 (``noise``, (B, C, L, h, w)) down to τ = 0 over the ``n_steps`` Euler steps of
    ``flow.euler_schedule(n_steps, shift)``: the one integration loop of both rollouts -> ẑ like ``noise``."""
    return integrate_over(velocity, noise, euler_schedule(n_steps, shift).tolist())


def integrate_over(velocity: Velocity, z: torch.Tensor, times: Sequence[float]) -> torch.Tensor:
    """Euler steps of dz/dτ = u from ``z`` (B, C, L, h, w) at τ = times[0] through times[1], ... to times[-1] (a
    part of a schedule: the few-step distillation's teacher segments, ``simforcing.fewstep``) -> z like ``z``."""
    b, dev = z.shape[0], z.device
    for t, t_next in zip(times[:-1], times[1:]):
        tau = torch.full((b,), float(t), device=dev)
        z = euler_step(z, velocity(z, tau).float(), tau, torch.full((b,), float(t_next), device=dev))
    return z


def simulation_rollout(net: CountingModel, step: StepInputs, noise: torch.Tensor, n_sim: int,
                       shift: float) -> torch.Tensor:
    """N_s Euler steps from ε_s with no condition (gate None): step.z0 = z^s_0 (B, C, 1, h, w), noise (B, C, L, h, w)
    -> ẑ^s_{1:L}."""
    return integrate(lambda z, tau: net.velocity(z, tau, step), noise, n_sim, shift)


def real_rollout(net: CountingModel, step: StepInputs, noise: torch.Tensor, n_real: int, shift: float, w: float,
                 cond_feats: Optional[list] = None) -> torch.Tensor:
    """N_r Euler steps from ε_r with the guided velocity: step.z0 = z^r_0; cond_feats: P_j(c) per block, each
    (B, N_video, dim).

    w = 0: unconditional forwards only; w = 1: conditional only; else both halves in one forward of 2B samples
    (rows [0, B) conditional with gate 1, rows [B, 2B) unconditional with gate 0 and zero features). The step context
    is ``step``'s when it holds one (B samples), built here otherwise (and always for the 2B batch).
    """
    return integrate(rollout_velocity(net, step, w, cond_feats, n_real), noise, n_real, shift)


def rollout_velocity(net: CountingModel, step: StepInputs, w: float, cond_feats: Optional[list],
                     uses: int) -> Velocity:
    """The guided velocity of a real rollout of ``step``'s B samples at weight ``w`` (see :func:`real_rollout`), for
    ``uses`` forwards (the step context is built when they share it)."""
    b, dev = step.z0.shape[0], step.z0.device
    if w != 0.0 and cond_feats is None:
        raise ValueError(f"real_rollout: w = {w} needs the condition features P_j(c); got None")
    if w == 0.0:
        step = step.with_context(net.model, uses)
        return lambda z, tau: net.velocity(z, tau, step)
    if w == 1.0:
        step, ones = step.with_context(net.model, uses), torch.ones(b, device=dev)
        return lambda z, tau: net.velocity(z, tau, step, cond_feats, ones)
    pair = step.doubled().with_context(net.model, uses)  # (2B, ...) = [conditional; unconditional], built once
    feats_2 = [torch.cat([f, torch.zeros_like(f)]) for f in cond_feats]
    gate_2 = torch.cat([torch.ones(b, device=dev), torch.zeros(b, device=dev)])

    def guided(z: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        u2 = net.velocity(torch.cat([z, z]), torch.cat([tau, tau]), pair, feats_2, gate_2)  # (2B, C, L, h, w)
        return guided_velocity(u2[:b].float(), u2[b:].float(), w)

    return guided


# ----------------------------------------------------------------------------------------------------------------------
# Where the simulation condition comes from
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class ConditionInputs:
    """What a condition source may read for one batch (built by ``sample_videos``)."""

    batch: SamplerBatch  # on the model's device
    vae: Any
    net: CountingModel
    step: StepInputs  # the batch's network inputs (z0 = z^r_0) with the step context its forwards share
    noise: torch.Tensor  # ε_s (B, C, L, h, w)
    n_sim: int
    shift: float
    amp: Any  # the network's autocast context (the VAE runs outside it)
    masker: Callable[[], FirstFrameMasker]  # the first-frame masker, built on first use (SAM3 loads only then)


class ConditionSource(Protocol):
    """Where the simulation condition c = (z^s_0, ẑ^s_{1:L}) of a batch comes from: ``sample.condition`` selects one
    of ``CONDITION_SOURCES`` (:func:`condition_source`); a sampler takes any other (``GuidedSampler(condition=)``)."""

    name: str  # what settings() records as "condition"
    runs_network: bool  # its forwards run on the batch's rows (they share its step context with a w = 1 real rollout)

    def __call__(self, x: ConditionInputs) -> tuple[torch.Tensor, torch.Tensor]:
        """(c (B, C, L+1, h, w) float32, x^s_0 (B, 3, H, W) in [-1, 1])."""
        ...


class StudentSimulation:
    """``sample.condition = rollout`` (SPEC §5 steps 1–2): x^s_0 — the batch's ``sim_first_frame`` when given, else
    its real first frame masked (``masking``) — encoded to z^s_0, then N_s Euler steps of the network itself from
    ε_s with no condition."""

    name = "rollout"
    runs_network = True

    def __call__(self, x: ConditionInputs) -> tuple[torch.Tensor, torch.Tensor]:
        masked = x.batch.sim_first_frame if x.batch.sim_first_frame is not None else x.masker()(x.batch)[0]
        z0_sim = x.vae.encode(masked[:, :, None]).float()  # (B, C, 1, h, w)
        with x.amp:
            zs = simulation_rollout(x.net, replace(x.step, z0=z0_sim), x.noise, x.n_sim, x.shift)
        return torch.cat([z0_sim, zs], dim=2), masked


def encode_given_condition(video: Optional[torch.Tensor], x: ConditionInputs, name: str,
                           field_name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """c = VAE(video) for a condition given as a whole simulation video (B, 3, F, H, W) of the window; errors name
    ``sample.condition=<name>`` and the batch field that should hold it."""
    if video is None:
        raise ConfigError(f"sample.condition={name}: the batch has no simulation video to condition on "
                          f"(SamplerBatch.{field_name})")
    c = x.vae.encode(video).float()  # (B, C, L+1, h, w)
    if c.shape[2] != x.noise.shape[2] + 1:
        raise ConfigError(f"sample.condition={name}: the simulation video has {video.shape[2]} frames ({c.shape[2]} "
                          f"latent frames); the condition is the whole window, data.frames frames "
                          f"({x.noise.shape[2] + 1} latent frames)")
    return c, video[:, :, 0]


class RecordedSimulation:
    """``sample.condition = oracle`` (an analysis, not a sampler): c = the window's recorded sim video, encoded."""

    name = "oracle"
    runs_network = False

    def __call__(self, x: ConditionInputs) -> tuple[torch.Tensor, torch.Tensor]:
        return encode_given_condition(x.batch.recorded_sim, x, self.name, "recorded_sim")


class RenderedSimulation:
    """``sample.condition = render`` (beyond the paper): c = the robot's digital twin's rendering of the window's
    commanded actions, encoded (``simforcing.twin``: whoever builds the batch drives the twin, chunk after chunk)."""

    name = "render"
    runs_network = False

    def __call__(self, x: ConditionInputs) -> tuple[torch.Tensor, torch.Tensor]:
        return encode_given_condition(x.batch.rendered_sim, x, self.name, "rendered_sim")


CONDITION_SOURCES = {"rollout": StudentSimulation, "oracle": RecordedSimulation, "render": RenderedSimulation}


def condition_source(cfg: Config) -> ConditionSource:
    """The condition source ``cfg.sample.condition`` names."""
    return CONDITION_SOURCES[cfg.sample.condition]()


# ----------------------------------------------------------------------------------------------------------------------
# The guided sampler
# ----------------------------------------------------------------------------------------------------------------------


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
def sample_videos(model: torch.nn.Module, vae, batch: SamplerBatch, cfg: Config, n_sim: Optional[int] = None,
                  n_real: Optional[int] = None, w: Optional[float] = None,
                  generator: Generators = None, masker: Optional[FirstFrameMasker] = None,
                  decode_sim: bool = False, reuse_sim: Optional[SimRollout] = None,
                  condition: Optional[ConditionSource] = None) -> SampleResult:
    """The two-stage guided sampler on a batch of windows (see the module docstring).

    n_sim/n_real/w default to cfg.sample. ``generator``: one for the batch or one per sample (:func:`_draw_noise`).
    ``reuse_sim``: a SimRollout of the same batch and seed with the same N_s (its time and forwards are charged to
    this call). Pass ``masker`` when calling repeatedly (SAM3 would otherwise load on every call that masks).
    ``condition``: where c comes from (default: ``sample.condition``'s source). Returns a SampleResult; ``forwards``
    is per sample.
    """
    n_sim = cfg.sample.n_sim if n_sim is None else int(n_sim)
    n_real = cfg.sample.n_real if n_real is None else int(n_real)
    w = float(cfg.sample.w if w is None else w)
    if n_sim < 1 or n_real < 1 or w < 0:
        raise ConfigError(f"sample: got n_sim={n_sim}, n_real={n_real}, w={w}; expected step counts >= 1 and w >= 0")
    w = effective_w(cfg, w)
    device = model_device(model)
    batch = batch.to(device)
    net = CountingModel(model)
    sw = Stopwatch(device)
    amp = autocast_context(cfg, device, cuda_only=True)  # the network only; the VAE runs in its own precision
    with sw.phase("encode_first_frame"):
        z0_real = vae.encode(batch.first_frame[:, :, None]).float()  # (B, C, 1, h, w)
    b = z0_real.shape[0]
    eps_r, eps_s = _draw_noise(z0_real, cfg.latent_frames - 1, generator)
    step = StepInputs(z0_real, batch.actions, batch.state0, batch.text, batch.text_mask,
                      context_tau=batch.context_tau)
    sim = None
    if w != 0.0 and reuse_sim is not None:
        if reuse_sim.n_sim != n_sim:
            raise ValueError(f"reuse_sim: the rollout has n_sim={reuse_sim.n_sim}; this call asks n_sim={n_sim}")
        sim = reuse_sim
        sw.add("simulation", sim.seconds)
    elif w != 0.0:
        source = condition or condition_source(cfg)
        with sw.phase("simulation"):
            if source.runs_network:  # one step context for its forwards and, at w = 1, the real rollout's
                with amp:
                    step = step.with_context(model, n_sim + (n_real if w == 1.0 else 0))
            c, masked = source(ConditionInputs(batch, vae, net, step, eps_s, n_sim, cfg.flow.shift, amp,
                                               lambda: masker or FirstFrameMasker.from_config(cfg, device)))
        sim = SimRollout(c, masked, n_sim, sw.times["simulation"], net.evals // b)
    with sw.phase("real"), amp:
        feats = model.condition_features(sim.latents) if sim is not None else None
        zr = real_rollout(net, step, eps_r, n_real, cfg.flow.shift, w, feats)
    real_latents = torch.cat([z0_real, zr.float()], dim=2)  # (B, C, L+1, h, w)
    with sw.phase("decode"):
        video = vae.decode(real_latents).float().clamp(-1, 1)
    sim_video = vae.decode(sim.latents).float().clamp(-1, 1) if (decode_sim and sim is not None) else None
    forwards = net.evals // b + (sim.forwards if (sim is not None and reuse_sim is not None) else 0)
    return SampleResult(real_video=video, real_latents=real_latents, sim_latents=sim.latents if sim else None,
                        sim_video=sim_video, masked_frame=sim.masked_frame if sim else None, forwards=forwards,
                        timings=dict(sw.times), sim=sim, sim_reused=reuse_sim is not None)


def _generator_states(generator: Generators) -> list:
    if generator is None:
        return [torch.get_rng_state()] + ([torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else [])
    gens = [generator] if isinstance(generator, torch.Generator) else list(generator)
    return [g.get_state() for g in gens]


def _restore_generators(generator: Generators, states: list) -> None:
    if generator is None:
        torch.set_rng_state(states[0])
        if len(states) > 1:
            torch.cuda.set_rng_state_all(states[1])
        return
    gens = [generator] if isinstance(generator, torch.Generator) else list(generator)
    for g, s in zip(gens, states):
        g.set_state(s)


def effective_w(cfg: Config, w: float) -> float:
    """A model trained with ``conditioning.p = 0`` (sft, joint_fm, value/motion distillation) never saw a condition:
    its zero-initialised ``cond_proj`` stayed zero, so its conditional branch equals the unconditional one and any w
    gives the w = 0 sample. It samples as w = 0 (no simulation rollout, N_r forwards instead of N_s + 2 N_r)."""
    return 0.0 if cfg.conditioning.p == 0.0 else float(w)


class GuidedSampler:
    """``sample_videos`` with fixed settings: ``sampler(batch, generator) -> SampleResult``."""

    name = "simforcing-sampler"

    def __init__(self, model, vae, cfg: Config, n_sim: Optional[int] = None, n_real: Optional[int] = None,
                 w: Optional[float] = None, masker: Optional[FirstFrameMasker] = None, decode_sim: bool = False,
                 condition: Optional[ConditionSource] = None):
        self.model, self.vae, self.cfg, self.decode_sim = model, vae, cfg, decode_sim
        self.n_sim = cfg.sample.n_sim if n_sim is None else int(n_sim)
        self.n_real = cfg.sample.n_real if n_real is None else int(n_real)
        self.w_asked = float(cfg.sample.w if w is None else w)
        self.w = effective_w(cfg, self.w_asked)
        self.condition = condition or condition_source(cfg)
        # SAM3 is loaded once here, and only when a simulation rollout will run
        self.masker = masker or (FirstFrameMasker.from_config(cfg, model_device(model)) if self.w != 0 else None)
        # sample.compile: the network's calls (or each of its layers) compiled in place (weights, state_dict unchanged)
        self.compiled = CompiledModels([model], "sample.compile", cfg.sample.compile)

    def __call__(self, batch: SamplerBatch, generator: Generators = None,
                 reuse_sim: Optional[SimRollout] = None) -> SampleResult:
        def attempt() -> SampleResult:
            return sample_videos(self.model, self.vae, batch, self.cfg, self.n_sim, self.n_real, self.w, generator,
                                 self.masker, self.decode_sim, reuse_sim, self.condition)

        if not self.compiled.active:
            return attempt()
        saved = _generator_states(generator)  # a compiled attempt that fails is run again eagerly on the same noise
        return self.compiled.run(attempt, reset=lambda: _restore_generators(generator, saved))

    def settings(self) -> dict:
        out = {"sampler": self.name, "n_sim": self.n_sim, "n_real": self.n_real, "w": self.w,
               "condition": self.condition.name,
               "mask_mode": self.cfg.sample.mask_mode, "seed": self.cfg.sample.seed, "shift": self.cfg.flow.shift}
        if self.w != self.w_asked:
            out["w_asked"] = self.w_asked  # an unconditioned model (conditioning.p = 0): see effective_w
        return out


class FewStepSampler(GuidedSampler):
    """The sampler of a few-step student (``simforcing.fewstep``, ``simforcing distill``): this sampler at
    (N_s, K, w = 1) — the student's own simulation rollout gives c, then K Euler steps of its conditional branch alone
    (gate 1, no CFG pair: the teacher's w is baked into the weights), with the teacher's noise for the same generator.
    A student of a model trained without a condition (:func:`effective_w` 0) runs K unconditional steps and no
    simulation rollout. ``settings()`` records the teacher's sampler it stands for."""

    name = "fewstep"

    def __init__(self, wm: LoadedWorldModel, decode_sim: bool = False, condition: Optional[ConditionSource] = None):
        f = wm.cfg.fewstep
        self.distilled_w, self.objective = effective_w(wm.cfg, f.w), f.objective
        super().__init__(wm.model, wm.vae, wm.cfg, f.teacher_n_sim, f.steps, 1.0 if self.distilled_w else 0.0,
                         masker=wm.masker, decode_sim=decode_sim, condition=condition)

    def settings(self) -> dict:
        f = self.cfg.fewstep
        out = {**super().settings(), "sampler": self.name, "steps": f.steps, "w": self.distilled_w,
               "branch": "conditional" if self.distilled_w else "unconditional", "objective": self.objective,
               "teacher_sampler": {"n_sim": f.teacher_n_sim, "n_real": f.teacher_n_real, "w": self.distilled_w}}
        out.pop("w_asked", None)
        return out


def check_student_settings(wm: LoadedWorldModel, n_sim: Optional[int], n_real: Optional[int],
                           w: Optional[float]) -> None:
    """ConfigError naming the setting when a caller asks a few-step student for sampler settings other than its
    own (a sweep of N_s, N_r or w needs its teacher)."""
    check_student_sampler(wm.cfg, wm.name, n_sim, n_real, w)


def sampler_for(wm: LoadedWorldModel, n_sim: Optional[int] = None, n_real: Optional[int] = None,
                w: Optional[float] = None, decode_sim: bool = False,
                condition: Optional[ConditionSource] = None) -> Sampler:
    """The sampler of a loaded world model, as every caller gets it (generate, evaluate, the sweeps, long rollouts,
    the policy evaluation inside a world model, the API, the benchmark): stage-1 and stage-2 runs sample with the
    two-stage guided sampler at ``wm.cfg.sample`` or the given settings, its condition from ``condition`` (default:
    ``sample.condition``'s source). A kind of run with a sampler of its own plugs in here, chosen by
    ``wm.checkpoint.kind``: a few-step student (kind ``fewstep``, ``fewstep.steps`` > 0 in its config) samples with
    :class:`FewStepSampler`. The samplers of one model share its first-frame masker."""
    if wm.cfg.fewstep.steps:
        check_student_settings(wm, n_sim, n_real, w)
        sampler: GuidedSampler = FewStepSampler(wm, decode_sim, condition)
    else:
        sampler = GuidedSampler(wm.model, wm.vae, wm.cfg, n_sim, n_real, w, masker=wm.masker, decode_sim=decode_sim,
                                condition=condition)
    wm.masker = wm.masker or sampler.masker
    return sampler


class CopyFirstSampler:
    """Baseline floor: every one of the window's ``frames`` frames = the given real first frame. No model, no VAE."""

    name = "copy-first"

    def __init__(self, frames: int):
        self.frames = int(frames)

    def __call__(self, batch: SamplerBatch, generator: Generators = None) -> SampleResult:
        first = batch.first_frame  # (B, 3, H, W)
        sw = Stopwatch(first.device)
        with sw.phase("copy"):
            video = first[:, :, None].expand(-1, -1, self.frames, -1, -1).clone()  # (B, 3, F, H, W)
        return SampleResult(real_video=video, real_latents=None, timings=dict(sw.times))

    def settings(self) -> dict:
        return {"sampler": self.name}


class VaeReconSampler:
    """Baseline ceiling: decode(encode(the recorded window)) — what any latent model can at best reproduce."""

    name = "vae-recon"

    def __init__(self, vae, device: torch.device | str = "cpu"):
        self.vae, self.device = vae, torch.device(device)

    @torch.no_grad()
    def __call__(self, batch: SamplerBatch, generator: Generators = None) -> SampleResult:
        if batch.recorded_real is None:
            raise ValueError("vae-recon reconstructs the recorded window: the batch has no recorded_real "
                             "(SamplerBatch.from_collated of a dataset window has it)")
        real = batch.recorded_real.to(self.device)  # (B, 3, F, H, W)
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
    wm = load_world_model(run_dir, cfg, device, step, data_root)
    device = model_device(wm.model)
    ds = eval_dataset(wm.cfg, data_root, split, wm.stats)
    wm.masker = FirstFrameMasker.from_config(wm.cfg, device)  # also the first panel of a sample without simulation
    sampler = sampler_for(wm, decode_sim=True)
    out = Path(out_dir)
    gifs = []
    for i in range(min(num_samples, len(ds))):
        item = collate_one(ds[i])
        batch = SamplerBatch.from_collated(item)
        res = sampler(batch, sample_generator(wm.cfg, i))
        masked = res.masked_frame if res.masked_frame is not None else _display_mask(wm.masker, batch, device)
        s = sampler.settings()
        title = f"{batch.episode_ids[0]} @ {int(item['start'][0])}  N_s={s['n_sim']} N_r={s['n_real']} w={s['w']:g}"
        files = write_sample_media(out / f"sample_{i:03d}", None if masked is None else masked[0],
                                   None if res.sim_video is None else res.sim_video[0], res.real_video[0],
                                   item["real"][0], title=title, sim_label=f"w={s['w']:g}: none",
                                   upscale=upscale, fps=fps)
        gifs.append(str(files.gif))
    return gifs


def _display_mask(masker: FirstFrameMasker, batch: SamplerBatch, device) -> Optional[torch.Tensor]:
    """x^s_0 for the first panel when the sampler did not need it (w = 0); None when it cannot be built."""
    try:
        return masker(batch.to(device))[0]
    except (DataError, ConfigError):
        return None
