"""Shareable world models (issue 45): `simforcing export` writes no folder that could be mistaken for a finished,
usable model — an unfinished run (killed, stopped, still training) is refused unless ``--allow-unfinished`` (then
config.json and the model card say so), weights holding NaN/inf are refused, an absurd ``--max-shard-size`` is a
config error, the folder appears whole or not at all — and ``WorldModelPipeline.from_pretrained`` validates the
folder before it loads (sections present and typed, shapes against the config, shards inside the folder, safetensors
only, finite weights and statistics); `export --eval` reads evaluations whose fields are checked. Every refusal has
its control: the same call on good input works."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
import torch
from faultkit import ckpt, copy_run, digest, disk_full, refused
from safetensors.torch import load_file, save_file

from simforcing.cli import main
from simforcing.config import ConfigError
from simforcing.errors import CheckpointError

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def exported(ref, tiny, tmp_path_factory):
    """The finished reference run exported (2 shards), and an evaluation of its checkpoint (1 window)."""
    base = tmp_path_factory.mktemp("faults_export")
    ev = base / "eval"
    assert main(["evaluate", "--ckpt", str(ref), "--data", str(tiny[0]), "--out", str(ev), "--num-samples", "1",
                 "--device", "cpu"]) == 0
    out = base / "shared"
    assert main(["export", "--ckpt", str(ref), "--out", str(out), "--eval", str(ev), "--max-shard-size", "64KB"]) == 0
    assert len(list(out.glob("model-*-of-*.safetensors"))) > 1
    return base, out, ev


def _pretrained(folder: Path):
    from simforcing import WorldModelPipeline

    return WorldModelPipeline.from_pretrained(folder, device="cpu")


# ----------------------------------------------------------------------------------------------------------------------
# What export refuses to write
# ----------------------------------------------------------------------------------------------------------------------


def test_an_unfinished_run_is_refused_unless_allowed_and_then_said(ref, exported, tmp_path, capsys):
    run = copy_run(ref, tmp_path / "killed")  # killed mid-training: status.json still says "running", no lock held
    status = json.loads((run / "status.json").read_text())
    (run / "status.json").write_text(json.dumps({**status, "state": "running", "step": 6}))
    out = tmp_path / "shared"
    refused(["export", "--ckpt", run, "--out", out], capsys, "not finished", "interrupted", "--allow-unfinished",
             "pretrain --resume")
    assert not out.exists()
    assert main(["export", "--ckpt", str(run), "--out", str(out), "--allow-unfinished"]) == 0
    source = json.loads((out / "config.json").read_text())["source"]
    assert source["finished"] is False and source["run_state"] == "interrupted"
    card = (out / "README.md").read_text()
    assert "Unfinished model" in card and "run state: interrupted" in card and "run state: running" not in card
    with pytest.warns(UserWarning, match="not finished"):
        _pretrained(out)
    # control: the finished run exported without the flag, and loads without a warning
    _, good, _ = exported
    assert json.loads((good / "config.json").read_text())["source"]["finished"] is True
    assert "Unfinished" not in (good / "README.md").read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _pretrained(good)


def test_weights_holding_nan_are_refused_even_when_their_hashes_match(ref, tmp_path, capsys):
    from simforcing.runs.checkpoint import sha256_file

    run = copy_run(ref, tmp_path / "nan")
    c = ckpt(run, 6)
    state = load_file(str(c / "model.safetensors"))
    name = sorted(state)[0]
    state[name] = state[name].clone()
    state[name].view(-1)[0] = float("nan")
    save_file(state, str(c / "model.safetensors"), metadata={"step": "6"})
    meta = json.loads((c / "meta.json").read_text())
    meta["files"]["model.safetensors"] = sha256_file(c / "model.safetensors")  # consistent: only NaN is wrong
    (c / "meta.json").write_text(json.dumps(meta))
    out = tmp_path / "shared"
    refused(["export", "--ckpt", run, "--out", out], capsys, "NaN or inf", name, "--step", code=1)
    assert not out.exists()
    assert main(["export", "--ckpt", str(run), "--out", str(out), "--step", "4"]) == 0  # control: the step before
    assert json.loads((out / "config.json").read_text())["source"]["step"] == 4


@pytest.mark.parametrize("size", ["1e400GB", "nanGB", "infMB", "-1MB", "0", "2TB", "lots", "99999999GB"])
def test_an_absurd_max_shard_size_is_a_config_error(ref, size, tmp_path, capsys):
    out = tmp_path / "shared"
    refused(["export", "--ckpt", ref, "--out", out, f"--max-shard-size={size}"], capsys, "--max-shard-size")
    assert not out.exists()


def test_an_export_appears_whole_or_not_at_all(ref, exported, tmp_path, monkeypatch, capsys):
    _, good, _ = exported
    again = tmp_path / "again"
    assert main(["export", "--ckpt", str(ref), "--out", str(again)]) == 0
    before = digest(again)
    failed = disk_full(monkeypatch, "README.md")  # the last file of an export
    refused(["export", "--ckpt", ref, "--out", again, "--max-shard-size", "64KB"], capsys, "No space left",
             code=1)
    monkeypatch.undo()
    assert failed and digest(again) == before  # the earlier export is as it was: no new shards beside its config
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".again")]  # no temporary folder left
    _pretrained(again)


# ----------------------------------------------------------------------------------------------------------------------
# from_pretrained checks the folder before it loads
# ----------------------------------------------------------------------------------------------------------------------


def _edit_json(path: Path, edit) -> None:
    obj = json.loads(path.read_text())
    obj = edit(obj)
    path.write_text(json.dumps(obj))


def _copy(good: Path, dst: Path) -> Path:
    import shutil

    return Path(shutil.copytree(good, dst))


def _set(obj: dict, dotted: str, value):
    *head, last = dotted.split(".")
    d = obj
    for k in head:
        d = d[k]
    if value is _DELETE:
        del d[last]
    else:
        d[last] = value
    return obj


_DELETE = object()
CONFIG_EDITS = [  # (what is done to config.json, what the refusal names)
    ("config.model.num_layers", 2, "model.num_layers 2"),
    ("config.model.ffn_dim", 128, "ffn_dim 128"),
    ("config.model.attention_head_dim", 8, "attention_head_dim 8"),
    ("vae", _DELETE, "section 'vae'"),
    ("source", _DELETE, "section 'source'"),
    ("config", [1, 2], "section 'config' must be an object; got a JSON list"),
    ("config", "demo", "section 'config' must be an object"),
    ("source.step", "six", "source.step"),
    ("source.step", -1, "source.step"),
    ("vae.copied", "yes", "vae.copied"),
    ("config.model.vae.path", "../vae", "must name the VAE folder copied"),
    ("config.model.vae.path", "/tmp", "must name the VAE folder copied"),
    ("config.model.num_layers", "two", "not a valid simforcing config"),
    ("config.train.nonsense", 1, "not a valid simforcing config"),
]


@pytest.mark.parametrize("field,value,needle", CONFIG_EDITS, ids=[f"{f}={v!r:.12}" for f, v, _ in CONFIG_EDITS])
def test_from_pretrained_refuses_an_edited_config_by_name(exported, field, value, needle, tmp_path):
    _, good, _ = exported
    bad = _copy(good, tmp_path / "bad")
    _edit_json(bad / "config.json", lambda obj: _set(obj, field, value))
    with pytest.raises(CheckpointError, match="config.json") as e:
        _pretrained(bad)
    assert needle in str(e.value), str(e.value)


def _outside_shard(folder: Path, how: str) -> None:
    """The index's first shard moved out of the folder and named by a path (or a link) leading to it."""
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    first = sorted(set(index["weight_map"].values()))[0]
    other = folder.parent / "other"
    other.mkdir()
    os.replace(folder / first, other / first)
    if how == "link":
        os.symlink(other / first, folder / first)
        return
    target = f"../other/{first}" if how == "relative" else str(other / first)
    index["weight_map"] = {k: (target if v == first else v) for k, v in index["weight_map"].items()}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


