"""The downstream policy (SPEC §9): masks per setting, the frozen video expert of action-only training, actions that
do not depend on future video, the observation computed once per chunk, initialisation from a world-model run (and
the error for another architecture), resume, named data errors, a closed-loop episode, the LIBERO loop.

Tiny configs on CPU: one layer, width 32, 5-frame windows, a demo VAE with an identity basis, random-content
datasets written directly in the policy format (no simulation) except the closed-loop test.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from datagen import make_policy_dataset
from simforcing.cli import main as cli_main
from simforcing.config import ConfigError, load_config
from simforcing.errors import DataError
from simforcing.models import mot
from simforcing.models.world_model import build_world_model
from simforcing.policy.closed_loop.evaluate import run_episode
from simforcing.policy.closed_loop.results import Rate, wilson
from simforcing.policy.configs import policy_run_config
from simforcing.policy.data import PolicyWindowDataset
from simforcing.policy.infer import PolicyRunner
from simforcing.policy.settings import ATTENTION_MODE, is_video_parameter
from simforcing.policy.train import policy_train_run
from simforcing.train import train_run
from test_train import TINY, make_tiny_data, tiny_cfg

POLICY = [o for o in TINY if not o.startswith("--train.max_steps")] + ["--train.max_steps=3"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    base = tmp_path_factory.mktemp("pol")
    _, vae = make_tiny_data(base)
    return make_policy_dataset(base / "policy"), vae, base


@pytest.fixture(scope="module")
def world_model_run(tiny, tmp_path_factory):
    """A tiny stage-1 world-model run (the `--init RUN` source)."""
    _, vae, base = tiny
    run = tmp_path_factory.mktemp("wm") / "run"
    res = train_run(tiny_cfg(base / "data", vae), run, "pretrain", progress=False)
    assert res["state"] == "finished"
    return run


def pcfg(tiny, setting, init="base", *extra):
    data, vae, _ = tiny
    return policy_run_config(setting, init, str(data), "demo", POLICY + [f"--model.vae.path={vae}", *extra])


def tiny_model(cfg, seed=0):
    torch.manual_seed(seed)
    m = build_world_model(cfg, attention_mode=ATTENTION_MODE[cfg.policy.setting])
    with torch.no_grad():  # the zero-initialised heads get values so every path changes the output
        m.action.proj_out.weight.normal_(0, 0.3)
        m.video.proj_out.weight.normal_(0, 0.2)
    return m.eval()


def inputs(cfg, b=2, seed=1):
    g = torch.Generator().manual_seed(seed)
    c, (h, w), lat = cfg.model.vae.latent_channels, cfg.latent_hw, cfg.latent_frames
    return dict(z_t=torch.randn(b, c, lat - 1, h, w, generator=g), tau_v=torch.rand(b, generator=g),
                z0=torch.randn(b, c, 1, h, w, generator=g),
                a_t=torch.randn(b, cfg.data.actions_per_window, 7, generator=g), tau_a=torch.rand(b, generator=g),
                state0=torch.randn(b, 7, generator=g), text=torch.randn(b, 5, cfg.model.text_dim, generator=g),
                text_mask=torch.tensor([[True] * 5, [True] * 2 + [False] * 3])[:b])


# -- masks and the network ------------------------------------------------------------------------------------------------
def test_masks_per_setting():
    n_first, n_video, n_action = 4, 12, 3
    unc = mot.build_mask(ATTENTION_MODE["unconditional"], n_first, n_video, n_action)[0, 0]
    va = mot.build_mask(ATTENTION_MODE["video_action"], n_first, n_video, n_action)[0, 0]
    ao = mot.build_mask(ATTENTION_MODE["action_only"], n_first, n_first, n_action)[0, 0]  # observation tokens only
    for m, nv in ((unc, n_video), (va, n_video), (ao, n_first)):
        assert not m[:nv, nv:].any()  # video never sees actions
        assert m[nv:, nv:].all()  # actions see actions
        assert not m[:n_first, n_first:nv].any()  # the first frame does not see the future
    assert unc[n_video:, :n_first].all() and not unc[n_video:, n_first:n_video].any()  # unconditional: first frame
    assert va[n_video:, :n_video].all()  # video + action: every video token
    assert ao[n_first:, :n_first].all()


def test_policy_head_starts_at_zero_and_world_model_has_none(tiny):
    cfg = pcfg(tiny, "unconditional")
    m = build_world_model(cfg, attention_mode="policy_unconditional")
    inp = inputs(cfg)
    with torch.no_grad():
        _, u_a = m.policy_forward(**inp)
    assert torch.equal(u_a, torch.zeros_like(u_a))
    wm = build_world_model(load_config("demo", TINY))
    assert not any(k.startswith("action.proj_out") for k in wm.state_dict())
    with pytest.raises(ValueError, match="action_head"):
        wm.policy_forward(**inp)


def test_unconditional_actions_do_not_depend_on_future_video(tiny):
    cfg = pcfg(tiny, "unconditional")
    m, inp = tiny_model(cfg), inputs(cfg)
    with torch.no_grad():
        _, a1 = m.policy_forward(**inp)
        _, a2 = m.policy_forward(**{**inp, "z_t": inp["z_t"] * 3 + 1, "tau_v": 1 - inp["tau_v"]})
        _, a0 = m.policy_forward(**{**inp, "z_t": None, "tau_v": None})
    torch.testing.assert_close(a1, a2, rtol=0, atol=1e-5)
    torch.testing.assert_close(a1, a0, rtol=0, atol=1e-5)


def test_action_only_step_reads_no_future_video(tiny):
    """The action-only loss is the same whatever the window's future latents hold (only z_0 is read)."""
    from simforcing.policy.steps import policy_step

    cfg = pcfg(tiny, "action_only")
    m, inp = tiny_model(cfg), inputs(cfg)
    z = torch.cat([inp["z0"], inp["z_t"]], 2)
    batch = {"z": z, "actions": inp["a_t"].clamp(-1, 1), "state0": inp["state0"], "text": inp["text"],
             "text_mask": inp["text_mask"]}
    losses = []
    for future in (z[:, :, 1:], z[:, :, 1:] * 5 - 2):
        with torch.no_grad():
            loss, logs = policy_step(m, None, {**batch, "z": torch.cat([z[:, :, :1], future], 2)}, cfg,
                                     torch.Generator().manual_seed(3))
        losses.append(float(loss))
        assert set(logs) == {"fm_action", "loss"}
    assert losses[0] == losses[1]


