"""Long rollouts (``simforcing.rollout``) and their drift evaluation (``simforcing rollout``): the chunk hand-over, the
state input, cut chunks, batching, and the command's outputs and errors."""

from __future__ import annotations

import json
from dataclasses import fields

import numpy as np
import pytest
import torch

from simforcing.config import ConfigError
from simforcing.data.stats import Normalizer
from simforcing.evaluate.probe import ProbeConfig, StateProbe, save_probe
from simforcing.rollout import Recorded, WorldModelRollout, chunk_sizes, integrate_state, rollout
from simforcing.runs.loaded import LoadedWorldModel, sample_generator
from simforcing.sample import GuidedSampler, sample_videos
from simforcing.sampler_batch import SamplerBatch
from test_sample import make_run, random_batch, tiny_cfg, tiny_model, tiny_vae

IDENTITY = Normalizer({"action": {"min": [-1.0] * 7, "max": [1.0] * 7},
                       "state": {"min": [-1.0] * 7, "max": [1.0] * 7}})  # normalise(x) == x exactly


@pytest.fixture(scope="module")
def setup():
    cfg = tiny_cfg()
    return cfg, tiny_model(cfg), tiny_vae()


def episode_inputs(cfg, b: int, horizon: int, seed: int = 0) -> dict:
    """A batch of ``b`` episodes: first frame, masks, sim frame, raw actions (B, H, 7), state0, text."""
    batch = random_batch(cfg, b, seed)
    g = torch.Generator().manual_seed(seed + 100)
    actions = torch.rand(b, horizon, 7, generator=g) * 0.2 - 0.1
    actions[:, :8] = batch["actions"]  # chunk 0 = the window's actions (identity normaliser)
    return {"first_frame": batch["real"][:, :, 0], "first_mask": batch["arm_mask"][:, 0],
            "first_sim": batch["sim"][:, :, 0], "actions": actions, "state0": batch["state0"],
            "text": batch["text"], "text_mask": batch["text_mask"], "batch": SamplerBatch.from_collated(batch)}


def window_of(batch: SamplerBatch, i: int) -> SamplerBatch:
    """Window ``i`` of a batch, as a batch of one."""
    parts = {f.name: getattr(batch, f.name) for f in fields(batch)}
    return SamplerBatch(**{k: None if v is None else v[i:i + 1] for k, v in parts.items()})


def loaded(setup, cfg=None) -> LoadedWorldModel:
    """The tiny model as a loaded world model (identity statistics), with ``cfg`` or the fixture's config."""
    c, model, vae = setup
    return LoadedWorldModel(cfg or c, model, vae, IDENTITY)


def roll(setup, ep: dict, horizon: int | None = None, b_idx=None, **kw):
    cfg = setup[0]
    sl = slice(None) if b_idx is None else b_idx
    gens = [sample_generator(cfg, i) for i in range(ep["actions"].shape[0])][sl]
    acts = ep["actions"][sl] if horizon is None else ep["actions"][sl, :horizon]
    return rollout(loaded(setup, kw.pop("cfg", None)), ep["first_frame"][sl], acts, ep["state0"][sl],
                   ep["text"][sl], ep["text_mask"][sl], gens, first_mask=ep["first_mask"][sl],
                   first_sim=ep["first_sim"][sl], **kw)


def test_one_chunk_is_the_sampler_bit_for_bit(setup):
    cfg, model, vae = setup
    ep = episode_inputs(cfg, 1, 8)
    res = roll(setup, ep)
    want = sample_videos(model, vae, ep["batch"], cfg, generator=sample_generator(cfg, 0), decode_sim=True)
    assert torch.equal(res.video, want.real_video) and torch.equal(res.sim_video, want.sim_video)
    assert torch.equal(res.masked_frame, want.masked_frame)
    assert res.forwards == want.forwards == cfg.sample.n_sim + 2 * cfg.sample.n_real
    # two episodes in one call, each with its own generator: each is its one-episode call
    ep2 = episode_inputs(cfg, 2, 8)
    both = roll(setup, ep2)
    for i in range(2):
        one = sample_videos(model, vae, window_of(ep2["batch"], i), cfg, generator=sample_generator(cfg, i))
        torch.testing.assert_close(both.video[i:i + 1], one.real_video, atol=1e-5, rtol=1e-5)


