"""Min–max statistics, the Normalizer and `simforcing data stats`."""

import json

import numpy as np
import pytest
import torch
from datagen import corrupt, make_dataset

from simforcing.cli import main
from simforcing.data.format import DataError, read_lowdim, read_stats
from simforcing.data.stats import Normalizer, compute_stats, write_stats


@pytest.fixture
def root(tmp_path):
    return make_dataset(tmp_path / "ds", num_train=2, num_val=1, num_pool=2, length=(12, 12, 20, 9, 9), stats=False)


def test_compute_stats_matches_train_and_pool(root):
    stats = compute_stats(root)
    ids = ["train_000", "train_001", "pool_000", "pool_001"]
    acts = np.concatenate([read_lowdim(root, e)[0] for e in ids])
    sts = np.concatenate([read_lowdim(root, e)[1] for e in ids])
    np.testing.assert_allclose(stats["action"]["min"], acts.min(0), rtol=1e-6)
    np.testing.assert_allclose(stats["action"]["max"], acts.max(0), rtol=1e-6)
    np.testing.assert_allclose(stats["state"]["min"], sts.min(0), rtol=1e-6)
    np.testing.assert_allclose(stats["state"]["max"], sts.max(0), rtol=1e-6)
    assert stats["computed_on"] == ["train", "sim_pool"] and stats["num_episodes"] == 4
    # the validation episode is not used: its actions[:, 0] reach 18 (length 20), train/pool reach at most 10
    assert stats["action"]["max"][0] == 10


def test_write_stats_round_trips_through_the_file(root):
    written = write_stats(root)
    assert read_stats(root)["action"] == written["action"]


def test_normalizer_round_trip_numpy_and_torch():
    stats = {"action": {"min": [-2.0, 0.0, 3.0], "max": [2.0, 10.0, 3.0]},
             "state": {"min": [0.0], "max": [1.0]}}
    norm = Normalizer(stats)
    x = np.array([[-2.0, 0.0, 3.0], [2.0, 10.0, 3.0], [0.0, 5.0, 3.0]], np.float32)
    y = norm.normalize("action", x)
    np.testing.assert_allclose(y, [[-1, -1, 0], [1, 1, 0], [0, 0, 0]], atol=1e-6)  # degenerate dim -> 0
    np.testing.assert_allclose(norm.denormalize("action", y), x, atol=1e-6)
    xt = torch.tensor(x)
    yt = norm.normalize("action", xt)
    assert isinstance(yt, torch.Tensor) and yt.dtype == torch.float32
    torch.testing.assert_close(norm.denormalize("action", yt), xt)
    assert norm.normalize("state", np.array([[2.0]]))[0, 0] == pytest.approx(3.0)  # outside the range: not clipped


def test_normalizer_rejects_bad_stats():
    with pytest.raises(DataError, match="action") as e:
        Normalizer({"action": {"min": [0.0, 1.0], "max": [1.0]}, "state": {"min": [0.0], "max": [1.0]}})
    assert e.value.kind == "bad_stats"
    norm = Normalizer({"action": {"min": [0.0], "max": [1.0]}, "state": {"min": [0.0], "max": [1.0]}})
    with pytest.raises(DataError, match="data.action_dim"):
        norm.check_dims(7, 1)


def test_non_finite_values_stop_or_are_skipped(root):
    corrupt(root, "train_001", "non_finite")
    with pytest.raises(DataError, match="train_001") as e:
        compute_stats(root)
    assert e.value.kind == "non_finite"
    stats = compute_stats(root, skip_bad=True)
    assert stats["num_episodes"] == 3 and stats["skipped"][0][0] == "train_001"


def test_stats_command(root, capsys):
    assert main(["data", "stats", str(root)]) == 0
    out = capsys.readouterr().out
    assert "4 episodes" in out and "stats.json" in out
    assert json.loads((root / "meta" / "stats.json").read_text())["num_episodes"] == 4
    assert main(["data", "stats", str(root), "--splits", "train"]) == 0
    assert read_stats(root)["num_episodes"] == 2