def test_video_action_actions_do_see_future_video(tiny):
    cfg = pcfg(tiny, "video_action")
    m, inp = tiny_model(cfg), inputs(cfg)
    with torch.no_grad():
        _, a1 = m.policy_forward(**inp)
        _, a2 = m.policy_forward(**{**inp, "z_t": inp["z_t"] * 3 + 1})
    assert (a1 - a2).abs().max() > 1e-3


@pytest.mark.parametrize("setting", ["unconditional", "action_only"])
def test_cached_observation_gives_the_plain_forward(tiny, setting):
    cfg = pcfg(tiny, setting)
    m, inp = tiny_model(cfg), inputs(cfg)
    with torch.no_grad():
        _, a = m.policy_forward(**{**inp, "z_t": None})
        obs = m.observation_context(inp["z0"], inp["state0"], inp["text"], inp["text_mask"])
        a_cached = m.action_velocity(obs, inp["a_t"], inp["tau_a"])
    torch.testing.assert_close(a_cached, a, rtol=0, atol=1e-5)


def test_observation_features_are_computed_once_per_chunk(tiny):
    cfg = pcfg(tiny, "action_only", "base", "--policy.flow_steps=7")
    data, vae, _ = tiny
    from simforcing.models.vae import load_vae
    runner = PolicyRunner(cfg, tiny_model(cfg), load_vae(cfg), json.loads((data / "meta" / "stats.json").read_text()),
                          text_encoder=_FakeText(cfg))
    video_calls = {"n": 0}
    hook = runner.model.video.patch_embedding.register_forward_hook(lambda *a: video_calls.__setitem__(
        "n", video_calls["n"] + 1))
    image = np.zeros((32, 96, 3), np.uint8)
    chunk = runner.act(image, np.zeros(7), "open the drawer")
    hook.remove()
    assert chunk.shape == (cfg.data.actions_per_window, 7)
    assert video_calls["n"] == 1  # the video expert ran once for 7 denoising steps
    assert runner.counts == {"observation_encodes": 1, "action_steps": 7, "chunks": 1}


