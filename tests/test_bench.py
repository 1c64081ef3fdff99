"""`simforcing bench`: the JSON schema, forward counts against the minimal ones, the reference loop's agreement and the
measuring helpers. No timing is asserted (timings depend on the machine and its load)."""

from __future__ import annotations

import json
import statistics

import pytest
import torch

from simforcing.bench import measure, options, report, sampler
from simforcing.cli import main

# --tiny with a 2-layer demo model keeps the whole command well under a minute on 2 cores
TINY_ARGS = ["bench", "--tiny", "--model.num_layers=2"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    assert main(TINY_ARGS + ["--out", str(out)]) == 0
    return out, json.loads(out.read_text())


def test_schema_and_machine_info(tiny_run):
    _, res = tiny_run
    assert res["schema"] == options.SCHEMA
    for key in ("cpu_count", "torch", "torch_threads", "device_name", "load_average_start", "load_average_end"):
        assert key in res["machine"], key
    assert res["machine"]["torch"] == torch.__version__
    assert res["settings"]["mode"] == "tiny" and res["settings"]["preset"] == "demo"
    assert set(res["section_seconds"]) == set(options.SECTIONS)
    assert res["seconds"] > 0


def check_sampler(res: dict, grid) -> None:
    """The sampler section's schema; every configuration ran exactly its minimal forwards and matched the plain loop."""
    s = res["sampler"]
    assert s["forward_s"] > 0 and s["decode_s"] > 0 and s["pair_forward_s"] > 0
    assert s["forward_step_s"] > 0 and s["step_context_s"] > 0
    assert [(r["n_sim"], r["n_real"], r["w"]) for r in s["configs"]] == list(grid)
    for r in s["configs"]:
        ns, nr, w = r["n_sim"], r["n_real"], r["w"]
        expected = nr if w == 0 else (ns + nr if w == 1 else ns + 2 * nr)
        assert r["minimal_forwards"] == expected
        assert r["forwards"] == expected, r
        assert r["reference_forwards"] == ns + 2 * nr
        assert r["max_abs_diff_vs_reference"] < 1e-3, r  # same noise -> the same video as the plain loop
        for sfx in ("", "_cpu"):  # medians of per-repetition ratios, on both clocks
            assert len(r[f"ratio{sfx}_all"]) == len(r[f"speedup{sfx}_all"]) == r["repeats"]
            assert r["ratio" + sfx] == pytest.approx(statistics.median(r[f"ratio{sfx}_all"]))
            assert r["speedup" + sfx] == pytest.approx(statistics.median(r[f"speedup{sfx}_all"]))
            assert r[f"ideal{sfx}_s"] == pytest.approx(expected * r[f"forward{sfx}_s"] + s[f"decode{sfx}_s"])
        assert 0 < r["in_network_s"] <= r["latency_s"] * 1.01
        assert s["repeats"] <= r["repeats"] <= s["max_repeats"]
    assert res["targets"]["forwards_minimal"]["ok"] is True
    for name in ("sampler_ratio", "speedup_everywhere"):
        assert {"ok", "ok_cpu", "value", "value_cpu"} <= set(res["targets"][name])


def test_policy_chunk_latency_and_counted_work(tiny_run):
    _, res = tiny_run
    rows = res["policy"]["settings"]
    assert set(rows) == {"action_only", "unconditional", "video_action"}
    for name, r in rows.items():
        steps = r["flow_steps"]
        cached = name != "video_action"
        assert r["counts_per_chunk"] == ({"observation_encodes": 1, "action_steps": steps, "chunks": 1} if cached
                                         else {"joint_forwards": steps, "chunks": 1})
        assert r["latency_s"] > 0 and r["plain_s"] > 0
        assert r["max_abs_diff_vs_plain"] < 1e-3  # the cached observation gives the plain loop's actions


def test_sampler_forwards_are_minimal_and_match_the_reference(tiny_run):
    _, res = tiny_run
    assert {w for _, _, w in options.TINY_GRID} == {0.0, 0.6, 1.0}
    check_sampler(res, options.TINY_GRID)


@pytest.mark.slow
def test_quick_bench_schema_and_minimal_forwards(tmp_path, monkeypatch):
    """`bench --quick` as a user runs it: every section, the quick grid and sizes, the targets' schema — with its
    repetitions cut to one (they only make the timings steadier; about a minute of the suite otherwise)."""
    import dataclasses

    quick_mode = options.BenchOptions.for_mode

    def one_repeat(quick: bool, tiny: bool):
        o = quick_mode(quick, tiny)
        return dataclasses.replace(o, repeats=1, max_repeats=1, min_config_s=0.0, forward_repeats=2, train_repeats=2,
                                   scaling_repeats=1, policy_repeats=1, fewstep_repeats=1)

    monkeypatch.setattr(options.BenchOptions, "for_mode", staticmethod(one_repeat))
    out = tmp_path / "quick.json"
    assert main(["bench", "--quick", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["schema"] == options.SCHEMA and res["settings"]["mode"] == "quick"
    assert set(res["section_seconds"]) == set(options.SECTIONS)
    check_sampler(res, options.QUICK_GRID)
    assert {"speedup_1_10_0", "train_ratio"} <= set(res["targets"])
    assert res["train"]["ideal_ratio"] == pytest.approx(7 / 3)
    assert out.with_suffix(".md").read_text().startswith("Machine:")
    assert (tmp_path / "quick_scaling.png").stat().st_size > 0


def test_train_step_counts_and_memory(tiny_run):
    _, res = tiny_run
    t = res["train"]
    b = t["batch_size"]
    sft, sf = t["methods"]["sft"], t["methods"]["simforcing"]
    # SFT: one student forward of B; SimForcing: one teacher forward of B + one student forward of 2B
    assert (sft["teacher_evals_per_step"], sft["student_evals_per_step"]) == (0, b)
    assert (sf["teacher_evals_per_step"], sf["student_evals_per_step"]) == (b, 2 * b)
    assert (sft["forward_units"], sf["forward_units"]) == (3, 7)
    assert t["ideal_ratio"] == pytest.approx(7 / 3)
    assert 0 < sft["peak_bytes"] < sf["peak_bytes"]  # two student passes keep twice the activations
    assert t["ratio_fwd_bwd"] > 0 and t["ratio_fwd_bwd_cpu"] > 0 and t["ratio_step"] > 0
    assert "train_ratio" in res["targets"]


def test_data_throughput_counts_every_window(tiny_run):
    _, res = tiny_run
    d = res["data"]
    windows = d["episodes"] * d["windows_per_episode"]
    assert [r["workers"] for r in d["pixels"]] == [0, 1, 2]
    assert [r["workers"] for r in d["latents"]] == [0, 1, 2]
    for r in d["pixels"] + d["latents"]:
        assert r["windows"] == windows and r["windows_per_s"] > 0
    assert d["latent_encode"]["windows"] == windows


def test_scaling_points_and_plot(tiny_run):
    out, res = tiny_run
    sc = res["scaling"]
    pts = [p for p in sc["points"] if "forward_s" in p]
    assert {p["sweep"] for p in pts} == {"frames", "resolution"}
    for sweep in ("frames", "resolution"):
        rows = [p for p in pts if p["sweep"] == sweep]
        tokens = [p["tokens"] for p in rows]
        assert tokens == sorted(tokens) and tokens[0] < tokens[-1]
        shares = [p["attention_flop_share"] for p in rows]
        assert shares[0] < shares[-1]  # the quadratic part grows with the sequence
        assert all(p["peak_bytes"] > 0 for p in rows)
    png = out.with_name(out.stem + "_scaling.png")
    assert sc["plot"] == png.name
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tables_are_markdown(tiny_run):
    out, res = tiny_run
    text = report.format_tables(res)
    assert out.with_suffix(".md").read_text().strip() == text.strip()  # written next to the JSON
    assert "| N_s | N_r | w |" in text and "| sft |" in text and "| simforcing |" in text
    assert "video decoding" in text and "latent cache" in text


def test_grids():
    assert {(1, 10, 0.0), (1, 10, 0.6), (1, 10, 1.0)} <= set(options.QUICK_GRID)
    assert len(set(options.FULL_GRID)) == 64
    assert {n for ns, nr, _ in options.FULL_GRID for n in (ns, nr)} == {1, 5, 10, 20}
    assert {w for _, _, w in options.FULL_GRID} == {0.0, 0.3, 0.6, 1.0}


def test_minimal_forwards():
    assert sampler.minimal_forwards(5, 20, 0.0) == 20
    assert sampler.minimal_forwards(5, 20, 1.0) == 25
    assert sampler.minimal_forwards(5, 20, 0.3) == 45


def test_peak_bytes_sees_a_known_allocation():
    n = 1 << 20  # 4 MiB of float32

    def work():
        x = torch.ones(n)
        y = x * 2  # 8 MiB live at once
        return float(y[0])

    peak = measure.peak_bytes(work, torch.device("cpu"))
    assert 8 * 2**20 <= peak < 16 * 2**20


def test_bad_sections_is_a_config_error(tmp_path, capsys):
    assert main(["bench", "--tiny", "--sections", "sampler,nope", "--out", str(tmp_path / "b.json")]) == 2
    assert "--sections" in capsys.readouterr().err
    assert not (tmp_path / "b.json").exists()


def test_rollout_and_world_model_policy_sections(tiny_run):
    """Episodes rolled out together do the minimal forwards per chunk; the world-model evaluation's episodes per
    minute are reported against the simulator and one episode at a time (no timing asserted)."""
    out, res = tiny_run
    ro = res["rollout"]
    assert [r["batch"] for r in ro["rows"]] == [1, 2]
    for r in ro["rows"]:
        assert r["forwards_per_chunk"] == r["minimal_forwards_per_chunk"] == 1 + 2 * 10  # (1, 10, 0.6)
        assert r["seconds"] > 0 and r["seconds_one_at_a_time"] > 0
    wm = res["wm_policy"]
    assert wm["episodes"] == 2 * 3 and set(wm["episodes_per_minute"]) == {
        "world_model_batched", "world_model_one_at_a_time", "simulator"}
    md = out.with_suffix(".md").read_text()
    assert "Long rollouts" in md and "Policies inside a world model" in md


def test_policy_table_in_the_markdown(tiny_run):
    from simforcing.bench.report import format_tables

    _, res = tiny_run
    md = format_tables(res)
    assert "| action_only |" in md and "| video_action |" in md and "latency per chunk" in md


def test_precision_section_times_fp32_against_bf16_at_one_and_two_threads(tmp_path):
    """`--sections precision`: both training steps in fp32 and under bf16 autocast, at 1 and 2 threads, in the JSON
    and the markdown (no timing asserted)."""
    out = tmp_path / "p.json"
    assert main(TINY_ARGS + ["--sections", "precision", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["precision"]["rows"]
    assert [(r["what"], r["threads"]) for r in rows] == [("train sim_pretrain", 1), ("train sim_pretrain", 2),
                                                        ("train simforcing", 1), ("train simforcing", 2)]
    for r in rows:
        assert r["fp32_s"] > 0 and r["bf16_s"] > 0
        assert r["bf16_speedup"] == pytest.approx(r["fp32_s"] / r["bf16_s"])
    assert "bf16 autocast (ms)" in out.with_suffix(".md").read_text()


def test_simulator_section_times_the_servo_frame_against_its_stepped_loop(tmp_path):
    """`--sections simulator`: the IK, the servo frame in the real scene and the arm's twin against the stepped
    loop (and the same physics state from both, to the bit), and the two renders, in the JSON and the markdown (no
    timing asserted)."""
    out = tmp_path / "s.json"
    assert main(TINY_ARGS + ["--sections", "simulator", "--out", str(out)]) == 0
    sim = json.loads(out.read_text())["simulator"]
    rows = {r["what"]: r for r in sim["rows"]}
    assert list(rows) == ["IK solve (the arm's 6 joints)", "servo frame, real scene", "servo frame, arm twin",
                          "render a real frame (colour + arm mask)", "render a twin frame"]
    for r in rows.values():
        assert r["ms"] > 0
    for kind in ("real scene", "arm twin"):
        r = rows[f"servo frame, {kind}"]
        assert r["identical"] is True and r["speedup"] == pytest.approx(r["reference_ms"] / r["ms"])
    assert sim["lp_num_threads"] is not None and sim["resolution"] == [32, 48]
    assert "| servo frame, arm twin |" in out.with_suffix(".md").read_text()


class _Scale(torch.nn.Module):
    """A module of the test's own (dynamo does not trace torch.nn's modules as top-level frames)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        return x * self.w + 1


def test_every_compile_comparison_compiles_afresh(monkeypatch):
    """`--sections compile` compares many calls in one process; dynamo keeps a frame's graphs across them and runs a
    frame eagerly once its recompile limit (8) is used up, so without a reset the later rows timed eager against
    eager. Each comparison here has its own shape (a guard failure for the last one's graph); a backend that counts
    its graphs sees one per comparison, past the limit too."""
    from simforcing.bench import compile_step
    from simforcing.training import compiled

    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    monkeypatch.setattr(compiled, "COMPILE_OPTIONS", {"backend": counting, "dynamic": False})
    for batch in range(1, 12):
        x = torch.randn(batch, 3)

        def make():
            layer = _Scale()

            def call():
                with torch.no_grad():
                    layer(x)
            return call, [layer]

        row = compile_step._compare(make, 2, torch.device("cpu"))
        assert "failure" not in row and len(graphs) == batch, (batch, len(graphs))
