"""Benchmark section ``fewstep``: the guided sampler against its few-step students, side by side in one run.

For the teacher (the preset's sampler (N_s, N_r, w)) and a student of each K in ``opts.fewstep_steps`` (the same
random-weight network sampled by ``sample.FewStepSampler``: the cost of a student does not depend on its
weights): the per-sample network evaluations of one chunk (``forwards``, counted by the sampler) and the latency of a
chunk (batch 1; median of ``opts.fewstep_repeats`` calls after one warm-up, all samplers called in turn so that they
are timed over the same stretch of time), and the episodes per minute of a closed-loop policy evaluation inside the
world model (``rollout.WorldModelEpisodes``, every episode advanced together). Speed-ups are the teacher's over each
student's, against the issue's aim of 5×.
"""

from __future__ import annotations

from typing import Callable

import torch

from simforcing.bench.inputs import pixel_batch
from simforcing.bench.measure import median, time_round_robin
from simforcing.bench.options import BenchOptions
from simforcing.bench.rollout import WorldModelEpisodes, synthetic_world_model
from simforcing.config import Config
from simforcing.fewstep.stage import distill_config
from simforcing.runs.loaded import LoadedWorldModel
from simforcing.sample import sampler_for

AIM = 5.0  # the aim: the student at least 5× the teacher's episodes per minute and 5× lower latency


def bench_fewstep(cfg: Config, device: torch.device, opts: BenchOptions, log: Callable[[str], None]) -> dict:
    teacher = synthetic_world_model(cfg, device)
    models = {"teacher": teacher}
    for k in opts.fewstep_steps:
        models[f"K={k}"] = LoadedWorldModel(distill_config(teacher.cfg, k).validate(), teacher.model, teacher.vae,
                                            teacher.normalizer, masker=teacher.masker)
    samplers = {name: sampler_for(wm) for name, wm in models.items()}
    batch = pixel_batch(teacher.cfg, 1, device)
    forwards = {name: s(batch, torch.Generator().manual_seed(0)).forwards for name, s in samplers.items()}
    times = time_round_robin({name: (lambda s=s: s(batch, torch.Generator().manual_seed(0)))
                              for name, s in samplers.items()}, opts.fewstep_repeats, 1, device)
    episodes = WorldModelEpisodes.build(opts.wm_scenes_per_task, opts.wm_steps)
    rows = []
    for name, wm in models.items():
        seconds = episodes.seconds(wm)
        rows.append({"model": name, "steps": wm.cfg.fewstep.steps or None, "forwards_per_chunk": forwards[name],
                     "latency_s": median(times[name].wall), "latency_cpu_s": median(times[name].cpu),
                     "episodes_per_minute": 60 * episodes.episodes / seconds, "episode_seconds": seconds})
    base = rows[0]
    for r in rows:
        r["latency_speedup"] = base["latency_s"] / r["latency_s"]
        r["latency_speedup_cpu"] = base["latency_cpu_s"] / r["latency_cpu_s"]
        r["episodes_speedup"] = r["episodes_per_minute"] / base["episodes_per_minute"]
        r["meets_aim"] = r["latency_speedup"] >= AIM and r["episodes_speedup"] >= AIM
        log(f"fewstep {r['model']:>7}: {r['forwards_per_chunk']:>2} forwards, {r['latency_s'] * 1e3:7.1f} ms/chunk "
            f"(x{r['latency_speedup']:.2f}), {r['episodes_per_minute']:6.0f} episodes/min "
            f"(x{r['episodes_speedup']:.2f})")
    s = teacher.cfg.sample
    return {"teacher_sampler": {"n_sim": s.n_sim, "n_real": s.n_real, "w": s.w}, "episodes": episodes.episodes,
            "steps": episodes.steps, "execute": episodes.execute, "repeats": opts.fewstep_repeats, "aim": AIM,
            "rows": rows}


def format_fewstep(fs: dict | None) -> list[str]:
    """Markdown lines of the section (empty when it did not run)."""
    if not fs:
        return []
    t = fs["teacher_sampler"]
    lines = [f"Few-step students against the teacher's sampler ({t['n_sim']}, {t['n_real']}, {t['w']:g}): one chunk "
             f"(batch 1, median of {fs['repeats']}) and a policy evaluation inside the world model ({fs['episodes']} "
             f"episodes of {fs['steps']} steps, all together); speed-ups over the teacher (aim {fs['aim']:g}×)", "",
             "| model | forwards / chunk | ms / chunk | speed-up | speed-up (CPU time) | episodes / min | speed-up |",
             "|---|---|---|---|---|---|---|"]
    for r in fs["rows"]:
        lines.append(f"| {r['model']} | {r['forwards_per_chunk']} | {r['latency_s'] * 1e3:.1f} | "
                     f"{r['latency_speedup']:.2f}× | {r['latency_speedup_cpu']:.2f}× | "
                     f"{r['episodes_per_minute']:.0f} | {r['episodes_speedup']:.2f}× |")
    return lines + [""]