class _FakeText:
    def __init__(self, cfg):
        self.dim = cfg.model.text_dim

    def encode(self, texts):
        return [torch.ones(3, self.dim) for _ in texts]


def test_runner_inputs_are_the_training_inputs(tiny):
    """Closed loop sees what training saw: the raw [external | wrist] frame -> the dataset's observation, the raw
    state -> its normalised state0, the instruction's unpadded embedding without mask -> the padded cached one with
    its mask (the same action velocity)."""
    from simforcing.data.format import episode_dir, read_video
    from simforcing.data.stats import Normalizer
    from simforcing.policy.data import read_policy_lowdim

    cfg = pcfg(tiny, "action_only")
    ds = PolicyWindowDataset(cfg, cfg.data.root)
    item = ds[1]
    eid, start = item["episode_id"], item["start"]
    m = tiny_model(cfg)
    runner = PolicyRunner(cfg, m, None, ds.stats)
    frame = read_video(episode_dir(cfg.data.root, eid) / "obs.mp4")[start]
    torch.testing.assert_close(runner.observation(frame)[0], item["obs"][:, :1], rtol=0, atol=0)
    state = read_policy_lowdim(cfg.data.root, eid)[1][start]
    torch.testing.assert_close(torch.from_numpy(Normalizer(ds.stats).normalize("state", state[None]))[0],
                               item["state0"])
    n = int(item["text_mask"].sum())
    z0 = torch.randn(1, cfg.model.vae.latent_channels, 1, *cfg.latent_hw, generator=torch.Generator().manual_seed(0))
    a_t, tau = torch.randn(1, cfg.data.actions_per_window, 7), torch.tensor([0.6])
    with torch.no_grad():
        _, u_train = m.policy_forward(None, None, z0, a_t, tau, item["state0"][None], item["text"][None],
                                      item["text_mask"][None])
        obs = m.observation_context(z0, item["state0"][None], item["text"][None, :n])
        u_eval = m.action_velocity(obs, a_t, tau)
    torch.testing.assert_close(u_eval, u_train, rtol=0, atol=1e-5)


# -- training --------------------------------------------------------------------------------------------------------------
def test_action_only_training_leaves_every_video_parameter_unchanged(tiny, world_model_run, tmp_path):
    cfg = pcfg(tiny, "action_only", str(world_model_run))
    res = policy_train_run(cfg, tmp_path / "ao", str(world_model_run), progress=False)
    assert res["state"] == "finished"
    from safetensors.torch import load_file
    after = load_file(str(Path(res["checkpoint"]) / "model.safetensors"))
    before = load_file(str(sorted((world_model_run / "checkpoints").iterdir())[-1] / "model.safetensors"))
    video = [k for k in after if is_video_parameter(k)]
    assert video and all(torch.equal(after[k], before[k]) for k in video)
    trained = [k for k in after if k.startswith("layers.0.action.") and k in before]
    assert any(not torch.equal(after[k], before[k]) for k in trained)
    init = json.loads((tmp_path / "ao" / "init.json").read_text())
    assert init["inherited"] and "action.proj_out.weight" in init["new"]


@pytest.mark.parametrize("setting", ["unconditional", "video_action"])
def test_joint_settings_train_both_experts(tiny, setting, tmp_path):
    res = policy_train_run(pcfg(tiny, setting), tmp_path / setting, "base", progress=False)
    assert res["state"] == "finished"
    logs = [json.loads(x) for x in (tmp_path / setting / "metrics.jsonl").read_text().splitlines()]
    assert "fm_video" in logs[-1] and "fm_action" in logs[-1]


