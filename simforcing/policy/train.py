"""`simforcing policy train`: the world model's training loop (``simforcing.train.Trainer``: run folder, checkpoints,
resume, SIGTERM/SIGINT, faults, NaN stop, FSDP2) with the policy's data, model, initialisation and step.

    policy_train_run(cfg, out_dir, init="base" | RUN, resume=False) -> the result dict of ``train.train_run``

``cfg`` is a policy config (``settings.policy_config``). On a fresh start the model is built with the setting's
attention mode, initialised by ``init.init_policy`` (the report goes to ``RUN/init.json`` and stdout) and, for
``action_only``, every video parameter is frozen (AdamW sees only the trainable ones). ``--resume`` restores the
checkpoint instead (the initialisation is not redone). Each batch: the observation window -> frozen VAE -> ``z``.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from simforcing import parallel
from simforcing.config import Config, ConfigError
from simforcing.models.vae import load_vae
from simforcing.models.world_model import build_world_model
from simforcing.policy.data import PolicyWindowDataset
from simforcing.policy.init import init_policy
from simforcing.policy.settings import ATTENTION_MODE, check_setting, freeze_for_setting
from simforcing.policy.steps import policy_step
from simforcing.runfolder import INIT_FILE
from simforcing.train import Trainer
from simforcing.utils import atomic_write_text

_KEYS = ("actions", "state0", "text", "text_mask")


class PolicyTrainer(Trainer):
    STAGES = ("policy",)

    def __init__(self, cfg: Config, out_dir: str | Path, init: str = "base", resume: bool = False,
                 progress: bool = True):
        super().__init__(cfg, out_dir, "policy", None, resume, progress)
        self.init = str(init)
        self.init_report = None

    def _check_method(self, cfg: Config) -> None:
        check_setting(cfg.policy.setting)
        if not cfg.model.action_head:
            raise ConfigError("model.action_head: False; a policy needs the action head (policy train sets it)")

    def _describe(self) -> str:
        return f"policy {self.cfg.policy.setting}"

    def _step_function(self):
        return policy_step

    def _build_data(self) -> None:
        cfg = self.cfg
        self.dataset = PolicyWindowDataset(cfg, cfg.data.root, "train", stats=self._train_stats())
        self.vae = load_vae(cfg, self.device)
        self.stats = self.dataset.stats
        self.domains = ("obs",)

    def _build_models(self) -> None:
        cfg, setting = self.cfg, self.cfg.policy.setting
        full = self.dist.mesh is None or self.dist.is_main
        model = build_world_model(cfg, device="cpu", meta=not full, attention_mode=ATTENTION_MODE[setting])
        if full and not (self.resume and self.has_checkpoints):
            self.init_report = init_policy(model, cfg, self.init)
            if self.dist.is_main:
                atomic_write_text(self.run_dir / INIT_FILE, self.init_report.to_json() + "\n")
                print(self.init_report.summary(), flush=True)
        freeze_for_setting(model, setting)
        self.student = parallel.shard_from_rank0(model, cfg, self.dist.mesh, self.device,
                                                 forward_methods=("policy_forward",)).train()
        self.teacher = None

    def _latents(self, batch: dict, step: int) -> dict:
        out = {k: batch[k].to(self.device, non_blocking=True) for k in _KEYS if k in batch}
        obs = batch["obs"].to(self.device)  # (B, 3, F, H, W)
        if self.cfg.policy.setting == "action_only":
            obs = obs[:, :, :1]  # only the observation is encoded (the causal VAE encodes frame 0 alone anyway)
        with torch.no_grad():
            out["z"] = self.vae.encode(obs)  # (B, C, L+1, h, w), or (B, C, 1, h, w) for action_only
        if step in self.faults.nan_batch:
            out["z"] = torch.full_like(out["z"], float("nan"))
        return out


def policy_train_run(cfg: Config, out_dir: str | Path, init: str = "base", resume: bool = False,
                     progress: bool = True) -> dict:
    """Train (or resume) a policy; the result dict of ``simforcing.train.train_run``."""
    return PolicyTrainer(copy.deepcopy(cfg), out_dir, init, resume, progress).run()
