"""An episode's start as the robot's digital twin sees it, and a window's frame layout (``simforcing.twin``: the twin
in the loop; ``data.synthetic.twin``: the synthetic benchmark's twin)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np


@dataclass
class TwinEpisode:
    """One episode's start as a twin sees it. ``state`` (S,) raw (dataset units); ``record`` the episode's twin record
    (``{"camera": {...}}``); ``target`` the controller's commanded target at the start when the environment knows it
    (the synthetic benchmark's: (pos (3,), rpy (3,), grip)); None: the state's own pose."""

    state: np.ndarray
    record: dict
    target: Optional[tuple] = None


def window_frame_steps(num_actions: int, stride: int) -> list[int]:
    """The action counts after which a window's frames are rendered: 0 (now), stride, 2·stride, …, num_actions."""
    if stride < 1 or num_actions < stride or num_actions % stride:
        raise ValueError(f"a window of {num_actions} actions with frame stride {stride}: expected a positive multiple "
                         "of the stride")
    return list(range(0, num_actions + 1, stride))
