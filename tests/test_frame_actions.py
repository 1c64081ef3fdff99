"""model.action_conditioning: how the actions reach the video — the paper's action expert ("expert"), each future
latent frame's own actions modulating that frame's adaLN in every block ("frame", after IRASim; no action expert), or
both. The per-frame term starts exact (zero-initialised: Wan2.2 weights and a stage-1 checkpoint give the same
outputs), reaches only its own frame, is dropped exactly with the actions, is computed once per rollout, trains, and
runs end to end (pretrain -> train -> evaluate, resume, a stage-2 student that adds it to an "expert" teacher, the
export); a video base of any mode starts a stage 1 of any other, and a policy is always "expert"."""

from __future__ import annotations

import json

import pytest
import torch

from simforcing.config import ConfigError, load_config
from simforcing.evaluate.run import evaluate_run
from simforcing.export import export_run, load_pretrained
from simforcing.models.frame_actions import add_per_frame
from simforcing.models.info import parameter_counts
from simforcing.models.world_model import build_world_model
from simforcing.runs.checkpoint import list_checkpoints, load_checkpoint
from simforcing.runs.folder import load_model_from_run
from simforcing.sample import CountingModel, StepInputs, guided_velocity, rollout_velocity
from simforcing.train import train_run
from test_train import losses, stage1, tiny, tiny_cfg  # noqa: F401  (fixtures: the data, a paper-path stage 1)
from test_weights import wan_started, write_tiny_wan
from test_world_model import TINY, _batch

MODES = ("expert", "frame", "both")


def _cfg(mode: str, preset: str = "demo", **extra):
    ov = {**TINY, "model.action_conditioning": mode, **{k.replace("__", "."): str(v) for k, v in extra.items()}}
    return load_config(preset, ov).validate()


def _model(cfg, seed=0, frame_term=True):
    """A tiny model with its zero-initialised video head randomised (the output depends on everything) and, with
    ``frame_term``, the per-frame action term's zero last layer too (as training makes it)."""
    torch.manual_seed(seed)
    m = build_world_model(cfg)
    g = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        m.video.proj_out.weight.copy_(torch.randn(m.video.proj_out.weight.shape, generator=g) * 0.2)
        if frame_term and m.frame_actions is not None:
            w = m.frame_actions.linear_2.weight
            w.copy_(torch.randn(w.shape, generator=g) * 0.2)
    return m.eval()


# ----------------------------------------------------------------------------------------------------------------------
# The field and the tensors
# ----------------------------------------------------------------------------------------------------------------------


def test_the_field_is_validated_and_the_paper_path_is_every_presets_default():
    for preset in ("demo", "bridge", "interndata_a1"):
        assert load_config(preset).model.action_conditioning == "expert"
    with pytest.raises(ConfigError, match="model.action_conditioning: got 'tokens'; expected 'expert'"):
        load_config("demo", {"model.action_conditioning": "tokens"}).validate()
    with pytest.raises(ConfigError, match="model.action_conditioning: got 'both'.*needs the action expert"):
        _cfg("both", model__use_action_expert="false")
    with pytest.raises(ConfigError, match="model.action_conditioning: got 'frame'.*model.action_head"):
        _cfg("frame", model__action_head="true")
    with pytest.raises(ConfigError, match="model.action_conditioning: got 'both'.*policy"):
        build_world_model(_cfg("both"), meta=True, attention_mode="policy_video_action")
    bad = _cfg("frame")
    bad.model.action_conditioning = "tokens"  # not validated: the model names it too
    with pytest.raises(ConfigError, match="model.action_conditioning: got 'tokens'"):
        build_world_model(bad, meta=True)
    _cfg("frame", model__use_action_expert="false")  # control: 'frame' needs no action expert


def test_each_mode_builds_its_tensors():
    keys = {mode: set(build_world_model(_cfg(mode), meta=True).state_dict()) for mode in MODES}
    frame = {k for k in keys["both"] if k.startswith("frame_actions.")}
    action = {k for k in keys["expert"] if k.startswith("action.") or ".action." in k}
    assert frame == {f"frame_actions.linear_{i}.{p}" for i in (1, 2) for p in ("weight", "bias")}
    assert not any(k.startswith("frame_actions.") for k in keys["expert"])  # the paper's tensors only
    assert keys["both"] == keys["expert"] | frame and keys["frame"] == keys["expert"] - action | frame
    no_expert = build_world_model(_cfg("expert", model__use_action_expert="false"), meta=True)
    assert set(no_expert.state_dict()) == keys["frame"] - frame  # 'frame' = no action expert + the per-frame term


