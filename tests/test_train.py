"""The training loop: run folders of both stages, every method, exact resume, frozen teacher, NaN stop, signals.

Everything runs the real modules (world model, demo VAE, PairedWindowDataset, methods) at a tiny size: one layer,
width 32, 5-frame windows of 32×48 frames, batch 2.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from datagen import make_dataset
from simforcing.cli import main as cli_main
from simforcing.config import STAGE2_METHODS, Config, ConfigError, load_config
from simforcing.errors import EXIT_DIVERGED, EXIT_STOPPED
from simforcing.runs.checkpoint import list_checkpoints, load_checkpoint, sha256_file
from simforcing.runs.folder import load_model_from_run
from simforcing.train import STAGE2, train_run
from simforcing.training.faults import FaultPlan, StopFlag
from simforcing.training.loop import Trainer
from simforcing.training.optim import lr_factor, param_groups
from simforcing.training.stage import Start
from simforcing.training.step import StepHooks, TrainStep

REPO = Path(__file__).resolve().parents[1]
TINY = ["--model.num_layers=1", "--model.num_attention_heads=2", "--model.attention_head_dim=16",
        "--model.ffn_dim=64", "--model.freq_dim=32", "--model.action_hidden=32", "--model.action_ffn_dim=64",
        "--data.frames=5", "--data.windows_per_episode=2", "--train.batch_size=2", "--train.log_every=1",
        "--train.ckpt_every=2", "--train.keep_last=2", "--train.max_steps=4"]


def make_tiny_data(base: Path) -> tuple[Path, Path]:
    """A tiny dataset (2 train, 1 val, 2 sim-only episodes of 13 frames) and a demo VAE with the demo preset's
    channel count (identity normalisation, the first K residual directions as its basis; no fitting needed)."""
    from simforcing.models.vae import DemoVAE

    root = make_dataset(base / "data", num_train=2, num_val=1, num_pool=2, length=13)
    vae = base / "vae"
    c = load_config("demo").model.vae.latent_channels
    DemoVAE(torch.eye(192)[:, : c - 48], torch.zeros(c), torch.ones(c)).save(vae)
    return root, vae


def tiny_cfg(root: Path, vae: Path, *extra: str) -> Config:
    return load_config("demo", TINY + [f"--data.root={root}", f"--model.vae.path={vae}", *extra])


def cli_args(root: Path, vae: Path, *extra: str) -> list[str]:
    return TINY + [f"--data.root={root}", f"--model.vae.path={vae}", *extra]


def losses(run: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]


def status(run: Path) -> dict:
    return json.loads((run / "status.json").read_text())


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    return make_tiny_data(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def stage1(tiny, tmp_path_factory):
    run = tmp_path_factory.mktemp("s1") / "run1"
    result = train_run(tiny_cfg(*tiny), run, "pretrain", progress=False)
    assert result["exit_code"] == 0, result
    return run


# ----------------------------------------------------------------------------------------------------------------------
# Recipe pieces
# ----------------------------------------------------------------------------------------------------------------------


def test_lr_schedule_warmup_then_cosine_to_zero():
    total, warm = 100, 5
    f = [lr_factor(i, total, warm) for i in range(total + 1)]
    assert f[:5] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert f[5] == pytest.approx(1.0) and f[total] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in zip(f[5:], f[6:]))  # monotone decay after warm-up
    assert f[5 + 95 // 2] == pytest.approx(0.5 * (1 + math.cos(math.pi * 47 / 95)))


def test_param_groups_skip_frozen_and_exempt_biases_and_norms():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2))
    model[2].weight.requires_grad_(False)
    decay, no_decay = param_groups(model, 0.01)
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert [p is model[0].weight for p in decay["params"]] == [True]
    ids = {id(p) for p in no_decay["params"]}
    assert ids == {id(model[0].bias), id(model[1].weight), id(model[1].bias), id(model[2].bias)}


def test_cpu_optimizer_is_fused_and_matches_the_loop():
    """build_optimizer's AdamW on the CPU is the fused implementation — one pass per parameter instead of ~10
    operations — and computes what torch's per-parameter loop computes, to float32 rounding."""
    from simforcing.training.optim import build_optimizer

    cfg = load_config("demo", TINY)
    torch.manual_seed(0)
    models = [torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
              for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    ours, _ = build_optimizer(models[0], cfg, total_steps=10)
    loop = torch.optim.AdamW(param_groups(models[1], cfg.train.weight_decay), lr=cfg.train.lr,
                             betas=(cfg.train.beta1, cfg.train.beta2), foreach=False)
    assert ours.param_groups[0]["fused"] is True
    start = [p.detach().clone() for p in models[0].parameters()]
    for i in range(5):
        x = torch.randn(32, 8, generator=torch.Generator().manual_seed(i))
        for model, opt in zip(models, (ours, loop)):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    for a, b, a0 in zip(models[0].parameters(), models[1].parameters(), start):
        assert (a - a0).abs().max() > 1e-4  # five updates moved every parameter ...
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-7)  # ... to where the loop moved it
        assert torch.allclose(ours.state[a]["exp_avg_sq"], loop.state[b]["exp_avg_sq"], rtol=1e-5, atol=1e-12)


