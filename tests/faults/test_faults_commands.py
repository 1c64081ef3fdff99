"""Every user-facing command turns an expected failure into one named message and an exit code, never a traceback:
a bad split or step, an unreadable checkpoint, malformed media (truncated AV1, a file without a decodable video
stream), a LeRobot info.json with missing or ill-typed keys, and a full disk during any write (metrics, TensorBoard,
status, the loss plot, videos, evaluation results) — with the operating system's cause shown and status.json never
left saying "running" for a process that has ended."""

from __future__ import annotations

import json
import shutil
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest
from faultkit import ckpt, copy_run, disk_full, pretrain_args, status, steps

from simforcing.cli import main

pytestmark = pytest.mark.faults


def _named(words: list[str], capsys, code: int | tuple = 1, *needles: str) -> str:
    """The command returns ``code`` (it must not raise) and prints one named message holding ``needles``."""
    got = main([str(w) for w in words])
    err = capsys.readouterr().err
    codes = code if isinstance(code, tuple) else (code,)
    assert got in codes, f"{words}: exit {got}\n{err}"
    assert "Traceback" not in err and all(n in err for n in needles), f"{words}:\n{err}"
    assert any(kind in err for kind in ("config error", "data error", "checkpoint error", "write error",
                                        "I/O error")), err
    return err


# ----------------------------------------------------------------------------------------------------------------------
# Splits, steps, checkpoints
# ----------------------------------------------------------------------------------------------------------------------


def test_a_bad_split_or_step_is_named_by_every_command(ref, tiny, tmp_path, capsys):
    root, vae = tiny
    o = tmp_path
    few = ["--num-samples", "1"]
    for words in (["generate", "--ckpt", ref, "--data", root, "--split", "nope", "--out", o / "g", *few],
                  ["evaluate", "--ckpt", ref, "--data", root, "--split", "nope", "--out", o / "e", *few],
                  ["sweep", "steps", "--ckpt", ref, "--data", root, "--split", "nope", "--n-sim", "1", "--n-real",
                   "1", "--w", "0", "--out", o / "s", *few],
                  ["sweep", "cfg", "--ckpts", ref, "--data", root, "--split", "nope", "--w", "0", "--out", o / "c",
                   *few],
                  ["evaluate", "--baseline", "copy-first", "--preset", "demo", "--data", root, "--split", "nope",
                   "--out", o / "b", *few],
                  ["data", "stats", root, "--splits", "nope"],
                  ["data", "encode", "--data", root, "--out", o / "cache", "--splits", "nope",
                   f"--model.vae.path={vae}", "--no-progress"]):
        _named(words, capsys, 1, "[bad_meta]", "split 'nope'")
    for step in ("99", "-1"):
        for words in (["generate", "--ckpt", ref, "--data", root, "--out", o / "g", "--step", step, *few],
                      ["evaluate", "--ckpt", ref, "--data", root, "--out", o / "e", "--step", step, *few]):
            _named(words, capsys, 1, "checkpoint error", f"no checkpoint for step {step}", "available steps: [4, 6]")


def test_an_unreadable_checkpoint_is_named_by_every_command(ref, tiny, tmp_path, capsys):
    run = copy_run(ref, tmp_path / "run")
    for s in (4, 6):
        (ckpt(run, s) / "model.safetensors").write_bytes(b"\0" * 100)
    root = tiny[0]
    few = ["--num-samples", "1"]
    for words in (["generate", "--ckpt", run, "--data", root, "--out", tmp_path / "g", *few],
                  ["evaluate", "--ckpt", run, "--data", root, "--out", tmp_path / "e", *few],
                  ["evaluate", "--ckpt", run, "--step", "6", "--data", root, "--out", tmp_path / "e", *few],
                  ["sweep", "steps", "--ckpt", run, "--data", root, "--n-sim", "1", "--n-real", "1", "--w", "0",
                   "--out", tmp_path / "s", *few],
                  ["sweep", "cfg", "--ckpts", run, "--data", root, "--w", "0", "--out", tmp_path / "c", *few]):
        explicit = "--step" in words  # an explicit step never falls back; the default warns about each damaged one
        with nullcontext() if explicit else pytest.warns(UserWarning, match="damaged"):
            _named(words, capsys, 1, "checkpoint error", "model.safetensors" if explicit else "no valid checkpoint")


# ----------------------------------------------------------------------------------------------------------------------
# Malformed media
# ----------------------------------------------------------------------------------------------------------------------


