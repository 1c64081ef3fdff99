"""The config of a policy run: where it starts from (a preset for ``--init base``, the world-model run's config for
``--init RUN``), the policy dataset's cameras side by side, the setting, then the command line's overrides.

    cfg = policy_run_config("action_only", "runs/demo/simforcing", "data/policy", overrides=["--train.max_steps=800"])
"""

from __future__ import annotations

from pathlib import Path

from simforcing.config import Config, ConfigError, apply_overrides, load_config, parse_overrides
from simforcing.data.policy_format import read_policy_info
from simforcing.policy.settings import policy_config
from simforcing.runs.folder import CONFIG_FILE, INIT_POLICY, require_kind, run_config


def policy_run_config(setting: str, init: str, data: str | None, preset: str = "demo",
                      overrides: list[str] | None = None, resume_from: str | Path | None = None,
                      config: str | Path | None = None) -> Config:
    """``resume_from``: a policy run folder whose config.json is the base (``--resume``; another kind of run is
    refused by name); ``init``: "base" (the preset, or ``config``: a config.json to start from instead, e.g. a
    world-model run's, for a base policy of the same architecture and VAE whose weights are not inherited) or a run
    folder, whose newest checkpoint's own config is the base."""
    if resume_from is not None and (Path(resume_from) / CONFIG_FILE).is_file():
        require_kind(resume_from, ("policy",), "--out", "resume_policy")
        cfg = Config.load(Path(resume_from) / CONFIG_FILE)
        if cfg.policy.setting != setting:
            raise ConfigError(f"--setting: {resume_from} was trained with {cfg.policy.setting!r}, not {setting!r}; "
                              "resume it with the same --setting")
    else:
        if init == "base":
            cfg = Config.load(config) if config else load_config(preset)
        else:  # the config the run's newest checkpoint was trained with (its own copy)
            cfg = run_config(init, INIT_POLICY, "--init", "init")
        if not cfg.model.action_head:  # a world model's config: one camera wide -> the cameras side by side
            asked = parse_overrides(list(overrides or [])).get("policy.cameras")
            cfg.data.width *= int(asked) if asked in ("1", "2") else cfg.policy.cameras  # others: refused below
        cfg.data.latent_cache = cfg.data.text_cache = None
        cfg.data.fixed_window = False
    if data:
        cfg.data.root = str(data)
    if not cfg.data.root:
        raise ConfigError("--data: the policy dataset folder is required (simforcing data synth-policy OUT)")
    ov = parse_overrides(list(overrides or []))
    apply_overrides(cfg, ov)
    _check_set_by_policy(cfg, ov, setting)
    cfg = policy_config(cfg, setting)
    read_policy_info(cfg.data.root, cfg.policy.cameras)  # a named error now for a world-model dataset or a missing
    #                                                        camera
    return cfg


def _check_set_by_policy(cfg: Config, ov: dict, setting: str) -> None:
    """The fields ``settings.policy_config`` sets (--setting, the action head): an override that asks otherwise would
    be overwritten without a word, so it is a ConfigError naming it."""
    fixed = {"policy.setting": setting, "model.action_head": True, "model.use_action_expert": True,
             "model.action_conditioning": "expert"}
    for key, want in fixed.items():
        section, name = key.split(".")
        if key in ov and getattr(getattr(cfg, section), name) != want:
            raise ConfigError(f"--{key}={ov[key]}: a policy run of --setting {setting} has {key} = {want!r}; "
                              + ("choose the setting with --setting" if key == "policy.setting" else
                                 "a policy needs the action expert and its head") + " and leave the override out")
