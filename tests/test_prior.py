"""The video prior (stage 0, simforcing.prior) and the runs that start from it (simforcing.warmstart).

What is pinned: the prior never sees an action or a state — its loss and every gradient are the same whatever the
actions and states are (the step, on the real network), the action expert, the state projection and the condition
projections get no gradient and leave training exactly as initialised, and a whole run on a dataset whose actions
and states were replaced logs the same losses bit for bit; its data is every sim window of train + sim_pool and every
real window of train; stage 1 `--init RUN0` takes every tensor the prior trained and reports the rest as new; `policy
train --init RUN0` works and `policy probe` reads its frozen video expert; the run is of kind video_base and the
refusals name the field or the kind, with a command that works. Tiny configs on CPU (test_train's).
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from simforcing.cli import main as cli_main
from simforcing.config import ConfigError, load_config
from simforcing.data.videos import VideoWindowDataset
from simforcing.demo.policy_results import PolicySectionResult
from simforcing.methods import METHODS, method_preset
from simforcing.models.world_model import build_world_model
from simforcing.policy.probe import ProbeResult
from simforcing.prior import freeze_action_side, video_prior_run
from simforcing.runs.folder import KINDS, run_kind
from simforcing.train import train_run
from simforcing.warmstart import is_action_side, run_state
from test_train import TINY, cli_args, losses, make_tiny_data, tiny_cfg


def prior_cfg(root, vae, *extra):
    return method_preset(tiny_cfg(root, vae, *extra), "video_prior")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_data(tmp_path_factory.mktemp("prior"))


@pytest.fixture(scope="module")
def prior_run(tiny, tmp_path_factory):
    run = tmp_path_factory.mktemp("p0") / "run0"
    res = video_prior_run(prior_cfg(*tiny), run, progress=False)
    assert res["state"] == "finished", res
    return run


def test_the_step_never_reads_actions_or_states():
    """Loss and every gradient identical for two action/state draws and for none at all; the action side of the
    network gets no gradient (video_prior_step on the real WorldModel, tiny width)."""
    cfg = method_preset(load_config("demo", TINY[:7] + ["--model.text_dim=16", "--model.vae.latent_channels=8"]),
                        "video_prior")
    torch.manual_seed(0)
    model = build_world_model(cfg)
    with torch.no_grad():
        for p in model.parameters():  # the zero-initialised heads and projections get values: every path is live
            if torch.count_nonzero(p) == 0:
                p.normal_(0, 0.02)
    g = torch.Generator().manual_seed(1)
    lat, (h, w), n = cfg.latent_frames, cfg.latent_hw, cfg.data.actions_per_window
    batch = {"z_video": torch.randn(2, 8, lat, h, w, generator=g), "text": torch.randn(2, 4, 16, generator=g),
             "text_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]]).bool()}
    runs = []
    for extra in ({}, {"actions": torch.rand(2, n, 7, generator=g), "state0": torch.randn(2, 7, generator=g)},
                  {"actions": -torch.rand(2, n, 7, generator=g), "state0": 5 * torch.randn(2, 7, generator=g)}):
        model.zero_grad(set_to_none=True)
        loss, logs = METHODS["video_prior"](model, None, {**batch, **extra}, cfg, torch.Generator().manual_seed(2))
        loss.backward()
        runs.append((loss.detach(), {k: None if p.grad is None else p.grad.clone()
                                     for k, p in model.named_parameters()}))
        assert set(logs) >= {"fm_video", "loss"} and logs["loss"] == pytest.approx(logs["fm_video"])
    (l0, g0), *others = runs
    for loss, grads in others:
        assert torch.equal(loss, l0)
        assert all((grads[k] is None and g0[k] is None) or torch.equal(grads[k], g0[k]) for k in g0)
    action_side = [k for k in g0 if is_action_side(k)]
    assert action_side and any(k.startswith("state_embed.") for k in action_side)
    assert all(g0[k] is None for k in action_side)  # no gradient reaches the action expert or the state token
    assert any(g0[k] is not None and g0[k].abs().sum() > 0 for k in g0 if k.startswith("layers.0.video."))


def test_the_data_is_every_sim_and_every_real_training_video(tiny):
    root, vae = tiny
    ds = VideoWindowDataset(tiny_cfg(root, vae), root)
    assert ds.counts == {"sim": 4, "real": 2}  # train (2) + sim_pool (2) in sim; train in real; val never
    items = [ds[i] for i in range(len(ds))]
    assert len(items) == 2 * (4 + 2)  # data.windows_per_episode = 2
    assert {i["domain"] for i in items} == {"sim", "real"}
    assert set(items[0]) == {"video", "text", "text_mask", "domain", "episode_id", "start"}  # no actions, no states
    assert items[0]["video"].shape == (3, 5, 32, 48)


def test_a_run_trains_the_video_expert_only(tiny, prior_run):
    cfg, state, _ = run_state(prior_run, KINDS)
    assert cfg.train.method == "video_prior" and cfg.conditioning.action_dropout == 1.0
    rec = json.loads((prior_run / "run.json").read_text())
    assert (rec["kind"], rec["stage"]) == ("video_base", "video_prior") and run_kind(prior_run) == "video_base"
    torch.manual_seed(cfg.train.seed)
    init = build_world_model(cfg).state_dict()  # what Trainer builds after seed_everything(train.seed)
    for name, t in init.items():
        if is_action_side(name):
            assert torch.equal(state[name], t), f"{name} changed: the prior trained its action side"
    assert any(not torch.equal(state[n], t) for n, t in init.items() if n.startswith("layers.0.video."))
    assert {r["step"] for r in map(json.loads, (prior_run / "metrics.jsonl").read_text().splitlines())} \
        == {1, 2, 3, 4}


def test_actions_and_states_of_the_dataset_change_nothing(tiny, prior_run, tmp_path):
    """The same run on a copy of the dataset whose actions and states are other numbers: the same losses."""
    root, vae = tiny
    other = tmp_path / "data"
    shutil.copytree(root, other)
    rng = np.random.default_rng(7)
    for f in other.glob("episodes/*/lowdim.npz"):
        z = dict(np.load(f))
        np.savez(f, actions=rng.uniform(-1, 1, z["actions"].shape).astype(np.float32),
                 states=rng.uniform(-1, 1, z["states"].shape).astype(np.float32))
    res = video_prior_run(prior_cfg(other, vae), tmp_path / "run", progress=False)
    assert res["state"] == "finished"
    assert losses(tmp_path / "run") == losses(prior_run)


def test_stage1_from_the_prior_takes_what_it_trained(tiny, prior_run, tmp_path, capsys):
    root, vae = tiny
    out = tmp_path / "s1"
    assert cli_main(["pretrain", "--init", str(prior_run), "--out", str(out), "--no-progress",
                     *cli_args(root, vae)]) == 0
    rep = json.loads((out / "init.json").read_text())
    assert rep["source"] == str(prior_run) and rep["source_method"] == "video_prior"
    assert rep["new"] and all(is_action_side(n) for n in rep["new"])
    assert any(n.startswith("state_embed.") for n in rep["new"]) and any(".action." in n for n in rep["new"])
    assert rep["inherited"] and not any(is_action_side(n) for n in rep["inherited"])
    assert "inherited" in capsys.readouterr().out
    # at step 0 the world model's video expert is the prior's: check the copy itself
    cfg = tiny_cfg(root, vae)
    from simforcing.warmstart import init_from_run
    torch.manual_seed(0)
    model = build_world_model(cfg)
    own = copy.deepcopy(model.state_dict())
    init_from_run(model, cfg, prior_run)
    _, prior, _ = run_state(prior_run, KINDS)
    for name, t in model.state_dict().items():
        assert torch.equal(t, prior[name] if not is_action_side(name) else own[name]), name


def test_refusals_name_the_field(tiny, prior_run, tmp_path, capsys):
    root, vae = tiny
    # another architecture: named, nothing written
    out = tmp_path / "other"
    assert cli_main(["pretrain", "--init", str(prior_run), "--out", str(out), "--no-progress",
                     *cli_args(root, vae), "--model.ffn_dim=32"]) == 2
    assert "model.ffn_dim" in capsys.readouterr().err and not out.exists()
    # the prior is not a stage-2 teacher, and not resumed as stage 1 (and the reverse)
    assert cli_main(["train", "--method", "sft", "--teacher", str(prior_run), "--out", str(tmp_path / "s2"),
                     "--no-progress", "--data", str(root)]) == 2
    err = capsys.readouterr().err
    assert "video-base run" in err and f"pretrain --init {prior_run}" in err
    assert cli_main(["pretrain", "--resume", "--out", str(prior_run), "--no-progress", *cli_args(root, vae)]) == 2
    assert "pretrain --method video_prior --resume" in capsys.readouterr().err
    # stage 1 starts from a video base, or continues another stage-1 run (issue 67: the multi-view stage 1 from the
    # one-view one) — every tensor inherited, none new; a stage-2 run is no start of stage 1
    s1 = tmp_path / "s1"
    assert cli_main(["pretrain", "--init", str(prior_run), "--out", str(s1), "--no-progress",
                     *cli_args(root, vae)]) == 0
    capsys.readouterr()
    assert cli_main(["pretrain", "--init", str(s1), "--out", str(tmp_path / "s1b"), "--no-progress",
                     *cli_args(root, vae)]) == 0
    init = json.loads((tmp_path / "s1b" / "init.json").read_text())
    assert init["new"] == [] and init["inherited"]
    s2 = tmp_path / "s2"
    assert cli_main(["train", "--method", "sft", "--teacher", str(s1), "--data", str(root), "--out", str(s2),
                     "--train.max_steps=1", "--no-progress"]) == 0
    capsys.readouterr()
    assert cli_main(["pretrain", "--init", str(s2), "--out", str(tmp_path / "s1c"), "--no-progress",
                     *cli_args(root, vae)]) == 2
    err = capsys.readouterr().err
    assert "stage-2 run" in err and "video_prior" in err and not (tmp_path / "s1c").exists()
    # generate / evaluate refuse it by name, with what works instead
    assert cli_main(["generate", "--ckpt", str(prior_run), "--data", str(root), "--out", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err
    assert "video-base run" in err and "pretrain --init" in err
    assert cli_main(["pretrain", "--method", "video_prior", "--init", str(prior_run), "--out",
                     str(tmp_path / "p"), *cli_args(root, vae)]) == 2
    assert "--init" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="two starts"):
        train_run(tiny_cfg(root, vae, "--model.weights=/nowhere"), tmp_path / "w", "pretrain", init=prior_run,
                  progress=False)


def test_resume_continues_the_prior_exactly(tiny, prior_run, tmp_path):
    root, vae = tiny
    run = tmp_path / "r"
    shutil.copytree(prior_run, run)
    shutil.rmtree(run / "checkpoints" / "step_000004")  # as if stopped after the checkpoint of step 2
    assert cli_main(["pretrain", "--method", "video_prior", "--resume", "--out", str(run), "--no-progress",
                     *cli_args(root, vae)]) == 0
    assert losses(run) == losses(prior_run)  # steps 3-4 recomputed from step 2: the same numbers
    a, b = run_state(run, KINDS)[1], run_state(prior_run, KINDS)[1]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_before_the_first_checkpoint_keeps_the_recorded_start(tiny, prior_run, tmp_path, monkeypatch,
                                                                      capsys):
    """Stage 1 from a video base stopped before its first checkpoint: `pretrain --resume` without --init starts
    again from the recorded video base (init.json), not from the preset's random weights; another --init is refused."""
    root, vae = tiny
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert cli_main(["pretrain", "--init", str(prior_run), "--out", str(ref), "--no-progress",
                     *cli_args(root, vae)]) == 0
    monkeypatch.setenv("SIMFORCING_FAULT", "nan_loss@1")  # diverges at step 1, before the checkpoint of step 2
    assert cli_main(["pretrain", "--init", str(prior_run), "--out", str(run), "--no-progress",
                     *cli_args(root, vae)]) != 0
    monkeypatch.delenv("SIMFORCING_FAULT")
    assert (run / "init.json").exists() and not list((run / "checkpoints").glob("step_*"))
    capsys.readouterr()
    assert cli_main(["pretrain", "--init", str(tmp_path), "--resume", "--out", str(run), "--no-progress",
                     *cli_args(root, vae)]) == 2
    assert f"started from {prior_run}" in capsys.readouterr().err
    assert cli_main(["pretrain", "--resume", "--out", str(run), "--no-progress", *cli_args(root, vae)]) == 0
    assert f"starting again from {prior_run}" in capsys.readouterr().out
    a, b = run_state(run, KINDS)[1], run_state(ref, KINDS)[1]
    assert all(torch.equal(a[k], b[k]) for k in a)  # the same weights as the uninterrupted run from the video base


