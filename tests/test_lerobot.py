"""LeRobot v3.0 import: two tiny datasets written in exactly the v3.0 layout (AV1, packed files) round-trip."""

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from datagen import write_text_cache

from simforcing.cli import main
from simforcing.config import load_config
from simforcing.data.check import check_dataset
from simforcing.data.format import DataError, read_episodes, read_lowdim, read_splits, read_stats, read_video
from simforcing.data.lerobot import LeRobotV3, import_lerobot
from simforcing.data.paired import PairedWindowDataset

os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1: errors only
CAM = "observation.images.top"
FPS = 10
EPISODES_PER_FILE = 2  # episodes 0-1 share file-000, episode 2+ go to file-001: exercises from/to timestamps
TASKS = ["stack the cups", "wipe the table"]


def frame_colour(episode, t, real):
    return np.array([10 + 8 * t, 30 + 50 * episode, 200 if real else 90], np.int64)


def episode_arrays(episode, length, real):
    frames = np.broadcast_to(np.stack([frame_colour(episode, t, real) for t in range(length)])[:, None, None],
                             (length, 32, 48, 3)).astype(np.uint8)
    rng = np.random.default_rng([episode, int(real)])
    actions = rng.normal(size=(length, 7)).astype(np.float32)
    actions[:, 0] = 100 * episode + np.arange(length)
    states = rng.normal(size=(length, 7)).astype(np.float32)
    return frames, actions, states


def encode_av1(path, frames):
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", format="mp4") as c:
        s = c.add_stream("libsvtav1", rate=FPS)  # the real LeRobot format; tiny 32x48 frames encode fine
        s.width, s.height, s.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        s.options = {"crf": "10", "preset": "12"}
        for fr in frames:
            for p in s.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(fr), format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)


def png_bytes(frame):
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(frame)).save(buf, format="PNG")
    return buf.getvalue()


