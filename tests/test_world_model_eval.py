"""Policies evaluated inside a world model: the success judge, the world-model environment (nothing of the simulator
after the first frame; every player on the same scenes and noise), the agreement statistics and the named errors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from simforcing.config import ConfigError
from simforcing.data.synthetic.tasks import Task, task_success
from simforcing.policy.agreement.statistics import agreement, mmrv, pearson, spearman
from simforcing.policy.closed_loop.evaluate import (ExpertPlayer, RunPlayer, evaluate_synthetic, run_episode, scene_of)
from simforcing.policy.closed_loop.results import Confusion, EpisodeOutcome, JudgeRecord, PolicyEvaluation, PolicyRow
from simforcing.policy.closed_loop.synthetic import SyntheticTaskEnv, held_out_scenes
from simforcing.policy.closed_loop.tables import agreement_markdown
from simforcing.policy.infer import PolicyRunner
from simforcing.policy.judge.success_judge import (JudgeFitOptions, confusion, fit_judge, first_success,
                                                   frame_verdicts, load_judge, save_judge, true_readings)
from simforcing.policy.train import policy_train_run
from simforcing.runs.scored import ScoredRun
from test_policy import _FakeText, pcfg, tiny, world_model_run  # noqa: F401  (fixtures)

LAYOUTS = 2


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory):
    """A success judge fitted for a few steps on two layout episodes (its verdicts mean nothing; its files do)."""
    from simforcing.data.synthetic.generate import generate_dataset

    tmp = tmp_path_factory.mktemp("judge")
    data = generate_dataset(tmp / "data", num_train=0, num_val=0, num_sim_pool=0, length=9, height=32, width=48,
                            seed=3, progress=False, layout_train=2, layouts=LAYOUTS)
    from simforcing.policy.judge.sim_frames import simulated_frames

    rollouts = simulated_frames(2, 32, 48, LAYOUTS, max_steps=15, progress=False)  # scene 1: the object moves
    judge = fit_judge([data], 32, 48, JudgeFitOptions(steps=3, batch_size=8), progress=False, rollouts=rollouts)
    assert judge.report["rollout_frames"] == 2 * 16
    return save_judge(judge, tmp / "judge")


@pytest.fixture(scope="module")
def one_camera_policy(tiny, tmp_path_factory):  # noqa: F811
    run = tmp_path_factory.mktemp("pol1") / "p"
    res = policy_train_run(pcfg(tiny, "action_only", "base", "--policy.cameras=1"), run, "base", progress=False)
    assert res["state"] == "finished"
    return run


def _runner(run) -> PolicyRunner:
    r = PolicyRunner.load(run)
    r._text_encoder = _FakeText(r.cfg)
    return r


# ----------------------------------------------------------------------------------------------------------------------
# The judge's terms and the simulator's verdicts
# ----------------------------------------------------------------------------------------------------------------------


def test_the_judges_terms_give_the_simulators_verdicts_on_scripted_episodes():
    """The harness: the truth recorded per frame, in the judge's terms (ee − obj, obj − obj_0), through the judge's
    predicates, gives the simulator's own verdict and step on every scripted episode (expert and noisy expert)."""
    scenes = held_out_scenes(9000, 2, 30, layouts=LAYOUTS)
    checked = 0
    for player in (ExpertPlayer(0.0), ExpertPlayer(0.02)):
        for task, indices in scenes.items():
            for idx in indices:
                env = SyntheticTaskEnv(9000, idx, 30, 32, 48, LAYOUTS)
                try:
                    o = run_episode(env, player.env_chunk(scene_of(env)), 30, 1, record=True, tail=3)
                    verdicts = frame_verdicts(env.task, o.truth)
                finally:
                    env.close()
                hit = first_success(verdicts)
                assert (hit is not None) == o.success
                if o.success:
                    assert hit == o.steps  # frame k is the state after step k
                assert len(o.frames) == len(o.truth) == o.steps + 1 + (3 if o.success else 0) or \
                    len(o.frames) == 31
                checked += 1
    assert checked == 12


