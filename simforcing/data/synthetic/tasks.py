"""The synthetic benchmark's tasks and their success predicates (no MuJoCo here: the simulator, the closed-loop
environment and the success judge all read them).

- **reach**: the end-effector site within ``REACH_RADIUS`` (0.10 m) of the named object's centre;
- **push**: the object's displacement from its initial position, projected on the named direction, at least
  ``PUSH_DISTANCE`` (0.04 m);
- **grasp**: the object's centre ``LIFT_HEIGHT`` (0.05 m) above its initial height.

A task is read from a scripted instruction ("push the blue ball to the left"): the object named "the <colour>
<shape>" and, for push, the direction phrase.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

KINDS = ("reach", "push", "grasp")
TASKS = KINDS
REACH_RADIUS = 0.10
PUSH_DISTANCE = 0.04
LIFT_HEIGHT = 0.05

# Push directions in the world frame, named as seen from the camera (in front of the robot, +x +y side).
PUSH_DIRECTIONS = {
    "to the left": np.array([0.0, -1.0]), "to the right": np.array([0.0, 1.0]),
    "away from the robot": np.array([1.0, 0.0]), "toward the robot": np.array([-1.0, 0.0]),
}


@dataclass(frozen=True)
class Task:
    """What an episode asks: ``kind``, the named object (index into the scene's objects) and, for push, the
    direction (unit (2,) in the table plane)."""

    kind: str
    instruction: str
    object_index: int
    object_name: str  # "<colour> <shape>"
    direction: tuple = ()  # push only


def parse_task(kind: str, instruction: str, object_names: list[str]) -> Task:
    """The task of a scripted instruction: the object named "the <colour> <shape>" in it, and for push the
    direction phrase (``PUSH_DIRECTIONS``). ValueError when the instruction names none of the objects."""
    found = [i for i, n in enumerate(object_names) if n != "distractor" and f"the {n}" in instruction]
    if len(found) != 1:
        raise ValueError(f"instruction {instruction!r}: expected exactly one of the objects {object_names}; "
                         f"found {len(found)}")
    direction: tuple = ()
    if kind == "push":
        names = [k for k in PUSH_DIRECTIONS if re.search(rf"\b{re.escape(k)}$", instruction)]
        if len(names) != 1:
            raise ValueError(f"push instruction {instruction!r}: expected one direction of {list(PUSH_DIRECTIONS)}")
        direction = tuple(float(x) for x in PUSH_DIRECTIONS[names[0]])
    return Task(kind, instruction, found[0], object_names[found[0]], direction)


def task_success(task: Task, ee: np.ndarray, obj: np.ndarray, obj0: np.ndarray) -> bool:
    """The predicate of ``task`` (module docstring): ee (3,) the ee site, obj (3,) the named object's centre now,
    obj0 (3,) at the start."""
    if task.kind == "reach":
        return bool(np.linalg.norm(ee - obj) <= REACH_RADIUS)
    if task.kind == "push":
        return bool(np.dot(obj[:2] - obj0[:2], np.asarray(task.direction)) >= PUSH_DISTANCE)
    if task.kind == "grasp":
        return bool(obj[2] - obj0[2] >= LIFT_HEIGHT)
    raise ValueError(f"task kind: got {task.kind!r}; expected one of {TASKS}")
