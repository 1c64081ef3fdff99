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
from simforcing.twin import (TwinEpisode, frame_psnr, make_renderer, register_renderer, render_actions,
                             window_frame_steps)
from test_policy import tiny, world_model_run  # noqa: F401  (fixtures)

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


def test_make_renderer_names_a_renderer_it_cannot_load_and_never_imports_a_config_value():
    import sys

    cfg = preset("demo")
    sys.modules.pop("json.tool", None)
    cfg.sample.twin = "json.tool:main"
    with pytest.raises(ConfigError, match="register_renderer"):
        make_renderer(cfg, H, W)
    assert "json.tool" not in sys.modules
    cfg.sample.twin = "recording"  # registered below, in Python
    assert isinstance(make_renderer(cfg, H, W), RecordingTwin)
    with pytest.raises(ValueError, match="register_renderer"):
        register_renderer("synthetic", recording_twin)


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


# ----------------------------------------------------------------------------------------------------------------------
# The twin in the loop: the sampler's condition, chunk after chunk, and closed loop
# ----------------------------------------------------------------------------------------------------------------------


class RecordingTwin:
    """A SimRenderer whose frames are a deterministic function of the actions it has executed and is shown: each
    episode's position is the sum of its executed actions; frame j of a window shows position + the sum of the window's
    first j·stride actions as a grey level. It records every window it is given."""

    def __init__(self, height: int, width: int):
        self.height, self.width = height, width
        self.windows: list = []
        self.pos = None

    def start(self, episodes):
        self.pos = np.stack([np.asarray(e.state, np.float64)[:7] for e in episodes])
        return self._frames(self.pos[:, None])[:, 0]

    def window(self, actions, stride, keep):
        self.windows.append((np.array(actions), stride, keep))
        steps = window_frame_steps(actions.shape[1], stride)
        cum = np.concatenate([np.zeros_like(actions[:, :1]), np.cumsum(actions, axis=1)], axis=1)
        frames = self._frames(self.pos[:, None] + cum[:, steps])
        self.pos = self.pos + actions[:, :keep].sum(axis=1)
        return frames

    def _frames(self, pos: np.ndarray) -> np.ndarray:  # (B, F, 7) -> (B, F, H, W, 3) uint8
        level = (np.tanh(pos[..., :3].sum(-1)) * 100 + 128).astype(np.uint8)
        out = np.zeros(pos.shape[:2] + (self.height, self.width, 3), np.uint8)
        out[:, :, : self.height // 2] = level[:, :, None, None, None]
        return out

    def close(self):
        pass


def recording_twin(height: int, width: int) -> RecordingTwin:
    """``--sample.twin=recording`` (registered below)."""
    return RecordingTwin(height, width)


register_renderer("recording", recording_twin)


@pytest.fixture(scope="module")
def tiny_wm():
    from test_rollout import IDENTITY
    from test_sample import tiny_cfg, tiny_model, tiny_vae

    from simforcing.runs.loaded import LoadedWorldModel

    cfg = tiny_cfg(sample__condition="render", sample__twin="recording")
    return LoadedWorldModel(cfg, tiny_model(cfg), tiny_vae(), IDENTITY)


def _episode_inputs(cfg, horizon):
    from test_rollout import episode_inputs

    return episode_inputs(cfg, 2, horizon)


def _loop(cfg, ep):
    from simforcing.twin import TwinLoop

    return TwinLoop.from_config(cfg, [TwinEpisode(s.numpy(), {}) for s in ep["state0"].double()], H, W)


def test_a_one_chunk_twin_rollout_is_the_sampler_with_the_twins_rendering(tiny_wm):
    import torch

    from simforcing.rollout import WorldModelRollout
    from simforcing.runs.loaded import sample_generator
    from simforcing.sample import sample_videos

    cfg = tiny_wm.cfg
    span = cfg.data.actions_per_window
    ep = _episode_inputs(cfg, span)
    loop = _loop(cfg, ep)
    gens = [sample_generator(cfg, i) for i in range(2)]
    ro = WorldModelRollout(tiny_wm, ep["first_frame"], ep["state0"].double(), ep["text"], ep["text_mask"], gens,
                           twin=loop)
    res = ro.run(ep["actions"])
    rendered = _loop(cfg, ep).window(ep["actions"].double().numpy(), keep=span)  # the same twin, fresh
    assert torch.equal(ro.rendered[0], rendered)
    batch = ep["batch"]
    batch.rendered_sim = rendered
    for i in range(2):
        from test_rollout import window_of

        want = sample_videos(tiny_wm.model, tiny_wm.vae, window_of(batch, i), cfg, generator=sample_generator(cfg, i),
                             decode_sim=True)
        torch.testing.assert_close(res.video[i:i + 1], want.real_video, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(res.sim_video[i:i + 1], want.sim_video, atol=1e-5, rtol=1e-5)
    assert res.forwards == 2 * cfg.sample.n_real  # no simulation rollout runs: the twin renders the condition
    with pytest.raises(ConfigError, match="digital twin"):
        WorldModelRollout(tiny_wm, ep["first_frame"], ep["state0"].double(), ep["text"], ep["text_mask"], gens)


def test_the_twin_executes_exactly_the_executed_actions_chunk_after_chunk(tiny_wm):
    from simforcing.rollout import WorldModelRollout, hold_actions
    from simforcing.runs.loaded import sample_generator

    cfg = tiny_wm.cfg
    span, stride = cfg.data.actions_per_window, cfg.data.frame_stride
    horizon = 2 * span + span // 2  # two whole chunks and a cut one
    ep = _episode_inputs(cfg, horizon)
    loop = _loop(cfg, ep)
    ro = WorldModelRollout(tiny_wm, ep["first_frame"], ep["state0"].double(), ep["text"], ep["text_mask"],
                           [sample_generator(cfg, i) for i in range(2)], twin=loop)
    res = ro.run(ep["actions"])
    acts = ep["actions"].double().numpy()
    assert np.allclose(np.concatenate(loop.executed, axis=1), acts)  # executed: exactly the actions, once each
    shown = loop.renderer.windows
    assert [k for _, _, k in shown] == [span, span, span // 2] and all(s == stride for _, s, _ in shown)
    hold = hold_actions(cfg, ep["actions"][:, -1], span - span // 2, 2, 7).numpy()
    assert np.allclose(shown[2][0], np.concatenate([acts[:, 2 * span:], hold], axis=1))  # the cut chunk's fill
    assert res.video.shape[2] == 1 + horizon // stride and len(ro.rendered) == 3


def test_closed_loop_the_twin_receives_the_effective_actions(world_model_run):
    from simforcing.policy.closed_loop.evaluate import make_players
    from simforcing.policy.closed_loop.synthetic import held_out_scenes
    from simforcing.data.synthetic.motions import CommandedTarget
    from simforcing.policy.closed_loop.world_model_eval import Episodes, effective, load_environment, start_frames

    wm = load_environment(str(world_model_run), condition="render")
    wm.cfg.sample.twin = "recording"
    assert wm.cfg.sample.condition == "render"
    d = wm.cfg.data
    scenes = held_out_scenes(9000, 1, 6, ("reach", "push"), layouts=2, jitter=0.03)
    starts = start_frames(scenes, 9000, 6, d.height, d.width, 2, 0.03)
    ep = Episodes(wm, make_players({}, True, (0.02,), 9000, "cpu"), starts)
    loop = ep.ro.twin
    t = 0
    for chunk, n in enumerate((4, 2)):
        images, states = ep.observe()
        actions = ep.act(images, states, t, chunk)
        before = [CommandedTarget(x.pos, x.rpy, x.grip) for x in ep.targets]
        ep.step(actions, n)
        assert np.allclose(loop.executed[-1], effective(before, actions[:, :n]))  # what the episodes executed
        t += n
    assert all(s.twin_record["camera"].keys() >= {"lookat", "distance", "azimuth", "elevation"} for s in starts)
    with pytest.raises(ConfigError, match="oracle"):
        load_environment(str(world_model_run), condition="oracle")