@pytest.mark.parametrize("preset, span, frames", [("demo", 4, 2), ("bridge", 4, 5), ("interndata_a1", 16, 8)])
def test_each_latent_frame_reads_its_span_of_actions(preset, span, frames):
    """Bridge: 20 actions = 5 latent frames × 4; InternData-A1 (frame stride 4): 128 = 8 × 16; the demo: 8 = 2 × 4."""
    cfg = load_config(preset, {"model.action_conditioning": "frame"}).validate()
    assert cfg.data.actions_per_window == span * frames == span * (cfg.latent_frames - 1)
    model = build_world_model(cfg, meta=True)
    fa = model.frame_actions
    assert fa.span == span and fa.linear_1.in_features == span * cfg.data.action_dim
    assert fa.linear_1.out_features == cfg.model.action_hidden and fa.linear_2.out_features == 7 * cfg.model.dim


def test_parameter_counts_at_the_demo_and_bridge_sizes():
    """The per-frame term: Linear(4·7 → action_hidden) + Linear(action_hidden → 7·dim), biases included."""
    for preset, expected in (("demo", 28 * 64 + 64 + 64 * 896 + 896), ("bridge", 28 * 1024 + 1024 + 1024 * 21504
                                                                        + 21504)):
        counts = {mode: parameter_counts(load_config(preset, {"model.action_conditioning": mode}).validate())
                  for mode in MODES}
        assert "frame_actions" not in counts["expert"]
        assert counts["both"]["frame_actions"] == counts["frame"]["frame_actions"] == expected
        assert counts["both"]["total"] == counts["expert"]["total"] + expected
        assert counts["frame"]["action_expert"] == 0
        assert counts["frame"]["total"] == counts["expert"]["total"] - counts["expert"]["action_expert"] + expected
    assert parameter_counts(load_config("bridge", {"model.action_conditioning": "both"}).validate())[
        "frame_actions"] == 22_071_296


# ----------------------------------------------------------------------------------------------------------------------
# The network
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, reference", [("both", {"model.action_conditioning": "expert"}),
                                             ("frame", {"model.use_action_expert": "false"})])
def test_the_zero_initialised_term_starts_exact(mode, reference):
    """Seed for seed every other tensor equals the model's without the term (it is drawn last), and at
    initialisation the output equals that model's, bit for bit: 'both' = the paper's model, 'frame' = the model
    without any action input."""
    cfg = _cfg(mode)
    torch.manual_seed(0)
    model = build_world_model(cfg).eval()
    assert not model.frame_actions.linear_2.weight.any() and not model.frame_actions.linear_2.bias.any()
    assert model.frame_actions.linear_1.weight.abs().sum() > 0
    torch.manual_seed(0)
    ref = build_world_model(load_config("demo", {**TINY, **reference}).validate()).eval()
    theirs = ref.state_dict()
    assert set(model.state_dict()) - set(theirs) == {k for k in model.state_dict() if k.startswith("frame_actions.")}
    assert all(torch.equal(theirs[k], v) for k, v in model.state_dict().items() if k in theirs)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for m in (model, ref):  # the same random video head: the output depends on everything
            m.video.proj_out.weight.copy_(torch.randn(m.video.proj_out.weight.shape, generator=g.manual_seed(5)))
        batch = _batch(cfg)
        out = model(**batch)
        assert out.abs().mean() > 0.01 and torch.equal(out, ref(**batch))
        assert torch.equal(model(**batch, action_keep=torch.tensor([True, False])),
                           ref(**batch, action_keep=torch.tensor([True, False])))


def _frame_slices(model, batch, **kw):
    """The output (B, C, L, h, w) and the video tokens after the last layer, per latent frame (B, L+1, n, dim)."""
    got = {}
    hook = model.layers[-1].register_forward_hook(lambda mod, args, out: got.update(hv=out[0]))
    try:
        with torch.no_grad():
            out = model(**batch, **kw)
    finally:
        hook.remove()
    return out, got["hv"].unflatten(1, (batch["z_t"].shape[2] + 1, -1))


