"""Benchmark section ``policy``: latency of one action chunk per policy setting (SPEC §9 inference), the network
work counted, against a plain loop that recomputes the observation at every denoising step.

Per setting (random weights, the preset's sizes with two cameras side by side, ``policy.flow_steps`` steps):
``latency_s`` — one ``PolicyRunner.act`` call (VAE encode of the observation, then the denoising loop, then
de-normalisation), median after one warm-up; ``counts`` — per chunk: observation encodes (one video-expert pass over
the first latent frame), action-expert steps, joint forwards; ``plain_s`` — the same chunk with a full
``policy_forward`` at every step (action_only / unconditional: the observation recomputed each step; video_action:
the same as ours), ``speedup`` = plain / ours, and ``max_abs_diff_vs_plain`` — the two chunks from the same noise
must agree (to float rounding).
"""

from __future__ import annotations

import copy
from typing import Callable

import numpy as np
import torch

import simforcing.flow as flow
from simforcing.bench.inputs import bench_vae
from simforcing.bench.measure import median, time_round_robin
from simforcing.bench.options import BenchOptions
from simforcing.config import POLICY_SETTINGS, Config
from simforcing.models.world_model import build_world_model
from simforcing.policy.infer import PolicyRunner
from simforcing.policy.settings import ATTENTION_MODE, policy_config


class _FixedText:
    """A fixed instruction embedding (the bench measures the network, not the text encoder)."""

    def __init__(self, dim: int, n: int = 16):
        self.dim, self.n = dim, n

    def encode(self, texts):
        return [torch.ones(self.n, self.dim) * 0.1 for _ in texts]


def policy_runner(cfg: Config, setting: str, device: torch.device, seed: int = 0) -> PolicyRunner:
    c = policy_config(copy.deepcopy(cfg), setting)
    c.data.width *= c.policy.cameras
    torch.manual_seed(seed)
    model = build_world_model(c, device=device, attention_mode=ATTENTION_MODE[setting])
    with torch.no_grad():
        for p in list(model.action.proj_out.parameters()) + list(model.video.proj_out.parameters()):
            p.normal_(0, 0.02)
    stats = {k: {"min": [-1.0] * n, "max": [1.0] * n} for k, n in (("action", c.data.action_dim),
                                                                  ("state", c.data.state_dim))}
    return PolicyRunner(c, model, bench_vae(c, device), stats, device, _FixedText(c.model.text_dim))


def _plain_chunk(runner: PolicyRunner, image, state, gen_seed: int):
    """The reference: a full policy_forward at every denoising step (no cached observation)."""
    cfg, m = runner.cfg, runner.model
    with torch.no_grad():
        z0 = runner.vae.encode(runner.observation(image))
        s = torch.as_tensor(np.asarray(state, np.float32)[None], device=runner.device)
        text = runner.text("bench")
        g = torch.Generator().manual_seed(gen_seed)
        a = torch.randn((1, cfg.data.actions_per_window, cfg.data.action_dim), generator=g).to(runner.device)
        taus = flow.euler_schedule(cfg.policy.flow_steps, cfg.flow.shift).to(runner.device)
        z = None
        if cfg.policy.setting == "video_action":
            z = torch.randn((1, z0.shape[1], cfg.latent_frames - 1, *z0.shape[3:]), generator=g).to(runner.device)
        for i in range(cfg.policy.flow_steps):
            tau = taus[i].expand(1)
            u_v, u_a = m.policy_forward(z, tau if z is not None else None, z0, a, tau, s, text)
            a = flow.euler_step(a, u_a, taus[i], taus[i + 1])
            if z is not None:
                z = flow.euler_step(z, u_v, taus[i], taus[i + 1])
    return a


def bench_policy(cfg: Config, device: torch.device, opts: BenchOptions, log: Callable[[str], None]) -> dict:
    out: dict = {"settings": {}}
    for setting in POLICY_SETTINGS:
        runner = policy_runner(cfg, setting, device)
        c = runner.cfg
        cams = c.policy.cameras
        image = (np.random.default_rng(0).random((c.data.height, c.data.width, 3)) * 255).astype(np.uint8)
        state = np.zeros(c.data.state_dim, np.float32)
        runner.act(image, state, "bench", torch.Generator().manual_seed(0))  # warm-up
        runner.counts.clear()
        runner.act(image, state, "bench", torch.Generator().manual_seed(0))
        counts = dict(runner.counts)
        times = time_round_robin({"ours": lambda: runner.act(image, state, "bench", torch.Generator().manual_seed(0)),
                                  "plain": lambda: _plain_chunk(runner, image, state, 0)},
                                 opts.policy_repeats, 1, device)
        ours, plain = median(times["ours"].wall), median(times["plain"].wall)
        a_ours = runner.act(image, state, "bench", torch.Generator().manual_seed(0))
        a_plain = runner.normalizer.denormalize("action", _plain_chunk(runner, image, state, 0)[0].cpu().numpy())
        row = {"flow_steps": c.policy.flow_steps, "actions_per_chunk": c.data.actions_per_window,
               "execute": min(c.policy.execute, c.data.actions_per_window),
               "resolution": [c.data.height, c.data.width], "cameras": cams, "counts_per_chunk": counts,
               "latency_s": ours, "latency_cpu_s": median(times["ours"].cpu), "plain_s": plain,
               "speedup": plain / ours if ours > 0 else None,
               "max_abs_diff_vs_plain": float(np.abs(a_ours - a_plain).max())}
        out["settings"][setting] = row
        log(f"policy {setting}: {ours * 1e3:.1f} ms per chunk ({counts}); plain loop {plain * 1e3:.1f} ms -> "
            f"{row['speedup']:.2f}x")
    return out


def format_policy(p: dict) -> list[str]:
    if "skipped" in p:
        return [f"Policy: skipped ({p['skipped']})", ""]
    if not p.get("settings"):
        return []
    any_row = next(iter(p["settings"].values()))
    lines = [f"Policy: one action chunk ({any_row['actions_per_chunk']} actions, {any_row['flow_steps']} flow steps, "
             f"{any_row['cameras']} cameras at {any_row['resolution'][0]}x{any_row['resolution'][1]}, batch 1; "
             "median after a warm-up):", "",
             "| setting | latency per chunk (ms) | observation encodes | action-expert steps | joint forwards "
             "| plain loop (ms) | speed-up |", "|---|---|---|---|---|---|---|"]
    for name, r in p["settings"].items():
        c = r["counts_per_chunk"]
        lines.append(f"| {name} | {r['latency_s'] * 1e3:.1f} | {c.get('observation_encodes', 0)} | "
                     f"{c.get('action_steps', 0)} | {c.get('joint_forwards', 0)} | {r['plain_s'] * 1e3:.1f} | "
                     f"{r['speedup']:.2f}x |")
    return lines + [""]
