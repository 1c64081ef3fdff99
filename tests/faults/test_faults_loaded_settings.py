"""A loaded run is sampled as it was trained (issue 56: `evaluate` / `rollout` of a `blocks` run with
`--conditioning.path=concat` dropped the setting without a word). What a command that loads a world model
(`generate`, `evaluate`, `rollout`, `sweep`, the API's ``from_run(overrides=...)``) may change is how it samples and
what it is scored on — the data (bar what the network was built for), sample, eval and rollout sections,
train.device and train.mixed_precision; any other setting whose value differs from the run's (its network, condition
path and representation, flow, losses, training) is refused naming the flag, before any work, nothing written. So are
a condition its sampler never reads (oracle or render on a model that samples as w = 0, or with `--domain sim`), a
sampler setting a sweep sets from its own flags, and a few-step student's steps other than its own. Each with its
control: the run's own value, and the settings a loaded run honours, work. The same commands write their results
into a folder of their own: a run, a dataset or another command's results is refused, untouched."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from faultkit import refused

from simforcing.cli import main
from simforcing.config import ConfigError, load_config

pytestmark = pytest.mark.faults


def _words(command: str, run: Path, tiny, out: Path, *extra: str) -> list[str]:
    """``simforcing COMMAND`` of ``run`` on the tiny dataset at its smallest (one window, one episode)."""
    data = ["--data", str(tiny[0]), "--out", str(out), "--device", "cpu"]
    size = {"evaluate": ["--num-samples", "1"], "generate": ["--num-samples", "1"],
            "rollout": ["--horizon", "4", "--num-episodes", "1", "--videos", "0"],
            "sweep steps": ["--num-samples", "1", "--n-sim", "1", "--n-real", "1", "--w", "0"]}[command]
    return [*command.split(), "--ckpt", str(run), *data, *size, *extra]


UNHONOURED = [("evaluate", "--conditioning.path=concat", "conditioning.path = 'blocks'"),
              ("rollout", "--conditioning.path=concat", "conditioning.path = 'blocks'"),
              ("generate", "--conditioning.representation=motion", "conditioning.representation = 'latent'"),
              ("sweep steps", "--model.num_layers=3", "model.num_layers = 1"),
              ("evaluate", "--flow.shift=1.5", "flow.shift = 5.0"),
              ("rollout", "--loss.fm_real=0.123", "loss.fm_real = "),
              ("generate", "--train.lr=0.5", "train.lr = ")]


@pytest.mark.parametrize("command,flag,recorded", UNHONOURED)
def test_a_setting_the_loaded_run_cannot_honour_is_refused(ref, tiny, tmp_path, capsys, command, flag, recorded):
    refused(_words(command, ref, tiny, tmp_path / "out", flag), capsys, flag.split("=")[0], recorded,
            "a loaded run samples as it was trained")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["evaluate", "rollout", "generate", "sweep steps"])
def test_control_the_runs_own_values_and_the_sampling_settings_work(ref, tiny, tmp_path, command):
    """The run's own condition path given again, and the settings a loaded run honours (the sampler's steps, the
    device, the precision, the evaluation windows), run and are recorded where the command records its sampler."""
    own = ["--conditioning.path=blocks", "--model.num_layers=1", "--train.device=cpu", "--train.mixed_precision=no"]
    sampled = [] if command == "sweep steps" else ["--sample.n_real=2", "--sample.seed=3"]
    assert main(_words(command, ref, tiny, tmp_path / "out", *own, *sampled)) == 0
    if command == "evaluate":
        sampler = json.loads((tmp_path / "out" / "eval.json").read_text())["sampler"]
        assert (sampler["n_real"], sampler["seed"]) == (2, 3)


def test_a_condition_its_sampler_never_reads_is_refused(ref, stage2, tiny, tmp_path, capsys):
    """`sample.condition` oracle or render on a model trained without the condition (sft: it samples as w = 0) —
    `evaluate` and `generate` once scored it at w = 0 and recorded the condition — or at `--sample.w=0`, and any
    condition but the rollout with `evaluate --domain sim` (scored unconditioned): refused naming the condition.
    The control: the oracle condition on the SimForcing-style stage-1 run at w > 0."""
    for command, run, extra, needle in (
            ("evaluate", stage2, ["--sample.condition=render"], "trained without a simulation condition"),
            ("generate", stage2, ["--sample.condition=oracle"], "the recorded simulation video cannot act"),
            ("evaluate", ref, ["--sample.condition=oracle", "--sample.w=0"], "samples with sample.w = 0"),
            ("evaluate", ref, ["--sample.condition=oracle", "--domain", "sim"], "--domain sim")):
        refused(_words(command, run, tiny, tmp_path / "out", *extra), capsys, needle)
        assert not (tmp_path / "out").exists()
    assert main(_words("evaluate", ref, tiny, tmp_path / "out", "--sample.condition=oracle")) == 0
    assert json.loads((tmp_path / "out" / "eval.json").read_text())["sampler"]["condition"] == "oracle"


def test_a_sweep_refuses_what_its_own_flags_set(ref, stage2, tiny, tmp_path, capsys):
    """`sweep steps --sample.n_real=3` (swept by --n-real: the override was not used) and `sweep cfg --sample.w`
    (--w) are refused naming the flag that sets them; `sweep cfg` checks every run it loads."""
    refused(_words("sweep steps", ref, tiny, tmp_path / "out", "--sample.n_real=3"), capsys, "--sample.n_real",
            "--n-real")
    cfg = ["sweep", "cfg", "--ckpts", str(ref), str(stage2), "--data", str(tiny[0]), "--out", str(tmp_path / "out"),
           "--num-samples", "1", "--w", "0", "--device", "cpu"]
    refused(cfg + ["--sample.w=0.3"], capsys, "--sample.w", "--w")
    refused(cfg + ["--conditioning.p=0.7"], capsys, "--conditioning.p=0.7", str(stage2), "conditioning.p = 0.0")
    assert not (tmp_path / "out").exists()
    assert main(cfg + ["--sample.n_real=1"]) == 0  # the control


def test_the_api_refuses_the_same_overrides(ref):
    """``WorldModelPipeline.from_run(overrides=...)`` checks them against the checkpoint's own config."""
    from simforcing.api import WorldModelPipeline

    with pytest.raises(ConfigError, match="--conditioning.path=concat: .* was trained with conditioning.path"):
        WorldModelPipeline.from_run(ref, device="cpu", overrides=["--conditioning.path=concat"])
    pipe = WorldModelPipeline.from_run(ref, device="cpu", overrides=["--sample.w=1", "--train.mixed_precision=no"])
    assert pipe.world_model.cfg.sample.w == 1 and pipe.world_model.cfg.train.mixed_precision == "no"


