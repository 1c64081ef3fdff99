"""`simforcing data check`: every kind of bad input is reported with its own kind, the episode and the file."""

import shutil

import pytest
import torch
from datagen import BLAMED_FILE, CORRUPTIONS, DATASET_CORRUPTIONS, EPISODE_CORRUPTIONS, corrupt, make_dataset

from simforcing.cli import main
from simforcing.config import load_config
from simforcing.data.check import check_dataset
from simforcing.data.format import DataError
from simforcing.data.paired import PairedWindowDataset

VICTIM = "train_001"


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("tpl") / "ds", num_train=3, num_val=1, num_pool=1, length=12)


@pytest.fixture
def root(template, tmp_path):
    return shutil.copytree(template, tmp_path / "ds")


def cfg():
    return load_config("demo").validate()


def test_at_least_twelve_distinct_kinds():
    assert len(set(CORRUPTIONS)) == len(CORRUPTIONS) >= 12
    assert set(BLAMED_FILE) == set(CORRUPTIONS)


def test_valid_dataset_summary(root, capsys):
    report = check_dataset(root, cfg())
    assert report.ok
    assert report.splits["train"] == {"episodes": 3, "frames": 36, "paired": 3, "masks": 3}
    assert report.splits["sim_pool"]["paired"] == 0
    assert report.windows["demo"] == {"window_steps": 9, "windows": 5 * 4, "too_short": 0}
    assert report.windows["bridge"]["too_short"] == 5 and report.text_coverage == (3, 3)
    assert report.action_range[1][0] == 10 and report.resolutions == {"32x48": 5}
    assert main(["data", "check", str(root)]) == 0
    out = capsys.readouterr().out
    assert "dataset OK" in out and "interndata_a1" in out and "3/3 instructions" in out


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_each_bad_input_has_its_own_kind(root, kind, capsys):
    corrupt(root, VICTIM, kind)
    with pytest.raises(DataError) as e:
        check_dataset(root, cfg())
    assert e.value.kind == kind, str(e.value)
    msg = str(e.value)
    assert BLAMED_FILE[kind] in msg, msg
    if kind in EPISODE_CORRUPTIONS:
        assert VICTIM in msg
    assert main(["data", "check", str(root)]) == 1
    err = capsys.readouterr().err
    assert f"[{kind}]" in err and BLAMED_FILE[kind] in err


@pytest.mark.parametrize("kind", EPISODE_CORRUPTIONS)
def test_skip_bad_skips_and_counts(root, kind, capsys):
    corrupt(root, VICTIM, kind)
    report = check_dataset(root, cfg(), skip_bad=True)
    assert [(s[0].removesuffix("_ghost"), s[1]) for s in report.skipped] == [(VICTIM, kind)]
    good_train = 3 if kind == "unknown_episode" else 2  # the ghost id is extra; the real episode stays fine
    assert report.splits["train"]["episodes"] == good_train
    assert main(["data", "check", str(root), "--skip-bad"]) == 0
    assert "1 bad episodes skipped" in capsys.readouterr().out


@pytest.mark.parametrize("kind", EPISODE_CORRUPTIONS)
def test_the_dataset_reports_the_same_kinds(root, kind):
    """PairedWindowDataset validates without decoding yet finds every episode-level problem at construction."""
    corrupt(root, VICTIM, kind)
    with pytest.raises(DataError) as e:
        PairedWindowDataset(cfg(), root)
    assert e.value.kind == kind
    ds = PairedWindowDataset(load_config("demo", ["--data.skip_bad=true"]).validate(), root)
    assert [s[0].removesuffix("_ghost") for s in ds.skipped] == [VICTIM]
    item = ds[len(ds) - 1]
    assert item["sim"].shape == (3, 9, 32, 48) and torch.isfinite(item["actions"]).all()


@pytest.mark.parametrize("kind", DATASET_CORRUPTIONS)
def test_dataset_level_problems_are_never_skipped(root, kind):
    corrupt(root, VICTIM, kind)
    with pytest.raises(DataError) as e:
        check_dataset(root, cfg(), skip_bad=True)
    assert e.value.kind == kind
    with pytest.raises(DataError):
        PairedWindowDataset(load_config("demo", ["--data.skip_bad=true"]).validate(), root)


def test_check_uses_the_preset_dimensions(root):
    with pytest.raises(DataError, match="data.action_dim") as e:
        check_dataset(root, load_config("demo", ["--data.action_dim=6"]).validate())
    assert e.value.kind == "bad_stats"


def test_text_cache_must_match_the_model_text_dim(root):
    with pytest.raises(DataError, match=r"info.json.*model\.text_dim") as e:
        check_dataset(root, load_config("demo", ["--model.text_dim=128"]).validate(), skip_bad=True)
    assert e.value.kind == "bad_text_embedding"
    (root / "text_cache" / "info.json").unlink()
    with pytest.raises(DataError, match="embed-text") as e:
        PairedWindowDataset(cfg(), root)
    assert e.value.kind == "missing_text_cache"
