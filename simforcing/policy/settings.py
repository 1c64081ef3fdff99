"""The three policy settings (paper §VLA, after FastWAM; SPEC §9): attention mode, what trains, what inference runs.

| setting         | attention mode         | video tokens               | trains                                  | loss          |
|-----------------|------------------------|----------------------------|-----------------------------------------|---------------|
| `action_only`   | (first frame only)     | the observation            | action expert + head, proprio projection | action FM     |
| `unconditional` | `policy_unconditional` | observation + noisy future | everything                              | video + action FM |
| `video_action`  | `policy_video_action`  | observation + noisy future | everything                              | video + action FM |

Inference: `action_only` and `unconditional` encode the observation once per chunk and denoise actions only
(no future video is made); `video_action` denoises future video and actions together, the first frame fixed.
"""

from __future__ import annotations

import torch

from simforcing.config import POLICY_SETTINGS, Config, ConfigError

ATTENTION_MODE = {"action_only": "policy_video_action", "unconditional": "policy_unconditional",
                  "video_action": "policy_video_action"}
WITH_VIDEO = ("unconditional", "video_action")  # settings with future video (and its FM loss)


# the largest closed-loop evaluation asked for: far beyond the benchmark's (30 steps, tens of scenes per task), below
# what would only end in a MemoryError or run for ever
MAX_EPISODE_STEPS, MAX_SCENES_PER_TASK = 10_000, 10_000


def check_episode_counts(per_task: int, max_steps: int, execute: int | None = None) -> None:
    """ConfigError naming the flag of a scene count, step limit or executed-actions count out of range."""
    for flag, value, top in (("--per-task", per_task, MAX_SCENES_PER_TASK), ("--max-steps", max_steps,
                                                                             MAX_EPISODE_STEPS),
                             ("--execute", execute, MAX_EPISODE_STEPS)):
        if value is not None and not 1 <= value <= top:
            raise ConfigError(f"{flag}: got {value}; expected an integer in [1, {top}]")


def check_setting(setting: str) -> str:
    if setting not in POLICY_SETTINGS:
        raise ConfigError(f"--setting: got {setting!r}; expected one of {', '.join(POLICY_SETTINGS)}")
    return setting


def is_video_parameter(name: str) -> bool:
    """The video expert's parameters: its stem/head (``video.*``), its blocks and the simulation-condition
    projections (``layers.N.video.*``, ``layers.N.cond_proj.*``)."""
    return name.startswith("video.") or ".video." in name or ".cond_proj." in name


def freeze_for_setting(model: torch.nn.Module, setting: str) -> list[str]:
    """action_only: every video parameter frozen (requires_grad False); returns the frozen names."""
    frozen = []
    if check_setting(setting) == "action_only":
        for name, p in model.named_parameters():
            if is_video_parameter(name):
                p.requires_grad_(False)
                frozen.append(name)
    return frozen


def policy_config(cfg: Config, setting: str) -> Config:
    """``cfg`` turned into a policy config (in place): the action head on (the action expert's; a world model's
    per-frame action conditioning, ``model.action_conditioning``, is not a policy's: its actions are its output), the
    setting recorded, validated."""
    cfg.policy.setting = check_setting(setting)
    cfg.model.action_head = True
    cfg.model.use_action_expert = True
    cfg.model.action_conditioning = "expert"
    return cfg.validate()
