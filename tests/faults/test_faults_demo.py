"""Demo provenance: OUT/data, OUT/vae and OUT/stage1 record what produced them and are made again when this demo run
asks for something else; `--quick` has its own default folder. The heavy stages are replaced by recorders (the real
demo runs in tests/test_demo.py), so what is checked here is the reuse decision itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simforcing.cli import main
from simforcing.runs.provenance import (PROVENANCE_FILE, check_provenance, code_version, digest, provenance_record,
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


def _finish(plan) -> None:
    """Pretend every job of ``plan`` ran: its start and end hooks (provenance records) and the files that say done."""
    from simforcing.demo.plan import run_finished  # noqa: F401  (the completeness rule the plan applies)

    for job in plan.jobs:
        if job.on_start:
            job.on_start()
        folder = Path(job.argv[job.argv.index("--out") + 1]) if "--out" in job.argv else None
        if job.name.startswith(("data", "scene data")):  # the benchmarks (arm and full scene), the long episodes
            folder = plan.data if job.name == "data" else folder
            (folder / "meta").mkdir(parents=True, exist_ok=True)
            (folder / "meta" / "info.json").write_text(json.dumps({"format": "simforcing-paired"}))
            (folder / "meta" / "stats.json").write_text("{}")
            (folder / "episodes").mkdir(exist_ok=True)
        elif folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            steps = [a for a in job.argv if a.startswith("--train.max_steps=")]
            if steps:  # a training run: finished at its step count
                (folder / "run.json").write_text(json.dumps({"run_id": "x"}))
                (folder / "status.json").write_text(json.dumps({"state": "finished",
                                                                "step": int(steps[0].split("=")[1])}))
            for name in ("config.json", "probe.json", "eval.json", "sweep_steps.json", "rollout.json", "judge.json",
                         "agreement.json", "estimate.json", "fidelity.json"):
                (folder / name).write_text("{}")
        if job.on_done:
            job.on_done()


def _plan(out: Path, quick: bool):
    from simforcing.demo import build_plan, demo_budget

    return build_plan(out, None, demo_budget(quick), [], seeds=1, full=False, jobs=2, policy=False)


def _todo(plan) -> list[str]:
    return [j.name for j in plan.jobs if not j.skip()]


def test_demo_remakes_data_vae_and_stage1_that_another_demo_run_made(tmp_path):
    out = tmp_path / "demo"
    quick = _plan(out, quick=True)  # e.g. `simforcing demo --quick --out runs/demo`
    assert {"data", "vae", "stage1", "train sft", "train simforcing"} <= set(_todo(quick))
    _finish(quick)
    assert "--num-train 4" in read_provenance(out / "data")["command"]
    assert _todo(_plan(out, quick=True)) == []  # the same run again: everything is reused

    full = _plan(out, quick=False)  # then `make demo` into the same folder: nothing of the quick run is reused
    todo = _todo(full)
    assert {"data", "vae", "stage1", "probe", "train sft", "train simforcing"} <= set(todo), todo
    text = "\n".join(full.notes)
    assert "regenerating" in text and "sizes.num_train: recorded 4, asked 20" in text, text
    assert "training" in text and "again" in text  # the quick stage-2 runs were removed
    assert not (out / "sft").exists() and not (out / "simforcing").exists()
    assert "--overwrite" in next(j for j in full.jobs if j.name == "data").argv
    assert "--overwrite" not in full.commands["data"]  # what the report cites
    _finish(full)
    prov = read_provenance(out / "data")
    assert "--num-train 20" in prov["command"] and prov["sizes"]["num_train"] == 20
    assert read_provenance(out / "stage1")["sizes"] == {"stage1_steps": 2000}


def test_another_spelling_of_the_same_folder_reuses_everything(tmp_path, monkeypatch):
    """`--out runs/demo` then `--out $PWD/runs/demo` (or `./runs/demo/`): the same folder, nothing made again, nothing
    removed; the recorded commands spell it relative to the working directory."""
    monkeypatch.chdir(tmp_path)
    plan = _plan(Path("demo"), quick=True)
    _finish(plan)
    assert "--out demo/data " in read_provenance(tmp_path / "demo" / "data")["command"]
    for spelling in (tmp_path / "demo", Path("./demo/"), tmp_path / "x" / ".." / "demo"):
        again = _plan(spelling, quick=True)
        assert _todo(again) == [] and again.notes == [], (spelling, again.notes)
    assert (tmp_path / "demo" / "sft" / "status.json").exists()
    elsewhere = tmp_path / "sub"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # from another working directory the recorded (relative) commands would not
    moved = _plan(tmp_path / "demo", quick=True)  # reproduce it: made again, and the note says which field differs
    assert "stage1" in _todo(moved) and "command: recorded 'simforcing" in "\n".join(moved.notes), moved.notes


def _strip_cwd(out: Path) -> None:
    """Make OUT's records look like those written before the working directory was recorded."""
    for f in out.rglob("provenance.json"):
        rec = json.loads(f.read_text())
        rec.pop("cwd", None)
        f.write_text(json.dumps(rec))


