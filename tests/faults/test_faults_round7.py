"""Reliability, round 7 (issue 56's neighbours): the counts and weights of the sampling commands, a few-step student
given its teacher's sampler, a resumed run whose teacher is no longer what it recorded, a success judge's record, an
old checkpoint's config hash, a recipe where it cannot act, a twin record of another pairing, a status.json the demo
reads back. Each refusal names the flag, field or file and what to do, before anything is written; each has its
control."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from faultkit import ckpt, copy_run, digest, pretrain_args, refused

from simforcing.cli import main
from simforcing.config import ConfigError

pytestmark = pytest.mark.faults


def _sample(command: str, run: Path, tiny, out: Path, *extra: str) -> list:
    size = {"generate": ["--num-samples", "1"], "evaluate": ["--num-samples", "1"],
            "rollout": ["--horizon", "4", "--num-episodes", "1", "--videos", "0"],
            "sweep steps": ["--num-samples", "1", "--n-sim", "1", "--n-real", "1", "--w", "0"]}[command]
    return [*command.split(), "--ckpt", run, "--data", tiny[0], "--out", out, "--device", "cpu", *size, *extra]


# ----------------------------------------------------------------------------------------------------------------------
# Counts and weights of the sampling commands
# ----------------------------------------------------------------------------------------------------------------------

COUNTS = [("generate", ["--num-samples", "0"], "--num-samples: got 0"),  # wrote nothing and said "wrote 0 sample(s)"
          ("generate", ["--num-samples", "-2"], "--num-samples: got -2"),
          ("generate", ["--fps", "0"], "--fps: got 0"),  # ZeroDivisionError
          ("generate", ["--upscale", "0"], "--upscale: got 0"),
          ("evaluate", ["--num-samples", "0"], "--num-samples: got 0"),
          ("sweep steps", ["--w", "nan"], "--w: got nan"),  # swept into NaN scores, written
          ("sweep steps", ["--w", "-0.5"], "--w: got -0.5"),
          ("sweep steps", ["--n-real", "0"], "--n-real: got 0"),
          ("evaluate", ["--sample.w=inf"], "--sample.w: got 'inf'; expected a finite number")]  # NaN PSNR, written


@pytest.mark.parametrize("command,extra,needle", COUNTS, ids=[f"{c} {' '.join(e)}" for c, e, _ in COUNTS])
def test_a_count_or_weight_out_of_range_is_refused_before_any_work(ref, tiny, tmp_path, capsys, command, extra,
                                                                   needle):
    words = _sample(command, ref, tiny, tmp_path / "out")
    if extra[0] in words:  # replace the default given by _sample
        i = words.index(extra[0])
        words[i:i + 2] = extra
    else:
        words += extra
    refused(words, capsys, needle)
    assert not (tmp_path / "out").exists()


def test_control_the_smallest_counts_generate(ref, tiny, tmp_path):
    assert main([str(w) for w in _sample("generate", ref, tiny, tmp_path / "out", "--fps", "1",
                                         "--upscale", "1")]) == 0
    assert sorted(p.suffix for p in (tmp_path / "out").iterdir()) == [".gif", ".mp4", ".png"]


# ----------------------------------------------------------------------------------------------------------------------
# A few-step student given its teacher's sampler
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def student(stage2, tiny, tmp_path_factory) -> Path:
    """A finished 1-step K = 1 student of the stage-2 run (whose sampler is the preset's N_r = 10)."""
    run = tmp_path_factory.mktemp("faults_round7") / "student"
    assert main(["distill", "--teacher", str(stage2), "--steps", "1", "--data", str(tiny[0]), "--out", str(run),
                 "--no-progress", "--train.max_steps=1"]) == 0
    return run


def test_a_student_refuses_its_teachers_sampler_given_again(student, stage2, tiny, tmp_path, capsys):
    """`--sample.n_real=10` on a K = 1 student of a teacher at N_r = 10 was taken as no change (its config kept the
    teacher's N_r) and sampled at K = 1 without a word; now every command and the API refuse it like any other N_r.
    The control: the student's own K, and the other sampling settings."""
    from simforcing.api import WorldModelPipeline
    from simforcing.runs.folder import run_config

    teacher_n_real = run_config(stage2).sample.n_real
    assert teacher_n_real != 1
    for command in ("generate", "evaluate", "rollout"):
        refused(_sample(command, student, tiny, tmp_path / "out", f"--sample.n_real={teacher_n_real}"), capsys,
                "is a few-step student", f"--sample.n_real = {teacher_n_real}")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match="few-step student"):
        WorldModelPipeline.from_run(student, device="cpu", overrides=[f"--sample.n_real={teacher_n_real}"])
    assert main([str(w) for w in _sample("evaluate", student, tiny, tmp_path / "out", "--sample.n_real=1",
                                         "--sample.seed=2")]) == 0
    sampler = json.loads((tmp_path / "out" / "eval.json").read_text())["sampler"]
    assert (sampler["sampler"], sampler["n_real"], sampler["teacher_sampler"]["n_real"]) == ("fewstep", 1,
                                                                                             teacher_n_real)
    pipe = WorldModelPipeline.from_run(student, device="cpu", overrides=["--sample.seed=2"])
    assert pipe.world_model.cfg.sample.n_real == 1
    assert json.loads((student / "config.json").read_text())["sample"]["n_real"] == 1  # a new student records it


