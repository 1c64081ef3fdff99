"""The state probe behind the action-following error: its pieces against independent computations, its files, and
what the metric means on the embedded MuJoCo benchmark (the arm moved along the recorded trajectory scores better
than the same frames reversed or frozen; the probe's own error is well below the copy baseline's)."""

import json
import os
import re

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np
import pytest
import torch

from simforcing.data.synthetic.generate import generate_dataset
from simforcing.evaluate.probe import (FitOptions, ProbeAccumulator, ProbeConfig, SpatialSoftmax, StateProbe,
                                       composite, displacement, episode_backgrounds, fit_probe, load_probe,
                                       read_probe_frames, save_probe, state_errors, transplant)

H, W = 32, 48


def test_spatial_softmax_reads_the_position_of_a_peak():
    maps = torch.full((1, 2, 4, 6), -1e4)
    maps[0, 0, 1, 5] = 0.0  # row 1 of 4, column 5 of 6
    maps[0, 1, 3, 0] = 0.0
    out = SpatialSoftmax()(maps)  # (1, 4): x of both maps, then y of both
    xs, ys = np.linspace(-1, 1, 6), np.linspace(-1, 1, 4)
    torch.testing.assert_close(out, torch.tensor([[xs[5], xs[0], ys[1], ys[3]]], dtype=torch.float32))


def test_state_errors_and_displacement_against_numpy():
    cfg = ProbeConfig(height=H, width=W, state_dim=7, position_dims=(0, 1, 2), gripper_dim=6)
    rng = np.random.default_rng(0)
    pred, states = rng.normal(size=(2, 5, 7)), rng.normal(size=(2, 5, 7))
    err = state_errors(cfg, torch.tensor(pred), torch.tensor(states))
    np.testing.assert_allclose(err["pos"].numpy(), np.sqrt(((pred[..., :3] - states[..., :3]) ** 2).sum(-1)))
    np.testing.assert_allclose(err["grip"].numpy(), np.abs(pred[..., 6] - states[..., 6]))
    d = displacement(cfg, torch.tensor(states))
    np.testing.assert_allclose(d.numpy(), np.linalg.norm(states[..., :3] - states[:, :1, :3], axis=-1))


def test_accumulator_averages_compared_frames_and_only_moving_ones():
    """An oracle probe (it returns the state change it is told) shows exactly how frames are selected."""
    cfg = ProbeConfig(height=H, width=W, state_dim=7)

    class Oracle(StateProbe):
        def video_states(self, video, state0):  # the video's first pixel holds an x offset per frame
            out = state0[:, None].repeat(1, video.shape[2], 1)
            out[..., 0] += video[:, 0, :, 0, 0]
            return out

    probe = Oracle(cfg)
    states = torch.zeros(1, 4, 7)
    states[0, :, 0] = torch.tensor([0.0, 0.0, 0.1, 0.3])  # the arm moves at frames 2 and 3
    video = torch.zeros(1, 3, 4, H, W)
    video[0, 0, :, 0, 0] = torch.tensor([0.0, 0.05, 0.1, 0.1])  # errors per frame: 0, 0.05, 0, 0.2
    acc = ProbeAccumulator(probe, frame_indices=[1, 2, 3], moving_threshold=0.05)
    acc.update(video, video, states)
    out = acc.compute()
    assert out.af_pos == pytest.approx((0.05 + 0.0 + 0.2) / 3)
    assert out.af_pos_moving == pytest.approx((0.0 + 0.2) / 2)  # frame 1 has not moved: left out


def test_composite_and_transplant_paste_only_the_arm():
    bg = torch.full((1, 3, 4, 4), 200, dtype=torch.uint8)
    arm = torch.zeros(1, 3, 4, 4, dtype=torch.uint8)
    arm[0, :, 1, 2] = 90  # one arm pixel on the black simulation background
    out = composite(arm, bg)
    assert out[0, :, 1, 2].tolist() == [90, 90, 90] and int((out == 200).sum()) == 3 * 15
    real = torch.full((1, 3, 4, 4), 7, dtype=torch.uint8)
    mask = torch.zeros(1, 4, 4, dtype=torch.bool)
    mask[0, 3, 3] = True
    out = transplant(real, mask, bg)
    assert out[0, :, 3, 3].tolist() == [7, 7, 7] and int((out == 200).sum()) == 3 * 15


