"""methods.py: each step against SPEC §3–§4/§6 written out here, on a tiny stand-in network that records what it
receives (and, at the end, on the real WorldModel at tiny width)."""

import copy

import pytest
import torch
from torch import nn

from simforcing import methods
from simforcing.config import METHOD_NAMES, ConfigError, load_config
from simforcing.losses import NonFiniteLoss
from simforcing.methods import METHODS, ModelInputs, method_preset, paired_student_forward

B, C, L, H, W = 4, 4, 2, 4, 4  # latents (B, C, L+1, H, W)
A_W, A_DIM, S_DIM, N_TXT, T_DIM = 8, 7, 7, 5, 16


class StandIn(nn.Module):
    """Same call signature as WorldModel; per-sample linear layers over flattened latents; records every call."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        n, hid = C * L * H * W, 32
        self.inp, self.z0 = nn.Linear(n, hid), nn.Linear(C * H * W, hid)
        self.act, self.state, self.text = nn.Linear(A_DIM, hid), nn.Linear(S_DIM, hid), nn.Linear(T_DIM, hid)
        self.time, self.cond = nn.Linear(1, hid), nn.Linear(C * (L + 1) * H * W, hid)
        self.out = nn.Linear(hid, n)
        self.calls = []

    def forward(self, z_t, tau, z0, actions, state0, text, text_mask=None, cond=None, gate=None, cond_feats=None,
                action_keep=None):
        self.calls.append({k: (v.detach().clone() if isinstance(v, torch.Tensor) else v) for k, v in dict(
            z_t=z_t, tau=tau, z0=z0, actions=actions, cond=cond, gate=gate, action_keep=action_keep).items()})
        a = self.act(actions).mean(dim=1) if actions is not None else 0  # None: no action tokens (video_prior)
        if action_keep is not None:
            a = a * action_keep[:, None].to(a.dtype)
        m = text_mask[:, :, None].float() if text_mask is not None else torch.ones_like(text[:, :, :1])
        h = (self.inp(z_t.flatten(1)) + self.z0(z0.flatten(1)) + self.time(tau[:, None]) + a
             + (self.state(state0) if state0 is not None else 0)
             + (self.text(text) * m).sum(1) / m.sum(1).clamp(min=1))
        if cond is not None and gate is not None:
            h = h + gate[:, None] * self.cond(cond.flatten(1))
        return self.out(torch.tanh(h)).view_as(z_t)


def make_batch(seed=0, b=B):
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(b, N_TXT, dtype=torch.bool)
    mask[:, 3:] = False
    return {"z_sim": torch.randn(b, C, L + 1, H, W, generator=g), "z_real": torch.randn(b, C, L + 1, H, W, generator=g),
            "z_video": torch.randn(b, C, L + 1, H, W, generator=g),
            "actions": torch.rand(b, A_W, A_DIM, generator=g) * 2 - 1, "state0": torch.randn(b, S_DIM, generator=g),
            "text": torch.randn(b, N_TXT, T_DIM, generator=g), "text_mask": mask}


def make_cfg(method, **loss_overrides):
    cfg = method_preset(load_config("demo"), method)
    for k, v in loss_overrides.items():
        setattr(cfg.loss, k, v)
    return cfg


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def teacher_of(student):
    """A plain deep copy (parameters still require grad): only the step keeps it frozen."""
    t = copy.deepcopy(student)
    t.calls = []
    return t


# ----------------------------------------------------------------------------------------------------------------------


def test_methods_match_config_names_and_presets():
    assert tuple(METHODS) == METHOD_NAMES
    sft = make_cfg("sft")
    assert sft.train.method == "sft" and sft.loss.fm_real == 1.0 and sft.conditioning.p == 0.0
    assert sft.loss.fm_sim == sft.loss.md_real == sft.loss.md_sim == sft.loss.value_real == sft.loss.value_sim == 0
    sf = make_cfg("simforcing")
    assert sf.conditioning.p == 0.7 and sf.loss.md_real == 0.5 and sf.loss.value_real == 0.0
    md = make_cfg("motion_distill")
    assert md.conditioning.p == 0.0 and md.loss.md_sim == 0.25
    vd = make_cfg("value_distill")
    assert vd.loss.md_real == 0.0 and vd.loss.value_real == 0.5 and vd.loss.fm_sim == 0.5
    cfg = load_config("demo")
    assert method_preset(cfg, "joint_fm") is cfg and cfg.loss.md_real == 0.0 and cfg.train.lr == load_config("demo").train.lr
    with pytest.raises(ConfigError, match="train.method"):
        method_preset(load_config("demo"), "dreamer")


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_every_method_runs_three_steps(name):
    cfg = make_cfg(name)
    cfg.flow.loss_weighting, cfg.flow.t_sampling = "gaussian_bump", "discrete"
    student = StandIn()
    teacher = teacher_of(student) if name not in ("video_prior", "sim_pretrain", "sft", "joint_fm") else None
    before = [p.detach().clone() for p in student.parameters()]
    opt = torch.optim.AdamW(student.parameters(), lr=1e-2)
    g = gen(1)
    expected = {"video_prior": {"fm_video"}, "sim_pretrain": {"fm_sim"}, "sft": {"fm_real"},
                "joint_fm": {"fm_real", "fm_sim"},
                "value_distill": {"fm_real", "fm_sim", "value_real", "value_sim"},
                "motion_distill": {"fm_real", "fm_sim", "md_real", "md_sim"},
                "simforcing": {"fm_real", "fm_sim", "md_real", "md_sim"}}[name]
    for step in range(3):
        loss, logs = METHODS[name](student, teacher, make_batch(step), cfg, g)
        assert loss.shape == () and loss.requires_grad and torch.isfinite(loss)
        assert expected | {"loss", "gate_mean", "corrupt_frac"} <= set(logs)
        assert not ({"fm_real", "fm_sim", "md_real", "md_sim", "value_real", "value_sim", "fm_video"} - expected) \
            & set(logs)
        assert all(isinstance(v, float) for v in logs.values())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert any(not torch.equal(a, b) for a, b in zip(before, student.parameters()))


def test_teacher_bit_identical_and_gradient_free_after_training():
    cfg = make_cfg("simforcing")
    student = StandIn()
    teacher = teacher_of(student)
    frozen = {k: v.clone() for k, v in teacher.state_dict().items()}
    opt = torch.optim.AdamW(student.parameters(), lr=1e-2)
    g = gen(2)
    for step in range(4):
        loss, _ = METHODS["simforcing"](student, teacher, make_batch(step), cfg, g)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert len(teacher.calls) == 4
    for k, v in teacher.state_dict().items():
        assert torch.equal(v, frozen[k]), k
    assert all(p.grad is None for p in teacher.parameters())
    assert not torch.equal(student.inp.weight, teacher.inp.weight)


def test_sft_and_joint_fm_never_call_the_teacher_nor_pass_a_condition():
    for name, batch_sizes in (("sft", [B]), ("joint_fm", [2 * B])):
        student, teacher = StandIn(), StandIn()
        for step in range(2):
            METHODS[name](student, teacher, make_batch(step), make_cfg(name), gen(step))
        assert teacher.calls == []
        assert [c["z_t"].shape[0] for c in student.calls] == batch_sizes * 2
        assert all(c["cond"] is None and c["gate"] is None for c in student.calls)


def test_zero_weight_terms_cost_no_forward():
    # simforcing without sim terms: one student forward of B samples (real only), teacher for motion
    student, teacher = StandIn(), StandIn()
    METHODS["simforcing"](student, teacher, make_batch(), make_cfg("simforcing", fm_sim=0.0, md_sim=0.0), gen())
    assert [c["z_t"].shape[0] for c in student.calls] == [B] and len(teacher.calls) == 1
    # simforcing without motion terms: no teacher forward at all
    student, teacher = StandIn(), StandIn()
    _, logs = METHODS["simforcing"](student, teacher, make_batch(), make_cfg("simforcing", md_real=0.0, md_sim=0.0),
                                    gen())
    assert teacher.calls == [] and "md_real" not in logs
    with pytest.raises(ConfigError, match="loss.fm_real"):
        METHODS["sft"](StandIn(), None, make_batch(), make_cfg("sft", fm_real=0.0), gen())
    with pytest.raises(ValueError, match="teacher"):
        METHODS["motion_distill"](StandIn(), None, make_batch(), make_cfg("motion_distill"), gen())


def _motion(z0, fut):
    seq = [z0[:, :, 0]] + [fut[:, :, i] for i in range(fut.shape[2])]
    return torch.stack([seq[i + 1] - seq[i] for i in range(fut.shape[2])], dim=2)


def _mse(a, b):
    return ((a - b) ** 2).flatten(1).mean(1)  # (B,)


@pytest.mark.parametrize("p,corrupt", [(0.7, 0.4), (1.0, 1.0)])
def test_simforcing_step_equals_spec_written_out(p, corrupt):
    cfg = make_cfg("simforcing")
    cfg.conditioning.p, cfg.conditioning.corrupt_prob = p, corrupt
    cfg.flow.loss_weighting = "uniform"
    batch = make_batch(5)
    z_sim_before = batch["z_sim"].clone()
    student, teacher = StandIn(seed=1), StandIn(seed=2)  # a trained teacher differs from the student
    loss, logs = METHODS["simforcing"](student, teacher, batch, cfg, gen(7))
    assert torch.equal(batch["z_sim"], z_sim_before)

    (tc,), (sc,) = teacher.calls, student.calls
    zs, zr = batch["z_sim"], batch["z_real"]
    zs0, zs_f, zr0, zr_f = zs[:, :, :1], zs[:, :, 1:], zr[:, :, :1], zr[:, :, 1:]
    tau = tc["tau"]
    tb = tau.view(B, 1, 1, 1, 1)
    eps = (tc["z_t"] - (1 - tb) * zs_f) / tb  # the noise the teacher's input was built with
    # one eps, one tau per sample for both domains; student batch = [real; sim]; targets from the clean z_sim
    assert torch.equal(sc["tau"], torch.cat([tau, tau]))
    assert torch.allclose(sc["z_t"][:B], (1 - tb) * zr_f + tb * eps, atol=1e-5)
    assert torch.allclose(sc["z_t"][B:], tc["z_t"], atol=0)
    assert torch.equal(sc["z0"], torch.cat([zr0, zs0])) and torch.equal(tc["z0"], zs0)
    assert tc["cond"] is None and tc["gate"] is None
    gate = sc["gate"][:B]
    assert torch.equal(sc["gate"][B:], torch.zeros(B))  # the sim pass is never conditioned
    c = sc["cond"][:B]
    assert c.shape == zs.shape  # all L + 1 sim frames
    changed = (c != zs).flatten(1).any(1)
    assert logs["corrupt_frac"] == pytest.approx(changed.float().mean().item())
    assert logs["gate_mean"] == pytest.approx(gate.mean().item())
    if corrupt == 1.0:
        assert changed.all() and gate.eq(1).all()

    with torch.no_grad():  # the three passes as separate calls
        u_s = teacher(tc["z_t"], tau, zs0, batch["actions"], batch["state0"], batch["text"], batch["text_mask"])
        u_r = student(sc["z_t"][:B], tau, zr0, batch["actions"], batch["state0"], batch["text"], batch["text_mask"],
                      cond=c, gate=gate)
        u_ss = student(tc["z_t"], tau, zs0, batch["actions"], batch["state0"], batch["text"], batch["text_mask"])
    zhat_s, zhat_r, zhat_ss = tc["z_t"] - tb * u_s, sc["z_t"][:B] - tb * u_r, tc["z_t"] - tb * u_ss
    m_s = _motion(zs0, zhat_s)
    want = {"fm_real": _mse(u_r, eps - zr_f).mean(), "fm_sim": _mse(u_ss, eps - zs_f).mean(),
            "md_real": _mse(_motion(zr0, zhat_r), m_s).mean(), "md_sim": _mse(_motion(zs0, zhat_ss), m_s).mean()}
    for k, v in want.items():
        assert logs[k] == pytest.approx(v.item(), rel=1e-4, abs=1e-6), k
    total = 1.0 * want["fm_real"] + 0.5 * want["fm_sim"] + 0.5 * want["md_real"] + 0.25 * want["md_sim"]
    assert loss.item() == pytest.approx(total.item(), rel=1e-4)


def test_gate_zero_real_branch_equals_unconditioned_student(monkeypatch):
    student, teacher = StandIn(seed=3), StandIn(seed=4)
    batch = make_batch(6)
    _, plain = METHODS["motion_distill"](student, teacher, batch, make_cfg("motion_distill"), gen(9))
    assert student.calls[-1]["cond"] is None
    monkeypatch.setattr(methods, "sample_gate", lambda b, p, g, device=None: torch.zeros(b, device=device))
    _, gated = METHODS["simforcing"](student, teacher, batch, make_cfg("simforcing"), gen(9))
    assert student.calls[-1]["cond"] is not None and gated["gate_mean"] == 0.0
    for k in ("fm_real", "fm_sim", "md_real", "md_sim", "loss"):
        assert gated[k] == plain[k], k
    # and a gate of 1 does change the real branch (the condition reaches the stand-in)
    monkeypatch.setattr(methods, "sample_gate", lambda b, p, g, device=None: torch.ones(b, device=device))
    _, on = METHODS["simforcing"](student, teacher, batch, make_cfg("simforcing"), gen(9))
    assert on["fm_real"] != plain["fm_real"] and on["fm_sim"] == plain["fm_sim"]


def _pair_inputs(batch, with_cond):
    g = gen(11)
    zs, zr = batch["z_sim"], batch["z_real"]
    tau = torch.rand(zr.shape[0], generator=g)
    common = dict(actions=batch["actions"], state0=batch["state0"], text=batch["text"], text_mask=batch["text_mask"])
    real = ModelInputs(torch.randn(zr[:, :, 1:].shape, generator=g), tau, zr[:, :, :1], **common,
                       cond=zs if with_cond else None,
                       gate=torch.tensor([1.0, 0.0] * (zr.shape[0] // 2)) if with_cond else None)
    sim = ModelInputs(torch.randn(zs[:, :, 1:].shape, generator=g), tau, zs[:, :, :1], **common)
    return real, sim


@pytest.mark.parametrize("with_cond", [True, False])
def test_batched_student_forward_equals_two_forwards(with_cond):
    student = StandIn(seed=5)
    real, sim = _pair_inputs(make_batch(7), with_cond)
    u_r, u_s = paired_student_forward(student, real, sim)
    assert student.calls[-1]["z_t"].shape[0] == 2 * B
    assert torch.allclose(u_r, real.run(student), atol=1e-5)
    assert torch.allclose(u_s, sim.run(student), atol=1e-5)


def test_sim_pretrain_drops_actions_and_needs_no_teacher():
    cfg = make_cfg("sim_pretrain")
    cfg.conditioning.action_dropout = 1.0
    student = StandIn()
    batch = make_batch(8)
    del batch["z_real"]  # stage 1 sees simulation only
    _, logs = METHODS["sim_pretrain"](student, None, batch, cfg, gen())
    (call,) = student.calls
    assert not call["action_keep"].any() and logs["action_drop_frac"] == 1.0
    assert call["cond"] is None and torch.equal(call["z0"], batch["z_sim"][:, :, :1])
    cfg.conditioning.action_dropout = 0.0
    METHODS["sim_pretrain"](student, None, batch, cfg, gen())
    assert student.calls[-1]["action_keep"].all()


def test_non_finite_term_raises_with_its_name():
    batch = make_batch(9)
    batch["z_sim"][0, :, 1:] = float("nan")  # the sim future: fm_real is fine, fm_sim is not
    with pytest.raises(NonFiniteLoss) as info:
        METHODS["joint_fm"](StandIn(), None, batch, make_cfg("joint_fm"), gen())
    assert info.value.term == "fm_sim"
    with pytest.raises(KeyError, match="z_real"):
        METHODS["sft"](StandIn(), None, {k: v for k, v in make_batch().items() if k != "z_real"}, make_cfg("sft"),
                       gen())


# ----------------------------------------------------------------------------------------------------------------------
# The real network (simforcing/models/world_model.py) at tiny width
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def _real_built():
    from simforcing.models.world_model import build_world_model

    cfg = load_config("demo", ["--model.num_layers=1", "--model.num_attention_heads=2", "--model.attention_head_dim=16",
                               "--model.ffn_dim=64", "--model.action_hidden=32", "--model.action_ffn_dim=64",
                               "--model.text_dim=16", "--model.vae.latent_channels=8"])
    torch.manual_seed(0)
    model = build_world_model(cfg)
    for p in model.parameters():  # make the zero-initialised parts (P_j, output head) active
        if torch.count_nonzero(p) == 0:
            with torch.no_grad():
                p.normal_(0, 0.02)
    g = gen(12)
    lat, (h, w) = cfg.latent_frames, cfg.latent_hw
    n = cfg.data.actions_per_window
    batch = {"z_sim": torch.randn(2, 8, lat, h, w, generator=g), "z_real": torch.randn(2, 8, lat, h, w, generator=g),
             "z_video": torch.randn(2, 8, lat, h, w, generator=g),
             "actions": torch.rand(2, n, 7, generator=g) * 2 - 1, "state0": torch.randn(2, 7, generator=g),
             "text": torch.randn(2, 4, 16, generator=g), "text_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]]).bool()}
    return cfg, model, batch


@pytest.fixture
def real_setup(_real_built):
    """(cfg, model, batch): a fresh copy per test of one tiny WorldModel built once per module."""
    cfg, model, batch = _real_built
    return copy.deepcopy(cfg), copy.deepcopy(model), batch


def test_real_world_model_batched_forward_equals_two_forwards(real_setup):
    _, model, batch = real_setup
    real, sim = _pair_inputs(batch, with_cond=True)
    with torch.no_grad():
        u_r, u_s = paired_student_forward(model, real, sim)
        assert torch.allclose(u_r, real.run(model), atol=1e-5)
        assert torch.allclose(u_s, sim.run(model), atol=1e-5)


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_real_world_model_methods_train(name, real_setup):
    cfg, model, batch = real_setup
    method_preset(cfg, name)
    teacher = copy.deepcopy(model)  # parameters still require grad: only the step keeps the teacher frozen
    frozen = {k: v.clone() for k, v in teacher.state_dict().items()}
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = gen(13)
    for _ in range(3):
        loss, logs = METHODS[name](model, teacher, batch, cfg, g)
        assert torch.isfinite(loss) and loss.requires_grad and logs["loss"] == pytest.approx(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert all(torch.equal(v, frozen[k]) for k, v in teacher.state_dict().items())
    assert all(p.grad is None for p in teacher.parameters())
    assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_real_world_model_gate_zero_equals_unconditioned(monkeypatch, real_setup):
    cfg, model, batch = real_setup
    teacher = copy.deepcopy(model).requires_grad_(False)
    with torch.no_grad():
        _, plain = METHODS["motion_distill"](model, teacher, batch, method_preset(copy.deepcopy(cfg), "motion_distill"),
                                             gen(14))
        monkeypatch.setattr(methods, "sample_gate", lambda b, p, g, device=None: torch.zeros(b, device=device))
        _, gated = METHODS["simforcing"](model, teacher, batch, method_preset(copy.deepcopy(cfg), "simforcing"),
                                         gen(14))
    for k in ("fm_real", "fm_sim", "md_real", "md_sim"):
        assert gated[k] == pytest.approx(plain[k], rel=1e-6, abs=1e-7), k


# ----------------------------------------------------------------------------------------------------------------------
# Beyond the paper: the arm's region weighted, the student's context degraded (docs/notebook/faithful.md)
# ----------------------------------------------------------------------------------------------------------------------


class ContextStandIn(StandIn):
    """StandIn that also takes and records ``context_tau`` (the corrupted first latent's level)."""

    def forward(self, z_t, tau, z0, actions, state0, text, text_mask=None, cond=None, gate=None, cond_feats=None,
                action_keep=None, context_tau=None):
        out = super().forward(z_t, tau, z0, actions, state0, text, text_mask, cond, gate, cond_feats, action_keep)
        self.calls[-1]["context_tau"] = None if context_tau is None else context_tau.detach().clone()
        return out + (0 if context_tau is None else 0.1 * context_tau.view(-1, 1, 1, 1, 1))


def _arm_batch(seed=5):
    batch = make_batch(seed)
    g = torch.Generator().manual_seed(seed + 100)
    f = 1 + 4 * L  # the demo VAE: temporal stride 4, spatial stride 4
    batch["arm_mask"] = torch.rand(B, f, 4 * H, 4 * W, generator=g) < 0.15
    batch["has_arm_mask"] = torch.tensor([True, True, True, False])
    return batch


def test_arm_weighted_step_equals_the_weighted_terms_written_out():
    from simforcing.losses import region_weight

    cfg = make_cfg("sft")
    cfg.flow.loss_weighting = "uniform"
    cfg.loss.arm_weight = 4.0
    batch = _arm_batch()
    student = StandIn(seed=1)
    loss, logs = METHODS["sft"](student, None, batch, cfg, gen(3))
    (sc,) = student.calls
    zr = batch["z_real"]
    tb = sc["tau"].view(B, 1, 1, 1, 1)
    eps = (sc["z_t"] - (1 - tb) * zr[:, :, 1:]) / tb
    with torch.no_grad():
        u = student(sc["z_t"], sc["tau"], zr[:, :, :1], batch["actions"], batch["state0"], batch["text"],
                    batch["text_mask"])
    mask = batch["arm_mask"] & batch["has_arm_mask"].view(-1, 1, 1, 1)
    r = region_weight(mask, 4, 4, 4.0).expand_as(u)
    r = r / r.flatten(1).mean(1).view(-1, 1, 1, 1, 1)
    want = (((u - (eps - zr[:, :, 1:])) ** 2) * r).flatten(1).mean(1).mean()
    assert logs["fm_real"] == pytest.approx(want.item(), rel=1e-4)
    cfg.loss.arm_weight = 0.0
    _, plain = METHODS["sft"](StandIn(seed=1), None, batch, cfg, gen(3))
    assert plain["fm_real"] != pytest.approx(logs["fm_real"], rel=1e-3)  # the weighting changes the term
    assert torch.all(r[3] == 1)  # a sample without a mask weights every position alike


def test_arm_weight_without_masks_is_refused_by_name():
    cfg = make_cfg("sft")
    cfg.loss.arm_weight = 2.0
    with pytest.raises(ConfigError, match="loss.arm_weight"):
        METHODS["sft"](StandIn(seed=1), None, make_batch(1), cfg, gen(0))


def test_degraded_context_reaches_only_the_student_input():
    """train.context_ghost + context_noise: the student's real z0 is (1 − a)·z0 + a·z_prev,0, then noised to σ and
    told σ; the teacher, the targets and the motion anchors keep the clean z0."""
    cfg = make_cfg("simforcing")
    cfg.conditioning.p = 0.0  # no condition: the draws below are the step's last
    cfg.flow.loss_weighting = "uniform"
    cfg.train.context_ghost, cfg.train.context_noise = 0.5, 0.3
    batch = make_batch(6)
    g = torch.Generator().manual_seed(60)
    batch["z_real_prev"] = torch.randn(B, C, L + 1, H, W, generator=g)
    student, teacher = ContextStandIn(seed=1), ContextStandIn(seed=2)
    _, logs = METHODS["simforcing"](student, teacher, batch, cfg, gen(9))
    (tc,), (sc,) = teacher.calls, student.calls
    assert tc["context_tau"] is None and torch.equal(tc["z0"], batch["z_sim"][:, :, :1])  # the teacher: clean
    sigma = sc["context_tau"][:B]
    assert torch.equal(sc["context_tau"][B:], sigma) and bool((sigma >= 0).all() and (sigma <= 0.3).all())
    # redraw the step's random numbers: eps, t, then (no gate) ghost a, sigma, eta_r, eta_s
    rg = gen(9)
    torch.randn(batch["z_real"][:, :, 1:].shape, generator=rg)
    torch.rand(B, generator=rg)
    a = 0.5 * torch.rand(B, generator=rg)
    s = 0.3 * torch.rand(B, generator=rg)
    eta_r = torch.randn(batch["z_real"][:, :, :1].shape, generator=rg)
    eta_s = torch.randn(batch["z_sim"][:, :, :1].shape, generator=rg)
    assert torch.allclose(sigma, s)
    zr0, zs0 = batch["z_real"][:, :, :1], batch["z_sim"][:, :, :1]
    ab, sb = a.view(-1, 1, 1, 1, 1), s.view(-1, 1, 1, 1, 1)
    ghost = (1 - ab) * zr0 + ab * batch["z_real_prev"][:, :, :1]
    assert torch.allclose(sc["z0"][:B], (1 - sb) * ghost + sb * eta_r, atol=1e-6)
    assert torch.allclose(sc["z0"][B:], (1 - sb) * zs0 + sb * eta_s, atol=1e-6)
    # the real flow-matching target is still the clean future: recompute the term from the student's output
    tau = tc["tau"].view(B, 1, 1, 1, 1)
    eps = (sc["z_t"][:B] - (1 - tau) * batch["z_real"][:, :, 1:]) / tau
    with torch.no_grad():
        u_r = student(sc["z_t"][:B], tc["tau"], sc["z0"][:B], batch["actions"], batch["state0"], batch["text"],
                      batch["text_mask"], context_tau=sigma)
    assert logs["fm_real"] == pytest.approx(_mse(u_r, eps - batch["z_real"][:, :, 1:]).mean().item(), rel=1e-4)


def test_context_ghost_needs_the_previous_chunk():
    cfg = make_cfg("sft")
    cfg.train.context_ghost = 0.3
    with pytest.raises(ValueError, match="z_real_prev"):
        METHODS["sft"](StandIn(seed=1), None, make_batch(1), cfg, gen(0))
    assert methods.needs_previous_chunk(cfg) and methods.rollout_windows(cfg).data.frames == 2 * cfg.data.frames - 1
