"""Long-horizon rollouts: the world model run chunk after chunk, from one real first frame, for any number of actions.

    ro = WorldModelRollout(wm, first_frame, state0, text, text_mask, generators, first_mask=mask)
    frames = ro.step(actions)                # raw actions (B, n, A), n <= data.actions_per_window: B episodes together
    ro.video, ro.sim_video, ro.states        # everything so far
    res = ro.run(actions (B, H, A))          # the whole horizon: one ``step`` per chunk (``chunk_sizes``)

``wm`` is a loaded world model (``runs.loaded.LoadedWorldModel``). A chunk is one call of its sampler
(``sample.sampler_for``: the two-stage sampler, ``(N_s, N_r, w)``, both branches batched, ``P_j(c)`` once per chunk,
no forward a weight makes useless) on a window of ``F = data.frames`` frames and
``A_w = data.actions_per_window`` actions:

1. chunk 0 starts from the given real first frame and its recorded state, masked as the sampler always masks it
   (``sample.mask_mode``) — exactly the sampler's output for that window (the same noise: generator i is episode i's);
2. chunk k + 1 starts from chunk k's last generated frame, decoded and re-encoded by the VAE as a new first frame
   (what the model was trained on: a clean first latent that encodes one frame alone);
3. its simulation condition comes from the robot's digital twin when ``sample.condition = render`` (``twin``, a
   ``simforcing.twin.TwinLoop``: the twin renders the chunk's whole window from its current state and executes the
   chunk's n executed actions only), else from the student's own simulation chain, continued from the chain's own last
   frame (``rollout.sim_chain = continue``: the simulation domain is the arm alone on a flat background, so no
   generated real frame is segmented again), or from the generated real frame masked again (``remask``: with
   ``mask-file`` / ``paired-sim`` that reads the recorded mask / sim frame at that time — an analysis, not a closed
   loop — with ``sam3`` the generated frame is segmented);
4. its state input is never the recorded state: ``rollout.state = integrate`` — the initial state plus the commanded
   actions (delta dims summed, absolute dims set: ``rollout.delta_dims`` / ``absolute_dims``) — or ``probe`` — read
   from the generated frames by the state probe, chained chunk to chunk (q̂ at chunk k+1 = q̂ at chunk k + P(first
   frame of chunk k, its last frame));
5. a chunk of n < A_w actions (a horizon that is not a whole number of chunks, or a policy executing part of its
   plan) is filled up to A_w with ``plan`` actions when given (the rest of a policy's chunk) or with "hold" actions
   (zero deltas, the absolute dims kept), and cut: only its first n / stride frames are kept, the next chunk starts
   from the last kept frame and the state integrates the n executed actions only;
6. a model trained with ``train.context_noise`` can be told that every chunk's first frame after the first is an
   imperfect one: ``rollout.context_tau`` (the level, the latent itself untouched; 0 = clean, as chunk 0's).

Noise: episode i draws each chunk's (ε_r, ε_s) from its own generator, chunk after chunk, so a batch of B episodes
gives the rollouts of B one-episode calls, and the restart reference (``evaluate.rollouts``) sees the same noise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

from simforcing.config import Config, ConfigError
from simforcing.runs.loaded import LoadedWorldModel, sample_generator
from simforcing.sample import RenderedSimulation, Sampler, model_device, sampler_for
from simforcing.sampler_batch import SamplerBatch
from simforcing.twin import TwinLoop


def integrate_state(cfg: Config, state: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """The state after ``actions`` (B, n, A) raw from ``state`` (B, S) raw: delta dims summed, absolute dims set to
    the last action's value (``rollout.delta_dims`` / ``absolute_dims``); -> (B, S)."""
    out = state.clone()
    if actions.shape[1] == 0:
        return out
    d, a = list(cfg.rollout.delta_dims), list(cfg.rollout.absolute_dims)
    if d:
        out[:, d] = out[:, d] + actions[:, :, d].sum(dim=1).to(out.dtype)
    if a:
        out[:, a] = actions[:, -1, a].to(out.dtype)
    return out


def hold_actions(cfg: Config, last: Optional[torch.Tensor], n: int, batch: int, action_dim: int) -> torch.Tensor:
    """``n`` raw "hold" actions (B, n, A): zero deltas, the absolute dims at ``last`` (B, A) (the last executed
    action; zero without one)."""
    out = torch.zeros(batch, n, action_dim)
    if last is not None and cfg.rollout.absolute_dims:
        dims = list(cfg.rollout.absolute_dims)
        out[:, :, dims] = last[:, None, dims].float()
    return out


