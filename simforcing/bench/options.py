"""Benchmark modes, grids and targets: what each section runs in a full, ``--quick`` or ``--tiny`` run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

SCHEMA = "simforcing-bench/1"
SECTIONS = ("sampler", "train", "data", "scaling", "policy", "rollout", "wm_policy", "fewstep")  # the GPU benchmark is its own mode: bench --gpu (gpu.py)
# asked for by name only: compiling takes minutes on a CPU (--sections compile); fp32 against bf16 autocast of the
# training steps (--sections precision) answers one question about a CPU; the synthetic benchmark's MuJoCo simulator
# per frame (--sections simulator) is not the world model's cost
OPT_IN_SECTIONS = ("compile", "precision", "simulator")
FULL_GRID = [(ns, nr, w) for ns in (1, 5, 10, 20) for nr in (1, 5, 10, 20) for w in (0.0, 0.3, 0.6, 1.0)]
QUICK_GRID = [(1, 10, 0.0), (1, 10, 0.3), (1, 10, 0.6), (1, 10, 1.0), (5, 20, 0.6), (1, 1, 0.6), (20, 1, 1.0)]
TINY_GRID = [(2, 3, 0.0), (2, 3, 0.6), (2, 3, 1.0)]
TARGETS = {"sampler_ratio_max": 1.10, "speedup_at_1_10_0_min": 2.0, "speedup_min": 1.0, "train_ratio_max": 2.5}


@dataclass
class BenchOptions:
    """How much of each section runs (``for_mode``: full, ``--quick`` or ``--tiny``)."""

    mode: str = "full"
    grid: list = field(default_factory=lambda: list(FULL_GRID))
    repeats: int = 5  # timed sampler calls per configuration (after 1 warm-up), at least
    max_repeats: int = 25  # at most, when raised to span min_config_s
    min_config_s: float = 3.0  # seconds of repetitions per configuration (cheap ones repeat more)
    forward_repeats: int = 30  # timed calls of one forward / decode / encode
    train_repeats: int = 20
    train_batch: Optional[int] = None  # None: cfg.train.batch_size
    data_episodes: int = 16
    data_length: int = 48
    data_passes: int = 2
    workers: tuple = (0, 1, 2)
    scaling_frames: tuple = (21, 33, 49, 65)
    scaling_scales: tuple = (1, 2, 4)
    scaling_paper_res: bool = True  # add 224x320 to the resolution sweep
    scaling_repeats: int = 5
    policy_repeats: int = 10  # timed action chunks per policy setting
    rollout_batch: int = 16  # episodes rolled out together (against the same one at a time)
    rollout_chunks: int = 4
    wm_scenes_per_task: int = 5  # world-model policy evaluation: held-out scenes per task, 2 players
    wm_steps: int = 16
    wm_alone_scenes: int = 2  # scenes per player timed one at a time (scaled to all)
    fewstep_steps: tuple = (1, 2, 4)  # the students' K beside the teacher (section fewstep)
    fewstep_repeats: int = 10  # timed chunks per sampler
    sim_episodes: int = 4  # section simulator: the benchmark's episodes driven per round
    sim_frames: int = 30  # scripted frames each
    sim_repeats: int = 5  # rounds (servo frame against the stepped loop, in turns; the IK)
    sim_render_repeats: int = 50  # rounds of renders

    @classmethod
    def for_mode(cls, quick: bool, tiny: bool) -> "BenchOptions":
        if tiny:
            return cls("tiny", list(TINY_GRID), repeats=1, max_repeats=1, min_config_s=0.0, forward_repeats=3,
                       train_repeats=2, train_batch=2,
                       data_episodes=2, data_length=16, data_passes=1, scaling_frames=(5, 9), scaling_scales=(1, 2),
                       scaling_paper_res=False, scaling_repeats=1, policy_repeats=1, rollout_batch=2,
                       rollout_chunks=2, wm_scenes_per_task=1, wm_steps=4, wm_alone_scenes=1,
                       fewstep_steps=(1,), fewstep_repeats=1, sim_episodes=1, sim_frames=3, sim_repeats=1,
                       sim_render_repeats=2)
        if quick:
            return cls("quick", list(QUICK_GRID), repeats=5, min_config_s=2.0, forward_repeats=20, train_repeats=12,
                       data_episodes=6,
                       data_length=40, data_passes=1, scaling_repeats=3, scaling_paper_res=False,
                       policy_repeats=5, rollout_chunks=1, wm_scenes_per_task=2, wm_steps=8, sim_repeats=3,
                       sim_render_repeats=20)
        return cls()
