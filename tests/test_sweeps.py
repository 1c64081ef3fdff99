"""Sweeps: outputs exist with the paper's table shapes, w = 0 reuse across N_s, simulation reuse is exact, latency
charges every configuration its own simulation, and the CLI."""

from __future__ import annotations

import json

import pytest

from simforcing.config import Config
from simforcing.evaluate.run import evaluate_run
from simforcing.evaluate.results import CfgSweep, StepsSweep
from simforcing.evaluate.sweeps import sweep_cfg, sweep_steps
from simforcing.evaluate.tables import cfg_markdown, steps_markdown
from test_sample import make_data, make_run


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    data = make_data(tmp / "data", num_val=2)
    make_run(tmp / "run_p03", data, tmp / "vae", seed=0, conditioning__p=0.3)
    make_run(tmp / "run_p07", data, tmp / "vae", seed=1, conditioning__p=0.7)
    return tmp, data


def test_sweep_steps_tables_reuse_and_latency(world):
    tmp, data = world
    res = sweep_steps(tmp / "run_p07", data, None, n_sim=(1, 2), n_real=(1, 2), ws=(0.0, 0.6, 1.0), num_samples=2,
                      out_dir=tmp / "steps", progress=False)
    for name in ("sweep_steps.json", "sweep_steps.md", "sweep_steps.png"):
        assert (tmp / "steps" / name).stat().st_size > 0
    assert len(res.configs) == 2 * 2 * 3
    for metric in ("psnr", "ssim", "latency_s"):  # rows (N_s, N_r), columns w
        grid = res.tables[metric]
        assert len(grid) == 4 and all(len(r) == 3 and all(v is not None for v in r) for r in grid)
    md = (tmp / "steps" / "sweep_steps.md").read_text()
    assert md.count("| N_s | N_r | w = 0 | w = 0.6 | w = 1 |") == 3  # Tab. A2, A3, A4
    assert "invariant to N_s" in md
    rows = {(r.n_sim, r.n_real, r.w): r for r in res.configs}
    for nr in (1, 2):  # w = 0: evaluated at N_s = 1, reused for N_s = 2
        a, b = rows[(1, nr, 0.0)], rows[(2, nr, 0.0)]
        assert a.reused_from is None and b.reused_from == {"n_sim": 1, "n_real": nr}
        assert a.psnr == b.psnr and a.forwards_per_sample == nr
        for ns in (1, 2):
            assert rows[(ns, nr, 1.0)].forwards_per_sample == ns + nr
            assert rows[(ns, nr, 0.6)].forwards_per_sample == ns + 2 * nr
    # every w > 0 configuration is charged a simulation rollout (N_r = 2 reuses the N_r = 1 rollouts); w = 0 none
    for nr in (1, 2):
        assert rows[(2, nr, 1.0)].latency_phases_s["simulation"] > 0
        assert "simulation" not in rows[(2, nr, 0.0)].latency_phases_s
    # the shared simulation rollout gives exactly what a fresh evaluation of that configuration gives
    cfg = Config.load(tmp / "run_p07" / "config.json")
    cfg.sample.n_sim, cfg.sample.n_real, cfg.sample.w = 2, 2, 0.6
    fresh = evaluate_run(tmp / "run_p07", data, cfg, "val", 2, tmp / "fresh", progress=False)
    assert fresh.scores.per_sample["psnr"] == pytest.approx(rows[(2, 2, 0.6)].per_sample_psnr, abs=1e-6)
    saved = json.loads((tmp / "steps" / "sweep_steps.json").read_text())
    assert saved["tables"]["psnr"] == res.tables["psnr"]
    assert StepsSweep.from_json(json.loads(json.dumps(res.to_json()))) == res  # written and read through its type
    assert StepsSweep.read(tmp / "steps", "--sweep") == res and saved["table_md"] == steps_markdown(res)


