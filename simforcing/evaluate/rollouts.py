"""Drift of long rollouts against the recorded truth (`simforcing rollout`).

    simforcing rollout --ckpt RUN --data DIR --split val --horizon 64 --out OUT [--eval.probe=PROBE]

Each of the first N episodes of the split is rolled out from its recorded first frame over its first H actions
(``simforcing.rollout``: chunk after chunk, every chunk from the previous chunk's last generated frame, the state
integrated from the actions or read by the probe, never recorded), all N together. Every episode must hold H actions
(a longer validation set: ``simforcing data synth --length 65``). Rows of ``OUT/rollout.json``, each scored per
frame and per chunk against the recorded real video and states:

| row | what |
|---|---|
| ``rollout`` | the long rollout |
| ``restart`` | the model restarted at every chunk from the recorded frame, recorded state and mask, with the same actions and noise: the one-window number; ``rollout − restart`` is the drift |
| ``control`` | the rollout with another episode's actions (episode (i + N/2) mod N): it must leave the true video |
| ``sim chain`` | the rollout's condition (its own simulation chain; the twin's rendering with ``sample.condition = render``) against the recorded simulation video |
| ``copy-first`` | the episode's first frame, repeated (a model that does not move) |
| ``vae-recon`` | every chunk's recorded window through the VAE (the ceiling) |
| ``probe floor`` | the state probe chained over the recorded frames (the action error's own floor) |

Per frame t (kept-frame index, 1 … T; chunk k covers its frames s_k + 1 … s_{k+1}): PSNR and SSIM as the metric
protocol computes them (``evaluate.metrics``, frame t against the recorded frame t), arm-region PSNR over the
recorded arm masks at the chunk's first frame and at t, and the action error ‖q̂_t − q_t‖ over the position dims of
the state, where q̂ is read by the state probe and chained over chunks: q̂_t = q̂_{s_k} + P(x̂_{s_k}, x̂_t), q̂_0 the
recorded initial state (``restart``: q̂_{s_k} the recorded state, the evaluation's one-window metric). Per chunk: the
mean over its frames, then over episodes; per-episode values are kept for paired comparisons.

With ``--sample.condition=render`` each episode's digital twin (``simforcing.twin``, started at the recorded first
state and the episode's camera) renders every chunk's condition from the actions, and the restart row conditions on
the same renderings; with ``oracle`` both condition on the recorded simulation video of each chunk.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
from torch.utils.data import default_collate

from simforcing.config import Config, ConfigError
from simforcing.data.format import read_episodes, read_info, read_lowdim, read_splits
from simforcing.data.paired import PairedWindowDataset, split_views
from simforcing.evaluate.metrics import MetricProtocol, masked_psnr_per_sample, psnr_per_sample, ssim_per_sample
from simforcing.evaluate.probe import StateProbe
from simforcing.evaluate.results import ChunkSeries, RolloutDrift
from simforcing.evaluate.run import load_configured_probe
from simforcing.evaluate.tables import rollout_markdown
from simforcing.rollout import Recorded, WorldModelRollout, chunk_sizes, episode_generators, hold_actions
from simforcing.runs.loaded import load_world_model
from simforcing.sample import Sampler, sampler_for
from simforcing.sampler_batch import SamplerBatch
from simforcing.twin import TwinEpisode, TwinLoop, check_twin_can_act, read_dataset_records
from simforcing.utils import atomic_write_json, atomic_write_text, resolve_device

METRICS = ("psnr", "ssim", "psnr_arm", "af_pos")
ROWS = ("rollout", "restart", "control", "sim chain", "copy-first", "vae-recon", "probe floor")


# ----------------------------------------------------------------------------------------------------------------------
# Episodes
# ----------------------------------------------------------------------------------------------------------------------


def check_horizon(root: str | Path, split: str, horizon: int) -> None:
    """ConfigError naming the first episode of ``split`` shorter than ``horizon`` actions (and a horizon below 1, or
    an empty split) — from the dataset's index alone, before any model is loaded or any chunk is planned."""
    if not isinstance(horizon, int) or horizon < 1:
        raise ConfigError(f"--horizon: got {horizon!r}; expected a number of actions >= 1")
    index, ids = read_episodes(root), read_splits(root).get(split, [])
    if not ids:
        raise ConfigError(f"--split: split {split!r} of {root} holds no episode")
    short = [(e, index[e].length) for e in ids if e in index and index[e].length - 1 < horizon]
    if short:
        eid, n = short[0]
        raise ConfigError(f"--horizon {horizon}: episode {eid} of split {split!r} has {n} frames, {n - 1} actions "
                          f"({len(short)} of {len(ids)} episodes are shorter than the horizon); choose --horizon <= "
                          f"{min(m for _, m in short) - 1} or longer episodes (simforcing data synth --length)")


