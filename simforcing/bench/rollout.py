"""Benchmark sections ``rollout`` and ``wm_policy``: long rollouts batched over episodes, and policies evaluated
inside a world model against the simulator.

``rollout`` — B episodes rolled out together over K chunks at the paper's sampler (``simforcing.rollout``, one
batched sampler call per chunk) for B = 1 and B = ``rollout_batch``, against the same B episodes rolled out one at a
time: seconds per chunk, per generated frame, the throughput ratio (frames per second batched / one at a time), and
the per-sample forwards against the minimal ones (w = 0: N_r, w = 1: N_s + N_r, else N_s + 2 N_r per chunk).

``wm_policy`` — episodes per minute of a closed-loop evaluation (``policy.closed_loop.world_model_eval``: the
scripted expert and do-nothing on held-out layout scenes, random-weight world model and judge) with every episode
advanced together, against the same episodes in the MuJoCo simulator (``policy.closed_loop.evaluate``) and against a
one-episode-at-a-time world model loop.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from simforcing.bench.inputs import bench_model, bench_vae, bench_world_model, pixel_batch
from simforcing.bench.options import BenchOptions
from simforcing.bench.sampler import minimal_forwards
from simforcing.config import Config
from simforcing.evaluate.probe import ProbeConfig
from simforcing.policy.judge.success_judge import PREDICATES, JudgeNet, SuccessJudge
from simforcing.rollout import WorldModelRollout
from simforcing.runs.loaded import LoadedWorldModel
from simforcing.sampler_batch import SamplerBatch


def _roll(wm: LoadedWorldModel, batch: SamplerBatch, idx: list[int], chunks: int) -> tuple[float, int]:
    """Roll episodes ``idx`` of ``batch`` over ``chunks`` chunks of its window's actions; (seconds, per-sample
    forwards)."""
    gens = [torch.Generator().manual_seed(i) for i in idx]
    ro = WorldModelRollout(wm, batch.first_frame[idx], batch.state0[idx], batch.text[idx], batch.text_mask[idx], gens,
                           first_mask=batch.arm_mask[idx])
    t0 = time.perf_counter()
    ro.run(batch.actions[idx].repeat(1, chunks, 1))
    return time.perf_counter() - t0, ro.forwards


def bench_rollout(cfg: Config, device: torch.device, opts: BenchOptions, log: Callable[[str], None]) -> dict:
    c = copy.deepcopy(cfg)
    wm = bench_world_model(c, bench_model(c, device), bench_vae(c, device), device)
    b, k = opts.rollout_batch, opts.rollout_chunks
    batch = pixel_batch(c, b, device)
    frames_per_chunk = c.data.frames - 1
    s = c.sample
    rows = []
    _roll(wm, batch, [0], 1)  # warm-up
    for size in (1, b):
        together, fwd = _roll(wm, batch, list(range(size)), k)
        alone = sum(_roll(wm, batch, [i], k)[0] for i in range(size))
        row = {"batch": size, "chunks": k, "seconds": together, "seconds_one_at_a_time": alone,
               "s_per_chunk": together / k, "s_per_frame": together / (k * frames_per_chunk * size),
               "s_per_frame_one_at_a_time": alone / (k * frames_per_chunk * size),
               "throughput_ratio": alone / together, "forwards_per_chunk": fwd / k,
               "minimal_forwards_per_chunk": minimal_forwards(s.n_sim, s.n_real, s.w)}
        rows.append(row)
        log(f"rollout batch {size}: {row['s_per_chunk']:.3f} s/chunk, {1e3 * row['s_per_frame']:.1f} ms/frame, "
            f"{row['throughput_ratio']:.2f}x one at a time")
    return {"sampler": {"n_sim": s.n_sim, "n_real": s.n_real, "w": s.w}, "frames_per_chunk": frames_per_chunk,
            "rows": rows}


@dataclass
class WorldModelEpisodes:
    """The closed-loop world-model evaluation the benchmark times (random-weight judge, the scripted expert and
    do-nothing on held-out layout scenes, ``execute`` actions per chunk): :meth:`seconds` of a world model."""

    players: dict
    starts: list
    judge: SuccessJudge
    steps: int
    execute: int = 4

    @classmethod
    def build(cls, scenes_per_task: int, steps: int) -> "WorldModelEpisodes":
        # MuJoCo (the simulator's scenes) loads for these sections only
        from simforcing.policy.closed_loop.evaluate import ExpertPlayer, IdlePlayer
        from simforcing.policy.closed_loop.synthetic import held_out_scenes
        from simforcing.policy.closed_loop.world_model_eval import start_frames

        torch.manual_seed(0)
        judge = SuccessJudge(JudgeNet(ProbeConfig(32, 48, 6, (0, 1, 2), None)),
                             {"resolution": [32, 48], "layouts": 2, "predicates": PREDICATES})
        scenes = held_out_scenes(9000, scenes_per_task, steps, layouts=2)
        starts = start_frames(scenes, 9000, steps, 32, 48, 2, 0.03)
        return cls({"expert": ExpertPlayer(), "idle": IdlePlayer()}, starts, judge, steps)

    @property
    def episodes(self) -> int:
        return len(self.players) * len(self.starts)

    def seconds(self, wm: LoadedWorldModel, players: Optional[dict] = None, starts: Optional[list] = None) -> float:
        """Wall seconds of the episodes of ``players`` × ``starts`` (default: all) advanced together inside ``wm``
        (its sampler: ``sample.sampler_for``), the judge reading every chunk."""
        from simforcing.policy.closed_loop.world_model_eval import Episodes

        t0 = time.perf_counter()
        ep = Episodes(wm, self.players if players is None else players, self.starts if starts is None else starts)
        t = 0
        while t < self.steps:
            n = min(self.execute, self.steps - t)
            images, states = ep.observe()
            new = ep.step(ep.act(images, states, t, t // self.execute), n)
            self.judge.read_video(torch.cat([ep.first[:, :, None], new], dim=2), torch.zeros(new.shape[0], 3))
            t += n
        return time.perf_counter() - t0


def synthetic_world_model(cfg: Config, device: torch.device) -> LoadedWorldModel:
    """A random-weight world model of ``cfg`` at the synthetic benchmark's camera (32×48)."""
    c = copy.deepcopy(cfg)
    c.data.height, c.data.width = 32, 48
    return bench_world_model(c, bench_model(c, device), bench_vae(c, device), device)


