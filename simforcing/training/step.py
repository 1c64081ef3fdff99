"""One training step, the same wherever a step is taken: the train loop (``training.loop``), ``bench`` (the
training-step section) and ``bench --gpu``.

    loss, logs = forward_backward(step_fn, student, teacher, batch, cfg, gen, device)   # autocast, step, backward
    grad_norm = apply_update(params, optimizer, scheduler, cfg.train.grad_clip)           # clip, AdamW, schedule
    loss, logs, grad_norm = train_step(...)                                               # both
    logs, grad_norm = TrainStep(...)(batch, step)          # the loop's: a loader batch in, Diverged on a NaN

``step_fn(student, teacher, batch, cfg, gen) -> (loss, logs)`` is a method's step function (``methods.METHODS`` or
the policy's ``policy_step``). A NaN/inf loss term, total or gradient norm raises ``losses.NonFiniteLoss`` naming it,
before anything is updated (the gradients are cleared). ``StepHooks`` lets the loop inject its faults and, under
FSDP2, make every rank stop together. With ``train.compile`` the loop's step runs the network calls compiled
(``training.compiled``: same function to float rounding, same random numbers; a compilation failure retries the step
eagerly with one warning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

import simforcing.parallel as parallel
from simforcing.config import Config
from simforcing.losses import NonFiniteLoss
from simforcing.methods import own_first_frames
from simforcing.training.compiled import CompiledModels
from simforcing.utils import autocast_context, derive_seed


class Diverged(Exception):
    """A non-finite loss term or gradient norm at ``step`` (every rank raises it together)."""

    def __init__(self, step: int, term: str, value: float):
        self.step, self.term, self.value = step, term, value
        super().__init__(f"training diverged at step {step}: non-finite {term} ({value})")


@dataclass
class StepHooks:
    """What the train loop adds to a step: a fault on the loss, the ranks' agreement on a non-finite loss (every
    rank must skip backward together), and a fault between backward and the update."""

    corrupt_loss: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
    any_rank: Callable[[bool], bool] = bool
    after_backward: Optional[Callable[[], None]] = None


NO_HOOKS = StepHooks()


def clip_gradients(params: list[torch.nn.Parameter], grad_clip: float) -> float:
    """The one gradient clipping: the global norm (DTensor-aware) clipped at ``grad_clip`` (≤ 0: measured only);
    returns the norm before clipping."""
    return parallel.clip_grad_norm(params, grad_clip)


def forward_backward(step_fn: Callable, student: torch.nn.Module, teacher: Optional[torch.nn.Module], batch: dict,
                     cfg: Config, gen: torch.Generator, device: torch.device,
                     hooks: StepHooks = NO_HOOKS) -> tuple[torch.Tensor, dict]:
    """The step function under the config's autocast, then backward. NonFiniteLoss (no backward) when a loss term or
    the total is not finite here — or, with ``hooks.any_rank``, on any rank."""
    bad: Optional[tuple[str, float]] = None
    loss, logs = None, {}
    try:
        with autocast_context(cfg, device):
            loss, logs = step_fn(student, teacher, batch, cfg, gen)
        if hooks.corrupt_loss is not None:
            loss = hooks.corrupt_loss(loss)
        if not torch.isfinite(loss.detach()).item():
            raise NonFiniteLoss("loss", float(loss.detach()))
    except NonFiniteLoss as e:
        bad = (e.term, e.value)
    if hooks.any_rank(bad is not None):
        raise NonFiniteLoss(*(bad or ("loss (on another rank)", float("nan"))))
    loss.backward()
    if hooks.after_backward is not None:
        hooks.after_backward()
    return loss, logs


def apply_update(params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer, scheduler: Any,
                 grad_clip: float) -> float:
    """Clip (:func:`clip_gradients`), one optimizer update, one schedule step (``scheduler`` may be None), gradients
    cleared; returns the gradient norm. A non-finite norm clears the gradients and raises NonFiniteLoss
    ("grad_norm") without updating."""
    grad_norm = clip_gradients(params, grad_clip)
    if not math.isfinite(grad_norm):
        optimizer.zero_grad(set_to_none=True)
        raise NonFiniteLoss("grad_norm", grad_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm


def train_step(step_fn: Callable, student: torch.nn.Module, teacher: Optional[torch.nn.Module], batch: dict,
               cfg: Config, gen: torch.Generator, device: torch.device, params: list[torch.nn.Parameter],
               optimizer: torch.optim.Optimizer, scheduler: Any = None,
               hooks: StepHooks = NO_HOOKS) -> tuple[torch.Tensor, dict, float]:
    """One whole step: :func:`forward_backward` then :func:`apply_update` at ``cfg.train.grad_clip``; returns
    (loss, logs, gradient norm)."""
    loss, logs = forward_backward(step_fn, student, teacher, batch, cfg, gen, device, hooks)
    return loss, logs, apply_update(params, optimizer, scheduler, cfg.train.grad_clip)


class TrainStep:
    """The loop's step: ``(loader batch, step number) -> (logs, gradient norm)``, one optimizer update.

    ``latents(batch, step)`` makes the step's batch (on the device, pixels encoded); the step's generator is
    re-seeded from (seed, step, rank); with ``train.rollout_prob`` some windows start from the student's own frame
    (``methods.own_first_frames`` in ``rollout_domain``); then :func:`train_step` with ``hooks(step)``. A non-finite
    loss term or gradient norm raises :class:`Diverged` with the gradients cleared.
    """

    def __init__(self, latents: Callable[[dict, int], dict], step_fn: Callable, student: torch.nn.Module,
                 teacher: Optional[torch.nn.Module], vae: Any, cfg: Config, device: torch.device, rank: int,
                 optimizer: torch.optim.Optimizer, scheduler: Any, hooks: Callable[[int], StepHooks],
                 rollout_domain: Optional[str], forward_methods: tuple[str, ...] = ()):
        self.latents, self.step_fn, self.student, self.teacher, self.vae = latents, step_fn, student, teacher, vae
        self.cfg, self.device, self.rank, self.optimizer, self.scheduler = cfg, device, rank, optimizer, scheduler
        self.hooks, self.rollout_domain = hooks, rollout_domain
        self.params = [p for p in student.parameters() if p.requires_grad]
        self.gen = torch.Generator(device=device)
        # train.compile: the student's and the teacher's calls (or layers) compiled (training.compiled; eager after a
        # failure; "graphs" under FSDP2: a ConfigError)
        self.compiled = CompiledModels([student, teacher], "train.compile", cfg.train.compile,
                                       methods=forward_methods, passthrough=(NonFiniteLoss,))

    def __call__(self, batch: dict, step: int) -> tuple[dict, float]:
        z = self.latents(batch, step)

        def attempt() -> tuple[torch.Tensor, dict, float]:
            self.gen.manual_seed(derive_seed(self.cfg.train.seed, "step", step, self.rank))
            zz = z
            if self.cfg.train.rollout_prob > 0 and self.rollout_domain is not None:
                zz = own_first_frames(self.student, self.vae, z, self.cfg, self.gen, self.rollout_domain)
            out = train_step(self.step_fn, self.student, self.teacher, zz, self.cfg, self.gen, self.device,
                             self.params, self.optimizer, self.scheduler, self.hooks(step))
            return out + (zz,)

        try:
            _, logs, grad_norm, z = self.compiled.run(attempt,
                                                      reset=lambda: self.optimizer.zero_grad(set_to_none=True))
        except NonFiniteLoss as e:
            self.optimizer.zero_grad(set_to_none=True)
            raise Diverged(step, e.term, e.value) from None
        if "rollout_frac" in z:
            logs["rollout_frac"] = float(z["rollout_frac"])
        return logs, grad_norm
