"""Shareable checkpoints: `simforcing export` writes a Hugging Face–style folder (sharded safetensors, config, model
card) that ``WorldModelPipeline.from_pretrained`` loads — and it samples exactly what the run samples."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from simforcing import WorldModelPipeline
from simforcing.cli import main
from simforcing.config import ConfigError
from test_sample import make_data, make_run


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    data = make_data(tmp / "data", num_val=2)
    make_run(tmp / "run", data, tmp / "vae")
    (tmp / "run" / "status.json").write_text(json.dumps({"state": "finished", "step": 1}))  # as the loop ends a run
    ev = tmp / "eval"
    assert main(["evaluate", "--ckpt", str(tmp / "run"), "--data", str(data), "--out", str(ev), "--num-samples", "1",
                 "--device", "cpu"]) == 0
    out = tmp / "shared"
    assert main(["export", "--ckpt", str(tmp / "run"), "--out", str(out), "--eval", str(ev),
                 "--max-shard-size", "64KB"]) == 0
    return tmp, out, json.loads((ev / "eval.json").read_text())


def test_the_folder_is_sharded_described_and_self_contained(exported):
    tmp, out, ev = exported
    meta = json.loads((out / "config.json").read_text())
    assert meta["format"] == "simforcing.world-model" and meta["source"]["step"] == 1
    assert meta["vae"]["copied"] and (out / "vae" / "config.json").is_file()  # the demo VAE travels with it
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(p.name for p in out.glob("model-*-of-*.safetensors"))
    assert len(shards) > 1 and set(index["weight_map"].values()) == set(shards)
    assert all((out / s).stat().st_size <= 64 * 1024 + 4096 or
               len([n for n, f in index["weight_map"].items() if f == s]) == 1 for s in shards)
    card = (out / "README.md").read_text()
    for section in ("## Method", "## Data", "## Training budget", "## Evaluation", "## What it expects"):
        assert section in card
    assert f"| {ev['psnr']:.2f} |" in card and "trained 1 optimiser steps" in card
    assert "copied into `vae/`" in card and "from_pretrained" in card


def test_from_pretrained_samples_what_the_run_samples(exported):
    tmp, out, _ = exported
    run_pipe = WorldModelPipeline.from_run(tmp / "run", device="cpu")
    shared = WorldModelPipeline.from_pretrained(out, device="cpu")
    a, b = run_pipe.model.state_dict(), shared.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert shared.checkpoint.kind == run_pipe.checkpoint.kind and shared.checkpoint.step == 1
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 255, (32, 48, 3), dtype=np.uint8)
    mask = np.zeros((32, 48), bool)
    mask[8:24, 12:36] = True
    state, actions = rng.normal(0, 0.1, 7), rng.normal(0, 0.05, (run_pipe.cfg.data.actions_per_window, 7))
    x, y = (p(frame, "open the drawer", state, actions, arm_mask=mask, seed=5) for p in (run_pipe, shared))
    assert np.array_equal(x.video, y.video) and np.array_equal(x.sim_video, y.sim_video)
    long = np.concatenate([actions, actions])
    x, y = (p.rollout(frame, "open the drawer", state, long, arm_mask=mask, seed=2) for p in (run_pipe, shared))
    assert np.array_equal(x.video, y.video)


def test_what_cannot_be_shared_or_loaded_is_named(exported, tmp_path, capsys):
    tmp, out, _ = exported
    with pytest.raises(ConfigError, match="a run's config"):
        WorldModelPipeline.from_pretrained(tmp / "run", device="cpu")  # a run folder: from_run loads it
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert main(["export", "--ckpt", str(tmp / "run"), "--out", str(mine)]) == 2
    assert "--out" in capsys.readouterr().err and (mine / "notes.txt").read_text() == "mine"
    other = tmp_path / "other_eval"
    other.mkdir()
    ev = json.loads((tmp / "eval" / "eval.json").read_text())
    ev["checkpoint"]["path"] = str(tmp_path / "elsewhere")
    (other / "eval.json").write_text(json.dumps(ev))
    assert main(["export", "--ckpt", str(tmp / "run"), "--out", str(tmp_path / "x"), "--eval", str(other)]) == 2
    assert "scored" in capsys.readouterr().err and not (tmp_path / "x").exists()
    again = tmp_path / "again"  # an earlier export is replaced, its old shards with it
    assert main(["export", "--ckpt", str(tmp / "run"), "--out", str(again), "--max-shard-size", "64KB"]) == 0
    assert main(["export", "--ckpt", str(tmp / "run"), "--out", str(again)]) == 0
    assert [p.name for p in again.glob("model-*.safetensors")] == ["model-00001-of-00001.safetensors"]
    capsys.readouterr()
