"""The robot's digital twin (simforcing.twin, data.synthetic.twin): it renders a recorded episode's simulation video
again from the recorded actions, executes exactly the actions it is given, and `data check-twin` measures it."""

import json
import os
from dataclasses import replace

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np
import pytest

from simforcing.cli import main
from simforcing.config import ConfigError, preset
from simforcing.data.format import read_twin_record
from simforcing.data.synthetic.generate import TwinRenderer, generate_dataset, simulate_episode
from simforcing.data.synthetic.twin import SyntheticTwin
from simforcing.errors import DataError
from simforcing.twin import (TwinEpisode, frame_psnr, make_renderer, register_renderer, render_actions,
                             window_frame_steps)
from test_policy import tiny, world_model_run  # noqa: F401  (fixtures)
from test_world_model_eval import judge_dir  # noqa: F401  (fixture)

H, W = 32, 48
SEED, LENGTH = 3, 25
# Tolerances, measured on seed 3's first 12 episodes against the raw renders of the recorded physics (no video codec):
# reach and push episodes stay at >= 43.8 dB in every frame (the twin's arm is the recorded arm to IK and servo
# precision); grasp episodes dip to 30.2 dB in the frames where the closing fingers meet the object, which the twin
# does not have. The demo VAE reconstructs frames at about 32 dB: an error below that changes no condition latent.
FREE_MOTION_DB, CONTACT_DB, EPISODE_MEAN_DB = 38.0, 28.0, 40.0
# A full-scene twin replays its episode's simulation exactly; through the video codec (yuv444p, QP 0) seed 3's frames
# stay above 50 dB (measured: 51.9-62.6 dB per episode's worst frame).
SCENE_CODEC_DB = 45.0


@pytest.fixture(scope="module")
def twin():
    t = SyntheticTwin(H, W)
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
    return TwinEpisode(ep.states[0], ep.twin_record)


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


def _fresh_windows(start: TwinEpisode, a: np.ndarray, ends: tuple) -> tuple[list, tuple | None]:
    """What a fresh twin renders executing the actions ``a`` (1, A, 7) chunk after chunk (each ending at ``ends``,
    frame stride 2), and what it tracked (a full scene's ``executed``; None for the arm alone)."""
    ref = SyntheticTwin(H, W)
    try:
        ref.start([start])
        out, i = [], 0
        for j in ends:
            out.append(ref.window(a[:, i:j], stride=2, keep=j - i))
            i = j
        return out, (ref.executed(0) if start.has_scene else None)
    finally:
        ref.close()


def test_the_twin_renders_at_its_records_tessellation(twin, episodes):
    """A record names the tessellation its videos were rendered with (generator 5: scene.MESH); one without it (an older
    dataset) is rendered at MuJoCo's default — each frame exactly the arm model of that tessellation at the twin's
    joint positions, rendered on its own."""
    import mujoco

    from simforcing.data.synthetic.offscreen import SharedContextRenderer
    from simforcing.data.synthetic.scene import DEFAULT_MESH, MESH, sim_xml

    ep = episodes[1]
    assert ep.twin_record["mesh"] == list(MESH)
    old = {k: v for k, v in ep.twin_record.items() if k != "mesh"}
    frames = {}
    for mesh, record in ((MESH, ep.twin_record), (DEFAULT_MESH, old)):
        frames[mesh] = twin.start([TwinEpisode(ep.states[0], record)])[0]
        m = mujoco.MjModel.from_xml_string(sim_xml(mesh))
        d = mujoco.MjData(m)
        d.qpos[:] = twin.episodes[0].data.qpos
        mujoco.mj_forward(m, d)
        r = SharedContextRenderer(m, H, W)
        try:
            r.update_scene(d, camera=twin.episodes[0].camera)
            np.testing.assert_array_equal(frames[mesh], r.render())
        finally:
            r.close()
    changed = (frames[MESH] != frames[DEFAULT_MESH]).any(-1).mean()
    assert 0 < changed < 0.1  # edge pixels (2–5 % measured): the same arm, fewer facets
    for bad in ([14], [14, 1], [14.0, 8], "14x8", [True, 8], [200, 8]):
        with pytest.raises(ConfigError, match=r"mesh: .*numslices, numstacks"):
            twin.start([TwinEpisode(ep.states[0], {**ep.twin_record, "mesh": bad})])


def test_a_window_executes_only_its_first_keep_actions(twin, episodes):
    ep = episodes[1]
    a = ep.actions[None].astype(np.float64)
    (r1, r2), _ = _fresh_windows(_start(ep), a, (4, 12))
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
        SyntheticTwin(H, W).start([TwinEpisode(episodes[0].states[0], {"pose": 1})])


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
# The full-scene twin (`data synth --pairing scene`): the episode's own simulation, objects and physics included
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scene_episodes():
    r = TwinRenderer(H, W)
    try:
        return [simulate_episode(SEED, i, LENGTH, r, paired=False, pairing="scene") for i in range(3)]
    finally:
        r.close()


def _scene_start(ep) -> TwinEpisode:
    return TwinEpisode(ep.states[0], ep.twin_record)


