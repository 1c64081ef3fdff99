"""The model card (README.md) of an exported world model (``simforcing.export``): what it is (the method and the
network), what it was trained on and for how long, how it scored (the evaluations given to the export, each of this
checkpoint), what it expects (VAE, text encoder, inputs, sampler) and how to load it. Written from the run's own
records only: its config, status.json, metrics.jsonl, the dataset's splits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from simforcing.evaluate.results import WindowEvaluation
from simforcing.runs.folder import METRICS_FILE, STATUS_FILE
from simforcing.runs.loaded import LoadedWorldModel
from simforcing.utils import fmt_num

KIND_TEXT = {"stage1": "stage 1: the simulation world model (trained on simulation videos; the frozen teacher of "
                       "SimForcing's stage 2)",
             "stage2": "stage 2: the real-domain student world model"}
ACTION_PATHS = {"expert": "action expert",  # model.action_conditioning
                "frame": "per-frame action adaLN (each latent frame's actions modulate that frame)",
                "both": "action expert + per-frame action adaLN"}
METHOD_TEXT = {"simforcing": "SimForcing: the frozen simulation world model distils its motion prior into the "
                             "real-domain student; the two-stage sampler guides the real rollout with a simulation "
                             "rollout (simulation-guidance CFG)",
               "sft": "supervised fine-tuning on the real data (the baseline without the simulation teacher)"}


def _json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _last_loss(run: Path) -> Optional[float]:
    """The loss of the last logged step of RUN/metrics.jsonl (None when absent)."""
    try:
        lines = (run / METRICS_FILE).read_text().strip().splitlines()
        return float(json.loads(lines[-1]).get("loss")) if lines else None
    except (OSError, ValueError, TypeError):
        return None


def _data_lines(cfg) -> list[str]:
    root = Path(cfg.data.root) if cfg.data.root else None
    splits = _json(root / "meta" / "splits.json") if root else None
    sizes = ", ".join(f"{k} {len(v)}" for k, v in splits.items()) if isinstance(splits, dict) else "not readable here"
    d = cfg.data
    return [f"- dataset: `{cfg.data.root}` (episodes per split: {sizes})",
            f"- windows: {d.frames} frames of {d.height}×{d.width}"
            + (f" per camera ({', '.join(d.view_names)}, side by side along the {d.view_layout})"
               if d.num_views > 1 else "")
            + f", frame stride {d.frame_stride}, {d.actions_per_window} actions of {d.action_dim} dims, state of "
            f"{d.state_dim} dims"]


def _budget_lines(cfg, run: Path, source: dict) -> list[str]:
    t, status = cfg.train, _json(run / STATUS_FILE) or {}
    limit = f"max_steps {t.max_steps}" if t.max_steps else f"{t.epochs} epochs"
    state = source.get("run_state") or status.get("state", "unknown")  # "interrupted": killed while "running"
    total = source.get("total_steps") or status.get("total_steps")
    return [f"- trained {source['step']} optimiser steps ({limit}; run state: {state}"
            + (f", {total} planned" if total else "") + ")",
            f"- batch size {t.batch_size} per device, learning rate {t.lr:g} (warm-up {t.warmup_frac:g} of the steps, "
            f"then cosine), weight decay {t.weight_decay:g}, seed {t.seed}, mixed precision {t.mixed_precision}",
            f"- last logged training loss: {fmt_num(_last_loss(run), 4)}"]


def _unfinished_lines(source: dict) -> list[str]:
    """A warning at the top of the card when the run was not finished (exported with ``--allow-unfinished``)."""
    if source.get("finished") is not False:
        return []
    total = f" of {source['total_steps']} planned" if source.get("total_steps") else ""
    return [f"**Unfinished model.** The run was not finished when it was exported (run state "
            f"{source.get('run_state')}; step {source['step']}{total}; `simforcing export --allow-unfinished`): these "
            "weights are those of a model still in training, not a result.", ""]


def _eval_lines(scores: list[WindowEvaluation]) -> list[str]:
    if not scores:
        return ["No evaluation was given to the export (`simforcing evaluate --ckpt RUN --out EVAL`, then "
                "`simforcing export ... --eval EVAL`)."]
    lines = ["Held-out windows of this checkpoint (`simforcing evaluate`):", "",
             "| split | windows | PSNR ↑ | SSIM ↑ | arm PSNR ↑ | action error (state units) ↓ | sampler |",
             "|---|---|---|---|---|---|---|"]
    for r in scores:
        s, m = r.sampler, r.scores.metric
        lines.append(f"| {r.split} ({r.domain}) | {r.scores.num_samples} | {fmt_num(m('psnr'), 2)} | "
                     f"{fmt_num(m('ssim'), 4)} | {fmt_num(m('psnr_arm'), 2)} | {fmt_num(m('af_pos'), 4)} | "
                     f"N_s {s.get('n_sim')}, N_r {s.get('n_real')}, w {s.get('w')} |")
    return lines


def model_card(wm: LoadedWorldModel, run: Path, source: dict, vae: dict, text: dict, scores: list[WindowEvaluation],
               index: dict) -> str:
    """The card's markdown (module docstring)."""
    cfg, m = wm.cfg, wm.cfg.model
    params = sum(p.numel() for p in wm.model.parameters())
    shards = len(set(index["weight_map"].values()))
    vae_text = (f"{vae['kind']} VAE, {vae['latent_channels']} latent channels — "
                + ("copied into `vae/` (loads with the folder)" if vae["copied"] else
                   f"expected at `{vae['path']}` (Wan2.2-TI2V-5B's AutoencoderKLWan, diffusers layout); pass "
                   "`vae=DIR` to `from_pretrained` where it lives elsewhere"))
    text_line = (f"`{text['path']}` ({text['kind']}); pass `text_encoder=DIR` where it lives elsewhere"
                 if text["path"] else text["kind"])
    s = cfg.sample
    return "\n".join([
        f"# SimForcing world model — {run.name}", "",
        f"An action-conditioned robot video world model exported by simforcing {source['simforcing']} from the run "
        f"`{source['run']}` (checkpoint step {source['step']}).", "", *_unfinished_lines(source),
        "## Method", "",
        f"- {KIND_TEXT.get(source['kind'], source['kind'] or 'world model')}",
        f"- training method `{cfg.train.method}`: {METHOD_TEXT.get(cfg.train.method, 'see docs/DESIGN.md')}",
        f"- network: Wan2.2-style video expert + {ACTION_PATHS.get(m.action_conditioning, m.action_conditioning)}, "
        f"{m.num_layers} layers, {m.num_attention_heads} heads "
        f"× {m.attention_head_dim}, {params:,} parameters in {shards} safetensors shard{'s' * (shards > 1)}; "
        f"{m.parameterization} parameterisation", "",
        "## Data", "", *_data_lines(cfg), "",
        "## Training budget", "", *_budget_lines(cfg, run, source), "",
        "## Evaluation", "", *_eval_lines(scores), "",
        "## What it expects", "",
        f"- VAE: {vae_text}",
        f"- text encoder: {text_line}",
        f"- inputs: a first frame (any size; resized and centre-cropped to {cfg.data.height}×{cfg.data.width}"
        + (f"; one per camera, {{view: frame}} of {', '.join(cfg.data.view_names)}" if cfg.data.num_views > 1
           else "") + "), the "
        f"state ({cfg.data.state_dim}), {cfg.data.actions_per_window} actions ({cfg.data.action_dim}) per window in "
        "the dataset's units" + (" (normalised with `normalizer.json`)" if wm.normalizer is not None else ""),
        f"- sampler defaults: N_s {s.n_sim}, N_r {s.n_real}, w {s.w}, first-frame masking `{s.mask_mode}`", "",
        "## Load it", "", "```python", "from simforcing import WorldModelPipeline", "",
        "pipe = WorldModelPipeline.from_pretrained(\"THIS_FOLDER\")",
        "out = pipe(frame, instruction, state, actions, arm_mask=mask)   # out.video: uint8 (F, H, W, 3)", "```", ""])
