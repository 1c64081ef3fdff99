"""The world-model surfaces (issue 37): the Python API, `rollout`, `policy eval --env world-model`, `model fit-judge`
and a loaded policy's ``act`` refuse bad input by name before any work, leave nothing behind that reads as a valid
result, say exactly what judged and what was judged, and exit 130 with one line on Ctrl-C — also while a command is
still importing torch. Every refusal has its control: the same call on good input works."""

from __future__ import annotations

import json
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from faultkit import digest, stop_process, refused

from simforcing.cli import main
from simforcing.config import ConfigError
from test_policy import pcfg, tiny, world_model_run  # noqa: F401  (fixtures)
from test_world_model_eval import LAYOUTS, judge_dir, one_camera_policy  # noqa: F401  (fixtures)

pytestmark = pytest.mark.faults


def _data(tiny) -> Path:  # noqa: F811
    return tiny[2] / "data"  # the paired dataset (2 train, 1 val episodes of 13 frames)


def _wm_eval_words(wm, judge, out, *extra) -> list:
    return ["policy", "eval", "--env", "world-model", "--wm", wm, "--judge", judge, "--out", out, "--per-task", "1",
            "--max-steps", "4", "--layouts", str(LAYOUTS), *extra]


def _rollout_words(wm, tiny, out, *extra) -> list:  # noqa: F811
    return ["rollout", "--ckpt", wm, "--data", _data(tiny), "--horizon", "4", "--rows", "rollout", "--out", out,
            "--device", "cpu", *extra]


# ----------------------------------------------------------------------------------------------------------------------
# The Python API and a policy's act()
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pipe(world_model_run):  # noqa: F811
    from simforcing import WorldModelPipeline

    return WorldModelPipeline.from_run(world_model_run, device="cpu")


def _good(pipe) -> dict:
    rng = np.random.default_rng(0)
    d = pipe.cfg.data
    return dict(frame=rng.integers(0, 255, (40, 60, 3), dtype=np.uint8), instruction="open the drawer",
                state=rng.normal(0, 0.1, d.state_dim), actions=rng.normal(0, 0.05, (d.actions_per_window, d.action_dim)),
                arm_mask=np.zeros((40, 60), bool))


def test_the_api_checks_every_input_before_any_network_runs(pipe, monkeypatch):
    import simforcing.api as api

    good = _good(pipe)
    out = pipe(**good)  # the control
    assert out.video.dtype == np.uint8 and out.video.shape[0] == pipe.cfg.data.frames
    frame, state, actions = good["frame"], good["state"], good["actions"]
    nan_state, nan_actions = state.copy(), actions.copy()
    nan_state[2], nan_actions[1, 3] = np.nan, np.inf
    bad = {"frame": [(frame / 255.0, "frame: .*float64.*values in \\[0, 0.99.*\\* 255"),
                     (frame.transpose(2, 0, 1), "frame: .*looks like \\(C, H, W\\).*transpose"),
                     (np.concatenate([frame, frame[..., :1]], axis=2), "frame: .*RGBA.*\\[\\.\\.\\., :3\\]"),
                     (frame[:0], "frame: the image is empty"),
                     (frame[:2, :3], "frame: 2×3 is far below the model's resolution"),
                     (np.zeros((40, 400, 3), np.uint8), "frame: 40×400 has another aspect ratio")],
           "state": [(nan_state, "state: holds NaN or inf at \\[2\\]"), (state[:3], "state: expected shape")],
           "actions": [(nan_actions, "actions: holds NaN or inf"), (actions[:, :3], "actions: expected")],
           "instruction": [("", "instruction: expected a non-empty string"), (None, "instruction")],
           "arm_mask": [(np.zeros((10, 10), bool), "arm_mask: expected bool \\(40, 60\\)")]}
    monkeypatch.setattr(api, "sampler_for", lambda *a, **k: pytest.fail("a network ran on bad input"))
    monkeypatch.setattr(api, "WorldModelRollout", lambda *a, **k: pytest.fail("a rollout ran on bad input"))
    for name, cases in bad.items():
        for value, match in cases:
            with pytest.raises(ValueError, match=match):
                pipe(**dict(good, **{name: value}))
            with pytest.raises(ValueError, match=match):
                pipe.rollout(**dict(good, **{name: value}))
    with pytest.raises(ValueError, match="sim_frame: .*float"):
        pipe(**good, sim_frame=frame / 255.0)