def _av1(path: Path, n: int = 13) -> None:
    """An AV1 MP4 with its index first (faststart), so a truncation cuts frames, not the header."""
    import av
    from datagen import make_frames

    if "libsvtav1" not in av.codecs_available:
        pytest.skip("no AV1 encoder (libsvtav1) in this PyAV build")
    with av.open(str(path), "w", format="mp4", options={"movflags": "faststart"}) as c:
        s = c.add_stream("libsvtav1", rate=10)
        s.width, s.height, s.pix_fmt = 48, 32, "yuv420p"
        s.options = {"crf": "30", "preset": "12"}
        for fr in make_frames(n, 32, 48, 0, False):
            for p in s.encode(av.VideoFrame.from_ndarray(fr, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)


def _audio_only(path: Path) -> None:
    """An MP4 whose only stream is audio: a well-formed container without a decodable video stream."""
    import av

    with av.open(str(path), "w", format="mp4") as c:
        s = c.add_stream("aac", rate=8000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
        frame.sample_rate = 8000
        for _ in range(4):
            for p in s.encode(frame):
                c.mux(p)
        for p in s.encode():
            c.mux(p)


def _truncated_av1(path: Path) -> None:
    _av1(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])


MEDIA = {"truncated_av1": _truncated_av1, "no_video_stream": _audio_only,
         "garbage": lambda p: p.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)}


@pytest.mark.parametrize("damage", list(MEDIA))
def test_malformed_media_is_named_by_check_training_and_evaluation(tiny, ref, tmp_path, capsys, damage):
    ds = Path(shutil.copytree(tiny[0], tmp_path / "ds"))
    MEDIA[damage](ds / "episodes/train_000/sim.mp4")
    MEDIA[damage](ds / "episodes/val_000/real.mp4")
    _named(["data", "check", ds], capsys, 1, "episode train_000", "sim.mp4")
    assert main(["data", "check", str(ds), "--skip-bad"]) == 0
    assert "2 bad episodes skipped" in capsys.readouterr().out
    run = tmp_path / "run"
    _named(pretrain_args(run, (ds, tiny[1])), capsys, 1, "episode train_000", "sim.mp4")
    assert status(run)["state"] == "failed" and steps(run) == []
    _named(["evaluate", "--ckpt", ref, "--data", ds, "--split", "val", "--out", tmp_path / "e", "--num-samples",
            "1"], capsys, 1, "episode val_000", "real.mp4")


@pytest.mark.parametrize("damage", list(MEDIA))
def test_malformed_lerobot_video_is_named(tmp_path, capsys, damage):
    from test_lerobot import write_lerobot_v3

    sim = write_lerobot_v3(tmp_path / "sim", [6, 6], real=False)
    real = write_lerobot_v3(tmp_path / "real", [6, 6], real=True)
    video = next((real / "videos").rglob("file-000.mp4"))
    video.unlink()
    MEDIA[damage](video)
    out = tmp_path / "out"
    _named(["data", "import-lerobot", "--sim", sim, "--real", real, "--out", out], capsys, 1, "file-000.mp4")
    assert not out.exists()


LEROBOT_INFO = {  # key -> value (None: removed)
    "fps": None, "data_path": None, "video_path": None, "codebase_version": None, "features": None,
    "fps ": "ten", "features ": ["action"], "data_path ": 3,
}


@pytest.mark.parametrize("key", list(LEROBOT_INFO))
def test_lerobot_info_json_with_missing_or_ill_typed_keys_is_named(tmp_path, capsys, key):
    from test_lerobot import write_lerobot_v3

    sim = write_lerobot_v3(tmp_path / "sim", [6], real=False)
    real = write_lerobot_v3(tmp_path / "real", [6], real=True)
    info = json.loads((sim / "meta/info.json").read_text())
    field, value = key.strip(), LEROBOT_INFO[key]
    if value is None:
        del info[field]
    else:
        info[field] = value
    (sim / "meta/info.json").write_text(json.dumps(info))
    _named(["data", "import-lerobot", "--sim", sim, "--real", real, "--out", tmp_path / "out"], capsys, 1,
           "info.json", f"'{field}'" if field != "codebase_version" else "codebase_version")


# ----------------------------------------------------------------------------------------------------------------------
# A full disk during any write
# ----------------------------------------------------------------------------------------------------------------------

TRAINING_WRITES = {"metrics.jsonl": 2, "tb": 3, "status.json": 2, "loss_curves.png": 0}  # name -> writes that succeed


