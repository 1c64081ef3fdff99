"""The few-step student (``simforcing.fewstep``): its sampler's evaluations counted, its loss against a computation
written out here, an exact resume of a distillation run, a student of an already exact model, and the student as a
kind of run (every sampling caller gets its sampler; what cannot use it refuses by name).

The independent computation uses its own Euler loop and schedule (τ_i = s·t_i/(1+(s−1)·t_i)), one forward per
branch, per student jump and per simulation step, and its own interpolation of the teacher's trajectory.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from simforcing.config import ConfigError
from simforcing.fewstep.objective import FewStepPlan, fewstep_step
from simforcing.fewstep.stage import distill_config, distill_run
from simforcing.runs.loaded import LoadedWorldModel, collate_one, eval_dataset, load_world_model, sample_generator
from simforcing.sample import FewStepSampler, GuidedSampler, sampler_for
from simforcing.sampler_batch import SamplerBatch
from test_sample import Counting, random_batch, ref_taus, tiny_cfg, tiny_model, tiny_vae
from test_train import _raise_sigterm_at, losses, make_tiny_data
from test_train import tiny_cfg as train_cfg

from simforcing.train import train_run


def student_wm(cfg, model, steps: int, objective: str = "trajectory", w=None) -> LoadedWorldModel:
    return LoadedWorldModel(distill_config(cfg, steps, objective, w).validate(), model, tiny_vae(), None)


def sampler_batch(cfg, b: int = 2, seed: int = 0) -> SamplerBatch:
    """Random windows whose simulation rollout starts from a given x^s_0 (no masking)."""
    raw = random_batch(cfg, b, seed)
    batch = SamplerBatch.from_collated(raw)
    batch.sim_first_frame = raw["sim"][:, :, 0]
    return batch


# ----------------------------------------------------------------------------------------------------------------------
# The sampler
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 3])
def test_student_sampler_makes_exactly_k_evaluations_per_chunk(k):
    cfg = tiny_cfg()  # N_s = 2, N_r = 3, w = 0.6
    counting = Counting(tiny_model(cfg))
    sampler = sampler_for(student_wm(cfg, counting, k))
    assert isinstance(sampler, FewStepSampler)
    res = sampler(sampler_batch(cfg), torch.Generator().manual_seed(0))
    gates = [g for g in counting.gates if g is not None]
    assert len(gates) == k and all(bool((g == 1).all()) for g in gates)  # the conditional branch alone, K forwards
    assert counting.rows == 2 * (cfg.sample.n_sim + k) and res.forwards == cfg.sample.n_sim + k
    s = sampler.settings()
    assert (s["sampler"], s["steps"], s["w"], s["teacher_sampler"]) == (
        "fewstep", k, 0.6, {"n_sim": 2, "n_real": 3, "w": 0.6})


def test_student_of_an_unconditioned_model_makes_k_evaluations_and_no_simulation():
    cfg = tiny_cfg(conditioning__p=0.0)  # an sft model: its sampler is w = 0
    counting = Counting(tiny_model(cfg))
    res = sampler_for(student_wm(cfg, counting, 2))(sampler_batch(cfg), torch.Generator().manual_seed(0))
    assert res.forwards == 2 and counting.rows == 4 and res.sim is None
    assert all(g is None for g in counting.gates)


def test_a_student_refuses_other_sampler_settings_by_name():
    cfg = tiny_cfg()
    wm = student_wm(cfg, tiny_model(cfg), 2)
    with pytest.raises(ConfigError, match="few-step student.*N_r = 10"):
        sampler_for(wm, n_real=10)
    with pytest.raises(ConfigError, match="w = 0.3"):
        sampler_for(wm, w=0.3)
    assert isinstance(sampler_for(wm, n_sim=2, n_real=2, w=0.6), FewStepSampler)  # its own settings are fine


# ----------------------------------------------------------------------------------------------------------------------
# The loss against an independent computation
# ----------------------------------------------------------------------------------------------------------------------


def latent_batch(cfg, vae, b: int = 2, seed: int = 0) -> dict:
    raw = random_batch(cfg, b, seed)
    return {"z_real": vae.encode(raw["real"]), "z_sim": vae.encode(raw["sim"]), "actions": raw["actions"],
            "state0": raw["state0"], "text": raw["text"], "text_mask": raw["text_mask"]}


def reference_loss(student, teacher, batch: dict, cfg, seed: int) -> dict:
    """The objective written out: one forward per branch, per simulation step and per jump."""
    f, shift = cfg.fewstep, cfg.flow.shift
    zr0, z = batch["z_real"][:, :, :1], batch["z_real"][:, :, 1:]
    zs0 = batch["z_sim"][:, :, :1]
    ctx = {k: batch[k] for k in ("actions", "state0", "text", "text_mask")}
    gen = torch.Generator().manual_seed(seed)
    eps_r = torch.randn(z.shape, generator=gen)
    eps_s = torch.randn(z.shape, generator=gen)
    b = z.shape[0]
    ones, zeros = torch.ones(b), torch.zeros(b)
    with torch.no_grad():
        sim_taus, sim_states = ref_taus(f.teacher_n_sim, shift), [eps_s]
        for i in range(f.teacher_n_sim):
            u = teacher(sim_states[-1], torch.full((b,), sim_taus[i]), zs0, **ctx)
            sim_states.append(sim_states[-1] + (sim_taus[i + 1] - sim_taus[i]) * u)
        cond = torch.cat([zs0, sim_states[-1]], dim=2)

        def guided(zt, tau_value):
            tau = torch.full((b,), tau_value)
            u_c = teacher(zt, tau, zr0, **ctx, cond=cond, gate=ones)
            u_u = teacher(zt, tau, zr0, **ctx, cond=cond, gate=zeros)
            return u_u + f.w * (u_c - u_u)

        t_taus, s_taus = ref_taus(f.teacher_n_real, shift), ref_taus(f.steps, shift)
        if f.objective == "trajectory":
            states = [eps_r]
            for i in range(f.teacher_n_real):
                states.append(states[-1] + (t_taus[i + 1] - t_taus[i]) * guided(states[-1], t_taus[i]))

            def at(tau):  # the Euler polyline at tau
                for i in range(f.teacher_n_real):
                    if t_taus[i + 1] - 1e-6 <= tau <= t_taus[i] + 1e-6:
                        a = (tau - t_taus[i]) / (t_taus[i + 1] - t_taus[i])
                        return states[i] + a * (states[i + 1] - states[i])

            points = [at(t) for t in s_taus]
            starts, targets = points[:-1], points[1:]
        else:
            starts, targets = [], []
            for k in range(f.steps):
                zk = (1 - s_taus[k]) * z + s_taus[k] * eps_r
                inner = [t for t in t_taus if s_taus[k + 1] + 1e-6 < t < s_taus[k] - 1e-6]
                grid = [s_taus[k], *inner, s_taus[k + 1]]
                target = zk
                for i in range(len(grid) - 1):
                    target = target + (grid[i + 1] - grid[i]) * guided(target, grid[i])
                starts.append(zk)
                targets.append(target)
    jump = sum(((s + (s_taus[k + 1] - s_taus[k]) * student(s, torch.full((b,), s_taus[k]), zr0, **ctx, cond=cond,
                                                            gate=ones) - t) ** 2).mean()
               for k, (s, t) in enumerate(zip(starts, targets))) / f.steps
    sim = sum(((sim_states[i] + (sim_taus[i + 1] - sim_taus[i]) * student(sim_states[i], torch.full(
        (b,), sim_taus[i]), zs0, **ctx) - sim_states[i + 1]) ** 2).mean() for i in range(f.teacher_n_sim)) \
        / f.teacher_n_sim
    jump, sim = float(jump.detach()), float(sim.detach())
    return {"jump": jump, "sim": sim, "loss": jump + f.sim_weight * sim}


@pytest.mark.parametrize("objective, k", [("trajectory", 2), ("progressive", 2), ("trajectory", 1)])
def test_loss_matches_an_independent_computation(objective, k):
    cfg = distill_config(tiny_cfg(), k, objective)  # K = 2 of N_r = 3: student times off the teacher's grid
    cfg.fewstep.sim_weight = 0.5
    teacher = tiny_model(cfg, seed=0)
    student = copy.deepcopy(teacher)
    with torch.no_grad():
        for p in student.parameters():
            p.add_(0.01 * torch.randn_like(p))
    batch = latent_batch(cfg, tiny_vae())
    loss, logs = fewstep_step(student, teacher, batch, cfg, torch.Generator().manual_seed(7))
    ref = reference_loss(student, teacher, batch, cfg, 7)
    assert logs["jump"] > 1e-6 and logs["sim"] > 1e-6
    for name in ("jump", "sim", "loss"):
        assert logs[name] == pytest.approx(ref[name], rel=1e-4, abs=1e-8), name
    assert float(loss.detach()) == pytest.approx(ref["loss"], rel=1e-4)
    loss.backward()  # the gradient reaches the student only
    assert any(p.grad is not None for p in student.parameters())
    assert all(p.grad is None for p in teacher.parameters())


def test_student_times_off_the_teachers_grid_read_its_euler_polyline():
    plan = FewStepPlan.of(distill_config(tiny_cfg(), 2))
    assert plan.student_times[1] not in plan.teacher_times  # shift(0.5) is not one of shift(k/3)
    assert plan.segment_times(0)[0] == 1.0 and plan.segment_times(1)[-1] == 0.0
    assert sum(len(plan.segment_times(k)) - 1 for k in range(2)) == 3 + 1  # N_r steps, one of them split in two


# ----------------------------------------------------------------------------------------------------------------------
# A model that is already exact
# ----------------------------------------------------------------------------------------------------------------------


class StraightToy(nn.Module):
    """û = (z_t − x̂)/τ with x̂ = a·z0 + b·gate·c_future: every trajectory is a straight line to x̂, which Euler
    follows exactly whatever the steps (the guided velocity is of the same form)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Parameter(torch.tensor(0.7)), nn.Parameter(torch.tensor(0.4))

    def condition_features(self, cond):
        return [cond[:, :, 1:]]

    def forward(self, z_t, tau, z0, actions, state0, text, text_mask=None, cond=None, gate=None, cond_feats=None,
                action_keep=None, **_):
        x = self.a * z0.expand_as(z_t)
        feats = cond_feats[0] if cond_feats is not None else (None if cond is None else cond[:, :, 1:])
        if feats is not None and gate is not None:
            x = x + self.b * gate.view(-1, 1, 1, 1, 1) * feats
        return (z_t - x) / tau.view(-1, 1, 1, 1, 1)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_a_student_of_an_exact_model_reproduces_the_teachers_samples(k):
    cfg = tiny_cfg(sample__n_real=10, sample__w=1.0)  # w = 1: the teacher's sampler is the conditional branch
    toy = StraightToy()
    batch = sampler_batch(cfg)
    teacher = GuidedSampler(toy, tiny_vae(), cfg)(batch, torch.Generator().manual_seed(3))
    student = sampler_for(student_wm(cfg, toy, k))(batch, torch.Generator().manual_seed(3))
    assert student.forwards == cfg.sample.n_sim + k and teacher.forwards == cfg.sample.n_sim + 10
    torch.testing.assert_close(student.real_latents, teacher.real_latents, atol=1e-5, rtol=1e-5)
    for objective in ("trajectory", "progressive"):  # nothing to learn: both objectives are zero
        scfg = distill_config(cfg, k, objective)
        _, logs = fewstep_step(toy, toy, latent_batch(scfg, tiny_vae()), scfg, torch.Generator().manual_seed(1))
        assert logs["jump"] < 1e-10 and logs["sim"] < 1e-10


