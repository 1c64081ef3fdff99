"""Views (issue 67): several cameras per paired episode, side by side in the one frame the VAE and the network see,
through the format, data check, the window datasets, training, sampling, evaluation and the twin; one-view datasets
and runs unchanged."""

import json
import shutil

import numpy as np
import pytest
import torch
from datagen import make_dataset, square_masks

from simforcing.cli import main
from simforcing.config import ConfigError, load_config
from simforcing.data.check import check_dataset
from simforcing.data.format import DataError, read_episode_videos, read_episodes, read_info, view_file, write_video
from simforcing.data.paired import PairedWindowDataset, compose_views, split_views, to_unit_range
from test_policy import tiny, world_model_run  # noqa: F401  (fixtures)
from test_world_model_eval import LAYOUTS, judge_dir  # noqa: F401  (fixture)

from simforcing.evaluate.metrics import (MetricAccumulator, MetricProtocol, ViewMetrics, masked_psnr_per_sample,
                                         psnr_per_sample, ssim_per_sample)

VIEWS = ("external", "wrist")
W = 48


def views_cfg(*overrides: str):
    return load_config("demo", ["--data.views=external,wrist", *overrides]).validate()


@pytest.fixture(scope="module")
def two_views(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("views") / "ds", views=VIEWS, length=17)


def test_views_go_side_by_side_and_come_apart_again():
    a, b = torch.rand(2, 3, 5, 4, 6), torch.rand(2, 3, 5, 4, 6)
    for layout, shape in (("width", (4, 12)), ("height", (8, 6))):
        both = compose_views([a, b], layout)
        assert both.shape[-2:] == shape
        back = split_views(both, 2, layout)
        assert torch.equal(back[0], a) and torch.equal(back[1], b)
    assert compose_views([a]) is a and split_views(a, 1)[0] is a
    cfg = views_cfg()
    assert cfg.data.frame_hw == (32, 96) and cfg.latent_hw == (8, 24)
    assert views_cfg("--data.view_layout=height").data.frame_hw == (64, 48)
    assert load_config("demo").validate().data.frame_hw == (32, 48)  # one view: the frame is the camera's


def test_the_models_frame_holds_each_view_as_its_files_hold_it(two_views):
    one = PairedWindowDataset(load_config("demo").validate(), two_views)[0]  # a one-view model: the first view
    for layout in ("width", "height"):
        ds = PairedWindowDataset(views_cfg(f"--data.view_layout={layout}"), two_views)
        item = ds[0]
        real_ext, real_wrist = split_views(item["real"], 2, layout)
        sim_ext, sim_wrist = split_views(item["sim"], 2, layout)
        assert torch.equal(real_ext, one["real"]) and torch.equal(sim_ext, one["sim"])
        info, ep = read_info(two_views), read_episodes(two_views)[item["episode_id"]]
        sim_w, real_w = read_episode_videos(two_views, info, ep, "wrist")
        idx = item["start"] + np.arange(ds.frames)
        assert torch.equal(real_wrist, to_unit_range(torch.from_numpy(real_w[idx]).permute(3, 0, 1, 2)))
        assert torch.equal(sim_wrist, to_unit_range(torch.from_numpy(sim_w[idx]).permute(3, 0, 1, 2)))
        m_ext, m_wrist = split_views(item["arm_mask"], 2, layout)
        masks = square_masks(ep.length, 32, W, 0)[idx]
        assert torch.equal(m_ext, torch.from_numpy(masks))
        assert torch.equal(m_wrist, torch.from_numpy(masks[:, :, ::-1].copy()))


