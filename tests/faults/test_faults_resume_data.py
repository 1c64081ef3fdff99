"""A resume compares the data with what the checkpoint recorded about it (its normalisation statistics, the dataset
folder, the episodes) and says plainly what changed; the normalisation never switches silently: training continues
with the checkpoint's statistics, which its weights were trained with — for policy and world-model runs alike."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from datagen import make_policy_dataset
from faultkit import POLICY_LENGTH, ckpt, copy_run, policy_args, pretrain_args, status

from simforcing.cli import main

pytestmark = pytest.mark.faults


def _stats(run: Path, step: int) -> dict:
    return json.loads((ckpt(run, step) / "meta.json").read_text())["stats"]


def test_a_policy_resume_after_the_dataset_was_regenerated_says_so_and_keeps_the_statistics(tiny, tmp_path,
                                                                                          capsys):
    """The issue's case: the policy dataset regenerated at the same path (other demonstrations, other statistics),
    then --resume: the checkpoints before and after used to record different action statistics, without a word."""
    data = tmp_path / "data"
    make_policy_dataset(data, length=POLICY_LENGTH)
    run = tmp_path / "run"
    assert main(policy_args(run, data, tiny[1])) == 0
    before = _stats(run, 2)
    shutil.rmtree(data)
    make_policy_dataset(data, length=POLICY_LENGTH, seed=7)  # regenerated: same ids and lengths, other content
    assert json.loads((data / "meta" / "stats.json").read_text())["action"] != before["action"]
    capsys.readouterr()
    with pytest.warns(UserWarning, match="train.max_steps"):
        assert main(policy_args(run, data, tiny[1], "--train.max_steps=4", resume=True)) == 0
    err = capsys.readouterr().err
    assert "the data differs from what step_000002 was trained on" in err and "normalisation statistics changed" in err
    assert "action" in err and "continues with the checkpoint's normalisation statistics" in err, err
    assert _stats(run, 4) == before  # the normalisation did not switch
    assert status(run)["resume_data_changes"] and status(run)["state"] == "finished"


def test_a_world_model_resume_on_another_dataset_says_what_changed(ref, tiny, tmp_path, capsys):
    root, _ = tiny
    other = Path(shutil.copytree(root, tmp_path / "other"))
    stats = json.loads((other / "meta" / "stats.json").read_text())
    stats["action"]["max"] = [v + 1.0 for v in stats["action"]["max"]]
    (other / "meta" / "stats.json").write_text(json.dumps(stats))
    run = copy_run(ref, tmp_path / "run")
    capsys.readouterr()
    with pytest.warns(UserWarning, match="train.max_steps"):
        assert main(pretrain_args(run, (other, tiny[1]), "--train.max_steps=8", resume=True)) == 0
    err = capsys.readouterr().err
    assert f"data folder {root.resolve()} -> {other.resolve()}" in err, err
    assert "normalisation statistics changed (stats.json: action max[0]" in err, err
    assert _stats(run, 8) == _stats(ref, 6)


def test_an_unchanged_resume_says_nothing_about_the_data(ref, tiny, tmp_path, capsys):
    run = copy_run(ref, tmp_path / "run")
    with pytest.warns(UserWarning, match="train.max_steps"):
        assert main(pretrain_args(run, tiny, "--train.max_steps=7", resume=True)) == 0
    assert "the data differs" not in capsys.readouterr().err
    assert status(run)["resume_data_changes"] == []