@pytest.mark.parametrize("legacy", [False, True])
def test_a_demo_run_from_another_directory_runs_from_where_its_folder_was_made(tmp_path, monkeypatch, legacy):
    """`cd runs && simforcing demo --out demo` after `simforcing demo --out runs/demo`: the demo runs from the
    directory the folder's records were made from (their recorded cwd; for older records, the directory their
    relative --out names the folder from), so nothing is made again and no finished run is removed — once a
    whole --full run's world models and policies were deleted this way — and it comes back afterwards."""
    import simforcing.demo as demo

    monkeypatch.chdir(tmp_path)
    _finish(_plan(Path("runs/demo"), quick=True))
    if legacy:
        _strip_cwd(tmp_path / "runs" / "demo")
    seen = {}

    def plan_only(out, data, budget, overrides, seeds, full, jobs, policy, echo):
        seen["cwd"], plan = Path.cwd(), _plan(out, quick=True)
        seen["todo"], seen["notes"] = _todo(plan), plan.notes
        return 0

    monkeypatch.setattr(demo, "_run_locked", plan_only)
    monkeypatch.chdir(tmp_path / "runs")
    lines = []
    assert demo.run_demo(Path("demo"), None, demo.demo_budget(True), echo=lines.append) == 0
    assert seen == {"cwd": tmp_path, "todo": [], "notes": []}, seen
    assert Path.cwd() == tmp_path / "runs" and "running from" in lines[0]
    assert (tmp_path / "runs" / "demo" / "sft" / "status.json").exists()


def test_a_folder_recorded_with_absolute_paths_or_from_a_lost_directory_is_refused_not_remade(tmp_path, monkeypatch):
    import simforcing.demo as demo
    from simforcing.config import ConfigError

    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    out = tmp_path / "demo"
    _finish(_plan(out, quick=True))  # outside the working directory: recorded with absolute paths
    _strip_cwd(out)
    monkeypatch.setattr(demo, "_run_locked", lambda *a, **k: _todo(_plan(a[0], quick=True)) == [] and 0)
    assert demo.run_demo(out, None, demo.demo_budget(True), echo=print) == 0  # still outside: the same spelling
    monkeypatch.chdir(tmp_path)  # inside: it would be spelled relative, so every record would look stale
    with pytest.raises(ConfigError, match="absolute path"):
        demo.run_demo(out, None, demo.demo_budget(True), echo=print)
    for f in out.rglob("provenance.json"):
        f.write_text(json.dumps({**json.loads(f.read_text()), "cwd": str(tmp_path / "gone")}))
    with pytest.raises(ConfigError, match="no longer exists"):
        demo.run_demo(out, None, demo.demo_budget(True), echo=print)
    assert (out / "sft" / "status.json").exists()


def test_an_unfinished_run_resumes_and_a_finished_one_is_reused(tmp_path):
    out = tmp_path / "demo"
    plan = _plan(out, quick=True)
    _finish(plan)
    (out / "sft" / "status.json").write_text(json.dumps({"state": "stopped", "step": 5}))
    (out / "sft" / "checkpoints").mkdir()
    again = _plan(out, quick=True)
    sft = next(j for j in again.jobs if j.name == "train sft")
    assert not sft.skip() and sft.argv[-1] == "--resume"
    assert next(j for j in again.jobs if j.name == "train simforcing").skip()