@pytest.mark.parametrize("stride", [1, 2])
def test_each_frames_actions_reach_that_frame_only(stride):
    """An independent check of the grouping: with the self-attention's output projection zeroed (no token reads
    another) and no action expert, perturbing the actions of latent frame ℓ's span [(ℓ−1)·span, ℓ·span) changes
    frame ℓ's tokens and output and nothing else — not the first frame, not the other frames, bit for bit."""
    cfg = _cfg("frame", data__frames=13, data__frame_stride=stride, model__num_layers=1)
    model = _model(cfg)
    with torch.no_grad():
        model.layers[0].video.attn1.to_out[0].weight.zero_()
        model.layers[0].video.attn1.to_out[0].bias.zero_()
    span, frames = 4 * stride, cfg.latent_frames - 1
    assert model.frame_actions.span == span and cfg.data.actions_per_window == span * frames == 12 * stride
    batch = _batch(cfg)
    out, hv = _frame_slices(model, batch)
    for ell in range(1, frames + 1):
        actions = batch["actions"].clone()
        actions[:, (ell - 1) * span: ell * span] += 0.7
        out2, hv2 = _frame_slices(model, dict(batch, actions=actions))
        for k in range(frames + 1):  # token frame k: 0 the first, k >= 1 the future (output frame k - 1)
            assert torch.equal(hv[:, k], hv2[:, k]) == (k != ell), (ell, k)
            if k:
                assert torch.equal(out[:, :, k - 1], out2[:, :, k - 1]) == (k != ell), (ell, k)


def test_add_per_frame_keeps_the_first_frame_and_serves_every_group_layout():
    t = torch.randn(2, 3, 6, 4)  # (B, S = 3 frames, 6, dim)
    term = torch.randn(2, 2, 6, 4)
    got = add_per_frame(t, term, 3)
    assert torch.equal(got[:, 0], t[:, 0]) and torch.equal(got[:, 1:], t[:, 1:] + term)
    one = add_per_frame(t[:, :1], term, 3)  # one timestep per sample: expanded to the frames
    assert one.shape == (2, 3, 6, 4) and torch.equal(one[:, 0], t[:, 0])
    assert torch.equal(one[:, 2], t[:, 0] + term[:, 1])
    tokens = add_per_frame(t.repeat_interleave(5, 1), term, 3)  # one group per token, 5 tokens a frame
    assert torch.equal(tokens, got.repeat_interleave(5, 1))
    with pytest.raises(ValueError, match="one per future latent frame"):
        add_per_frame(t, term[:, :1], 3)


@pytest.mark.parametrize("mode", ["frame", "both"])
def test_action_keep_removes_it_exactly(mode):
    cfg = _cfg(mode)
    model = _model(cfg)
    batch = _batch(cfg)
    other = dict(batch, actions=torch.rand_like(batch["actions"]) * 2 - 1)
    keep = torch.tensor([False, True])
    with torch.no_grad():
        plain, changed = model(**batch), model(**other)
        assert not torch.allclose(plain[0], changed[0], atol=1e-3) and not torch.allclose(plain[1], changed[1])
        kept, kept_other = model(**batch, action_keep=keep), model(**other, action_keep=keep)
        assert torch.allclose(kept[0], kept_other[0], atol=1e-6, rtol=0)  # sample 0: its actions reach nothing
        assert not torch.allclose(kept[1], kept_other[1], atol=1e-3)
        assert torch.allclose(kept[1], plain[1], atol=1e-6)  # the kept sample as without dropout
        if mode == "frame":  # no action path but the per-frame term: exact, even for NaN actions
            nan = dict(batch, actions=torch.full_like(batch["actions"], float("nan")))
            dropped = model(**nan, action_keep=torch.zeros(2, dtype=torch.bool))
            assert torch.equal(dropped, model(**dict(batch, actions=None)))
            assert torch.equal(kept[0], dropped[0])