def test_policy_eval_with_a_judge_validates_it_on_its_own_scenes(judge_dir, tmp_path, capsys):
    """`policy eval --judge` in the simulator: the judge's verdicts beside MuJoCo's on every episode, and their
    agreement per task (what `policy agreement` reports as the harness check) in eval.json and the table — one
    command validates a judge, on any --scene-seed."""

    from simforcing.cli import main
    from simforcing.policy.judge.validation import judge_validation

    out = tmp_path / "e"
    assert main(["policy", "eval", "--no-baselines", "--expert-noise", "0.01", "--per-task", "1", "--max-steps", "4",
                 "--layouts", str(LAYOUTS), "--judge", str(judge_dir), "--scene-seed", "5", "--out", str(out)]) == 0
    res = PolicyEvaluation.read(out, "here")
    jv = res.judge_validation
    assert set(jv) == {"reach", "push", "grasp", "all"} and jv == judge_validation(res.episodes, res.tasks)
    assert json.loads((out / "eval.json").read_text())["judge_validation"] == {t: v.to_json() for t, v in jv.items()}
    eps = [o for per in res.episodes.values() for os_ in per.values() for o in os_]
    assert jv["all"].episode.n == len(eps) == 3 and res.seed == 5
    # the judge's readings against the truth: the median over every frame of |judge − truth| per output (cm)
    err = np.concatenate([np.asarray(o.frame_error_mm) for o in eps])
    assert err.shape == (sum(len(o.frame_judged) for o in eps), 6)
    assert list(jv["all"].median_error_cm.values()) == pytest.approx(np.median(err, axis=0) / 10, abs=0.006)
    assert "The judge on the simulator's own frames" in (out / "eval.md").read_text()
    assert "median |error| over every frame" in (out / "eval.md").read_text()
    from simforcing.api import evaluate_policies  # the Python face: the same evaluation, the same validation

    again = evaluate_policies({}, judge=judge_dir, baselines=False, expert_noise=(0.01,), per_task=1, max_steps=4,
                              layouts=LAYOUTS, seed=5, progress=lambda *_: None)
    assert again.judge_validation == jv and again.judge == res.judge
    capsys.readouterr()


def test_frame_verdicts_apply_the_benchmarks_predicates():
    rng = np.random.default_rng(0)
    tasks = [Task("reach", "", 0, "x"), Task("push", "", 0, "x", (0.0, -1.0)), Task("grasp", "", 0, "x")]
    for task in tasks:
        ee, obj = rng.normal(0, 0.08, (20, 3)), rng.normal(0, 0.05, (20, 3))
        want = [task_success(task, ee[t], obj[t], obj[0]) for t in range(20)]
        assert frame_verdicts(task, true_readings(ee, obj)).tolist() == want


def test_judge_files_round_trip_and_refuse_another_benchmark(judge_dir, tmp_path):
    judge = load_judge(judge_dir)
    x = torch.rand(3, 3, 32, 48) * 2 - 1
    assert judge.read(x, x, torch.zeros(3, 3)).shape == (3, 6)
    judge.check_benchmark(32, 48, LAYOUTS, "here")
    with pytest.raises(ConfigError, match="layouts"):
        judge.check_benchmark(32, 48, 0, "an evaluation without layouts")
    with pytest.raises(ConfigError, match="resolution"):
        judge.check_benchmark(64, 96, LAYOUTS, "a larger camera")
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "judge.json").write_text("{}")
    (tmp_path / "j" / "judge.safetensors").write_bytes(b"not a tensor file")
    with pytest.raises(ValueError, match="success judge"):
        load_judge(tmp_path / "j")
    # a hand-edited judge.json: the message names the file and the field
    meta = json.loads((judge_dir / "judge.json").read_text())
    meta["config"]["position_dims"] = "x, y"
    shutil.copytree(judge_dir, tmp_path / "k")
    (tmp_path / "k" / "judge.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"judge.json: config:position_dims: cannot read 'x, y' as tuple"):
        load_judge(tmp_path / "k")


# ----------------------------------------------------------------------------------------------------------------------
# The world-model environment
# ----------------------------------------------------------------------------------------------------------------------


def test_batched_inference_is_each_samples_own(one_camera_policy):
    r = _runner(one_camera_policy)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (32, 48, 3), dtype=np.uint8) for _ in range(3)]
    states = rng.normal(0, 0.1, (3, 7)).astype(np.float32)
    texts = ["open the drawer", "put the red block in the bowl", "open the drawer"]
    batch = r.act_batch(images, states, texts, [torch.Generator().manual_seed(i) for i in range(3)])
    for i in range(3):
        one = r.act(images[i], states[i], texts[i], torch.Generator().manual_seed(i))
        np.testing.assert_allclose(batch[i], one, atol=1e-5)


