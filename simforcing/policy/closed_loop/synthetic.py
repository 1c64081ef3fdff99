"""The synthetic closed-loop benchmark for policies: tasks, success predicates, the environment, the scripted expert.

One episode = one scene of the synthetic MuJoCo benchmark (``data/synthetic``: the arm, 2–3 named task objects,
distractors, a per-episode look and camera) seen in its full-appearance ("real") rendering, and the task its scripted
motion performs there (reach / push / grasp a named object; the instruction names it). Episode ``(seed, index)`` draws
everything from ``SeedSequence([seed, index])`` exactly as ``data synth`` does.

Observation: the external camera (the episode's camera pose) and the wrist camera (``scene.WRIST_CAMERA``), each
``height × width``, side by side [external | wrist] -> uint8 (height, 2·width, 3); the proprio state (7,) = ee position,
ee roll-pitch-yaw, gripper opening (``EpisodePhysics.state``).

Action (7,), the benchmark's convention (``motions.py``): target ee position delta (3, m), target roll-pitch-yaw delta
(3, rad), gripper opening command in [0, 1]. The environment keeps the commanded target, adds the deltas, clips it into
the scripted workspace (as the scripted motions are) and drives the arm one frame (IK + 100 physics steps).

Success predicates, from the simulator state after every step (an episode succeeds at its first step where the
predicate holds, as LIBERO's ``done``):

- **reach**: the ee site is within ``REACH_RADIUS`` (0.10 m) of the named object's centre;
- **push**: the object's displacement from its initial position, projected on the named direction, exceeds
  ``PUSH_DISTANCE`` (0.04 m);
- **grasp**: the object's centre is ``LIFT_HEIGHT`` (0.05 m) above its initial height.

**Layouts** (``layouts`` = K > 0, ``data synth-policy --layouts K``; the demo uses 2): a LIBERO-like mode. As in a
LIBERO suite, where a task is a fixed scene whose initial states differ by a few centimetres, every scene is one of
K fixed layouts (one named task object + distractors + a look, the same for every dataset seed, so training
demonstrations and held-out evaluation scenes share them) with the task object jittered by ±``jitter`` m and the
nominal camera; the task (reach / push in a direction / grasp) and the start pose still vary per episode. Without
layouts every episode draws its own 2–3 task objects, camera and look — a generalisation test that a few dozen
demonstrations do not cover (docs/POLICY_TRANSFER.md).

No initial scene satisfies its predicate (the gripper starts ≥ 0.15 m above every object; objects rest).
The scripted expert replays the episode's scripted actions through the same ``step``; "do nothing" sends zero deltas
with the gripper open.

**The twin record** of an episode (:meth:`SyntheticTaskEnv.twin_record`): what the robot's digital twin of a world
model's simulation domain needs (:class:`SimDomain`): the camera for the arm pairing; the camera and the scene's
simulation — its objects with their own physics, drawn at the domain's physics gap from the episode's own stream,
exactly as ``data synth --pairing scene`` draws the simulation of the same (seed, index) — for the full-scene pairing;
either at the tessellation the domain's simulation videos were rendered at (``SimDomain.mesh``: MuJoCo's default for
a world model trained on data of a generator before version 5).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from simforcing.data.format import dataset_pairing, generator_version, read_info, read_json
from simforcing.data.synthetic.generate import EpisodePhysics
from simforcing.data.synthetic.offscreen import SharedContextRenderer
from simforcing.data.synthetic.motions import CommandedTarget  # noqa: F401  (the env's controller target)
from simforcing.data.synthetic.scene import DEFAULT_MESH, MESH, WRIST_CAMERA
from simforcing.data.synthetic.tasks import (LIFT_HEIGHT, PUSH_DISTANCE, REACH_RADIUS, TASKS, Task,  # noqa: F401
                                             parse_task, task_success)
from simforcing.data.twin_episode import MESH_SINCE


@dataclass(frozen=True)
class SimDomain:
    """What a world model's simulation domain shows — the pairing of the data it was trained on (``pairing``: "arm",
    the arm alone; "scene", the whole scene simulated) and, for the full scene, the physics gap its simulations were
    drawn at (``data synth --physics-gap``) — so that its twin renders what its training data's simulation rendered."""

    pairing: str = "arm"
    physics_gap: float = 0.0
    mesh: tuple[int, int] = MESH

    @classmethod
    def of_dataset(cls, root: str | Path) -> "SimDomain":
        """The domain of dataset ``root`` (its meta/info.json: ``pairing``, ``synth.physics_gap.scale``; a full-scene
        dataset that does not say its gap: 1; the tessellation its simulation videos were rendered at: MuJoCo's
        default for a generator before version 5, ``scene.MESH`` since)."""
        info = read_info(root)
        version = generator_version(info)
        mesh = DEFAULT_MESH if version is not None and version < MESH_SINCE else MESH
        if dataset_pairing(info) != "scene":
            return cls(mesh=mesh)
        gap = ((info.get("synth") or {}).get("physics_gap") or {}).get("scale", 1.0)
        return cls("scene", float(gap), mesh)

    @classmethod
    def of_world_model(cls, wm, progress: Callable[[str], None]) -> "SimDomain":
        """The domain of a loaded world model (``runs.loaded.LoadedWorldModel``; None, copy-first: the arm): the
        pairing of the data it was trained on, read from that dataset's meta/info.json (the run's ``data.root``, else
        the folder its checkpoint recorded), its ``data.pairing`` overriding it when the run's config sets one (then
        at the dataset's gap, or 1). Where no dataset can be read and the config says nothing: the arm alone, with a
        warning (runs from before the full-scene pairing whose data has moved)."""
        if wm is None:
            return cls()
        roots = [wm.cfg.data.root]
        if wm.checkpoint is not None and (Path(wm.checkpoint.path) / "meta.json").is_file():
            meta = read_json(Path(wm.checkpoint.path) / "meta.json", "checkpoint meta")
            roots.append((meta.get("data") or {}).get("root"))
        said = wm.cfg.data.pairing
        found = next((cls.of_dataset(r) for r in roots if r and (Path(r) / "meta" / "info.json").is_file()), None)
        if found is None and said is None:
            progress(f"warning: the data {wm.name} was trained on ({', '.join(str(r) for r in roots if r) or 'none'}) "
                     "cannot be read; its simulation domain is taken as the arm alone (set data.pairing in its "
                     "config if it was trained on a full-scene pairing)")
        if said is None or (found is not None and found.pairing == said):
            return found or cls()
        return cls(said, 1.0 if said == "scene" else 0.0, found.mesh if found is not None else MESH)


