"""The Python face of simforcing: a trained world model, a policy and their evaluations in a few lines.

    from simforcing import WorldModelPipeline

    pipe = WorldModelPipeline.from_run("runs/demo/simforcing")            # newest valid checkpoint (or step=N)
    out = pipe(frame, "push the blue ball to the left", state, actions)    # one window, the paper's sampler
    out.video                                                             # uint8 (F, H, W, 3): frame 0 = given
    long = pipe.rollout(frame, instruction, state, many_actions)           # any length, chunk after chunk
    ep = read_episode("runs/demo/data_long")                              # a recorded episode to drive it with

Inputs are what a robot logs, in the dataset's units: ``frame`` uint8 (H, W, 3) (any size: resized and centre-cropped
as in training), ``state`` (S,), ``actions`` (A, action_dim) — one window's ``data.actions_per_window`` for a call,
any number for a rollout (a multi-view model, ``data.views``: ``frame`` and ``arm_mask`` are {view: array} for every
camera, ``episode.frame(0)`` / ``episode.mask(0)`` of :func:`read_episode`, and ``Prediction.views`` each camera's
video). The first frame is masked for the simulation branch as ``sample.mask_mode`` says: pass
``arm_mask`` (H, W) bool for ``mask-file``, ``sim_frame`` for ``paired-sim``; ``sam3`` segments it. The sampler's
settings (``n_sim``, ``n_real``, ``w``) and the noise (``seed``) are arguments. The same objects the command line uses
stay reachable: ``pipe.world_model`` (``runs.loaded.LoadedWorldModel``: ``pipe.model``, ``pipe.vae``, ``pipe.cfg``,
``pipe.normalizer``, ``pipe.checkpoint``), and :func:`evaluate` /
:func:`rollout_drift` / :func:`evaluate_policies` / :func:`load_policy` / :func:`estimate_success` are the functions
behind ``simforcing evaluate``, ``rollout``, ``policy eval`` and ``policy estimate``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from simforcing.config import Config, ConfigError
from simforcing.data.format import (TWIN_FILE, dataset_views, episode_file, read_arm_mask, read_episode_videos,
                                    read_episodes, read_info, read_lowdim, read_splits, read_twin_record)
from simforcing.data.paired import compose_views, frames_to_target, masks_to_target, split_views, to_unit_range
from simforcing.data.stats import Normalizer
from simforcing.errors import CheckpointError
from simforcing.evaluate.rollouts import evaluate_rollouts as rollout_drift  # noqa: F401  (re-exported)
from simforcing.evaluate.run import evaluate_run as evaluate  # noqa: F401  (re-exported)
from simforcing.inputs import check_image, check_instruction, check_mask, check_matrix, check_vector
from simforcing.media import to_uint8_frames
from simforcing.policy.closed_loop.results import PolicyEvaluation
from simforcing.policy.infer import PolicyRunner
from simforcing.rollout import RolloutResult, WorldModelRollout, chunk_sizes
from simforcing.runs.folder import WORLD_MODELS, require_kind
from simforcing.runs.scored import ScoredRun
from simforcing.runs.loaded import CheckpointId, LoadedWorldModel, load_world_model
from simforcing.sample import SampleResult, model_device, sampler_for
from simforcing.sampler_batch import SamplerBatch
from simforcing.twin import TwinEpisode, TwinLoop, check_record, check_twin_can_act, check_twin_episode
from simforcing.utils import resolve_device


@dataclass
class Prediction:
    """What one call or rollout made: ``video`` uint8 (F, H, W, 3) (frame 0: the given first frame as the VAE
    reconstructs it), ``sim_video`` the simulation branch (None when w = 0), ``masked_frame`` uint8 (H, W, 3) its
    start, ``forwards`` the network evaluations, ``raw`` the library's result (tensors). A multi-view model's frames
    hold its cameras side by side (``data.view_layout``); ``views`` is each camera's video alone ({} for one view)."""

    video: np.ndarray
    sim_video: Optional[np.ndarray]
    masked_frame: Optional[np.ndarray]
    forwards: int
    raw: object
    views: dict = field(default_factory=dict)