def _wm_eval(wm, judge_dir, runs, **kw):
    from simforcing.policy.closed_loop.world_model_eval import evaluate_world_model

    return evaluate_world_model(str(wm), load_judge(judge_dir), runs, per_task=1, max_steps=6, layouts=LAYOUTS,
                                jitter=0.03, progress=lambda s: None, **kw)


def test_nothing_of_the_simulator_is_read_after_the_first_frame(world_model_run, judge_dir, monkeypatch):
    import simforcing.policy.closed_loop.world_model_eval as wme
    from simforcing.data.synthetic.generate import EpisodePhysics

    made = wme.start_frames

    def then_forbid(*a, **k):
        out = made(*a, **k)

        def refuse(*_, **__):
            raise AssertionError("the simulator was read after the first frame")

        for cls, names in ((SyntheticTaskEnv, ("__init__", "step", "image", "state", "truth", "success")),
                           (EpisodePhysics, ("__init__", "drive", "advance", "state", "object_positions"))):
            for n in names:
                monkeypatch.setattr(cls, n, refuse)
        return out

    monkeypatch.setattr(wme, "start_frames", then_forbid)
    res = _wm_eval(world_model_run, judge_dir, {}, expert_noise=(0.01,))
    assert set(res.rows) == {"scripted expert (ceiling)", "do nothing (floor)", "scripted expert, noise 1 cm/step"}
    assert res.max_steps == 6 and all(len(o.frame_judged) == 6 for per in res.episodes.values()
                                      for os_ in per.values() for o in os_)


def test_every_player_sees_the_same_scenes_and_noise(world_model_run, judge_dir, one_camera_policy):
    res = _wm_eval(world_model_run, judge_dir, {"a": one_camera_policy, "b": one_camera_policy}, baselines=False)
    scenes = {p: [(t, o.scene) for t, os_ in per.items() for o in os_] for p, per in res.episodes.items()}
    assert scenes["a"] == scenes["b"]
    frames = res.frames
    for key, v in frames.items():
        name, task, scene = key.split("|")
        if name == "a":  # the same policy under two names: the same actions and world-model noise, the same video
            assert np.array_equal(v, frames[f"b|{task}|{scene}"])
    sim = evaluate_synthetic({"a": one_camera_policy}, per_task=1, max_steps=6, baselines=False, layouts=LAYOUTS,
                             progress=lambda s: None)
    assert [(t, o.scene) for t, os_ in sim.episodes["a"].items() for o in os_] == scenes["a"]


def test_the_commanded_gap_is_the_first_readings_hand_plus_the_commanded_displacement():
    from simforcing.policy.closed_loop.world_model_eval import commanded_gap_mm

    r0 = np.array([0.03, -0.04, 0.0, 0.0, 0.0, 0.0])  # the hand 5 cm from the object at the start
    commanded = np.array([[0.0, 0.0, 0.0], [-0.03, 0.04, 0.0], [-0.03, 0.04, 0.12]])
    np.testing.assert_allclose(commanded_gap_mm(r0, commanded), [50.0, 0.0, 120.0])


def test_noise_draws_keep_draw_zero_and_record_every_draws_verdict(world_model_run, judge_dir):
    """--draws K: draw 0 of every episode is the one-draw evaluation's episode (the same noise, so the same verdict,
    step and readings), and each episode records K verdicts whose mean is its soft prediction."""
    from simforcing.policy.estimate.trust import FEATURES, episode_features

    one = _wm_eval(world_model_run, judge_dir, {}, expert_noise=(0.02,))
    three = _wm_eval(world_model_run, judge_dir, {}, expert_noise=(0.02,), draws=3)
    assert one.draws == 1 and three.draws == 3
    for p, per in one.episodes.items():
        for t, outs in per.items():
            for a, b in zip(outs, three.episodes[p][t]):
                assert (a.scene, a.success, a.steps, a.frame_judged, a.frame_margin) == \
                    (b.scene, b.success, b.steps, b.frame_judged, b.frame_margin)
                assert a.draw_success is None and len(b.draw_success) == 3 and b.draw_success[0] == b.success
                assert b.draw_margin[0] == max(b.frame_margin)
                assert b.soft == np.mean(b.draw_success)
                f = episode_features(b.success, b.frame_judged, b.frame_margin, b.frame_arm_mm, b.draw_success)
                assert f[FEATURES.index("soft_shift")] == b.soft - b.success
                assert f[FEATURES.index("disagree")] == 4 * b.soft * (1 - b.soft)
    assert one.rows == three.rows  # rates count draw 0: what they mean at one draw
    for per in one.episodes.values():  # the commanded hand's distance from the object's start, every executed action
        for outs in per.values():
            assert all(len(o.frame_gap_mm) == len(o.frame_judged) and min(o.frame_gap_mm) >= 0 for o in outs)
    back = PolicyEvaluation.from_json(three.to_json())
    assert back.draws == 3 and back.episodes == three.episodes
    with pytest.raises(ConfigError, match="--draws"):
        _wm_eval(world_model_run, judge_dir, {}, draws=0)


