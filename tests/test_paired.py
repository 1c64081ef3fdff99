"""PairedWindowDataset: window/action alignment (Bridge and InternData-A1), reproducible windows, transforms, cache."""

import numpy as np
import pytest
import torch
from datagen import corrupt, frame_code, make_dataset, square_masks

import simforcing.data.paired as paired
from simforcing.config import ConfigError, load_config
from simforcing.data.format import DataError, read_stats
from simforcing.data.paired import PairedWindowDataset, frames_to_target, resize_center_crop
from simforcing.data.stats import Normalizer

TINY = ["--model.text_dim=64", "--data.text_max_tokens=16"]
CODE_TOL = 3 / 127.5  # H.264 RGB<->YUV rounding of the frame code


def bridge_cfg(*extra):
    # 32x48 frames: the VAE stride 8 makes the resolution valid for patch 2 (multiple of 16)
    return load_config("bridge", TINY + ["--data.height=32", "--data.width=48", "--model.vae.spatial_stride=8",
                                         *extra]).validate()


def a1_cfg(*extra):
    return load_config("interndata_a1", TINY + ["--data.height=32", "--data.width=48",
                                                "--model.vae.spatial_stride=8", *extra]).validate()


def demo_cfg(*extra):
    return load_config("demo", list(extra)).validate()


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("small") / "ds", num_train=2, num_val=1, num_pool=2, length=25)


def decoded_code(video):
    """(3, F, H, W) in [-1, 1] -> the red frame code per frame, in [-1, 1] units."""
    return video[0].mean(dim=(1, 2))


def expected_code(steps, episode_index):
    return torch.tensor(frame_code(np.asarray(steps), episode_index) / 127.5 - 1, dtype=torch.float32)


def check_alignment(ds, item, episode_index):
    cfg = ds.cfg
    F, stride, start = cfg.data.frames, cfg.data.frame_stride, item["start"]
    kept = start + stride * np.arange(F)
    norm = Normalizer(ds.stats)
    acts = norm.denormalize("action", item["actions"])
    states = norm.denormalize("state", item["states"])
    assert item["actions"].shape == ((F - 1) * stride, 7) == (cfg.data.actions_per_window, 7)
    assert item["states"].shape == (F, 7)
    # actions[t, 0] = t and states[t, 0] = t in datagen: every action of the window, states at the kept frames
    torch.testing.assert_close(acts[:, 0], torch.arange(start, start + (F - 1) * stride, dtype=torch.float32),
                               atol=1e-4, rtol=0)
    torch.testing.assert_close(states[:, 0], torch.tensor(kept, dtype=torch.float32), atol=1e-4, rtol=0)
    torch.testing.assert_close(item["state0"], item["states"][0])
    for dom in ("sim", "real"):
        assert item[dom].shape == (3, F, 32, 48) and item[dom].dtype == torch.float32
        assert item[dom].min() >= -1 and item[dom].max() <= 1
        torch.testing.assert_close(decoded_code(item[dom]), expected_code(kept, episode_index), atol=CODE_TOL, rtol=0)


def test_bridge_window_has_21_frames_and_20_actions(small):
    ds = PairedWindowDataset(bridge_cfg(), small)
    assert ds.window_steps == 21 and len(ds) == 2 * 30
    for i in (0, 31, 59):
        item = ds[i]
        check_alignment(ds, item, episode_index=int(item["episode_id"][-1]))
        assert item["actions"].shape == (20, 7) and item["sim"].shape[1] == 21


def test_interndata_a1_window_has_33_frames_and_128_actions(tmp_path):
    root = make_dataset(tmp_path / "long", num_train=1, num_val=0, num_pool=0, length=140)
    ds = PairedWindowDataset(a1_cfg("--data.windows_per_episode=3"), root)
    assert ds.window_steps == 129 and len(ds) == 3
    item = ds[0]
    check_alignment(ds, item, episode_index=0)
    assert item["sim"].shape[1] == 33 and item["actions"].shape == (128, 7)
    # 4 actions per frame transition: transition k (frame k -> k+1) owns steps start+4k .. start+4k+3
    acts = Normalizer(ds.stats).denormalize("action", item["actions"])[:, 0].reshape(32, 4)
    frames = Normalizer(ds.stats).denormalize("state", item["states"])[:, 0]
    torch.testing.assert_close(acts[:, 0], frames[:-1], atol=1e-4, rtol=0)
    torch.testing.assert_close(acts[:, 3] + 1, frames[1:], atol=1e-4, rtol=0)


