"""The latent cache: `data encode` writes what the VAE gives, epochs draw from the K cached windows, training on it."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from test_train import make_tiny_data, tiny_cfg

from simforcing.cli import main as cli_main
from simforcing.config import ConfigError
from simforcing.data.format import DataError
from simforcing.data.latent_cache import LatentWindowDataset, read_index
from simforcing.prep.latents import encode_latent_cache


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    base = tmp_path_factory.mktemp("lc")
    root, vae = make_tiny_data(base)
    cfg = tiny_cfg(root, vae)
    cache = base / "cache"
    index = encode_latent_cache(cfg, root, cache, windows_per_episode=3, progress=False)
    return cfg, root, cache, index


def test_index_lists_k_windows_per_episode_of_train_and_sim_pool(cached):
    cfg, root, cache, index = cached
    assert index == read_index(cache)
    assert [(e["split"], e["has_real"]) for e in index["episodes"]] == [("train", True)] * 2 + [("sim_pool", False)] * 2
    assert all(len(e["windows"]) == 3 for e in index["episodes"])
    assert index["latent_shape"] == [cfg.model.vae.latent_channels, 2, 8, 12]  # C, L+1, h, w: 5 frames of 32×48
    assert [s["paired"] for s in index["shards"]] == [True, False]
    assert (cache / "text.safetensors").exists()


def test_cached_latents_equal_the_vae_encoding_of_the_same_windows(cached):
    from simforcing.data.paired import PairedWindowDataset
    from simforcing.models.vae import load_vae

    cfg, root, cache, index = cached
    ds = LatentWindowDataset(cfg, cache, ("train",), ("sim", "real"))
    pix_cfg = copy.deepcopy(cfg)
    pix = PairedWindowDataset(pix_cfg, root, ("train",), ("sim", "real"))
    vae = load_vae(cfg)
    item = ds[0]
    ep = [e.info.episode_id for e in pix.episodes].index(item["episode_id"])
    ref = pix.item_at(ep, item["start"])
    with torch.no_grad():
        for d in ("sim", "real"):
            torch.testing.assert_close(item[f"z_{d}"], vae.encode(ref[d][None])[0])
    torch.testing.assert_close(item["actions"], ref["actions"])
    torch.testing.assert_close(item["state0"], ref["state0"])
    assert torch.equal(item["text"], ref["text"]) and torch.equal(item["text_mask"], ref["text_mask"])


def test_epochs_draw_windows_per_episode_from_the_cached_k(cached):
    cfg, _, cache, index = cached
    ds = LatentWindowDataset(cfg, cache, ("train", "sim_pool"), ("sim",))
    assert len(ds) == 4 * cfg.data.windows_per_episode and "z_real" not in ds[0]
    draws = []
    for epoch in range(4):
        ds.set_epoch(epoch)
        draws.append(list(ds.windows))
        for e in range(4):
            picked = [w for i, w in ds.windows if i == e]
            assert len(picked) == 2 and len(set(picked)) == 2 and all(0 <= w < 3 for w in picked)
    assert len({tuple(d) for d in draws}) > 1  # windows vary across epochs
    ds.set_epoch(2)
    assert ds.windows == draws[2]  # reproducible from (seed, epoch)
    more = copy.deepcopy(cfg)
    more.data.windows_per_episode = 5
    with pytest.warns(UserWarning, match="with replacement"):
        assert len(LatentWindowDataset(more, cache, ("train",), ("sim", "real"))) == 10


def test_mismatched_config_or_stats_are_refused(cached):
    cfg, _, cache, index = cached
    bad = copy.deepcopy(cfg)
    bad.data.frames = 9
    with pytest.raises(ConfigError, match="data.frames"):
        LatentWindowDataset(bad, cache)
    stats = json.loads(json.dumps(index["stats"]))
    stats["action"]["max"][0] += 1.0
    with pytest.raises(DataError, match="other statistics"):
        LatentWindowDataset(cfg, cache, stats=stats)


@pytest.mark.slow
def test_training_reads_the_cache_and_the_command_writes_one(cached, tmp_path):
    from simforcing.train import train_run

    cfg, root, cache, _ = cached
    lc_cfg = copy.deepcopy(cfg)
    lc_cfg.data.latent_cache = str(cache)
    lc_cfg.train.max_steps = 2
    result = train_run(lc_cfg, tmp_path / "run", "pretrain", progress=False)
    assert result["state"] == "finished" and result["step"] == 2
    out = tmp_path / "cli_cache"
    args = ["data", "encode", "--data", str(root), "--out", str(out), "--windows-per-episode", "1", "--splits",
            "train", "--no-progress", "--data.frames=5", f"--model.vae.path={cfg.model.vae.path}"]
    assert cli_main(args) == 0
    index = read_index(out)
    assert [len(e["windows"]) for e in index["episodes"]] == [1, 1] and index["splits"] == ["train"]
    assert cli_main(args) == 2  # refuses to overwrite an existing cache (an output already there: 2, as data synth)
