"""The success judge's simulator rollouts: which frames are rendered (the first, those nearest the task's decision
threshold, the rest at random), a deferred rendering equals the one made at the time, and the fitting command's
--sim-frames."""

from __future__ import annotations

import numpy as np
import pytest

from simforcing.data.synthetic.tasks import Task
from simforcing.policy.closed_loop.evaluate import ExpertPlayer, run_episode, scene_of
from simforcing.policy.closed_loop.synthetic import SyntheticTaskEnv
from simforcing.policy.judge.sim_frames import chosen_steps, decision_margin, rollout_frames, simulated_frames
from simforcing.policy.judge.success_judge import frame_verdicts, true_readings

LAYOUTS = 2
TASKS = [Task("reach", "", 0, "x"), Task("push", "", 0, "x", (0.6, -0.8)), Task("grasp", "", 0, "x")]


def test_decision_margin_is_positive_exactly_where_the_predicate_holds():
    """The margin's sign is the simulator's verdict (``frame_verdicts``), and its size the distance to the
    threshold computed by hand from the positions."""
    rng = np.random.default_rng(0)
    for task in TASKS:
        ee, obj = rng.normal(0, 0.07, (200, 3)), rng.normal(0, 0.05, (200, 3))
        truth = true_readings(ee, obj)
        margin = decision_margin(task, truth)
        assert ((margin > 0) == frame_verdicts(task, truth)).all()
        d = obj - obj[0]
        want = {"reach": 0.10 - np.linalg.norm(ee - obj, axis=1), "push": d[:, :2] @ np.array([0.6, -0.8]) - 0.04,
                "grasp": d[:, 2] - 0.05}[task.kind]
        assert margin == pytest.approx(want, abs=1e-6)


def test_chosen_steps_are_the_first_the_nearest_to_the_threshold_and_random_others():
    rng = np.random.default_rng(1)
    margin = rng.normal(0, 0.05, 31)
    for frames in (2, 5, 8, 12):
        got = chosen_steps(margin, frames, np.random.default_rng(2))
        assert len(got) == frames == len(set(got.tolist())) and got[0] == 0 and (np.diff(got) > 0).all()
        by_margin = sorted(range(1, 31), key=lambda t: abs(margin[t]))  # brute force: the nearest frames // 2
        assert set(by_margin[: frames // 2]) <= set(got.tolist())
    draws = {tuple(chosen_steps(margin, 8, np.random.default_rng(s))) for s in range(10)}
    assert len(draws) > 1  # the rest is drawn, not fixed
    assert chosen_steps(margin, 31, rng).tolist() == chosen_steps(margin, 40, rng).tolist() == list(range(31))


def test_deferred_rendering_equals_rendering_at_the_time():
    """Rendered from the kept physics state after the whole episode ran, each chosen frame is bit for bit the
    frame rendered while the episode ran (``run_episode(record=True)``), with the same truth."""
    for index in range(3):
        env = SyntheticTaskEnv(7000, index, 12, 32, 48, LAYOUTS)
        try:
            live = run_episode(env, ExpertPlayer(0.02, 7000).env_chunk(scene_of(env)), 12, 1, record=True, tail=12)
        finally:
            env.close()
        env = SyntheticTaskEnv(7000, index, 12, 32, 48, LAYOUTS)
        try:
            keep = chosen_steps(decision_margin(env.task, live.truth), 5, np.random.default_rng(3))
            frames, truth = rollout_frames(env, ExpertPlayer(0.02, 7000), 12, 5, np.random.default_rng(3))
        finally:
            env.close()
        assert frames.shape == (5, 32, 48, 3) and frames.dtype == np.uint8
        assert np.array_equal(frames, live.frames[keep]) and np.array_equal(truth, live.truth[keep])


def test_simulated_frames_renders_the_chosen_frames_of_more_rollouts():
    every = simulated_frames(2, 32, 48, LAYOUTS, max_steps=6, progress=False)
    some = simulated_frames(2, 32, 48, LAYOUTS, max_steps=6, progress=False, frames=3)
    assert len(every.frames) == 2 * 7 and len(some.frames) == 2 * 3
    assert some.episode.tolist() == [0, 0, 0, 1, 1, 1] and some.q0.shape == (6, 3)
    for e in (0, 1):  # each episode starts with its first frame (the judge's reference) and its q0
        first = (some.episode == e).nonzero()[0, 0]
        assert (some.frames[first] == every.frames[7 * e]).all() and (some.labels[first] == every.labels[7 * e]).all()
        assert (some.q0[some.episode == e] == every.q0[7 * e]).all()
    with pytest.raises(ValueError, match="frames: got 1"):
        simulated_frames(1, 32, 48, LAYOUTS, max_steps=6, progress=False, frames=1)


def test_fit_judge_refuses_too_few_rendered_frames(tmp_path, capsys):
    from simforcing.cli import main

    assert main(["model", "fit-judge", "--data", str(tmp_path), "--out", str(tmp_path / "j"), "--sim-episodes", "2",
                 "--sim-frames", "1"]) != 0
    assert "--sim-frames: got 1; expected at least 2" in capsys.readouterr().err
    assert not (tmp_path / "j").exists()


def test_the_demo_passes_its_judge_frames_budget_to_the_fitting_command(tmp_path):
    from dataclasses import replace

    from simforcing.demo.plan import build_plan, demo_budget

    b = demo_budget()
    for frames, want in ((None, []), (8, [("--sim-frames", "8")])):
        budget = replace(b, wm_eval=replace(b.wm_eval, judge_frames=frames))
        argv = build_plan(tmp_path / "demo", None, budget).commands["judge"].split()
        assert argv[argv.index("--sim-episodes") + 1] == str(b.wm_eval.judge_rollouts)
        assert [(a, argv[i + 1]) for i, a in enumerate(argv) if a == "--sim-frames"] == want