def test_a_students_export_samples_at_its_own_settings(student, tmp_path):
    """`export` of a student and ``from_pretrained``: the exported model is the student (its sampler the few-step
    one, at K), not its teacher's sampler."""
    from simforcing.api import WorldModelPipeline
    from simforcing.sample import sampler_for

    assert main(["export", "--ckpt", str(student), "--out", str(tmp_path / "export")]) == 0
    pipe = WorldModelPipeline.from_pretrained(tmp_path / "export", device="cpu")
    s = sampler_for(pipe.world_model).settings()
    assert (s["sampler"], s["n_real"], s["steps"]) == ("fewstep", 1, 1)


def test_distill_refuses_steps_below_one_and_a_weight_not_finite(stage2, tiny, tmp_path, capsys):
    words = ["distill", "--teacher", stage2, "--data", tiny[0], "--out", tmp_path / "student", "--no-progress",
             "--dry-run"]
    for extra, needle in ((["--steps", "0"], "--steps: got 0"), (["--steps", "-1"], "--steps: got -1"),
                          (["--steps", "1", "--w", "inf"], "--w: got inf")):
        refused(words + extra, capsys, needle)
    assert not (tmp_path / "student").exists()
    assert main([str(w) for w in words + ["--steps", "1"]]) == 0  # the control


# ----------------------------------------------------------------------------------------------------------------------
# A resumed run whose teacher is no longer what teacher.json records
# ----------------------------------------------------------------------------------------------------------------------


