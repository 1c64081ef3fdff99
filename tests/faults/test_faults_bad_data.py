"""Bad data at the command level: one dataset holding 19 different kinds of malformed episodes at once.

``simforcing data check`` stops at the first with a named error; with ``--skip-bad`` it names every one (kind, episode
and file) and counts them; ``simforcing pretrain`` without skipping fails before any model is built, and with
``--data.skip_bad=true`` trains on the good episodes, logging one line per skipped episode.
(tests/test_check.py checks each kind alone through the library; this file attacks the commands with all at once.)
"""

from __future__ import annotations

import logging
import re

import pytest
from datagen import BLAMED_FILE, EPISODE_CORRUPTIONS, corrupt, make_dataset
from faultkit import pretrain_args, status, steps

from simforcing.cli import main

pytestmark = pytest.mark.faults

GOOD_TRAIN = 2
KINDS = EPISODE_CORRUPTIONS  # 19 kinds, one victim each: train_002 ... train_020
BLAMED = {k: BLAMED_FILE[k] for k in KINDS}  # the file each kind must be blamed on (a substring of its message)


def victim(kind: str) -> str:
    return f"train_{GOOD_TRAIN + KINDS.index(kind):03d}"


@pytest.fixture(scope="module")
def bad_root(tmp_path_factory, tiny):
    """2 good train episodes, one victim per kind, 1 val and 2 sim-only episodes (13 frames each)."""
    root = make_dataset(tmp_path_factory.mktemp("bad") / "ds", num_train=GOOD_TRAIN + len(KINDS), num_val=1,
                        num_pool=2, length=13)
    for kind in KINDS:
        corrupt(root, victim(kind), kind)
    return root


def test_at_least_ten_kinds():
    assert len(set(KINDS)) >= 10 and set(BLAMED) == set(KINDS)


def test_data_check_stops_at_the_first_bad_episode_with_a_named_error(bad_root, capsys):
    assert main(["data", "check", str(bad_root)]) == 1
    err = capsys.readouterr().err
    m = re.search(r"\[(\w+)\] episode (train_\d+)", err)
    assert m, err
    kind, episode = m.groups()
    assert kind in KINDS and episode.removesuffix("_ghost") == victim(kind) and BLAMED[kind] in err, err


def test_data_check_skip_bad_names_and_counts_every_kind(bad_root, capsys):
    assert main(["data", "check", str(bad_root), "--skip-bad"]) == 0
    out = capsys.readouterr().out
    skipped = [line for line in out.splitlines() if line.strip().startswith("skipped [")]
    assert len(skipped) == len(KINDS), out
    for kind in KINDS:
        line = next((x for x in skipped if f"[{kind}]" in x), None)
        assert line is not None, f"kind {kind} not reported:\n{out}"
        assert victim(kind) in line and BLAMED[kind] in line, line
    assert f"{len(KINDS)} bad episodes skipped" in out
    # the unknown_episode victim itself is fine (only its ghost id is bad): 2 good + 1 train episodes remain
    assert re.search(r"train\s+3 episodes", out), out


def test_pretrain_without_skip_fails_before_the_model_is_built(tiny, bad_root, tmp_path, capsys, monkeypatch):
    import simforcing.train as training  # stage 1 builds its model through this name

    monkeypatch.setattr(training, "build_world_model", lambda *a, **k: pytest.fail("the model was built on bad data"))
    run = tmp_path / "run"
    code = main(pretrain_args(run, (bad_root, tiny[1])))
    err = capsys.readouterr().err
    assert code == 1, err
    m = re.search(r"episode (train_\d+)", err)
    assert m and any(m.group(1).removesuffix("_ghost") == victim(k) and BLAMED[k] in err for k in KINDS), err
    st = status(run)
    assert st["state"] == "failed" and m.group(1) in st["reason"]
    assert steps(run) == [] and not (run / "metrics.jsonl").exists()


def test_pretrain_with_skip_bad_trains_on_the_good_episodes(tiny, bad_root, tmp_path, caplog, capsys):
    run = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="simforcing.data"):
        code = main(pretrain_args(run, (bad_root, tiny[1]), "--data.skip_bad=true", "--train.max_steps=1"))
    assert code == 0, capsys.readouterr().err
    assert status(run)["state"] == "finished" and steps(run) == [1]
    logged = [r.getMessage() for r in caplog.records if "skipping episode" in r.getMessage()]
    # stage 1 reads sim videos only, so an episode without a real video (unpaired_episode) is not bad there
    expected = [k for k in KINDS if k != "unpaired_episode"]
    assert len(logged) == len(expected), "\n".join(logged)
    for kind in expected:
        assert any(f"[{kind}]" in x and victim(kind) in x and BLAMED[kind] in x for x in logged), kind
    st = status(run)  # the total survives the log: status.json counts and names every skipped episode
    assert st["skipped_episodes"] == len(expected) == len(st["skipped"])
    named = [f"{s['episode']} {s['reason']}" for s in st["skipped"]]  # an unknown id is named in its reason
    assert all(any(victim(k) in x for x in named) for k in expected), named