def test_demo_never_removes_a_folder_it_did_not_make(tmp_path):
    out = tmp_path / "demo"
    (out / "stage1").mkdir(parents=True)
    (out / "stage1" / "notes.txt").write_text("mine")
    from simforcing.config import ConfigError

    with pytest.raises(ConfigError, match="not a run of this demo"):
        _plan(out, quick=True)
    assert (out / "stage1" / "notes.txt").read_text() == "mine"


# ----------------------------------------------------------------------------------------------------------------------
# One demo per --out at a time, and Ctrl-C
# ----------------------------------------------------------------------------------------------------------------------


def test_a_second_demo_into_the_same_out_is_refused_at_once(tmp_path, capsys, monkeypatch):
    """The second demo used to plan and run beside the first (and once overwrote its job log) until the run locks
    refused it; now it is refused before planning, naming the first one's pid."""
    import subprocess
    import sys

    import simforcing.demo as demo

    out = tmp_path / "demo"
    code = ("import sys, time\nfrom simforcing.runs.locking import lock_folder\n"
            "lock = lock_folder(sys.argv[1], 'simforcing demo')\nprint('locked', flush=True)\ntime.sleep(600)\n")
    first = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "locked"

        def no_plan(*a, **k):
            raise AssertionError("the second demo planned (and would have run) beside the first")

        monkeypatch.setattr(demo, "build_plan", no_plan)
        assert main(["demo", "--quick", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"being written by process {first.pid}" in err and "simforcing demo" in err, err
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # no logs, nothing planned
    finally:
        first.kill()
        first.wait()


DRIVER = """
import sys
from pathlib import Path

import simforcing.demo as demo
from simforcing.demo.plan import Plan
from simforcing.jobs import Job


def plan(out, data, budget, overrides, seeds, full, jobs, policy):
    sleeper = Job("sleeper", [sys.executable, "-c", "import time; time.sleep(120)"], raw=True)
    return Plan(out=out, data=Path(out) / "data", budget=budget, jobs=[sleeper], evals={}, runs={}, sweeps={},
                videos={}, policy=None, methods=(), seeds=[], full=False, notes=[], commands={})


demo.build_plan = plan
from simforcing.cli import main

sys.exit(main(["demo", "--quick", "--out", sys.argv[1], "--no-policy"]))
"""


def test_ctrl_c_stops_the_demo_with_130_and_one_line(tmp_path):
    """Ctrl-C stops the jobs (as before) and then exits with the conventional 130 and one line saying how to
    continue, instead of a KeyboardInterrupt traceback."""
    import os
    import signal
    import subprocess
    import sys
    import time

    # as from a terminal: SIGINT at its default even when this suite runs in the background (a shell without job
    # control starts background commands with SIGINT ignored, and Python then keeps it ignored)
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "demo")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = ""
        deadline = time.monotonic() + 120
        while "sleeper: started" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert lines == ["simforcing demo: interrupted; run the same command again to continue: finished jobs are reused "
                     "and stopped training runs resume from their last checkpoint"], err
    assert "interrupted: stopping sleeper" in out


def test_full_has_its_own_default_folder(capsys):
    assert main(["demo", "--full", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["data"]["root"] == "runs/demo_full/data"
    assert main(["demo", "--quick", "--full", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["data"]["root"] == "runs/demo_quick_full/data"


def test_the_default_plan_has_no_video_base(tmp_path):
    """`make demo` keeps its jobs: no stage 0, stage 1 from the model's own initialisation, the policy section's
    three action-only policies (base, SFT WM, SimForcing WM), no probe of the video expert."""
    from simforcing.demo import build_plan, demo_budget

    plan = build_plan(tmp_path / "demo", None, demo_budget(True), [], seeds=1, full=False, jobs=2, policy=True)
    names = {j.name for j in plan.jobs}
    assert not any("video base" in n for n in names) and "policy probe" not in names
    s1 = next(j for j in plan.jobs if j.name == "stage1")
    assert "--init" not in s1.argv and s1.deps == ("vae",)
    assert {n for n in names if n.startswith("policy train")} == {
        "policy train action_only / base", "policy train action_only / SFT WM",
        "policy train action_only / SimForcing WM"}
    assert plan.seeds == [42]


def test_a_video_base_made_again_remakes_stage1_and_what_came_from_it(tmp_path):
    """--full: stage 1 starts from the video base (`pretrain --init OUT/video_base`): its record is one of stage 1's
    inputs, and the policies from it record it too. Another video-base budget remakes the video base, stage 1,
    stage 2 and the video-base policies; the demonstration data stays."""
    import dataclasses

    from simforcing.demo import build_plan, demo_budget

    out = tmp_path / "demo"
    b = demo_budget(True)
    plan = build_plan(out, None, b, [], seeds=1, full=True, jobs=2, policy=True)
    s0 = next(j for j in plan.jobs if j.name == "video base")
    assert s0.argv[:3] == ["pretrain", "--method", "video_prior"]
    assert s0.slots == s0.threads == b.stage1_threads  # stage 1's slots
    s1 = next(j for j in plan.jobs if j.name == "stage1")
    assert s1.deps == ("vae", "video base") and s1.argv[s1.argv.index("--init") + 1] == str(out / "video_base")
    vb = next(j for j in plan.jobs if j.name == "policy train action_only / video base")
    assert vb.argv[vb.argv.index("--init") + 1] == str(out / "video_base") and "video base" in vb.deps
    _finish(plan)
    (out / "policy" / "data" / "meta").mkdir(parents=True, exist_ok=True)  # `data synth-policy OUT` (no --out)
    (out / "policy" / "data" / "meta" / "info.json").write_text("{}")
    (out / "sweep_cfg" / "sweep_cfg.json").write_text("{}")  # --full's Tab. A1 sweep
    assert read_provenance(out / "video_base")["sizes"] == {"video_base_steps": b.transfer.video_base_steps}
    assert set(read_provenance(out / "stage1")["inputs"]) == {"data", "vae", "video base"}
    assert [j.name for j in build_plan(out, None, b, [], 1, True, 2, True).jobs if not j.skip()] == []
    longer = dataclasses.replace(b, transfer=dataclasses.replace(b.transfer,
                                                                 video_base_steps=b.transfer.video_base_steps + 1))
    todo = [j.name for j in build_plan(out, None, longer, [], 1, True, 2, True).jobs if not j.skip()]
    assert {"video base", "stage1", "train sft", "train simforcing", "policy train action_only / video base",
            "policy train action_only / SimForcing WM"} <= set(todo)
    assert "data" not in todo and "policy data" not in todo


def test_full_trains_the_world_models_at_the_policy_sections_seeds(tmp_path):
    from simforcing.demo import build_plan, demo_budget

    b = demo_budget(True)
    plan = build_plan(tmp_path / "demo", None, b, [], seeds=1, full=True, jobs=2, policy=True)
    names = {j.name for j in plan.jobs}
    seeds = [42 + k for k in range(b.transfer.wm_seeds)]
    assert plan.seeds == seeds and {f"train sft_seed{s}" for s in seeds[1:]} <= names
    assert not any(n.startswith("train joint_fm_seed") for n in names)  # the ablations keep --seeds
    assert "policy probe" in names and "policy train action_only / base" not in names
    missing = {d for j in plan.jobs for d in j.deps if d not in names}
    assert not missing and len(names) == len(plan.jobs)


@pytest.mark.parametrize("full", [False, True])
def test_a_dataset_the_user_gives_makes_a_runnable_graph(tmp_path, full):
    """`demo --data DIR`: no `data` job, so no job may wait for one (the judge once did, and the scheduler refused the
    whole --full graph before it started)."""
    from simforcing.demo import build_plan, demo_budget
    from simforcing.jobs import check_graph

    plan = build_plan(tmp_path / "demo", tmp_path / "mine", demo_budget(True), [], seeds=1, full=full, jobs=2,
                      policy=True)
    names = {j.name for j in plan.jobs}
    assert "data" not in names and "judge" in names
    check_graph(plan.jobs, 2)
    assert "--data" in next(j for j in plan.jobs if j.name == "judge").argv
