"""The few-step distillation objectives: a student's K Euler jumps regress the teacher's guided sampler.

    plan = FewStepPlan.of(cfg)                          # the student's K times, the teacher's N_r times, w, N_s
    loss, logs = fewstep_step(student, teacher, batch, cfg, gen)     # a ``methods`` step function

The teacher is the full sampler (``sample.real_rollout``): N_r Euler steps of the guided velocity
u = u_u + w·(u_c − u_u) on the condition c of its own simulation rollout (N_s steps from ε_s with no condition). Its
discrete trajectory is a polyline in τ (each Euler step moves z linearly in τ), so its state at any time — also at a
student time off its grid, e.g. K = 4 of N_r = 10 — is defined exactly (:func:`on_polyline`), and its last point is
the sample. The student is the same network on ``flow.euler_schedule(K, shift)`` with its conditional branch alone
(gate 1, the condition c; no CFG pair): ``sample.sample_videos`` at (N_s, K, w = 1).

Objectives (``fewstep.objective``), each a regression of the student's jump from τ_k to τ_{k+1} on a target state,
all K jumps of a sample in one forward of K·B rows, mean squared error of the jump's end point:

- ``trajectory`` (trajectory / knowledge distillation, after Luhman & Luhman and rectified-flow reflow with a
  teacher-forced start): the teacher's trajectory from ε_r (the sampler's noise order: ε_r, then ε_s); the jump starts
  at the teacher's state at τ_k and regresses its state at τ_{k+1}. Costs the whole teacher sampler per sample
  (N_s + 2·N_r evaluations) and trains on the states the sampler visits.
- ``progressive`` (progressive distillation, Salimans & Ho, in one stage): the jump starts at the data noised to τ_k,
  z(τ_k) = (1 − τ_k)·z + τ_k·ε_r, and regresses where the teacher's own guided steps take that point by τ_{k+1}
  (its grid points between the two, N_r/K steps). Costs 2·N_r/K + N_s evaluations per jump; trains on the data's
  noised marginals rather than on the sampler's states.

For K = 1 the two coincide (the jump starts at ε_r = z(1)). A further term keeps the simulation rollout the
teacher's (the student runs it at sampling): the student's N_s steps of it regress the teacher's, weight
``fewstep.sim_weight``. Logs: ``jump``, ``sim`` (when conditioned and weighted), ``loss``.

Training reads the stage-2 batch: ``z_real``, ``z_sim`` (its first latent z^s_0 starts the simulation rollout: the
``paired-sim`` mask mode), ``actions``, ``state0``, ``text``, ``text_mask``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

import simforcing.flow as flow
from simforcing.config import Config
from simforcing.losses import weighted_total
from simforcing.methods import ModelInputs
from simforcing.sample import (CountingModel, StepInputs, Velocity, effective_w, integrate_over, rollout_velocity)

TIME_TOL = 1e-6  # two schedule times closer than this are the same time


@dataclass(frozen=True)
class FewStepPlan:
    """What a student of ``cfg`` reproduces and how it samples."""

    steps: int  # K
    w: float  # the teacher's guidance weight (effective: 0 for a model trained without a condition)
    n_sim: int  # N_s, the simulation rollout (teacher and student)
    n_real: int  # N_r, the teacher's real rollout
    student_times: tuple[float, ...]  # K + 1 times from 1 to 0
    teacher_times: tuple[float, ...]  # N_r + 1 times from 1 to 0
    sim_times: tuple[float, ...]  # N_s + 1 times from 1 to 0

    @property
    def conditioned(self) -> bool:
        """Whether the teacher's sampler uses the simulation condition (w > 0): the student's branch is gate 1."""
        return self.w != 0.0

    @classmethod
    def of(cls, cfg: Config) -> "FewStepPlan":
        f, shift = cfg.fewstep, cfg.flow.shift
        return cls(f.steps, effective_w(cfg, f.w), f.teacher_n_sim, f.teacher_n_real,
                   tuple(flow.euler_schedule(f.steps, shift).tolist()),
                   tuple(flow.euler_schedule(f.teacher_n_real, shift).tolist()),
                   tuple(flow.euler_schedule(f.teacher_n_sim, shift).tolist()))

    def segment_times(self, k: int) -> list[float]:
        """The teacher's times over student jump k: τ_k, its grid points strictly between, τ_{k+1}."""
        hi, lo = self.student_times[k], self.student_times[k + 1]
        inner = [t for t in self.teacher_times if lo + TIME_TOL < t < hi - TIME_TOL]
        return [hi, *inner, lo]


def polyline(velocity: Velocity, z: torch.Tensor, times: tuple[float, ...]) -> list[torch.Tensor]:
    """The Euler states at every one of ``times`` (len(times) tensors like ``z``; the first is ``z``)."""
    states = [z]
    for i in range(len(times) - 1):
        states.append(integrate_over(velocity, states[-1], times[i:i + 2]))
    return states


def on_polyline(times: tuple[float, ...], states: list[torch.Tensor], tau: float) -> torch.Tensor:
    """The state of an Euler trajectory (``states`` at decreasing ``times``) at time ``tau``: a grid state when
    ``tau`` is a grid time, else the linear interpolation an Euler step makes between its two ends."""
    for i in range(len(times) - 1):
        hi, lo = times[i], times[i + 1]
        if abs(tau - hi) <= TIME_TOL:
            return states[i]
        if abs(tau - lo) <= TIME_TOL:
            return states[i + 1]
        if lo < tau < hi:
            return states[i] + ((tau - hi) / (lo - hi)) * (states[i + 1] - states[i])
    raise ValueError(f"on_polyline: τ = {tau} is outside the trajectory's times [{times[-1]}, {times[0]}]")


