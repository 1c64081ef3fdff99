"""The inputs of `simforcing fidelity point`, written as the commands write them (their typed records' ``to_json``), with
numbers chosen so that every fidelity number can be computed by hand (tests/test_fidelity.py, the fault tests).

    wm = world_model(tmp / "stage2", 600)                   # the world model every input records (a ScoredRun)
    window_eval(tmp / "o", wm, af=0.0625)                   # evaluate --sample.condition=oracle: eval.json
    rollout(tmp / "t", wm)                                  # rollout --sample.condition=render --rows rollout restart
    wm_eval(tmp / "s", wm)                                  # policy eval --env world-model: eval.json + frames.npz
    agreement(tmp / "a", {"wm-a": wm})                      # policy agreement: agreement.json
    metrics_run(tmp / "stage2", [(300, 1.5), (600, 4.25)])   # a training run's metrics.jsonl
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np

from simforcing.evaluate.latency import summarize_latency
from simforcing.evaluate.results import ActionFollowing, ChunkSeries, RolloutDrift, WindowEvaluation, WindowScores
from simforcing.policy.closed_loop.results import WORLD_MODEL, AgreementResult, PolicyEvaluation, Rate, RankingStats
from simforcing.runs.scored import ScoredRun

CLEAN_EXPERT = "scripted expert (ceiling)"
CHUNK_AF = {"rollout": [0.10, 0.12, 0.14, 0.16], "restart": [0.09, 0.09, 0.10, 0.10]}
CHUNK_PSNR = {"rollout": [22.0, 21.0, 20.0, 19.0], "restart": [23.0, 22.5, 22.5, 22.0]}


def world_model(run: Path, step: int = 600) -> ScoredRun:
    return ScoredRun(str(run), str(run / "checkpoints" / f"step_{step:06d}"), step, True, "finished", step)


def window_eval(folder: Path, wm: Optional[ScoredRun], condition: str = "oracle", af: Optional[float] = 0.0625,
                psnr: float = 24.5) -> Path:
    """eval.json of `evaluate`: 80 windows, action error ``af`` (m), floor 2.6 cm, PSNR ``psnr``, at w = 1."""
    scores = WindowScores(psnr=psnr, ssim=0.8, psnr_arm=15.0, lpips=None, fid=None, fvd=None, reasons={},
                          action=ActionFollowing(af_pos=af, af_floor_pos=0.026), fid_num_images=None,
                          fvd_num_videos=None, num_samples=80, num_frames_compared=8, protocol={}, per_sample={},
                          latency=summarize_latency([0.3, 0.2]), latency_s=0.2, latency_phases_s={}, forwards_per_sample=21)
    ev = WindowEvaluation(scores, split="val", domain="real", data="data", requested_samples=80,
                          sampler={"condition": condition, "w": 1.0, "n_sim": 1, "n_real": 10, "mask_mode": "arm",
                                   "seed": 0}, device="cpu", include_first_frame=False,
                          checkpoint=wm)
    folder.mkdir(parents=True, exist_ok=True)
    ev.write(folder, "eval\n")
    return folder


def rollout(folder: Path, wm: ScoredRun, condition: str = "render", rows=("rollout", "restart")) -> Path:
    """rollout.json of `rollout`: 2 episodes × 4 chunks, the rows' action error and PSNR per chunk ``CHUNK_*``."""
    series = {r: ChunkSeries({"af_pos": CHUNK_AF[r], "psnr": CHUNK_PSNR[r]},
                             {"af_pos": float(np.mean(CHUNK_AF[r])), "psnr": float(np.mean(CHUNK_PSNR[r]))},
                             {}, {}) for r in rows}
    res = RolloutDrift(run=wm.run, checkpoint={"step": wm.step, "path": wm.checkpoint}, data="data_long",
                       split="val", horizon=32, chunk_frames=[2, 2, 2, 2], num_episodes=2, episode_ids=["a", "b"],
                       sampler={"condition": condition}, state_input="integrate", sim_chain="teacher", probe="probe",
                       units="m", forwards_per_episode=84, rows=series, seconds={"rollout": 1.0, "total": 1.0})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rollout.json").write_text(json.dumps(res.to_json()))
    return folder


def policy_evaluation(env: str, wm: Optional[ScoredRun]) -> PolicyEvaluation:
    return PolicyEvaluation(env=env, seed=5, per_task=1, max_steps=30, tasks=["reach", "push"], layouts=1,
                            jitter=0.0, resolution=(4, 6), scenes={"reach": [0], "push": [1]}, rows={}, episodes={},
                            runs={}, learned=[], executed={}, seconds=1.0,
                            wm=None if wm is None else wm.run, world_model=wm)


def wm_eval(folder: Path, wm: Optional[ScoredRun], env: str = WORLD_MODEL) -> Path:
    """A `policy eval` folder: eval.json (in ``env``) and frames.npz with two do-nothing episodes whose frame t
    differs from frame 0 by t/2 (first) and t (second) in every pixel, and an expert episode that must not be read."""
    folder.mkdir(parents=True, exist_ok=True)
    policy_evaluation(env, wm).write(folder)
    t = np.arange(31, dtype=np.float64)[:, None, None, None]
    base = np.full((31, 4, 6, 3), 100.0)
    np.savez(folder / "frames.npz", **{"do nothing (floor)|reach|0": (base + t / 2).astype(np.uint8),
                                       "do nothing (floor)|push|1": (base - t).astype(np.uint8),
                                       "scripted expert (ceiling)|reach|0": (base + 3 * t).astype(np.uint8)})
    return folder


def agreement(folder: Path, wms: dict[str, Optional[ScoredRun]], pearson: Optional[list] = None) -> Path:
    """agreement.json of `policy agreement`: world model i has Pearson 0.5 + 0.1 i (or ``pearson[i]``) over 8
    policies and its clean expert succeeds 0.4 + 0.2 i of the time; 15 scenes."""
    players = [CLEAN_EXPERT, "do nothing (floor)"]

    def stats(i: int) -> RankingStats:
        p = (pearson or [0.5 + 0.1 * k for k in range(len(wms))])[i]
        return RankingStats(8, p, (0.1, 0.8), 0.4, (0.0, 0.9), 0.2, (0.1, 0.3))

    envs = {w: {CLEAN_EXPERT: Rate(2 + i, 5, 0.4 + 0.2 * i, (0.2, 0.7)), "do nothing (floor)": Rate.of(0, 5)}
            for i, w in enumerate(wms)}
    res = AgreementResult(players=players, learned=[], tasks=["reach"], scenes=15,
                          sim={p: Rate.of(3, 5) for p in players},
                          envs={"simulator frames through the judge": {p: Rate.of(3, 5) for p in players}, **envs},
                          ranking={"simulator frames through the judge": {"all": stats(0)},
                                   **{w: {"all": stats(i)} for i, w in enumerate(wms)}},
                          episode_agreement={w: {"all": 0.8} for w in wms}, judge_validation=None,
                          vs_judged_simulator={}, n_boot=10, world_models=dict(wms))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "agreement.json").write_text(json.dumps(res.to_json()))
    return folder


def metrics_run(folder: Path, rows=((1, 1.5), (2, 3.0), (3, 4.25))) -> Path:
    """A training run's metrics.jsonl: one row per (step, core_s) (core_s None: a row without it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "loss": 0.1, **({} if c is None else {"core_s": c})}) + "\n" for s, c in rows))
    return folder