def test_sweep_cfg_rows_p_columns_w(world):
    tmp, data = world
    res = sweep_cfg([tmp / "run_p03", tmp / "run_p07"], data, None, ws=(0.0, 1.0), num_samples=2,
                    out_dir=tmp / "cfg", progress=False)
    for name in ("sweep_cfg.json", "sweep_cfg.md", "sweep_cfg.png"):
        assert (tmp / "cfg" / name).stat().st_size > 0
    assert res.row_labels == ["p=0.3", "p=0.7"]  # read from each run's config
    assert [len(r) for r in res.tables["psnr"]] == [2, 2] and len(res.tables["ssim"]) == 2
    md = cfg_markdown(res)
    assert (tmp / "cfg" / "sweep_cfg.md").read_text() == md + "\n"
    assert CfgSweep.read(tmp / "cfg", "--sweep") == res
    assert "| p | w = 0 | w = 1 |" in md and md.count("\n| p=0.") == 2 and " / " in md
    # different checkpoints give different predictions
    assert res.tables["psnr"][0][1] != res.tables["psnr"][1][1]


def test_sweep_cli(world, capsys):
    from simforcing.cli import main

    tmp, data = world
    rc = main(["sweep", "steps", "--ckpt", str(tmp / "run_p03"), "--data", str(data), "--n-sim", "1",
               "--n-real", "1", "--w", "0", "1", "--num-samples", "1", "--out", str(tmp / "cli"), "--device", "cpu"])
    out = capsys.readouterr().out
    assert rc == 0 and "Tab. A2" in out and (tmp / "cli" / "sweep_steps.png").exists()
    rc = main(["sweep", "cfg", "--ckpts", str(tmp / "run_p03"), "--data", str(data), "--w", "0",
               "--num-samples", "1", "--out", str(tmp / "cli_cfg"), "--device", "cpu"])
    assert rc == 0 and json.loads((tmp / "cli_cfg" / "sweep_cfg.json").read_text())["row_labels"] == ["p=0.3"]


def test_sweep_files_written_before_the_tags_load_and_another_kind_is_refused(tmp_path):
    """A sweep_steps.json / sweep_cfg.json without the tags (version 1, as written before them) loads through its
    type; a sweep of the other kind under the expected name is refused by name."""
    from simforcing.config import ConfigError

    row = {"n_sim": 1, "n_real": 2, "w": 0.0, "reused_from": None, "psnr": 20.0, "ssim": 0.5, "psnr_arm": None,
           "lpips": None, "fid": None, "fvd": None, "af_pos": None, "af_pos_moving": None, "af_floor_pos": None,
           "latency_s": 0.1, "latency_phases_s": {"real": 0.1}, "forwards_per_sample": 2, "num_samples": 1,
           "per_sample_psnr": [20.0]}
    steps = {"run": "r", "checkpoint_step": 3, "checkpoint": {"step": 3}, "split": "val", "num_samples": 1,
             "n_sim": [1], "n_real": [2], "w": [0.0], "mask_mode": "arm", "seed": 0, "configs": [row],
             "tables": {m: [[row[m]]] for m in ("psnr", "ssim", "latency_s", "af_pos")}, "table_md": "old",
             "heatmap": "h.png", "json": "s.json", "notes": ["a note"]}
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "sweep_steps.json").write_text(json.dumps(steps))
    old = StepsSweep.read(tmp_path / "steps", "--sweep")
    assert old.configs[0].psnr == 20.0 and old.configs[0].p is None and "| 1 | 2 | 20.000 |" in steps_markdown(old)
    assert StepsSweep.from_json(old.to_json()) == old
    cfg_row = {**row, "p": 0.3, "run": "r", "checkpoint_step": 3}
    del cfg_row["reused_from"]
    cfg = {"runs": ["r"], "checkpoints": {"r": {"step": 3}}, "split": "val", "num_samples": 1, "w": [0.0],
           "configs": [cfg_row], "tables": {m: [[row[m]]] for m in ("psnr", "ssim", "af_pos")},
           "row_labels": ["p=0.3"], "table_md": "old", "heatmap": "h.png", "json": "c.json"}
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "sweep_steps.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="holds a sweep of the training p and the guidance w, not a sweep of the "
                                          "sampler's steps"):
        StepsSweep.read(tmp_path / "cfg", "--sweep")
    (tmp_path / "cfg" / "sweep_cfg.json").write_text(json.dumps(cfg))
    got = CfgSweep.read(tmp_path / "cfg", "--sweep")
    assert got.configs[0].p == 0.3 and got.configs[0].reused_from is None and CfgSweep.from_json(got.to_json()) == got