def _split(batch: dict, key: str) -> tuple[torch.Tensor, torch.Tensor]:
    if key not in batch:
        raise KeyError(f"fewstep: the batch has no {key!r} (keys: {', '.join(sorted(batch))}); expected latents "
                       "(B, C, L+1, h, w) of the stage-2 windows")
    z = batch[key]
    return z[:, :, :1], z[:, :, 1:]


def _step_inputs(batch: dict, z0: torch.Tensor) -> StepInputs:
    return StepInputs(z0, batch["actions"], batch["state0"], batch["text"], batch.get("text_mask"))


@dataclass
class TeacherPass:
    """What the teacher computes for one batch (no gradient)."""

    velocity: Velocity  # its guided velocity on the real rollout's inputs
    cond: Optional[torch.Tensor]  # c (B, C, L+1, h, w), None when unconditioned
    sim_states: list[torch.Tensor]  # its simulation rollout's N_s + 1 states (empty when unconditioned)


@torch.no_grad()
def teacher_pass(teacher: nn.Module, batch: dict, plan: FewStepPlan, eps_s: torch.Tensor) -> TeacherPass:
    """The teacher's simulation rollout from z^s_0 and ε_s (when conditioned) and its guided velocity."""
    zr0, _ = _split(batch, "z_real")
    net = CountingModel(teacher)
    if not plan.conditioned:
        return TeacherPass(rollout_velocity(net, _step_inputs(batch, zr0), 0.0, None, plan.n_real), None, [])
    zs0, _ = _split(batch, "z_sim")
    sim_step = _step_inputs(batch, zs0).with_context(teacher, plan.n_sim)
    sim_states = polyline(lambda z, tau: net.velocity(z, tau, sim_step), eps_s, plan.sim_times)
    cond = torch.cat([zs0, sim_states[-1]], dim=2)
    feats = teacher.condition_features(cond)
    uses = 2 * plan.n_real  # a generous bound: the step context is built whenever the teacher steps more than once
    return TeacherPass(rollout_velocity(net, _step_inputs(batch, zr0), plan.w, feats, uses), cond, sim_states)


@torch.no_grad()
def jump_targets(objective: str, tp: TeacherPass, plan: FewStepPlan, z: torch.Tensor,
                 eps_r: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(starts, targets) of the K jumps, each a list of K tensors (B, C, L, h, w) (module docstring); ``z`` the
    clean future latents."""
    if objective == "trajectory":
        states = polyline(tp.velocity, eps_r, plan.teacher_times)
        points = [on_polyline(plan.teacher_times, states, t) for t in plan.student_times]
        return points[:-1], points[1:]
    if objective == "progressive":
        starts = [flow.add_noise(z, eps_r, t) for t in plan.student_times[:-1]]
        return starts, [integrate_over(tp.velocity, s, plan.segment_times(k)) for k, s in enumerate(starts)]
    raise ValueError(f"fewstep.objective: got {objective!r}; expected 'trajectory' or 'progressive'")


def jump_error(student: nn.Module, batch: dict, z0: torch.Tensor, starts: list[torch.Tensor],
               targets: list[torch.Tensor], times: tuple[float, ...], cond: Optional[torch.Tensor]) -> torch.Tensor:
    """Mean squared error of the student's Euler jumps starts[k] (at times[k]) -> times[k + 1] against targets[k],
    all jumps in one forward of K·B rows; ``cond``: the condition of a gate-1 forward, None for no condition."""
    k, b = len(starts), z0.shape[0]
    tau = torch.cat([torch.full((b,), times[i], device=z0.device) for i in range(k)])
    tau_next = torch.cat([torch.full((b,), times[i + 1], device=z0.device) for i in range(k)])

    def rep(x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        return None if x is None else torch.cat([x] * k)

    z_t = torch.cat(starts)
    gate = None if cond is None else torch.ones(k * b, device=z0.device, dtype=z_t.dtype)
    u = ModelInputs(z_t, tau, rep(z0), rep(batch["actions"]), rep(batch["state0"]), rep(batch["text"]),
                    rep(batch.get("text_mask")), cond=rep(cond), gate=gate).run(student)
    return (flow.euler_step(z_t, u, tau, tau_next) - torch.cat(targets)).pow(2).mean()


def fewstep_step(student: nn.Module, teacher: Optional[nn.Module], batch: dict, cfg: Config,
                 gen: torch.Generator) -> tuple[torch.Tensor, dict]:
    """One distillation step (module docstring): ε_r then ε_s from ``gen``; loss = jump + sim_weight·sim."""
    if teacher is None:
        raise ValueError("fewstep: the step needs the frozen teacher, got teacher=None")
    plan = FewStepPlan.of(cfg)
    zr0, z = _split(batch, "z_real")
    eps_r = torch.randn(z.shape, generator=gen, device=gen.device, dtype=torch.float32).to(z)
    eps_s = torch.randn(z.shape, generator=gen, device=gen.device, dtype=torch.float32).to(z)
    tp = teacher_pass(teacher, batch, plan, eps_s)
    starts, targets = jump_targets(cfg.fewstep.objective, tp, plan, z, eps_r)
    terms = {"jump": (1.0, jump_error(student, batch, zr0, starts, targets, plan.student_times, tp.cond))}
    if plan.conditioned and cfg.fewstep.sim_weight > 0:
        zs0, _ = _split(batch, "z_sim")
        s = tp.sim_states
        terms["sim"] = (float(cfg.fewstep.sim_weight),
                        jump_error(student, batch, zs0, s[:-1], s[1:], plan.sim_times, None))
    return weighted_total(terms)
