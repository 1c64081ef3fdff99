"""The Python API (``simforcing.api``): a run loaded in one line predicts what the sampler predicts, rolls out what the
rollout makes, and names what it cannot use."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simforcing import WorldModelPipeline
from simforcing.config import ConfigError
from simforcing.data.paired import frames_to_target, to_unit_range
from simforcing.sample import sample_videos
from simforcing.sampler_batch import SamplerBatch
from test_sample import make_data, make_run


@pytest.fixture(scope="module")
def pipe_and_inputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api")
    data = make_data(tmp / "data")
    make_run(tmp / "run", data, tmp / "vae")
    pipe = WorldModelPipeline.from_run(tmp / "run", device="cpu")
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 255, (40, 60, 3), dtype=np.uint8)  # another size: resized and cropped as in training
    mask = np.zeros((40, 60), bool)
    mask[10:30, 20:40] = True
    actions = rng.normal(0, 0.05, (pipe.cfg.data.actions_per_window, 7))
    return pipe, frame, mask, rng.normal(0, 0.1, 7), actions


def test_a_call_is_the_sampler_on_the_same_inputs(pipe_and_inputs):
    pipe, frame, mask, state, actions = pipe_and_inputs
    out = pipe(frame, "open the drawer", state, actions, arm_mask=mask, seed=3)
    f = pipe.cfg.data.frames
    assert out.video.shape == (f, 32, 48, 3) and out.video.dtype == np.uint8 and out.sim_video.shape == out.video.shape
    text, tmask = pipe.text("open the drawer")
    x = to_unit_range(frames_to_target(frame[None], 32, 48)).permute(1, 0, 2, 3)
    from simforcing.data.paired import masks_to_target

    batch = SamplerBatch(first_frame=x, actions=torch.from_numpy(pipe.normalizer.normalize("action", actions[None])),
                         state0=torch.from_numpy(pipe.normalizer.normalize("state", state[None])), text=text,
                         text_mask=tmask, arm_mask=masks_to_target(mask[None], 32, 48))
    want = sample_videos(pipe.model, pipe.vae, batch, pipe.cfg, generator=torch.Generator().manual_seed(3))
    assert torch.equal(out.raw.real_video, want.real_video)
    assert out.forwards == pipe.cfg.sample.n_sim + 2 * pipe.cfg.sample.n_real
    w0 = pipe(frame, "open the drawer", state, actions, arm_mask=mask, w=0.0, seed=3)
    assert w0.sim_video is None and w0.forwards == pipe.cfg.sample.n_real


def test_a_rollout_of_one_chunk_is_a_call_and_longer_ones_are_cut(pipe_and_inputs):
    pipe, frame, mask, state, actions = pipe_and_inputs
    one = pipe.rollout(frame, "open the drawer", state, actions, arm_mask=mask, seed=3)
    call = pipe(frame, "open the drawer", state, actions, arm_mask=mask, seed=3)
    assert np.array_equal(one.video, call.video)
    long = pipe.rollout(frame, "open the drawer", state, np.concatenate([actions, actions, actions[:2]]),
                        arm_mask=mask)
    assert long.video.shape[0] == 1 + 2 * len(actions) + 2


def test_named_errors(pipe_and_inputs, tmp_path):
    pipe, frame, mask, state, actions = pipe_and_inputs
    with pytest.raises(ConfigError, match="arm_mask"):
        pipe(frame, "open the drawer", state, actions)
    with pytest.raises(ValueError, match="actions: expected"):
        pipe(frame, "open the drawer", state, actions[:3], arm_mask=mask)
    with pytest.raises(ValueError, match="uint8"):
        pipe(frame.astype(float), "open the drawer", state, actions, arm_mask=mask)
    with pytest.raises(ConfigError, match="horizon"):
        pipe.rollout(frame, "open the drawer", state, actions[:0], arm_mask=mask)


def test_the_pipeline_is_its_loaded_world_model(pipe_and_inputs):
    """One loaded world model beneath the pipeline: its objects, which checkpoint, and the text padded as training
    pads it (the instruction's real tokens, then zeros to data.text_max_tokens)."""
    pipe = pipe_and_inputs[0]
    wm = pipe.world_model
    assert pipe.cfg is wm.cfg and pipe.model is wm.model and pipe.vae is wm.vae and pipe.normalizer is wm.normalizer
    assert pipe.checkpoint.step == 1 and pipe.checkpoint.path.name == "step_000001"
    text, mask = pipe.text("open the drawer")
    emb = wm.text_encoder.encode(["open the drawer"])[0]  # (n, D) real tokens
    n = emb.shape[0]
    assert text.shape == (1, pipe.cfg.data.text_max_tokens, pipe.cfg.model.text_dim) and text.dtype == torch.float32
    assert int(mask.sum()) == n and bool(mask[0, :n].all()) and torch.equal(text[0, :n], emb)
    assert not text[0, n:].any()
