"""Demo provenance: OUT/data, OUT/vae and OUT/stage1 record what produced them and are made again when this demo run
asks for something else; `--quick` has its own default folder. The heavy stages are replaced by recorders (the real
demo runs in tests/test_demo.py), so what is checked here is the reuse decision itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from simforcing.cli import main
from simforcing.provenance import (PROVENANCE_FILE, check_provenance, code_version, digest, provenance_record,
                                   read_provenance, write_provenance)

pytestmark = pytest.mark.faults


def test_provenance_records_and_names_what_differs(tmp_path):
    rec = provenance_record("simforcing data synth --out D --num-train 20", {"num_train": 20, "shape": (32, 48)},
                            seed=0, inputs={"parent": "abc"})
    assert rec["code"] == code_version() and rec["code"]["simforcing"]
    assert check_provenance(tmp_path, rec) == [f"{PROVENANCE_FILE}: none recorded"]
    write_provenance(tmp_path, rec)
    assert read_provenance(tmp_path) == rec and check_provenance(tmp_path, rec) == []
    other = provenance_record("simforcing data synth --out D --num-train 4", {"num_train": 4, "shape": (32, 48)},
                              seed=0, inputs={"parent": "abc"})
    diff = check_provenance(tmp_path, other)
    assert "sizes.num_train: recorded 20, asked 4" in diff and any(d.startswith("command:") for d in diff)
    moved = json.loads(json.dumps(rec))
    moved["code"]["git"] = "another-commit"  # recorded and cited, but a commit alone does not make data stale
    assert check_provenance(tmp_path, moved) == [] and digest(moved) == digest(rec)
    moved["code"]["simforcing"] = "0.0.0-other"
    assert check_provenance(tmp_path, moved) == [f"code.simforcing: recorded {rec['code']['simforcing']!r}, asked "
                                                 "'0.0.0-other'"]


def test_quick_has_its_own_default_folder(capsys):
    assert main(["demo", "--quick", "--dry-run"]) == 0
    quick = json.loads(capsys.readouterr().out)
    assert main(["demo", "--dry-run"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert Path(quick["data"]["root"]).parent != Path(full["data"]["root"]).parent
    assert quick["data"]["root"] == "runs/demo_quick/data" and quick["model"]["vae"]["path"] == "runs/demo_quick/vae"
    assert full["data"]["root"] == "runs/demo/data"


class _Stop(Exception):
    """Ends the demo after stage 1 (the evaluation is not what is tested here)."""


@pytest.fixture
def stages(monkeypatch):
    """The demo's data generation, VAE fit and training replaced by recorders that write the files the demo reads."""
    import simforcing.demo as demo

    calls: dict[str, list] = {"generate": [], "fit": [], "train": []}

    def generate(out, **kw):
        calls["generate"].append(kw["num_train"])
        out = Path(out)
        shutil.rmtree(out, ignore_errors=True)
        (out / "meta").mkdir(parents=True)
        (out / "meta" / "info.json").write_text(json.dumps({"num_train": kw["num_train"]}))
        for name in ("stats.json",):
            (out / "meta" / name).write_text("{}")
        (out / "text_cache").mkdir()
        (out / "text_cache" / "info.json").write_text("{}")
        if kw.get("finish"):
            kw["finish"](out)
        return out

    def fit(root, cfg, out_dir=None, **kw):
        calls["fit"].append(str(root))
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "config.json").write_text(json.dumps({"kind": "demo", "fitted_on": str(root)}))
        return None, {}

    def train(cfg, run_dir, stage, teacher_run=None, resume=False, progress=True, method=None):
        calls["train"].append((stage, Path(run_dir).name, cfg.train.max_steps, resume))
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "run.json").write_text(json.dumps({"run_id": "x", "stage": stage}))
        (run_dir / "status.json").write_text(json.dumps({"state": "finished", "step": cfg.train.max_steps}))
        return {"state": "finished", "step": cfg.train.max_steps, "exit_code": 0}

    def evaluate(*a, **k):
        raise _Stop

    monkeypatch.setattr(demo, "generate_dataset", generate)
    monkeypatch.setattr(demo, "finalize_dataset", lambda root: None)
    monkeypatch.setattr(demo, "fit_demo_vae", fit)
    monkeypatch.setattr(demo, "train_run", train)
    monkeypatch.setattr(demo, "evaluate_run", evaluate)
    return calls


def _demo(out: Path, quick: bool) -> None:
    from simforcing.demo import demo_budget, demo_config, run_demo

    budget = demo_budget(quick)
    cfg = demo_config(budget, out / "data", out / "vae", [])
    with pytest.raises(_Stop):
        run_demo(out, out / "data", budget, cfg)


def test_demo_remakes_data_vae_and_stage1_that_another_demo_run_made(stages, tmp_path, capsys):
    out = tmp_path / "demo"
    _demo(out, quick=True)  # e.g. `simforcing demo --quick --out runs/demo`
    assert stages["generate"] == [4] and len(stages["fit"]) == 1 and stages["train"] == [("pretrain", "stage1", 30,
                                                                                           False)]
    assert "--num-train 4" in read_provenance(out / "data")["command"]

    _demo(out, quick=True)  # the same run again: everything is reused
    assert stages["generate"] == [4] and len(stages["fit"]) == 1 and len(stages["train"]) == 1
    assert "reusing the synthetic benchmark" in capsys.readouterr().out

    _demo(out, quick=False)  # then `make demo` into the same folder: nothing of the quick run is reused
    text = capsys.readouterr().out
    assert stages["generate"] == [4, 20], "the full demo reused the quick demo's data"
    assert len(stages["fit"]) == 2, "the VAE fitted on the quick data was reused"
    assert stages["train"][-1] == ("pretrain", "stage1", 2500, False), "stage 1 of the quick data was reused"
    assert "regenerating" in text and "sizes.num_train: recorded 4, asked 20" in text, text
    assert "training" in text and "again" in text
    prov = read_provenance(out / "data")
    assert "--num-train 20" in prov["command"] and prov["sizes"]["num_train"] == 20  # what the report cites
    assert read_provenance(out / "stage1")["sizes"] == {"stage1_steps": 2500}


def test_demo_never_removes_a_folder_it_did_not_make(stages, tmp_path):
    out = tmp_path / "demo"
    (out / "stage1").mkdir(parents=True)
    (out / "stage1" / "notes.txt").write_text("mine")
    from simforcing.config import ConfigError

    with pytest.raises(ConfigError, match="not a run of this demo"):
        _demo(out, quick=True)
    assert (out / "stage1" / "notes.txt").read_text() == "mine"
