"""`simforcing evaluate`: eval.json schema, deterministic sample selection, baselines against a computation written
here, the CLI, and the latency protocol."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from simforcing.evaluate.latency import LatencySummary, summarize_latency
from simforcing.evaluate.run import evaluate_run
from simforcing.timing import Stopwatch
from test_sample import make_data, make_run, tiny_cfg

METRICS = ("psnr", "ssim", "psnr_arm", "lpips", "fid", "fvd")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eval")
    data = make_data(tmp / "data", num_val=3)
    cfg = make_run(tmp / "run", data, tmp / "vae")
    return tmp, data, cfg


def test_eval_json_schema(world):
    tmp, data, cfg = world
    res = evaluate_run(tmp / "run", data, None, "val", 3, tmp / "ev", progress=False)
    on_disk = json.loads((tmp / "ev" / "eval.json").read_text())
    assert on_disk["psnr"] == pytest.approx(res.scores.psnr)
    for k in METRICS:  # a number, or null with its reason
        assert k in on_disk
        assert isinstance(on_disk[k], float) or (on_disk[k] is None and on_disk[f"{k}_reason"])
    assert isinstance(on_disk["psnr"], float) and isinstance(on_disk["ssim"], float)
    assert isinstance(on_disk["psnr_arm"], float)  # the tiny dataset stores arm masks
    assert on_disk["lpips"] is None and "lpips_reason" in on_disk  # no weights configured
    per = on_disk["per_sample"]
    assert len(per["psnr"]) == len(per["ssim"]) == len(per["latency_s"]) == 3
    assert per["episode_id"] == ["val_000", "val_001", "val_002"] and per["start"] == [2, 2, 2]  # centre windows
    assert np.mean(per["psnr"]) == pytest.approx(on_disk["psnr"])
    s = cfg.sample
    assert (on_disk["n_sim"], on_disk["n_real"], on_disk["w"], on_disk["mask_mode"], on_disk["seed"]) == \
        (s.n_sim, s.n_real, s.w, s.mask_mode, s.seed)
    assert on_disk["num_samples"] == 3 and on_disk["forwards_per_sample"] == s.n_sim + 2 * s.n_real
    lat = on_disk["latency"]
    assert lat["warmup_excluded"] == 1 and lat["num_timed"] == 2
    assert on_disk["latency_s"] == pytest.approx(np.mean(per["latency_s"][1:]))
    assert set(on_disk["latency_phases_s"]) == {"encode_first_frame", "simulation", "real", "decode"}
    assert on_disk["checkpoint"]["step"] == 1 and on_disk["checkpoint"]["path"].endswith("step_000001")
    md = (tmp / "ev" / "eval.md").read_text()
    assert "| PSNR ↑ |" in md and "Not computed:" in md and "warm-up excluded" in md


def test_evaluation_is_deterministic_and_all_methods_see_the_same_samples(world):
    tmp, data, cfg = world
    a = evaluate_run(tmp / "run", data, None, "val", 2, tmp / "ev_a", progress=False)
    b = evaluate_run(tmp / "run", data, None, "val", 2, tmp / "ev_b", progress=False)
    c = evaluate_run(None, data, cfg, "val", 2, tmp / "ev_c", baseline="copy-first", progress=False)
    assert a.scores.per_sample["psnr"] == b.scores.per_sample["psnr"]
    assert a.scores.per_sample["episode_id"] == c.scores.per_sample["episode_id"]
    assert a.scores.per_sample["start"] == c.scores.per_sample["start"]


def _psnr_ref(pred: torch.Tensor, gt: torch.Tensor) -> float:
    """Per-frame PSNR over frames 1..F−1 in [0, 1], averaged (the metrics protocol), in numpy."""
    p, g = (pred.numpy() + 1) / 2, (gt.numpy() + 1) / 2  # (3, F, H, W)
    vals = [10 * math.log10(1.0 / np.mean((p[:, t] - g[:, t]) ** 2)) for t in range(1, p.shape[1])]
    return float(np.mean(vals))


def test_baselines_against_a_direct_computation(world):
    from simforcing.models.vae import DemoVAE
    from simforcing.runs.loaded import collate_one, eval_dataset

    tmp, data, cfg = world
    copy = evaluate_run(None, data, cfg, "val", 2, tmp / "copy", baseline="copy-first", progress=False)
    rec = evaluate_run(None, data, cfg, "val", 2, tmp / "rec", baseline="vae-recon", progress=False)
    ds = eval_dataset(cfg, data, "val")
    vae = DemoVAE.load(cfg.model.vae.path)
    for i in range(2):
        real = collate_one(ds[i])["real"]  # (1, 3, F, H, W)
        first = real[:, :, :1].expand_as(real)
        assert copy.scores.per_sample["psnr"][i] == pytest.approx(_psnr_ref(first[0], real[0]), abs=1e-4)
        recon = vae.decode(vae.encode(real)).clamp(-1, 1)
        assert rec.scores.per_sample["psnr"][i] == pytest.approx(_psnr_ref(recon[0], real[0]), abs=1e-4)
    assert copy.baseline == "copy-first" and copy.scores.forwards_per_sample == 0 and copy.checkpoint is None
    assert rec.scores.psnr > copy.scores.psnr  # the ceiling is above the floor on this data


def test_evaluate_cli(world, capsys):
    from simforcing.cli import main

    tmp, data, cfg = world
    rc = main(["evaluate", "--ckpt", str(tmp / "run"), "--data", str(data), "--num-samples", "2", "--out",
               str(tmp / "cli"), "--device", "cpu", "--sample.w=1.0", "--sample.n_real=2"])
    assert rc == 0 and "dB" in capsys.readouterr().out
    res = json.loads((tmp / "cli" / "eval.json").read_text())
    assert res["w"] == 1.0 and res["n_real"] == 2 and res["forwards_per_sample"] == cfg.sample.n_sim + 2
    rc = main(["evaluate", "--data", str(data), "--out", str(tmp / "cli2"), "--num-samples", "1"])
    assert rc == 2 and "--ckpt is required" in capsys.readouterr().err
    rc = main(["evaluate", "--ckpt", str(tmp / "run"), "--data", str(data), "--out", str(tmp / "cli3"),
               "--data.frames=13"])
    assert rc == 2 and "data.frames" in capsys.readouterr().err  # the checkpoint's network was built for 9


def test_latency_summary_excludes_the_warmup():
    s = summarize_latency([5.0, 1.0, 2.0, 3.0])
    assert s.mean_s == 2.0 and s.num_timed == 3 and s.warmup_excluded == 1 and s.note is None
    assert s.to_json() == {"mean_s": 2.0, "median_s": 2.0, "min_s": 1.0, "max_s": 3.0, "num_timed": 3,
                           "warmup_excluded": 1}  # eval.json's latency, as it always was
    one = summarize_latency([4.0])
    assert one.mean_s == 4.0 and one.warmup_excluded == 0 and "could not be excluded" in one.note
    assert LatencySummary.from_json(one.to_json()) == one
    sw = Stopwatch("cpu")
    with sw.phase("a"):
        sum(range(1000))
    sw.add("a", 1.0)
    assert sw.times["a"] > 1.0 and sw.total == sw.times["a"]


def test_baseline_needs_a_known_name(world):
    from simforcing.config import ConfigError

    tmp, data, _ = world
    with pytest.raises(ConfigError, match="--baseline"):
        evaluate_run(None, data, tiny_cfg(), "val", 1, tmp / "x", baseline="oracle", progress=False)


# -- the action-following error, the sim domain, the oracle condition, more windows per episode ---------------------


def _oracle_probe(tmp_path, cfg):
    """A probe file whose network reads nothing (all-zero weights): q̂_t = q_0 for every frame, so its error is the
    arm's displacement — enough to check the plumbing (a fitted probe is tested in test_probe.py)."""
    from simforcing.evaluate.probe import ProbeConfig, StateProbe, save_probe

    probe = StateProbe(ProbeConfig(height=cfg.data.height, width=cfg.data.width, state_dim=cfg.data.state_dim))
    with torch.no_grad():
        for p in probe.parameters():
            p.zero_()
    return save_probe(probe, tmp_path / "probe", {"note": "reads nothing"})