class WorldModelPipeline:
    """A trained world-model run ready to predict (module docstring), over its ``runs.loaded.LoadedWorldModel``."""

    def __init__(self, world_model: LoadedWorldModel):
        self.world_model = world_model
        self._text: dict = {}

    @classmethod
    def from_run(cls, run: str | Path, step: Optional[int] = None, device: str = "auto",
                 overrides: Optional[list[str]] = None) -> "WorldModelPipeline":
        """The run's newest valid checkpoint (or ``step``) with the config it was trained with; ``overrides``
        (``["--sample.w=1"]``) change its sampling/evaluation sections — one the run cannot honour (its network,
        condition path, flow, losses, training: ``runs.loaded.check_sampling_overrides``) is a ConfigError naming
        it, as in the commands."""
        import copy

        from simforcing.config import apply_overrides, parse_overrides
        from simforcing.runs.folder import run_config
        from simforcing.runs.loaded import check_sampling_overrides

        check_world_model_run(run)
        cfg = None
        if overrides:
            trained = run_config(run, WORLD_MODELS, "run", "sample", step=step)  # the checkpoint's own config
            cfg = apply_overrides(copy.deepcopy(trained), parse_overrides(list(overrides))).validate()
            check_sampling_overrides(trained, cfg, run)
        wm = load_world_model(run, cfg, resolve_device(device), step, flag="run")
        note = ScoredRun.of(run, wm.checkpoint.path, wm.checkpoint.step).unfinished_note(f"run {run}")
        if note:
            warnings.warn(note + "; its predictions are those of a model still (or no longer) in training",
                          stacklevel=2)
        return cls(wm)

    @classmethod
    def from_pretrained(cls, folder: str | Path, device: str = "auto", vae: Optional[str | Path] = None,
                        text_encoder: Optional[str | Path] = None) -> "WorldModelPipeline":
        """A folder written by `simforcing export` (``simforcing.export``): it samples what ``from_run`` of the
        exported checkpoint samples; ``vae`` / ``text_encoder``: folders replacing the recorded ones."""
        from simforcing.export import load_pretrained

        return cls(load_pretrained(folder, resolve_device(device), vae, text_encoder))

    @property
    def cfg(self) -> Config:
        return self.world_model.cfg

    @property
    def model(self) -> torch.nn.Module:
        return self.world_model.model

    @property
    def vae(self):
        return self.world_model.vae

    @property
    def normalizer(self) -> Normalizer:
        return self.world_model.normalizer

    @property
    def checkpoint(self) -> Optional[CheckpointId]:
        return self.world_model.checkpoint

    @property
    def device(self) -> torch.device:
        return model_device(self.model)

    # -- inputs -------------------------------------------------------------------------------------------------------
    def text(self, instruction: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(1, N, D) embedding padded to data.text_max_tokens and its (1, N) mask, with the run's text encoder."""
        if instruction not in self._text:
            self._text[instruction] = self.world_model.text([instruction])
        return self._text[instruction]

    @property
    def views(self) -> tuple[str, ...]:
        """The cameras a multi-view model sees (``data.views``, in order); () for a one-view model."""
        return self.cfg.data.view_names if self.cfg.data.num_views > 1 else ()

    def _per_view(self, value, name: str) -> list:
        """A multi-view model's input: a mapping {view: array} holding every view (ValueError naming the one it
        lacks) -> the arrays in the model's view order; a one-view model's: the array itself."""
        if not self.views:
            if isinstance(value, Mapping):
                raise ValueError(f"{name}: the world model sees one camera; pass its uint8 (H, W, 3) frame, not a "
                                 f"mapping of views ({', '.join(map(str, value))})")
            return [value]
        if not isinstance(value, Mapping):
            raise ValueError(f"{name}: the world model sees the cameras {', '.join(self.views)} (data.views); pass "
                             f"{{view: frame}} with each of them (e.g. episode.frame(0) of read_episode)")
        missing = [v for v in self.views if v not in value]
        if missing:
            raise ValueError(f"{name}: no {missing[0]!r} view; the world model sees {', '.join(self.views)} "
                             f"(data.views), got {', '.join(map(str, value)) or 'none'}")
        return [value[v] for v in self.views]

    def frame(self, image, name: str = "frame") -> torch.Tensor:
        """uint8 (H, W, 3) — a multi-view model: {view: uint8 (H, W, 3)} — -> (1, 3, H', W') in [-1, 1] at the
        model's resolution (training resize + centre crop, each view alone, side by side); another dtype, layout or
        an unusable size is a ValueError naming ``name`` (``simforcing.inputs``)."""
        d = self.cfg.data
        parts = []
        for view, img in zip(self.views or (None,), self._per_view(image, name)):
            img = check_image(img, name if view is None else f"{name}[{view!r}]", (d.height, d.width))
            parts.append(frames_to_target(img[None], d.height, d.width))
        return to_unit_range(compose_views(parts, d.view_layout)).permute(1, 0, 2, 3)

    def _mask(self, arm_mask, frame, needed: bool = True) -> Optional[torch.Tensor]:
        if arm_mask is None:
            if needed and self.cfg.sample.mask_mode == "mask-file":
                raise ConfigError("arm_mask: sample.mask_mode is mask-file; pass arm_mask (H, W) bool for the first "
                                  "frame (a multi-view model: {view: mask}), or load with overrides="
                                  "['--sample.mask_mode=sam3', '--sample.sam3_path=DIR']")
            return None
        d = self.cfg.data
        parts = []
        for view, m, img in zip(self.views or (None,), self._per_view(arm_mask, "arm_mask"),
                                self._per_view(frame, "frame")):
            where = "arm_mask" if view is None else f"arm_mask[{view!r}]"
            parts.append(masks_to_target(check_mask(m, where, np.asarray(img).shape[:2])[None], d.height, d.width))
        return compose_views(parts, d.view_layout)

    def _check_actions(self, actions: np.ndarray, exact: bool) -> np.ndarray:
        d = self.cfg.data
        return check_matrix(actions, "actions", d.action_dim, d.actions_per_window if exact else None)

    def _inputs(self, frame, instruction, state, arm_mask, sim_frame, seed, masked: bool = True) -> tuple:
        """Every input but the actions checked (``simforcing.inputs``) -> (first frame (1, 3, H, W), instruction,
        state (S,) raw, arm mask or None, sim frame (1, 3, H, W) or None, seed). ``masked``: the first frame will be
        masked (False when a twin renders the condition: no mask is needed)."""
        x = self.frame(frame)
        text = check_instruction(instruction)
        s = check_vector(state, "state", self.cfg.data.state_dim)
        mask = self._mask(arm_mask, frame, needed=masked)
        sim = None if sim_frame is None else self.frame(sim_frame, "sim_frame")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"seed: expected an integer; got {seed!r}")
        return x, text, s, mask, sim, int(seed)

    # -- one window -----------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def __call__(self, frame: np.ndarray, instruction: str, state: np.ndarray, actions: np.ndarray,
                 arm_mask: Optional[np.ndarray] = None, sim_frame: Optional[np.ndarray] = None,
                 n_sim: Optional[int] = None, n_real: Optional[int] = None, w: Optional[float] = None,
                 seed: int = 0) -> Prediction:
        """One window from ``frame``: the two-stage guided sampler (SPEC §5) with the run's or the given settings.
        Every input is checked first (a ValueError naming it)."""
        a = self._check_actions(actions, exact=True)
        x, instruction, s, arm, sim, seed = self._inputs(frame, instruction, state, arm_mask, sim_frame, seed)
        for name, value in (("n_sim", n_sim), ("n_real", n_real)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                      or value < 1):
                raise ValueError(f"{name}: expected an integer >= 1 (sampler steps); got {value!r}")
        if w is not None and not np.isfinite(float(w)):
            raise ValueError(f"w: expected a finite guidance weight; got {w!r}")
        text, mask = self.text(instruction)
        batch = SamplerBatch(first_frame=x, actions=torch.from_numpy(self.normalizer.normalize("action", a[None])),
                             state0=torch.from_numpy(self.normalizer.normalize("state", s[None])),
                             text=text, text_mask=mask, arm_mask=arm,
                             recorded_sim=None if sim is None else sim[:, :, None])
        sampler = sampler_for(self.world_model, n_sim, n_real, w, decode_sim=True)
        return self._prediction(sampler(batch, torch.Generator().manual_seed(seed)))

    # -- any length ---------------------------------------------------------------------------------------------------
    def rollout(self, frame: np.ndarray, instruction: str, state: np.ndarray, actions: np.ndarray,
                arm_mask: Optional[np.ndarray] = None, sim_frame: Optional[np.ndarray] = None,
                seed: int = 0, twin: Optional[TwinEpisode] = None) -> Prediction:
        """``actions`` (H, action_dim) of any length, chunk after chunk (``simforcing.rollout``; a last chunk that
        is not whole is cut): each chunk starts from the previous one's last generated frame, its state integrated
        from the actions (``rollout.state``), its condition from the simulation chain (``rollout.sim_chain``) — or,
        given ``twin`` (the episode's start for the robot's digital twin: ``TwinEpisode(state, {"camera": ...})``,
        ``simforcing.twin``), rendered by the twin (``sample.twin``) from the actions, chunk after chunk, at the
        model's resolution."""
        if np.asarray(actions).ndim == 2 and len(actions) == 0:
            raise ConfigError("horizon: got 0 actions; expected a rollout of at least one action")
        a = torch.from_numpy(self._check_actions(actions, exact=False))[None]
        chunk_sizes(a.shape[1], self.cfg.data.actions_per_window, self.cfg.data.frame_stride)  # named errors first
        if twin is None and self.cfg.sample.condition == "render":
            raise ConfigError("twin: the run samples with sample.condition=render; pass the episode's start for the "
                              "digital twin (twin=simforcing.twin.TwinEpisode(state, {'camera': ...}))")
        x, instruction, s, arm, sim, seed = self._inputs(frame, instruction, state, arm_mask, sim_frame, seed,
                                                         masked=twin is None)
        if twin is not None:
            self._check_twin(twin, s)
        text, mask = self.text(instruction)
        loop = None if twin is None else TwinLoop.from_config(self.cfg, [twin], self.cfg.data.height,
                                                                self.cfg.data.width)  # each view at this size
        try:
            ro = WorldModelRollout(self.world_model, x, torch.from_numpy(s)[None], text, mask,
                                   [torch.Generator().manual_seed(seed)], first_mask=arm, first_sim=sim, twin=loop)
            return self._prediction(ro.run(a))
        finally:
            if loop is not None:
                loop.close()

    def _check_twin(self, twin: TwinEpisode, state: np.ndarray) -> None:
        """The twin given to :meth:`rollout`, before anything renders: a TwinEpisode whose state and target are
        finite and whose record the configured twin can use (``twin.check_record``: every number finite, the camera
        of the right shape) — a ValueError naming what is wrong; it starts where this rollout starts (its state is
        ``state``: the twin of another episode would render another arm); and the world model reads its rendering
        (``twin.check_twin_can_act``: a ConfigError for a model trained without the condition, or w = 0)."""
        check_twin_episode(twin, self.cfg.data.state_dim)
        try:
            check_record(str(self.cfg.sample.twin), twin.record)
        except ValueError as e:
            raise ValueError(f"twin.record: {e}") from None
        start = np.asarray(twin.state, dtype=np.float64)
        if not np.allclose(start, state, rtol=1e-5, atol=1e-6):
            raise ValueError(f"twin.state: the twin starts at {np.round(start, 4).tolist()}, the rollout at state "
                             f"{np.round(state, 4).tolist()}; pass the twin of this episode (read_episode(...).twin, "
                             "or TwinEpisode(state, its twin record))")
        check_twin_can_act(self.cfg, self.name)

    @property
    def name(self) -> str:
        """What the world model was loaded from (its run or exported folder)."""
        return self.world_model.name

    def _prediction(self, res: SampleResult | RolloutResult) -> Prediction:
        """The first (only) sample of a sampler call or rollout as a Prediction; a video that is not finite (the
        inputs were checked: the weights) is a CheckpointError naming the checkpoint, never NaN frames returned."""
        video = res.real_video if isinstance(res, SampleResult) else res.video
        for name, v in (("video", video), ("sim_video", res.sim_video)):
            if v is not None and not torch.isfinite(v).all():
                raise CheckpointError(f"the model predicted a {name} holding NaN or inf from finite, checked inputs: "
                                      "the checkpoint's weights are damaged or diverged; use another step",
                                      self.checkpoint.path if self.checkpoint is not None else None)
        d = self.cfg.data
        views = {v: to_uint8_frames(part) for v, part in zip(self.views, split_views(video[0], d.num_views,
                                                                                       d.view_layout))}
        return Prediction(to_uint8_frames(video[0]), None if res.sim_video is None else to_uint8_frames(res.sim_video[0]),
                          None if res.masked_frame is None else to_uint8_frames(res.masked_frame[0][:, None])[0],
                          res.forwards, res, views if self.views else {})