def test_the_api_opens_world_model_runs_only_and_says_when_one_is_unfinished(world_model_run, one_camera_policy,  # noqa: F811
                                                                              judge_dir, tiny, tmp_path):  # noqa: F811
    import warnings

    from simforcing import WorldModelPipeline

    for folder, match in ((one_camera_policy, "run: .* is a policy run"), (judge_dir, "is a success judge"),
                          (_data(tiny), "is a dataset"), (tmp_path / "nowhere", "is not a folder")):
        with pytest.raises(ConfigError, match=match):
            WorldModelPipeline.from_run(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the control: a finished run loads without a word
        WorldModelPipeline.from_run(world_model_run)
    wm = Path(shutil.copytree(world_model_run, tmp_path / "wm"))
    st = json.loads((wm / "status.json").read_text())
    (wm / "status.json").write_text(json.dumps(dict(st, state="running")))
    with pytest.warns(UserWarning, match="not finished \\(interrupted\\) — scored its checkpoint at step"):
        WorldModelPipeline.from_run(wm)


def test_a_policy_refuses_images_and_states_it_cannot_act_on(one_camera_policy):  # noqa: F811
    import torch

    from simforcing.policy.infer import PolicyRunner
    from test_policy import _FakeText

    r = PolicyRunner.load(one_camera_policy)
    r._text_encoder = _FakeText(r.cfg)
    image = np.random.default_rng(0).integers(0, 255, (32, 48, 3), dtype=np.uint8)
    state = np.zeros(r.cfg.data.state_dim)
    acts = r.act(image, state, "open the drawer", torch.Generator().manual_seed(0))  # the control
    assert acts.shape == (r.cfg.data.actions_per_window, r.cfg.data.action_dim) and np.isfinite(acts).all()
    nan = state.copy()
    nan[0] = np.nan
    for img, st, match in ((image / 255.0, state, "image: .*float64.*\\* 255"),
                           (image.astype(np.float32), state, "image: .*float32"),
                           (image, nan, "state: holds NaN"), (image, state[:2], "state: expected shape")):
        with pytest.raises(ValueError, match=match):
            r.act(img, st, "open the drawer", torch.Generator().manual_seed(0))
    assert r.counts["chunks"] == 1  # nothing ran for the refused calls


def test_a_policy_whose_weights_diverged_refuses_to_return_actions(one_camera_policy):  # noqa: F811
    import torch

    from simforcing.errors import CheckpointError
    from simforcing.policy.infer import PolicyRunner
    from test_policy import _FakeText

    r = PolicyRunner.load(one_camera_policy)
    r._text_encoder = _FakeText(r.cfg)
    image = np.random.default_rng(0).integers(0, 255, (32, 48, 3), dtype=np.uint8)
    state = np.zeros(r.cfg.data.state_dim)
    assert np.isfinite(r.act(image, state, "open the drawer", torch.Generator().manual_seed(0))).all()  # control
    with torch.no_grad():  # what a diverged checkpoint holds
        for p in r.model.parameters():
            p.fill_(float("nan"))
    with pytest.raises(CheckpointError, match="step_0+3, step 3\\) produced non-finite actions for sample\\(s\\) \\[0\\]"):
        r.act(image, state, "open the drawer", torch.Generator().manual_seed(0))


# ----------------------------------------------------------------------------------------------------------------------
# The world-model commands: what they are given, what they record
# ----------------------------------------------------------------------------------------------------------------------


def test_world_model_commands_refuse_the_wrong_kind_of_folder_by_name(world_model_run, one_camera_policy,  # noqa: F811
                                                                      judge_dir, tiny, tmp_path, capsys):  # noqa: F811
    data, o = _data(tiny), tmp_path / "out"
    for folder, words in ((judge_dir, "is a success judge"), (data, "is a dataset"),
                          (one_camera_policy, "is a policy run")):
        refused(_rollout_words(folder, tiny, o), capsys, "--ckpt", words, "samples a world model")
        refused(["generate", "--ckpt", folder, "--data", data, "--out", o], capsys, "--ckpt", words)
        refused(["evaluate", "--ckpt", folder, "--data", data, "--out", o], capsys, "--ckpt", words)
        refused(_wm_eval_words(folder, judge_dir, o), capsys, "--wm", words)
    for folder, words in ((world_model_run, "is a stage-1 run"), (data, "is a dataset"),
                          (one_camera_policy, "is a policy run")):
        err = refused(_wm_eval_words(world_model_run, folder, o), capsys, "--judge", words, "not a success judge")
        assert f"--out {folder}" not in err  # never advised to write a judge into it
    refused(_wm_eval_words(world_model_run, judge_dir, o, "--runs", judge_dir), capsys, "--runs",
             "is a success judge")
    refused(["policy", "eval", "--env", "world-model", "--wm", world_model_run, "--out", o], capsys, "--judge")
    assert not o.exists()


def test_a_judge_is_never_written_into_a_run_folder(world_model_run, judge_dir, tiny, tmp_path, capsys):  # noqa: F811
    from simforcing.policy.judge.success_judge import load_judge, save_judge

    before = digest(world_model_run)
    with pytest.raises(ConfigError, match="is a stage-1 run .*; a success judge is written to a folder of its own"):
        save_judge(load_judge(judge_dir), world_model_run)
    refused(["model", "fit-judge", "--data", judge_dir.parent / "data", "--out", world_model_run, "--steps", "1"],
             capsys, "--out", "is a stage-1 run")
    assert digest(world_model_run) == before
    assert load_judge(save_judge(load_judge(judge_dir), tmp_path / "j")).source.path == str((tmp_path / "j").resolve())


def test_the_evaluation_records_what_judged_and_what_was_judged(world_model_run, judge_dir, tmp_path,  # noqa: F811
                                                                 capsys):
    from simforcing.policy.judge.success_judge import judge_identity

    out = tmp_path / "e"
    assert main([str(w) for w in _wm_eval_words(world_model_run, judge_dir, out, "--no-baselines",
                                                "--expert-noise", "0.01")]) == 0
    res = json.loads((out / "eval.json").read_text())
    source = judge_identity(judge_dir)
    assert res["judge"]["path"] == source.path == str(judge_dir.resolve()) and res["judge"]["sha256"] == source.sha256
    assert list(res["judge"]) == ["benchmark", "consecutive", "weights_sha256", "path", "sha256"]
    assert res["judge"]["benchmark"]["layouts"] == LAYOUTS
    wm = res["world_model"]
    assert wm["run"] == str(world_model_run.resolve()) and wm["finished"] is True and wm["step"] >= 1
    assert Path(wm["checkpoint"]).name == f"step_{wm['step']:06d}"
    assert "warning" not in capsys.readouterr().out
    unfinished = Path(shutil.copytree(world_model_run, tmp_path / "wm"))
    st = json.loads((unfinished / "status.json").read_text())
    (unfinished / "status.json").write_text(json.dumps(dict(st, state="running")))
    out2 = tmp_path / "e2"
    assert main([str(w) for w in _wm_eval_words(unfinished, judge_dir, out2, "--no-baselines",
                                                "--expert-noise", "0.01")]) == 0
    assert "warning: --wm" in capsys.readouterr().out
    rec = json.loads((out2 / "eval.json").read_text())["world_model"]
    assert rec["finished"] is False and rec["run_state"] == "interrupted"


def test_baselines_beside_a_policy_of_another_window(world_model_run, judge_dir, one_camera_policy):  # noqa: F811
    """The crash: the baselines plan 8 actions, this policy 4; the episodes now advance together on padded plans,
    each executing only actions its player planned."""
    from simforcing.policy.closed_loop.evaluate import Player
    from simforcing.policy.infer import PolicyRunner
    from simforcing.policy.judge.success_judge import load_judge
    from simforcing.policy.closed_loop.world_model_eval import evaluate_world_model

    assert PolicyRunner.load(one_camera_policy).cfg.data.actions_per_window != Player.span
    kw = dict(per_task=1, max_steps=6, layouts=LAYOUTS, jitter=0.03, progress=lambda s: None)
    alone = evaluate_world_model(str(world_model_run), load_judge(judge_dir), {"p": one_camera_policy},
                                 baselines=False, **kw)  # the control: the policy alone
    both = evaluate_world_model(str(world_model_run), load_judge(judge_dir), {"p": one_camera_policy}, **kw)
    assert set(both.rows) == {"scripted expert (ceiling)", "do nothing (floor)", "p"}
    assert max(both.executed.values()) <= min(4, alone.executed["p"]) and all(
        len(o.frame_judged) == 6 for per in both.episodes.values() for os_ in per.values() for o in os_)


# ----------------------------------------------------------------------------------------------------------------------
# Judge fitting
# ----------------------------------------------------------------------------------------------------------------------


def _episode(root: Path) -> tuple[str, Path]:
    from simforcing.data.format import read_splits

    eid = read_splits(root)["train"][0]
    return eid, root / "episodes" / eid


def _rewrite(path: Path, **changes) -> None:
    with np.load(path) as z:
        cols = {k: z[k] for k in z.files}
    cols.update({k: v(cols[k]) for k, v in changes.items()})
    with open(path, "wb") as f:
        np.savez(f, **cols)


def test_fit_judge_refuses_bad_data_before_writing_anything(judge_dir, world_model_run, tmp_path, capsys):  # noqa: F811
    from simforcing.policy.judge.success_judge import load_judge

    src = judge_dir.parent / "data"
    fit = ["model", "fit-judge", "--steps", "1", "--batch-size", "4"]

    def broken(name: str, **changes) -> Path:
        root = Path(shutil.copytree(src, tmp_path / name))
        eid, ep = _episode(root)
        for file, change in changes.items():
            _rewrite(ep / file, **change)
        return root

    def nan_at_0(x):
        x = x.astype(np.float32).copy()
        x[0] = np.nan
        return x

    cases = [(broken("nan_objects", **{"objects.npz": {"xyz": nan_at_0}}), "data error [non_finite]",
              "object positions hold NaN"),
             (broken("nan_states", **{"lowdim.npz": {"states": nan_at_0}}), "data error [non_finite]",
              "states hold NaN"),
             (broken("no_frames", **{"objects.npz": {"xyz": lambda x: x[:0]}}), "no frames to fit on"),
             (src, "never moves"),  # 9-frame layout episodes: no push or lift anywhere
             (world_model_run, "not a dataset (it is a stage-1 run"), (tmp_path, "not a dataset (no meta/info.json")]
    for i, (root, *needles) in enumerate(cases):
        out = tmp_path / f"judge{i}"
        refused([*fit, "--data", root, "--out", out], capsys, *needles, code=1)
        assert not out.exists()
    # one class only: the hand never within the reach radius (the object moved far away from it)
    far = Path(shutil.copytree(src, tmp_path / "far"))
    for eid in [p.name for p in (far / "episodes").iterdir()]:
        _rewrite(far / "episodes" / eid / "objects.npz", xyz=lambda x: x + 1.0 + 0.05 * np.arange(len(x))[:, None,
                                                                                                         None])
    refused([*fit, "--data", far, "--out", tmp_path / "jfar"], capsys, "one class only", "beyond the reach radius",
             code=1)
    # the control: the same data with simulator rollouts where objects move fits and loads
    out = tmp_path / "good"
    assert main([str(w) for w in [*fit, "--data", src, "--out", out, "--sim-episodes", "2", "--layouts",
                                  str(LAYOUTS)]]) == 0
    assert load_judge(out).source.path == str(out.resolve())


def test_an_interrupted_fit_leaves_nothing_that_loads(judge_dir, tmp_path, monkeypatch, capsys):  # noqa: F811
    import simforcing.policy.judge.success_judge as judge_mod
    from simforcing.policy.judge.success_judge import load_judge

    fit = ["model", "fit-judge", "--data", judge_dir.parent / "data", "--steps", "1", "--batch-size", "4",
           "--sim-episodes", "2", "--layouts", str(LAYOUTS)]
    old = Path(shutil.copytree(judge_dir, tmp_path / "old"))
    before = digest(old)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(judge_mod, "atomic_write_json", interrupted)  # Ctrl-C between the two files
    for out in (tmp_path / "new", old):
        err = refused([*fit, "--out", out], capsys, "interrupted; nothing was written", code=130)
        assert [line for line in err.splitlines() if "simforcing" in line] == [err.strip().splitlines()[-1]]
    assert not (tmp_path / "new").exists() and digest(old) == before and load_judge(old).source
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


# ----------------------------------------------------------------------------------------------------------------------
# Outputs, counts and interrupts
# ----------------------------------------------------------------------------------------------------------------------


def test_out_is_checked_before_the_work_and_a_rollout_replaces_its_earlier_one(world_model_run, tiny, tmp_path,  # noqa: F811
                                                                              capsys):
    out = tmp_path / "ro"
    assert main([str(w) for w in _rollout_words(world_model_run, tiny, out, "--videos", "1")]) == 0  # the control
    assert (out / "videos" / "episode_000.mp4").exists()
    first = json.loads((out / "rollout.json").read_text())
    assert main([str(w) for w in _rollout_words(world_model_run, tiny, out, "--videos", "0")]) == 0
    assert not (out / "videos").exists() and json.loads((out / "rollout.json").read_text())["horizon"] == \
        first["horizon"]  # the earlier rollout replaced as a whole: no old video beside the new results
    capsys.readouterr()
    (tmp_path / "file").write_text("x")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    for target, needle in ((tmp_path / "file", "is a file"), (mine, "holds files that are not a rollout (notes.txt)"),
                           (world_model_run, "is a stage-1 run")):
        before = digest(target) if target.is_dir() else target.read_text()
        refused(_rollout_words(world_model_run, tiny, target), capsys, "--out", needle)
        refused(["policy", "eval", "--no-baselines", "--expert-noise", "0.01", "--out", target], capsys, "--out")
        assert (digest(target) if target.is_dir() else target.read_text()) == before


def test_counts_out_of_range_are_config_errors(world_model_run, judge_dir, tiny, tmp_path, capsys):  # noqa: F811
    o = tmp_path / "o"
    refused(_rollout_words(world_model_run, tiny, o)[:-2] + ["--horizon", str(10 ** 15)], capsys,
             f"--horizon {10 ** 15}", "shorter than the horizon")
    refused(_rollout_words(world_model_run, tiny, o, "--num-episodes", "0"), capsys, "--num-episodes")
    for flag in ("--max-steps", "--per-task"):
        refused(["policy", "eval", "--no-baselines", "--expert-noise", "0.01", flag, str(10 ** 12), "--out", o],
                 capsys, flag, "expected an integer in [1, 10000]")
    refused(_wm_eval_words(world_model_run, judge_dir, o, "--execute", "64"), capsys, "--execute: got 64")
    refused(["model", "fit-judge", "--data", judge_dir.parent / "data", "--out", o, "--sim-episodes", str(10 ** 9)],
             capsys, "--sim-episodes")
    assert not o.exists()


def test_ctrl_c_in_the_world_model_commands_exits_130_with_one_line(world_model_run, judge_dir, tiny, tmp_path,  # noqa: F811
                                                                    monkeypatch, capsys):
    import simforcing.evaluate.rollouts as rollouts
    import simforcing.policy.closed_loop.world_model_eval as wme

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    earlier = tmp_path / "ro"
    assert main([str(w) for w in _rollout_words(world_model_run, tiny, earlier, "--videos", "0")]) == 0
    before = digest(earlier)
    monkeypatch.setattr(rollouts, "write_rollout_pictures", interrupted)  # after rollout.json, before the pictures
    err = refused(_rollout_words(world_model_run, tiny, earlier), capsys, "interrupted; nothing was written",
                   code=130)
    assert err.strip().count("\n") == 0 and digest(earlier) == before
    monkeypatch.setattr(wme, "collect_episodes", interrupted)
    refused(_wm_eval_words(world_model_run, judge_dir, tmp_path / "e", "--no-baselines", "--expert-noise", "0.01"),
             capsys, "interrupted; nothing was written", code=130)
    assert not (tmp_path / "e").exists()
    import simforcing.cli as cli

    monkeypatch.setattr(cli.importlib, "import_module", interrupted)  # Ctrl-C while the command's module imports
    refused(["rollout", "--help"], capsys, "simforcing rollout: interrupted while starting", code=130)


def test_ctrl_c_while_a_command_is_still_importing_torch(tmp_path):
    """A real SIGINT a second after start: the process is importing torch (or already past it); either way one line
    and 130, no traceback. SIGINT at its default in the child, as from a terminal (a background shell or a pytest
    worker starts it ignored, and Python keeps it so)."""
    import os
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "simforcing", "policy", "eval", "--no-baselines", "--expert-noise",
                             "0.01", "--out", str(tmp_path / "e")], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        stop_process(proc)
    # 130, or death by SIGINT (-2) after the line when the signal lands inside torch's own import machinery on a
    # loaded machine: a shell reports both as exit status 130 (128 + SIGINT), and neither leaves a traceback
    assert proc.returncode in (130, -signal.SIGINT) and "Traceback" not in out, out
    assert "simforcing policy eval: interrupted" in out and not (tmp_path / "e").exists()