class Recorder:
    """Wraps the guided sampler: keeps every chunk's batch."""

    def __init__(self, sampler: GuidedSampler):
        self.sampler, self.calls = sampler, []
        self.decode_sim = True

    def __call__(self, batch: SamplerBatch, generators):
        self.calls.append(batch)
        return self.sampler(batch, generators)

    def settings(self) -> dict:
        return self.sampler.settings()


def test_each_chunk_starts_from_the_previous_chunks_last_frame(setup):
    cfg, model, vae = setup
    ep = episode_inputs(cfg, 2, 24)
    rec = Recorder(GuidedSampler(model, vae, cfg, decode_sim=True))
    res = roll(setup, ep, sampler=rec)
    assert res.video.shape[2] == 25 and res.chunk_starts == [0, 8, 16] and len(rec.calls) == 3
    for k in (1, 2):
        batch = rec.calls[k]
        # the real first frame of chunk k = the decoded last frame of chunk k-1 (re-encoded by the sampler)
        assert torch.equal(batch.first_frame, res.video[:, :, 8 * k])
        # the simulation chain continues from its own last frame: no masking of a generated frame
        assert torch.equal(batch.sim_first_frame, res.sim_video[:, :, 8 * k])
        assert batch.arm_mask is None
    assert rec.calls[0].sim_first_frame is None  # chunk 0: the first frame is masked as the sampler always does
    assert torch.equal(rec.calls[0].arm_mask, ep["first_mask"])


def test_remask_masks_each_chunks_first_frame_with_the_recorded_mask(setup):
    _, model, vae = setup
    cfg = tiny_cfg(rollout__sim_chain="remask")
    ep = episode_inputs(cfg, 2, 16)
    masks = torch.rand(2, 17, 32, 48, generator=torch.Generator().manual_seed(1)) > 0.5
    rec = Recorder(GuidedSampler(model, vae, cfg, decode_sim=True))
    roll(setup, ep, cfg=cfg, sampler=rec, recorded=Recorded(arm_mask=masks))
    assert rec.calls[1].sim_first_frame is None and torch.equal(rec.calls[1].arm_mask, masks[:, 8])


def test_state_input_is_integrated_from_the_actions_never_recorded(setup):
    cfg, _, _ = setup
    ep = episode_inputs(cfg, 2, 24)
    res = roll(setup, ep)
    q = ep["state0"].double()
    for k in range(3):
        torch.testing.assert_close(res.states[:, k].double(), q, atol=1e-6, rtol=0)
        a = ep["actions"][:, 8 * k:8 * (k + 1)].double()
        q = q.clone()
        q[:, :6] += a[:, :, :6].sum(1)
        q[:, 6] = a[:, -1, 6]
    # integrate_state: deltas summed, absolute dims set, the rest untouched
    s0 = torch.zeros(1, 7)
    acts = torch.ones(1, 3, 7)
    acts[:, :, 6] = torch.tensor([0.2, 0.4, 0.9])
    assert integrate_state(cfg, s0, acts).tolist() == [[3, 3, 3, 3, 3, 3, pytest.approx(0.9)]]


def test_probe_state_is_chained_from_the_generated_frames(setup, tmp_path):
    cfg, model, vae = setup
    c = tiny_cfg(rollout__state="probe")
    torch.manual_seed(0)
    probe = StateProbe(ProbeConfig(height=32, width=48, state_dim=7)).eval()
    ep = episode_inputs(cfg, 2, 16)
    res = roll(setup, ep, cfg=c, probe=probe)
    with torch.no_grad():
        want = ep["state0"].double() + probe(ep["first_frame"], res.video[:, :, 8]).double()
    torch.testing.assert_close(res.states[:, 1].double(), want, atol=1e-5, rtol=0)
    with pytest.raises(ConfigError, match="eval.probe"):
        roll(setup, ep, cfg=c)