def test_policy_from_the_prior(tiny, prior_run, tmp_path):
    from test_policy import make_policy_dataset

    root, vae = tiny
    data = make_policy_dataset(tmp_path / "pol")
    out = tmp_path / "policy"
    assert cli_main(["policy", "train", "--setting", "action_only", "--init", str(prior_run), "--data", str(data),
                     "--out", str(out), "--no-progress", "--train.max_steps=2", "--train.ckpt_every=2"]) == 0
    rep = json.loads((out / "init.json").read_text())
    assert rep["source_method"] == "video_prior" and not rep["partial"]
    assert any(n.startswith("state_embed.") for n in rep["new"]) and any(".action." in n for n in rep["new"])
    assert all(not is_action_side(n) for n in rep["inherited"]) and rep["inherited"]
    # what the policy reads from the prior's frozen video expert: the probe end to end (`policy probe`)
    assert cli_main(["policy", "probe", "--runs", f"video base={out}", "--out", str(tmp_path / "probe"),
                     "--train-scenes", "2", "--test-scenes", "1", "--max-steps", "10", "--layouts", "2"]) == 0
    res = json.loads((tmp_path / "probe" / "probe.json").read_text())
    assert res["n_fit"] == 3 * 2 * 2 and res["n_test"] == 3 * 1 * 2  # tasks × scenes × 2 frames
    (layer,) = res["runs"]["video base"]["layers"]  # one layer: its keys and values
    assert set(layer) == {"hand", "object"} and layer["hand"]["rmse_cm"] >= 0
    assert {"fit mean", "layout mean"} <= set(res["reference"]["object"]) and res["latent"]["hand"]["rmse_cm"] >= 0
    assert "| video base |" in (tmp_path / "probe" / "probe.md").read_text()
    typed = ProbeResult.read(tmp_path / "probe", "the test's probe")  # the file read back as what was written
    assert typed.to_json() == res and typed.runs["video base"].layers[0]["hand"].rmse_cm == layer["hand"]["rmse_cm"]


