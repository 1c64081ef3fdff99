"""One training step, the same wherever a step is taken: the train loop (``simforcing.train``), ``bench`` (the
training-step section) and ``bench --gpu``.

    loss, logs = forward_backward(step_fn, student, teacher, batch, cfg, gen, device)   # autocast, step, backward
    grad_norm = apply_update(params, optimizer, scheduler, cfg.train.grad_clip)           # clip, AdamW, schedule
    loss, logs, grad_norm = train_step(...)                                               # both

``step_fn(student, teacher, batch, cfg, gen) -> (loss, logs)`` is a method's step function (``methods.METHODS`` or
the policy's ``policy_step``). A NaN/inf loss term, total or gradient norm raises ``losses.NonFiniteLoss`` naming it,
before anything is updated (the gradients are cleared). ``StepHooks`` lets the loop inject its faults and, under
FSDP2, make every rank stop together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from simforcing import parallel
from simforcing.config import Config
from simforcing.losses import NonFiniteLoss
from simforcing.utils import autocast_context


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