@dataclass
class RolloutResult:
    """A finished rollout of B episodes. Videos in [-1, 1]; T = frames made after the first."""

    video: torch.Tensor  # (B, 3, 1 + T, H, W): frame 0 = the decoded first latent, then each chunk's kept frames
    sim_video: Optional[torch.Tensor]  # (B, 3, 1 + T, H, W) the simulation chain (None when w = 0)
    masked_frame: Optional[torch.Tensor]  # (B, 3, H, W) x^s_0 of chunk 0
    states: torch.Tensor  # (B, K, S) raw: the state input of each chunk
    chunk_starts: list  # frame index where each chunk starts
    forwards: int  # per-sample network evaluations over all chunks
    timings: dict = field(default_factory=dict)  # seconds per sampler phase, summed over chunks

    @property
    def chunks(self) -> int:
        return len(self.chunk_starts)


@dataclass
class Recorded:
    """Recorded videos of the episodes being rolled out (an analysis, never the closed loop): read by ``remask`` with
    mask-file / paired-sim and by ``sample.condition = oracle``."""

    sim: Optional[torch.Tensor] = None  # (B, 3, 1 + T, H, W) the simulation video
    arm_mask: Optional[torch.Tensor] = None  # (B, 1 + T, H, W) bool the real video's arm masks


