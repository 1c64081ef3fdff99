"""A resume never changes what a run means (issue 45): `distill --resume` refuses another ``--w``, ``--objective``,
``--steps`` or ``--teacher`` than the student records, by name and before anything is written; `train --resume`
refuses another ``--teacher`` than its teacher.json (it once opened the new teacher's folder with the old teacher's
checkpoint, and recorded both). Every refusal has its control: the same resume with what the run records works."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from faultkit import copy_run, digest, refused

from simforcing.cli import main
from simforcing.config import ConfigError
from simforcing.fewstep.stage import distill_run
from simforcing.runs.folder import run_config

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def student(stage2, tiny, tmp_path_factory) -> Path:
    """A finished 1-step, K = 1 student of the stage-2 run (guidance weight 0.5 baked in)."""
    run = tmp_path_factory.mktemp("faults_distill") / "student"
    assert main(["distill", "--teacher", str(stage2), "--steps", "1", "--w", "0.5", "--data", str(tiny[0]), "--out",
                 str(run), "--no-progress", "--train.max_steps=1"]) == 0
    return run


def _distill_resume(run: Path, *extra) -> list:
    return ["distill", "--resume", "--out", run, "--no-progress", *extra]


@pytest.mark.parametrize("flag,value,needle", [
    ("--w", "0.3", "distils the guidance weight w = 0.5, not 0.3"),
    ("--objective", "progressive", "distils with objective 'trajectory', not 'progressive'"),
    ("--steps", "2", "distils 1 steps, not 2"),
])
def test_a_resumed_student_refuses_another_setting_by_name(student, flag, value, needle, capsys):
    before = digest(student)
    refused(_distill_resume(student, flag, value), capsys, flag, needle)
    assert digest(student) == before  # config.json, status.json, teacher.json and checkpoints untouched


def test_a_resumed_student_refuses_another_teacher(student, stage2, tmp_path, capsys):
    other = copy_run(stage2, tmp_path / "other_teacher")  # another run folder (same weights; only the record differs)
    before = digest(student)
    refused(_distill_resume(student, "--teacher", other), capsys, "--teacher", "teacher.json", str(other))
    with pytest.raises(ConfigError, match="teacher.json"):  # the Python API: the stage's own start checks it
        distill_run(run_config(student), student, other, resume=True, progress=False)
    assert digest(student) == before


def test_a_resumed_student_control(student, stage2, tmp_path, capsys):
    run = copy_run(student, tmp_path / "student")
    assert main([str(w) for w in _distill_resume(run, "--teacher", stage2, "--w", "0.5", "--objective",
                                                 "trajectory", "--steps", "1", "--train.max_steps=2")]) == 0
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    assert json.loads((run / "teacher.json").read_text())["run"] == str(stage2.resolve())
    capsys.readouterr()


def test_a_resumed_stage2_run_refuses_another_teacher(stage2, ref, tiny, tmp_path, capsys):
    run = copy_run(stage2, tmp_path / "stage2")
    other = copy_run(ref, tmp_path / "other_stage1")
    before = digest(run)
    words = ["train", "--method", "sft", "--resume", "--out", run, "--data", tiny[0], "--no-progress"]
    refused(words + ["--teacher", other], capsys, "--teacher", "teacher.json", str(ref.resolve()))
    assert digest(run) == before
    assert main([str(w) for w in words + ["--teacher", ref, "--train.max_steps=2"]]) == 0  # control
    assert json.loads((run / "teacher.json").read_text())["run"] == str(ref.resolve())
    capsys.readouterr()