def check_world_model_run(run: str | Path) -> None:
    """ConfigError naming ``run`` when it is not a world-model run folder: missing, a policy run or a video base
    (named, with what would work), a dataset, a judge or results (``runs.folder.require_kind``)."""
    if not Path(run).is_dir():
        raise ConfigError(f"run: {run} is not a folder; expected a world-model run (`simforcing pretrain` or "
                          "`simforcing train`)")
    require_kind(run, WORLD_MODELS, "run", "sample")


@dataclass
class Episode:
    """One recorded episode as a robot logs it: ``real`` / ``sim`` uint8 (T, H, W, 3) (``sim`` None when absent),
    ``arm_mask`` bool (T, H, W) or None, ``actions`` (T − 1, A) and ``states`` (T, S) in the dataset's units,
    ``instruction``; ``twin``: its start for the robot's digital twin (the first state and the episode's
    ``twin.json``) or None when the dataset records none (``rollout(..., twin=ep.twin)``). ``real`` / ``sim`` /
    ``arm_mask`` are the dataset's first camera; ``views`` holds every camera of a multi-view dataset ({view: {"real",
    "sim", "arm_mask"}}; {} for one view) and :meth:`frame` / :meth:`mask` give a multi-view model its inputs."""

    episode_id: str
    instruction: str
    real: Optional[np.ndarray]
    sim: Optional[np.ndarray]
    arm_mask: Optional[np.ndarray]
    actions: np.ndarray
    states: np.ndarray
    twin: Optional[TwinEpisode] = None
    views: dict = field(default_factory=dict)

    def frame(self, t: int = 0, domain: str = "real"):
        """Frame ``t`` of every camera, {view: uint8 (H, W, 3)} (one-view dataset: the frame itself)."""
        if not self.views:
            return getattr(self, domain)[t]
        return {v: cams[domain][t] for v, cams in self.views.items()}

    def mask(self, t: int = 0):
        """The arm mask of frame ``t`` of every camera, {view: bool (H, W)} (one-view dataset: the mask itself)."""
        if not self.views:
            return None if self.arm_mask is None else self.arm_mask[t]
        return {v: None if cams["arm_mask"] is None else cams["arm_mask"][t] for v, cams in self.views.items()}