@pytest.mark.parametrize("name", list(TRAINING_WRITES))
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # TensorBoard's writer thread
def test_disk_full_during_a_training_write_is_named_and_status_is_not_left_running(tiny, tmp_path, capsys,
                                                                                  monkeypatch, name):
    refused = disk_full(monkeypatch, name, after=TRAINING_WRITES[name])
    run = tmp_path / "run"
    err = _named(pretrain_args(run, tiny), capsys, 1, "write error", "No space left on device",
                 name if name != "tb" else "TensorBoard")
    assert refused, "the fault was not injected"
    if (run / "status.json").exists():
        st = status(run)
        assert st["state"] == "failed" and "No space left on device" in st["reason"], st
    else:  # status.json itself could not be written: it was removed rather than left saying "running"
        assert name == "status.json" and "status.json could not be written" in err and "removed" in err, err
    assert steps(run) in ([], [2], [2, 4], [4, 6])  # the checkpoints written before are intact


@pytest.mark.parametrize("name", ["sample_000.mp4", "sample_000.gif", "sample_000.png", "eval.json", "eval.md",
                                  "sweep_steps.json"])
def test_disk_full_writing_videos_or_results_is_named(ref, tiny, tmp_path, capsys, monkeypatch, name):
    refused = disk_full(monkeypatch, name)
    root = tiny[0]
    few = ["--num-samples", "1"]
    words = {"sample": ["generate", "--ckpt", ref, "--data", root, "--out", tmp_path / "g", *few],
             "eval": ["evaluate", "--ckpt", ref, "--data", root, "--out", tmp_path / "e", *few],
             "sweep": ["sweep", "steps", "--ckpt", ref, "--data", root, "--n-sim", "1", "--n-real", "1", "--w", "0",
                       "--out", tmp_path / "s", *few]}[name.split("_")[0].split(".")[0]]
    _named(words, capsys, 1, "write error", name, "No space left on device")
    assert refused


# ----------------------------------------------------------------------------------------------------------------------
# The policy commands' arguments
# ----------------------------------------------------------------------------------------------------------------------


def test_policy_and_dataset_commands_name_a_bad_argument_before_any_work(tmp_path, capsys):
    """Counts below 1, an odd or empty camera size, an unparsable LIBERO task list, a row name given twice: one config
    error naming the flag (exit 2), and nothing written — checked before a run is loaded or a scene simulated."""
    o, run = tmp_path, tmp_path / "no_run_needed"
    for words, needle in (
            (["policy", "eval", "--runs", run, "--out", o / "e", "--per-task", "0"], "--per-task: got 0"),
            (["policy", "eval", "--runs", run, "--out", o / "e", "--per-task", "-1"], "--per-task: got -1"),
            (["policy", "eval", "--runs", run, "--out", o / "e", "--max-steps", "0"], "--max-steps: got 0"),
            (["policy", "eval", "--runs", run, "--out", o / "e", "--execute", "0"], "--execute: got 0"),
            (["policy", "eval", "--runs", f"a={run}", f"a={run}2", "--out", o / "e"], "'a' is given twice"),
            (["policy", "eval", "--runs", "a=", "--out", o / "e"], "expected NAME=RUN or RUN"),
            (["policy", "eval", "--env", "libero", "--runs", run, "--out", o / "e", "--tasks", "a,b"],
             "--tasks: got 'a,b'"),
            (["policy", "eval", "--env", "libero", "--runs", run, "--out", o / "e", "--trials", "0"],
             "--trials: got 0"),
            (["policy", "eval", "--env", "libero", "--runs", run, "--out", o / "e", "--scene-seed", "1"],
             "--scene-seed: LIBERO's scenes are its own"),
            (["data", "synth-policy", "--out", o / "d", "--height", "31"], "height: got 31"),
            (["data", "synth-policy", "--out", o / "d", "--width", "0"], "width: got 0"),
            (["data", "synth-policy", "--out", o / "d", "--workers", "0"], "workers: got 0"),
            (["data", "synth-policy", o / "d", "--out", o / "d2"], "give the dataset folder once"),
            (["data", "synth-policy", o / "d", "--max-steps", "3", "--per-task", "1", "--num-val", "0",
              "--no-progress"], "--max-steps 3: the scripted expert succeeded only"),
            (["data", "synth", "--out", o / "d", "--quick", "--workers", "0"], "workers: got 0"),
            (["data", "synth", "--out", o / "d", "--quick", "--action-noise", "0.5"], "--action-noise: got 0.5"),
            (["data", "synth", "--out", o / "d", "--quick", "--pauses", "9"], "--pauses: got 9")):
        _named(words, capsys, 2, needle)
    assert sorted(p.name for p in o.iterdir()) == []