def test_action_following_error_its_floor_and_control(world, tmp_path):
    tmp, data, cfg = world
    probe = _oracle_probe(tmp_path, cfg)
    c = tiny_cfg(eval__probe=str(probe), eval__probe_moving_threshold=0.0)
    c.model.vae.path = cfg.model.vae.path
    res = evaluate_run(tmp / "run", data, c, "val", 3, tmp_path / "ev", progress=False)
    copy = evaluate_run(None, data, c, "val", 3, tmp_path / "ev_copy", baseline="copy-first", progress=False)
    # a probe that reads nothing scores every video like a model that does not move: the displacement
    af = res.scores.action
    assert af.af_pos == pytest.approx(af.af_floor_pos) == pytest.approx(copy.scores.action.af_pos)
    assert af.af_control_pos == pytest.approx(af.af_pos)  # the control ran (another window's actions)
    assert copy.scores.action.af_control_pos is None  # copying the first frame uses no actions: no control
    assert len(res.scores.per_sample["af_pos"]) == 3
    md = (tmp_path / "ev" / "eval.md").read_text()
    assert "Action following" in md and "another window's actions" in md
    without = evaluate_run(tmp / "run", data, None, "val", 1, tmp_path / "ev_none", progress=False)
    assert without.scores.action.af_pos is None and "fit-probe" in without.scores.reasons["af"]