def bench_wm_policy(cfg: Config, device: torch.device, opts: BenchOptions, log: Callable[[str], None]) -> dict:
    """Episodes per minute: world model (all together) vs the simulator vs a world model one episode at a time."""
    from simforcing.policy.closed_loop.evaluate import evaluate_synthetic

    wm = synthetic_world_model(cfg, device)
    run = WorldModelEpisodes.build(opts.wm_scenes_per_task, opts.wm_steps)
    n_eps, steps = run.episodes, run.steps
    together = run.seconds(wm)
    alone = sum(run.seconds(wm, {k: p}, [s]) for k, p in run.players.items()
                for s in run.starts[: opts.wm_alone_scenes])
    alone *= len(run.starts) / max(1, min(len(run.starts), opts.wm_alone_scenes))
    t0 = time.perf_counter()
    evaluate_synthetic({}, opts.wm_scenes_per_task, steps, layouts=2, jitter=0.03, progress=lambda *_: None)
    sim = time.perf_counter() - t0
    out = {"episodes": n_eps, "steps": steps, "execute": run.execute,
           "episodes_per_minute": {"world_model_batched": 60 * n_eps / together,
                                   "world_model_one_at_a_time": 60 * n_eps / alone,
                                   "simulator": 60 * n_eps / sim},
           "seconds": {"world_model_batched": together, "world_model_one_at_a_time_est": alone, "simulator": sim},
           "note": f"one-at-a-time: {opts.wm_alone_scenes} scene(s) per player timed, scaled to all"}
    e = out["episodes_per_minute"]
    log(f"world-model policy evaluation: {e['world_model_batched']:.0f} episodes/min batched, "
        f"{e['world_model_one_at_a_time']:.0f} one at a time, {e['simulator']:.0f} in the simulator")
    return out


def format_rollout(ro: dict | None, wm: dict | None) -> list[str]:
    """Markdown lines of the two sections (empty when neither ran)."""
    lines: list[str] = []
    if ro:
        s = ro["sampler"]
        lines += [f"Long rollouts (sampler ({s['n_sim']}, {s['n_real']}, {s['w']:g}), {ro['frames_per_chunk']} frames "
                  "per chunk): episodes advanced together vs the same episodes one at a time", "",
                  "| episodes | s / chunk | ms / frame | ms / frame one at a time | throughput × | forwards / chunk "
                  "(minimal) |", "|---|---|---|---|---|---|"]
        for r in ro["rows"]:
            lines.append(f"| {r['batch']} | {r['s_per_chunk']:.3f} | {1e3 * r['s_per_frame']:.1f} | "
                         f"{1e3 * r['s_per_frame_one_at_a_time']:.1f} | {r['throughput_ratio']:.2f} | "
                         f"{r['forwards_per_chunk']:g} ({r['minimal_forwards_per_chunk']}) |")
        lines.append("")
    if wm:
        e = wm["episodes_per_minute"]
        lines += [f"Policies inside a world model ({wm['episodes']} episodes of {wm['steps']} steps, "
                  f"{wm['execute']} actions per chunk): episodes per minute", "",
                  "| world model, all episodes together | world model, one at a time | MuJoCo simulator |",
                  "|---|---|---|",
                  f"| {e['world_model_batched']:.0f} | {e['world_model_one_at_a_time']:.0f} | {e['simulator']:.0f} |",
                  ""]
    return lines