def test_a_full_scene_twin_replays_its_recorded_simulation_exactly(twin, scene_episodes):
    """The simulation video of a scene-paired episode is the twin's replay of its recorded start and actions, pixel
    for pixel (data synth renders it so), objects and all; the objects really move by the simulation's physics."""
    kinds = set()
    for ep in scene_episodes:
        frames = render_actions(twin, [_scene_start(ep)], ep.actions[None])[0]
        np.testing.assert_array_equal(frames, ep.sim)
        ee, objects, start = twin.executed(0)
        assert objects.shape == (LENGTH - 1, len(ep.object_names), 3) and ee.shape == (LENGTH - 1, 3)
        np.testing.assert_allclose(np.concatenate([start[None], objects]), ep.sim_xyz, atol=1e-6)
        kinds.add(ep.kind)
    moved = [np.abs(ep.sim_xyz[-1, ep.target] - ep.sim_xyz[0, ep.target]).max() for ep in scene_episodes
             if ep.kind in ("push", "grasp")]
    assert kinds >= {"push"} and max(moved) > 0.03  # the simulation's objects move by contact


def test_a_full_scene_window_executes_only_its_first_keep_actions(twin, scene_episodes):
    """``keep`` with objects: a window's plan is rendered and leaves no trace — the objects are restored with the
    arm — and only the executed actions are tracked (what the twin's verdict reads)."""
    ep = next(e for e in scene_episodes if e.kind == "push")
    a = ep.actions[None].astype(np.float64)
    (r1, r2), want = _fresh_windows(_scene_start(ep), a, (10, 20))
    twin.start([_scene_start(ep)])
    w1 = twin.window(np.concatenate([a[:, :10], -a[:, 10:20]], axis=1), stride=2, keep=10)  # another plan
    np.testing.assert_array_equal(w1[:, :6], r1)
    np.testing.assert_array_equal(twin.window(a[:, 10:20], stride=2, keep=10), r2)
    got = twin.executed(0)
    assert len(got[0]) == 20 and all(np.array_equal(x, y) for x, y in zip(got, want))


def test_the_twins_own_verdict_is_the_task_predicate_on_its_objects(twin):
    """``task_verdicts``: the scripted push, replayed by the twin of its scene at the real physics' parameters, moves
    the twin's object far enough (the predicate holds from some step on); the same episode's failing operator never
    does. An arm-only twin has no objects to judge: named."""
    from simforcing.data.synthetic.generate import EpisodePhysics
    from simforcing.data.synthetic.tasks import parse_task
    from simforcing.data.synthetic.twin import task_verdicts

    index = next(i for i in range(40) if EpisodePhysics(SEED, i, 2).motion.kind == "push")
    for failures, succeeds in ((0.0, True), (1.0, False)):
        ep = EpisodePhysics(SEED, index, 33, failures=failures)
        task = parse_task("push", ep.motion.instruction,
                          [f"{o.colour} {o.shape}" if o.colour else "distractor" for o in ep.objects])
        twin.start([TwinEpisode(ep.state(), ep.twin_record("scene", 0.0))])
        twin.window(ep.motion.actions()[None].astype(np.float64), stride=1, keep=32)
        verdicts = task_verdicts(twin, [task])[0]
        assert verdicts.shape == (32,) and verdicts.dtype == bool and verdicts.any() == succeeds, ep.motion.failure
    twin.start([TwinEpisode(ep.state(), ep.twin_record("arm"))])
    with pytest.raises(ValueError, match="arm alone"):
        task_verdicts(twin, [task])