INDEX_EDITS = [
    ("no weight_map", lambda i: {"metadata": i["metadata"]}, "no weight_map"),
    ("a list", lambda i: [i], "a JSON list"),
    ("weight_map a list", lambda i: {**i, "weight_map": list(i["weight_map"])}, "weight_map list"),
    ("weight_map empty", lambda i: {**i, "weight_map": {}}, "weight_map"),
    ("a number as shard", lambda i: {**i, "weight_map": {k: 3 for k in i["weight_map"]}}, "must be a shard file"),
    ("a pickle shard", lambda i: {**i, "weight_map": {k: "pytorch_model.bin" for k in i["weight_map"]}},
     "only safetensors"),
    ("a shard it lacks", lambda i: {**i, "weight_map": {**i["weight_map"], "extra.weight": i["weight_map"][
        next(iter(i["weight_map"]))]}}, "other tensors than the index maps"),
]


@pytest.mark.parametrize("what,edit,needle", INDEX_EDITS, ids=[w for w, _, _ in INDEX_EDITS])
def test_from_pretrained_refuses_a_malformed_index_by_name(exported, what, edit, needle, tmp_path):
    _, good, _ = exported
    bad = _copy(good, tmp_path / "bad")
    _edit_json(bad / "model.safetensors.index.json", edit)
    with pytest.raises(CheckpointError, match="index|safetensors") as e:
        _pretrained(bad)
    assert needle in str(e.value), str(e.value)


