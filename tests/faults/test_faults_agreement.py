"""`simforcing policy agreement` compares matching evaluations only: the same scenes (seed, layouts, jitter, step
limit, per-task count), the same policies — by the run each one scored, not by its row name —, the same tasks and
episodes, the same judge. Anything else, and a results file of another kind, is refused by name before anything is
written. Each case has its control: the same command on matching evaluations works.

The world model here is ``copy-first`` (the floor "world model" that repeats the first frame): the matching rules do
not depend on which world model made the frames, and it needs no trained world model. The players are policy runs
only (the tiny policies' window is shorter than the scripted players' chunk)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from faultkit import POLICY_TINY, copy_run

from simforcing.cli import main

pytestmark = pytest.mark.faults

LAYOUTS, JITTER = 2, 0.03


@pytest.fixture(scope="module")
def judges(tmp_path_factory) -> tuple[Path, Path]:
    """A success judge fitted for a few steps on layout episodes, and a second one whose weights differ."""
    from simforcing.data.synthetic.generate import generate_dataset
    from simforcing.policy.judge.success_judge import JudgeFitOptions, fit_judge, load_judge, save_judge
    from simforcing.policy.judge.sim_frames import simulated_frames

    tmp = tmp_path_factory.mktemp("agreement_judge")
    data = generate_dataset(tmp / "data", num_train=0, num_val=0, num_sim_pool=0, length=9, height=32, width=48,
                            seed=3, progress=False, layout_train=2, layouts=LAYOUTS)
    rollouts = simulated_frames(2, 32, 48, LAYOUTS, max_steps=15, progress=False)  # scene 1: the object moves
    first = save_judge(fit_judge([data], 32, 48, JudgeFitOptions(steps=2, batch_size=8), progress=False,
                                 rollouts=rollouts), tmp / "judge")
    other = load_judge(first)
    with torch.no_grad():
        next(other.net.parameters()).add_(1e-3)
    return first, save_judge(other, tmp / "other_judge")


@pytest.fixture(scope="module")
def policies(tiny, tmp_path_factory) -> tuple[Path, Path, Path]:
    """Three one-camera policy runs (copies of one 2-step run in three folders: three runs to an evaluation)."""
    from datagen import make_policy_dataset

    tmp = tmp_path_factory.mktemp("agreement_policies")
    data = make_policy_dataset(tmp / "data", cameras=1)
    run = tmp / "a"
    assert main(["policy", "train", "--setting", "action_only", "--init", "base", "--data", str(data), "--out",
                 str(run), "--no-progress", *POLICY_TINY, f"--model.vae.path={tiny[1]}", "--policy.cameras=1"]) == 0
    return run, copy_run(run, tmp / "b"), copy_run(run, tmp / "c")


@pytest.fixture(scope="module")
def evaluate(judges, policies, tmp_path_factory):
    """``evaluate(env, RUN_A, RUN_B[, RUN_C], *extra, judge=J)`` -> the folder of a `policy eval` of the runs as rows
    a, b (and c) (cached per arguments)."""
    tmp, made = tmp_path_factory.mktemp("agreement_evals"), {}

    def run(env: str, *runs_then_extra, judge: Path | None = None) -> Path:
        runs = [str(r) for r in runs_then_extra if isinstance(r, Path)]
        extra = tuple(x for x in runs_then_extra if not isinstance(x, Path))
        key = (env, *runs, extra, str(judge))
        if key not in made:
            out = tmp / f"e{len(made)}"
            where = ["--env", "world-model", "--wm", "copy-first"] if env == "wm" else []
            named = [f"{name}={r}" for name, r in zip("abc", runs)]
            assert main(["policy", "eval", *where, "--runs", *named,
                         "--no-baselines", "--per-task", "1", "--max-steps", "2", "--layouts", str(LAYOUTS),
                         "--jitter", str(JITTER), "--judge", str(judge or judges[0]), "--out", str(out),
                         *extra]) == 0
            made[key] = out
        return made[key]

    return run


def _agreement(sim: Path, wm: Path, out: Path) -> list[str]:
    return ["policy", "agreement", "--sim", str(sim), "--wm", f"copy-first={wm}", "--out", str(out), "--bootstrap",
            "20"]


def _refused(words: list[str], capsys, *needles: str) -> str:
    code = main(words)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, f"exit {code}\n{err}"
    assert all(n in err for n in needles), err
    assert not Path(words[words.index("--out") + 1]).exists()  # refused before anything was written
    return err


def test_matching_evaluations_give_the_agreement(evaluate, policies, tmp_path, capsys):
    """The control of every case below; agreement.json says what it is and what every evaluation shared."""
    from simforcing.policy.closed_loop.results import AgreementResult

    a, b, c = policies
    out = tmp_path / "agreement"
    assert main(_agreement(evaluate("sim", a, b), evaluate("wm", a, b), out)) == 0, capsys.readouterr().err
    raw = json.loads((out / "agreement.json").read_text())
    assert raw["format"] == "simforcing.policy-agreement" and raw["format_version"] == 2
    res = AgreementResult.read(out, "here")
    assert res.to_json() == raw  # written and read through the type
    assert res.players == res.learned == ["a", "b"]
    assert res.matched["layouts"] == LAYOUTS and res.matched["judge"]["weights_sha256"]


def test_runs_swapped_between_the_evaluations_are_refused(evaluate, policies, tmp_path, capsys):
    a, b, c = policies
    _refused(_agreement(evaluate("sim", a, b), evaluate("wm", b, a), tmp_path / "o"), capsys, "--wm copy-first",
             "policy 'a' scored", str(b.resolve()), str(a.resolve()), "matching evaluations only")


@pytest.mark.parametrize("extra,needle", [(("--jitter", "0.02"), "jitter 0.02 here, 0.03 there"),
                                          (("--max-steps", "3"), "max_steps 3 here, 2 there"),
                                          (("--per-task", "2"), "per_task 2 here, 1 there"),
                                          (("--scene-seed", "5"), "seed 5 here, 9000 there")])
def test_other_scenes_are_refused_with_the_setting_named(evaluate, policies, tmp_path, capsys, extra, needle):
    a, b, c = policies
    _refused(_agreement(evaluate("sim", a, b), evaluate("wm", a, b, *extra), tmp_path / "o"), capsys,
             "--wm copy-first", needle)


def test_a_policy_in_one_evaluation_only_is_named(evaluate, policies, tmp_path, capsys):
    a, b, c = policies
    _refused(_agreement(evaluate("sim", a, b), evaluate("wm", a, b, c), tmp_path / "o"), capsys,
             "policy 'c' is evaluated here but not in --sim")
    _refused(_agreement(evaluate("sim", a, b, c), evaluate("wm", a, b), tmp_path / "o"), capsys,
             "policy 'c' is evaluated in --sim but not here")


def test_another_judge_is_refused(evaluate, policies, judges, tmp_path, capsys):
    a, b, c = policies
    _refused(_agreement(evaluate("sim", a, b), evaluate("wm", a, b, judge=judges[1]), tmp_path / "o"), capsys,
             "--wm copy-first", "judged by another judge than the simulator evaluation's")


def test_results_of_another_kind_are_refused_by_name(evaluate, policies, judges, tmp_path, capsys):
    a, b, c = policies
    sim, wm = evaluate("sim", a, b), evaluate("wm", a, b)
    _refused(_agreement(wm, wm, tmp_path / "o"), capsys, "--sim:", "is a world-model evaluation",
             "expected a simulator evaluation")
    _refused(_agreement(sim, sim, tmp_path / "o"), capsys, "--wm copy-first:", "is a simulator evaluation",
             "expected a world-model evaluation")
    done = tmp_path / "agreement"
    assert main(_agreement(sim, wm, done)) == 0
    _refused(_agreement(done, wm, tmp_path / "o"), capsys, "--sim:", "holds an agreement of policy evaluations",
             "no eval.json")
    _refused(_agreement(sim, judges[0], tmp_path / "o"), capsys, "--wm copy-first:", "holds a success judge")
    other = tmp_path / "one_window"  # `simforcing evaluate`'s eval.json: another kind under the same file name
    other.mkdir()
    (other / "eval.json").write_text(json.dumps({"psnr": 20.0, "num_samples": 4}))
    _refused(_agreement(sim, other, tmp_path / "o"), capsys, "holds a one-window evaluation", "not a policy evaluation")
    future = tmp_path / "future"
    future.mkdir()
    (future / "eval.json").write_text(json.dumps({**json.loads((wm / "eval.json").read_text()), "format_version": 9}))
    _refused(_agreement(sim, future, tmp_path / "o"), capsys, "format version 9", "reads versions 1 to 2")