def _resumable_student(student: Path, stage2: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the student and of its teacher, teacher.json pointing at the copy (the student resumable)."""
    teacher = copy_run(stage2, tmp_path / "teacher")
    run = copy_run(student, tmp_path / "student")
    rec = json.loads((run / "teacher.json").read_text())
    rec["run"], rec["checkpoint"] = str(teacher.resolve()), str(teacher / "checkpoints" / Path(rec["checkpoint"]).name)
    (run / "teacher.json").write_text(json.dumps(rec))
    return run, teacher


def test_a_resumed_student_refuses_a_teacher_that_is_gone_or_retrained(student, stage2, tmp_path, capsys):
    """The teacher retrained (its recorded checkpoint pruned, a newer one there): the resume took the newest without
    a word and wrote it into teacher.json; the teacher removed: named. Nothing is written."""
    run, teacher = _resumable_student(student, stage2, tmp_path)
    words = ["distill", "--resume", "--out", run, "--no-progress", "--train.max_steps=2"]
    recorded = json.loads((run / "teacher.json").read_text())["checkpoint"]
    newer = Path(recorded).parent / "step_000099"
    shutil.move(recorded, newer)  # the recorded checkpoint gone, another one in its run
    before = digest(run)
    refused(words, capsys, "--teacher", Path(recorded).name, "no longer there", "retrained or pruned")
    assert digest(run) == before
    shutil.move(newer, recorded)
    shutil.rmtree(teacher)
    refused(words, capsys, "--teacher", str(teacher.resolve()), "no longer there", "restore it")
    assert digest(run) == before


def test_a_resumed_stage2_run_refuses_a_retrained_teacher(stage2, ref, tiny, tmp_path, capsys):
    """The same check for `train --resume` (its teacher.json was rewritten with the teacher's newest checkpoint);
    the control: the teacher's recorded checkpoint back, the resume runs."""
    teacher = copy_run(ref, tmp_path / "stage1")
    run = copy_run(stage2, tmp_path / "stage2")
    rec = json.loads((run / "teacher.json").read_text())
    name = Path(rec["checkpoint"]).name
    (run / "teacher.json").write_text(json.dumps({**rec, "run": str(teacher.resolve())}))
    shutil.move(teacher / "checkpoints" / name, tmp_path / name)
    before = digest(run)
    words = ["train", "--method", "sft", "--resume", "--out", run, "--data", tiny[0], "--no-progress",
             "--train.max_steps=2"]
    refused(words, capsys, "--teacher", name, "no longer there")
    assert digest(run) == before
    shutil.move(tmp_path / name, teacher / "checkpoints" / name)
    assert main([str(w) for w in words]) == 0
    assert json.loads((run / "teacher.json").read_text())["checkpoint"].endswith(name)


def test_a_resume_finds_the_recorded_teacher_checkpoint_from_another_directory(student, stage2, tmp_path,
                                                                                monkeypatch, capsys):
    """teacher.json recorded the checkpoint relative to the directory the run started in; from elsewhere the resume
    did not find it and took the teacher's newest. Now it is found in the recorded run, and the resume continues
    from it (the control of the refusals above)."""
    run, teacher = _resumable_student(student, stage2, tmp_path)
    rec = json.loads((run / "teacher.json").read_text())
    name = Path(rec["checkpoint"]).name
    rec["checkpoint"] = f"somewhere/else/checkpoints/{name}"
    (run / "teacher.json").write_text(json.dumps(rec))
    monkeypatch.chdir(tmp_path)
    assert main(["distill", "--resume", "--out", str(run), "--no-progress", "--train.max_steps=2"]) == 0
    assert Path(json.loads((run / "teacher.json").read_text())["checkpoint"]).name == name
    capsys.readouterr()


@pytest.mark.parametrize("edit,needle", [({"step": "six"}, "'step' must be an integer"),
                                         ({"run": 3}, "'run' must be a string"),
                                         ({"step": -1}, "'step' must be a step >= 0")])
def test_a_malformed_teacher_record_is_named(student, stage2, tmp_path, capsys, edit, needle):
    run, _ = _resumable_student(student, stage2, tmp_path)
    (run / "teacher.json").write_text(json.dumps({**json.loads((run / "teacher.json").read_text()), **edit}))
    refused(["distill", "--resume", "--out", run, "--no-progress", "--train.max_steps=2"], capsys, "teacher.json",
            needle, code=1)


# ----------------------------------------------------------------------------------------------------------------------
# A success judge's record
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def judge(tmp_path_factory) -> Path:
    """An (unfitted) success judge saved as `model fit-judge` saves one."""
    from simforcing.evaluate.probe import ProbeConfig
    from simforcing.policy.judge.success_judge import JudgeNet, SuccessJudge, save_judge

    bench = {"resolution": [32, 48], "layouts": 0, "predicates": {}, "camera": "external", "episodes": 1}
    net = JudgeNet(ProbeConfig(height=32, width=48, state_dim=3))
    return save_judge(SuccessJudge(net, bench, {}, 2), tmp_path_factory.mktemp("judge") / "j")


JUDGE_EDITS = [("consecutive 0", {"consecutive": 0}, "'consecutive' must be an integer >= 1"),  # every episode won
               ("consecutive text", {"consecutive": "two"}, "'consecutive' must be an integer"),  # a traceback
               ("consecutive 2.5", {"consecutive": 2.5}, "'consecutive' must be an integer"),  # read as 2
               ("no consecutive", {"consecutive": None}, "'consecutive' is missing"),
               ("benchmark a list", {"benchmark": [32, 48]}, "'benchmark' must be an object"),
               ("no benchmark", {"benchmark": None}, "'benchmark' must be an object"),
               ("resolution of one", {"benchmark": {"resolution": [32], "layouts": 0}}, "benchmark.resolution"),
               ("layouts negative", {"benchmark": {"resolution": [32, 48], "layouts": -1}}, "benchmark.layouts"),
               ("report a string", {"report": "fine"}, "'report' must be an object or null")]


@pytest.mark.parametrize("what,edit,needle", JUDGE_EDITS, ids=[w for w, _, _ in JUDGE_EDITS])
def test_a_judge_record_of_the_wrong_types_is_named(judge, tmp_path, what, edit, needle):
    from simforcing.policy.judge.success_judge import load_judge

    folder = Path(shutil.copytree(judge, tmp_path / "judge"))
    meta = json.loads((folder / "judge.json").read_text())
    meta.update(edit)
    if edit.get("consecutive", 1) is None:
        del meta["consecutive"]
    (folder / "judge.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=needle) as e:
        load_judge(folder)
    assert "judge.json" in str(e.value) and "fit-judge" in str(e.value)


def test_a_judge_record_control_and_a_version_1_judge(judge, tmp_path):
    """The judge as saved loads with its rule; a judge of format version 1 (before the rule) judges one frame."""
    from simforcing.policy.judge.success_judge import load_judge

    assert load_judge(judge).consecutive == 2
    folder = Path(shutil.copytree(judge, tmp_path / "judge"))
    meta = json.loads((folder / "judge.json").read_text())
    del meta["consecutive"]
    (folder / "judge.json").write_text(json.dumps({**meta, "version": 1}))
    assert load_judge(folder).consecutive == 1


# ----------------------------------------------------------------------------------------------------------------------
# An old checkpoint's config hash
# ----------------------------------------------------------------------------------------------------------------------


def test_a_field_added_since_does_not_refuse_an_old_checkpoint(ref, tiny, tmp_path, capsys):
    """A checkpoint written before checkpoints kept their config (meta.json's config_hash against RUN/config.json),
    by a version without a field Config has now: its config.json lacks the field, Config.load gives it its default
    and the hash of the loaded config differed — the resume was refused ("config.json is not the config"). The
    hash is now of config.json as written; a changed field still differs (the control)."""
    from simforcing.runs.checkpoint import config_dict_hash

    run = copy_run(ref, tmp_path / "run")
    old = json.loads((run / "config.json").read_text())
    del old["sample"]["compile"], old["train"]["compile"]  # fields a later version added
    (run / "config.json").write_text(json.dumps(old, indent=2) + "\n")
    for s in (4, 6):
        meta = json.loads((ckpt(run, s) / "meta.json").read_text())
        meta["files"].pop("config.json")
        meta["config_hash"] = config_dict_hash(old)  # what that version recorded
        (ckpt(run, s) / "meta.json").write_text(json.dumps(meta))
        (ckpt(run, s) / "config.json").unlink()
    changed = copy_run(run, tmp_path / "changed")
    assert main(pretrain_args(run, tiny, "--train.max_steps=7", resume=True)) == 0
    old["flow"]["shift"] = 3.0  # not architecture: only the hash can tell
    (changed / "config.json").write_text(json.dumps(old, indent=2) + "\n")
    refused(pretrain_args(changed, tiny, resume=True), capsys, "config_hash", "not the config", code=1)


# ----------------------------------------------------------------------------------------------------------------------
# A recipe where it cannot act
# ----------------------------------------------------------------------------------------------------------------------


def test_a_recipe_contradicted_or_without_its_data_is_refused(ref, tiny, tmp_path, capsys):
    """`data synth --recipe evaluator --pauses 0` took the recipe's 2 pauses without a word (a flag at its default
    read as not given); `train --recipe evaluator` on a synthetic dataset made without the recipe's operators trained
    the paper's recipe under the evaluator's name; an unknown recipe, and a recipe on `pretrain` (which has none),
    are refused by name. The control: the recipe on data that records its operators."""
    from simforcing.recipes import EVALUATOR, RECORDED_AS

    synth = ["data", "synth", tmp_path / "data", "--quick", "--recipe", "evaluator"]
    refused(synth + ["--pauses", "0"], capsys, "--pauses: set by --recipe evaluator")
    refused(synth + ["--action-noise", "0"], capsys, "--action-noise: set by --recipe evaluator")
    refused(["data", "synth", tmp_path / "data", "--quick", "--recipe", "evaluatr"], capsys, "unknown recipe")
    assert not (tmp_path / "data").exists()
    refused(pretrain_args(tmp_path / "run", tiny, "--recipe", "evaluator"), capsys, "--recipe")
    data = Path(shutil.copytree(tiny[0], tmp_path / "synthetic"))
    info = json.loads((data / "meta" / "info.json").read_text())
    info["synth"] = {"action_noise": None, "pauses": None, "failures": None}
    (data / "meta" / "info.json").write_text(json.dumps(info))
    train = ["train", "--method", "simforcing", "--teacher", ref, "--data", data, "--out", tmp_path / "run",
             "--recipe", "evaluator", "--dry-run"]
    refused(train, capsys, "--recipe evaluator", "action_noise None", "data synth --recipe evaluator")
    refused(train[:-3] + ["--recipe", "nope", "--dry-run"], capsys, "unknown recipe")
    recorded: dict = {}
    for dest, value in EVALUATOR.synth:
        section, key = RECORDED_AS[dest]
        recorded.setdefault(section, {})[key] = list(value) if isinstance(value, tuple) else value
    info["synth"] = recorded
    (data / "meta" / "info.json").write_text(json.dumps(info))
    assert main([str(w) for w in train]) == 0
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------------------------------------------------
# A twin record of another pairing
# ----------------------------------------------------------------------------------------------------------------------


def test_check_twin_refuses_a_record_of_another_pairing(tiny, tmp_path, capsys):
    """A dataset without twin records is named (missing_file); an arm dataset whose record holds a whole scene, and
    a full-scene dataset whose records hold the camera only, were rendered against videos of the other kind and
    their low PSNR reported as the twin's. The control: the full-scene dataset as written."""
    from simforcing.data.synthetic.generate import generate_dataset

    refused(["data", "check-twin", "--data", tiny[0]], capsys, "data error", "twin.json", code=1)
    scene = generate_dataset(tmp_path / "scene", num_train=0, num_val=1, num_sim_pool=0, length=3, height=16,
                             width=24, seed=3, progress=False, pairing="scene")
    assert main(["data", "check-twin", "--data", str(scene)]) == 0
    twin = scene / "episodes" / "ep_00000" / "twin.json"
    record = json.loads(twin.read_text())
    arm = Path(shutil.copytree(scene, tmp_path / "arm"))
    info = json.loads((arm / "meta" / "info.json").read_text())
    (arm / "meta" / "info.json").write_text(json.dumps({**info, "pairing": "arm"}))
    refused(["data", "check-twin", "--data", arm], capsys, "ep_00000", "a record of the whole scene",
            "show the arm alone", code=1)
    twin.write_text(json.dumps({k: v for k, v in record.items() if k != "scene"}))
    refused(["data", "check-twin", "--data", scene], capsys, "ep_00000", "a record of the arm alone",
            "show the whole scene", code=1)


# ----------------------------------------------------------------------------------------------------------------------
# A status.json the demo reads back
# ----------------------------------------------------------------------------------------------------------------------


def test_a_status_json_of_other_types_reads_as_not_finished(ref, tmp_path):
    """The demo's "is this run finished?" read status.json's step with int(): "600", NaN or a list ended in a
    traceback, 2.5 passed as 2. Now they read as not finished (the run is continued or trained again)."""
    from simforcing.runs.provenance import run_finished

    run = copy_run(ref, tmp_path / "run")
    assert run_finished(run, 6) and not run_finished(run, 7)  # the control
    for status in ({"state": "finished", "step": "6"}, {"state": "finished", "step": math.nan},
                   {"state": "finished", "step": 6.5}, ["finished"], {"state": "finished", "step": [6]}):
        (run / "status.json").write_text(json.dumps(status))
        assert not run_finished(run, 6)
