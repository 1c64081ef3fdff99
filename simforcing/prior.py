"""Stage 0, the video prior: the world model's network trained as a plain video model, what stands in for Wan2.2.

    simforcing pretrain --method video_prior --preset demo --data DIR --out RUN0 [--resume]   # text + frame -> video
    simforcing pretrain --init RUN0 --preset demo --data DIR --out RUN1                       # stage 1 from it
    simforcing policy train --setting action_only --init RUN0 ...                            # the "base" policy

The paper's world model starts from Wan2.2, a video model that knows how videos move but has never seen an action,
and its Tab. 5 baseline policy starts from Wan2.2 itself. The demo has no such model, so this stage makes one: the same
two-expert network (same config, so its checkpoints load into a world model or a policy) trained with flow matching on
single videos — every simulation window of train + sim_pool and every real window of train
(``data.videos.VideoWindowDataset``: the videos the world models see in stages 1 and 2 together), the clean first
latent frame and the instruction as the only conditions (``methods.video_prior_step``). No action token and no
proprio-state token ever reach the network: the batch carries neither; the action expert, the state projection and
the simulation-condition projections are frozen (``requires_grad`` False) and stay at the model's own
initialisation, so a run that starts from the prior lists them as *new* (``warmstart.untrained_by``).
``model.weights`` (Wan2.2) is loaded first when set: at real scale this stage would continue Wan2.2 on robot videos;
the paper's pipeline does not need it there (``pretrain`` starts from Wan2.2 directly).

The run folder is a training run like the others (``run.json`` kind "video_base", stage "video_prior";
``config.json`` with ``train.method = "video_prior"``; checkpoints, resume, faults, SIGTERM):
``simforcing.train.Trainer`` with this data, model and step. Its kind (``runfolder``) decides where it is accepted:
``pretrain --init`` (stage 1 from it) and ``policy train --init``; ``train --teacher``, ``generate``/``evaluate`` and
``pretrain --resume`` refuse it by name with a command that works.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from simforcing import parallel
from simforcing.config import VIDEO_PRIOR_METHOD, Config, ConfigError
from simforcing.data.videos import VideoWindowDataset
from simforcing.methods import METHODS, method_preset
from simforcing.models.vae import load_vae
from simforcing.models.world_model import build_world_model
from simforcing.train import Trainer, _load_start_weights
from simforcing.warmstart import is_action_side

STAGE = "video_prior"  # the Trainer stage; runfolder.STAGE_KIND maps it to the run kind "video_base"


def freeze_action_side(model: torch.nn.Module) -> list[str]:
    """requires_grad False on what the video prior never trains (``warmstart.is_action_side``); returns the names."""
    frozen = []
    for name, p in model.named_parameters():
        if is_action_side(name):
            p.requires_grad_(False)
            frozen.append(name)
    return frozen


class VideoPriorTrainer(Trainer):
    STAGES = (STAGE,)

    def __init__(self, cfg: Config, out_dir: str | Path, resume: bool = False, progress: bool = True):
        super().__init__(cfg, out_dir, STAGE, None, resume, progress)

    def _check_method(self, cfg: Config) -> None:
        if cfg.train.method != VIDEO_PRIOR_METHOD:
            raise ConfigError(f"train.method: the video prior trains {VIDEO_PRIOR_METHOD!r}, got {cfg.train.method!r}")
        if cfg.data.latent_cache:
            raise ConfigError("data.latent_cache: the video prior reads the videos themselves (sim and real windows "
                              "one by one); unset it")
        if cfg.train.rollout_prob > 0:
            raise ConfigError(f"train.rollout_prob: got {cfg.train.rollout_prob}; the video prior trains on recorded "
                              "windows only (set it to 0)")

    def _describe(self) -> str:
        return "video prior"

    def _step_function(self):
        return METHODS[VIDEO_PRIOR_METHOD]

    def _build_data(self) -> None:
        cfg = self.cfg
        self.dataset = VideoWindowDataset(cfg, cfg.data.root, stats=self._train_stats())
        self.vae = load_vae(cfg, self.device)
        self.stats = self.dataset.stats
        self.domains = ("video",)
        self.log.facts["videos"] = self.dataset.counts  # episodes per domain

    def _build_models(self) -> None:
        cfg = self.cfg
        full = self.dist.mesh is None or self.dist.is_main
        model = build_world_model(cfg, device="cpu", meta=not full)
        if full and not (self.resume and self.has_checkpoints):
            _load_start_weights(model, cfg)
        freeze_action_side(model)
        self.student = parallel.shard_from_rank0(model, cfg, self.dist.mesh, self.device).train()
        self.teacher = None

    def _latents(self, batch: dict, step: int) -> dict:
        """Pixels -> latents ``z_video``; the text. Nothing else of the batch goes on (no actions, no states)."""
        out = {k: batch[k].to(self.device, non_blocking=True) for k in ("text", "text_mask")}
        with torch.no_grad():
            out["z_video"] = self.vae.encode(batch["video"].to(self.device))  # (B, 3, F, H, W) -> (B, C, L+1, h, w)
        if step in self.faults.nan_batch:
            out["z_video"] = torch.full_like(out["z_video"], float("nan"))
        return out


def video_prior_run(cfg: Config, out_dir: str | Path, resume: bool = False, progress: bool = True) -> dict:
    """Train (or resume) the video prior; the result dict of ``simforcing.train.train_run``."""
    cfg = method_preset(copy.deepcopy(cfg), VIDEO_PRIOR_METHOD)
    return VideoPriorTrainer(cfg, out_dir, resume, progress).run()