# ----------------------------------------------------------------------------------------------------------------------
# A distillation run: resume, the kind of run, its sampler everywhere
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("fewstep")
    root, vae = make_tiny_data(base)
    s1 = train_run(train_cfg(root, vae), base / "s1", "pretrain", progress=False)
    assert s1["exit_code"] == 0, s1
    s2 = train_run(train_cfg(root, vae, "--train.max_steps=2", "--sample.n_real=4", "--sample.n_sim=1"),
                   base / "s2", "train", teacher_run=base / "s1", progress=False, method="simforcing")
    assert s2["exit_code"] == 0, s2
    return base / "s2", root


def student_cfg(teacher: Path, objective: str = "progressive"):
    from simforcing.runs.folder import run_config

    cfg = distill_config(run_config(teacher), 2, objective)
    cfg.train.max_steps = 4
    return cfg.validate()


def test_resumed_distillation_logs_exactly_the_same_losses(teacher_run, tmp_path, monkeypatch):
    teacher, _ = teacher_run
    cfg = student_cfg(teacher)
    full = distill_run(cfg, tmp_path / "full", teacher, progress=False)
    assert full["state"] == "finished" and full["step"] == 4
    _raise_sigterm_at(monkeypatch, 2)
    part = distill_run(cfg, tmp_path / "part", teacher, progress=False)
    assert part["state"] == "stopped" and part["step"] == 2
    monkeypatch.undo()
    again = distill_run(cfg, tmp_path / "part", None, resume=True, progress=False)  # teacher.json names it
    assert again["state"] == "finished" and again["step"] == 4
    assert losses(tmp_path / "part") == losses(tmp_path / "full") and len(losses(tmp_path / "full")) == 4
    rows = [json.loads(r) for r in (tmp_path / "full/metrics.jsonl").read_text().splitlines()]
    assert all("jump" in r and "sim" in r for r in rows)


