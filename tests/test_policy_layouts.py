"""The policy benchmark's LIBERO-like scenes (``data synth-policy --layouts K``): fixed layouts shared by every dataset
seed, only the task object jittered; evaluation in the scene mode the policy was trained in."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from simforcing.config import ConfigError
from simforcing.data.synthetic.generate import EpisodePhysics
from simforcing.data.synthetic.scene import NOMINAL_CAMERA
from simforcing.policy.closed_loop.evaluate import scene_mode
from simforcing.policy.closed_loop.synthetic import SyntheticTaskEnv, held_out_scenes


def test_a_layout_is_the_same_scene_for_every_seed_with_only_the_task_object_jittered():
    a = EpisodePhysics(100, 0, 5, layouts=2, jitter=0.03)   # training seed, layout 0
    b = EpisodePhysics(9000, 4, 5, layouts=2, jitter=0.03)  # evaluation seed, layout 0 again
    c = EpisodePhysics(100, 1, 5, layouts=2, jitter=0.03)   # layout 1
    assert [(o.name, o.shape, o.colour, o.size, o.rgb) for o in a.objects] == \
        [(o.name, o.shape, o.colour, o.size, o.rgb) for o in b.objects]
    assert sum(bool(o.colour) for o in a.objects) == 1  # one named task object per layout
    assert a.objects[0].colour and [o.pos for o in a.objects[1:]] == [o.pos for o in b.objects[1:]]
    d = np.subtract(a.objects[0].pos, b.objects[0].pos)
    assert 0 < np.abs(d).max() <= 0.06  # both jittered by at most ±0.03 m around the layout's position
    assert (a.objects[0].colour, a.objects[0].shape) != (c.objects[0].colour, c.objects[0].shape) or \
        a.objects[0].pos != c.objects[0].pos
    assert a.camera == b.camera == NOMINAL_CAMERA
    free = EpisodePhysics(100, 0, 5)  # layouts=0: the world-model benchmark's scene, unchanged
    assert free.camera != NOMINAL_CAMERA and len([o for o in free.objects if o.colour]) >= 2
    z = EpisodePhysics(100, 0, 5, layouts=2, jitter=0.0)
    assert a.motion.kind == free.motion.kind == z.motion.kind  # the episode's own draws decide the task
    with pytest.raises(ValueError, match="layouts"):
        EpisodePhysics(100, 0, 5, layouts=-1)


def test_held_out_scenes_name_their_layouts_task_object():
    scenes = held_out_scenes(9000, 2, 20, layouts=2, jitter=0.03)
    assert all(len(v) == 2 for v in scenes.values())
    for kind, idxs in scenes.items():
        for i in idxs:
            env = SyntheticTaskEnv(9000, i, 20, 16, 24, layouts=2, jitter=0.03)
            try:
                assert env.task.kind == kind and env.task.object_index == 0
                assert f"the {env.task.object_name}" in env.instruction
                assert not env.success()  # no initial scene satisfies its predicate
            finally:
                env.close()


def _cfg(root):
    return SimpleNamespace(data=SimpleNamespace(root=str(root)))


def _dataset(tmp_path, name, synth):
    root = tmp_path / name
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text(json.dumps({"synth": synth}))
    return root


def test_evaluation_uses_the_scene_mode_the_policies_were_trained_in(tmp_path):
    lay = _dataset(tmp_path, "lay", {"per_task": 12, "layouts": 2, "jitter": 0.02})
    old = _dataset(tmp_path, "old", {"per_task": 12})  # written before layouts existed: free scenes
    notes = []
    assert scene_mode({"a": _cfg(lay), "b": _cfg(lay)}, None, None, notes.append) == (2, 0.02)
    assert scene_mode({"a": _cfg(old)}, None, None, notes.append) == (0, 0.03)
    assert scene_mode({}, None, None, notes.append) == (0, 0.03)
    assert scene_mode({"gone": _cfg(tmp_path / "missing")}, None, None, notes.append) == (0, 0.03)
    assert notes == []
    with pytest.raises(ConfigError, match="different scene modes.*--layouts"):
        scene_mode({"a": _cfg(lay), "b": _cfg(old)}, None, None, notes.append)
    assert scene_mode({"a": _cfg(lay), "b": _cfg(old)}, 0, None, notes.append) == (0, 0.03)
    assert len(notes) == 1 and "a was trained on scenes with layouts 2" in notes[0]
    with pytest.raises(ConfigError, match="jitter"):
        scene_mode({}, 2, 0.5, notes.append)