@pytest.mark.parametrize("mode", ["frame", "both"])
def test_the_step_context_and_the_samplers_guidance_give_the_plain_forward(mode):
    """The per-frame term depends on the actions alone: the step context computes it once per rollout; the same
    output as a plain forward (bit for bit where no action stream is precomputed), also with action dropout; the
    real rollout's batched CFG pair equals two independent forwards."""
    cfg = _cfg(mode)
    model = _model(cfg)
    with torch.no_grad():
        for layer in model.layers:
            layer.cond_proj.weight.normal_(0, 0.1)
    batch = _batch(cfg)

    def same(a, b):
        if mode == "frame":
            assert torch.equal(a, b)
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)

    cond = torch.randn(2, 16, cfg.latent_frames, *cfg.latent_hw)
    with torch.no_grad():
        static = model.step_context(batch["actions"], batch["state0"], batch["text"], batch["text_mask"])
        assert static.parts.frame_tproj.shape == (2, 2, 6, 32) and static.parts.frame_temb.shape == (2, 2, 32)
        for tau in (torch.tensor([0.9, 0.3]), torch.tensor([0.05, 0.5])):
            step = dict(batch, tau=tau)
            same(model(**step, static=static), model(**step))
            keep = torch.tensor([True, False])
            same(model(**step, action_keep=keep, static=static), model(**step, action_keep=keep))
        inputs = StepInputs(batch["z0"], batch["actions"], batch["state0"], batch["text"], batch["text_mask"])
        got = rollout_velocity(CountingModel(model), inputs, 0.6, model.condition_features(cond), 4)(
            batch["z_t"], batch["tau"])
        u_c, u_u = model(**batch, cond=cond, gate=torch.ones(2)), model(**batch)
    assert not torch.allclose(u_c, u_u, atol=1e-3)
    torch.testing.assert_close(got, guided_velocity(u_c, u_u, 0.6), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["frame", "both"])
def test_gradients_reach_the_frame_term(mode):
    """adaLN-Zero: at initialisation the last layer gets a gradient (the first, behind it, none yet); once it has
    moved, both do; a sample without actions gives it none; every parameter receives a gradient."""
    cfg = _cfg(mode)
    model = _model(cfg, frame_term=False).train()
    batch = _batch(cfg)
    cond = torch.randn(2, 16, cfg.latent_frames, *cfg.latent_hw)
    model(**batch, cond=cond, gate=torch.ones(2)).square().mean().backward()
    fa = model.frame_actions
    assert fa.linear_2.weight.grad.abs().sum() > 0 and not fa.linear_1.weight.grad.any()
    assert [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None] == []
    model = _model(cfg).train()
    model(**batch).square().mean().backward()
    fa = model.frame_actions
    assert fa.linear_1.weight.grad.abs().sum() > 0 and fa.linear_2.weight.grad.abs().sum() > 0
    model.zero_grad(set_to_none=False)
    model(**batch, action_keep=torch.zeros(2, dtype=torch.bool)).square().mean().backward()
    assert not any(p.grad.any() for p in fa.parameters())