def test_sim_domain_scores_the_recorded_simulation_video(world, tmp_path):
    from simforcing.runs.loaded import collate_one, eval_dataset
    from simforcing.evaluate.metrics import psnr_per_sample

    tmp, data, cfg = world
    c = tiny_cfg()
    c.model.vae.path = cfg.model.vae.path
    res = evaluate_run(None, data, c, "val", 3, tmp_path / "sim", baseline="copy-first", progress=False, domain="sim")
    ds = eval_dataset(c, data, "val")
    want = [float(psnr_per_sample(b["sim"][:, :, :1].expand_as(b["sim"]), b["sim"])) for b in
            (collate_one(ds[i]) for i in range(3))]
    assert res.domain == "sim" and res.scores.psnr == pytest.approx(float(np.mean(want)))
    model = evaluate_run(tmp / "run", data, None, "val", 2, tmp_path / "sim_m", progress=False, domain="sim")
    assert model.sampler["w"] == 0.0 and model.scores.forwards_per_sample == cfg.sample.n_real  # gate off: no condition


def test_oracle_condition_is_the_encoded_recorded_sim_video(world):
    from simforcing.runs.loaded import collate_one, eval_dataset, load_world_model
    from simforcing.sample import sampler_for
    from simforcing.sampler_batch import SamplerBatch

    tmp, data, cfg = world
    c = tiny_cfg(sample__condition="oracle")
    c.model.vae.path = cfg.model.vae.path
    wm = load_world_model(tmp / "run", c)
    batch = SamplerBatch.from_collated(collate_one(eval_dataset(wm.cfg, data, "val")[0]))
    res = sampler_for(wm)(batch, torch.Generator().manual_seed(0))
    torch.testing.assert_close(res.sim_latents, wm.vae.encode(batch.recorded_sim).float())
    assert res.forwards == 2 * c.sample.n_real  # no simulation rollout ran


def test_more_windows_per_episode_span_every_episode_first(world):
    from simforcing.runs.loaded import eval_dataset

    tmp, data, cfg = world
    c = tiny_cfg(eval__windows_per_episode=3)
    ds = eval_dataset(c, data, "val")
    assert len(ds) == 9
    assert [e for e, _ in ds.windows[:3]] == [0, 1, 2]  # window-major: the first samples span the episodes
    assert sorted({s for _, s in ds.windows}) == [0, 2, 4]  # 13-frame episodes, 9-frame windows: evenly spaced


def test_eval_json_round_trips_older_files_load_and_another_kind_is_refused(world, tmp_path):
    """eval.json is written and read through WindowEvaluation: the same object back; a file written before the tags
    (version 1, untagged) loads; a policy evaluation's eval.json is refused by name."""
    from simforcing.config import ConfigError
    from simforcing.evaluate.results import WindowEvaluation

    tmp, data, cfg = world
    res = evaluate_run(tmp / "run", data, None, "val", 2, tmp_path / "new", progress=False)
    raw = json.loads((tmp_path / "new" / "eval.json").read_text())
    assert raw["format"] == "simforcing.window-evaluation" and raw["format_version"] == 2
    assert WindowEvaluation.from_json(json.loads(json.dumps(res.to_json()))) == res
    assert WindowEvaluation.read(tmp_path / "new", "--eval") == res
    old = {k: v for k, v in raw.items() if k not in ("format", "format_version")}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "eval.json").write_text(json.dumps(old))
    assert WindowEvaluation.read(tmp_path / "old", "--eval") == res
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "eval.json").write_text(json.dumps({"env": "synthetic", "rows": {}, "episodes": {},
                                                                "scenes": {}}))
    with pytest.raises(ConfigError, match="holds a policy evaluation, not a one-window evaluation"):
        WindowEvaluation.read(tmp_path / "policy", "--eval")
