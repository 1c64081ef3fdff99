"""The robot's digital twin (issue 45) believes no camera it is given: twin records are validated wherever they are
read — `data check`, `data check-twin`, `rollout --sample.condition=render`, ``read_episode`` and
``WorldModelPipeline.rollout(..., twin=)`` — (an object, every number finite, the synthetic camera's shapes, the
episode the record names), before anything is rendered or written; asking for the twin where it cannot act (a world
model trained without the simulation condition) is refused by name; the API's twin must start where the rollout
starts. Every refusal has its control: the same call on good input works."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from simforcing.cli import main
from simforcing.config import ConfigError
from simforcing.errors import DataError

from faultkit import refused

pytestmark = pytest.mark.faults

CAMERA = {"lookat": [0.27, 0.0, 0.23], "distance": 1.05, "azimuth": 215.0, "elevation": -32.0}


@pytest.fixture(scope="module")
def twin_data(tiny, tmp_path_factory) -> Path:
    """The tiny dataset with a synthetic twin record per episode (the benchmark's nominal camera)."""
    from simforcing.data.format import read_episodes, write_twin_record

    root = Path(shutil.copytree(tiny[0], tmp_path_factory.mktemp("faults_twin") / "data"))
    for eid in read_episodes(root):
        write_twin_record(root, eid, {"camera": dict(CAMERA)})
    return root


def _damaged(root: Path, dst: Path, edit, episode: str = "val_000") -> Path:
    """A copy of the dataset whose episode's twin.json is ``edit(record)``."""
    out = Path(shutil.copytree(root, dst))
    path = out / "episodes" / episode / "twin.json"
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    return out


def _camera(**fields):
    return lambda rec: {**rec, "camera": {**rec["camera"], **fields}}


BAD_RECORDS = [  # (what, edit, what the refusal names)
    ("lookat text", _camera(lookat="abc"), "camera.lookat"),
    ("lookat of two", _camera(lookat=[0.1, 0.2]), "camera.lookat"),
    ("lookat of words", _camera(lookat=["a", "b", "c"]), "camera.lookat"),
    ("distance nan", _camera(distance=math.nan), "camera.distance is nan"),
    ("distance inf", _camera(distance=math.inf), "camera.distance is inf"),
    ("elevation -inf", _camera(elevation=-math.inf), "camera.elevation is -inf"),
    ("distance 0", _camera(distance=0.0), "camera.distance"),
    ("azimuth text", _camera(azimuth="north"), "camera.azimuth"),
    ("no camera", lambda rec: {"episode_id": rec["episode_id"]}, "camera"),
    ("camera a list", lambda rec: {**rec, "camera": [1, 2, 3]}, "'camera' must be an object"),
    ("a list", lambda rec: [rec], "a JSON list"),
    ("another episode's", lambda rec: {**rec, "episode_id": "train_000"}, "record of episode 'train_000'"),
]
IDS = [w for w, _, _ in BAD_RECORDS]


# ----------------------------------------------------------------------------------------------------------------------
# data check-twin and data check
# ----------------------------------------------------------------------------------------------------------------------


def _check_twin(data: Path, *extra) -> list:
    return ["data", "check-twin", "--data", data, "--preset", "demo", "--split", "val", *extra]


@pytest.mark.parametrize("what,edit,needle", BAD_RECORDS, ids=IDS)
def test_check_twin_names_a_bad_record_before_rendering(twin_data, what, edit, needle, tmp_path, capsys):
    bad = _damaged(twin_data, tmp_path / "data", edit)
    out = tmp_path / "twin.json"
    refused(_check_twin(bad, "--out", out), capsys, "data error", "val_000", "twin.json", needle, code=1)
    assert not out.exists()


def test_check_twin_control_renders_good_records(twin_data, tmp_path, capsys):
    out = tmp_path / "twin.json"
    assert main([str(w) for w in _check_twin(twin_data, "--out", out)]) == 0
    res = json.loads(out.read_text())
    assert len(res["episodes"]) == 1 and math.isfinite(res["psnr_mean"])
    assert "mean" in capsys.readouterr().out


def test_data_check_names_a_bad_record(twin_data, tmp_path, capsys):
    bad = _damaged(twin_data, tmp_path / "data", _camera(distance=math.nan))
    refused(["data", "check", bad, "--preset", "demo"], capsys, "bad_twin", "val_000", "camera.distance", code=1)
    assert main(["data", "check", str(twin_data), "--preset", "demo"]) == 0  # control
    capsys.readouterr()


def test_a_record_written_for_one_episode_names_it(twin_data):
    from simforcing.data.format import read_twin_record

    rec = read_twin_record(twin_data, "val_000")
    assert rec["episode_id"] == "val_000" and rec["camera"] == CAMERA


# ----------------------------------------------------------------------------------------------------------------------
# rollout --sample.condition=render
# ----------------------------------------------------------------------------------------------------------------------


def _rollout(run, data, out, *extra) -> list:
    return ["rollout", "--ckpt", run, "--data", data, "--horizon", "4", "--rows", "rollout", "--videos", "0",
            "--out", out, "--device", "cpu", "--sample.condition=render", "--sample.n_real=2", *extra]


@pytest.mark.parametrize("what,edit,needle", [BAD_RECORDS[0], BAD_RECORDS[1], BAD_RECORDS[3], BAD_RECORDS[11]],
                         ids=[IDS[0], IDS[1], IDS[3], IDS[11]])
def test_rollout_with_the_twin_names_a_bad_record_and_writes_nothing(ref, twin_data, what, edit, needle, tmp_path,
                                                                    capsys):
    bad = _damaged(twin_data, tmp_path / "data", edit)
    out = tmp_path / "rollout"
    refused(_rollout(ref, bad, out), capsys, "data error", "val_000", "twin.json", needle, code=1)
    assert not out.exists()


def test_rollout_with_the_twin_control(ref, twin_data, tmp_path, capsys):
    out = tmp_path / "rollout"
    assert main([str(w) for w in _rollout(ref, twin_data, out)]) == 0, capsys.readouterr().err
    res = json.loads((out / "rollout.json").read_text())
    assert res["sampler"]["condition"] == "render" and math.isfinite(res["rows"]["rollout"]["mean"]["psnr"])
    from simforcing.evaluate.results import RolloutDrift

    assert RolloutDrift.read(out, "--x").horizon == 4  # the result reads back through its typed reader


def test_the_twin_is_refused_where_it_cannot_act(stage2, twin_data, tmp_path, capsys):
    from simforcing.commands.policy import _check_wm_condition

    out = tmp_path / "rollout"
    refused(_rollout(stage2, twin_data, out), capsys, "sample.condition=render", "trained without a simulation "
             "condition", "'sft'")
    assert not out.exists()
    refused(_rollout(stage2, twin_data, out, "--sample.w=0"), capsys, "sample.condition=render")
    with pytest.raises(ConfigError, match="trained without a simulation condition"):
        _check_wm_condition(str(stage2), "render")  # policy eval --env world-model --wm-condition render
    _check_wm_condition(str(stage2), "rollout")  # controls: the own chain, and a model that reads the condition
    _check_wm_condition("copy-first", "render")


# ----------------------------------------------------------------------------------------------------------------------
# The Python API
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pipe(ref):
    from simforcing import WorldModelPipeline

    return WorldModelPipeline.from_run(ref, device="cpu", overrides=["--sample.n_real=2"])


def test_the_api_rollout_refuses_a_twin_of_another_episode_or_camera(pipe, stage2, twin_data):
    from simforcing import WorldModelPipeline, read_episode
    from simforcing.twin import TwinEpisode

    ep = read_episode(twin_data, "val_000")
    other = read_episode(twin_data, "train_000")
    frame, text, state, actions = ep.real[0], ep.instruction, ep.states[0], ep.actions[:4]
    for twin, error, needle in (
            (other.twin, ValueError, "twin.state"),  # another episode's start pose
            (TwinEpisode(state, {"camera": {**CAMERA, "distance": math.nan}}), ValueError, "camera.distance is nan"),
            (TwinEpisode(state, {"camera": {**CAMERA, "lookat": [1.0]}}), ValueError, "camera.lookat"),
            (TwinEpisode(state, "front"), ValueError, "twin.record"),
            (TwinEpisode(state[:3], ep.twin.record), ValueError, "twin.state"),
            (TwinEpisode(np.full_like(state, np.nan), ep.twin.record), ValueError, "NaN"),
            (TwinEpisode(state, ep.twin.record, target=(np.zeros(3), np.full(3, np.inf), 0.0)), ValueError,
             "twin.target"),
            ({"state": state, "camera": CAMERA}, ValueError, "TwinEpisode")):
        with pytest.raises(error, match=needle):
            pipe.rollout(frame, text, state, actions, twin=twin)
    sft = WorldModelPipeline.from_run(stage2, device="cpu")
    with pytest.raises(ConfigError, match="trained without a simulation condition"):
        sft.rollout(frame, text, state, actions, twin=ep.twin)
    out = pipe.rollout(frame, text, state, actions, twin=ep.twin)  # control: the episode's own twin
    assert out.video.shape[0] == 1 + 4 // pipe.cfg.data.frame_stride and out.video.dtype == np.uint8


def test_read_episode_refuses_a_bad_record(twin_data, tmp_path):
    from simforcing import read_episode

    bad = _damaged(twin_data, tmp_path / "data", _camera(elevation=math.inf))
    with pytest.raises(DataError, match="camera.elevation is inf"):
        read_episode(bad, "val_000")
    assert read_episode(twin_data, "val_000").twin.record["camera"] == CAMERA  # control


# ----------------------------------------------------------------------------------------------------------------------
# A full-scene twin record (data synth --pairing scene): its objects and physics are data too
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scene_twin_data(tmp_path_factory) -> Path:
    """A one-episode full-scene dataset (its val episode's twin.json holds the scene)."""
    from simforcing.data.synthetic.generate import generate_dataset

    return generate_dataset(tmp_path_factory.mktemp("faults_scene") / "data", num_train=0, num_val=1,
                            num_sim_pool=0, length=3, height=16, width=24, seed=3, progress=False, pairing="scene")


def _obj(**fields):
    return lambda rec: {**rec, "scene": {**rec["scene"], "objects": [{**rec["scene"]["objects"][0], **fields}]
                                         + rec["scene"]["objects"][1:]}}


def _scene(**fields):
    return lambda rec: {**rec, "scene": {**rec["scene"], **fields}}


BAD_SCENES = [  # (what, edit, what the refusal names)
    ("scene a list", lambda rec: {**rec, "scene": [1]}, "'scene' must be an object"),
    ("no objects", _scene(objects=[]), "scene.objects"),
    ("a name that breaks the model", _obj(name='obj"0'), "scene.objects[0].name"),
    ("the table's name", _obj(name="table"), "scene.objects[0].name"),
    ("an arm's name", _obj(name="arm_palm"), "scene.objects[0].name"),
    ("a name twice", lambda rec: _obj(name=rec["scene"]["objects"][1]["name"])(rec), "repeat"),
    ("an unknown geom", _obj(geom="capsule"), "scene.objects[0].geom"),
    ("sizes of another geom", _obj(geom="sphere"), "scene.objects[0].size"),
    ("a negative size", _obj(size=[-0.02, 0.02, 0.02]), "numbers > 0"),
    ("a huge size", _obj(size=[0.5, 0.02, 0.02]), "at most 0.2 m"),
    ("an rgb above 1", _obj(rgb=[2, 0, 0]), "scene.objects[0].rgb"),
    ("off the table", _obj(pos=[2.0, 0.0]), "scene.objects[0].pos"),
    ("no mass", _obj(mass=0), "scene.objects[0].mass"),
    ("a mass nan", _obj(mass=math.nan), "mass is nan"),
    ("negative friction", _obj(friction=[0.4, -0.1, 0.001]), "scene.objects[0].friction"),
    ("a missing field", lambda rec: _obj()({**rec, "scene": {**rec["scene"], "objects": [
        {k: v for k, v in rec["scene"]["objects"][0].items() if k != "yaw"}]}}), "lacks yaw"),
    ("five servos", lambda rec: _scene(servo_gains=rec["scene"]["servo_gains"][:5])(rec), "scene.servo_gains"),
    ("a zero gain", lambda rec: _scene(servo_gains=[[0, 1]] * 6)(rec), "scene.servo_gains[0]"),
    ("finger gains of three", _scene(finger_gains=[150, 8, 1]), "scene.finger_gains"),
    ("a negative gap", _scene(physics_gap=-1), "scene.physics_gap"),
]


@pytest.mark.parametrize("what,edit,needle", BAD_SCENES, ids=[w for w, _, _ in BAD_SCENES])
def test_check_twin_names_a_bad_scene_before_rendering(scene_twin_data, what, edit, needle, tmp_path, capsys):
    bad = _damaged(scene_twin_data, tmp_path / "data", edit, episode="ep_00000")
    out = tmp_path / "twin.json"
    refused(_check_twin(bad, "--out", out), capsys, "data error", "ep_00000", "twin.json", needle, code=1)
    assert not out.exists()


def test_check_twin_scene_control_replays_the_recorded_simulation(scene_twin_data, tmp_path, capsys):
    out = tmp_path / "twin.json"
    assert main([str(w) for w in _check_twin(scene_twin_data, "--out", out)]) == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["psnr_worst_frame"] >= 45.0  # the codec alone


def test_the_api_twin_refuses_a_bad_scene_record(scene_twin_data):
    from simforcing.data.format import read_lowdim, read_twin_record
    from simforcing.data.synthetic.twin import SyntheticTwin
    from simforcing.twin import TwinEpisode

    record, state = read_twin_record(scene_twin_data, "ep_00000"), read_lowdim(scene_twin_data, "ep_00000")[1][0]
    twin = SyntheticTwin(16, 24)
    try:
        with pytest.raises(ConfigError, match=r"scene.objects\[0\].mass"):
            twin.start([TwinEpisode(state, _obj(mass=-1)(record))])
        assert twin.start([TwinEpisode(state, record)]).shape == (1, 16, 24, 3)  # control
    finally:
        twin.close()