def test_sim_and_real_share_actions_and_frames(small):
    ds = PairedWindowDataset(demo_cfg(), small)
    item = ds[3]
    assert set(item) >= {"sim", "real", "actions", "states", "state0", "text", "text_mask", "arm_mask",
                         "has_arm_mask", "episode_id", "start"}
    torch.testing.assert_close(decoded_code(item["sim"]), decoded_code(item["real"]), atol=CODE_TOL, rtol=0)
    assert (item["sim"][2] - item["real"][2]).abs().min() > 0.5  # the blue channel tells the domains apart
    # arm masks: the stored moving square at the kept frames
    e = int(item["episode_id"][-1])
    want = square_masks(25, 32, 48, e)[item["start"]:item["start"] + 9]
    assert item["has_arm_mask"] and torch.equal(item["arm_mask"], torch.from_numpy(want))


def test_stage1_uses_sim_pool_and_stage2_excludes_it(small):
    sim_ds = PairedWindowDataset(demo_cfg(), small, splits=("train", "sim_pool"), domains=("sim",))
    assert {e.info.episode_id for e in sim_ds.episodes} == {"train_000", "train_001", "pool_000", "pool_001"}
    item = sim_ds[len(sim_ds) - 1]
    assert "real" not in item and item["episode_id"] == "pool_001" and not item["has_arm_mask"]
    assert not item["arm_mask"].any()
    paired_ds = PairedWindowDataset(demo_cfg(), small, splits=("train", "sim_pool"))
    assert [e.info.episode_id for e in paired_ds.episodes] == ["train_000", "train_001"]
    assert paired_ds.excluded == ["pool_000", "pool_001"]


def test_train_episode_without_real_is_an_error(tmp_path):
    root = make_dataset(tmp_path / "ds", num_train=2, num_val=0, num_pool=0, length=12)
    corrupt(root, "train_001", "unpaired_episode")
    with pytest.raises(DataError, match="train_001") as e:
        PairedWindowDataset(demo_cfg(), root)
    assert e.value.kind == "unpaired_episode"
    assert len(PairedWindowDataset(demo_cfg(), root, domains=("sim",))) == 2 * 8  # fine for stage 1


def test_windows_reproducible_per_seed_and_epoch(small):
    a = PairedWindowDataset(demo_cfg(), small, epoch=2)
    b = PairedWindowDataset(demo_cfg(), small)
    assert a.windows != b.windows
    b.set_epoch(2)
    assert a.windows == b.windows and len(a) == 2 * 8
    assert a[5]["start"] == b[5]["start"] and torch.equal(a[5]["sim"], b[5]["sim"])
    starts = [s for _, s in a.windows]
    assert min(starts) >= 0 and max(starts) <= 25 - 9 and len(set(starts)) > 3
    c = PairedWindowDataset(demo_cfg("--train.seed=7"), small, epoch=2)
    assert c.windows != a.windows


def test_fixed_window_is_the_centre_every_epoch(small):
    ds = PairedWindowDataset(demo_cfg("--data.fixed_window=true"), small)
    assert ds.windows == [(0, 8), (1, 8)]  # (25 - 9) // 2
    ds.set_epoch(5)
    assert ds.windows == [(0, 8), (1, 8)] and ds[1]["start"] == 8


def test_short_episodes_are_dropped_and_all_short_is_a_config_error(tmp_path):
    root = make_dataset(tmp_path / "ds", num_train=3, num_val=0, num_pool=0, length=(25, 6, 12))
    ds = PairedWindowDataset(demo_cfg(), root)
    assert ds.dropped == [("train_001", 6)] and len(ds.episodes) == 2
    with pytest.raises(ConfigError, match=r"data\.frames.*data\.frame_stride.*25 frames"):
        PairedWindowDataset(bridge_cfg("--data.frame_stride=2"), root)


def test_skip_bad_skips_and_counts(tmp_path):
    root = make_dataset(tmp_path / "ds", num_train=3, num_val=0, num_pool=0, length=12)
    corrupt(root, "train_001", "bad_action_shape")
    with pytest.raises(DataError, match="train_001.*actions") as e:
        PairedWindowDataset(demo_cfg(), root)
    assert e.value.kind == "bad_action_shape"
    ds = PairedWindowDataset(demo_cfg("--data.skip_bad=true"), root)
    assert [s[0] for s in ds.skipped] == ["train_001"] and len(ds.episodes) == 2