def test_freeze_action_side_leaves_the_video_expert_trainable():
    cfg = load_config("demo", TINY[:7])
    model = build_world_model(cfg)
    frozen = freeze_action_side(model)
    assert frozen and all(is_action_side(n) for n in frozen)
    assert all(p.requires_grad for n, p in model.named_parameters() if n not in frozen)
    assert not any(isinstance(p, Path) for p in frozen)


@pytest.mark.slow
def test_full_policy_measurement_end_to_end_at_tiny_size(tiny, prior_run, tmp_path):
    """`demo --full`'s policy section (demo.transfer_section) on tiny runs: stage 1 from the video base stands in for
    both world models; one world-model and one policy seed, the two budgets, the joint settings for the video base, the
    evaluations, the probe, and the analysis with its tables (one seed: no interval over seeds)."""
    from simforcing.jobs import run_jobs
    from simforcing.demo.policy_section import QUICK, collect_policy, policy_jobs  # noqa: F401 (the hook hands over)
    from simforcing.demo.transfer_section import TransferBudget, collect_full, full_policy_jobs

    root, vae = tiny
    s1 = tmp_path / "s1"
    assert train_run(tiny_cfg(root, vae), s1, "pretrain", init=prior_run, progress=False)["state"] == "finished"
    t = TransferBudget(wm_seeds=1, policy_seeds=1, joint_inits=("video_base",), long_steps=4, eval_per_task=1,
                       probe_train_scenes=2, probe_test_scenes=1)
    wm = {"video_base": prior_run, "sft": s1, "simforcing": s1}
    graph, info = full_policy_jobs(tmp_path, wm, 42, QUICK, t)
    run_jobs(graph, 2, tmp_path / "logs", echo=lambda s: None)
    res = collect_policy(info)
    assert res.full is not None and set(res.full.main) == {
        "action_only / random (no prior)", "action_only / video base", "action_only / SFT WM",
        "action_only / SimForcing WM", "action_only / SimForcing WM video expert only"}
    assert len(res.runs) == 2 * 4 + 2 + 1 and res.init["action_only / video base"].new > 0
    vo = res.full.init_all["action_only / SimForcing WM video expert only"]  # its video expert only: a new action expert
    assert vo.new > res.full.init_all["action_only / SimForcing WM"].new
    blocks = {(b.setting, b.steps) for b in res.full.transfer.blocks}
    assert blocks == {("action_only", 3), ("action_only", 4), ("unconditional", 3), ("video_action", 3)}
    assert set(res.full.probe.runs) == {"random (no prior)", "video base", "SFT WM", "SimForcing WM"}
    assert "Seeds × initialisations" in res.full.transfer_md and "linear probe" in res.full.transfer_md
    assert (tmp_path / "policy" / "transfer" / "table.md").exists()
    assert Path(res.full.transfer_png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert collect_full(info).rows == res.rows
    written = json.loads((tmp_path / "policy" / "transfer" / "results.json").read_text())
    assert json.loads(json.dumps(res.to_json())) == written  # (the budget's tuples are lists in the file)
    back = PolicySectionResult.from_json(written)
    assert back.to_json() == written and back.rows == res.rows and back.full.transfer == res.full.transfer
    assert back.full.probe == res.full.probe and back.full.init_all == res.full.init_all
