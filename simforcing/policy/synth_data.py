"""`simforcing data synth-policy`: scripted-expert demonstrations of the synthetic tasks as a policy dataset.

    simforcing data synth-policy OUT [--per-task 16] [--num-val 2] [--max-steps 30] [--seed 100] [--layouts K]

Episode ``(seed, i)`` for i = 0, 1, … is one scene of the synthetic benchmark (``policy.closed_loop.synthetic``); its
scripted expert acts in the full-appearance scene for at most ``max_steps`` steps, recording both cameras and the state
at every frame. Only successful demonstrations are kept, cut ``tail`` frames after the first success (so no random
filler motion is learnt), until each task has ``per_task`` training (+ ``num_val`` validation) episodes. Evaluation
scenes are drawn from another dataset seed (``policy.closed_loop.evaluate``), so they are held out (with ``layouts`` =
K, the LIBERO-like mode of ``policy.closed_loop.synthetic``: the same K layouts, other jitters, tasks and start poses).
The world-model benchmark (`data synth`) is unchanged; the two share the simulator only. Then min–max statistics
(train) and the text cache. The dataset is written into a temporary sibling folder and appears at OUT only when
complete (``utils.staged_folder``); an existing dataset there is refused unless ``overwrite``.
"""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor
import multiprocessing as mp
from pathlib import Path

import numpy as np
from tqdm import tqdm

from simforcing.config import ConfigError, load_config
from simforcing.data.format import is_dataset
from simforcing.data.policy_format import write_policy_episode, write_policy_meta
from simforcing.data.stats import write_stats
from simforcing.data.synthetic.generate import check_frame_size, write_objects
from simforcing.policy.closed_loop.synthetic import TASKS, SyntheticTaskEnv
from simforcing.policy.settings import MAX_EPISODE_STEPS, MAX_SCENES_PER_TASK
from simforcing.prep.text import embed_dataset
from simforcing.utils import check_output_folder, staged_folder

FPS = 10


def demonstrate(seed: int, index: int, max_steps: int, height: int, width: int, tail: int, layouts: int = 0,
                jitter: float = 0.03) -> dict:
    """Run the scripted expert on episode (seed, index): frames uint8 (T, H, 2W, 3), actions (T−1, 7), states (T, 7),
    the task, whether (and at which step) it succeeded."""
    env = SyntheticTaskEnv(seed, index, max_steps, height, width, layouts, jitter)
    try:
        frames, states, actions, objects = [env.image()], [env.state()], [], [env.ep.object_positions()]
        first = None
        for t in range(max_steps):
            a = env.expert_action()
            ok = env.step(a)
            actions.append(np.asarray(a, np.float32))
            frames.append(env.image())
            states.append(env.state())
            objects.append(env.ep.object_positions())
            if ok and first is None:
                first = t + 1
            if first is not None and t + 1 >= first + tail:
                break
        return {"index": index, "kind": env.task.kind, "instruction": env.instruction, "success": first is not None,
                "success_step": first, "frames": np.stack(frames), "actions": np.stack(actions),
                "states": np.stack(states), "objects": np.stack(objects), "names": env.object_names,
                "target": env.task.object_index}
    finally:
        env.close()


def _job(args: tuple) -> dict:
    return demonstrate(*args)


