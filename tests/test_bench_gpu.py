"""`simforcing bench --gpu` without a GPU: the no-device message and exit code, the schedule, memory plan and time
budget, the FLOP and MFU arithmetic, the report, and the whole schedule on the CPU with a tiny demo model (the three
train.compile modes — "graphs" running as "regional" off CUDA — the sampler eager and compiled, FSDP2 through gloo).
The GPU numbers themselves are in docs/BENCHMARK.md (docs/bench_gpu.json)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist

from simforcing.bench import gpu, measure, report
from simforcing.bench.inputs import random_wan_vae
from simforcing.cli import main
from simforcing.config import ConfigError, load_config
from simforcing.errors import EXIT_NO_DEVICE
from simforcing.models.info import parameter_counts
from simforcing.training import compiled

H200_BYTES = 143771 * 2**20  # torch.cuda.get_device_properties(...).total_memory of an H200 (about 140.4 GiB)
# 2 layers, batch 2: every section in a few seconds on 2 cores
TINY = ["bench", "--gpu", "--device", "cpu", "--tiny", "--preset", "demo", "--model.num_layers=2",
        "--train.batch_size=2"]


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """The whole schedule on the CPU; compiling with aot_eager (inductor's capture without code generation: seconds
    instead of minutes; tests/test_compile.py compares the modes' numbers)."""
    out = tmp_path_factory.mktemp("bench_gpu") / "gpu.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(compiled.COMPILE_OPTIONS, "backend", "aot_eager")
        mp.setattr(compiled, "_NOTES", set())
        assert main(TINY + ["--out", str(out)]) == 0
    return out, json.loads(out.read_text())


def test_no_cuda_device_is_a_named_message_and_exit_code(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "gpu.json"
    assert main(["bench", "--gpu", "--out", str(out)]) == EXIT_NO_DEVICE == 69
    err = capsys.readouterr().err
    assert "simforcing bench --gpu: no CUDA device" in err and "--device cpu" in err
    assert not out.exists() and not out.with_suffix(".md").exists()
    assert main(["bench", "--gpu", "--device", "cuda", "--out", str(out)]) == EXIT_NO_DEVICE


def test_preset_defaults_to_bridge_with_gpu(capsys):
    assert main(["bench", "--gpu", "--dry-run", "--out", "unused.json"]) == 0
    assert json.loads(capsys.readouterr().out)["preset"] == "bridge"
    assert main(["bench", "--dry-run", "--out", "unused.json"]) == 0
    assert json.loads(capsys.readouterr().out)["preset"] == "demo"


def test_gpu_only_options_are_config_errors(tmp_path, capsys):
    assert main(["bench", "--tiny", "--peak-tflops", "900", "--out", str(tmp_path / "b.json")]) == 2
    assert "--peak-tflops" in capsys.readouterr().err
    assert main(["bench", "--gpu", "--quick", "--device", "cpu", "--out", str(tmp_path / "b.json")]) == 2
    assert not (tmp_path / "b.json").exists()


@pytest.mark.parametrize("name, peak", [("NVIDIA H200", 989e12), ("NVIDIA H200 NVL", 835e12),
                                        ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12),
                                        ("NVIDIA H100 NVL", 835e12), ("NVIDIA A100-SXM4-80GB", 312e12),
                                        ("NVIDIA A100-PCIE-40GB", 312e12), ("Some Future GPU", None)])
def test_peak_by_device_name(name, peak):
    assert measure.peak_flops(name) == peak
    value, source = gpu.resolve_peak(name, None)
    assert value == peak and ("table" in source if peak else "--peak-tflops" in source)


def test_peak_override():
    assert gpu.resolve_peak("NVIDIA H200", 500.0) == (500e12, "--peak-tflops")
    with pytest.raises(ConfigError, match="--peak-tflops"):
        gpu.resolve_peak("NVIDIA H200", 0.0)


def test_flop_units_and_mfu_arithmetic():
    # SimForcing at batch B: the teacher evaluates B samples, the student 2B (one forward of the pair)
    assert gpu.step_flop_units(teacher_evals=1, student_evals=2, batch=1, checkpointing=True) == (7, 9)
    assert gpu.step_flop_units(teacher_evals=4, student_evals=8, batch=4, checkpointing=False) == (7, 7)
    assert gpu.step_flop_units(teacher_evals=0, student_evals=1, batch=1, checkpointing=True) == (3, 4)  # SFT
    r = gpu.rates(flops=7 * 4e12, seconds=0.1, peak=1000e12, measured=800e12)
    assert r["flops_per_s"] == pytest.approx(280e12)
    assert r["mfu"] == pytest.approx(0.28) and r["of_measured_matmul"] == pytest.approx(0.35)
    assert gpu.rates(1e12, 1.0, None, None) == {"flops_per_s": 1e12, "mfu": None, "of_measured_matmul": None}


def test_memory_plan_keeps_the_5b_model_on_an_h200_and_cuts_layers_on_smaller_cards():
    cfg = gpu.bench_config(load_config("bridge"))
    assert cfg.model.gradient_checkpointing and cfg.train.mixed_precision == "bf16"
    plan = gpu.plan_gpu_bench(cfg, H200_BYTES)
    params = parameter_counts(cfg)["total"]  # 5.77 B
    assert plan.num_layers == plan.preset_layers == 30 and plan.layers_note == "" and plan.batch_note == ""
    # the optimizer update dominates: 24 bytes per parameter (fp32 weights, grads, 2 moments, teacher, temporary)
    assert gpu.predicted_peak_bytes(cfg, params, 8) == 24 * params == plan.predicted_peak_bytes
    assert plan.predicted_peak_bytes <= plan.memory_budget_bytes
    small = gpu.plan_gpu_bench(cfg, 80 * 10**9)
    assert 1 <= small.num_layers < 30 and "30 layers need" in small.layers_note
    assert small.predicted_peak_bytes <= small.memory_budget_bytes
    assert {b for _, b, _ in small.train_rows} == {1, 8}  # with its layers, batch 8 fits
    assert gpu.plan_gpu_bench(cfg, None).num_layers == 30  # no limit known (CPU)


def test_the_large_batch_is_the_largest_that_fits(monkeypatch):
    """Where 8x the preset's batch would not fit with the kept layers, the plan takes the largest batch that does."""
    cfg = gpu.bench_config(load_config("bridge"))
    params = parameter_counts(cfg)["total"]
    monkeypatch.setattr(gpu, "predicted_peak_bytes", lambda cfg, p, batch: 24 * p + batch * gpu.GIB)
    plan = gpu.plan_gpu_bench(cfg, H200_BYTES)
    fits = [b for b in range(1, 9) if 24 * params + b * gpu.GIB <= gpu.memory_budget(H200_BYTES)]
    assert plan.num_layers == 30 and {b for _, b, _ in plan.train_rows} == {1, max(fits)} and max(fits) < 8
    assert "batch 8 needs" in plan.batch_note and f"{max(fits)} is the largest that fits" in plan.batch_note


def test_schedule():
    plan = gpu.plan_gpu_bench(gpu.bench_config(load_config("bridge")), H200_BYTES)
    assert plan.sections == ["device", "train", "sampler", "fsdp"]
    assert plan.train_rows == [("simforcing", 1, "off"), ("simforcing", 8, "off"), ("simforcing", 1, "graphs"),
                               ("simforcing", 8, "graphs"), ("simforcing", 1, "regional"),
                               ("simforcing", 8, "regional")]
    assert plan.sampler_configs == [(1, 10, 0.6), (1, 10, 1.0)] and plan.sampler_modes == ["off", "graphs"]
    assert [gpu.PAPER_LATENCY_S[c] for c in plan.sampler_configs] == [2.008, 1.245]
    assert plan.matmul_size == 8192 and plan.train_repeats >= 3 and plan.sampler_repeats >= 3
    assert plan.time_limit_s == gpu.TIME_LIMIT_S == 240
    tiny = gpu.plan_gpu_bench(gpu.bench_config(load_config("demo")), None, tiny=True)
    assert tiny.train_rows == [("simforcing", 8, m) for m in ("off", "graphs", "regional")]
    assert tiny.train_repeats == 1 and tiny.time_limit_s is None


def test_time_budget_skips_rows_past_their_sections_share():
    now = [0.0]
    budget = gpu.Budget(240.0, clock=lambda: now[0])
    assert budget.skip_reason("train") is None
    now[0] = 0.55 * 240  # the training rows' share used up: the sampler's rows may still start
    assert "132 s of the 240 s budget used, past the 132 s by which train rows must start" in \
        budget.skip_reason("train")
    assert budget.skip_reason("sampler") is None and budget.skip_reason("fsdp") is None
    now[0] = 0.95 * 240
    assert all(budget.skip_reason(s) for s in ("train", "sampler", "fsdp"))
    assert gpu.Budget(None, clock=lambda: 1e9).skip_reason("fsdp") is None  # --tiny: no budget


def test_a_run_past_its_budget_records_skipped_rows(tmp_path, monkeypatch):
    """Every row past its section's share: recorded as skipped with why, the report still written, the table says
    so (the device section and the models are built; no step runs)."""
    plan = gpu.plan_gpu_bench

    def no_time(cfg, memory, tiny=False):
        p = plan(cfg, memory, tiny)
        p.time_limit_s = 1e-9
        return p

    monkeypatch.setattr(gpu, "plan_gpu_bench", no_time)
    out = tmp_path / "gpu.json"
    assert main(TINY + ["--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert all("skipped" in r for r in res["train"]["rows"]) and len(res["train"]["rows"]) == 3
    assert all("skipped" in r for r in res["sampler"]["configs"]) and len(res["sampler"]["configs"]) == 4
    assert "skipped" in res["fsdp"] and res["within_time_limit"] is False
    text = out.with_suffix(".md").read_text()
    assert "| simforcing | CUDA graphs | 2 | skipped: " in text and "FSDP2: skipped: " in text


def test_params_in_gives_each_parameter_its_dtype_back():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2))
    model[0].to(torch.bfloat16)  # as store_teacher_for_autocast leaves a teacher: linear weights bf16, norms fp32
    with gpu.params_in(model, torch.bfloat16):
        assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert [p.dtype for p in model.parameters()] == [torch.bfloat16] * 2 + [torch.float32] * 2


def test_wan_vae_must_match_the_wan22_architecture():
    cfg = load_config("bridge", ["--model.vae.latent_channels=16"])
    with pytest.raises(ConfigError, match="Wan2.2 VAE"):
        random_wan_vae(cfg, torch.device("cpu"))


def test_cpu_run_covers_the_whole_schedule(cpu_run):
    out, res = cpu_run
    assert res["schema"] == gpu.SCHEMA and res["plan"]["preset"] == "demo"
    assert list(res["section_seconds"]) == res["plan"]["sections"] == ["device", "train", "sampler", "fsdp"]
    assert res["within_time_limit"] is True and res["time_limit_s"] is None  # --tiny: no budget
    assert res["device"]["name"] == "cpu" and res["device"]["peak_bf16_flops"] is None
    assert res["device"]["measured_matmul_flops"] > 0
    mo = res["model"]
    assert mo["num_layers"] == 2 and mo["gradient_checkpointing"] is True
    rows = {r["compile"]: r for r in res["train"]["rows"]}
    assert list(rows) == ["off", "graphs", "regional"] and all(r["batch_size"] == 2 for r in rows.values())
    # off CUDA "graphs" runs as "regional"; every compiled row compiled (no fallback to eager)
    assert [rows[m]["compile_mode"] for m in rows] == ["off", "regional", "regional"]
    assert all(r["compile_failure"] is None and r["warmup_calls"] == 1 and r["cudagraph_skips"] is None
               for r in rows.values())
    for r in rows.values():
        assert (r["teacher_evals"], r["student_evals"]) == (2, 4)
        assert (r["model_flop_units"], r["hardware_flop_units"]) == (7, 9)
        assert r["step_s"] > 0 and r["fwd_bwd_s"] > 0 and r["update_s"] > 0 and r["compile_s"] >= 0
        assert r["tokens_per_s"] == pytest.approx(2 * mo["tokens_per_sample"] / r["step_s"])
        assert r["model_flops_per_step"] == pytest.approx(r["model_flop_units"] * mo["forward_flops_per_sample"] * 2)
        assert r["mfu"] is None and r["of_measured_matmul"] > 0  # no datasheet peak for a CPU
    f = res["fsdp"]
    assert f["backend"] == "gloo" and f["world_size"] == 1 and f["parameters_are_dtensors"] is True
    assert f["loss_relative_difference"] < 1e-3 and f["grad_norm_relative_difference"] < 1e-3
    assert f["step"]["student_evals"] == 4 and f["step"]["step_s"] > 0 and f["step"]["compile"] == "off"
    assert not dist.is_initialized()  # the one-process group is gone after the run
    s = res["sampler"]
    assert [(r["compile"], r["n_sim"], r["n_real"], r["w"]) for r in s["configs"]] == [
        ("off", 1, 10, 0.6), ("off", 1, 10, 1.0), ("graphs", 1, 10, 0.6), ("graphs", 1, 10, 1.0)]
    assert [r["compile_mode"] for r in s["configs"]] == ["off", "off", "regional", "regional"]
    assert [r["forwards"] for r in s["configs"]] == [21, 11, 21, 11]
    for r in s["configs"]:
        assert r["ratio_to_paper"] == pytest.approx(r["latency_s"] / r["paper_latency_s"])
        assert set(r["phases_s"]) == {"encode_first_frame", "simulation", "real", "decode"}
        assert r["finite"] is True and r["compile_failure"] is None
    assert out.with_suffix(".md").read_text() == report.format_gpu_tables(res)


def test_report_of_a_cuda_run(cpu_run):
    """The tables as a CUDA run fills them: peak, MFU, memory, the modes, the FSDP2 row, the paper's latencies."""
    _, res = cpu_run
    res = json.loads(json.dumps(res))
    res["device"].update({"name": "NVIDIA H200", "peak_bf16_flops": 989e12, "peak_source": "table",
                          "capability": "9.0", "total_memory_bytes": H200_BYTES, "cuda": "13.0"})
    res["time_limit_s"] = 240.0
    for r in res["train"]["rows"] + [res["fsdp"]["step"]]:
        r.update({"mfu": 0.4123, "hfu": 0.53, "peak_allocated_bytes": 120 * 2**30, "cudagraph_skips": 0})
        r["compile_mode"] = r["compile"]
    res["train"]["rows"][1]["cudagraph_skips"] = 2
    text = report.format_gpu_tables(res)
    assert text.startswith("Device: NVIDIA H200 (compute 9.0, 140.4 GiB)")
    assert "dense bf16 peak 989 TFLOP/s" in text and "(budget 240 s; a row past its section's share is skipped)" in text
    assert "| simforcing | eager | 2 |" in text and "| 41.2% |" in text and "| 120.0 |" in text
    assert "| simforcing | CUDA graphs, 2 graphs not captured | 2 |" in text
    assert "| simforcing | compiled | 2 |" in text
    assert "| simforcing, FSDP2 (gloo, world size 1, float32 params) | eager | 2 |" in text
    assert "| 1 | 10 | 0.6 | fp32 | eager | " in text and "| 2.008 |" in text and "| 1.245 |" in text
    assert "| 1 | 10 | 0.6 | fp32 | CUDA graphs (ran as compiled) | " in text
    res["train"]["rows"][0] = {"method": "simforcing", "batch_size": 8, "compile": "off",
                               "error": "out of memory: CUDA out of memory"}
    res["train"]["rows"][2]["compile_failure"] = "BackendCompilerFailed: ..."
    text = report.format_gpu_tables(res)
    assert "| simforcing | eager | 8 | out of memory" in text and "| compiled (failed: eager) | 2 |" in text