def write_lerobot_v3(root, lengths, real, images=False):
    """A LeRobot v3.0 folder: packed data parquet + concatenated AV1 mp4 per file, episode/task metadata.

    ``images``: an image-only dataset (LeRobot's ``use_videos=False``): the camera is an "image" feature whose frames
    are PNG bytes in the data parquet ({"bytes", "path"} per row); no videos/, no video_path."""
    info = {"codebase_version": "v3.0", "fps": FPS, "robot_type": "test", "total_episodes": len(lengths),
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": None if images else "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
            "features": {CAM: {"dtype": "image" if images else "video", "shape": [32, 48, 3],
                               "names": ["height", "width", "channels"]},
                         "action": {"dtype": "float32", "shape": [7]},
                         "observation.state": {"dtype": "float32", "shape": [7]},
                         "timestamp": {"dtype": "float32", "shape": [1]},
                         "frame_index": {"dtype": "int64", "shape": [1]},
                         "episode_index": {"dtype": "int64", "shape": [1]},
                         "index": {"dtype": "int64", "shape": [1]},
                         "task_index": {"dtype": "int64", "shape": [1]}}}
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text(json.dumps(info))
    pq.write_table(pa.table({"task_index": pa.array([0, 1], pa.int64()), "task": TASKS}),
                   root / "meta" / "tasks.parquet")
    ep_rows, index = [], 0
    for file_index in range(0, len(lengths), EPISODES_PER_FILE):
        eps = range(file_index, min(file_index + EPISODES_PER_FILE, len(lengths)))
        cols = {k: [] for k in ("index", "episode_index", "frame_index", "timestamp", "task_index", "action",
                                "observation.state")}
        if images:
            cols[CAM] = []
        video, t0 = [], 0.0
        for e in eps:
            frames, actions, states = episode_arrays(e, lengths[e], real)
            video.append(frames)
            T = lengths[e]
            cols["index"] += list(range(index, index + T))
            cols["episode_index"] += [e] * T
            cols["frame_index"] += list(range(T))
            cols["timestamp"] += [t / FPS for t in range(T)]
            cols["task_index"] += [e % 2] * T
            cols["action"] += list(actions)
            cols["observation.state"] += list(states)
            if images:
                cols[CAM] += [{"bytes": png_bytes(f), "path": f"frame_{e}_{t}.png"} for t, f in enumerate(frames)]
            vk = f"videos/{CAM}/"
            row = {"episode_index": e, "length": T, "tasks": [TASKS[e % 2]], "data/chunk_index": 0,
                   "data/file_index": file_index // EPISODES_PER_FILE, "dataset_from_index": index,
                   "dataset_to_index": index + T, "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0}
            if not images:
                row.update({vk + "chunk_index": 0, vk + "file_index": file_index // EPISODES_PER_FILE,
                            vk + "from_timestamp": t0, vk + "to_timestamp": t0 + T / FPS})
            ep_rows.append(row)
            index, t0 = index + T, t0 + T / FPS
        name = f"chunk-000/file-{file_index // EPISODES_PER_FILE:03d}"
        table = pa.table({k: (pa.array([np.asarray(v, np.float32) for v in cols[k]], pa.list_(pa.float32(), 7))
                              if k in ("action", "observation.state") else pa.array(cols[k])) for k in cols})
        (root / "data" / "chunk-000").mkdir(parents=True, exist_ok=True)
        pq.write_table(table, root / "data" / f"{name}.parquet")
        if not images:
            encode_av1(root / "videos" / CAM / f"{name}.mp4", np.concatenate(video))
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(ep_rows), root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    return root


SIM_LENGTHS = [12, 10, 14, 11]  # episode 3 exists only in simulation -> sim_pool


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    base = tmp_path_factory.mktemp("lerobot")
    sim = write_lerobot_v3(base / "sim", SIM_LENGTHS, real=False)
    real = write_lerobot_v3(base / "real", SIM_LENGTHS[:3], real=True)
    return sim, real


@pytest.fixture(scope="module")
def imported(sources, tmp_path_factory):
    out = tmp_path_factory.mktemp("imported") / "ds"
    summary = import_lerobot(*sources, out, val_fraction=0.34, progress=False)
    return out, summary


def test_reader_selects_each_episode_by_timestamp(sources):
    real = LeRobotV3(sources[1])
    assert real.camera == CAM and sorted(real.episodes) == [0, 1, 2]
    ep = real.episodes[1]  # second episode of file-000: from_timestamp 1.2 s
    assert ep.from_ts == pytest.approx(1.2) and ep.task == TASKS[1]
    frames = real.frames(ep)
    assert frames.shape == (10, 32, 48, 3)
    want = np.stack([frame_colour(1, t, True) for t in range(10)])
    assert np.abs(frames.mean(axis=(1, 2)) - want).max() < 4


def test_import_round_trip(sources, imported):
    out, summary = imported
    assert (summary["train"], summary["val"], summary["sim_pool"]) == (2, 1, 1)
    eps, splits = read_episodes(out), read_splits(out)
    assert splits["sim_pool"] == ["ep000003"] and not eps["ep000003"].has_real
    assert sorted(splits["train"] + splits["val"]) == ["ep000000", "ep000001", "ep000002"]
    for e, T in enumerate(SIM_LENGTHS[:3]):
        eid = f"ep{e:06d}"
        assert eps[eid].length == T and eps[eid].instruction == TASKS[e % 2]
        for dom, is_real in (("sim", False), ("real", True)):
            frames = read_video(out / "episodes" / eid / f"{dom}.mp4")
            want = np.stack([frame_colour(e, t, is_real) for t in range(T)])
            assert frames.shape == (T, 32, 48, 3)
            assert np.abs(frames.mean(axis=(1, 2)) - want).max() < 5, (eid, dom)
        actions, states = read_lowdim(out, eid)
        _, real_actions, real_states = episode_arrays(e, T, real=True)
        np.testing.assert_array_equal(actions, real_actions[:T - 1])  # T per-frame actions -> T-1 transitions
        np.testing.assert_array_equal(states, real_states)
    assert read_stats(out)["num_episodes"] == 3  # train + sim_pool


def test_imported_dataset_checks_and_loads(imported):
    out, _ = imported
    cfg = load_config("demo").validate()
    write_text_cache(out, TASKS, cfg.model.text_dim, cfg.data.text_max_tokens)
    assert check_dataset(out, cfg).ok
    ds = PairedWindowDataset(cfg, out, splits=("train", "val"))
    item = ds[0]
    assert item["sim"].shape == (3, 9, 32, 48) and torch.isfinite(item["actions"]).all()


def test_import_command_and_errors(sources, tmp_path, capsys):
    sim, real = sources
    out = tmp_path / "cli"
    assert main(["data", "import-lerobot", "--sim", str(sim), "--real", str(real), "--out", str(out),
                 "--val-fraction", "0", "--height", "16", "--width", "32"]) == 0
    assert "3 train, 0 val, 1 sim-only" in capsys.readouterr().out
    assert read_video(out / "episodes" / "ep000000" / "real.mp4").shape == (12, 16, 32, 3)
    with pytest.raises(DataError, match="wrist") as e:
        LeRobotV3(sim, camera="observation.images.wrist")
    assert e.value.kind == "missing_field"
    info = json.loads((sim / "meta" / "info.json").read_text())
    old = tmp_path / "old"
    (old / "meta").mkdir(parents=True)
    (old / "meta" / "info.json").write_text(json.dumps({**info, "codebase_version": "v2.1"}))
    assert main(["data", "import-lerobot", "--sim", str(old), "--real", str(real), "--out", str(tmp_path / "x")]) == 1
    assert "codebase_version" in capsys.readouterr().err


WRIST = "observation.images.wrist"


def with_wrist_camera(src: Path, real: Path) -> Path:
    """A copy of the real LeRobot source ``src`` at ``real`` whose camera is also listed as a wrist camera."""
    import shutil

    shutil.copytree(src, real)
    wrist = WRIST
    info = json.loads((real / "meta" / "info.json").read_text())
    info["features"][wrist] = dict(info["features"][CAM])
    (real / "meta" / "info.json").write_text(json.dumps(info))
    shutil.copytree(real / "videos" / CAM, real / "videos" / wrist)
    ep_file = real / "meta" / "episodes" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(ep_file)
    for col in list(table.column_names):
        if col.startswith(f"videos/{CAM}/"):
            table = table.append_column(col.replace(CAM, wrist), table.column(col))
    pq.write_table(table, ep_file)
    return real


def test_real_only_two_camera_import_is_a_policy_dataset(sources, tmp_path, capsys):
    """`data import-lerobot --real DIR --wrist-camera KEY` (LIBERO-style): real only, two cameras side by side."""
    from simforcing.config import load_config as _load
    from simforcing.policy.data import PolicyWindowDataset, read_policy_info

    real, wrist = with_wrist_camera(sources[1], tmp_path / "real2"), WRIST
    out = tmp_path / "policy"
    assert main(["data", "import-lerobot", "--real", str(real), "--camera", CAM, "--wrist-camera", wrist,
                 "--out", str(out), "--val-fraction", "0"]) == 0
    assert "policy dataset" in capsys.readouterr().out
    assert read_policy_info(out)["cameras"] == [CAM, wrist]
    v = read_video(out / "episodes" / "ep000000" / "obs.mp4")
    assert v.shape == (12, 32, 96, 3)
    assert np.abs(v[:, :, :48].astype(int) - v[:, :, 48:].astype(int)).mean() < 2  # the same frames, twice
    write_text_cache(out, TASKS, _load("demo").model.text_dim, _load("demo").data.text_max_tokens)
    cfg = _load("demo", {"data.width": "96", "data.frames": "5"}).validate()
    item = PolicyWindowDataset(cfg, out)[0]
    assert item["obs"].shape == (3, 5, 32, 96) and item["actions"].shape == (4, 7)
    assert main(["data", "import-lerobot", "--real", str(real), "--out", str(tmp_path / "x")]) == 2


def test_several_cameras_import_as_the_views_of_one_dataset(sources, tmp_path):
    """`data import-lerobot --sim-camera A B --real-camera A B`: each camera pair one view (issue 67), the first the
    dataset's first view under the one-view file names; the keys' counts, a key given twice and a view name that is
    no plain name are refused by name before anything is written."""
    sim = with_wrist_camera(sources[0], tmp_path / "sim2")
    real = with_wrist_camera(sources[1], tmp_path / "real2")
    out = tmp_path / "views"
    assert main(["data", "import-lerobot", "--sim", str(sim), "--real", str(real), "--out", str(out),
                 "--sim-camera", CAM, WRIST, "--real-camera", CAM, WRIST, "--val-fraction", "0"]) == 0
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["views"] == ["top", "wrist"] and info["lerobot"]["cameras"]["wrist"]["real"] == WRIST
    ep = out / "episodes" / "ep000000"
    assert read_video(ep / "real.mp4").shape == read_video(ep / "real_wrist.mp4").shape == (12, 32, 48, 3)
    assert read_video(ep / "sim_wrist.mp4").shape == (12, 32, 48, 3)
    cfg = load_config("demo", ["--data.views=top,wrist"]).validate()
    write_text_cache(out, TASKS, cfg.model.text_dim, cfg.data.text_max_tokens)
    assert check_dataset(out, cfg).ok
    assert PairedWindowDataset(cfg, out)[0]["real"].shape == (3, 9, 32, 96)
    for flags in (["--sim-camera", CAM, "--real-camera", CAM, WRIST],
                  ["--sim-camera", CAM, CAM, "--real-camera", CAM, WRIST],
                  ["--sim-camera", CAM, WRIST, "--real-camera", CAM, WRIST, "--views", "a/b", "c"]):
        assert main(["data", "import-lerobot", "--sim", str(sim), "--real", str(real), "--out",
                     str(tmp_path / "x"), *flags]) == 2, flags
    assert not (tmp_path / "x").exists()