def test_stats_argument_overrides_the_file(small, tmp_path):
    stats = read_stats(small)
    wide = {k: {"min": [v - 10 for v in stats[k]["min"]], "max": [v + 10 for v in stats[k]["max"]]}
            for k in ("action", "state")}
    ds = PairedWindowDataset(demo_cfg(), small, stats=wide)
    assert ds.stats is wide and ds[0]["actions"].abs().max() < 0.75


def test_text_is_padded_with_a_mask(small):
    cfg = demo_cfg()
    item = PairedWindowDataset(cfg, small)[0]
    n = int(item["text_mask"].sum())
    assert item["text"].shape == (cfg.data.text_max_tokens, 64) and 3 <= n <= 8
    assert item["text"][:n].abs().sum() > 0 and item["text"][n:].abs().sum() == 0


def test_decoded_episode_cache(small, monkeypatch):
    calls = []
    real_read = paired.read_video
    monkeypatch.setattr(paired, "read_video", lambda p, e=None: calls.append(p) or real_read(p, e))
    ds = PairedWindowDataset(demo_cfg(), small, cache_episodes=1)
    for i in range(8):  # the 8 windows of episode 0
        ds[i]
    assert len(calls) == 2  # sim + real, decoded once
    ds[8], ds[0]  # episode 1 evicts episode 0
    assert len(calls) == 6


def test_read_video_equals_pyav_per_frame_conversion(small):
    """read_video decodes on one thread with one colour converter for the whole video (5x faster at 32x48): the
    same pixels as PyAV's own per-frame ``to_ndarray(format="rgb24")``."""
    import av

    from simforcing.data.format import read_video
    for dom in ("sim", "real"):
        path = small / "episodes" / "train_000" / f"{dom}.mp4"
        with av.open(str(path)) as container:
            plain = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
        assert np.array_equal(read_video(path), plain) and plain.shape == (25, 32, 48, 3)


def test_dataloader_workers_match_the_main_process(small):
    ds = PairedWindowDataset(demo_cfg(), small)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, shuffle=False)
    batch = next(iter(loader))
    assert batch["sim"].shape == (4, 3, 9, 32, 48) and batch["episode_id"] == ["train_000"] * 4
    for j in range(4):
        torch.testing.assert_close(batch["real"][j], ds[j]["real"])
        assert batch["start"][j] == ds[j]["start"]


def test_side_by_side_layout_gives_the_same_items(tmp_path):
    sep = make_dataset(tmp_path / "sep", num_train=1, num_val=0, num_pool=0, length=12)
    sbs = make_dataset(tmp_path / "sbs", num_train=1, num_val=0, num_pool=0, length=12, layout="side_by_side")
    a, b = PairedWindowDataset(demo_cfg(), sep)[2], PairedWindowDataset(demo_cfg(), sbs)[2]
    for dom in ("sim", "real"):
        torch.testing.assert_close(decoded_code(a[dom]), decoded_code(b[dom]), atol=CODE_TOL, rtol=0)
    torch.testing.assert_close(a["actions"], b["actions"])


def test_resize_center_crop_geometry():
    # 40x120 (wide) -> cover 32x48: scale 0.8 -> 32x96, crop the middle 48 columns
    x = torch.arange(120, dtype=torch.float32).repeat(1, 1, 40, 1)  # column index as value
    y = resize_center_crop(x, 32, 48)
    assert y.shape == (1, 1, 32, 48)
    assert abs(float(y[0, 0, 0, 24]) - 60) < 2  # the centre column stays in the centre
    # upscale: 16x24 -> 32x48 (same aspect, no crop), nearest keeps binary masks binary
    m = (torch.rand(1, 1, 16, 24) > 0.5).float()
    up = resize_center_crop(m, 32, 48, nearest=True)
    assert torch.equal(up[0, 0, ::2, ::2], m[0, 0]) and set(up.unique().tolist()) <= {0.0, 1.0}


def test_frames_to_target_downscales_uniform_colour():
    frames = np.full((3, 64, 96, 3), (10, 200, 90), np.uint8)
    out = frames_to_target(frames, 32, 48)
    assert out.shape == (3, 3, 32, 48) and out.dtype == torch.uint8
    assert out[:, 0].flatten(1).unique(dim=1).tolist() == [[10], [200], [90]]


def test_degenerate_resolution_is_rejected(tmp_path):
    root = make_dataset(tmp_path / "ds", num_train=1, num_val=0, num_pool=0, length=12)
    corrupt(root, "train_000", "bad_resolution")
    with pytest.raises(DataError, match="keep 12%") as e:
        PairedWindowDataset(demo_cfg(), root)
    assert e.value.kind == "bad_resolution"