def test_init_from_video_hands_on_the_video_expert_only(tiny, world_model_run):
    """policy.init_from=video: the world model's video expert is copied, its action side is not (the policy's own
    initialisation, listed as new), as from a video base; 'all' copies both."""
    from simforcing.policy.init import init_policy
    from simforcing.warmstart import is_action_side, run_state as wm_state
    _, wm, _ = wm_state(world_model_run, ("stage1", "stage2"))
    reports = {}
    for how in ("all", "video"):
        cfg = pcfg(tiny, "action_only", str(world_model_run), f"--policy.init_from={how}")
        torch.manual_seed(0)
        model = build_world_model(cfg, attention_mode=ATTENTION_MODE[cfg.policy.setting])
        own = {k: v.clone() for k, v in model.state_dict().items()}
        reports[how] = init_policy(model, cfg, str(world_model_run))
        for name, t in model.state_dict().items():
            if name in wm and tuple(wm[name].shape) == tuple(t.shape):
                expect = own[name] if (how == "video" and is_action_side(name)) else wm[name]
                assert torch.equal(t, expect.to(t.dtype)), (how, name)
    video_new = set(reports["video"].new) - set(reports["all"].new)
    assert video_new and all(is_action_side(n) for n in video_new)
    assert not any(is_action_side(n) for n in reports["video"].inherited)
    with pytest.raises(ConfigError, match="policy.init_from"):
        pcfg(tiny, "action_only", str(world_model_run), "--policy.init_from=action")


def test_init_from_another_architecture_lists_the_mismatched_tensors(tiny, world_model_run):
    with pytest.raises(ConfigError, match=r"another architecture.*ffn"):
        cfg = pcfg(tiny, "action_only", str(world_model_run), "--model.ffn_dim=48")
        policy_train_run(cfg, world_model_run.parent / "bad", str(world_model_run), progress=False)


def test_own_rollouts_are_refused_before_work(tiny, tmp_path):
    """train.rollout_prob is the world model's (own first frames of a video window); a policy refuses it by name."""
    with pytest.raises(ConfigError, match=r"train\.rollout_prob: got 0\.5; a policy trains on recorded"):
        policy_train_run(pcfg(tiny, "action_only", "base", "--train.rollout_prob=0.5"), tmp_path / "own", "base",
                         progress=False)
    assert not (tmp_path / "own").exists()


