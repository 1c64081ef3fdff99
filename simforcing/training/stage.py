"""A training stage as one specification: what a run of it reads, builds and steps, and how it names itself.

    Trainer(stage, cfg, out_dir, resume, progress, start=Start(teacher_run=..., init=...)).run()   (training.loop)

| stage         | spec                  | data                              | models                          | step           |
|---------------|-----------------------|-----------------------------------|---------------------------------|----------------|
| `video_prior` | `prior.VIDEO_PRIOR`   | single videos, sim and real       | the network, action side frozen | `video_prior`  |
| `pretrain`    | `train.SIM_PRETRAIN`  | sim windows of train + sim_pool   | Wan2.2 weights or `--init RUN0` | `sim_pretrain` |
| `train`       | `train.STAGE2`        | paired sim/real windows of train  | the teacher's + a frozen copy   | the method's   |
| `policy`      | `policy.train.POLICY` | observation windows               | `policy.init.init_policy`       | `policy_step`  |

Everything else a run does (its folder, resume, logging, checkpoints, stop requests, faults) is the loop's, the same
for every stage. A spec's functions read only their arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

import torch

from simforcing.config import Config
from simforcing.runs.checkpoint import Checkpoint
from simforcing.warmstart import InitReport

# step(student, teacher, batch, cfg, gen) -> (loss, logs): a method's step function (``methods.METHODS``)
StepFunction = Callable[[torch.nn.Module, Optional[torch.nn.Module], dict, Config, torch.Generator],
                        tuple[torch.Tensor, dict]]


@dataclass(frozen=True)
class Start:
    """Where a run's weights come from before its first checkpoint: what the caller gives (``teacher_run``,
    ``init``), completed read-only before any work by the stage's ``start`` (the teacher's checkpoint opened, the
    start a resumed run recorded)."""

    teacher_run: Optional[Path] = None  # stage 2: the stage-1 run (on --resume teacher.json may name it)
    teacher: Optional[Checkpoint] = None  # stage 2: its checkpoint, opened by the stage's ``start``
    init: Optional[str | Path] = None  # stage 1: `--init RUN0`; the policy: "base" or a run


class StartFolder(Protocol):
    """What a stage's ``start`` reads of the run's ``--out`` folder (``training.folder.RunFolder`` is one; the folder
    module depends on this one, never the reverse): its path, whether the run resumes, whether the last check found
    checkpoints in it, and the run's name in messages."""

    path: Path
    resume: bool
    has_checkpoints: bool

    @property
    def label(self) -> str: ...


@dataclass
class Models:
    """What a stage trains with, built on the CPU (``meta``: a rank that receives its shards from rank 0)."""

    student: torch.nn.Module
    teacher: Optional[torch.nn.Module] = None  # frozen; only for methods with a distillation term
    report: Optional[InitReport] = None  # what a fresh start took from another run or file (RUN/init.json)


def keep_start(cfg: Config, folder: StartFolder, start: Start) -> Start:
    """A stage whose start needs nothing checked or resolved before the run."""
    return start


def no_resume_check(theirs: Config, cfg: Config, run_dir: Path) -> None:
    """A stage whose runs any config of the same kind and architecture may continue."""


def no_facts(dataset: Any) -> dict:
    """A stage whose dataset adds nothing to status.json."""
    return {}


@dataclass(frozen=True)
class Stage:
    """One training stage (see the module docstring for the four)."""

    name: str  # the run's stage: run.json, runs.folder.STAGE_KIND[name] its kind, "simforcing NAME:" in messages
    command: str  # the command that trains it (named when a --resume of another kind is refused)
    describe: Callable[[Config], str]  # the progress bar's label
    check: Callable[[Config], None]  # before any work: the method, what the stage cannot train (ConfigError)
    dataset: Callable[[Config, Optional[dict]], Any]  # (cfg, normalisation statistics or None: the data's own)
    encodes: Callable[[Config], bool]  # whether batches hold pixels the frozen VAE encodes (else cached latents)
    models: Callable[[Config, Start, bool, bool], Models]  # (cfg, start, meta, fresh: initialise the weights)
    step: Callable[[Config], StepFunction]
    latents: Callable[[dict, Config, torch.device, Any], dict]  # (loader batch, cfg, device, vae) -> the step's batch
    latent_keys: tuple[str, ...]  # the latents of the step's batch (what a nan_batch fault replaces)
    rollout_domain: Optional[str] = None  # train.rollout_prob: whose first frames the student's own rollouts replace
    start: Callable[[Config, StartFolder, Start], Start] = keep_start  # read-only, before any work
    resume_check: Callable[[Config, Config, Path], None] = no_resume_check  # (theirs, cfg, run dir) on --resume
    forward_methods: tuple[str, ...] = ()  # the student's entry points besides forward (parallel.shard_from_rank0)
    facts: Callable[[Any], dict] = no_facts  # what status.json says about the dataset besides the episodes left out