def test_named_errors_for_what_the_world_model_cannot_serve(world_model_run, judge_dir, tiny, tmp_path,  # noqa: F811
                                                            capsys):
    from simforcing.cli import main
    from simforcing.policy.closed_loop.world_model_eval import check_compatible, load_environment

    two = tmp_path / "two"
    policy_train_run(pcfg(tiny, "action_only"), two, "base", progress=False)
    wm = load_environment(str(world_model_run))
    assert load_environment("copy-first") is None
    players = {"two cameras": RunPlayer("two cameras", PolicyRunner.load(two))}
    judge, larger = load_judge(judge_dir), load_judge(judge_dir)
    larger.benchmark["resolution"] = [64, 96]
    with pytest.raises(ConfigError, match=r"predicts external \(data.views\)"):
        check_compatible(wm, players, judge)
    with pytest.raises(ConfigError, match="--judge: .* was fitted on 64×96 frames; the world model .* predicts 32×48"):
        check_compatible(wm, {}, larger)  # the judge is named, not the policies
    runner = PolicyRunner.load(two)
    runner.cfg.policy.cameras, runner.cfg.data.action_dim = 1, 8
    with pytest.raises(ConfigError, match="8-D"):
        check_compatible(wm, {"p": RunPlayer("p", runner)}, judge)
    with pytest.raises(ConfigError, match="--wm: .* is a policy run"):
        load_environment(str(two))
    for argv, msg in ((["--wm", str(world_model_run)], "--judge"),
                      (["--wm", str(world_model_run), "--judge", str(tmp_path)], "holds no success judge"),
                      (["--wm", str(world_model_run), "--judge", str(judge_dir), "--layouts", "0"], "layouts")):
        rc = main(["policy", "eval", "--env", "world-model", "--out", str(tmp_path / "o"), "--per-task", "1",
                   "--max-steps", "4", *argv])
        err = capsys.readouterr().err
        assert rc == 2 and msg in err and "Traceback" not in err, err


# ----------------------------------------------------------------------------------------------------------------------
# Agreement statistics
# ----------------------------------------------------------------------------------------------------------------------


def test_mmrv_pearson_spearman_against_their_definitions():
    from scipy.stats import spearmanr

    r, s = np.array([0.9, 0.5, 0.1, 0.5]), np.array([0.6, 0.7, 0.0, 0.7])
    # SPEC §10 by hand: pairs ordered differently (strict comparisons): (0,1) 0.9>0.5 but 0.6<0.7 -> 0.4;
    # (0,3) the same -> 0.4; (1,3) 0.5=0.5 and 0.7=0.7 -> agree; per i the largest violated gap: 0.4, 0.4, 0, 0.4
    assert mmrv(r, s) == pytest.approx((0.4 + 0.4 + 0 + 0.4) / 4)
    assert mmrv(r, r) == 0.0
    assert pearson(r, s) == pytest.approx(np.corrcoef(r, s)[0, 1])
    assert spearman(r, s) == pytest.approx(spearmanr(r, s).statistic)


def test_confusion_and_kappa_by_hand():
    c = confusion([1, 1, 0, 0, 1, 0], [1, 0, 0, 0, 1, 1])
    assert (c.tp, c.fp, c.fn, c.tn) == (2, 1, 1, 2)
    po, pe = 4 / 6, (3 * 3 + 3 * 3) / 36
    assert c.kappa == pytest.approx((po - pe) / (1 - pe)) and c.precision == pytest.approx(2 / 3)
    assert c.to_json() == {"tp": 2, "fp": 1, "fn": 1, "tn": 2, "n": 6, "precision": c.precision, "recall": c.recall,
                           "accuracy": c.accuracy, "kappa": c.kappa}  # eval.json's judge_validation, as before
    assert Confusion.from_json(json.loads(json.dumps(c.to_json()))) == c