def test_a_horizon_that_is_not_whole_chunks_cuts_the_last_chunk(setup):
    cfg, model, vae = setup
    ep = episode_inputs(cfg, 1, 16)
    assert chunk_sizes(12, 8, 1) == [8, 4]
    cut = roll(setup, ep, horizon=12)
    assert cut.video.shape[2] == 13 and cut.chunk_starts == [0, 8]
    # = the full chunk given the 4 actions then 4 hold actions (zero deltas, the gripper kept), first 4 frames kept
    held = ep["actions"][:, :16].clone()
    held[:, 12:, :6] = 0
    held[:, 12:, 6] = held[:, 11:12, 6]
    full = roll(setup, dict(ep, actions=held))
    assert torch.equal(cut.video, full.video[:, :, :13])
    with pytest.raises(ConfigError, match="horizon"):
        chunk_sizes(0, 8, 1)
    with pytest.raises(ConfigError, match="frame_stride"):
        chunk_sizes(6, 8, 4)


def test_a_step_with_a_plan_fills_the_window_and_keeps_the_executed_frames(setup):
    cfg, model, vae = setup
    ep = episode_inputs(cfg, 1, 8)
    ro = WorldModelRollout(loaded(setup), ep["first_frame"], ep["state0"], ep["text"], ep["text_mask"],
                           [sample_generator(cfg, 0)], first_mask=ep["first_mask"])
    frames = ro.step(ep["actions"][:, :4], plan=ep["actions"][:, 4:])
    full = roll(setup, ep)
    assert frames.shape[2] == 4 and torch.equal(frames, full.video[:, :, 1:5])
    with pytest.raises(ConfigError, match="actions_per_window"):
        ro.step(torch.zeros(1, 9, 7))


def test_a_policy_run_cannot_roll_out(setup):
    cfg, model, vae = setup
    c = tiny_cfg(model__action_head=True)
    ep = episode_inputs(cfg, 1, 8)
    with pytest.raises(ConfigError, match="policy"):
        roll(setup, ep, cfg=c)


# ----------------------------------------------------------------------------------------------------------------------
# `simforcing rollout`
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    from datagen import make_dataset

    tmp = tmp_path_factory.mktemp("rollout")
    data = make_dataset(tmp / "data", num_train=1, num_val=3, num_pool=0, length=17, text_dim=16,
                        text_max_tokens=16)
    make_run(tmp / "run", data, tmp / "vae")
    torch.manual_seed(0)
    save_probe(StateProbe(ProbeConfig(height=32, width=48, state_dim=7)), tmp / "probe", {})
    return tmp, data


def test_rollout_command_writes_every_row_curve_and_video(long_run, capsys):
    from simforcing.cli import main

    tmp, data = long_run
    out = tmp / "out"
    rc = main(["rollout", "--ckpt", str(tmp / "run"), "--data", str(data), "--horizon", "16", "--out", str(out),
               "--videos", "1", "--device", "cpu", f"--eval.probe={tmp / 'probe'}"])
    assert rc == 0 and "rollout of 3 episodes × 2 chunks" in capsys.readouterr().out
    res = json.loads((out / "rollout.json").read_text())
    assert set(res["rows"]) == {"rollout", "restart", "control", "sim chain", "copy-first", "vae-recon",
                                "probe floor"}
    r = res["rows"]["rollout"]
    assert len(r["per_chunk"]["psnr"]) == 2 and len(r["per_frame"]["psnr"]) == 16
    assert np.array(r["per_episode_chunk"]["af_pos"]).shape == (3, 2)
    # chunk 0 of the rollout IS the restart's chunk 0 (same frame, state, actions and noise)
    assert r["per_chunk"]["psnr"][0] == pytest.approx(res["rows"]["restart"]["per_chunk"]["psnr"][0], abs=1e-9)
    assert res["rows"]["copy-first"]["per_chunk"]["af_pos"][0] > 0
    for f in ("rollout.md", "drift.png", "videos/episode_000.mp4", "videos/episode_000.gif",
              "videos/episode_000.png"):
        assert (out / f).is_file(), f