def test_gradient_checkpointing_and_bf16_autocast():
    cfg = _cfg("both")
    plain = _model(cfg).train()
    ckpt = _model(_cfg("both", model__gradient_checkpointing="true")).train()
    ckpt.load_state_dict(plain.state_dict())
    batch = _batch(cfg)
    for m in (plain, ckpt):
        m(**batch).square().mean().backward()
    for (name, p), q in zip(plain.named_parameters(), ckpt.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            assert torch.allclose(p.grad, q.grad, atol=1e-6), name
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = plain(**batch)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()


def test_a_rollout_fills_each_window_with_hold_or_plan_actions():
    """A long rollout always gives the network a whole window of actions: a cut last chunk is the full chunk with
    "hold" actions after the executed ones (its first frames kept), a policy's step the window with its plan — the
    per-frame term reads them like any window's; and the actions reach the video."""
    from simforcing.rollout import WorldModelRollout
    from simforcing.runs.loaded import sample_generator
    from test_rollout import episode_inputs, loaded, roll
    from test_sample import tiny_cfg as sample_cfg, tiny_model, tiny_vae

    cfg = sample_cfg(model__action_conditioning="frame")
    model = tiny_model(cfg)
    with torch.no_grad():
        model.frame_actions.linear_2.weight.normal_(0, 0.2)
    setup = (cfg, model, tiny_vae())
    ep = episode_inputs(cfg, 1, 16)
    cut = roll(setup, ep, horizon=12)
    held = ep["actions"].clone()
    held[:, 12:, :6] = 0
    held[:, 12:, 6] = held[:, 11:12, 6]
    full = roll(setup, dict(ep, actions=held))
    assert cut.video.shape[2] == 13 and torch.equal(cut.video, full.video[:, :, :13])
    other = ep["actions"].clone()
    other[:, 8:12] += 0.5  # the second chunk's first latent frame
    moved = roll(setup, dict(ep, actions=other), horizon=12)
    assert torch.equal(moved.video[:, :, :9], cut.video[:, :, :9]) and not torch.equal(moved.video, cut.video)
    ro = WorldModelRollout(loaded(setup), ep["first_frame"], ep["state0"], ep["text"], ep["text_mask"],
                           [sample_generator(cfg, 0)], first_mask=ep["first_mask"])
    frames = ro.step(ep["actions"][:, :4], plan=ep["actions"][:, 4:8])
    assert torch.equal(frames, roll(setup, ep, horizon=8).video[:, :, 1:5])


def test_actions_of_another_shape_are_refused_by_name():
    cfg = _cfg("frame")
    model = _model(cfg)
    batch = _batch(cfg)
    with pytest.raises(ValueError, match=r"actions: expected \(B, L·4, 7\).*model.action_conditioning"):
        model(**dict(batch, actions=batch["actions"][:, :7]))  # 7 actions: not whole latent frames
    with pytest.raises(ValueError, match=r"actions: expected \(B, L·4, 7\)"):
        model(**dict(batch, actions=batch["actions"][..., :6]))  # action_dim 6
    with pytest.raises(ValueError, match="actions: 12 actions make 3 latent frames.*expected 8 actions"):
        model(**dict(batch, actions=torch.cat([batch["actions"], batch["actions"][:, :4]], 1)))
    with torch.no_grad():
        assert model(**batch).shape == batch["z_t"].shape  # control


# ----------------------------------------------------------------------------------------------------------------------
# Start weights: Wan2.2 (the 5B preset's layout) and a stage-1 run
# ----------------------------------------------------------------------------------------------------------------------

BRIDGE_TINY = {"model.num_attention_heads": "2", "model.attention_head_dim": "16", "model.ffn_dim": "64",
               "model.freq_dim": "32", "model.text_dim": "32", "model.num_layers": "2", "model.action_hidden": "16",
               "model.action_ffn_dim": "32", "data.frames": "5", "data.height": "64", "data.width": "96"}


def test_wan_weights_load_with_the_frame_term_zero(tmp_path):
    """A tiny random Wan2.2 transformer (diffusers layout) into the bridge preset's layout: Wan's tensors load, the
    per-frame term is expected missing and starts at zero: the same outputs as the paper's model from the same
    weights."""
    folder = tmp_path / "transformer"
    write_tiny_wan(folder, in_channels=48)

    def loaded(mode):
        cfg = load_config("bridge", {**BRIDGE_TINY, "model.action_conditioning": mode}).validate()
        return (cfg, *wan_started(cfg, folder))

    cfg, model, report = loaded("both")
    assert report.missing == [] and report.unexpected == []
    assert {k for k in report.expected_missing if k.startswith("frame_actions.")} == {
        f"frame_actions.linear_{i}.{p}" for i in (1, 2) for p in ("weight", "bias")}
    assert not model.frame_actions.linear_2.weight.any()
    _, paper, _ = loaded("expert")
    batch = _batch(cfg)
    with torch.no_grad():
        out = model(**batch)
        assert torch.isfinite(out).all() and out.abs().mean() > 0.01
        assert torch.equal(out, paper(**batch))


def test_stage2_adds_the_frame_term_to_an_expert_teacher(tiny, stage1, tmp_path):
    """Stage 2 with 'both' starts from a paper-path stage-1 run: the per-frame term is new (zero, so the student
    starts as the teacher) and trains; 'frame' (no action expert) is another architecture, refused by name before
    any work; a resume keeps the mode."""
    run = tmp_path / "s2"
    cfg = tiny_cfg(*tiny, "--train.max_steps=2", "--model.action_conditioning=both")
    result = train_run(cfg, run, "train", teacher_run=stage1, method="simforcing", progress=False)
    assert result["state"] == "finished" and result["step"] == 2, result
    teacher = load_checkpoint(list_checkpoints(stage1)[-1][1]).model_state
    assert not any(k.startswith("frame_actions.") for k in teacher)
    state = load_checkpoint(list_checkpoints(run)[-1][1]).model_state
    assert state["frame_actions.linear_2.weight"].abs().sum() > 0  # trained from zero
    run_cfg, model, _ = load_model_from_run(run)
    assert run_cfg.model.action_conditioning == "both"
    assert torch.equal(model.frame_actions.linear_2.weight, state["frame_actions.linear_2.weight"])
    with pytest.raises(ConfigError, match="model.action_conditioning: .* was trained with 'both'"):
        train_run(tiny_cfg(*tiny, "--train.max_steps=3"), run, "train", teacher_run=stage1, resume=True,
                  progress=False)
    export_run(run, tmp_path / "shared")  # the export keeps it, and its model card says so
    shared = load_pretrained(tmp_path / "shared")
    assert shared.cfg.model.action_conditioning == "both"
    assert torch.equal(shared.model.frame_actions.linear_2.weight, state["frame_actions.linear_2.weight"])
    assert "video expert + action expert + per-frame action adaLN" in (tmp_path / "shared/README.md").read_text()
    bad = tmp_path / "frame"
    with pytest.raises(ConfigError, match="model.action_conditioning: got 'frame' but the teacher checkpoint .* "
                                          "'expert'.*from 'expert' to 'both'"):
        train_run(tiny_cfg(*tiny, "--model.action_conditioning=frame"), bad, "train", teacher_run=stage1,
                  method="simforcing", progress=False)
    assert not bad.exists()


def _resumes_exactly(cfg, stage: str, tmp_path, monkeypatch, **kw) -> None:
    """A run stopped after step 2 (SIGTERM) and resumed logs the losses of the uninterrupted run exactly."""
    from test_train import _raise_sigterm_at

    assert train_run(cfg, tmp_path / "full", stage, progress=False, **kw)["state"] == "finished"
    _raise_sigterm_at(monkeypatch, 2)
    part = train_run(cfg, tmp_path / "part", stage, progress=False, **kw)
    assert part["state"] == "stopped" and part["step"] == 2
    monkeypatch.undo()
    again = train_run(cfg, tmp_path / "part", stage, resume=True, progress=False, **kw)
    assert again["state"] == "finished" and losses(tmp_path / "part") == losses(tmp_path / "full")


@pytest.mark.slow
def test_frame_mode_end_to_end_resumes_exactly(tiny, tmp_path, monkeypatch):
    """'frame' (no action expert): stage 1 interrupted after step 2 and resumed logs the losses of the uninterrupted
    run exactly; a SimForcing stage 2 from it trains and the evaluation runs on the validation split."""
    cfg = tiny_cfg(*tiny, "--train.max_steps=4", "--train.ckpt_every=10", "--model.action_conditioning=frame")
    _resumes_exactly(cfg, "pretrain", tmp_path, monkeypatch)
    rows = [json.loads(x) for x in (tmp_path / "full/metrics.jsonl").read_text().splitlines()]
    assert all("action_drop_frac" in r for r in rows)
    state = load_checkpoint(list_checkpoints(tmp_path / "full")[-1][1]).model_state
    assert not any(k.startswith("action.") or ".action." in k for k in state)
    assert state["frame_actions.linear_2.weight"].abs().sum() > 0
    s2 = tmp_path / "s2"
    cfg2 = tiny_cfg(*tiny, "--train.max_steps=2", "--model.action_conditioning=frame")
    result = train_run(cfg2, s2, "train", teacher_run=tmp_path / "full", method="simforcing", progress=False)
    assert result["state"] == "finished" and result["step"] == 2, result
    res = evaluate_run(s2, tiny[0], None, "val", 1, tmp_path / "ev", progress=False)
    assert res.scores.num_samples == 1 and (tmp_path / "ev" / "eval.json").is_file()


@pytest.mark.slow
def test_a_simforcing_stage2_with_both_resumes_exactly(tiny, stage1, tmp_path, monkeypatch):
    cfg = tiny_cfg(*tiny, "--train.max_steps=4", "--train.ckpt_every=10", "--model.action_conditioning=both")
    _resumes_exactly(cfg, "train", tmp_path, monkeypatch, teacher_run=stage1, method="simforcing")


# ----------------------------------------------------------------------------------------------------------------------
# A video base and a policy: the action side of one mode meets a run of another
# ----------------------------------------------------------------------------------------------------------------------


def test_a_video_base_of_the_paper_path_starts_a_frame_or_both_stage1(tiny, tmp_path):
    """A video base never trains its action side, whatever its mode: a stage 1 of another mode starts from it (the
    per-frame term new, the base's action expert unused by a 'frame' stage 1), its video expert inherited."""
    from simforcing.prior import video_prior_run
    from simforcing.warmstart import init_from_run, is_action_side
    from test_prior import prior_cfg

    base = tmp_path / "base"
    assert video_prior_run(prior_cfg(*tiny, "--train.max_steps=1"), base, progress=False)["state"] == "finished"
    for mode in ("frame", "both"):
        cfg = tiny_cfg(*tiny, f"--model.action_conditioning={mode}")
        torch.manual_seed(0)
        model = build_world_model(cfg)
        own = {k: v.clone() for k, v in model.state_dict().items()}
        rep = init_from_run(model, cfg, base)
        assert {f"frame_actions.linear_{i}.{p}" for i in (1, 2) for p in ("weight", "bias")} <= set(rep.new)
        assert all(is_action_side(n) for n in rep.new) and all(is_action_side(n) for n in rep.unused)
        assert bool(rep.unused) == (mode == "frame")  # the base's action expert, which 'frame' has not
        assert all(torch.equal(model.state_dict()[n], own[n]) for n in rep.new)
    s1 = tmp_path / "s1"
    res = train_run(tiny_cfg(*tiny, "--train.max_steps=1", "--model.action_conditioning=frame"), s1, "pretrain",
                    init=base, progress=False)
    assert res["state"] == "finished"
    with pytest.raises(ConfigError, match="model.ffn_dim"):  # control: other architecture fields still must match
        init_from_run(build_world_model(tiny_cfg(*tiny, "--model.ffn_dim=48")), tiny_cfg(*tiny, "--model.ffn_dim=48"),
                      base)


def test_a_policy_from_a_frame_or_both_world_model(tiny, tmp_path):
    """A policy predicts its actions: its config is 'expert' whatever the world model's; a 'both' world model hands
    on both experts (its per-frame term unused), a 'frame' one only its video expert (policy.init_from=video, or a
    ConfigError says so)."""
    from datagen import make_policy_dataset
    from simforcing.policy.configs import policy_run_config
    from simforcing.policy.init import init_policy
    from simforcing.policy.settings import ATTENTION_MODE
    from test_policy import POLICY

    data = make_policy_dataset(tmp_path / "policy")
    runs = {}
    for mode in ("frame", "both"):
        runs[mode] = tmp_path / mode
        res = train_run(tiny_cfg(*tiny, "--train.max_steps=1", f"--model.action_conditioning={mode}"), runs[mode],
                        "pretrain", progress=False)
        assert res["state"] == "finished"

    def policy(mode, *extra):
        cfg = policy_run_config("action_only", str(runs[mode]), str(data), "demo",
                                POLICY + [f"--model.vae.path={tiny[1]}", *extra])
        assert cfg.model.action_conditioning == "expert" and cfg.model.action_head
        return cfg, build_world_model(cfg, attention_mode=ATTENTION_MODE[cfg.policy.setting])

    cfg, model = policy("both")
    rep = init_policy(model, cfg, str(runs["both"]))
    assert rep.unused == sorted(f"frame_actions.linear_{i}.{p}" for i in (1, 2) for p in ("weight", "bias"))
    assert any(".action." in n for n in rep.inherited)
    cfg, model = policy("frame")
    with pytest.raises(ConfigError, match="no action expert.*policy.init_from=video"):
        init_policy(model, cfg, str(runs["frame"]))
    cfg, model = policy("frame", "--policy.init_from=video")
    rep = init_policy(model, cfg, str(runs["frame"]))
    assert rep.inherited and not any(".action." in n or n.startswith("action.") for n in rep.inherited)
    assert any(".action." in n for n in rep.new)
    with pytest.raises(ConfigError, match="model.action_conditioning=frame.*a policy"):
        policy("both", "--model.action_conditioning=frame")
