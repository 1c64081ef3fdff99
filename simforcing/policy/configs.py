"""The config of a policy run: where it starts from (a preset for ``--init base``, the world-model run's config for
``--init RUN``), the policy dataset's cameras side by side, the setting, then the command line's overrides.

    cfg = policy_run_config("action_only", "runs/demo/simforcing", "data/policy", overrides=["--train.max_steps=800"])
"""

from __future__ import annotations

from pathlib import Path

from simforcing.config import Config, ConfigError, apply_overrides, load_config, parse_overrides
from simforcing.policy.data import read_policy_info
from simforcing.policy.settings import policy_config


def policy_run_config(setting: str, init: str, data: str | None, preset: str = "demo",
                      overrides: list[str] | None = None, resume_from: str | Path | None = None,
                      config: str | Path | None = None) -> Config:
    """``resume_from``: a policy run folder whose config.json is the base (``--resume``); ``config``: a config.json
    to start from instead of the preset (with ``--init base``: e.g. a world-model run's, for a base policy of the
    same architecture and VAE whose weights are not inherited)."""
    if resume_from is not None and (Path(resume_from) / "config.json").is_file():
        cfg = Config.load(Path(resume_from) / "config.json")
        if cfg.policy.setting != setting:
            raise ConfigError(f"--setting: {resume_from} was trained with {cfg.policy.setting!r}, not {setting!r}; "
                              "resume it with the same --setting")
    else:
        if init == "base":
            cfg = Config.load(config) if config else load_config(preset)
        else:
            path = Path(init) / "config.json"
            if not path.is_file():
                raise ConfigError(f"--init: {path} is missing; expected 'base' or a run folder written by "
                                  "`simforcing pretrain/train/policy train`")
            cfg = Config.load(path)
        if not cfg.model.action_head:  # a world model's config: one camera wide -> the cameras side by side
            asked = parse_overrides(list(overrides or [])).get("policy.cameras")
            cfg.data.width *= int(asked) if asked in ("1", "2") else cfg.policy.cameras  # others: refused below
        cfg.data.latent_cache = cfg.data.text_cache = None
        cfg.data.fixed_window = False
    if data:
        cfg.data.root = str(data)
    if not cfg.data.root:
        raise ConfigError("--data: the policy dataset folder is required (simforcing data synth-policy OUT)")
    apply_overrides(cfg, parse_overrides(list(overrides or [])))
    cfg = policy_config(cfg, setting)
    read_policy_info(cfg.data.root, cfg.policy.cameras)  # a named error now for a world-model dataset or a missing
    #                                                        camera
    return cfg
