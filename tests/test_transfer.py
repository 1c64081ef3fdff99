"""The policy-transfer measurement (demo.transfer_stats, policy.probe, demo.transfer_section): the statistics against
scipy and hand-computed values, the pairing of runs, the ridge read-out on known linear data, the jobs of `demo
--full`'s policy section (every initialisation × world-model seed × policy seed × budget, each depending on the run it
starts from) while the default section keeps its jobs. The probe end to end on a tiny policy: test_prior."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from simforcing.demo.policy_section import QUICK, PolicyBudget, policy_jobs
from simforcing.demo.transfer_section import TRANSFER_QUICK, full_policy_jobs, policy_specs, wm_key
from simforcing.config import ConfigError
from simforcing.demo.policy_results import FullMeasurement, PolicyInit, PolicySectionResult
from simforcing.policy.probe import ProbeResult, ProbeScore, RunProbe, probe_table, ridge_probe, score
from simforcing.policy.closed_loop.results import EpisodeOutcome, PolicyRow
from simforcing.demo.transfer_stats import (ClusterMean, InitSummary, RunRate, TransferAnalysis, TransferBlock,
                                            cluster_mean, default_note, paired_scene_diff, successes, transfer_analysis,
                                            transfer_markdown, welch)


def outcomes(v):
    """[0/1 per scene] -> {task: [EpisodeOutcome]}, a third of the scenes per task."""
    n = len(v) // 3
    return {t: [EpisodeOutcome(j, bool(x), 5) for j, x in enumerate(v[i * n:(i + 1) * n])]
            for i, t in enumerate(("reach", "push", "grasp"))}


def test_paired_scene_difference():
    a, b = np.array([1, 1, 0, 1, 0, 1.0]), np.array([0, 1, 0, 0, 0, 1.0])
    d = paired_scene_diff(a, b)
    diff = a - b
    se = diff.std(ddof=1) / math.sqrt(6)
    assert d.diff == pytest.approx(2 / 6) and d.ci95 == pytest.approx([2 / 6 - 1.96 * se, 2 / 6 + 1.96 * se])
    with pytest.raises(ValueError, match="same scenes"):
        paired_scene_diff(a, b[:3])


def test_clusters_and_welch_match_scipy():
    wm = [RunRate("wm", w, p, r, {}) for (w, p), r in
          {(42, 42): .5, (42, 43): .6, (43, 42): .3, (43, 43): .4, (44, 42): .7, (44, 43): .5}.items()]
    base = [RunRate("base", None, p, r, {}) for p, r in ((42, .2), (43, .4), (44, .3))]
    a, b = cluster_mean(wm), cluster_mean(base)
    assert a.cluster_means == pytest.approx([.55, .35, .6]) and a.clusters == 3 and a.runs == 6
    assert b.cluster_means == pytest.approx([.2, .4, .3])
    w = welch(a, b)
    ref = stats.ttest_ind(a.cluster_means, b.cluster_means, equal_var=False).confidence_interval(0.95)
    assert w.diff == pytest.approx(np.mean([.55, .35, .6]) - .3)
    assert w.ci95 == pytest.approx([ref.low, ref.high])
    assert w.established == (ref.low > 0 or ref.high < 0)
    assert welch(cluster_mean(wm[:2]), b).ci95 is None  # one cluster: no interval, nothing established


def test_analysis_pairs_the_runs_that_share_seeds_and_says_what_is_established():
    rng = np.random.default_rng(0)
    n = 30
    specs, episodes, rows = {}, {}, {}

    def add(init, wm, seed, p):
        label = f"action_only / {init} / {wm} / {seed}"
        specs[label] = {"setting": "action_only", "init": init, "wm_seed": wm, "seed": seed, "steps": 500}
        v = (rng.random(n) < p).astype(int)
        episodes[label] = outcomes(v)
        rows[label] = PolicyRow.of(episodes[label], ("reach", "push", "grasp"))

    for seed in (42, 43, 44):
        add("video_base", None, seed, 0.1)
        for wm in (42, 43, 44):
            add("simforcing", wm, seed, 0.9)
            add("sft", wm, seed, 0.5)
    res = transfer_analysis(rows, episodes, specs, {"full_eval_per_task": 10},
                            (("simforcing", "video_base"), ("simforcing", "sft"), ("video_base", "random")))
    (blk,) = res.blocks
    comps = {(c.a, c.b): c for c in blk.comparisons}
    assert set(comps) == {("simforcing", "video_base"), ("simforcing", "sft")}  # no random run: no comparison
    sv = comps["simforcing", "video_base"]
    assert len(sv.cells) == 9 and sv.welch.established and sv.welch.ci95[0] > 0  # 0.9 against 0.1: clear
    assert sorted((c.wm_seed, c.seed) for c in sv.cells) == [(w, s) for w in (42, 43, 44) for s in (42, 43, 44)]
    cell = next(c for c in sv.cells if (c.wm_seed, c.seed) == (43, 44))
    expect = successes(episodes["action_only / simforcing / 43 / 44"]) - successes(
        episodes["action_only / video_base / None / 44"])
    assert cell.scenes.diff == pytest.approx(expect.mean())
    assert len(comps["simforcing", "sft"].cells) == 9  # world model against world model: same WM and policy seed
    assert TransferAnalysis.from_json(json.loads(json.dumps(res.to_json(), default=float))) == res  # round trip
    md = transfer_markdown(res, None, {"simforcing": "SimForcing WM", "video_base": "video base"})
    assert "| SimForcing WM − video base |" in md and "**yes**" in md


def test_default_note_gives_the_paired_difference_and_its_limits():
    ep = {"a": outcomes([1, 1, 1, 0, 0, 0]), "b": outcomes([0, 1, 0, 0, 0, 0])}
    note = default_note({"a": {}, "b": {}}, ep, {"a": "simforcing", "b": "video_base"},
                        {"simforcing": "SimForcing WM", "video_base": "video base"})
    assert "SimForcing WM − video base: +33.3 points" in note and "cannot show" in note and "6 scenes" in note


def test_ridge_reads_a_linear_signal_and_not_noise():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(120, 8))  # features on a low-dimensional manifold, as a network's are
    x = z @ rng.normal(size=(8, 300)) + 0.05 * rng.normal(size=(120, 300))
    y = z @ rng.normal(size=(8, 3)) + 0.01 * rng.normal(size=(120, 3))
    groups = np.repeat(np.arange(60), 2)
    pred, lam = ridge_probe(x[:80], y[:80], groups[:80], x[80:])
    assert score(pred, y[80:]).r2 > 0.9 and lam in (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)
    noise = rng.normal(size=(120, 3))
    pred, _ = ridge_probe(x[:80], noise[:80], groups[:80], x[80:])
    assert score(pred, noise[80:]).r2 < 0.1
    s = score(np.zeros((2, 3)), np.array([[0.03, 0.04, 0.0], [0.0, 0.0, 0.0]]))
    assert s.rmse_cm == pytest.approx(100 * math.sqrt(0.0025 / 2))


def _analysis() -> TransferAnalysis:
    """A small measurement: two initialisations, two policy seeds, six scenes."""
    specs, episodes, rows = {}, {}, {}
    for init, v in (("simforcing", [1, 1, 0, 1, 1, 0]), ("video_base", [0, 1, 0, 0, 1, 0])):
        for seed in (42, 43):
            label = f"action_only / {init} / {seed}"
            specs[label] = {"setting": "action_only", "init": init, "wm_seed": 42 if init == "simforcing" else None,
                            "seed": seed, "steps": 3}
            episodes[label] = outcomes(v)
            rows[label] = PolicyRow.of(episodes[label], ("reach", "push", "grasp"))
    return transfer_analysis(rows, episodes, specs, {"full_eval_per_task": 2}, (("simforcing", "video_base"),))


def _probe() -> ProbeResult:
    s = score(np.array([[0.0, 0.1, 0.2], [0.1, 0.0, 0.3]]), np.array([[0.0, 0.2, 0.2], [0.1, 0.1, 0.1]]))
    flat = ProbeScore(None, 1.5)  # R² undefined: the targets do not vary
    runs = {"video base": RunProbe("runs/vb", [{"hand": s, "object": flat}, {"hand": flat, "object": s}],
                                   {"hand": 0, "object": 1})}
    latent, reference = {"hand": s, "object": s}, {"hand": {"fit mean": flat}, "object": {"fit mean": s,
                                                                                           "layout mean": flat}}
    return ProbeResult(runs, 12, 6, 2, 0.03, reference, latent, probe_table(runs, latent, reference))


def test_probe_result_round_trips_and_its_file_says_what_it_is(tmp_path):
    """probe.json: tagged, read back as what was written (an untagged one of before the tags too), and a state
    probe's probe.json (`model fit-probe`) refused by name."""
    res = _probe()
    assert "| video base | 1.5 cm |" in res.table_md and "R²" in res.table_md
    res.write(tmp_path / "p")
    body = json.loads((tmp_path / "p" / "probe.json").read_text())
    assert body["format"] == "simforcing.policy-probe" and list(body)[2:] == [
        "runs", "n_fit", "n_test", "layouts", "jitter", "reference", "latent", "table_md"]
    assert ProbeResult.read(tmp_path / "p", "--probe") == res
    assert (tmp_path / "p" / "probe.md").read_text() == res.table_md + "\n"
    (tmp_path / "old").mkdir()
    untagged = {k: v for k, v in body.items() if not k.startswith("format")}
    (tmp_path / "old" / "probe.json").write_text(json.dumps(untagged))
    assert ProbeResult.read(tmp_path / "old", "--probe") == res
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "probe.json").write_text(json.dumps({"format": "simforcing-state-probe", "version": 1}))
    with pytest.raises(ConfigError, match="--probe: .*a state probe .*not a linear probe"):
        ProbeResult.read(tmp_path / "state", "--probe")