def test_the_reverse_path_is_refused_too():
    """A `concat` run given `--conditioning.path=blocks` (the reverse of the issue's case), by the same check; its own
    path passes."""
    from simforcing.runs.loaded import check_sampling_overrides

    concat = load_config("demo", ["--conditioning.path=concat"])
    blocks = load_config("demo")
    with pytest.raises(ConfigError, match="--conditioning.path=blocks: concat_run was trained with conditioning.path "
                                          "= 'concat'"):
        check_sampling_overrides(concat, blocks, "concat_run")
    check_sampling_overrides(concat, copy.deepcopy(concat), "concat_run")


def test_a_few_step_student_samples_at_its_own_settings_only():
    """A student's N_s, N_r (its K) and w are its own: another value is refused naming the flag; its own values,
    and any other sampling setting, pass (``runs.loaded.check_sampling_overrides`` on a student's config)."""
    from simforcing.runs.loaded import check_sampling_overrides

    student = load_config("demo")
    student.fewstep.steps, student.fewstep.teacher_n_sim, student.fewstep.w = 2, 1, 0.6
    for field, value, ok in (("n_real", 5, False), ("n_real", 2, True), ("w", 1.0, False), ("w", 0.6, True),
                             ("n_sim", 3, False), ("seed", 7, True)):
        asked = copy.deepcopy(student)
        setattr(asked.sample, field, value)
        if ok:
            check_sampling_overrides(student, asked, "student")
        else:
            with pytest.raises(ConfigError, match=f"student is a few-step student .* asked --sample.{field} = "):
                check_sampling_overrides(student, asked, "student")