def read_episode(root: str | Path, episode_id: Optional[str] = None, split: str = "val") -> Episode:
    """Episode ``episode_id`` of a paired dataset (default: the first of ``split``), through the same checked
    readers training uses (``data.format``)."""
    info, index = read_info(root), read_episodes(root)
    if episode_id is None:
        ids = read_splits(root).get(split) or []
        if not ids:
            raise ConfigError(f"split {split!r} of {root} holds no episode; name one (episode_id=...)")
        episode_id = ids[0]
    if episode_id not in index:
        raise ConfigError(f"episode {episode_id!r} is not in {Path(root) / 'meta' / 'episodes.jsonl'}")
    ep = index[episode_id]
    views = {}
    for view in dataset_views(info):
        sim, real = read_episode_videos(root, info, ep, view)
        mask = read_arm_mask(root, episode_id, view, dataset_views(info))
        views[view] = {"real": real, "sim": sim, "arm_mask": None if mask is None else mask.astype(bool)}
    first = views[dataset_views(info)[0]]
    actions, states = read_lowdim(root, episode_id)
    twin = None
    if episode_file(root, episode_id, TWIN_FILE).exists():
        twin = TwinEpisode(states[0], read_twin_record(root, episode_id))
    return Episode(episode_id, ep.instruction, first["real"], first["sim"], first["arm_mask"], actions, states, twin,
                   views if len(views) > 1 else {})