class SyntheticTaskEnv:
    """One closed-loop episode of the synthetic benchmark (module docstring). ``max_steps`` bounds the scripted
    motion's length (the expert needs it); the caller enforces the step limit."""

    def __init__(self, seed: int, index: int, max_steps: int, height: int = 32, width: int = 48, layouts: int = 0,
                 jitter: float = 0.03):
        self.seed, self.index, self.max_steps = seed, index, max_steps
        self.ep = EpisodePhysics(seed, index, max_steps + 1, layouts, jitter)
        self.object_names = [f"{o.colour} {o.shape}" if o.colour else "distractor" for o in self.ep.objects]
        self.task = parse_task(self.ep.motion.kind, self.ep.motion.instruction, self.object_names)
        self.height, self.width = int(height), int(width)
        self._made: Optional[SharedContextRenderer] = None  # built on the first image (players that never look: never)
        self._camera = self.ep.camera.to_mjv()
        mo = self.ep.motion
        self.target = CommandedTarget(mo.pos[0], mo.rpy[0], float(mo.grip[0]))
        self.obj0 = self.ep.object_positions()[self.task.object_index].copy()
        self.expert_actions = mo.actions()  # (max_steps, 7)
        self.t = 0

    @property
    def instruction(self) -> str:
        return self.task.instruction

    @property
    def _renderer(self) -> SharedContextRenderer:
        """The scene's renderer, made on first use: building one costs more than a scripted episode's rendering-free
        physics saves elsewhere (~0.08 s, its textures uploaded), so episodes no one looks at never build it."""
        if self._made is None:
            self._made = SharedContextRenderer(self.ep.model, self.height, self.width)
        return self._made

    def image(self, cameras: int = 2) -> np.ndarray:
        """uint8 (H, cameras·W, 3): [external | wrist] of the real scene now (``cameras`` = 1: external only)."""
        r, d = self._renderer, self.ep.data
        r.update_scene(d, camera=self._camera)
        ext = r.render().copy()
        if cameras == 1:
            return ext
        r.update_scene(d, camera=WRIST_CAMERA)
        return np.concatenate([ext, r.render().copy()], axis=1)

    def state(self) -> np.ndarray:
        """(7,) float32 proprio state."""
        return self.ep.state().astype(np.float32)

    def truth(self) -> np.ndarray:
        """The state now in the success judge's terms (``policy.judge.success_judge``): (6,) = [ee − obj, obj − obj_0]
        of the task object, metres."""
        obj = self.ep.object_positions()[self.task.object_index]
        ee = self.ep.data.site_xpos[self.ep.site]
        return np.concatenate([ee - obj, obj - self.obj0]).astype(np.float32)

    def twin_record(self, domain: SimDomain = SimDomain()) -> dict:
        """The episode's twin record for a world model of ``domain`` (module docstring): rendered at the tessellation
        of the domain's simulation videos (``domain.mesh``)."""
        return {**self.ep.twin_record(domain.pairing, domain.physics_gap), "mesh": list(domain.mesh)}

    def success(self) -> bool:
        obj = self.ep.object_positions()[self.task.object_index]
        return task_success(self.task, self.ep.data.site_xpos[self.ep.site].copy(), obj, self.obj0)

    def step(self, action: np.ndarray) -> bool:
        """Apply one 7-D action (module docstring) for one frame; returns the success predicate after it."""
        self.target.apply(action)
        self.ep.drive(self.target.pos, self.target.rpy, self.target.grip)
        self.t += 1
        return self.success()

    def expert_action(self) -> np.ndarray:
        """The scripted expert's action at the current step (its motion, replayed open loop)."""
        return self.expert_actions[min(self.t, len(self.expert_actions) - 1)]

    def close(self) -> None:
        if self._made is not None:
            self._made.close()


def held_out_scenes(seed: int, per_task: int, max_steps: int, tasks=TASKS, start: int = 0, layouts: int = 0,
                    jitter: float = 0.03) -> dict[str, list[int]]:
    """Fixed evaluation scenes: the first ``per_task`` episode indices (from ``start``) of dataset seed ``seed`` whose
    scripted task is each kind (building an episode's physics costs ~15 ms; nothing is rendered or stepped)."""
    out: dict[str, list[int]] = {k: [] for k in tasks}
    i = start
    while any(len(v) < per_task for v in out.values()):
        if i - start > 50 * per_task * len(tasks) + 50:
            raise RuntimeError(f"held_out_scenes: found {out} after {i - start} scenes from index {start}")
        kind = EpisodePhysics(seed, i, max_steps + 1, layouts, jitter).motion.kind
        if kind in out and len(out[kind]) < per_task:
            out[kind].append(i)
        i += 1
    return out