def test_the_demo_passes_a_sampling_command_only_what_it_honours(tmp_path):
    """`simforcing demo --model.num_layers=… --train.lr=… --sample.w=…`: the training jobs get every override, the
    commands that sample a trained run only the sampling ones (the rest is in the runs' configs; a loaded run would
    refuse them), the sweep and the few-step student not the sampler's steps and w (their own)."""
    from simforcing.demo.plan import build_plan, demo_budget

    ov = ["--model.num_layers=1", "--train.lr=0.001", "--sample.w=0.5", "--train.device=cpu"]
    plan = build_plan(tmp_path / "demo", None, demo_budget(True), ov, policy=False)
    assert all(o in plan.commands["train simforcing"] for o in ov)
    assert all(o in plan.commands["eval copy-first"] for o in ov)  # a baseline: no run to honour them
    for name, want in (("eval simforcing", ov[2:]), ("rollout simforcing", ov[2:]), ("videos sft", ov[2:]),
                       ("sweep steps", ov[3:]), ("eval simforcing few-step", ov[3:])):
        words = [w for w in plan.commands[name].split() if w.startswith(("--model.", "--train.", "--sample.w"))]
        assert words == want, name


# ----------------------------------------------------------------------------------------------------------------------
# The results folders of the commands that sample a loaded run
# ----------------------------------------------------------------------------------------------------------------------


def test_sampling_commands_never_write_into_another_commands_folder(ref, tiny, tmp_path, capsys):
    """`evaluate --out` a training run or a policy evaluation's folder (it wrote eval.json into the run, and replaced
    the policy evaluation's eval.json with its own), `generate --out` the dataset, `sweep steps --out` an
    evaluation's folder, `policy eval --out` a one-window evaluation's folder: refused before any work, each folder
    byte-identical. The controls: each command again into its own earlier results — `generate` replaces them whole,
    no earlier sample left beside the new ones."""
    from evalgen import evaluation
    from faultkit import copy_run, digest

    from simforcing.policy.closed_loop.results import WORLD_MODEL, EpisodeOutcome

    run = copy_run(ref, tmp_path / "run")
    evaluation(WORLD_MODEL, 2, lambda p, t, s: EpisodeOutcome(s, True, 3)).write(tmp_path / "policy_eval")
    assert main(_words("evaluate", ref, tiny, tmp_path / "window_eval")) == 0
    folders = {f: digest(f) for f in (run, tmp_path / "policy_eval", tmp_path / "window_eval", tiny[0])}
    for words, needle in ((_words("evaluate", ref, tiny, run), "is a stage-1 run"),
                          (_words("evaluate", ref, tiny, tmp_path / "policy_eval"), "holds a policy evaluation, not "
                                                                                    "a one-window evaluation"),
                          (_words("generate", ref, tiny, tiny[0]), "is a dataset"),
                          (_words("sweep steps", ref, tiny, tmp_path / "window_eval"), "an evaluation's results"),
                          (["policy", "eval", "--per-task", "1", "--max-steps", "2", "--out",
                            str(tmp_path / "window_eval")], "holds a one-window evaluation, not a policy evaluation")):
        refused(words, capsys, "--out", needle)
    assert {f: digest(f) for f in folders} == folders
    assert main(_words("evaluate", ref, tiny, tmp_path / "window_eval")) == 0
    (tmp_path / "samples").mkdir()
    (tmp_path / "samples" / "sample_007.gif").write_bytes(b"an earlier generate's")
    assert main(_words("generate", ref, tiny, tmp_path / "samples")) == 0
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == ["sample_000.gif", "sample_000.mp4",
                                                                        "sample_000.png"]
    for _ in range(2):
        assert main(_words("sweep steps", ref, tiny, tmp_path / "sweep")) == 0


def test_a_new_student_keeps_its_teachers_network(stage2, tiny, tmp_path, capsys):
    """`distill --conditioning.path=concat` (or another architecture) of a `blocks` teacher: refused naming the
    field before anything is written (it failed on loading the teacher's weights, "was the config changed?",
    leaving a run folder without a checkpoint). The control: the teacher's own path distils."""
    words = ["distill", "--teacher", str(stage2), "--data", str(tiny[0]), "--out", str(tmp_path / "student"),
             "--steps", "1", "--no-progress", "--train.max_steps=1"]
    refused(words + ["--conditioning.path=concat"], capsys, "conditioning.path: got 'concat'", "'blocks'")
    refused(words + ["--model.num_layers=2"], capsys, "model.num_layers: got 2")
    assert not (tmp_path / "student").exists()
    assert main(words + ["--conditioning.path=blocks"]) == 0