def horizon_dataset(cfg: Config, root: str | Path, split: str, horizon: int, stats: dict) -> PairedWindowDataset:
    """The split's episodes as one window of ``horizon`` actions from their first frame (frames 0 … H / stride).
    An episode shorter than that is a ConfigError naming it (:func:`check_horizon`)."""
    check_horizon(root, split, horizon)
    c = copy.deepcopy(cfg)
    c.data.frames = horizon // cfg.data.frame_stride + 1
    c.data.fixed_window, c.data.windows_per_episode = True, 1
    return PairedWindowDataset(c, root, splits=(split,), domains=("sim", "real"), stats=stats)


def dataset_twin(cfg: Config, root: str | Path, episode_ids: Sequence[str],
                 states: torch.Tensor) -> Optional[TwinLoop]:
    """With ``sample.condition = render``: the digital twin of the episodes ``episode_ids`` of dataset ``root``,
    started at their recorded first states (B, S) raw and their cameras (``episodes/<id>/twin.json``), rendering at
    the size the dataset's simulation videos were recorded at; None otherwise."""
    if cfg.sample.condition != "render":
        return None
    info = read_info(root)
    records = read_dataset_records(cfg, root, list(episode_ids))
    episodes = [TwinEpisode(states[i].numpy(), rec) for i, rec in enumerate(records)]
    return TwinLoop.from_config(cfg, episodes, info["height"], info["width"])


def check_render_condition(cfg: Config, run_dir, root: str | Path, episode_ids: Sequence[str]) -> None:
    """With ``sample.condition = render``, before any episode is rolled out: the world model reads the twin's
    rendering (``twin.check_twin_can_act``: not a model trained without the condition, not w = 0) and every episode's
    twin record is there and sound (``twin.read_dataset_records``: DataError naming the episode and its twin.json)."""
    if cfg.sample.condition != "render":
        return
    check_twin_can_act(cfg, str(run_dir))
    read_dataset_records(cfg, root, list(episode_ids))


def load_episodes(ds: PairedWindowDataset, indices: Sequence[int], horizon: int) -> dict:
    """A batch of whole-horizon episodes: ``real``, ``sim`` (B, 3, 1 + T, H, W), ``arm_mask`` (B, 1 + T, H, W) or
    None, ``text``, ``text_mask``, the normalised ``actions`` / ``states``, and raw (dataset units) ``raw_actions``
    (B, H, A) and ``raw_states`` (B, 1 + T, S) as recorded."""
    items = [ds.item_at(i, 0) for i in indices]
    batch = default_collate(items)
    stride = ds.stride
    raws = [read_lowdim(ds.root, ds.episodes[i].info.episode_id) for i in indices]
    batch["raw_actions"] = torch.from_numpy(np.stack([a[:horizon] for a, _ in raws]))
    batch["raw_states"] = torch.from_numpy(np.stack([s[:horizon + 1:stride] for _, s in raws]))
    if not bool(batch["has_arm_mask"].all()):
        batch["arm_mask"] = None
    return batch


# ----------------------------------------------------------------------------------------------------------------------
# Per-frame metrics
# ----------------------------------------------------------------------------------------------------------------------