def test_the_video_never_reads_the_recorded_states_after_the_first(long_run, monkeypatch):
    import simforcing.evaluate.rollouts as ro

    tmp, data = long_run
    base = ro.evaluate_rollouts(tmp / "run", data, None, "val", 16, tmp / "s0", rows=("rollout",), videos=0,
                                device="cpu", progress=lambda *_: None)
    real = ro.read_lowdim

    def garbage(root, eid):  # every recorded state after frame 0 replaced
        a, s = real(root, eid)
        s = s.copy()
        s[1:] = 1e3
        return a, s

    monkeypatch.setattr(ro, "read_lowdim", garbage)
    other = ro.evaluate_rollouts(tmp / "run", data, None, "val", 16, tmp / "s1", rows=("rollout",), videos=0,
                                 device="cpu", progress=lambda *_: None)
    assert other.rows["rollout"].per_frame["psnr"] == base.rows["rollout"].per_frame["psnr"]


def test_rollout_json_round_trips_older_files_load_and_another_kind_is_refused(long_run, tmp_path):
    """rollout.json is written and read through RolloutDrift: the same result back; a file written before the tags
    (version 1) loads; a one-window evaluation under that name is refused by name."""
    import simforcing.evaluate.rollouts as ro
    from simforcing.config import ConfigError
    from simforcing.evaluate.results import RolloutDrift

    tmp, data = long_run
    res = ro.evaluate_rollouts(tmp / "run", data, None, "val", 16, tmp_path / "new", rows=("rollout", "copy-first"),
                               videos=0, device="cpu", progress=lambda *_: None)
    raw = json.loads((tmp_path / "new" / "rollout.json").read_text())
    assert raw["format"] == "simforcing.rollout-drift" and raw["chunks"] == res.chunks == 2
    assert RolloutDrift.from_json(json.loads(json.dumps(res.to_json()))) == res
    assert RolloutDrift.read(tmp_path / "new", "--rollout") == res
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "rollout.json").write_text(json.dumps({k: v for k, v in raw.items()
                                                               if k not in ("format", "format_version")}))
    assert RolloutDrift.read(tmp_path / "old", "--rollout") == res
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "rollout.json").write_text(json.dumps({"psnr": 20.0, "num_samples": 4}))
    with pytest.raises(ConfigError, match="holds a one-window evaluation, not a rollout-drift result"):
        RolloutDrift.read(tmp_path / "other", "--rollout")


@pytest.mark.parametrize("horizon, message", [("0", "--horizon: got 0"), ("40", "has 17 frames, 16 actions")])
def test_rollout_command_names_a_bad_horizon(long_run, capsys, horizon, message):
    from simforcing.cli import main

    tmp, data = long_run
    rc = main(["rollout", "--ckpt", str(tmp / "run"), "--data", str(data), "--horizon", horizon, "--out",
               str(tmp / "bad"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err


def test_context_tau_reaches_the_network_only_after_the_first_chunk(setup):
    """``rollout.context_tau``: chunk 0 is the sampler's (a clean first frame), later chunks tell the network the
    level; a model trained without context noise sees a different input (its first-frame timestep), so the video
    of chunk 1 changes and chunk 0's does not."""
    cfg, model, vae = setup
    ep = episode_inputs(cfg, 2, 16)
    told = tiny_cfg(rollout__context_tau=0.5)
    a, b = roll(setup, ep), roll(setup, ep, cfg=told)
    span = cfg.data.actions_per_window // cfg.data.frame_stride
    assert torch.equal(a.video[:, :, :1 + span], b.video[:, :, :1 + span])
    assert not torch.allclose(a.video[:, :, 1 + span:], b.video[:, :, 1 + span:])
    with pytest.raises(ConfigError, match="rollout.context_tau"):
        tiny_cfg(rollout__context_tau=1.0)


def test_training_time_corruption_is_off_when_sampling(setup):
    """train.context_noise / context_ghost and the condition corruption are training-time only: the sampler's
    output does not depend on them."""
    cfg, model, vae = setup
    ep = episode_inputs(cfg, 1, 8)
    noisy = tiny_cfg(train__context_noise=0.3, train__context_ghost=0.5, conditioning__corrupt_prob=1.0)
    want = sample_videos(model, vae, ep["batch"], cfg, generator=sample_generator(cfg, 0))
    got = sample_videos(model, vae, ep["batch"], noisy, generator=sample_generator(cfg, 0))
    assert torch.equal(want.real_video, got.real_video)