def _eval(rates: dict, tasks=("reach", "push"), n=4, learned=(), env="synthetic", judge=None) -> PolicyEvaluation:
    """A policy evaluation: player -> success per scene (the first k of n scenes of each task succeed); the learned
    players scored runs named after them."""
    scenes = {t: [10 * i + j for j in range(n)] for i, t in enumerate(tasks)}
    eps = {p: {t: [EpisodeOutcome(s, j < k, 5) for j, s in enumerate(scenes[t])] for t in tasks}
           for p, k in rates.items()}
    return PolicyEvaluation(env=env, seed=0, per_task=n, max_steps=5, tasks=list(tasks), layouts=2, jitter=0.03,
                            resolution=(32, 48), scenes=scenes,
                            rows={p: PolicyRow.of(e, tasks) for p, e in eps.items()},
                            episodes=eps, runs={p: ScoredRun(f"/runs/{p}", "ckpt", 1, True) for p in learned},
                            learned=list(learned), executed={p: 4 for p in rates}, seconds=1.0,
                            judge=judge if judge is not None else (JudgeRecord({}, 2, "j") if env != "synthetic"
                                                                   else None))


def _wm(rates: dict, learned=("a", "b"), **kw) -> PolicyEvaluation:
    return _eval(rates, learned=learned, env="world-model", **kw)


def test_agreement_ranks_and_counts_episodes():
    from dataclasses import replace

    sim = _eval({"a": 4, "b": 2, "c": 0}, learned=("a", "b"))
    same = _wm({"a": 3, "b": 2, "c": 0})
    swapped = _wm({"a": 1, "b": 2, "c": 0})
    res = agreement(sim, {"same order": same, "swapped": swapped}, n_boot=50)
    assert res.ranking["same order"]["all"].mmrv == 0.0
    assert res.ranking["swapped"]["all"].mmrv == pytest.approx((0.5 + 0.5 + 0) / 3)
    assert res.episode_agreement["same order"]["a"] == pytest.approx(6 / 8)
    assert res.ranking["swapped"]["learned"].n_policies == 2
    lo, hi = res.ranking["same order"]["all"].pearson_ci95
    assert lo <= res.ranking["same order"]["all"].pearson <= hi
    with pytest.raises(ConfigError, match="scenes: seed 1 here, 0 there"):
        agreement(sim, {"other": replace(same, seed=1)})


def test_agreement_holds_the_judge_fixed_and_splits_by_task():
    from dataclasses import replace

    from simforcing.policy.judge.validation import judge_validation

    sim = _eval({"a": 4, "b": 2, "c": 0}, learned=("a", "b"), judge=JudgeRecord({}, 2, "j"))
    judged = _wm({"a": 2, "b": 3, "c": 1})  # the judge's verdicts on the simulator's own frames
    for p, per in sim.episodes.items():
        for t, eps in per.items():
            per[t] = [replace(o, judged=j.success, frame_judged=[j.success], frame_true=[o.success])
                      for o, j in zip(eps, judged.episodes[p][t])]
    sim.judge_validation = judge_validation(sim.episodes, sim.tasks)
    assert PolicyEvaluation.from_json(json.loads(json.dumps(sim.to_json()))) == sim  # the typed validation round trip
    res = agreement(sim, {"as judged": judged, "as simulated": _wm({"a": 4, "b": 2, "c": 0})}, n_boot=50)
    alone = res.vs_judged_simulator
    assert alone["as judged"].all.mmrv == 0.0 and alone["as judged"].episodes_agreeing == 1.0
    assert res.ranking["as simulated"]["all"].mmrv == 0.0
    assert alone["as simulated"].episodes_agreeing == pytest.approx(
        res.episode_agreement["simulator frames through the judge"]["all"])
    # per task: the same statistics on that task's scenes only (reach: rates 4/4, 2/4, 0/4 as in the simulator)
    assert res.ranking["as simulated"]["all, reach only"].pearson == pytest.approx(1.0)
    assert "world model alone" in agreement_markdown(res)