def load_policy(run: str | Path, device: str = "cpu") -> PolicyRunner:
    """A trained policy: ``policy.act(image uint8 (H, cameras·W, 3), state, instruction, generator)`` -> actions
    (A, action_dim) in the dataset's units (``simforcing.policy.infer``)."""
    return PolicyRunner.load(run, device)


def estimate_success(ground_truth: str | Path, wm_eval: str | Path, out: Optional[str | Path] = None, **kwargs):
    """Each policy's success from a few ground-truth trials and many world-model episodes, with valid intervals
    (``simforcing policy estimate``; docs/POLICY_EVALUATION.md): ``ground_truth`` a trial file (CSV/JSONL: policy, task,
    scene, success) or a simulator evaluation folder, ``wm_eval`` a world-model evaluation folder (a
    ``policy eval --env world-model`` output, or :func:`evaluate_policies`' result written with ``.write(folder)``).
    Returns ``(EstimateResult, coverage study)`` (``policy.estimate``); ``kwargs``: n, draws, study_ns, predictor,
    alpha, seed, policies — checked as the command checks its flags (a ConfigError or DataError naming the flag, the
    file and the field). What the estimate chose or passed over (the predictor where the episodes hold no per-frame
    readings, trials of policies left out) is a warning and in the result's ``notes``."""
    from simforcing.policy.estimate import run_estimate

    res, study = run_estimate(ground_truth, wm_eval, out, **kwargs)
    for note in res.notes:
        warnings.warn(f"estimate_success: {note}", stacklevel=2)
    return res, study


def evaluate_policies(runs: dict[str, str | Path], world_model: Optional[str | Path] = None,
                      judge: Optional[str | Path] = None, **kwargs) -> PolicyEvaluation:
    """Closed-loop success of policy runs (name -> folder) on the synthetic benchmark's held-out scenes, as a
    ``policy.closed_loop.results.PolicyEvaluation``: in the simulator, or inside ``world_model`` judged by ``judge``
    (``simforcing policy eval [--env world-model]``);
    ``kwargs``: per_task, max_steps, expert_noise, baselines, layouts, jitter, device, ..."""
    from simforcing.policy.judge.success_judge import load_judge  # MuJoCo and the judge load only here

    if world_model is None:  # with a judge: its validation on these scenes too (``judge_validation``)
        from simforcing.policy.closed_loop.evaluate import evaluate_synthetic

        return evaluate_synthetic(runs, judge=load_judge(judge) if judge else None, **kwargs)
    from simforcing.policy.closed_loop.world_model_eval import evaluate_world_model

    if judge is None:
        raise ConfigError("judge: a world-model evaluation needs the success judge (`simforcing model fit-judge`)")
    return evaluate_world_model(str(world_model), load_judge(judge), runs, **kwargs)