def test_policy_section_result_round_trips_with_the_results_json_it_always_wrote():
    """The default section's results.json and --full's: the same keys in the same order as before the type,
    and from_json(to_json) is the result."""
    rate = PolicyRow.of(outcomes([1, 0, 1]), ("reach", "push", "grasp"))
    init = {"action_only / base": PolicyInit("base", 10, 4, ["blocks.0.scale_shift_table"])}
    res = PolicySectionResult({"action_only / base": rate}, "| table |", {"policy data": "simforcing data ..."},
                              {"policy data": 1.5}, {"action_only / base": "out/policy/action_only_base"}, init,
                              "out/policy/data", dataclasses.asdict(QUICK), 42)
    d = json.loads(json.dumps(res.to_json()))
    assert list(d) == ["rows", "table_md", "commands", "wall_time_s", "runs", "init", "data", "budget", "seed"]
    assert d["init"]["action_only / base"] == {"source": "base", "inherited": 10, "new": 4,
                                               "partial": ["blocks.0.scale_shift_table"]}
    assert PolicySectionResult.from_json(d) == res
    full = dataclasses.replace(res, full=FullMeasurement(init, {"wm_seeds": 1}, 2, ["action_only / base"], _analysis(),
                                                         _probe(), "## md", "note", "out/transfer.png"))
    d = json.loads(json.dumps(full.to_json()))
    assert list(d) == ["rows", "table_md", "commands", "wall_time_s", "runs", "init", "init_all", "data", "budget",
                       "transfer_budget", "seed", "full", "per_task", "main", "transfer", "probe", "transfer_md",
                       "note", "transfer_png"]
    assert d["full"] is True and PolicySectionResult.from_json(d) == full
    # the report renders both from the type (demo.report)
    from simforcing.demo.report import _policy_section
    plan = SimpleNamespace(out=Path("out"))
    md = "\n".join(_policy_section(res, plan))
    assert "| table |" in md and "action_only / base: 10 tensors inherited, 4 new" in md and "## md" not in md
    md = "\n".join(_policy_section(full, plan))
    assert "note" in md and "## md" in md and "![success per policy run](transfer.png)" in md