def _copy(two_views, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(two_views, root)
    return root


def test_views_are_named_and_checked(two_views, tmp_path):
    for bad, why in (("external,external", "named twice"), ("external,wr/ist", "is not one")):
        with pytest.raises(ConfigError, match=why):
            load_config("demo", [f"--data.views={bad}"]).validate()
    with pytest.raises(ConfigError, match="data.view_layout"):
        views_cfg("--data.view_layout=diagonal")
    one_view = make_dataset(tmp_path / "one", length=17)
    with pytest.raises(ConfigError, match=r"asks for the view 'wrist'.*holds the views external"):
        PairedWindowDataset(views_cfg(), one_view)  # a multi-view run given a one-view dataset
    report = check_dataset(two_views, views_cfg())
    assert report.ok and "views external, wrist" in report.format()
    info = json.loads((two_views / "meta" / "info.json").read_text())
    root = _copy(two_views, tmp_path)
    (root / "meta" / "info.json").write_text(json.dumps({**info, "views": ["external", "external"]}))
    with pytest.raises(DataError, match="field 'views'") as e:
        check_dataset(root, views_cfg())
    assert e.value.kind == "bad_meta"


@pytest.mark.parametrize("fault,kind", [("missing", "missing_video"), ("shorter", "truncated_video"),
                                        ("smaller", "view_mismatch"), ("no mask", "bad_arm_mask")])
def test_a_malformed_view_is_named_and_skipped(two_views, tmp_path, fault, kind):
    """A view missing in one episode, of another length or size, or without the mask the first view has: data check
    and the window dataset name the episode, the file and the kind; --skip-bad leaves that episode out."""
    root = _copy(two_views, tmp_path)
    d = root / "episodes" / "train_001"
    wrist = d / view_file("real", "wrist", VIEWS)
    if fault == "missing":
        wrist.unlink()
    elif fault in ("shorter", "smaller"):  # both looks of the wrist camera: shorter, or at half the size
        videos = read_episode_videos(root, read_info(root), read_episodes(root)["train_001"], "wrist")
        for stem, video in zip(("sim", "real"), videos):
            write_video(d / view_file(stem, "wrist", VIEWS),
                        video[:-2] if fault == "shorter" else np.ascontiguousarray(video[:, ::2, ::2]))
    else:
        (d / view_file("arm_mask", "wrist", VIEWS, ".npz")).unlink()
    with pytest.raises(DataError) as e:
        check_dataset(root, views_cfg())
    assert e.value.kind == kind and e.value.episode == "train_001", str(e.value)
    assert "wrist" in str(e.value)
    report = check_dataset(root, views_cfg(), skip_bad=True)
    assert [(eid, k) for eid, k, _ in report.skipped] == [("train_001", kind)]
    ds = PairedWindowDataset(views_cfg("--data.skip_bad=true"), root)
    assert [eid for eid, _ in ds.skipped] == ["train_001"]
    assert len(PairedWindowDataset(load_config("demo").validate(), root)) > 0  # the first view alone is sound


def test_each_views_metrics_are_its_part_of_the_frame_scored_alone():
    gen = torch.Generator().manual_seed(0)
    pred, gt = torch.rand(3, 3, 5, 16, 24, generator=gen) * 2 - 1, torch.rand(3, 3, 5, 16, 24, generator=gen) * 2 - 1
    masks = torch.rand(3, 5, 16, 24, generator=gen) > 0.7
    acc = MetricAccumulator(load_config("demo"))
    views = ViewMetrics(VIEWS, "width", acc)
    views.update(pred, gt, masks)
    got = views.compute()
    proto = MetricProtocol()
    for v, sl in (("external", slice(0, 12)), ("wrist", slice(12, 24))):
        p, g, m = pred[..., sl], gt[..., sl], masks[..., sl]
        assert got[v]["psnr"] == pytest.approx(float(psnr_per_sample(p, g, proto).mean()))
        assert got[v]["ssim"] == pytest.approx(float(ssim_per_sample(p, g, proto).mean()))
        assert got[v]["psnr_arm"] == pytest.approx(float(masked_psnr_per_sample(p, g, m, proto).mean()))
        assert got[v]["lpips"] is None  # no LPIPS weights configured


@pytest.fixture(scope="module")
def synth_views(tmp_path_factory):
    """The benchmark with its wrist camera, and the same dataset without it (--views left out)."""
    base = tmp_path_factory.mktemp("synth")
    common = ["--num-train", "1", "--num-val", "2", "--num-sim-pool", "1", "--length", "17", "--seed", "3",
              "--workers", "1", "--no-progress"]
    assert main(["data", "synth", "--out", str(base / "views"), *common, "--views", "external", "wrist"]) == 0
    assert main(["data", "synth", "--out", str(base / "one"), *common, "--no-finalize"]) == 0
    shutil.copytree(base / "views" / "text_cache", base / "one" / "text_cache")  # the same episodes: the same
    shutil.copy(base / "views" / "meta" / "stats.json", base / "one" / "meta" / "stats.json")  # stats and texts
    return base / "views", base / "one"


def test_the_benchmarks_wrist_camera_leaves_the_external_files_as_they_were(synth_views):
    views, one = synth_views
    info = read_info(views)
    assert info["views"] == list(VIEWS) and "views" not in read_info(one)
    for eid in read_episodes(one):
        for name in ("sim.mp4", "real.mp4", "arm_mask.npz", "lowdim.npz", "twin.json"):
            if (one / "episodes" / eid / name).exists():
                assert (views / "episodes" / eid / name).read_bytes() == (one / "episodes" / eid / name).read_bytes()
        assert (views / "episodes" / eid / "sim_wrist.mp4").exists()
    ep = read_episodes(views)["ep_00000"]
    _, real_w = read_episode_videos(views, info, ep, "wrist")
    _, real_e = read_episode_videos(views, info, ep, "external")
    assert real_w.shape == real_e.shape and np.abs(real_w.astype(int) - real_e).mean() > 20  # another camera
    for bad in (["wrist"], ["external", "top"], ["external", "external"]):
        assert main(["data", "synth", "--out", str(views.parent / "x"), "--quick", "--views", *bad]) == 2


def test_the_twin_renders_the_wrist_camera_with_the_commanded_hand(synth_views):
    """data check-twin on both views: the twin executes the recorded actions and renders each camera as the recorded
    simulation video shows it (the wrist camera rides on the twin's hand)."""
    from simforcing.twin import check_twin

    views, _ = synth_views
    res = check_twin(views_cfg(), views, "val")
    for row in res.episodes:
        assert set(row["views"]) == set(VIEWS)
        assert row["views"]["external"]["psnr_mean"] > 35 and row["views"]["wrist"]["psnr_mean"] > 30, row
    assert main(["data", "check-twin", "--data", str(views), "--preset", "demo", "--data.views=external,wrist"]) == 0


class _OneCameraTwin:
    def __init__(self, height, width):
        self.height, self.width = height, width

    def start(self, episodes):
        return np.zeros((len(episodes), self.height, self.width, 3), np.uint8)

    def window(self, actions, stride, keep):
        return np.zeros((len(actions), actions.shape[1] // stride + 1, self.height, self.width, 3), np.uint8)

    def close(self):
        pass


def test_a_twin_that_draws_fewer_views_than_the_model_predicts_is_refused():
    from simforcing.twin import make_renderer, register_renderer

    register_renderer("one_camera_test", _OneCameraTwin)
    cfg = views_cfg("--sample.twin=one_camera_test")
    with pytest.raises(ConfigError, match="renders one camera"):
        make_renderer(cfg, 32, 48)
    assert make_renderer(load_config("demo", ["--sample.twin=one_camera_test"]), 32, 48).width == 48
    twin = make_renderer(views_cfg(), 32, 48)  # the synthetic twin renders both, side by side
    try:
        assert twin.views == VIEWS
    finally:
        twin.close()


@pytest.fixture(scope="module")
def views_runs(synth_views, tmp_path_factory):
    """A multi-view stage 1 and SimForcing student at tiny size, the VAE fitted on both views, a probe."""
    views, _ = synth_views
    out = tmp_path_factory.mktemp("views_runs")
    tiny = ["--model.num_layers=1", "--train.batch_size=2", "--train.log_every=1", "--train.ckpt_every=2"]
    mv = "--data.views=external,wrist"
    assert main(["model", "fit-vae", "--data", str(views), "--out", str(out / "vae"), "--preset", "demo", mv]) == 0
    assert main(["pretrain", "--preset", "demo", "--data", str(views), "--out", str(out / "s1"),
                 f"--model.vae.path={out / 'vae'}", "--train.max_steps=2", *tiny, mv]) == 0
    assert main(["train", "--method", "simforcing", "--teacher", str(out / "s1"), "--data", str(views), "--out",
                 str(out / "s2"), "--train.max_steps=2", "--train.batch_size=2"]) == 0
    assert main(["model", "fit-probe", "--data", str(views), "--out", str(out / "probe"), "--steps", "2"]) == 0
    return out


def test_a_multi_view_world_model_trains_samples_and_is_scored_per_view(synth_views, views_runs):
    views, one = synth_views
    out = views_runs
    vae = json.loads((out / "vae" / "config.json").read_text())
    assert vae["fitted_on"]["views"] == list(VIEWS)
    assert main(["evaluate", "--ckpt", str(out / "s2"), "--data", str(views), "--split", "val", "--num-samples", "2",
                 "--out", str(out / "ev"), f"--eval.probe={out / 'probe'}"]) == 0
    ev = json.loads((out / "ev" / "eval.json").read_text())
    assert set(ev["views"]) == set(VIEWS) and ev["af_pos"] is not None  # the probe read the external view
    assert ev["per_sample"]["psnr@wrist"] == pytest.approx([ev["views"]["wrist"]["psnr"]] * 2, abs=20)
    assert "| wrist |" in (out / "ev" / "eval.md").read_text()
    assert main(["rollout", "--ckpt", str(out / "s2"), "--data", str(views), "--horizon", "16", "--out",
                 str(out / "ro"), "--sample.condition=render", "--rows", "rollout", "copy-first", "--videos", "1"]) == 0
    means = json.loads((out / "ro" / "rollout.json").read_text())["rows"]["rollout"]["mean"]
    assert {"psnr@external", "psnr@wrist", "psnr_arm@wrist"} <= set(means)
    # the run's views are fixed: a sampler, a student or a resume asking for others is refused by name
    for argv in (["evaluate", "--ckpt", str(out / "s2"), "--data", str(views), "--split", "val", "--num-samples", "1",
                  "--out", str(out / "ev1"), "--data.views=external"],
                 ["evaluate", "--ckpt", str(out / "s2"), "--data", str(one), "--split", "val", "--num-samples", "1",
                  "--out", str(out / "ev2")],
                 ["train", "--method", "sft", "--teacher", str(out / "s1"), "--data", str(views), "--out",
                  str(out / "s2b"), "--train.max_steps=1", "--data.views=external"],
                 ["pretrain", "--preset", "demo", "--data", str(views), "--out", str(out / "s1"), "--resume",
                  "--train.max_steps=3", "--data.views=external"]):
        assert main(argv) == 2, argv
    assert not (out / "ev1").exists() and not (out / "s2b" / "checkpoints").exists()


def test_a_one_view_run_reads_the_first_view_of_a_multi_view_dataset(synth_views, views_runs, tmp_path):
    """Every existing run keeps working: stage 1 of one view, continued on both views (pretrain --init from a
    stage-1 run: the same network), and the one-view run scores the multi-view dataset on its first view."""
    views, one = synth_views
    out = views_runs
    tiny = ["--model.num_layers=1", "--train.batch_size=2", "--train.max_steps=2", f"--model.vae.path={out / 'vae'}"]
    assert main(["pretrain", "--preset", "demo", "--data", str(one), "--out", str(tmp_path / "one"), *tiny]) == 0
    for data in (one, views):
        assert main(["evaluate", "--ckpt", str(tmp_path / "one"), "--data", str(data), "--split", "val",
                     "--num-samples", "2", "--out", str(tmp_path / f"ev_{data.name}")]) == 0
    a, b = (json.loads((tmp_path / f"ev_{n}" / "eval.json").read_text()) for n in ("one", "views"))
    assert a["psnr"] == b["psnr"] and "views" not in b
    assert main(["pretrain", "--preset", "demo", "--init", str(tmp_path / "one"), "--data", str(views), "--out",
                 str(tmp_path / "mv"), *tiny, "--data.views=external,wrist"]) == 0
    init = json.loads((tmp_path / "mv" / "init.json").read_text())
    assert init["new"] == [] and init["partial"] == [] and len(init["inherited"]) > 0


def test_two_camera_policies_act_inside_a_multi_view_world_model(views_runs, judge_dir, tiny, tmp_path):  # noqa: F811
    """A policy reading the external and the wrist camera (Tab. 5's) is evaluated inside the multi-view world model:
    it sees [external | wrist] of every predicted frame, the judge reads the external view; the twin renders both
    cameras in the loop. A one-view world model refuses it by name (test_world_model_eval)."""
    from test_policy import pcfg

    from simforcing.policy.closed_loop.results import PolicyEvaluation
    from simforcing.policy.train import policy_train_run

    two = tmp_path / "two"
    policy_train_run(pcfg(tiny, "action_only"), two, "base", progress=False)
    for extra in ([], ["--wm-condition", "render"]):
        out = tmp_path / f"ev{len(extra)}"
        assert main(["policy", "eval", "--env", "world-model", "--wm", str(views_runs / "s2"), "--judge",
                     str(judge_dir), "--runs", f"two={two}", "--per-task", "1", "--max-steps", "8", "--layouts",
                     str(LAYOUTS), "--out", str(out), *extra]) == 0
        ev = PolicyEvaluation.read(out, "--out")
        assert "two" in ev.rows and len(ev.rows) == 3  # the policy beside the expert and do-nothing
        with np.load(out / "frames.npz") as z:
            assert all(z[k].shape[1:] == (32, 96, 3) for k in z.files)  # both views of every kept frame
    assert main(["policy", "eval", "--env", "world-model", "--wm", "copy-first", "--judge", str(judge_dir), "--runs",
                 f"two={two}", "--per-task", "1", "--max-steps", "4", "--layouts", str(LAYOUTS), "--out",
                 str(tmp_path / "cf")]) == 0


def test_the_python_api_and_an_export_take_and_give_every_view(synth_views, views_runs, tmp_path):
    from simforcing import WorldModelPipeline, read_episode

    views, _ = synth_views
    pipe = WorldModelPipeline.from_run(views_runs / "s2", device="cpu")
    ep = read_episode(views)
    assert pipe.views == VIEWS and set(ep.views) == set(VIEWS) and ep.real is ep.views["external"]["real"]
    a = ep.actions[:pipe.cfg.data.actions_per_window]
    out = pipe(ep.frame(0), ep.instruction, ep.states[0], a, arm_mask=ep.mask(0), seed=3)
    assert out.video.shape == (9, 32, 96, 3) and set(out.views) == set(VIEWS)
    assert np.array_equal(np.concatenate([out.views["external"], out.views["wrist"]], axis=2), out.video)
    with pytest.raises(ValueError, match=r"sees the cameras external, wrist"):
        pipe(ep.real[0], ep.instruction, ep.states[0], a, arm_mask=ep.mask(0))
    with pytest.raises(ValueError, match="no 'wrist' view"):
        pipe({"external": ep.real[0]}, ep.instruction, ep.states[0], a, arm_mask=ep.mask(0))
    long = pipe.rollout(ep.frame(0), ep.instruction, ep.states[0], ep.actions[:16], twin=ep.twin, seed=1)
    assert long.views["wrist"].shape == (17, 32, 48, 3)
    shared = tmp_path / "shared"
    assert main(["export", "--ckpt", str(views_runs / "s2"), "--out", str(shared)]) == 0
    again = WorldModelPipeline.from_pretrained(shared, device="cpu")
    assert again.views == VIEWS
    same = again(ep.frame(0), ep.instruction, ep.states[0], a, arm_mask=ep.mask(0), seed=3)
    assert np.array_equal(same.video, out.video)


def test_the_reports_per_task_verdict_correlation_and_rates():
    """The views section's per-task within-policy ρ of a world model's verdict (the mean over policies of Pearson's r
    across that policy's scenes of the task) and a player's rate per task, against a computation by hand."""
    from types import SimpleNamespace as NS

    from simforcing.demo.views_section import task_rates, verdict_rho_per_task

    def ev(table):  # {player: {task: [(scene, success), ...]}}
        return NS(episodes={p: {t: [NS(scene=s, success=v) for s, v in eps] for t, eps in per.items()}
                            for p, per in table.items()})
    truth = ev({"a": {"push": [(0, 1), (1, 0), (2, 1), (3, 0)], "grasp": [(0, 1), (1, 1)]},
                "b": {"push": [(0, 1), (1, 1), (2, 0), (3, 0)]}})
    wm = ev({"a": {"push": [(0, 1), (1, 0), (2, 0), (3, 0)], "grasp": [(0, 1), (1, 0)]},
             "b": {"push": [(0, 0), (1, 1), (2, 1), (3, 0)]}})
    r_a = np.corrcoef([1, 0, 1, 0], [1, 0, 0, 0])[0, 1]
    r_b = np.corrcoef([1, 1, 0, 0], [0, 1, 1, 0])[0, 1]
    got = verdict_rho_per_task(truth, wm)
    assert got["push"] == pytest.approx((r_a + r_b) / 2)
    assert got["grasp"] is None and got["reach"] is None  # a's grasp truth does not vary; nobody reaches
    assert task_rates(wm, "a") == {"reach": None, "push": 0.25, "grasp": 0.5}


@pytest.fixture(scope="module")
def two_camera_judge(tmp_path_factory):
    """A success judge reading [external | wrist], fitted for a few steps on layout episodes with both cameras and
    simulator rollouts of both (its verdicts mean nothing; its files and its reading of both cameras do)."""
    from simforcing.data.synthetic.generate import generate_dataset
    from simforcing.policy.judge.sim_frames import simulated_frames
    from simforcing.policy.judge.success_judge import JudgeFitOptions, fit_judge, save_judge

    tmp = tmp_path_factory.mktemp("judge2")
    data = generate_dataset(tmp / "data", num_train=0, num_val=0, num_sim_pool=0, length=9, height=32, width=48,
                            seed=3, progress=False, layout_train=2, layouts=LAYOUTS, views=VIEWS)
    rollouts = simulated_frames(2, 32, 48, LAYOUTS, max_steps=15, progress=False, frames=4, cameras=2)
    assert rollouts.frames.shape[-2:] == (32, 96)
    judge = fit_judge([data], 32, 48, JudgeFitOptions(steps=3, batch_size=8), progress=False, rollouts=rollouts,
                      cameras=2)
    assert judge.cameras == 2 and judge.benchmark["cameras"] == list(VIEWS)
    with pytest.raises(DataError, match="lacks"):  # a one-view dataset cannot teach it the wrist camera
        one = generate_dataset(tmp / "one", num_train=0, num_val=0, num_sim_pool=0, length=9, height=32, width=48,
                               seed=3, progress=False, layout_train=1, layouts=LAYOUTS)
        fit_judge([one], 32, 48, JudgeFitOptions(steps=1, batch_size=4), progress=False, cameras=2)
    return save_judge(judge, tmp / "judge")


def test_a_two_camera_judge_reads_both_views_of_a_multi_view_world_model(views_runs, two_camera_judge, judge_dir,
                                                                         world_model_run, tmp_path):  # noqa: F811
    from simforcing.policy.closed_loop.world_model_eval import check_compatible, load_environment
    from simforcing.policy.judge.success_judge import load_judge

    judge = load_judge(two_camera_judge)
    assert judge.cameras == 2 and load_judge(judge_dir).cameras == 1  # a judge from before: the external camera
    with pytest.raises(ConfigError, match="reads 2 cameras"):
        check_compatible(load_environment(str(world_model_run)), {}, judge)
    out = tmp_path / "ev"
    assert main(["policy", "eval", "--env", "world-model", "--wm", str(views_runs / "s2"), "--judge",
                 str(two_camera_judge), "--per-task", "1", "--max-steps", "8", "--layouts", str(LAYOUTS), "--out",
                 str(out), "--wm-condition", "render"]) == 0
    sim = tmp_path / "sim"  # the judge's harness check in the simulator records both cameras for it
    assert main(["policy", "eval", "--judge", str(two_camera_judge), "--per-task", "1", "--max-steps", "8",
                 "--layouts", str(LAYOUTS), "--out", str(sim)]) == 0