class WorldModelRollout:
    """B episodes rolled out together, one chunk per :meth:`step` (module docstring).

    first_frame (B, 3, H, W) in [-1, 1]; state0 (B, S) raw (the dataset's units); text (B, N, D), text_mask (B, N);
    ``generators``: one torch.Generator per episode (the noise of every chunk). Chunk 0's masking: ``first_mask``
    (B, H, W) bool for ``mask-file``, ``first_sim`` (B, 3, H, W) the paired sim frame for ``paired-sim``; ``sam3``
    segments the frame. ``sampler``: the world model's sampler to use (default ``sample.sampler_for(wm)``); it is
    asked to decode the simulation video. ``twin``: the episodes' digital twin, required by ``sample.condition =
    render`` (module docstring, step 3); ``rendered`` keeps each chunk's rendered condition (B, 3, F, H, W).
    """

    def __init__(self, wm: LoadedWorldModel, first_frame: torch.Tensor, state0: torch.Tensor, text: torch.Tensor,
                 text_mask: Optional[torch.Tensor], generators: Sequence[torch.Generator],
                 first_mask: Optional[torch.Tensor] = None, first_sim: Optional[torch.Tensor] = None, probe=None,
                 recorded: Optional[Recorded] = None, sampler: Optional[Sampler] = None,
                 twin: Optional[TwinLoop] = None):
        cfg = wm.cfg
        if cfg.sample.condition == "render" and twin is None:
            raise ConfigError("sample.condition=render: each chunk's condition is rendered by the robot's digital "
                              "twin; give the rollout the episodes' twin (twin=simforcing.twin.TwinLoop(...)) or use "
                              "--sample.condition=rollout")
        if wm.normalizer is None:
            raise ConfigError(f"{wm.name}: the checkpoint records no action/state statistics (meta.json 'stats'); "
                              "a rollout normalises raw actions and states with them")
        if cfg.rollout.state == "probe" and probe is None:
            raise ConfigError("rollout.state=probe reads each chunk's state from the generated frames with the state "
                              "probe: set --eval.probe=PROBE (`simforcing model fit-probe`) or use "
                              "--rollout.state=integrate")
        d, r = cfg.data, cfg.rollout
        top = min(d.action_dim, d.state_dim)
        if cfg.rollout.state == "integrate" and any(i >= top for i in (*r.delta_dims, *r.absolute_dims)):
            raise ConfigError(f"rollout.delta_dims {r.delta_dims} / rollout.absolute_dims {r.absolute_dims}: dims of "
                              f"{d.action_dim}-D actions and {d.state_dim}-D states are 0..{top - 1}; set them to this "
                              "dataset's action convention (--rollout.delta_dims=... --rollout.absolute_dims=...)")
        b = first_frame.shape[0]
        if len(generators) != b:
            raise ValueError(f"generators: got {len(generators)} for {b} episodes; expected one per episode")
        self.cfg, self.normalizer, self.probe = cfg, wm.normalizer, probe
        self.device = model_device(wm.model)
        if sampler is None:  # a twin given is the condition, whatever the run's sample.condition
            sampler = sampler_for(wm, decode_sim=True, condition=RenderedSimulation() if twin is not None else None)
        self.sampler = sampler
        self.sampler.decode_sim = True
        self.generators = list(generators)
        self.text, self.text_mask = text.to(self.device), (None if text_mask is None else text_mask.to(self.device))
        self.first_mask, self.first_sim, self.recorded = first_mask, first_sim, recorded or Recorded()
        self.twin = twin
        self.rendered: list[torch.Tensor] = []
        self.stride, self.span = cfg.data.frame_stride, cfg.data.actions_per_window
        self.state = state0.detach().double().cpu()  # (B, S) raw: the next chunk's state input
        self.frames = [first_frame.detach().float().cpu()[:, :, None]]  # chunks of (B, 3, n, H, W), frame 0 first
        self.sim_frames: list = []
        self.states: list = []
        self.chunk_starts: list = []
        self.last_action: Optional[torch.Tensor] = None
        self.sim_first: Optional[torch.Tensor] = None  # x^s_0 of the next chunk (the chain's last frame)
        self.masked_frame: Optional[torch.Tensor] = None
        self.forwards, self.timings, self.t = 0, {}, 0  # t: frames made after frame 0

    @property
    def batch(self) -> int:
        return self.frames[0].shape[0]

    @property
    def frame(self) -> torch.Tensor:
        """The newest frame (B, 3, H, W): the next chunk's first frame."""
        return self.frames[-1][:, :, -1]

    @property
    def video(self) -> torch.Tensor:
        return torch.cat(self.frames, dim=2)

    @property
    def sim_video(self) -> Optional[torch.Tensor]:
        return torch.cat(self.sim_frames, dim=2) if self.sim_frames else None

    # -- one chunk --------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, actions: torch.Tensor, plan: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Advance every episode by ``actions`` (B, n, A) raw, 1 <= n <= A_w, n a multiple of data.frame_stride;
        ``plan`` (B, A_w − n, A): the actions that would follow (a policy's unexecuted plan) to fill the window,
        "hold" actions when None. Returns the n / stride new frames (B, 3, n / stride, H, W)."""
        b, n = actions.shape[0], actions.shape[1]
        if b != self.batch or not 1 <= n <= self.span or n % self.stride:
            raise ConfigError(f"rollout step: got actions of shape {tuple(actions.shape)}; expected (B={self.batch}, "
                              f"n, A) with 1 <= n <= {self.span} (data.actions_per_window) and n a multiple of "
                              f"data.frame_stride={self.stride}")
        actions = actions.detach().double().cpu()
        fill = self.span - n
        if fill and plan is not None:
            tail = plan.detach().double().cpu()[:, :fill]
            if tail.shape[1] != fill:
                raise ConfigError(f"rollout step: plan has {plan.shape[1]} actions; {fill} are needed to fill the "
                                  "window")
        else:
            tail = hold_actions(self.cfg, actions[:, -1], fill, b, actions.shape[2]).double()
        window = torch.cat([actions, tail], dim=1)  # (B, A_w, A) raw
        first = self.frame  # (B, 3, H, W): this chunk's first frame as given to the model
        rendered = None
        if self.twin is not None:  # the twin renders the whole window, then executes the n executed actions
            rendered = self.twin.window(window.numpy(), keep=n)
            self.rendered.append(rendered)
        res = self.sampler(self._batch(window, rendered), self.generators)
        keep = n // self.stride  # frames kept after the first
        video = res.real_video.float().cpu()  # (B, 3, F, H, W)
        self.frames.append(video[:, :, 1:1 + keep])
        if res.sim_video is not None:
            sim = res.sim_video.float().cpu()
            if not self.sim_frames:
                self.sim_frames.append(sim[:, :, :1])
                self.masked_frame = res.masked_frame.float().cpu() if res.masked_frame is not None else None
            self.sim_frames.append(sim[:, :, 1:1 + keep])
            self.sim_first = sim[:, :, keep]
        if len(self.frames) == 2:  # chunk 0: frame 0 is the decoded first latent, as the sampler returns it
            self.frames[0] = video[:, :, :1]
        self.states.append(self.state.float())
        self.chunk_starts.append(self.t)
        self.state = self._next_state(actions, first, video[:, :, keep])
        self.last_action = actions[:, -1]
        self.forwards += res.forwards
        for k, v in res.timings.items():
            self.timings[k] = self.timings.get(k, 0.0) + v
        self.t += keep
        return self.frames[-1]

    def _batch(self, window: torch.Tensor, rendered: Optional[torch.Tensor] = None) -> SamplerBatch:
        """The sampler's batch for the next chunk: the newest frame as the first frame, the window's actions and the
        state input, normalised with the run's statistics; x^s_0 the simulation chain's last frame (``continue``
        after chunk 0), else what masking reads (chunk 0's mask or sim frame, or the recorded ones)."""
        t0, f, rec = self.t, self.cfg.data.frames, self.recorded
        arm_mask = recorded_sim = None
        if t0 == 0 and self.first_mask is not None:
            arm_mask = self.first_mask
        elif rec.arm_mask is not None:
            arm_mask = rec.arm_mask[:, t0]
        if self.cfg.sample.condition == "oracle":  # analysis: c = the recorded sim video of this chunk
            if rec.sim is None or rec.sim.shape[2] < t0 + f:
                raise ConfigError("sample.condition=oracle needs the recorded sim video of every chunk (recorded="
                                  "Recorded(sim=...)) and a horizon of whole chunks")
            recorded_sim = rec.sim[:, :, t0:t0 + f]
        elif t0 == 0 and self.first_sim is not None:
            recorded_sim = self.first_sim[:, :, None]
        elif rec.sim is not None:
            recorded_sim = rec.sim[:, :, t0:t0 + 1]
        chain = self.sim_first if self.cfg.rollout.sim_chain == "continue" else None
        return SamplerBatch(
            first_frame=self.frame,
            actions=torch.from_numpy(self.normalizer.normalize("action", window.numpy())).float(),
            state0=torch.from_numpy(self.normalizer.normalize("state", self.state.numpy())).float(),
            text=self.text, text_mask=self.text_mask, arm_mask=arm_mask, sim_first_frame=chain,
            recorded_sim=recorded_sim, rendered_sim=rendered,
            context_tau=torch.full((self.batch,), float(self.cfg.rollout.context_tau))
            if t0 > 0 and self.cfg.rollout.context_tau > 0 else None)

    def _next_state(self, actions: torch.Tensor, first: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """The next chunk's state input (B, S) raw, from the executed ``actions`` or the probe on (first, last)."""
        if self.cfg.rollout.state == "integrate":
            return integrate_state(self.cfg, self.state, actions)
        dev = next(self.probe.parameters()).device
        delta = self.probe(first.to(dev), last.to(dev)).double().cpu()  # (B, S) raw units
        return self.state + delta

    def run(self, actions: torch.Tensor) -> RolloutResult:
        """Advance every episode over all of ``actions`` (B, H, A) raw — ceil(H / A_w) chunks of
        :func:`chunk_sizes`, the last one cut when H is not a whole number of chunks — and return the result."""
        i = 0
        for n in chunk_sizes(actions.shape[1], self.span, self.stride):
            self.step(actions[:, i:i + n])
            i += n
        return self.result()

    def result(self) -> RolloutResult:
        return RolloutResult(video=self.video, sim_video=self.sim_video, masked_frame=self.masked_frame,
                             states=torch.stack(self.states, dim=1) if self.states else torch.zeros(self.batch, 0),
                             chunk_starts=list(self.chunk_starts), forwards=self.forwards, timings=dict(self.timings))


def chunk_sizes(horizon: int, span: int, stride: int) -> list[int]:
    """Actions per chunk for a horizon of ``horizon`` actions: whole chunks of ``span``, then the cut remainder."""
    if horizon < 1:
        raise ConfigError(f"--horizon: got {horizon}; expected a number of actions >= 1")
    if horizon % stride:
        raise ConfigError(f"--horizon: got {horizon} actions; expected a multiple of data.frame_stride={stride} "
                          "(one frame is kept every stride actions)")
    return [span] * (horizon // span) + ([horizon % span] if horizon % span else [])


def rollout(wm: LoadedWorldModel, first_frame: torch.Tensor, actions: torch.Tensor, state0: torch.Tensor,
            text: torch.Tensor, text_mask: Optional[torch.Tensor], generators: Sequence[torch.Generator],
            **kwargs) -> RolloutResult:
    """Roll B episodes out over all of ``actions`` (B, H, A) raw (:meth:`WorldModelRollout.run`); ``kwargs`` go to
    :class:`WorldModelRollout`."""
    return WorldModelRollout(wm, first_frame, state0, text, text_mask, generators, **kwargs).run(actions)


def episode_generators(cfg: Config, indices: Sequence[int]) -> list[torch.Generator]:
    """One generator per episode, seeded like the evaluation's sample i (``runs.loaded.sample_generator``)."""
    return [sample_generator(cfg, int(i)) for i in indices]