def test_agreement_against_a_reference_world_model_pairs_the_scene_draws(tmp_path):
    """--reference: every other world model against the named one on the same episodes — its ranking against the
    reference's success, the share of episodes with the reference's verdict, and its change in Pearson / MMRV
    against the simulator, whose bootstrap draws are the reference's (a copy of the reference differs by exactly 0
    in every draw; by hand on the points)."""
    from simforcing.policy.agreement.statistics import average_success, outcome_matrix
    from simforcing.policy.closed_loop.results import AgreementResult

    sim = _eval({"a": 4, "b": 2, "c": 1, "d": 0}, learned=("a", "b"))
    teacher = _wm({"a": 3, "b": 2, "c": 1, "d": 0})
    student = _wm({"a": 2, "b": 3, "c": 1, "d": 0})
    copy = _wm({"a": 3, "b": 2, "c": 1, "d": 0})
    res = agreement(sim, {"teacher": teacher, "student": student, "copy": copy}, n_boot=200, reference="teacher")
    assert set(res.vs_reference) == {"student", "copy"}
    c, s = res.vs_reference["copy"], res.vs_reference["student"]
    assert c.pearson_diff == 0.0 and c.pearson_diff_ci95 == (0.0, 0.0) and c.mmrv_diff_ci95 == (0.0, 0.0)
    assert c.episodes_agreeing == 1.0 and c.to_reference.pearson == pytest.approx(1.0)
    players, tasks = list(sim.rows), list(sim.tasks)
    sim_m, scenes = outcome_matrix(sim, players, tasks)
    r = average_success(sim_m, scenes, tasks)
    a = average_success(outcome_matrix(student, players, tasks)[0], scenes, tasks)
    b = average_success(outcome_matrix(teacher, players, tasks)[0], scenes, tasks)
    assert s.pearson_diff == pytest.approx(np.corrcoef(r, a)[0, 1] - np.corrcoef(r, b)[0, 1])
    assert s.mmrv_diff == pytest.approx(mmrv(r, a) - mmrv(r, b))
    assert s.pearson_diff_ci95[0] <= s.pearson_diff <= s.pearson_diff_ci95[1]
    assert s.episodes_agreeing == pytest.approx(1 - 4 / 32)  # a: one scene per task moved off, b: one on
    assert s.to_reference.pearson == pytest.approx(np.corrcoef(a, b)[0, 1])
    assert AgreementResult.from_json(json.loads(json.dumps(res.to_json()))).vs_reference == res.vs_reference
    assert "Against the reference world model `teacher`" in agreement_markdown(res)
    with pytest.raises(ConfigError, match="--reference: 'nobody' is not one of the world models"):
        agreement(sim, {"teacher": teacher}, reference="nobody")


def test_evaluations_round_trip_and_older_files_load(tmp_path):
    """eval.json is written and read through PolicyEvaluation: the same object back; a file written before the tags
    (rows with the average and the seconds beside the task names, one ``execute``) loads through the same reader."""
    from simforcing.policy.closed_loop.results import PolicyEvaluation

    ev = _wm({"a": 3, "b": 1, "c": 0})
    ev.rows["a"] = PolicyRow(ev.rows["a"].tasks, ev.rows["a"].average, seconds=2.5)
    ev.write(tmp_path / "new")
    raw = json.loads((tmp_path / "new" / "eval.json").read_text())
    assert raw["format"] == "simforcing.policy-evaluation" and raw["format_version"] == 2
    assert PolicyEvaluation.read(tmp_path / "new", "here") == ev == PolicyEvaluation.from_json(ev.to_json())
    assert (tmp_path / "new" / "eval.md").read_text().startswith("| policy | reach | push | average |")
    old = {k: v for k, v in raw.items() if k not in ("format", "format_version", "executed")}
    old["execute"] = 4
    old["rows"] = {p: {**r["tasks"], "average": r["average"], **({"seconds": r["seconds"]} if r["seconds"] else {})}
                   for p, r in raw["rows"].items()}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "eval.json").write_text(json.dumps(old))
    from dataclasses import replace

    assert PolicyEvaluation.read(tmp_path / "old", "here") == replace(ev, executed={p: 4 for p in ev.learned})


def test_scatter_plot_draws_a_rate_at_the_edge_of_its_interval(tmp_path):
    """A Wilson bound a rounding error inside a 100 % rate (matplotlib refuses a negative error bar) is drawn as 0."""
    from dataclasses import replace

    from simforcing.policy.agreement.media import scatter_plot
    from simforcing.policy.closed_loop.results import Rate

    sim = _eval({"a": 4, "b": 2, "c": 0}, learned=("a", "b"))
    res = agreement(sim, {"wm": _wm({"a": 4, "b": 2, "c": 0})}, n_boot=20)
    res.sim["a"] = Rate(60, 60, 1.0, (0.94, 0.9999999999999999))
    res.envs["wm"]["c"] = replace(res.envs["wm"]["c"], ci95=(1e-17, 0.3))
    assert scatter_plot(res, tmp_path / "s.png").stat().st_size > 0