def generate_policy_dataset(out: str | Path, *, per_task: int = 16, num_val: int = 2, max_steps: int = 30,
                            height: int = 32, width: int = 48, seed: int = 100, tail: int = 8, workers: int = 1,
                            overwrite: bool = False, progress: bool = True, layouts: int = 0,
                            jitter: float = 0.03) -> dict:
    """Write the dataset (module docstring); returns a summary {"episodes", "attempted", "failed", "per_task"}."""
    check_frame_size(height, width)
    if workers < 1:
        raise ConfigError(f"workers: got {workers}; expected an integer >= 1")
    for flag, value, ok, want in (
            ("--per-task", per_task, 1 <= per_task <= MAX_SCENES_PER_TASK, f"1..{MAX_SCENES_PER_TASK} demonstrations"),
            ("--num-val", num_val, 0 <= num_val <= MAX_SCENES_PER_TASK, f"0..{MAX_SCENES_PER_TASK} demonstrations"),
            ("--max-steps", max_steps, 2 <= max_steps <= MAX_EPISODE_STEPS, f"a step limit in 2..{MAX_EPISODE_STEPS}"),
            ("tail", tail, tail >= 0, "a frame count >= 0"),
            ("--layouts", layouts, layouts >= 0, "a count >= 0 (0: every scene its own)"),
            ("--jitter", jitter, 0 <= jitter <= 0.1, "metres in [0, 0.1]")):
        if not ok:
            raise ConfigError(f"{flag}: got {value}; expected {want}")
    out = Path(out)
    check_output_folder(out, overwrite, "dataset", is_dataset)  # before simulating (staged_folder checks again)
    want = per_task + num_val
    kept: dict[str, list[dict]] = {k: [] for k in TASKS}
    attempted, failed, nxt = 0, 0, 0
    bar = tqdm(total=want * len(TASKS), desc="synth-policy demos", disable=not progress, file=sys.stderr)
    pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) if workers > 1 else None
    try:
        while any(len(v) < want for v in kept.values()):
            batch = list(range(nxt, nxt + max(1, workers) * 2))
            nxt += len(batch)
            jobs = [(seed, i, max_steps, height, width, tail, layouts, jitter) for i in batch]
            results = list(pool.map(_job, jobs)) if pool else [_job(j) for j in jobs]
            for r in results:
                attempted += 1
                if not r["success"]:
                    failed += 1
                    continue
                if len(kept[r["kind"]]) < want:
                    kept[r["kind"]].append(r)
                    bar.update()
            if attempted > 10 * want * len(TASKS) + 20:
                raise ConfigError(f"--max-steps {max_steps}: the scripted expert succeeded only "
                                  f"{({k: len(v) for k, v in kept.items()})} times in {attempted} episodes (wanted "
                                  f"{want} per task); give it more steps (the default is 30)")
    finally:
        bar.close()
        if pool:
            pool.shutdown()
    episodes, splits = [], {"train": [], "val": []}
    with staged_folder(out, overwrite, "dataset", replaceable=is_dataset) as tmp:
        for kind in TASKS:
            for j, r in enumerate(sorted(kept[kind], key=lambda r: r["index"])):
                eid = f"{kind}_{r['index']:05d}"
                write_policy_episode(tmp, eid, r["frames"], r["actions"], r["states"], FPS)
                write_objects(tmp, eid, r["objects"], r["names"], r["target"], r["kind"])
                episodes.append({"episode_id": eid, "length": int(len(r["frames"])), "instruction": r["instruction"],
                                 "task": kind, "has_real": True, "source_index": r["index"]})
                splits["val" if j >= per_task else "train"].append(eid)
        info = {"fps": FPS, "height": height, "width": width, "cameras": ["external", "wrist"], "action_dim": 7,
                "state_dim": 7, "source": "simforcing-synth-policy",
                "synth": {"seed": seed, "per_task": per_task, "num_val": num_val, "max_steps": max_steps,
                          "tail": tail, "layouts": layouts, "jitter": jitter, "attempted": attempted, "failed": failed,
                          "action": "target ee position delta (3), target roll-pitch-yaw delta (3), gripper 0..1 (1)",
                          "state": "ee position (3), ee roll-pitch-yaw (3), gripper opening 0..1 (1)"}}
        write_policy_meta(tmp, info, episodes, splits)
        write_stats(tmp, splits=("train",))
        embed_dataset(tmp, load_config("demo"))
    return {"episodes": len(episodes), "attempted": attempted, "failed": failed, "per_task": per_task,
            "out": str(out)}
