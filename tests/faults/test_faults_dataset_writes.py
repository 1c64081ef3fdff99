"""Datasets appear whole or not at all: `data import-lerobot` and `data synth` write a temporary sibling folder that
is renamed into place; an existing dataset is refused unless --overwrite and survives a failed re-import; per-episode
problems can be skipped with a count; image-only LeRobot datasets import; the source paths are stored resolved."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from faultkit import digest

from simforcing.cli import main
from simforcing.data.format import read_episodes, read_splits, read_video

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def lerobot(tmp_path_factory):
    """(sim, real) LeRobot v3.0 sources: 3 paired episodes of 6 frames (files 000: episodes 0-1, 001: episode 2)."""
    from test_lerobot import write_lerobot_v3

    base = tmp_path_factory.mktemp("lerobot_src")
    return write_lerobot_v3(base / "sim", [6, 6, 6], real=False), write_lerobot_v3(base / "real", [6, 6, 6], real=True)


def _import(sim: Path, real: Path, out: Path, *extra: str) -> list[str]:
    return ["data", "import-lerobot", "--sim", str(sim), "--real", str(real), "--out", str(out),
            "--val-fraction", "0", *extra]


def leftovers(out: Path) -> list[str]:
    """Temporary siblings of ``out`` (a staged folder that was not cleaned up)."""
    return sorted(p.name for p in out.parent.glob(f".{out.name}.*"))


def test_import_refuses_an_existing_dataset_unless_overwrite(lerobot, tmp_path, capsys):
    out = tmp_path / "ds"
    assert main(_import(*lerobot, out)) == 0
    before = digest(out)
    capsys.readouterr()
    assert main(_import(*lerobot, out)) == 2
    err = capsys.readouterr().err
    assert "already holds a dataset" in err and "--overwrite" in err, err
    assert digest(out) == before
    assert main(_import(*lerobot, out, "--overwrite")) == 0
    assert sorted(read_splits(out)["train"]) == ["ep000000", "ep000001", "ep000002"] and leftovers(out) == []


def test_a_failed_import_leaves_nothing_and_a_failed_reimport_leaves_the_old_dataset(lerobot, tmp_path, capsys):
    sim, real = lerobot
    broken = Path(shutil.copytree(real, tmp_path / "real_broken"))
    video = next((broken / "videos").rglob("file-001.mp4"))  # episode 2's video: episodes 0 and 1 import first
    video.write_bytes(video.read_bytes()[:300])
    fresh = tmp_path / "fresh"
    assert main(_import(sim, broken, fresh)) == 1
    err = capsys.readouterr().err
    assert "episode 2" in err and "file-001.mp4" in err, err
    assert not fresh.exists() and leftovers(fresh) == []  # nothing half-written

    out = tmp_path / "ds"
    assert main(_import(sim, real, out)) == 0
    before = digest(out)
    assert main(_import(sim, broken, out, "--overwrite")) == 1
    assert digest(out) == before and leftovers(out) == []  # the previous dataset, byte for byte


def test_disk_full_during_an_import_leaves_nothing(lerobot, tmp_path, capsys, monkeypatch):
    real_replace = os.replace

    def replace(src, dst, *a, **k):
        if Path(dst).name == "real.mp4" and "ep000001" in str(dst):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return real_replace(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", replace)
    out = tmp_path / "ds"
    assert main(_import(*lerobot, out)) == 1
    err = capsys.readouterr().err
    assert "write error" in err and "real.mp4" in err and "No space left on device" in err, err
    assert not out.exists() and leftovers(out) == []


def test_length_mismatch_is_skipped_and_counted_with_skip_bad(tmp_path, capsys):
    from test_lerobot import write_lerobot_v3

    sim = write_lerobot_v3(tmp_path / "sim", [6, 7, 6], real=False)  # episode 1: 7 sim frames, 6 real
    real = write_lerobot_v3(tmp_path / "real", [6, 6, 6], real=True)
    out = tmp_path / "ds"
    assert main(_import(sim, real, out)) == 1
    err = capsys.readouterr().err
    assert "[frame_count_mismatch]" in err and "ep000001" in err, err
    assert not out.exists()
    assert main(_import(sim, real, out, "--skip-bad")) == 0
    text = capsys.readouterr().out
    assert "1 bad episodes skipped" in text and "ep000001" in text, text
    assert sorted(read_episodes(out)) == ["ep000000", "ep000002"]
    assert all((out / "episodes" / e / "lowdim.npz").exists() for e in read_episodes(out))
    info = json.loads((out / "meta/info.json").read_text())
    assert [s["episode"] for s in info["lerobot"]["skipped"]] == ["ep000001"]


def test_image_only_lerobot_datasets_import(tmp_path, capsys):
    from test_lerobot import frame_colour, write_lerobot_v3

    sim = write_lerobot_v3(tmp_path / "sim", [6, 5], real=False, images=True)  # frames in the parquet, no videos
    real = write_lerobot_v3(tmp_path / "real", [6, 5], real=True, images=True)
    assert not (sim / "videos").exists()
    out = tmp_path / "ds"
    assert main(_import(sim, real, out)) == 0, capsys.readouterr().err
    for e, T in enumerate([6, 5]):
        for dom, is_real in (("sim", False), ("real", True)):
            frames = read_video(out / "episodes" / f"ep{e:06d}" / f"{dom}.mp4")
            want = np.stack([frame_colour(e, t, is_real) for t in range(T)])
            assert frames.shape == (T, 32, 48, 3) and np.abs(frames.mean(axis=(1, 2)) - want).max() < 5


def test_source_paths_are_recorded_resolved(lerobot, tmp_path, monkeypatch):
    sim, real = lerobot
    monkeypatch.chdir(sim.parent)
    out = tmp_path / "ds"
    assert main(_import(Path("sim"), Path("./real/../real"), out)) == 0
    rec = json.loads((out / "meta/info.json").read_text())["lerobot"]
    assert rec["sim"] == str(sim.resolve()) and rec["real"] == str(real.resolve())


# ----------------------------------------------------------------------------------------------------------------------
# data synth
# ----------------------------------------------------------------------------------------------------------------------

SYNTH = ["--num-train", "1", "--num-val", "0", "--num-sim-pool", "1", "--length", "5", "--workers", "1",
         "--no-finalize", "--no-progress"]


def crash_on_the_second_call(monkeypatch, module, name: str) -> list:
    """``module.name`` raises RuntimeError("... crashed") on its second call; returns the call list (clear it to arm
    the crash again)."""
    original, calls = getattr(module, name), []

    def crash(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError(f"{name} crashed")
        return original(*a, **k)

    monkeypatch.setattr(module, name, crash)
    return calls


def test_a_failed_synth_leaves_nothing_and_the_dataset_it_would_replace(tmp_path, capsys, monkeypatch):
    import simforcing.data.synthetic.generate as generate

    out = tmp_path / "synth"
    assert main(["data", "synth", str(out), *SYNTH]) == 0
    before = digest(out)
    assert main(["data", "synth", str(out), *SYNTH]) == 2
    assert "already holds a dataset" in capsys.readouterr().err and digest(out) == before

    calls = crash_on_the_second_call(monkeypatch, generate, "simulate_episode")
    with pytest.raises(RuntimeError, match="crashed"):
        main(["data", "synth", str(out), *SYNTH, "--overwrite", "--seed", "1"])
    assert digest(out) == before and leftovers(out) == []  # the old dataset, whole
    calls.clear()
    fresh = tmp_path / "fresh"
    with pytest.raises(RuntimeError, match="crashed"):
        main(["data", "synth", str(fresh), *SYNTH])
    assert not fresh.exists() and leftovers(fresh) == []  # no half-written dataset


# ----------------------------------------------------------------------------------------------------------------------
# policy datasets: data synth-policy, data import-lerobot --wrist-camera
# ----------------------------------------------------------------------------------------------------------------------

SYNTH_POLICY = ["--per-task", "1", "--num-val", "0", "--no-progress"]


def test_a_policy_dataset_appears_whole_or_not_at_all(tmp_path, capsys, monkeypatch):
    """synth-policy: an existing dataset is refused without --overwrite (before any simulation); a crash while
    writing leaves nothing new, and an --overwrite that crashes leaves the previous dataset byte for byte."""
    import simforcing.policy.synth_data as synth_data

    out = tmp_path / "pol"
    assert main(["data", "synth-policy", "--out", str(out), *SYNTH_POLICY]) == 0
    before = digest(out)
    assert main(["data", "synth-policy", "--out", str(out), *SYNTH_POLICY]) == 2
    assert "already holds a dataset" in capsys.readouterr().err and digest(out) == before
    calls = crash_on_the_second_call(monkeypatch, synth_data, "write_policy_episode")
    with pytest.raises(RuntimeError, match="crashed"):
        main(["data", "synth-policy", "--out", str(out), *SYNTH_POLICY, "--overwrite", "--seed", "5"])
    assert digest(out) == before and leftovers(out) == []
    calls.clear()
    fresh = tmp_path / "fresh"
    with pytest.raises(RuntimeError, match="crashed"):
        main(["data", "synth-policy", "--out", str(fresh), *SYNTH_POLICY])
    assert not fresh.exists() and leftovers(fresh) == []


def test_a_two_camera_import_refuses_an_existing_dataset_and_survives_a_failed_reimport(lerobot, tmp_path, capsys,
                                                                                      monkeypatch):
    import simforcing.policy.data as policy_data
    from test_lerobot import CAM, WRIST, with_wrist_camera

    real = with_wrist_camera(lerobot[1], tmp_path / "real")
    words = ["data", "import-lerobot", "--real", str(real), "--camera", CAM, "--wrist-camera", WRIST,
             "--val-fraction", "0", "--no-progress", "--out"]
    out = tmp_path / "pol"
    assert main([*words, str(out)]) == 0
    before = digest(out)
    assert main([*words, str(out)]) == 2
    assert "already holds a dataset" in capsys.readouterr().err and digest(out) == before
    crash_on_the_second_call(monkeypatch, policy_data, "write_policy_episode")
    with pytest.raises(RuntimeError, match="crashed"):
        main([*words, str(out), "--overwrite"])
    assert digest(out) == before and leftovers(out) == []