def test_resume_continues_exactly(tiny, world_model_run, tmp_path):
    """A run that lost its last checkpoint resumes from the one before and ends with the same losses and weights."""
    import shutil
    from safetensors.torch import load_file

    cfg = pcfg(tiny, "unconditional", str(world_model_run), "--train.max_steps=4")
    full = policy_train_run(cfg, tmp_path / "full", str(world_model_run), progress=False)
    part = tmp_path / "part"
    shutil.copytree(tmp_path / "full", part)
    shutil.rmtree(part / "checkpoints" / "step_000004")
    res = policy_train_run(cfg, part, str(world_model_run), resume=True, progress=False)
    assert full["state"] == res["state"] == "finished"

    def losses(run):
        return [(r["step"], r["loss"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]
    assert losses(part) == losses(tmp_path / "full")
    a = load_file(str(part / "checkpoints" / "step_000004" / "model.safetensors"))
    b = load_file(str(tmp_path / "full" / "checkpoints" / "step_000004" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


# -- named errors ------------------------------------------------------------------------------------------------------------
def test_a_dataset_without_the_wrist_camera_or_states_is_named(tiny, tmp_path):
    _, vae, base = tiny
    one = make_policy_dataset(tmp_path / "one", cameras=1)
    with pytest.raises(DataError, match="two cameras") as e:
        policy_run_config("action_only", "base", str(one), "demo", POLICY + [f"--model.vae.path={vae}"])
    assert e.value.kind == "missing_camera"
    nostate = make_policy_dataset(tmp_path / "nostate", states=False)
    cfg = policy_run_config("action_only", "base", str(nostate), "demo", POLICY + [f"--model.vae.path={vae}"])
    with pytest.raises(DataError, match="states") as e:
        PolicyWindowDataset(cfg, nostate)
    assert e.value.kind == "missing_states"
    with pytest.raises(DataError, match="simforcing-paired"):
        policy_run_config("action_only", "base", str(base / "data"), "demo", POLICY)


def test_cli_errors_and_libero_not_installed(tiny, tmp_path, capsys, monkeypatch):
    data, vae, _ = tiny
    assert cli_main(["policy", "train", "--setting", "action_only", "--init", str(tmp_path / "nope"), "--data",
                     str(data), "--out", str(tmp_path / "x")]) == 2
    assert "--init" in capsys.readouterr().err
    import builtins
    real_import = builtins.__import__

    def no_libero(name, *a, **k):
        if name.startswith("libero"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_libero)
    assert cli_main(["policy", "eval", "--env", "libero", "--runs", str(tmp_path), "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert "not installed" in err and "pip install" in err and ".[libero]" in err


# -- evaluation -------------------------------------------------------------------------------------------------------------
def test_wilson_interval():
    assert wilson(0, 10)[0] == 0.0 and 0.2 < wilson(0, 10)[1] < 0.35
    lo, hi = wilson(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-3) and hi == pytest.approx(0.7634, abs=1e-3)
    assert Rate.of(3, 4).rate == 0.75 and Rate.of(3, 4).ci95 == wilson(3, 4)


def test_scene_seed_draws_other_held_out_scenes_and_is_recorded(tmp_path, capsys):
    """`policy eval --scene-seed`: other scenes than every evaluation's default (9000), recorded in eval.json (which
    `policy agreement` compares); the same seed draws the same scenes."""
    def scenes(*seed):
        out = tmp_path / ("e" + "_".join(seed))
        assert cli_main(["policy", "eval", "--expert-noise", "0.02", "--no-baselines", "--per-task", "1",
                         "--max-steps", "4", "--out", str(out), *(["--scene-seed", *seed] if seed else [])]) == 0
        res = json.loads((out / "eval.json").read_text())
        return res["seed"], res["scenes"]

    default, other = scenes(), scenes("123")
    assert default[0] == 9000 and other[0] == 123 and default[1] != other[1]
    assert scenes("9000") == default
    capsys.readouterr()


@pytest.mark.slow
def test_a_short_closed_loop_episode_end_to_end(tiny, tmp_path):
    """A trained (tiny) policy acts in the synthetic MuJoCo scene: observation -> chunk -> steps, step limit."""
    from simforcing.policy.closed_loop.evaluate import evaluate_synthetic
    from simforcing.policy.closed_loop.synthetic import SyntheticTaskEnv

    res = policy_train_run(pcfg(tiny, "action_only"), tmp_path / "p", "base", progress=False)
    runner = PolicyRunner.load(tmp_path / "p")
    runner._text_encoder = _FakeText(runner.cfg)
    env = SyntheticTaskEnv(9000, 0, 6, 32, 48)
    try:
        out = run_episode(env, lambda e, i: runner.act(e.image(), e.state(), e.instruction), 6,
                          runner.cfg.policy.execute)
    finally:
        env.close()
    assert out.steps == 6 or out.success
    assert runner.counts["chunks"] == out.chunks >= 1
    ev = evaluate_synthetic({}, per_task=1, max_steps=20, progress=lambda s: None)
    assert ev.rows["scripted expert (ceiling)"].average.rate == 1.0
    assert ev.rows["do nothing (floor)"].average.rate == 0.0
    assert res["state"] == "finished"


def test_the_scripted_players_make_the_simulator_render_nothing(monkeypatch):
    """The scripted expert and do-nothing do not look at images (Player.looks): the simulator renders none for them
    (a frame costs several physics steps on a CPU), and the verdicts are the expert's and the floor's as before."""
    from simforcing.policy.closed_loop.evaluate import evaluate_synthetic
    from simforcing.policy.closed_loop.synthetic import SyntheticTaskEnv

    calls = []
    image = SyntheticTaskEnv.image
    monkeypatch.setattr(SyntheticTaskEnv, "image", lambda self, cameras=2: calls.append(cameras) or image(self, cameras))
    ev = evaluate_synthetic({}, per_task=1, max_steps=20, progress=lambda s: None, expert_noise=(0.01,))
    assert calls == []
    assert ev.rows["scripted expert (ceiling)"].average.rate == 1.0
    assert ev.rows["do nothing (floor)"].average.rate == 0.0


def test_libero_loop_drives_a_real_env_for_a_few_steps(tiny, tmp_path):
    if os.environ.get("SIMFORCING_TEST_LIBERO"):  # set by `make test-libero`: there a missing extra is a failure
        import libero.libero  # noqa: F401
    else:
        pytest.importorskip("libero.libero", reason="the LIBERO extra is not installed (`make test-libero` builds "
                            "an environment with it: docs/POLICY_TRANSFER.md)")
    from simforcing.policy.closed_loop.libero import evaluate_libero

    data, vae, _ = tiny
    cfg = pcfg(tiny, "action_only", "base", "--data.state_dim=8")
    model = tiny_model(cfg)
    stats = {"action": {"min": [-1] * 7, "max": [1] * 7}, "state": {"min": [-1] * 8, "max": [1] * 8}}
    from simforcing.models.vae import load_vae
    runner = PolicyRunner(cfg, model, load_vae(cfg), stats, text_encoder=_FakeText(cfg))
    res = evaluate_libero(tmp_path, "libero_spatial", trials=1, task_ids=[0], max_steps=4, noop_steps=2,
                          runner=runner, progress=lambda s: None)
    assert res["tasks"]["task 0"]["episodes"] == 1 and runner.counts["chunks"] >= 1


@pytest.mark.slow
def test_demo_policy_section_end_to_end_at_quick_size(tiny, world_model_run, tmp_path):
    """The demo hook: data, base + SimForcing-WM action-only policies (2 processes), closed loop, the table."""
    from simforcing.demo.policy_section import policy_section

    _, vae, base = tiny
    # the hook's dataset is the real synthetic one; the tiny world model has the camera size it needs (32 x 48)
    res = policy_section(tmp_path, {"simforcing": world_model_run}, full=False, seed=1, jobs=2, quick=True,
                         progress=lambda s: None)
    assert list(res.rows) == ["scripted expert (ceiling)", "do nothing (floor)", "action_only / base",
                                 "action_only / SimForcing WM"]
    assert "| action_only / SimForcing WM |" in res.table_md
    assert res.rows["scripted expert (ceiling)"].average.rate == 1.0
    assert res.init["action_only / SimForcing WM"].inherited > 0
    assert set(res.commands) >= {"policy data", "policy train action_only / base",
                                    "policy train action_only / SimForcing WM"}
    from simforcing.demo.report import _policy_setup
    synth = json.loads((tmp_path / "policy" / "data" / "meta" / "info.json").read_text())["synth"]
    assert synth["layouts"] == res.budget["layouts"] == 2  # the LIBERO-like scenes, train and evaluation
    assert json.loads((tmp_path / "policy" / "eval" / "part0" / "eval.json").read_text())["layouts"] == 2
    assert "2 fixed layouts" in _policy_setup(res.budget)
    again = policy_section(tmp_path, {"simforcing": world_model_run}, seed=1, quick=True, progress=lambda s: None)
    assert again.rows == res.rows  # cached: nothing retrained or re-evaluated

    # provenance: a world model made again (another record) makes its policies and their evaluations stale
    from simforcing.demo.policy_section import QUICK, policy_jobs
    jobs, info = policy_jobs(tmp_path, {"simforcing": world_model_run}, seed=1, budget=QUICK)
    assert all(j.skip() for j in jobs) and info["notes"] == []
    jobs, info = policy_jobs(tmp_path, {"simforcing": world_model_run}, seed=1, budget=QUICK,
                             wm_records={"simforcing": {"command": "simforcing train ... (made again)"}})
    skipped = {j.name: j.skip() for j in jobs}
    assert skipped["policy data"] and skipped["policy eval expert + floor"]  # the data does not depend on it
    assert not any(v for k, v in skipped.items() if "action_only" in k)
    assert len(info["notes"]) == 2 and all("training" in n and "again" in n for n in info["notes"])
    assert not any(Path(r).exists() for r in info["runs"].values())  # the stale runs were removed
    # a changed demonstration budget makes the dataset stale too (and everything after it)
    import dataclasses
    jobs, _ = policy_jobs(tmp_path, {"simforcing": world_model_run}, seed=1,
                          budget=dataclasses.replace(QUICK, layouts=3))
    assert not any(j.skip() for j in jobs)


def test_a_nan_loss_stops_the_policy_run_as_diverged(tiny, tmp_path, monkeypatch):
    """The world model's NaN stop: exit code 3, status "diverged", no checkpoint after it."""
    monkeypatch.setenv("SIMFORCING_FAULT", "nan_loss@2")
    res = policy_train_run(pcfg(tiny, "action_only", "base", "--train.ckpt_every=1"), tmp_path / "nan", "base",
                           progress=False)
    assert res["state"] == "diverged" and res["exit_code"] == 3 and "step 2" in res["reason"]
    assert json.loads((tmp_path / "nan" / "status.json").read_text())["state"] == "diverged"
    assert [p.name for p in sorted((tmp_path / "nan" / "checkpoints").iterdir())] == ["step_000001"]


@pytest.mark.slow
def test_two_process_fsdp2_policy_run(tiny, world_model_run, tmp_path):
    """`torchrun --nproc_per_node=2 -m simforcing policy train` (gloo, CPU, FSDP2 with a frozen video expert):
    finishes, writes sharded checkpoints, keeps every video parameter, and the run loads for acting."""
    import os
    import subprocess
    import sys

    from simforcing.policy.init import run_state

    data, vae, _ = tiny
    out = tmp_path / "fsdp"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), OMP_NUM_THREADS="1")
    env.pop("SIMFORCING_FAULT", None)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
                           "simforcing", "policy", "train", "--setting", "action_only", "--init", str(world_model_run),
                           "--data", str(data), "--out", str(out), "--no-progress", *POLICY,
                           "--train.max_steps=2", "--train.batch_size=1"], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _, after, ckpt = run_state(out)
    assert json.loads((Path(ckpt) / "meta.json").read_text())["sharded"]
    _, before, _ = run_state(world_model_run)
    video = [k for k in after if is_video_parameter(k)]
    assert video and all(torch.equal(after[k], before[k]) for k in video)
    assert PolicyRunner.load(out).cfg.policy.setting == "action_only"


def test_world_model_configs_and_checkpoints_from_before_the_policy_still_load(world_model_run, tmp_path):
    """A run written before the policy existed — RUN/config.json without the `policy` section and
    `model.action_head`, a checkpoint without its own config copy (its meta's config_hash is the one to match) —
    loads unchanged: a world model's config hash leaves out the policy's fields."""
    import shutil

    from simforcing.runs.checkpoint import config_hash
    from simforcing.runs.folder import load_model_from_run
    from simforcing.config import Config

    old = tmp_path / "old"
    shutil.copytree(world_model_run, old)
    d = json.loads((old / "config.json").read_text())
    d.pop("policy")
    d.pop("fewstep")  # nor the few-step student's section (added later still)
    d["data"].pop("pairing")  # nor data.pairing (later again)
    d["model"].pop("action_head")
    d["model"].pop("action_conditioning")  # nor model.action_conditioning (added later still)
    (old / "config.json").write_text(json.dumps(d, indent=2))
    for ckpt in (old / "checkpoints").iterdir():
        (ckpt / "config.json").unlink(missing_ok=True)
        meta = json.loads((ckpt / "meta.json").read_text())
        meta["files"].pop("config.json", None)
        (ckpt / "meta.json").write_text(json.dumps(meta))
    cfg, model, _ = load_model_from_run(old)
    assert cfg.model.action_head is False and cfg.model == Config.load(world_model_run / "config.json").model
    assert not any(k.startswith("action.proj_out") for k in model.state_dict())
    import hashlib
    assert config_hash(cfg) == hashlib.sha256(json.dumps(d, indent=2).encode()).hexdigest()[:16]