def test_data_check_twin_on_a_scene_dataset_is_the_codec_alone(tmp_path):
    root = generate_dataset(tmp_path / "ds", seed=SEED, progress=False, num_train=0, num_val=2, num_sim_pool=0,
                            length=13, height=H, width=W, pairing="scene", physics_gap=0.5)
    assert read_twin_record(root, "ep_00000")["scene"]["physics_gap"] == 0.5
    out = tmp_path / "twin.json"
    assert main(["data", "check-twin", "--data", str(root), "--preset", "demo", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["psnr_worst_frame"] >= SCENE_CODEC_DB


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
    assert all("scene" not in s.twin_record and s.sim_image is None for s in starts)  # an arm-paired world model's


def _scene_loop(wm, starts):
    """Two chunks (4, then 2 actions) of the scripted expert and do-nothing in the world model; -> the Episodes."""
    from simforcing.policy.closed_loop.evaluate import make_players
    from simforcing.policy.closed_loop.world_model_eval import Episodes

    ep = Episodes(wm, make_players({}, True, (), 9000, "cpu"), starts)
    t = 0
    for chunk, n in enumerate((4, 2)):
        images, states = ep.observe()
        ep.step(ep.act(images, states, t, chunk), n)
        t += n
    return ep


def test_closed_loop_a_full_scene_world_model_gets_the_scene_twin_and_its_verdict(world_model_run):
    """A world model of the full-scene pairing: every episode's twin record carries the scene simulated as `data synth
    --pairing scene` simulates it; with --wm-condition render the twin is the full scene and its own verdict is
    recorded per executed step; with its own chain the chain starts from the twin's start render (paired-sim)."""
    from simforcing.data.synthetic.generate import EpisodePhysics
    from simforcing.masking import FirstFrameMasker
    from simforcing.policy.closed_loop.results import EpisodeOutcome
    from simforcing.policy.closed_loop.synthetic import SimDomain, held_out_scenes
    from simforcing.policy.closed_loop.world_model_eval import (collect_episodes, in_domain, load_environment,
                                                                start_frames)

    domain = SimDomain("scene", 1.0)
    scenes = held_out_scenes(9000, 1, 6, ("push", "grasp"), layouts=2, jitter=0.03)
    starts = start_frames(scenes, 9000, 6, H, W, 2, 0.03, domain)
    for s in starts:
        assert s.twin_record == EpisodePhysics(9000, s.scene.index, 7, 2, 0.03).twin_record("scene", 1.0)
        assert s.sim_image.shape == (H, W, 3) and not np.array_equal(s.sim_image, s.image)
    wm = load_environment(str(world_model_run), condition="render")
    in_domain(wm, domain)
    ep = _scene_loop(wm, starts)
    try:
        verdicts = ep.twin_verdicts()
    finally:
        ep.close()
    assert len(verdicts) == len(ep.rows) and all(v.shape == (6,) for v in verdicts)
    out = collect_episodes(ep, np.zeros((len(ep.rows), 6, 6)), ("push", "grasp"), 6, twin_verdicts=verdicts)
    floor = out["do nothing (floor)"]["push"][0]
    assert floor.twin_verdicts == [False] * 6 and floor.twin_success is False and floor.twin_step is None
    for per in out.values():
        for o in per["push"] + per["grasp"]:
            assert EpisodeOutcome.from_json(json.loads(json.dumps(o.to_json()))) == o and len(o.twin_verdicts) == 6

    own = load_environment(str(world_model_run), condition="rollout")
    in_domain(own, domain)
    assert own.cfg.sample.mask_mode == "paired-sim"
    ep = _scene_loop(own, starts)
    from simforcing.data.paired import frames_to_target, to_unit_range

    want = to_unit_range(frames_to_target(np.stack([s.sim_image for _, s in ep.rows]), H, W)).permute(1, 0, 2, 3)
    assert ep.ro.first_sim.equal(want) and ep.twin_verdicts() is None  # the chain's x^s_0: the twin's start render
    with pytest.raises(ConfigError, match="paired-sim"):  # the arm alone is no first frame of the scene's domain
        FirstFrameMasker.from_config(replace(own.cfg, sample=replace(own.cfg.sample, mask_mode="mask-file")))


def test_the_world_models_domain_is_its_training_datas_pairing(tmp_path):
    from types import SimpleNamespace

    from simforcing.policy.closed_loop.synthetic import SimDomain

    domain_of = SimDomain.of_world_model
    root = generate_dataset(tmp_path / "ds", seed=SEED, progress=False, num_train=1, num_val=0, num_sim_pool=0,
                            length=3, height=H, width=W, pairing="scene", physics_gap=0.25)
    said = []

    def _wm(root, pairing):
        cfg = preset("demo")
        cfg.data.root, cfg.data.pairing = root, pairing
        return SimpleNamespace(cfg=cfg, checkpoint=None, name="RUN")

    assert domain_of(_wm(str(root), None), said.append) == SimDomain("scene", 0.25)
    assert domain_of(_wm(str(root), "arm"), said.append) == SimDomain()  # the config's word wins
    assert domain_of(_wm(str(tmp_path / "gone"), "scene"), said.append) == SimDomain("scene", 1.0)
    assert said == []
    assert domain_of(_wm(str(tmp_path / "gone"), None), said.append) == SimDomain()
    assert len(said) == 1 and "cannot be read" in said[0] and "data.pairing" in said[0]
    assert domain_of(None, said.append) == SimDomain()  # copy-first


def test_policy_eval_in_a_full_scene_world_model_records_the_twins_verdict(world_model_run, judge_dir, tmp_path,
                                                                           monkeypatch):
    """End to end (`policy eval --env world-model --wm-condition render` on a full-scene world model, its domain
    given): every episode's outcome in eval.json holds the twin's verdict after each executed action, read back."""
    import simforcing.policy.closed_loop.world_model_eval as wme
    from simforcing.policy.closed_loop.results import PolicyEvaluation
    from simforcing.policy.closed_loop.synthetic import SimDomain
    from simforcing.policy.judge.success_judge import load_judge

    monkeypatch.setattr(SimDomain, "of_world_model", classmethod(lambda cls, wm, progress: cls("scene", 1.0)))
    res = wme.evaluate_world_model(str(world_model_run), load_judge(judge_dir), {}, per_task=1, max_steps=4,
                                   layouts=2, jitter=0.03, condition="render", progress=lambda s: None)
    outcomes = [o for per in res.episodes.values() for os_ in per.values() for o in os_]
    assert len(outcomes) == 6 and all(len(o.twin_verdicts) == 4 for o in outcomes)
    assert res.sampler["condition"] == "render"
    res.write(tmp_path / "eval")
    assert PolicyEvaluation.read(tmp_path / "eval", "here") == res
