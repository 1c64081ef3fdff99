"""The action-following metric: a frozen *state probe* reads the robot state back from a frame.

A world model that follows its actions renders the arm where its actions put it. The probe ``P`` is a small
convolutional network with a spatial-softmax keypoint layer (positions are what it must read) that maps one frame
(B, 3, H, W) in [-1, 1] to the state the dataset records (``states``: end-effector position, orientation, gripper).
The error of a generated video against the recorded states ``q`` of the same window is

    pos error = mean over compared frames t of ‖P(x̂_t)[pos] − q_t[pos]‖₂       (state units: metres on the synthetic
    grip error = mean over compared frames t of |P(x̂_t)[grip] − q_t[grip]|      benchmark, where states are metric)

with the compared frames of the metric protocol (1 … F−1: the given first frame is excluded). Reported beside it
(``ProbeAccumulator``): the probe on the recorded frames (its floor), the frames where the arm moved more than
``eval.probe_moving_threshold`` from frame 0 only ("moving"), and — by the evaluation — copy-the-first-frame (a model
that does not move) and the same model given the actions of another window (one that follows its actions must get
clearly worse).

Fitting (``fit_probe``; ``simforcing model fit-probe``): the real frames of the training split teach the real
appearance, but 20 real episodes alone teach a probe their scenes, not the arm. So each batch mixes three sources:
real training frames, simulation frames of the training split and the simulation pool (the arm in every pose, on the
flat simulation background) and those simulation arms pasted onto the real training episodes' backgrounds (each
episode's scene with the arm removed, from its arm masks). Augmentations model what generated frames look like: a
pixel of shift, blur, brightness/contrast jitter, noise, and *ghosts* — two frames of one episode blended with the same
weights as their states, so a model that hedges between two arm positions is read as in between, not as anywhere.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from simforcing.config import ConfigError, record_from_dict
from simforcing.data.format import (DataError, read_arm_mask, read_episode_videos, read_episodes, read_info,
                                    read_lowdim, read_splits)
from simforcing.data.paired import frames_to_target, masks_to_target, to_unit_range
from simforcing.evaluate.results import ActionFollowing
from simforcing.training.optim import warmup_cosine
from simforcing.utils import atomic_write, atomic_write_json

PROBE_FILE, PROBE_META = "probe.safetensors", "probe.json"


@dataclass
class ProbeConfig:
    height: int
    width: int
    state_dim: int
    position_dims: tuple = (0, 1, 2)  # the state entries read as a position (error: Euclidean norm)
    gripper_dim: Optional[int] = 6  # the gripper opening (error: absolute difference); None: no gripper
    channels: int = 16
    keypoints: int = 32
    hidden: int = 256


class SpatialSoftmax(nn.Module):
    """(B, K, h, w) feature maps -> (B, 2K): the expected (x, y) in [-1, 1] of each map's softmax."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, k, h, w = x.shape
        p = x.flatten(2).softmax(-1).view(b, k, h, w)
        ys = torch.linspace(-1, 1, h, device=x.device, dtype=x.dtype)
        xs = torch.linspace(-1, 1, w, device=x.device, dtype=x.dtype)
        return torch.cat([(p.sum(2) * xs).sum(-1), (p.sum(3) * ys).sum(-1)], dim=1)  # (B, 2K)


def downsamples(height: int, width: int, target: int = 24) -> int:
    """Stride-2 stages until the smaller side is at most ``target`` (32×48 -> 1, 224×320 -> 4)."""
    n, s = 0, min(height, width)
    while s > target:
        s, n = (s + 1) // 2, n + 1
    return n