def chunk_bounds(horizon: int, cfg: Config) -> list[tuple[int, int]]:
    """(first frame, last frame) of each chunk in kept-frame indices: chunk k makes frames first + 1 … last."""
    out, t = [], 0
    for n in chunk_sizes(horizon, cfg.data.actions_per_window, cfg.data.frame_stride):
        out.append((t, t + n // cfg.data.frame_stride))
        t += n // cfg.data.frame_stride
    return out


def frame_refs(bounds: list[tuple[int, int]]) -> list[int]:
    """For every frame t = 1 … T the first frame of its chunk."""
    return [a for a, b in bounds for _ in range(a + 1, b + 1)]


def frame_metrics(pred: torch.Tensor, gt: torch.Tensor, masks: Optional[torch.Tensor],
                  bounds: list[tuple[int, int]]) -> dict[str, np.ndarray]:
    """Per-frame PSNR, SSIM and arm-region PSNR of frames 1 … T, (B, T) each (NaN where a frame has no arm
    pixels): every frame is scored as the metric protocol scores frame t of a window starting at its chunk's first
    frame (``psnr_per_sample`` etc. on the pair (first frame, frame t), the first frame excluded)."""
    b = pred.shape[0]
    refs = frame_refs(bounds)
    ts = list(range(1, len(refs) + 1))

    def pairs(video: torch.Tensor) -> torch.Tensor:  # (B, 3, 1 + T, ...) -> (B·T, 3, 2, H, W)
        v = torch.stack([video[:, :, refs], video[:, :, ts]], dim=3)  # (B, 3, T, 2, H, W)
        return v.permute(0, 2, 1, 3, 4, 5).reshape(b * len(ts), 3, 2, *video.shape[-2:])

    p, g = pairs(pred.float()), pairs(gt.float())
    proto = MetricProtocol()
    out = {"psnr": psnr_per_sample(p, g, proto), "ssim": ssim_per_sample(p, g, proto)}
    if masks is not None:
        m = torch.stack([masks[:, refs], masks[:, ts]], dim=2).reshape(b * len(ts), 2, *masks.shape[-2:])
        out["psnr_arm"] = masked_psnr_per_sample(p, g, m, proto)
    return {k: v.view(b, len(ts)).numpy() for k, v in out.items()}


@torch.no_grad()
def chained_states(probe: StateProbe, video: torch.Tensor, bounds: list[tuple[int, int]],
                   anchors: torch.Tensor, refs: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The probe's reading of every frame 1 … T, (B, T, S): q̂_t = a_k + P(x_{s_k}, x_t) for t in chunk k, with
    a_k = ``anchors[:, k]`` (B, K, S) when given as a full tensor, or chained (a_0 = ``anchors[:, 0]``,
    a_{k+1} = q̂_{s_{k+1}}) when ``anchors`` has one entry per episode (B, 1, S). ``refs`` (B, 3, K, H, W): each
    chunk's own first frame where it is not frame s_k of ``video`` (a model restarted at every chunk)."""
    dev = next(probe.parameters()).device
    out, a = [], anchors[:, 0].float().to(dev)
    for k, (s, e) in enumerate(bounds):
        if anchors.shape[1] > 1:
            a = anchors[:, k].float().to(dev)
        ref = (video[:, :, s] if refs is None else refs[:, :, k]).float().to(dev)  # (B, 3, H, W)
        q = torch.stack([a + probe(ref, video[:, :, t].float().to(dev)) for t in range(s + 1, e + 1)], dim=1)
        out.append(q)
        a = q[:, -1]
    return torch.cat(out, dim=1).cpu()


def action_errors(probe: StateProbe, q_hat: torch.Tensor, states: torch.Tensor) -> np.ndarray:
    """‖q̂_t − q_t‖ over the probe's position dims, (B, T); states (B, 1 + T, S) recorded (raw units)."""
    pos = list(probe.cfg.position_dims)
    return (q_hat[..., pos] - states[:, 1:, pos].float()).norm(dim=-1).numpy()


def score(pred: torch.Tensor, gt: torch.Tensor, masks, bounds, probe: Optional[StateProbe], states: torch.Tensor,
          anchors: Optional[torch.Tensor] = None, refs: Optional[torch.Tensor] = None,
          views: Optional[tuple] = None) -> dict[str, np.ndarray]:
    """Every per-frame metric of one row, (B, T) each (``af_pos`` only with a probe; ``anchors`` (B, K, S): the
    probe's anchors per chunk, else chained from the recorded initial state; ``refs``: see :func:`chained_states`).
    ``views`` = (names, layout) of a multi-view model: also each view's PSNR and arm PSNR alone (``psnr@<view>``,
    ``psnr_arm@<view>``)."""
    out = frame_metrics(pred, gt, masks, bounds)
    if views is not None:
        names, layout = views
        parts = zip(names, split_views(pred, len(names), layout), split_views(gt, len(names), layout),
                    split_views(masks, len(names), layout) if masks is not None else [None] * len(names))
        for name, p, g, m in parts:
            for k, v in frame_metrics(p, g, m, bounds).items():
                if k in ("psnr", "psnr_arm"):
                    out[f"{k}@{name}"] = v
    if probe is not None:
        a = anchors if anchors is not None else states[:, :1]
        out["af_pos"] = action_errors(probe, chained_states(probe, pred, bounds, a, refs), states)
    return out


# ----------------------------------------------------------------------------------------------------------------------
# Rows
# ----------------------------------------------------------------------------------------------------------------------


def restart_video(sampler: Sampler, batch: dict, cfg: Config, normalizer, bounds, sizes,
                  generators, rendered: Optional[list] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The model restarted at every chunk from the recorded frame, recorded state and mask (normalised batch
    entries), with the rollout's window actions (a cut chunk filled with hold actions) and the same noise (each
    episode's generator, chunk after chunk) -> (video (B, 3, 1 + T, H, W) with the chunks' kept frames, each chunk's
    own first frame (B, 3, K, H, W): the decoded recorded frame it started from). ``rendered``: with
    ``sample.condition = render``, each chunk's twin rendering of the same actions (the rollout's)."""
    frames, firsts = [batch["real"][:, :, :1]], []
    a0 = 0
    for k, ((s, e), n) in enumerate(zip(bounds, sizes)):
        acts = batch["actions"][:, a0:a0 + n]
        if n < cfg.data.actions_per_window:  # normalised hold actions, as the rollout fills a cut chunk
            hold = hold_actions(cfg, batch["raw_actions"][:, a0 + n - 1], cfg.data.actions_per_window - n,
                                acts.shape[0], acts.shape[2])
            acts = torch.cat([acts, torch.from_numpy(normalizer.normalize("action", hold.numpy())).float()], dim=1)
        oracle = cfg.sample.condition == "oracle"  # the condition is the recorded sim video of the whole chunk
        window = SamplerBatch(first_frame=batch["real"][:, :, s], actions=acts, state0=batch["states"][:, s],
                              text=batch["text"], text_mask=batch["text_mask"],
                              arm_mask=None if batch["arm_mask"] is None else batch["arm_mask"][:, s],
                              recorded_sim=batch["sim"][:, :, s:s + (cfg.data.frames if oracle else 1)],
                              rendered_sim=None if rendered is None else rendered[k],
                              episode_ids=list(batch["episode_id"]))
        res = sampler(window, generators)
        video = res.real_video.float().cpu()
        if s == 0:
            frames[0] = video[:, :, :1]
        frames.append(video[:, :, 1:1 + (e - s)])
        firsts.append(video[:, :, 0])
        a0 += n
    return torch.cat(frames, dim=2), torch.stack(firsts, dim=2)


def vae_recon_video(vae, batch: dict, bounds, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Every chunk's recorded window encoded and decoded (a cut chunk: its frames, the window filled with its last
    frame) -> (video (B, 3, 1 + T, H, W), each chunk's reconstructed first frame (B, 3, K, H, W))."""
    real = batch["real"]
    frames, firsts = [], []
    for s, e in bounds:
        f = 4 * math.ceil((e - s) / 4) + 1  # the VAE's 1 + 4L
        idx = [min(t, e) for t in range(s, s + f)]
        with torch.no_grad():
            rec = vae.decode(vae.encode(real[:, :, idx].to(device))).float().clamp(-1, 1).cpu()
        frames.append(rec[:, :, :1] if s == 0 else rec[:, :, :0])
        frames.append(rec[:, :, 1:1 + (e - s)])
        firsts.append(rec[:, :, 0])
    return torch.cat(frames, dim=2), torch.stack(firsts, dim=2)


def other_episodes(n: int) -> list[int]:
    """The control's actions: episode i gets episode (i + n/2) mod n's (another episode whenever n > 1)."""
    return [(i + max(1, n // 2)) % n for i in range(n)]


# ----------------------------------------------------------------------------------------------------------------------
# The evaluation
# ----------------------------------------------------------------------------------------------------------------------


def summarize(per_frame: dict[str, np.ndarray], bounds) -> ChunkSeries:
    """Per-frame (B, T) arrays per metric -> the row's means per chunk, overall, per frame and per episode and chunk
    (NaN-aware means; None where nothing was scored)."""
    def mean(x: np.ndarray, axis=None):
        with warnings.catch_warnings():  # an all-NaN slice (no arm pixels anywhere) is None below, not a warning
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanmean(x, axis=axis)

    def clean(v):
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)

    out = ChunkSeries({}, {}, {}, {})
    for k, x in per_frame.items():
        per_ep_chunk = np.stack([mean(x[:, s:e], axis=1) for s, e in bounds], axis=1)  # frames s+1..e = cols s..e-1
        out.per_episode_chunk[k] = [[clean(v) for v in row] for row in per_ep_chunk]
        out.per_chunk[k] = [clean(v) for v in mean(per_ep_chunk, axis=0)]
        out.per_frame[k] = [clean(v) for v in mean(x, axis=0)]
        out.mean[k] = clean(mean(per_ep_chunk))
    return out


UNITS = "PSNR dB; af_pos in state units (metres on the synthetic benchmark)"


def check_rows(rows: Sequence[str]) -> None:
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        raise ConfigError(f"--rows: got {unknown}; expected some of {', '.join(ROWS)}")


def episode_counts(available: int, num_episodes: Optional[int], batch_size: Optional[int], split: str,
                   horizon: int) -> tuple[int, int]:
    """(episodes to roll out, episodes per batch), checked against the ``available`` long-enough episodes."""
    n = available if num_episodes is None else int(num_episodes)
    if not 1 <= n <= available:
        raise ConfigError(f"--num-episodes: got {n}; split {split!r} holds {available} episodes of >= {horizon} "
                          "actions")
    bsz = n if batch_size is None else int(batch_size)
    if bsz < 1:
        raise ConfigError(f"--batch-size: got {bsz}; expected an integer >= 1")
    return n, bsz


def reference_rows(batch: dict, rows: Sequence[str], bounds: list, probe, vae, device,
                   views: Optional[tuple] = None) -> dict[str, dict]:
    """The rows that need no model: the first frame repeated, the VAE's reconstruction, the probe on the recorded
    frames (the action error's floor)."""
    real, masks, states = batch["real"], batch["arm_mask"], batch["raw_states"]
    got = {}
    if "copy-first" in rows:
        got["copy-first"] = score(real[:, :, :1].expand_as(real), real, masks, bounds, probe, states, views=views)
    if "vae-recon" in rows:
        recon, firsts = vae_recon_video(vae, batch, bounds, device)
        got["vae-recon"] = score(recon, real, masks, bounds, probe, states, refs=firsts, views=views)
    if "probe floor" in rows and probe is not None:
        got["probe floor"] = {"af_pos": score(real, real, masks, bounds, probe, states)["af_pos"]}
    return got


def _checked_device(cfg: Optional[Config], device, rows: Sequence[str], horizon: int):
    """The device to run on, after the checks that need no model: the rows asked for, and (with a config) the
    horizon, so a bad one is named before anything loads."""
    check_rows(rows)
    if cfg is not None:
        chunk_sizes(horizon, cfg.data.actions_per_window, cfg.data.frame_stride)
    return resolve_device(device) if device is not None else resolve_device(cfg.train.device if cfg else "auto")


def write_rollout_outputs(out: Path, summary: RolloutDrift, kept_videos: list, videos: int, cfg: Config) -> None:
    """OUT/rollout.json, rollout.md, drift.png and the first ``videos`` episodes' videos."""
    atomic_write_json(out / "rollout.json", summary.to_json())
    atomic_write_text(out / "rollout.md", rollout_markdown(summary))
    write_rollout_pictures(out, summary, kept_videos, videos, cfg)


def evaluate_rollouts(run_dir: str | Path, data_root: str | Path, cfg: Optional[Config], split: str, horizon: int,
                      out_dir: str | Path, num_episodes: Optional[int] = None, batch_size: Optional[int] = None,
                      step: Optional[int] = None, device=None, videos: int = 2, rows: Sequence[str] = ROWS,
                      progress=print) -> RolloutDrift:
    """Roll out the first ``num_episodes`` episodes of ``split`` over ``horizon`` actions and score every row of
    ``rows`` (module docstring); writes OUT/rollout.json, rollout.md, drift.png and the first ``videos`` episodes'
    videos. Returns the result."""
    t_start = time.perf_counter()
    check_horizon(data_root, split, horizon)  # an absurd horizon is named here, not a MemoryError below
    dev = _checked_device(cfg, device, rows, horizon)
    wm = load_world_model(run_dir, cfg, dev, step, data_root)
    cfg = wm.cfg
    cfg.validate()
    sizes = chunk_sizes(horizon, cfg.data.actions_per_window, cfg.data.frame_stride)
    ds = horizon_dataset(cfg, data_root, split, horizon, wm.stats)
    n, bsz = episode_counts(len(ds), num_episodes, batch_size, split, horizon)
    check_render_condition(cfg, run_dir, data_root, [ds.episodes[i].info.episode_id for i in range(n)])
    probe = load_configured_probe(cfg, dev)
    sampler = sampler_for(wm, decode_sim=True)
    bounds = chunk_bounds(horizon, cfg)
    control_of = other_episodes(n)
    views = (cfg.data.view_names, cfg.data.view_layout) if cfg.data.num_views > 1 else None
    per: dict[str, dict[str, list]] = {r: {} for r in rows}
    seconds = {"rollout": 0.0}
    forwards = 0
    kept_videos: list = []
    for b0 in range(0, n, bsz):
        idx = list(range(b0, min(n, b0 + bsz)))
        batch = load_episodes(ds, idx, horizon)
        masks = batch["arm_mask"]
        states = batch["raw_states"]

        def roll() -> WorldModelRollout:
            return WorldModelRollout(wm, batch["real"][:, :, 0], states[:, 0].double(), batch["text"],
                                     batch["text_mask"], episode_generators(cfg, idx),
                                     first_mask=None if masks is None else masks[:, 0],
                                     first_sim=batch["sim"][:, :, 0], probe=probe, sampler=sampler,
                                     recorded=Recorded(sim=batch["sim"], arm_mask=masks),
                                     twin=dataset_twin(cfg, data_root, batch["episode_id"], states[:, 0]))

        t0 = time.perf_counter()
        ro = roll()
        res = ro.run(batch["raw_actions"])
        if ro.twin is not None:
            ro.twin.close()
        seconds["rollout"] += time.perf_counter() - t0
        forwards = res.forwards
        got: dict[str, dict] = {"rollout": score(res.video, batch["real"], masks, bounds, probe, states,
                                                 views=views)}
        if "sim chain" in rows and res.sim_video is not None:
            got["sim chain"] = score(res.sim_video, batch["sim"], masks, bounds, probe, states, views=views)
        if "restart" in rows:
            rv, firsts = restart_video(sampler, batch, cfg, wm.normalizer, bounds, sizes,
                                       episode_generators(cfg, idx), ro.rendered if ro.twin is not None else None)
            got["restart"] = score(rv, batch["real"], masks, bounds, probe, states,
                                   anchors=states[:, [s for s, _ in bounds]], refs=firsts, views=views)
        if "control" in rows and n > 1:
            other = load_episodes(ds, [control_of[i] for i in idx], horizon)
            control = roll()
            got["control"] = score(control.run(other["raw_actions"]).video, batch["real"], masks, bounds, probe,
                                   states, views=views)
            if control.twin is not None:
                control.twin.close()
        got.update(reference_rows(batch, rows, bounds, probe, wm.vae, dev, views))
        for row, metrics in got.items():
            for k, v in metrics.items():
                per[row].setdefault(k, []).append(v)  # one array per batch, joined below
        if len(kept_videos) < videos:
            kept_videos.append((batch, res))
        progress(f"rollout: episodes {idx[0]}–{idx[-1]} done ({time.perf_counter() - t_start:.0f} s)")
    result = {row: summarize({k: np.concatenate(v) for k, v in metrics.items()}, bounds)
              for row, metrics in per.items() if metrics}
    summary = RolloutDrift(
        run=str(run_dir), checkpoint={"step": wm.checkpoint.step, "path": str(wm.checkpoint.path)},
        data=str(data_root), split=split, horizon=horizon, chunk_frames=[e - s for s, e in bounds], num_episodes=n,
        episode_ids=[ds.episodes[i].info.episode_id for i in range(n)], sampler=sampler.settings(),
        state_input=cfg.rollout.state, sim_chain=cfg.rollout.sim_chain, probe=cfg.eval.probe, units=UNITS,
        forwards_per_episode=forwards, rows=result,
        seconds={"rollout": round(seconds["rollout"], 2), "total": round(time.perf_counter() - t_start, 2)})
    write_rollout_outputs(Path(out_dir), summary, kept_videos, videos, cfg)
    return summary


# ----------------------------------------------------------------------------------------------------------------------
# Pictures
# ----------------------------------------------------------------------------------------------------------------------


def write_rollout_pictures(out: Path, res: RolloutDrift, kept: list, videos: int, cfg: Config) -> None:
    from simforcing.evaluate.rollout_media import plot_drift, write_rollout_media  # matplotlib, PIL: only here

    plot_drift({"": res}, out / "drift.png", title=f"{Path(res.run).name}: drift over {res.chunks} chunks")
    i = 0
    for batch, r in kept:
        for j in range(r.video.shape[0]):
            if i >= videos:
                return
            write_rollout_media(out / "videos" / f"episode_{i:03d}", r, j, batch, res, cfg)
            i += 1
