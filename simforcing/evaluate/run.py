"""Evaluation (`simforcing evaluate`): metrics and latency of a checkpoint (or a baseline) on the first K windows of a
split.

    simforcing evaluate --ckpt RUN --data DIR --split val --num-samples K --out OUT [--sample.w=0.6 ...]
    simforcing evaluate --baseline copy-first|vae-recon --preset demo --data DIR --out OUT [--model.vae.path=...]

Samples: window i is the dataset's fixed window (``data.fixed_window``) of the i-th episode of the split, i < K; sample
i uses the generator seeded from (sample.seed, i) — every method, checkpoint and sampler setting sees the same windows,
first frames and noise. Each sample is generated alone (batch 1), so latency is per sample (evaluate.latency).
Writes OUT/eval.json and OUT/eval.md.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path
from typing import Optional

import torch
from tqdm import tqdm

from simforcing.config import Config, ConfigError
from simforcing.evaluate.latency import summarize_latency
from simforcing.evaluate.metrics import MetricAccumulator, ViewMetrics, psnr_per_sample
from simforcing.evaluate.probe import FirstViewProbe, ProbeAccumulator, StateProbe, load_probe, mean_or_none
from simforcing.evaluate.results import METRIC_KEYS, ActionFollowing, WindowEvaluation, WindowScores
from simforcing.evaluate.tables import eval_markdown
from simforcing.models.vae import load_vae
from simforcing.runs.folder import WORLD_MODELS, run_config
from simforcing.runs.scored import ScoredRun
from simforcing.runs.loaded import (LoadedWorldModel, collate_one, eval_dataset, load_world_model, merge_run_config,
                                    sample_generator, with_dataset_settings)
from simforcing.sample import BASELINES, CopyFirstSampler, GuidedSampler, VaeReconSampler, sampler_for
from simforcing.sampler_batch import SamplerBatch
from simforcing.utils import resolve_device


def uses_actions(sampler) -> bool:
    """Whether a sampler's output depends on the actions (the control of the action-following metric): every
    sampler but the baselines."""
    return sampler.name not in BASELINES


def raw_states(ds, batch: dict) -> torch.Tensor:
    """The window's recorded states in the dataset's units: batch["states"] (B, F, S) de-normalised."""
    st = batch["states"].detach().cpu().double().numpy()
    return torch.as_tensor(ds.normalizer.denormalize("state", st), dtype=torch.float32)


def window_on(ds, i: int, device) -> dict:
    """Window ``i`` of ``ds`` as a batch of one (``runs.loaded.collate_one``), its tensors on ``device``: the recorded
    truth the samples are scored against."""
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in collate_one(ds[i]).items()}


def control_index(i: int, k: int, ds) -> int:
    """The sample whose actions window i gets in the control: half the evaluation set away, so another episode's
    window whenever the set spans more than one episode."""
    j = (i + max(1, k // 2)) % k
    return j if j != i else (i + 1) % k


def action_following(acc: Optional[ProbeAccumulator], control: Optional[ProbeAccumulator],
                     control_psnr: Optional[list]) -> ActionFollowing:
    """The action-following errors of the probe (all None without one; the control's None without a control)."""
    if acc is None:
        return ActionFollowing()
    got = acc.compute()
    if control is None:
        return got
    c = control.compute()
    return replace(got, af_control_pos=c.af_pos, af_control_pos_moving=c.af_pos_moving,
                   af_control_psnr=mean_or_none(control_psnr))


def window_scores(acc: MetricAccumulator, probe_acc: Optional[ProbeAccumulator], action: ActionFollowing,
                  af_reason: Optional[str], per_sample: dict, lat: list, phases: list, fwd: list,
                  views: Optional[ViewMetrics] = None) -> WindowScores:
    """The scores of one evaluation: the metrics (``acc``), the action following, per-sample columns (the metrics',
    the probe's and ``per_sample``; a multi-view model's per-view PSNR as ``psnr@<view>``), the latency (the first
    sample a warm-up) and its phases, the forwards, and each view's metrics (``views``)."""
    m = acc.compute()
    if views is not None:
        per_sample = {**per_sample, **{f"psnr@{v}": col["psnr"] for v, col in views.per_sample.items()}}
    reasons = {k: m[f"{k}_reason"] for k in METRIC_KEYS if m.get(f"{k}_reason")}
    if af_reason is not None:
        reasons["af"] = af_reason
    per = {**m["per_sample"], **(probe_acc.per_sample if probe_acc is not None else {}), **per_sample}
    latency = summarize_latency(lat, warmup=1)
    timed = phases[1:] if len(phases) > 1 else phases
    return WindowScores(**{k: m[k] for k in METRIC_KEYS}, reasons=reasons, action=action,
                        fid_num_images=m["fid_num_images"], fvd_num_videos=m["fvd_num_videos"],
                        num_samples=len(lat), num_frames_compared=m["num_frames_compared"], protocol=m["protocol"],
                        per_sample=per, latency=latency, latency_s=latency.mean_s,
                        latency_phases_s={name: statistics.fmean(p.get(name, 0.0) for p in timed)
                                          for name in sorted({n for p in timed for n in p})},
                        forwards_per_sample=fwd[0] if fwd else 0, views=views.compute() if views else {})



def evaluate_sampler(sampler, ds, cfg: Config, num_samples: int, device: torch.device,
                     sim_cache: Optional[dict] = None, progress: bool = False, desc: str = "evaluate",
                     probe: Optional[StateProbe] = None) -> WindowScores:
    """Run ``sampler`` on samples 0..K−1 of ``ds`` and score them against the real videos.

    ``sim_cache``: {(i, n_sim): SimRollout} shared between calls of one sweep (a guided sampler with w > 0 reuses the
    simulation rollout of sample i and charges its time). Returns the scores (``evaluate.results.WindowScores``).
    """
    k = min(int(num_samples), len(ds))
    if k < 1:
        raise ConfigError(f"eval.num_samples: got {num_samples} with {len(ds)} windows in the split; expected >= 1")
    acc = MetricAccumulator(cfg, device)
    views = ViewMetrics(cfg.data.view_names, cfg.data.view_layout, acc) if cfg.data.num_views > 1 else None
    probe_acc = control_acc = None
    if probe is not None:
        frames = acc.protocol.frame_indices(cfg.data.frames)
        probe_acc = ProbeAccumulator(probe, frames, cfg.eval.probe_moving_threshold)
        # the control: the same sampler, noise and first frame, with the actions of another episode's window
        if cfg.eval.action_control and uses_actions(sampler) and k > 1:
            control_acc = ProbeAccumulator(probe, frames, cfg.eval.probe_moving_threshold)
            control_psnr: list[float] = []
    lat, fwd, eps, starts, phases = [], [], [], [], []
    guided = isinstance(sampler, GuidedSampler)
    it = range(k)
    if progress:
        it = tqdm(it, desc=desc, leave=False)
    for i in it:
        window = window_on(ds, i, device)
        batch = SamplerBatch.from_collated(window)
        gen = sample_generator(cfg, i)
        if guided:
            key = (i, sampler.n_sim)
            reuse = sim_cache.get(key) if (sim_cache is not None and sampler.w != 0) else None
            res = sampler(batch, gen, reuse_sim=reuse)
            if sim_cache is not None and res.sim is not None and reuse is None:
                sim_cache[key] = res.sim
        else:
            res = sampler(batch, gen)
        masks = window["arm_mask"] if batch.arm_mask is not None else None
        acc.update(res.real_video, window["real"], masks)
        if views is not None:
            views.update(res.real_video, window["real"], masks)
        if probe_acc is not None:
            states = raw_states(ds, window)
            probe_acc.update(res.real_video, window["real"], states)
            if control_acc is not None:
                other = window_on(ds, control_index(i, k, ds), device)
                wrong = sampler(replace(batch, actions=other["actions"]), sample_generator(cfg, i))
                control_acc.update(wrong.real_video, window["real"], states)
                control_psnr += psnr_per_sample(wrong.real_video, window["real"], acc.protocol).tolist()
        lat.append(res.latency)
        phases.append(res.timings)
        fwd.append(res.forwards)
        eps.append(window["episode_id"][0])
        starts.append(int(window["start"][0]))
    action = action_following(probe_acc, control_acc, control_psnr if control_acc is not None else None)
    return window_scores(acc, probe_acc, action, None if probe is not None else
                         "eval.probe is not set (fit one with `simforcing model fit-probe --data DIR --out PROBE`, "
                         "then --eval.probe=PROBE)",
                         {"latency_s": lat, "forwards": fwd, "episode_id": eps, "start": starts}, lat, phases, fwd,
                         views)


def build_sampler(cfg: Config, baseline: Optional[str], wm: Optional[LoadedWorldModel] = None, device="cpu"):
    """The sampler of an evaluation: the loaded world model's (``sample.sampler_for``) or a baseline."""
    if baseline is None:
        return sampler_for(wm)
    if baseline == "copy-first":
        return CopyFirstSampler(cfg.data.frames)
    if baseline == "vae-recon":
        return VaeReconSampler(wm.vae if wm is not None else load_vae(cfg, device), device)
    raise ConfigError(f"--baseline: got {baseline!r}; expected one of {', '.join(BASELINES)}")


def load_configured_probe(cfg: Config, device) -> Optional[StateProbe]:
    """The state probe of ``eval.probe`` (None when unset); a bad folder is a ConfigError naming it. For a multi-view
    model it reads the first view of every frame (``evaluate.probe.FirstViewProbe``)."""
    if not cfg.eval.probe:
        return None
    try:
        probe = load_probe(cfg.eval.probe, device)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    return FirstViewProbe(probe, cfg.data.num_views, cfg.data.view_layout) if cfg.data.num_views > 1 else probe


def sweep_probe(cfg: Config, device) -> Optional[StateProbe]:
    """The probe for a sweep: its grid shows the action-following error of every cell; the control (another
    window's actions, twice the sampling) is the evaluation's, not the sweep's."""
    cfg.eval.action_control = False
    return load_configured_probe(cfg, device)


class SimDomainView:
    """An evaluation set seen in the simulation domain: each window's recorded sim video stands where the real one
    does (observation and target), so a model is scored as a simulation world model — the student's simulation
    rollout (gate off, no condition) or the stage-1 teacher — and the baselines as the simulation's."""

    def __init__(self, ds):
        self.ds, self.normalizer = ds, ds.normalizer

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> dict:
        item = dict(self.ds[i])
        item["real"] = item["sim"]
        return item


DOMAINS = ("real", "sim")


def evaluate_run(run_dir: Optional[str | Path], data_root: str | Path, cfg: Optional[Config], split: str,
                 num_samples: Optional[int], out_dir: str | Path, baseline: Optional[str] = None,
                 step: Optional[int] = None, device: Optional[str | torch.device] = None,
                 progress: bool = True, domain: str = "real") -> WindowEvaluation:
    """Evaluate a run's checkpoint (or a baseline) and write ``out_dir/eval.json`` + ``eval.md``; returns the result.

    ``domain="sim"`` scores the model in simulation (:class:`SimDomainView`): observation and target are the recorded
    sim video, the sampler runs with w = 0 (the network with its gate off — exactly the simulation rollout of the
    two-stage sampler, with ``sample.n_real`` steps).

    ``cfg`` supplies data/sample/eval settings (the run's own config when None); the network, VAE and flow settings
    come from the run. Baselines need no run: ``cfg`` then must name the VAE (vae-recon).
    """
    if run_dir is None and cfg is None:
        raise ConfigError("evaluate: give a run folder (--ckpt) or a config (--preset/--config) for a baseline")
    if run_dir is None and baseline is None:
        raise ConfigError(f"evaluate: --ckpt is required unless --baseline is one of {', '.join(BASELINES)}")
    dev = torch.device(device) if device is not None else resolve_device((cfg.train.device if cfg else "auto"))
    wm = None
    if run_dir is not None and baseline is None:
        wm = load_world_model(run_dir, cfg, dev, step, data_root)
        cfg = wm.cfg
    else:
        if run_dir is not None:
            cfg = merge_run_config(run_config(run_dir, WORLD_MODELS, "--ckpt", "sample"), cfg)
        cfg = with_dataset_settings(cfg, data_root)
    if domain not in DOMAINS:
        raise ConfigError(f"--domain: got {domain!r}; expected one of {', '.join(DOMAINS)}")
    if domain == "sim" and cfg.fewstep.steps:
        raise ConfigError(f"--domain sim: {run_dir} is a few-step student: it samples the real domain only (its "
                          "simulation rollout is the teacher's N_s steps); evaluate its teacher in simulation")
    if domain == "sim" and cfg.sample.condition != "rollout":
        raise ConfigError(f"--domain sim: the model is scored unconditioned (w = 0), so sample.condition="
                          f"{cfg.sample.condition} would not be read; leave it out, or score the real domain")
    if domain == "sim":
        cfg.sample.w = 0.0  # in simulation the model runs unconditioned: the rollout the sampler conditions on
    num_samples = cfg.eval.num_samples if num_samples is None else int(num_samples)
    sampler = build_sampler(cfg, baseline, wm, dev)
    ds = eval_dataset(cfg, data_root, split, wm.stats if wm is not None else None)
    if domain == "sim":
        ds = SimDomainView(ds)
    probe = load_configured_probe(cfg, dev)
    scores = evaluate_sampler(sampler, ds, cfg, num_samples, dev, progress=progress,
                              desc=f"evaluate {baseline or Path(run_dir).name}", probe=probe)
    res = WindowEvaluation(scores, split=split, domain=domain, data=str(data_root), requested_samples=num_samples,
                           sampler=sampler.settings(), device=str(dev),
                           include_first_frame=cfg.eval.include_first_frame, baseline=baseline,
                           checkpoint=None if wm is None else
                           replace(ScoredRun.of(run_dir, str(wm.checkpoint.path), wm.checkpoint.step),
                                   run=str(run_dir), path=str(Path(wm.checkpoint.path).resolve())))
    res.write(out_dir, eval_markdown(res, run_dir))
    return res