def test_a_student_run_is_its_own_kind_and_samples_with_its_sampler(teacher_run, tmp_path):
    from simforcing.cli import main as cli_main
    from simforcing.runs.folder import run_kind

    teacher, root = teacher_run
    run = tmp_path / "student"
    assert distill_run(student_cfg(teacher, "trajectory"), run, teacher, progress=False)["state"] == "finished"
    assert run_kind(run) == "fewstep"
    assert json.loads((run / "teacher.json").read_text())["run"] == str(teacher.resolve())
    wm = load_world_model(run, data_root=root)
    sampler = sampler_for(wm)
    assert isinstance(sampler, FewStepSampler)
    ds = eval_dataset(wm.cfg, root, "val", wm.stats)
    batch = SamplerBatch.from_collated(collate_one(ds[0]))
    batch.sim_first_frame = batch.recorded_sim[:, :, 0]
    res = sampler(batch, sample_generator(wm.cfg, 0))
    assert res.forwards == 1 + 2 and res.real_video.shape[2] == wm.cfg.data.frames
    # what cannot use a student refuses it by name
    from simforcing.evaluate.run import evaluate_run

    with pytest.raises(ConfigError, match="--domain sim.*few-step student"):
        evaluate_run(run, root, None, "val", 1, tmp_path / "sim_eval", domain="sim")
    with pytest.raises(ConfigError, match="few-step student"):
        distill_run(student_cfg(teacher), tmp_path / "again", run, progress=False)
    assert cli_main(["train", "--method", "sft", "--teacher", str(run), "--out", str(tmp_path / "s2")]) == 2
    assert cli_main(["distill", "--teacher", str(run), "--steps", "1", "--out", str(tmp_path / "s3")]) == 2
    assert cli_main(["train", "--method", "sft", "--resume", "--out", str(run)]) == 2


def test_the_demo_job_distils_and_compares_on_the_same_windows(teacher_run, tmp_path):
    from simforcing.fewstep.job import distill_and_compare, paired_difference

    assert paired_difference([1.0, 2.0, None], [1.5, 2.5, 3.0]) == {"mean": 0.5, "ci95": [0.5, 0.5], "n": 2}
    teacher, root = teacher_run
    res = distill_and_compare(teacher, root, tmp_path / "job", steps=1, train={"train.max_steps": 2},
                              num_samples=1)
    c = res["compare"]
    assert res["distill"]["step"] == 2 and c["forwards_per_sample"] == {"teacher": 1 + 2 * 4, "student": 1 + 1}
    assert c["psnr"]["paired"]["n"] == 1 and (tmp_path / "job/fewstep.json").exists()
    assert len(res["agreement"]["per_sample"]) == 1 and res["agreement"]["psnr_to_teacher"] > 0
    assert res["sampler"]["student"]["sampler"] == "fewstep" and res["sampler"]["teacher"]["n_real"] == 4