def test_full_section_jobs(tmp_path):
    wm = {wm_key(m, s): tmp_path / wm_key(m, s) for m in ("sft", "simforcing") for s in (42, 43)}
    wm["video_base"] = tmp_path / "video_base"
    deps = {k: f"make {k}" for k in wm}
    b, t = QUICK, TRANSFER_QUICK
    specs = policy_specs(b.train_steps, t)
    per_budget = 2 * (1 + 1 + 2 + 2)  # policy seeds × (random, video base, sft × WM seeds, simforcing × WM seeds)
    joint = 2 * 2 * (1 + 2)  # 2 settings × policy seeds × (video base, simforcing × WM seeds)
    video_only = 2 * 2  # policy seeds × WM seeds: the SimForcing WM's video expert alone, at the demo's budget only
    assert len(specs) == 2 * per_budget + joint + video_only and len(set(specs)) == len(specs)
    assert len(policy_specs(b.train_steps, dataclasses.replace(t, video_only=False))) == 2 * per_budget + joint
    jobs, info = full_policy_jobs(tmp_path, wm, 42, b, t, wm_deps=deps, after=("stage1",))
    by = {j.name: j for j in jobs}
    assert len(info["runs"]) == len(specs) and len(set(info["runs"].values())) == len(specs)
    assert all(Path(r).parent == tmp_path / "policy" / "transfer" for r in info["runs"].values())
    assert info["data"] == str(tmp_path / "policy" / "data")  # the default section's dataset
    sf = "policy train action_only / SimForcing WM / WM seed 43 / seed 43 / 4 steps"
    assert "make simforcing_seed43" in by[sf].deps and by[sf].argv[by[sf].argv.index("--init") + 1] \
        == str(wm["simforcing_seed43"])
    rnd = by["policy train action_only / random (no prior)"]
    assert rnd.argv[rnd.argv.index("--init") + 1] == "base" and "--config" in rnd.argv
    vo = by["policy train action_only / SimForcing WM video expert only / WM seed 43"]
    assert vo.argv[vo.argv.index("--init") + 1] == str(wm["simforcing_seed43"]) and "make simforcing_seed43" in vo.deps
    assert vo.argv[-1] == "--policy.init_from=video" and "--policy.init_from=video" not in by[sf].argv
    assert not any("video expert only" in n and "4 steps" in n for n in by)
    vb = by["policy train video_action / video base / seed 43"]
    assert "make video_base" in vb.deps and "--train.seed=43" in vb.argv
    evals = [j for j in jobs if j.name.startswith("policy eval")]
    assert len(evals) == len(specs) + 1 and all(j.argv[j.argv.index("--per-task") + 1] == "1" for j in evals)
    probe = by["policy probe"]
    assert len(probe.deps) == 1 + 1 + 2 + 2  # action-only, first policy seed, demo budget: every init and WM (the
    assert not any("video expert only" in d for d in probe.deps)  # video expert alone is the SimForcing WM's own)
    with pytest.raises(ValueError, match="simforcing_seed43"):
        full_policy_jobs(tmp_path, {k: v for k, v in wm.items() if k != "simforcing_seed43"}, 42, b, t)
    # policy_jobs(full=True) hands over to it; the default section is what it was: base, SFT WM, SimForcing WM
    wm3 = {**wm, **{wm_key(m, 44): tmp_path / wm_key(m, 44) for m in ("sft", "simforcing")}}
    assert [j.name for j in policy_jobs(tmp_path, wm3, full=True, budget=b)[0]] == \
        [j.name for j in full_policy_jobs(tmp_path, wm3, 42, b)[0]]
    default, dinfo = policy_jobs(tmp_path, wm, budget=PolicyBudget())
    assert list(dinfo["runs"]) == ["action_only / base", "action_only / SFT WM", "action_only / SimForcing WM"]
    assert not any(j.name == "policy probe" for j in default) and "full" not in dinfo


def test_the_measurement_is_drawn_per_setting_and_budget(tmp_path):
    """plot_transfer: one panel per block; an empty analysis is a named error, not an empty picture."""
    from PIL import Image

    from simforcing.plots import plot_transfer
    run = RunRate("x", None, 42, 0.3, {})
    init = InitSummary(ClusterMean(0.3, 0.2, 2, [0.3, 0.4], 2, [-0.1, 1.2]),  # whiskers clipped to 0-100
                       [run, dataclasses.replace(run, rate=0.4)])
    blocks = [TransferBlock("action_only", 500, {"random": init, "simforcing": init}, []),
              TransferBlock("video_action", 500, {"simforcing": init}, [])]
    png = plot_transfer(blocks, {"random": "random (no prior)"}, tmp_path / "t.png", "title")
    with Image.open(png) as im:
        assert im.format == "PNG" and im.size[0] > im.size[1] > 100  # two panels side by side
    with pytest.raises(ValueError, match="no block"):
        plot_transfer([TransferBlock("a", 1, {}, [])], {}, tmp_path / "e.png")