@pytest.fixture(scope="module")
def benchmark(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe") / "ds"
    return generate_dataset(root, num_train=6, num_val=3, num_sim_pool=24, length=17, height=H, width=W, seed=5,
                            progress=False)


@pytest.fixture(scope="module")
def fitted(benchmark, tmp_path_factory):
    probe, report = fit_probe(benchmark, H, W, FitOptions(steps=600, batch_size=40, seed=0), progress=False)
    out = save_probe(probe, tmp_path_factory.mktemp("probe_out") / "probe", report)
    return load_probe(out), report


def test_backgrounds_remove_the_arm(benchmark):
    real = read_probe_frames(benchmark, ("train",), "real", H, W)
    bg = episode_backgrounds(real)
    assert bg.shape == (6, 3, H, W)
    # where the arm is in frame 0 of episode 0, the background differs from the frame (the arm is gone)
    first = real.frames[(real.episode == 0).nonzero()[0, 0]]
    m = real.masks[(real.episode == 0).nonzero()[0, 0]]
    assert (first.float() - bg[0].float()).abs().amax(0)[m].mean() > 20


@pytest.mark.slow
def test_metric_meaning_on_the_benchmark(benchmark, fitted):
    """Recorded trajectory < reversed < ... and frozen (copy): the probe reads where the arm is, and its own error
    on recorded frames is well below a model that does not move."""
    probe, report = fitted
    val = read_probe_frames(benchmark, ("val",), "real", H, W)
    F = 9
    errs = {"recorded": [], "reversed": [], "frozen": []}
    for e in val.episode.unique():
        idx = (val.episode == e).nonzero().flatten()
        for s in range(0, len(idx) - F + 1, 4):
            w = idx[s:s + F]
            video = val.frames[w].float().div(127.5).sub(1).permute(1, 0, 2, 3)[None]  # (1, 3, F, H, W)
            states = val.states[w][None]
            variants = {"recorded": video, "reversed": torch.cat([video[:, :, :1], video[:, :, 1:].flip(2)], 2),
                        "frozen": video[:, :, :1].expand_as(video)}
            for name, v in variants.items():
                acc = ProbeAccumulator(probe, range(1, F), 0.02)
                acc.update(v, video, states)
                errs[name].append(acc.compute().af_pos)
    mean = {k: float(np.mean(v)) for k, v in errs.items()}
    assert mean["recorded"] < 0.75 * mean["reversed"], mean
    assert mean["recorded"] < 0.75 * mean["frozen"], mean
    assert report["val"]["real"]["pos"] < 0.6 * report["val"]["real"]["no_motion_pos"], report


def test_files_round_trip_and_refuse_what_is_not_a_probe(fitted, tmp_path):
    probe, report = fitted
    save_probe(probe, tmp_path / "p", report)
    again = load_probe(tmp_path / "p")
    x = torch.rand(2, 3, 3, H, W) * 2 - 1
    s0 = torch.zeros(2, 7)
    torch.testing.assert_close(again.video_states(x, s0), probe.video_states(x, s0))
    (tmp_path / "p" / "probe.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="probe.json"):
        load_probe(tmp_path / "p")
    with pytest.raises(ValueError, match="fit-probe"):
        load_probe(tmp_path / "missing")
    # a hand-edited probe.json: the message names the file and the field
    save_probe(probe, tmp_path / "q", report)
    meta_path = tmp_path / "q" / "probe.json"
    good = json.loads(meta_path.read_text())
    for edit, field in ((lambda c: c.pop("state_dim"), "missing field 'state_dim'"),
                        (lambda c: c.update(widht=48), "unknown field 'widht'"),
                        (lambda c: c.update(channels="sixteen"), "config:channels: cannot read 'sixteen' as int")):
        meta = json.loads(json.dumps(good))
        edit(meta["config"])
        meta_path.write_text(json.dumps(meta))
        with pytest.raises(ValueError, match=re.escape(f"{meta_path}: config")) as e:
            load_probe(tmp_path / "q")
        assert field in str(e.value) and "fit-probe" in str(e.value), str(e.value)
    with pytest.raises(ValueError, match="fitted on 32×48"):
        probe.video_states(torch.zeros(1, 3, 2, 16, 16), torch.zeros(1, 7))
