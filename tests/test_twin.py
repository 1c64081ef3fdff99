"""The robot's digital twin (simforcing.twin, data.synthetic.twin): it renders a recorded episode's simulation video
again from the recorded actions, executes exactly the actions it is given, and `data check-twin` measures it."""

import json
import os
from dataclasses import asdict

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np
import pytest

from simforcing.cli import main
from simforcing.config import ConfigError, preset
from simforcing.data.format import read_twin_record
from simforcing.data.synthetic.generate import TwinRenderer, generate_dataset, simulate_episode
from simforcing.data.synthetic.twin import ArmTwin
from simforcing.errors import DataError
from simforcing.twin import TwinEpisode, frame_psnr, make_renderer, render_actions, window_frame_steps

H, W = 32, 48
SEED, LENGTH = 3, 25
# Tolerances, measured on seed 3's first 12 episodes against the raw renders of the recorded physics (no video codec):
# reach and push episodes stay at >= 43.8 dB in every frame (the twin's arm is the recorded arm to IK and servo
# precision); grasp episodes dip to 30.2 dB in the frames where the closing fingers meet the object, which the twin
# does not have. The demo VAE reconstructs frames at about 32 dB: an error below that changes no condition latent.
FREE_MOTION_DB, CONTACT_DB, EPISODE_MEAN_DB = 38.0, 28.0, 40.0


@pytest.fixture(scope="module")
def twin():
    t = ArmTwin(H, W)
    yield t
    t.close()


@pytest.fixture(scope="module")
def episodes():
    r = TwinRenderer(H, W)
    try:
        return [simulate_episode(SEED, i, LENGTH, r, paired=False) for i in range(6)]
    finally:
        r.close()


def _start(ep) -> TwinEpisode:
    return TwinEpisode(ep.states[0], {"camera": asdict(ep.camera)})


def test_the_twin_renders_a_recorded_episode_again(twin, episodes):
    kinds = set()
    for ep in episodes:
        frames = render_actions(twin, [_start(ep)], ep.actions[None])[0]
        assert frames.shape == ep.sim.shape and frames.dtype == np.uint8
        p = frame_psnr(frames, ep.sim)  # against the raw render of the recorded physics
        kinds.add(ep.kind)
        assert p.min() >= (CONTACT_DB if ep.kind == "grasp" else FREE_MOTION_DB), (ep.kind, p.round(1))
        assert p.mean() >= EPISODE_MEAN_DB, (ep.kind, p.mean())
        assert p[0] >= FREE_MOTION_DB  # the start: the arm placed from the recorded state as data synth places it
    assert kinds == {"reach", "push", "grasp"}  # every motion checked


def test_a_window_executes_only_its_first_keep_actions(twin, episodes):
    ep = episodes[1]
    a = ep.actions[None].astype(np.float64)
    ref = ArmTwin(H, W)
    try:
        ref.start([_start(ep)])
        r1 = ref.window(a[:, :4], stride=2, keep=4)
        r2 = ref.window(a[:, 4:12], stride=2, keep=8)
    finally:
        ref.close()
    twin.start([_start(ep)])
    w1 = twin.window(a[:, :8], stride=2, keep=4)  # 4 executed, then the next 4 as the plan
    assert w1.shape == (1, 5, H, W, 3)
    np.testing.assert_array_equal(w1[:, :3], r1)  # the executed part is the same physics
    np.testing.assert_array_equal(w1[:, 3:], r2[:, 1:3])  # a plan renders what executing it renders
    twin.start([_start(ep)])
    other = np.concatenate([a[:, :4], -a[:, 4:8]], axis=1)  # another plan after the same 4 actions
    w1b = twin.window(other, stride=2, keep=4)
    assert not np.array_equal(w1b[:, 3:], w1[:, 3:])  # the plan was really rendered
    np.testing.assert_array_equal(twin.window(a[:, 4:12], stride=2, keep=8), r2)  # and left no trace


def test_a_batch_of_episodes_is_the_episodes_one_by_one(twin, episodes):
    a = np.stack([ep.actions[:8] for ep in episodes[:3]]).astype(np.float64)
    twin.start([_start(ep) for ep in episodes[:3]])
    batch = twin.window(a, stride=1, keep=8)
    for i, ep in enumerate(episodes[:3]):
        twin.start([_start(ep)])
        np.testing.assert_array_equal(twin.window(a[i:i + 1], stride=1, keep=8)[0], batch[i])


def test_the_twin_refuses_what_it_cannot_execute(twin, episodes):
    twin.start([_start(episodes[0])])
    with pytest.raises(ValueError, match="NaN or inf"):
        twin.window(np.full((1, 4, 7), np.nan), stride=1, keep=4)
    with pytest.raises(ValueError, match=r"\(1, A, 7\)"):
        twin.window(np.zeros((2, 4, 7)), stride=1, keep=4)
    with pytest.raises(ValueError, match="multiple of the stride"):
        window_frame_steps(6, 4)
    with pytest.raises(ConfigError, match="camera"):
        ArmTwin(H, W).start([TwinEpisode(episodes[0].states[0], {"pose": 1})])


def test_make_renderer_names_a_renderer_it_cannot_load():
    cfg = preset("demo")
    cfg.sample.twin = "no_such_module_xyz:factory"
    with pytest.raises(ConfigError, match="sample.twin"):
        make_renderer(cfg, H, W)
    cfg.sample.twin = "synthetic_without_colon"
    with pytest.raises(ConfigError, match="module:factory"):
        make_renderer(cfg, H, W)


def test_data_synth_records_the_twin_and_check_twin_measures_it(tmp_path, capsys):
    root = generate_dataset(tmp_path / "ds", seed=SEED, progress=False, num_train=0, num_val=2, num_sim_pool=0,
                            length=13, height=H, width=W)
    rec = read_twin_record(root, "ep_00000")
    assert set(rec["camera"]) == {"lookat", "distance", "azimuth", "elevation"}
    out = tmp_path / "twin.json"
    assert main(["data", "check-twin", "--data", str(root), "--preset", "demo", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert len(res["episodes"]) == 2 and res["psnr_worst_frame"] >= CONTACT_DB - 3  # through the video codec
    assert "worst frame" in capsys.readouterr().out
    (root / "episodes" / "ep_00001" / "twin.json").unlink()
    with pytest.raises(DataError, match="twin.json"):
        read_twin_record(root, "ep_00001")