# ----------------------------------------------------------------------------------------------------------------------
# Stage 1 and stage 2 run folders
# ----------------------------------------------------------------------------------------------------------------------


def test_pretrain_writes_the_run_folder(stage1):
    cfg = Config.load(stage1 / "config.json")
    assert cfg.train.method == "sim_pretrain"
    rows = [json.loads(x) for x in (stage1 / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for r in rows:
        assert {"step", "epoch", "lr", "loss", "fm_sim", "grad_norm", "samples_per_s", "time", "core_s"} <= set(r)
        assert math.isfinite(r["loss"]) and r["grad_norm"] > 0
    core = [r["core_s"] for r in rows]  # the process's CPU seconds since the start: what the fidelity curve reads
    assert core[0] > 0 and core == sorted(core)
    # lr of update i = base · factor(i), warm-up round(0.05 · 4) = 0 steps
    assert [r["lr"] for r in rows] == pytest.approx([cfg.train.lr * lr_factor(i, 4, 0) for i in range(4)])
    assert [r["epoch"] for r in rows] == [0, 0, 0, 0]  # 8 windows / batch 2 = 4 steps per epoch
    assert status(stage1) == {**status(stage1), "state": "finished", "step": 4}
    assert [s for s, _ in list_checkpoints(stage1)] == [2, 4]  # keep_last = 2
    assert (stage1 / "loss_curves.png").stat().st_size > 1000
    assert any((stage1 / "tb").glob("events.out.tfevents.*"))
    meta = json.loads((stage1 / "checkpoints/step_000004/meta.json").read_text())
    assert meta["stats"]["action"]["min"] and meta["step"] == 4


def test_load_model_from_run_gives_the_trained_weights(stage1):
    cfg, model, meta = load_model_from_run(stage1)
    assert meta["step"] == 4 and not model.training and cfg.model.num_layers == 1
    ckpt = load_checkpoint(stage1 / "checkpoints/step_000004")
    for k, v in model.state_dict().items():
        assert torch.equal(v, ckpt.model_state[k]), k
    _, _, meta2 = load_model_from_run(stage1, step=2)
    assert meta2["step"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("method", STAGE2_METHODS)
def test_each_method_trains_from_the_teacher(tiny, stage1, tmp_path, method):
    run = tmp_path / method
    result = train_run(tiny_cfg(*tiny, "--train.max_steps=2"), run, "train", teacher_run=stage1, method=method,
                       progress=False)
    assert result["state"] == "finished" and result["step"] == 2
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    expected = {"sft": {"fm_real"}, "joint_fm": {"fm_real", "fm_sim"},
                "value_distill": {"fm_real", "fm_sim", "value_real", "value_sim"},
                "motion_distill": {"fm_real", "fm_sim", "md_real", "md_sim"},
                "simforcing": {"fm_real", "fm_sim", "md_real", "md_sim"}}[method]
    assert expected <= set(rows[0]) and all(math.isfinite(r["loss"]) for r in rows)
    assert Config.load(run / "config.json").train.method == method
    teacher = json.loads((run / "teacher.json").read_text())
    assert teacher["step"] == 4 and Path(teacher["checkpoint"]).name == "step_000004"


def test_cli_train_uses_the_teacher_config_and_preset(tiny, stage1, tmp_path, capsys):
    root, _ = tiny
    run = tmp_path / "sf"
    code = cli_main(["train", "--method", "simforcing", "--teacher", str(stage1), "--data", str(root), "--out",
                     str(run), "--no-progress", "--train.max_steps=1", "--conditioning.p=0.5"])
    assert code == 0
    cfg = Config.load(run / "config.json")
    assert cfg.train.method == "simforcing" and cfg.conditioning.p == 0.5
    assert cfg.loss.value_real == 0.0 and cfg.model.num_layers == 1  # method preset + the teacher's architecture
    # --dry-run prints the resolved config and writes nothing
    dry = tmp_path / "dry"
    capsys.readouterr()
    assert cli_main(["train", "--method", "sft", "--teacher", str(stage1), "--out", str(dry), "--dry-run"]) == 0
    out = capsys.readouterr().out
    printed = json.loads(out[out.index("{"):])
    assert printed["train"]["method"] == "sft" and printed["loss"]["fm_sim"] == 0.0
    assert not dry.exists()


def test_teacher_stays_bit_identical_and_student_moves(tiny, stage1, tmp_path):
    cfg = tiny_cfg(*tiny, "--train.max_steps=3")
    from simforcing.methods import method_preset

    trainer = Trainer(STAGE2, method_preset(cfg, "simforcing"), tmp_path / "sf", progress=False,
                      start=Start(teacher_run=stage1))
    assert trainer.run()["state"] == "finished"
    start = load_checkpoint(stage1 / "checkpoints/step_000004").model_state
    moved = 0
    for name, p in trainer.models.teacher.named_parameters():
        assert torch.equal(p, start[name]), name
        assert not p.requires_grad and p.grad is None
    for name, p in trainer.models.student.named_parameters():
        moved += not torch.equal(p.detach(), start[name])
    assert moved > 0 and not trainer.models.teacher.training


def test_architecture_override_against_the_teacher_is_refused_before_work(tiny, stage1, tmp_path):
    run = tmp_path / "bad"
    with pytest.raises(ConfigError, match=r"model\.num_layers"):
        train_run(tiny_cfg(*tiny, "--model.num_layers=2"), run, "train", teacher_run=stage1, method="sft",
                  progress=False)
    assert not run.exists()
    code = cli_main(["train", "--method", "sft", "--teacher", str(stage1), "--out", str(run),
                     "--model.ffn_dim=128"])
    assert code == 2 and not run.exists()


# ----------------------------------------------------------------------------------------------------------------------
# Resume, divergence, signals
# ----------------------------------------------------------------------------------------------------------------------


def _raise_sigterm_at(monkeypatch, at_step: int) -> None:
    original = TrainStep.__call__

    def step(self, batch, step):
        out = original(self, batch, step)
        if step == at_step:
            signal.raise_signal(signal.SIGTERM)  # handled by the trainer: finish this step, checkpoint, exit 75
        return out

    monkeypatch.setattr(TrainStep, "__call__", step)


@pytest.mark.slow
def test_interrupted_and_resumed_run_logs_exactly_the_same_losses(tiny, tmp_path, monkeypatch):
    cfg = tiny_cfg(*tiny, "--train.max_steps=6", "--train.ckpt_every=10")
    full = train_run(cfg, tmp_path / "full", "pretrain", progress=False)
    assert full["state"] == "finished"
    _raise_sigterm_at(monkeypatch, 3)
    part = train_run(cfg, tmp_path / "part", "pretrain", progress=False)
    assert part["state"] == "stopped" and part["exit_code"] == EXIT_STOPPED and part["step"] == 3
    assert status(tmp_path / "part")["state"] == "stopped"
    assert [s for s, _ in list_checkpoints(tmp_path / "part")] == [3]
    monkeypatch.undo()
    again = train_run(cfg, tmp_path / "part", "pretrain", resume=True, progress=False)
    assert again["state"] == "finished" and again["step"] == 6
    assert losses(tmp_path / "part") == losses(tmp_path / "full")  # exact, steps 1..6 (crossing an epoch)
    rows = [json.loads(x) for x in (tmp_path / "part/metrics.jsonl").read_text().splitlines()]
    core = {r["step"]: r["core_s"] for r in rows}  # core-seconds go on from the checkpoint's, not from zero
    assert core[4] > core[3] > 0 and core == dict(sorted(core.items(), key=lambda kv: kv[1]))
    a = load_checkpoint(tmp_path / "full/checkpoints/step_000006").model_state
    b = load_checkpoint(tmp_path / "part/checkpoints/step_000006").model_state
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_without_flag_is_refused_and_damaged_checkpoint_falls_back(tiny, stage1, tmp_path):
    import shutil

    run = tmp_path / "copy"
    shutil.copytree(stage1, run)
    with pytest.raises(ConfigError, match="--resume"):
        train_run(tiny_cfg(*tiny), run, "pretrain", progress=False)
    weights = run / "checkpoints/step_000004/model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="step_000004 is damaged"):
        result = train_run(tiny_cfg(*tiny), run, "pretrain", resume=True, progress=False)
    assert result["state"] == "finished" and result["step"] == 4
    assert losses(run) == losses(stage1)  # steps 3-4 recomputed from step 2 give the same numbers


@pytest.mark.parametrize("fault, term", [("nan_loss@3", "loss"), ("nan_batch@3", "fm_sim")])
def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tiny, tmp_path, monkeypatch, fault, term):
    monkeypatch.setenv("SIMFORCING_FAULT", fault)
    run = tmp_path / "nan"
    result = train_run(tiny_cfg(*tiny), run, "pretrain", progress=False)
    assert result["state"] == "diverged" and result["exit_code"] == EXIT_DIVERGED and result["step"] == 2
    st = status(run)
    assert st["state"] == "diverged" and "step 3" in st["reason"] and term in st["reason"]
    assert [s for s, _ in list_checkpoints(run)] == [2]  # nothing written after the NaN
    load_checkpoint(run / "checkpoints/step_000002")  # verifies every sha256
    assert [s for s, _ in losses(run)] == [1, 2]


def test_a_fault_plan_wraps_only_what_it_names():
    """Without SIMFORCING_FAULT the loop calls the stage's latents, the step hooks and the checkpoint writer
    themselves; a plan wraps each only for its kind of fault, and only its steps change."""
    def latents(batch, step):
        return {"z_sim": torch.zeros(2), "actions": torch.zeros(2)}

    def hooks(step):
        return StepHooks()

    def write(run_dir, step, *args, **kwargs):
        return kwargs.get("on_partial")

    stop = StopFlag()
    empty = FaultPlan()
    assert empty.around_latents(latents, ("z_sim",)) is latents and empty.around_hooks(hooks, stop) is hooks
    assert empty.around_writer(write) is write
    plan = FaultPlan(nan_batch={3}, nan_loss={2}, ckpt_sleep={4: 1.0})
    faulty = plan.around_latents(latents, ("z_sim",))
    assert torch.isnan(faulty({}, 3)["z_sim"]).all() and not torch.isnan(faulty({}, 3)["actions"]).any()
    assert not torch.isnan(faulty({}, 2)["z_sim"]).any()
    assert plan.around_hooks(hooks, stop)(2).corrupt_loss is not None
    assert plan.around_hooks(hooks, stop)(3).corrupt_loss is None
    assert plan.around_writer(write)("run", 2) is None and callable(plan.around_writer(write)("run", 4))


def _wait_for_line(proc: subprocess.Popen, marker: str) -> str:
    """Read the child's output until a line contains ``marker``; fail if it exits first."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            return line
    raise AssertionError(f"the run exited before {marker!r}:\n{''.join(seen)}")


def _spawn(args: list[str], fault: str, tmp_path: Path) -> subprocess.Popen:
    env = dict(os.environ, SIMFORCING_FAULT=fault, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "simforcing", *args], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_sigterm_finishes_the_step_checkpoints_and_exits_75(tiny, stage1, tmp_path):
    run = tmp_path / "term"
    proc = _spawn(["pretrain", "--out", str(run), "--no-progress", *cli_args(*tiny)], "sleep@2:120", tmp_path)
    try:
        _wait_for_line(proc, "holding step 2")  # after step 2's backward, before its optimizer update
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_STOPPED, out
    assert status(run)["state"] == "stopped" and status(run)["step"] == 2
    assert [s for s, _ in list_checkpoints(run)] == [2]
    result = train_run(tiny_cfg(*tiny), run, "pretrain", resume=True, progress=False)
    assert result["state"] == "finished"
    assert losses(run) == losses(stage1)  # the same config uninterrupted


@pytest.mark.slow
def test_sigkill_while_writing_a_checkpoint_leaves_the_previous_one(tiny, stage1, tmp_path):
    run = tmp_path / "kill"
    proc = _spawn(["pretrain", "--out", str(run), "--no-progress", *cli_args(*tiny)], "ckpt_sleep@4:120", tmp_path)
    try:
        _wait_for_line(proc, "holding checkpoint 4")  # weights written, folder not finalised
        assert [p.name for p in (run / "checkpoints").glob(".tmp-step_000004-w*/model.safetensors")]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert [s for s, _ in list_checkpoints(run)] == [2]
    before = sha256_file(run / "checkpoints/step_000002/model.safetensors")
    load_checkpoint(run / "checkpoints/step_000002")
    result = train_run(tiny_cfg(*tiny), run, "pretrain", resume=True, progress=False)
    assert result["state"] == "finished" and [s for s, _ in list_checkpoints(run)] == [2, 4]
    assert not list((run / "checkpoints").glob(".tmp-*"))
    assert sha256_file(run / "checkpoints/step_000002/model.safetensors") == before
    assert losses(run) == losses(stage1)


def test_plots_draw_one_run_and_compare_runs(tmp_path):
    from simforcing.plots import compare_runs, ema, plot_loss_curves

    rows = [{"step": s, "loss": 1.0 / s, "fm_real": 0.5 / s, "grad_norm": 2.0, "lr": 1e-3} for s in range(1, 41)]
    png = plot_loss_curves(rows, tmp_path / "one.png", title="run")
    assert png.stat().st_size > 1000
    png2 = compare_runs({"a": rows, "b": [dict(r, loss=r["loss"] * 2) for r in rows]}, tmp_path / "cmp.png")
    assert png2.stat().st_size > 1000
    assert ema([1.0, 3.0], alpha=0.5) == pytest.approx([1.0, 1.0 + 2.0 * 0.5 / 0.75])
    with pytest.raises(ValueError, match="no run has a numeric 'md_sim'"):
        compare_runs({"a": rows}, tmp_path / "x.png", key="md_sim")