class StateProbe(nn.Module):
    """(reference frame, frame) -> the state change between them; ``video_states`` turns it into states.

    One convolutional trunk finds keypoints (spatial softmax) in both frames (B, 3, H, W) in [-1, 1]; the head reads
    the state change from the keypoints' motion and their starting place. Whatever an episode's camera, scene and
    lighting do to a keypoint, they do in both frames: the probe reads how far the arm moved, not where a scene
    puts it.
    The recorded initial state q_0 (the world model's own input) anchors the trajectory: q̂_t = q_0 + P(x_0, x_t).
    """

    def __init__(self, cfg: ProbeConfig):
        super().__init__()
        self.cfg = cfg
        c, n_down = cfg.channels, downsamples(cfg.height, cfg.width)
        # the first stage already halves the resolution when the frame needs downsampling (32×48 -> 16×24 keypoint
        # maps: the softmax expectation reads positions below a pixel of them)
        layers: list[nn.Module] = [nn.Conv2d(3, c, 3, stride=2 if n_down else 1, padding=1), nn.GroupNorm(4, c),
                                   nn.SiLU()]
        for _ in range(max(0, n_down - 1)):
            layers += [nn.Conv2d(c, 2 * c, 3, stride=2, padding=1), nn.GroupNorm(4, 2 * c), nn.SiLU()]
            c *= 2
        layers += [nn.Conv2d(c, 2 * c, 3, padding=1), nn.GroupNorm(4, 2 * c), nn.SiLU(),
                   nn.Conv2d(2 * c, 2 * c, 3, padding=1), nn.GroupNorm(4, 2 * c), nn.SiLU(),
                   nn.Conv2d(2 * c, cfg.keypoints, 1)]
        self.trunk = nn.Sequential(*layers)
        self.keypoints = SpatialSoftmax()
        self.head = nn.Sequential(nn.Linear(4 * cfg.keypoints, cfg.hidden), nn.SiLU(),
                                  nn.Linear(cfg.hidden, cfg.hidden), nn.SiLU(), nn.Linear(cfg.hidden, cfg.state_dim))
        self.register_buffer("scale", torch.ones(cfg.state_dim))  # the spread of state changes in the fitting data

    def normalized(self, ref: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        """ref, frames (B, 3, H, W) -> the change in the probe's normalised units (what fitting regresses)."""
        kp = self.keypoints(self.trunk(torch.cat([ref, frames], dim=0)))  # one trunk for both: (2B, 2K)
        kp_ref, kp = kp.chunk(2, dim=0)
        return self.head(torch.cat([kp - kp_ref, kp_ref], dim=1))  # keypoint motion, and where it started

    def forward(self, ref: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        """The state change from ``ref`` to ``frames``, (B, state_dim) in the dataset's units."""
        return self.normalized(ref, frames) * self.scale

    @torch.no_grad()
    def video_states(self, video: torch.Tensor, state0: torch.Tensor, chunk: int = 256) -> torch.Tensor:
        """video (B, 3, F, H, W) in [-1, 1], its recorded initial state (B, S) -> states (B, F, S): q_0 + P(x_0, x_t)
        with x_0 the video's own first frame."""
        b, _, f, h, w = video.shape
        if (h, w) != (self.cfg.height, self.cfg.width):
            raise ValueError(f"state probe: fitted on {self.cfg.height}×{self.cfg.width} frames, got {h}×{w}; "
                             "fit a probe at this resolution (simforcing model fit-probe)")
        frames = video.permute(0, 2, 1, 3, 4).float()  # (B, F, 3, H, W)
        ref = frames[:, :1].expand_as(frames).reshape(b * f, 3, h, w)
        frames = frames.reshape(b * f, 3, h, w)
        out = torch.cat([self(ref[i:i + chunk], frames[i:i + chunk]) for i in range(0, b * f, chunk)])
        return state0.float().to(out.device)[:, None] + out.view(b, f, -1)


class FirstViewProbe(nn.Module):
    """A state probe reading a multi-view model's frames (``data.views``, side by side along ``data.view_layout``):
    only the first view's part of each frame — the camera a probe is fitted on (``model fit-probe`` reads a
    dataset's first view) — is shown to it; everything else is the probe's (``cfg``, the units, the errors)."""

    def __init__(self, probe: StateProbe, views: int, layout: str):
        super().__init__()
        self.probe, self.views, self.layout, self.cfg = probe, views, layout, probe.cfg

    def first(self, x: torch.Tensor) -> torch.Tensor:
        """Frames (..., H, V·W) (or stacked) -> their first view (..., H, W)."""
        from simforcing.data.paired import split_views  # data/ below evaluate/ (the frame layout)

        return split_views(x, self.views, self.layout)[0]

    def forward(self, ref: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        return self.probe(self.first(ref), self.first(frames))

    def video_states(self, video: torch.Tensor, state0: torch.Tensor, chunk: int = 256) -> torch.Tensor:
        return self.probe.video_states(self.first(video), state0, chunk)


# ----------------------------------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------------------------------


def state_errors(cfg: ProbeConfig, pred: torch.Tensor, states: torch.Tensor) -> dict[str, torch.Tensor]:
    """pred, states (..., S) -> {"pos": ‖Δposition‖₂ (...), "grip": |Δgripper| (...) when the probe has one}."""
    pos = list(cfg.position_dims)
    out = {"pos": (pred[..., pos] - states[..., pos]).norm(dim=-1)}
    if cfg.gripper_dim is not None:
        out["grip"] = (pred[..., cfg.gripper_dim] - states[..., cfg.gripper_dim]).abs()
    return out


def displacement(cfg: ProbeConfig, states: torch.Tensor) -> torch.Tensor:
    """states (B, F, S) -> ‖q_t[pos] − q_0[pos]‖₂ (B, F): how far the arm moved from the first frame."""
    pos = list(cfg.position_dims)
    return (states[..., pos] - states[:, :1, pos]).norm(dim=-1)


class ProbeAccumulator:
    """Per-sample action-following errors of generated videos against recorded states.

        acc = ProbeAccumulator(probe, frame_indices, moving_threshold)
        acc.update(pred_video, gt_video, states)   # videos (B, 3, F, H, W) in [-1, 1]; states (B, F, S) raw units
        acc.compute() -> ActionFollowing(af_pos, af_pos_moving, af_grip, af_floor_pos, ...)  (None where undefined)
    """

    KEYS = ("af_pos", "af_pos_moving", "af_grip", "af_floor_pos", "af_floor_pos_moving", "af_floor_grip")

    def __init__(self, probe: StateProbe, frame_indices: Sequence[int], moving_threshold: float):
        self.probe, self.frames, self.threshold = probe, list(frame_indices), float(moving_threshold)
        self.per_sample: dict[str, list] = {k: [] for k in self.KEYS}

    @torch.no_grad()
    def update(self, pred: torch.Tensor, gt: torch.Tensor, states: torch.Tensor) -> None:
        dev = next(self.probe.parameters()).device
        idx = torch.tensor(self.frames, device=dev)
        states = states.float().to(dev)
        move = displacement(self.probe.cfg, states)[:, idx] > self.threshold  # (B, F') the arm has moved
        target = states[:, idx]
        for tag, video in (("af", pred), ("af_floor", gt)):
            err = state_errors(self.probe.cfg, self.probe.video_states(video.to(dev), states[:, 0])[:, idx], target)
            self.per_sample[f"{tag}_pos"] += err["pos"].mean(1).tolist()
            self.per_sample[f"{tag}_pos_moving"] += [
                float(e[m].mean()) if bool(m.any()) else None for e, m in zip(err["pos"], move)]
            self.per_sample[f"{tag}_grip"] += (err["grip"].mean(1).tolist() if "grip" in err
                                               else [None] * pred.shape[0])

    def compute(self) -> ActionFollowing:
        """Each error's mean over the samples (None where no sample defines it) and the moving threshold; the values
        per sample stay in ``per_sample``."""
        return ActionFollowing(**{k: mean_or_none(v) for k, v in self.per_sample.items()},
                               af_moving_frames_threshold=self.threshold)


# ----------------------------------------------------------------------------------------------------------------------
# Fitting
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class ProbeFrames:
    """Every frame of some episodes in one domain: frames uint8 (N, 3, H, W), states float32 (N, S), the episode of
    each frame (N,) and, for real frames of a dataset with arm masks, the masks bool (N, H, W)."""

    frames: torch.Tensor
    states: torch.Tensor
    episode: torch.Tensor
    masks: Optional[torch.Tensor] = None


def read_probe_frames(root: str | Path, splits: Sequence[str], domain: str, height: int, width: int) -> ProbeFrames:
    """The frames of ``splits`` in ``domain`` ("sim" or "real") at height×width (the training resize/crop)."""
    info, index, split_ids = read_info(root), read_episodes(root), read_splits(root)
    frames, states, owner, masks = [], [], [], []
    ids = [eid for s in splits for eid in split_ids.get(s, [])]
    for i, eid in enumerate(ids):
        ep = index.get(eid)
        if ep is None or (domain == "real" and not ep.has_real):
            continue
        sim, real = read_episode_videos(root, info, ep)
        video = real if domain == "real" else sim
        _, st = read_lowdim(root, eid)
        n = min(len(video), len(st))
        frames.append(frames_to_target(video[:n], height, width).permute(1, 0, 2, 3))  # (T, 3, H, W)
        states.append(torch.from_numpy(np.asarray(st[:n], np.float32)))
        owner.append(torch.full((n,), i))
        if domain == "real":
            m = read_arm_mask(root, eid)
            masks.append(None if m is None else masks_to_target(m[:n], height, width))
    if not frames:
        raise DataError(f"split(s) {', '.join(splits)} hold no {domain} frames to fit a state probe on",
                        path=Path(root) / "meta" / "splits.json", kind="empty_split")
    have_masks = bool(masks) and all(m is not None for m in masks)
    return ProbeFrames(torch.cat(frames), torch.cat(states), torch.cat(owner),
                       torch.cat(masks) if have_masks else None)


def episode_backgrounds(data: ProbeFrames) -> torch.Tensor:
    """Each episode's scene without the arm: per pixel, the median over the episode's frames where the arm is not
    there (it moves, so most pixels are uncovered at some frame; pixels it never leaves keep the plain median).
    -> uint8 (E, 3, H, W)."""
    out = []
    for e in data.episode.unique(sorted=True):
        idx = (data.episode == e).nonzero().flatten()
        f = data.frames[idx].float()  # (T, 3, H, W)
        free = ~data.masks[idx][:, None].expand_as(f)
        bg = torch.where(free, f, torch.nan).nanmedian(dim=0).values
        out.append(torch.where(bg.isnan(), f.median(dim=0).values, bg).round().to(torch.uint8))
    return torch.stack(out)


def composite(arm: torch.Tensor, background: torch.Tensor, threshold: int = 12) -> torch.Tensor:
    """Simulation frames (the arm on a flat background, read at the top-left pixel) pasted onto real backgrounds:
    uint8 (B, 3, H, W) each."""
    fg = (arm.int() - arm[..., :1, :1].int()).abs().amax(1, keepdim=True) > threshold
    return torch.where(fg, arm, background)


def transplant(frames: torch.Tensor, masks: torch.Tensor, background: torch.Tensor) -> torch.Tensor:
    """Real arms (their arm masks) cut from their frames and pasted onto other episodes' backgrounds:
    frames, background uint8 (B, 3, H, W), masks bool (B, H, W)."""
    return torch.where(masks[:, None], frames, background)


def recolor(background: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Backgrounds (B, 3, H, W) with their colour channels permuted at random (half of them): scenes the probe has
    not seen, the same structure."""
    perms = torch.stack([torch.randperm(3, generator=gen) for _ in range(background.shape[0])])  # (B, 3)
    keep = torch.rand(background.shape[0], generator=gen) < 0.5
    perms[keep] = torch.arange(3)
    return torch.gather(background, 1, perms[:, :, None, None].expand_as(background))


def _pairs(data: ProbeFrames, n: int, reach: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` (reference, frame) index pairs of one episode, at most ``reach`` frames apart (either way)."""
    i = torch.randint(0, data.frames.shape[0], (n,), generator=gen)
    j = (i + torch.randint(-reach, reach + 1, (n,), generator=gen)).clamp(0, data.frames.shape[0] - 1)
    return i, torch.where(data.episode[j] == data.episode[i], j, i)


def ghost_frames(data: ProbeFrames, i: torch.Tensor, j: torch.Tensor, gen: torch.Generator):
    """Second frames blended α·x_j + (1 − α)·x_k with k a frame near j in the same episode (a model hedging between
    two arm positions), labelled with the same blend of the states: (frames float (n, 3, H, W), states (n, S))."""
    k = (j + torch.randint(-4, 5, j.shape, generator=gen)).clamp(0, data.frames.shape[0] - 1)
    k = torch.where(data.episode[k] == data.episode[j], k, j)
    a = torch.rand(j.shape[0], generator=gen)
    x = a.view(-1, 1, 1, 1) * data.frames[j].float() + (1 - a.view(-1, 1, 1, 1)) * data.frames[k].float()
    return x, a[:, None] * data.states[j] + (1 - a[:, None]) * data.states[k]


def augment_pair(ref: torch.Tensor, x: torch.Tensor, gen: torch.Generator, shift: int):
    """ref, x (B, 3, H, W) in [-1, 1], augmented alike (one camera): a random shift of up to ``shift`` pixels (edge
    padding), brightness/contrast jitter and pixel noise; blur (on 30 %) and a pixel of extra shift (on 30 %) on
    ``x`` alone — what generated frames do that recorded ones do not."""
    b, _, h, w = x.shape

    def shifted(t: torch.Tensor, dy: list, dx: list, s: int) -> torch.Tensor:
        pad = F.pad(t, (s,) * 4, mode="replicate")
        return torch.stack([pad[k, :, dy[k]:dy[k] + h, dx[k]:dx[k] + w] for k in range(b)])

    if shift:
        dy = torch.randint(0, 2 * shift + 1, (b,), generator=gen).tolist()
        dx = torch.randint(0, 2 * shift + 1, (b,), generator=gen).tolist()
        ref, x = shifted(ref, dy, dx, shift), shifted(x, dy, dx, shift)
    jit = torch.rand(b, 1, 1, 1, generator=gen) < 0.3
    x = torch.where(jit, shifted(x, torch.randint(0, 3, (b,), generator=gen).tolist(),
                                 torch.randint(0, 3, (b,), generator=gen).tolist(), 1), x)
    soft = F.avg_pool2d(F.pad(x, (1, 1, 1, 1), mode="replicate"), 3, stride=1)
    x = torch.where(torch.rand(b, 1, 1, 1, generator=gen) < 0.3, 0.5 * (x + soft), x)
    gain = 1 + 0.15 * (2 * torch.rand(b, 1, 1, 1, generator=gen) - 1)
    bias = 0.1 * (2 * torch.rand(b, 3, 1, 1, generator=gen) - 1)

    def light(t: torch.Tensor) -> torch.Tensor:
        return (t * gain + bias + 0.03 * torch.randn(t.shape, generator=gen)).clamp(-1, 1)

    return light(ref), light(x)


@dataclass
class FitOptions:
    """``simforcing model fit-probe`` settings (defaults fit the demo benchmark in about a minute on 2 CPU cores)."""

    splits: tuple = ("train",)  # real frames (and their arm masks, for the composites)
    sim_splits: tuple = ("train", "sim_pool")  # simulation frames
    val_split: Optional[str] = "val"  # reported only
    steps: int = 1200
    batch_size: int = 60
    lr: float = 2e-3
    seed: int = 0
    shift: int = 1
    reach: int = 8  # frames between the two frames of a training pair (a window's span)
    position_dims: tuple = (0, 1, 2)
    gripper_dim: Optional[int] = 6
    extra: dict = field(default_factory=dict)


def fit_probe(root: str | Path, height: int, width: int, opts: FitOptions = FitOptions(),
              progress: bool = True) -> tuple[StateProbe, dict]:
    """Fit a state probe on ``root`` at height×width (see the module docstring); returns (probe, report) where the
    report holds the sources, the wall time and the probe's mean errors on the training and validation frames."""
    torch.manual_seed(opts.seed)
    gen = torch.Generator().manual_seed(opts.seed)
    real = read_probe_frames(root, opts.splits, "real", height, width)
    sim = read_probe_frames(root, opts.sim_splits, "sim", height, width)
    backgrounds = episode_backgrounds(real) if real.masks is not None else None
    state_dim = real.states.shape[1]
    if not opts.position_dims or max(opts.position_dims) >= state_dim or (
            opts.gripper_dim is not None and opts.gripper_dim >= state_dim):
        raise ValueError(f"state probe: position dims {opts.position_dims} / gripper dim {opts.gripper_dim} do not "
                         f"fit the dataset's {state_dim}-D states")
    cfg = ProbeConfig(height=height, width=width, state_dim=state_dim, position_dims=tuple(opts.position_dims),
                      gripper_dim=opts.gripper_dim)
    probe = StateProbe(cfg)
    i, j = _pairs(sim, 4096, opts.reach, gen)
    probe.scale.copy_((sim.states[j] - sim.states[i]).std(0).clamp(min=1e-4))
    opt = torch.optim.AdamW(probe.parameters(), lr=opts.lr, weight_decay=1e-4)
    sched = warmup_cosine(opt, opts.steps, max(1, opts.steps // 20))  # linear warm-up over 5 %, then cosine to 0
    # a batch (pairs of one episode): real, real with a ghost second frame, simulation and — with arm masks —
    # simulation arms on a real background and real arms on another episode's background (equal shares)
    parts = 5 if backgrounds is not None else 3
    n = opts.batch_size // parts
    t0 = time.perf_counter()
    probe.train()
    for _ in tqdm(range(opts.steps), desc="fit state probe", leave=False, disable=not progress):
        ir, jr = _pairs(real, opts.batch_size - (parts - 1) * n, opts.reach, gen)
        ig, jg = _pairs(real, n, opts.reach, gen)
        gx, gq = ghost_frames(real, ig, jg, gen)
        i_s, j_s = _pairs(sim, n, opts.reach, gen)
        refs = [real.frames[ir], real.frames[ig], sim.frames[i_s]]
        xs = [real.frames[jr], gx, sim.frames[j_s]]
        ys = [real.states[jr] - real.states[ir], gq - real.states[ig], sim.states[j_s] - sim.states[i_s]]
        if backgrounds is not None:
            ic, jc = _pairs(sim, n, opts.reach, gen)
            it, jt = _pairs(real, n, opts.reach, gen)
            bg = recolor(backgrounds[torch.randint(0, backgrounds.shape[0], (2 * n,), generator=gen)], gen)
            refs += [composite(sim.frames[ic], bg[:n]), transplant(real.frames[it], real.masks[it], bg[n:])]
            xs += [composite(sim.frames[jc], bg[:n]), transplant(real.frames[jt], real.masks[jt], bg[n:])]
            ys += [sim.states[jc] - sim.states[ic], real.states[jt] - real.states[it]]
        ref, x = augment_pair(to_unit_range(torch.cat([r.float() for r in refs])),
                              to_unit_range(torch.cat([f.float() for f in xs])), gen, opts.shift)
        loss = F.smooth_l1_loss(probe.normalized(ref, x), torch.cat(ys) / probe.scale, beta=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    probe.eval()
    report = {"sources": {"real_frames": int(real.frames.shape[0]), "sim_frames": int(sim.frames.shape[0]),
                          "composites": backgrounds is not None, "splits": list(opts.splits),
                          "sim_splits": list(opts.sim_splits)},
              "steps": opts.steps, "batch_size": opts.batch_size, "seed": opts.seed,
              "fit_seconds": round(time.perf_counter() - t0, 1),
              "train": {"real": frame_errors(probe, real)}}
    if opts.val_split:
        report["val"] = {}
        for dom in ("real", "sim"):
            try:
                report["val"][dom] = frame_errors(probe, read_probe_frames(root, (opts.val_split,), dom, height,
                                                                          width))
            except DataError:
                continue
    return probe, report


@torch.no_grad()
def frame_errors(probe: StateProbe, data: ProbeFrames, reach: int = 8) -> dict:
    """The probe's mean errors on recorded frames: every frame read against the frame ``reach`` steps earlier of
    its episode (a window's first frame), anchored at that frame's recorded state."""
    i = torch.arange(data.frames.shape[0])
    j = (i - reach).clamp(min=0)
    ok = (data.episode[j] == data.episode[i]) & (j < i)
    i, j = i[ok], j[ok]
    pred = torch.cat([data.states[j[k:k + 512]] + probe(to_unit_range(data.frames[j[k:k + 512]]),
                                                        to_unit_range(data.frames[i[k:k + 512]]))
                      for k in range(0, len(i), 512)])
    out = {k: round(float(v.mean()), 5) for k, v in state_errors(probe.cfg, pred, data.states[i]).items()}
    out["no_motion_pos"] = round(float(state_errors(probe.cfg, data.states[j], data.states[i])["pos"].mean()), 5)
    return out


# ----------------------------------------------------------------------------------------------------------------------
# Files (safetensors + JSON; nothing is unpickled)
# ----------------------------------------------------------------------------------------------------------------------


def save_probe(probe: StateProbe, out: str | Path, report: dict) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in probe.state_dict().items()}
    atomic_write(out / PROBE_FILE, lambda p: save_file(state, str(p)))
    atomic_write_json(out / PROBE_META, {"format": "simforcing-state-probe", "version": 1,
                                         "config": asdict(probe.cfg), "report": report})
    return out


def probe_config(meta: dict, meta_path: Path) -> ProbeConfig:
    """The network config a probe's (or a success judge's) JSON holds under "config"; a missing, unknown or ill-typed
    field is a ConfigError naming the file and the field."""
    if not isinstance(meta, dict):
        raise ConfigError(f"{meta_path}: a JSON {type(meta).__name__}, not the object a fit writes")
    return record_from_dict(ProbeConfig, meta.get("config"), f"{meta_path}: config")


def load_probe(folder: str | Path, device: str | torch.device = "cpu") -> StateProbe:
    """The probe written by :func:`save_probe`; a missing or malformed folder is a ValueError naming the file."""
    folder = Path(folder)
    meta_path, weights = folder / PROBE_META, folder / PROBE_FILE
    if not meta_path.is_file() or not weights.is_file():
        raise ValueError(f"eval.probe: {folder} holds no state probe ({PROBE_META} + {PROBE_FILE}); fit one with "
                         f"`simforcing model fit-probe --data DIR --out {folder}`")
    try:
        meta = json.loads(meta_path.read_text())
        probe = StateProbe(probe_config(meta, meta_path))
        probe.load_state_dict(load_file(str(weights)))
    except Exception as e:  # safetensors' own error type, JSON, shapes: all "not a probe", named below
        raise ValueError(f"eval.probe: {meta_path} / {weights.name} cannot be read as a state probe ({e}); "
                         "fit it again with `simforcing model fit-probe`") from e
    return probe.to(device).eval()


def mean_or_none(values: Sequence) -> Optional[float]:
    kept = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return float(np.mean(kept)) if kept else None
