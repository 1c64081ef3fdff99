"""Dataset metadata is data: episode ids are plain names, every path stays inside the dataset (symlinks resolved,
LeRobot templates included), JSON fields have the stated types and ranges, text is UTF-8, 0/1-frame episodes are
named (and skipped where asked), and the dataset's sim_background is what the sampler fills the masked frame with."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from faultkit import pretrain_args, status, steps

from simforcing.cli import main

pytestmark = pytest.mark.faults

VICTIM = "train_001"


@pytest.fixture
def ds(tiny, tmp_path) -> Path:
    return Path(shutil.copytree(tiny[0], tmp_path / "ds"))


def _lines(root: Path) -> list[dict]:
    return [json.loads(x) for x in (root / "meta/episodes.jsonl").read_text().splitlines() if x.strip()]


def _write_lines(root: Path, lines: list[dict]) -> None:
    (root / "meta/episodes.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))


def _rename_episode(root: Path, old: str, new) -> None:
    """Give episode ``old`` the id ``new`` in episodes.jsonl and splits.json (its folder stays where it is)."""
    _write_lines(root, [{**d, "episode_id": new} if d["episode_id"] == old else d for d in _lines(root)])
    splits = json.loads((root / "meta/splits.json").read_text())
    splits = {k: [new if e == old else e for e in v] for k, v in splits.items()}
    (root / "meta/splits.json").write_text(json.dumps(splits))


def _check(root: Path, capsys, kind: str, *words: str) -> str:
    """data check fails naming ``kind`` and ``words``; --skip-bad skips that one episode."""
    assert main(["data", "check", str(root)]) == 1
    err = capsys.readouterr().err
    assert f"[{kind}]" in err and all(w in err for w in words), err
    assert main(["data", "check", str(root), "--skip-bad"]) == 0
    out = capsys.readouterr().out
    assert "1 bad episodes skipped" in out and f"[{kind}]" in out, out
    return err


# ----------------------------------------------------------------------------------------------------------------------
# Paths stay inside the dataset
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["parent", "absolute", "nested", "dotdot"])
def test_episode_ids_must_be_plain_names(ds, tiny, tmp_path, capsys, how):
    outside = tmp_path / "x"  # a valid episode outside the dataset: reading it would "work"
    shutil.copytree(ds / "episodes" / VICTIM, outside)
    new = {"parent": "../../x", "absolute": str(outside), "nested": f"{VICTIM}/../{VICTIM}", "dotdot": ".."}[how]
    _rename_episode(ds, VICTIM, new)
    _check(ds, capsys, "bad_episode_id", repr(new), "not a plain name")
    run = tmp_path / "run"
    assert main(pretrain_args(run, (ds, tiny[1]))) == 1  # training refuses the dataset, naming the id
    assert "[bad_episode_id]" in capsys.readouterr().err and steps(run) == []


@pytest.mark.parametrize("what", ["folder", "file"])
def test_symlinks_out_of_the_dataset_are_refused(ds, tmp_path, capsys, what):
    outside = tmp_path / "elsewhere"
    shutil.copytree(ds / "episodes" / VICTIM, outside)
    if what == "folder":
        shutil.rmtree(ds / "episodes" / VICTIM)
        (ds / "episodes" / VICTIM).symlink_to(outside, target_is_directory=True)
        words = ("episode folder is a symbolic link",)
    else:
        (ds / "episodes" / VICTIM / "sim.mp4").unlink()
        (ds / "episodes" / VICTIM / "sim.mp4").symlink_to(outside / "sim.mp4")
        words = ("sim.mp4", "outside")
    _check(ds, capsys, "unsafe_path", f"episode {VICTIM}", *words)


def test_a_symlink_inside_the_dataset_is_fine(ds, capsys):
    (ds / "episodes" / VICTIM / "lowdim.npz").rename(ds / "lowdim_store.npz")
    (ds / "episodes" / VICTIM / "lowdim.npz").symlink_to(ds / "lowdim_store.npz")
    assert main(["data", "check", str(ds)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("template", ["video_path", "data_path"])
def test_lerobot_templates_cannot_escape_the_dataset(tmp_path, capsys, template):
    from test_lerobot import write_lerobot_v3

    sim = write_lerobot_v3(tmp_path / "sim", [6, 6], real=False)
    real = write_lerobot_v3(tmp_path / "real", [6, 6], real=True)
    info = json.loads((sim / "meta/info.json").read_text())
    moved = "videos" if template == "video_path" else "data"
    shutil.copytree(sim / moved, tmp_path / "loot" / moved)  # readable files outside the dataset
    info[template] = "../loot/" + info[template]
    (sim / "meta/info.json").write_text(json.dumps(info))
    out = tmp_path / "out"
    code = main(["data", "import-lerobot", "--sim", str(sim), "--real", str(real), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and "[unsafe_path]" in err and template in err and "outside" in err, err
    assert not out.exists() and not list(tmp_path.glob(".out.*"))


# ----------------------------------------------------------------------------------------------------------------------
# JSON fields: types and ranges; text is UTF-8
# ----------------------------------------------------------------------------------------------------------------------

BAD_INFO = {  # field -> a value of the wrong type or range
    "height": "32", "width": 0, "fps": -10, "action_dim": True, "state_dim": 2.5, "sim_background": "purple",
}


@pytest.mark.parametrize("field", [*BAD_INFO, "fps-missing"])
def test_info_json_fields_have_the_stated_types(ds, tmp_path, capsys, field):
    info = json.loads((ds / "meta/info.json").read_text())
    if field == "fps-missing":
        del info["fps"]
        field = "fps"
    else:
        info[field] = BAD_INFO[field]
    (ds / "meta/info.json").write_text(json.dumps(info))
    assert main(["data", "check", str(ds)]) == 1
    err = capsys.readouterr().err
    assert "[bad_meta]" in err and "info.json" in err and f"'{field}'" in err, err
    assert main(["data", "check", str(ds), "--skip-bad"]) == 1  # a dataset-level error is never skipped


@pytest.mark.parametrize("field, value", [("length", "13"), ("has_real", "yes"), ("instruction", 5),
                                          ("episode_id", 17)])
def test_episode_index_fields_have_the_stated_types(ds, capsys, field, value):
    _write_lines(ds, [{**d, field: value} if d["episode_id"] == VICTIM else d for d in _lines(ds)])
    assert main(["data", "check", str(ds)]) == 1
    err = capsys.readouterr().err
    assert "[bad_meta]" in err and "episodes.jsonl" in err and f"field '{field}'" in err, err


def test_split_lists_hold_episode_id_strings(ds, capsys):
    splits = json.loads((ds / "meta/splits.json").read_text())
    (ds / "meta/splits.json").write_text(json.dumps({**splits, "train": "train_000"}))
    assert main(["data", "check", str(ds)]) == 1
    err = capsys.readouterr().err
    assert "[bad_meta]" in err and "splits.json" in err and "'train'" in err and "list" in err, err


@pytest.mark.parametrize("name", ["episodes.jsonl", "splits.json", "info.json"])
def test_metadata_that_is_not_utf8_is_a_named_error(ds, tiny, tmp_path, capsys, name):
    path = ds / "meta" / name
    path.write_bytes(path.read_bytes().replace(b'"train_000"', b'"train_\xe9000"', 1) if name != "info.json"
                     else path.read_bytes().replace(b"tests.datagen", b"tests.d\xe9tagen"))
    assert main(["data", "check", str(ds)]) == 1
    err = capsys.readouterr().err
    assert "[unreadable_meta]" in err and name in err and "utf-8" in err.lower(), err
    assert main(pretrain_args(tmp_path / "run", (ds, tiny[1]))) == 1
    assert "utf-8" in capsys.readouterr().err.lower()


# ----------------------------------------------------------------------------------------------------------------------
# 0- and 1-frame episodes
# ----------------------------------------------------------------------------------------------------------------------


def _shorten(root: Path, n: int) -> None:
    """Episode VICTIM becomes n frames long (videos, lowdim and episodes.jsonl agree; no arm mask)."""
    from datagen import make_frames, make_lowdim

    from simforcing.data.format import write_episode

    shutil.rmtree(root / "episodes" / VICTIM)
    if n:
        actions, states = make_lowdim(n, 1)
        write_episode(root, VICTIM, make_frames(n, 32, 48, 1, False), make_frames(n, 32, 48, 1, True), actions,
                      states)
    else:  # nothing to encode: keep a 13-frame video, the index says 0 frames
        write_episode(root, VICTIM, make_frames(13, 32, 48, 1, False), make_frames(13, 32, 48, 1, True),
                      np.zeros((0, 7), np.float32), np.zeros((0, 7), np.float32))
    _write_lines(root, [{**d, "length": n} if d["episode_id"] == VICTIM else d for d in _lines(root)])


@pytest.mark.parametrize("n", [0, 1])
def test_zero_and_one_frame_episodes_are_named_and_skipped(ds, tiny, tmp_path, capsys, caplog, n):
    _shorten(ds, n)
    _check(ds, capsys, "too_short_episode", f"episode {VICTIM}", f"field length is {n}", "at least 2 frames")
    run = tmp_path / "run"
    assert main(pretrain_args(run, (ds, tiny[1]))) == 1
    assert "[too_short_episode]" in capsys.readouterr().err
    skip = tmp_path / "skip"
    assert main(pretrain_args(skip, (ds, tiny[1]), "--data.skip_bad=true", "--train.max_steps=1")) == 0
    st = status(skip)
    assert st["state"] == "finished" and st["skipped_episodes"] == 1 and st["skipped"][0]["episode"] == VICTIM


# ----------------------------------------------------------------------------------------------------------------------
# The dataset's sim_background reaches the first-frame masking
# ----------------------------------------------------------------------------------------------------------------------


def test_the_sampler_fills_the_masked_frame_with_the_datasets_sim_background(ds, ref, tmp_path, capsys, monkeypatch):
    import simforcing.masking as masking

    info = json.loads((ds / "meta/info.json").read_text())
    (ds / "meta/info.json").write_text(json.dumps({**info, "sim_background": "30,40,50"}))
    used = []
    original = masking.compose_masked_frame

    def spy(frame, mask, rgb):
        used.append(tuple(rgb))
        return original(frame, mask, rgb)

    monkeypatch.setattr(masking, "compose_masked_frame", spy)
    args = ["generate", "--ckpt", str(ref), "--data", str(ds), "--split", "val", "--num-samples", "1",
            "--sample.w=0.6"]
    assert main(args + ["--out", str(tmp_path / "g1")]) == 0, capsys.readouterr().err
    assert used and set(used) == {(30, 40, 50)}  # the dataset's, since the run's config leaves it open
    used.clear()
    assert main(args + ["--out", str(tmp_path / "g2"), "--data.sim_background=black"]) == 0
    assert used and set(used) == {(0, 0, 0)}  # a value given in the config overrides the dataset's