@pytest.mark.parametrize("how", ["relative", "absolute", "link"])
def test_from_pretrained_never_reads_a_shard_outside_the_folder(exported, how, tmp_path):
    _, good, _ = exported
    bad = _copy(good, tmp_path / "shared")
    _outside_shard(bad, how)
    with pytest.raises(CheckpointError, match="not a file of this folder"):
        _pretrained(bad)


def test_from_pretrained_refuses_non_finite_weights_and_statistics(exported, tmp_path):
    _, good, _ = exported
    bad = _copy(good, tmp_path / "nan_weights")
    shard = sorted(bad.glob("model-*.safetensors"))[0]
    state = load_file(str(shard))
    name = sorted(state)[0]
    state[name] = torch.full_like(state[name], float("inf"))
    save_file(state, str(shard), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=f"NaN or inf .*{name}"):
        _pretrained(bad)
    bad = _copy(good, tmp_path / "nan_stats")
    _edit_json(bad / "normalizer.json", lambda s: {**s, "state": {**s["state"], "min": [float("nan")] *
                                                                  len(s["state"]["min"])}})
    with pytest.raises(CheckpointError, match="normalizer.json"):
        _pretrained(bad)
    bad = _copy(good, tmp_path / "short_stats")
    _edit_json(bad / "normalizer.json", lambda s: {**s, "action": {"min": [0.0], "max": [1.0]}})
    with pytest.raises(CheckpointError, match="normalizer.json"):
        _pretrained(bad)
    pipe = _pretrained(good)  # control
    assert pipe.checkpoint.step == 6 and pipe.normalizer is not None


def test_from_pretrained_of_what_is_not_an_export_is_named(ref, tmp_path):
    with pytest.raises(ConfigError, match="a run's config"):
        _pretrained(ref)
    with pytest.raises(ConfigError, match="no config.json"):
        _pretrained(tmp_path)


# ----------------------------------------------------------------------------------------------------------------------
# export --eval: the evaluation read back is checked
# ----------------------------------------------------------------------------------------------------------------------


EVAL_EDITS = [
    ("checkpoint", "runs/x/step_6", "field 'checkpoint' must be an object or null"),
    ("checkpoint", ["runs/x"], "field 'checkpoint' must be an object or null"),
    ("checkpoint.step", "six", "checkpoint: field 'step' must be an integer"),
    ("checkpoint.finished", "yes", "checkpoint: field 'finished' must be true or false"),
    ("sampler", _DELETE, "field 'sampler' is missing"),
    ("sampler", "guided", "field 'sampler' must be an object"),
    ("num_samples", "1", "field 'num_samples' must be an integer"),
    ("num_samples", 1.5, "field 'num_samples' must be an integer"),
    ("num_samples", -1, "field 'num_samples' must be an integer >= 1"),
    ("psnr", "high", "field 'psnr' must be a number"),
    ("latency", None, "field 'latency' must be an object"),
    ("split", 3, "field 'split' must be a string"),
]


@pytest.mark.parametrize("field,value,needle", EVAL_EDITS, ids=[f"{f}={v!r:.12}" for f, v, _ in EVAL_EDITS])
def test_export_eval_refuses_an_evaluation_with_malformed_fields(ref, exported, field, value, needle, tmp_path,
                                                                 capsys):
    import shutil

    _, _, ev = exported
    bad = Path(shutil.copytree(ev, tmp_path / "eval"))
    _edit_json(bad / "eval.json", lambda obj: _set(obj, field, value))
    out = tmp_path / "shared"
    refused(["export", "--ckpt", ref, "--out", out, "--eval", bad], capsys, "--eval", "malformed field", needle)
    assert not out.exists()


def test_export_eval_control_puts_the_numbers_on_the_card(exported):
    _, good, ev = exported
    psnr = json.loads((ev / "eval.json").read_text())["psnr"]
    assert f"| {psnr:.2f} |" in (good / "README.md").read_text()


def test_other_result_files_name_their_malformed_fields(exported, tmp_path):
    from simforcing.evaluate.results import RolloutDrift, StepsSweep, WindowEvaluation

    _, _, ev = exported
    assert WindowEvaluation.read(ev, "--eval").checkpoint.step == 6  # control
    for folder, file, kind, body, needle in (
            ("r", "rollout.json", "simforcing.rollout-drift", {"run": "x", "horizon": "long"}, "'checkpoint'"),
            ("r2", "rollout.json", "simforcing.rollout-drift", {"run": "x", "checkpoint": {}, "data": "d",
                                                                "split": "val", "horizon": 0}, "'horizon'"),
            ("s", "sweep_steps.json", "simforcing.sweep-steps", {"run": "x"}, "missing")):
        d = tmp_path / folder
        d.mkdir()
        (d / file).write_text(json.dumps({"format": kind, "format_version": 2, **body}))
        reader = RolloutDrift if file == "rollout.json" else StepsSweep
        with pytest.raises(ConfigError, match="malformed field") as e:
            reader.read(d, "--x")
        assert needle in str(e.value) and file in str(e.value)
