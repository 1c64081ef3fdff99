"""Policies evaluated inside a world model (`simforcing policy eval --env world-model --wm RUN --judge J`).

The same players (``policy.closed_loop.evaluate``: the scripted expert with its action-noise levels, do-nothing, trained
policy runs), the same held-out scenes, the same executed-actions-per-chunk rule and the same noise as the simulator
evaluation — only the frames come from the world model and success from the judge:

1. every episode starts from the simulator's rendering of its initial scene (the external camera, the real first
   frame), its arm mask (MuJoCo's segmentation, the masking the sampler needs) and its state; after that nothing of
   the simulator is read;
2. all episodes of all players advance together: per chunk each player acts on its episodes' newest frames and
   states (a policy observes what the world model predicts; its state input is the initial state plus the effective
   commanded actions, ``rollout.state = integrate``), the controller's target logic turns the actions into effective
   actions (``CommandedTarget``: workspace clipping, no simulator state), the first ``execute`` of them are executed
   — one batched world-model chunk (``simforcing.rollout``: the rest of each plan fills the window, only the
   executed frames are kept) — and the judge (``policy.judge.success_judge``) reads every new frame against the
   episode's first;
3. an episode succeeds at its first judged success within ``max_steps`` actions (as the simulator's ends at its first
   success).

With ``--wm-condition render`` (``sample.condition = render``) every episode's digital twin (``simforcing.twin``,
started at the scene's state, commanded target and camera) executes exactly the effective actions the episode executes
and renders each chunk's condition; the world model still renders the scene. What the twin renders follows the data the
world model was trained on (``SimDomain.of_world_model``, its meta/info.json ``pairing``): the arm alone, or — for the
full-scene pairing (``data synth --pairing scene``) — the episode's whole scene simulated with physics of its own
(``SyntheticTaskEnv.twin_record``), whose own verdict on the task is recorded per episode (``EpisodeOutcome
.twin_verdicts``). With a full-scene world model the simulation chain's first frame is the twin's render of the start
(``sample.mask_mode`` becomes ``paired-sim``: a real frame masked to the arm is not what its simulation shows).

The world model's noise of an episode depends on its scene only (every player gets the same), each learned policy's on
(scene, chunk) as in the simulator. ``--draws K`` runs every (player, scene) episode K times inside the world model,
each with its own noise (draw k of scene i samples from ``sample_generator(cfg, i + k · DRAW_OFFSET)``, so draw 0 is the
episode a one-draw evaluation runs), all in the same batch: each episode's ``draw_success`` holds the K verdicts — their
mean is a soft prediction of the episode's success and their disagreement a trust feature (``policy.estimate.trust``);
its ``success`` and per-frame readings stay draw 0's, so success rates and agreement tables mean what they mean at
K = 1. ``--wm copy-first``: a "world model" that repeats the first frame (the floor: no
episode can succeed unless the judge errs).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from simforcing.config import ConfigError
from simforcing.data.paired import compose_views, split_views, to_unit_range
from simforcing.data.synthetic.generate import SYNTH_VIEWS, RealRenderer, camera_of_view
from simforcing.data.synthetic.twin import SyntheticTwin, task_verdicts
from simforcing.media import frames_to_uint8
from simforcing.policy.closed_loop.evaluate import (EVAL_SEED, Player, RunPlayer, Scene, judge_record, make_players,
                                                    scene_mode, scene_of)
from simforcing.policy.closed_loop.results import WORLD_MODEL, EpisodeOutcome, PolicyEvaluation, PolicyRow
from simforcing.policy.closed_loop.synthetic import (TASKS, CommandedTarget, SimDomain, SyntheticTaskEnv,
                                                     held_out_scenes)
from simforcing.policy.judge.sim_frames import decision_margin
from simforcing.policy.judge.success_judge import SuccessJudge, first_success, frame_verdicts
from simforcing.policy.settings import check_episode_counts
from simforcing.rollout import WorldModelRollout
from simforcing.runs.loaded import LoadedWorldModel, load_world_model, sample_generator
from simforcing.runs.scored import ScoredRun
from simforcing.twin import TwinEpisode, TwinLoop

COPY_FIRST = "copy-first"
DRAW_OFFSET = 1_000_000  # draw k of scene i samples from sample_generator(cfg, i + k * DRAW_OFFSET): draw 0 is the K = 1 episode


class StartFrame:
    """What the simulator gives an episode once, at its start: the frame of each of ``views`` (the external camera,
    and the wrist camera for a multi-view world model), side by side: uint8 (H, V·W, 3), the arm mask of each view
    (H, V·W), the state (7,), the scene (task, instruction, expert actions), the controller's initial target and the
    twin record a digital twin renders from (``domain``'s: the camera, and the simulated scene for the full-scene
    pairing); with ``twin`` (full scene) the twin's render of the start, ``sim_image`` uint8 (H, V·W, 3) — the frame
    the world model's own simulation chain starts from."""

    def __init__(self, env: SyntheticTaskEnv, domain: SimDomain = SimDomain(), twin: Optional[SyntheticTwin] = None,
                 views: tuple[str, ...] = SYNTH_VIEWS[:1]):
        renderer = RealRenderer(env.ep.model, env.height, env.width)
        try:
            shots = [renderer.render(env.ep.data, camera_of_view(v, env.ep.camera)) for v in views]
        finally:
            renderer.close()
        self.image = np.concatenate([rgb for rgb, _ in shots], axis=1)
        self.mask = np.concatenate([m for _, m in shots], axis=1)
        self.state = env.state()
        self.scene: Scene = scene_of(env)
        self.task = env.task
        t = env.target
        self.target = (t.pos.copy(), t.rpy.copy(), t.grip)
        self.twin_record = env.twin_record(domain)
        self.sim_image: Optional[np.ndarray] = None
        if twin is not None:
            self.sim_image = twin.start([TwinEpisode(self.state, self.twin_record, self.target)])[0]


def start_frames(scenes: dict[str, list[int]], seed: int, max_steps: int, height: int, width: int, layouts: int,
                 jitter: float, domain: SimDomain = SimDomain(),
                 views: tuple[str, ...] = SYNTH_VIEWS[:1]) -> list[StartFrame]:
    out = []
    twin = SyntheticTwin(height, width, views) if domain.pairing == "scene" else None
    try:
        for task, indices in scenes.items():
            for idx in indices:
                env = SyntheticTaskEnv(seed, idx, max_steps, height, width, layouts, jitter)
                try:
                    out.append(StartFrame(env, domain, twin, views))
                finally:
                    env.close()
    finally:
        if twin is not None:
            twin.close()
    return out


WM_CONDITIONS = ("rollout", "render")


def load_environment(wm_run: str, device="cpu", condition: Optional[str] = None) -> Optional[LoadedWorldModel]:
    """The world model the episodes run in (``--wm``): a world-model run loaded for sampling, or None for
    ``copy-first`` (the "world model" that repeats the first frame). ``condition``: its simulation condition
    (``sample.condition``: ``rollout``, the paper's own simulation chain, or ``render``, the digital twin); the
    run's own when None."""
    if condition is not None and condition not in WM_CONDITIONS:
        raise ConfigError(f"--wm-condition: got {condition!r}; expected one of {', '.join(WM_CONDITIONS)}")
    if wm_run == COPY_FIRST:
        return None
    wm = load_world_model(wm_run, None, device, flag="--wm")
    if condition is not None:
        wm.cfg = dataclasses.replace(wm.cfg, sample=dataclasses.replace(wm.cfg.sample, condition=condition))
    if wm.cfg.sample.condition == "oracle":
        raise ConfigError(f"--wm {wm_run}: sample.condition=oracle conditions on recorded simulation videos, which a "
                          "closed loop does not have; use --wm-condition rollout or render")
    return wm


def in_domain(wm: Optional[LoadedWorldModel], domain: SimDomain) -> None:
    """Set the world model up for its simulation domain: for the full scene, ``data.pairing`` scene and the
    simulation chain started from the simulator's own first frame (``sample.mask_mode = paired-sim``: the twin's
    start render, ``StartFrame.sim_image``), not from the real frame masked to the arm."""
    if wm is not None and domain.pairing == "scene":
        wm.cfg = dataclasses.replace(wm.cfg, data=dataclasses.replace(wm.cfg.data, pairing="scene"),
                                     sample=dataclasses.replace(wm.cfg.sample, mask_mode="paired-sim"))


def world_model_record(wm: Optional[LoadedWorldModel], wm_run: str, progress: Callable[[str], None]) -> ScoredRun:
    """What the evaluation records about the world model it ran in: the run folder, checkpoint, step and whether the
    run was finished (``runs.scored.ScoredRun``); an unfinished one is evaluated with a warning line."""
    if wm is None:
        return ScoredRun(COPY_FIRST, None, None, True)
    rec = ScoredRun.of(wm.checkpoint.run, wm.checkpoint.path, wm.checkpoint.step)
    note = rec.unfinished_note(f"--wm {wm_run}")
    if note:
        progress(f"warning: {note}; the evaluation records it")
    return rec


def episode_views(wm: Optional[LoadedWorldModel], players: dict[str, Player], judge_cameras: int = 1
                  ) -> tuple[str, ...]:
    """The cameras every episode's frames hold: the world model's views (``data.views``; one view: the external
    camera), or — copy-first, which predicts nothing — the cameras the players and the judge read (the wrist camera
    beside the external one when one reads two)."""
    if wm is not None:
        return wm.cfg.data.view_names or SYNTH_VIEWS[:1]
    return SYNTH_VIEWS[:max([p.cameras for p in players.values()] + [judge_cameras])]


def check_compatible(wm: Optional[LoadedWorldModel], players: dict[str, Player], judge: SuccessJudge) -> None:
    """Named errors for a judge fitted on frames of another size than the world model predicts for each view, and for
    a world model whose frames or actions a player cannot use: a policy reading the wrist camera needs a world model
    that predicts it (none of these for copy-first: None)."""
    if wm is None:
        return
    d = wm.cfg.data
    height, width = judge.benchmark.get("resolution") or (None, None)
    if (d.height, d.width) != (height, width):
        raise ConfigError(f"--judge: {judge_name(judge)} was fitted on {height}×{width} frames; the world model "
                          f"{wm.name} predicts {d.height}×{d.width} frames per view — fit a judge at the world model's "
                          f"resolution (`simforcing model fit-judge --data DIR --out JUDGE --data.height={d.height} "
                          f"--data.width={d.width}`)")
    views = episode_views(wm, players)
    unknown = [v for v in views if v not in SYNTH_VIEWS]
    if unknown:
        raise ConfigError(f"--wm {wm.name}: it predicts the view {unknown[0]!r}; the benchmark's cameras are "
                          f"{', '.join(SYNTH_VIEWS)} (data.views)")
    lacking = [v for v in SYNTH_VIEWS[:judge.cameras] if v not in views]
    if lacking:
        raise ConfigError(f"--judge: {judge_name(judge)} reads {judge.cameras} cameras (external + wrist); the world "
                          f"model {wm.name} predicts {', '.join(views)} (data.views) — judge it with a one-camera judge "
                          "(`model fit-judge --cameras 1`), or use a world model of both cameras")
    for name, p in players.items():
        missing = [v for v in SYNTH_VIEWS[:p.cameras] if v not in views]
        if missing:
            raise ConfigError(f"--runs {name}: the policy observes {p.cameras} cameras side by side (external + "
                              f"wrist); the world model {wm.name} predicts {', '.join(views)} (data.views) — evaluate "
                              "policies trained with --policy.cameras=1, or a world model trained on the views "
                              "external,wrist (`data synth --views external wrist`, --data.views=external,wrist)")
        if isinstance(p, RunPlayer) and p.runner.cfg.data.action_dim != d.action_dim:
            raise ConfigError(f"--runs {name}: the policy's actions are {p.runner.cfg.data.action_dim}-D; the world "
                              f"model {wm.name} takes {d.action_dim}-D actions")


class ViewSelector:
    """The episodes' frames (..., H, V·W) or (..., V·H, W) of ``views`` in ``layout`` -> what a reader needs: the
    external camera alone (the judge; a one-camera policy) or [external | wrist] side by side (a two-camera policy)."""

    def __init__(self, views: tuple[str, ...], layout: str):
        self.views, self.layout = tuple(views), layout

    def tensor(self, frames: torch.Tensor, cameras: int = 1) -> torch.Tensor:
        parts = split_views(frames, len(self.views), self.layout)
        return torch.cat([parts[self.views.index(v)] for v in SYNTH_VIEWS[:cameras]], dim=-1)

    def images(self, frames: np.ndarray, cameras: int = 1) -> np.ndarray:
        """uint8 (B, H, V·W, 3) (or stacked) -> (B, H, cameras·W, 3)."""
        t = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2)
        return self.tensor(t, cameras).permute(0, 2, 3, 1).numpy()


def judge_name(judge: SuccessJudge) -> str:
    """The judge's folder (as loaded), or what it is when not loaded from one."""
    return judge.source.path if judge.source is not None else "the judge"


def execute_count(execute: Optional[int], players: dict[str, Player], wm: Optional[LoadedWorldModel]) -> int:
    """Actions every episode executes per chunk: ``execute`` or the largest of the learned players' own, at most the
    shortest chunk any player plans and the world model's window, a multiple of its frame stride. An ``execute``
    that cannot be is a ConfigError naming the limit."""
    span = min([p.span for p in players.values()] + ([wm.cfg.data.actions_per_window] if wm is not None else []))
    stride = wm.cfg.data.frame_stride if wm is not None else 1
    if execute is None:
        execute = min(max([p.execute for p in players.values() if p.learned] or [4]), span)
        return max(stride, execute - execute % stride)
    if execute > span or execute % stride:
        who = ", ".join(f"{n}: {p.span}" for n, p in players.items())
        raise ConfigError(f"--execute: got {execute}; expected at most {span} actions (the chunks planned — {who} — "
                          + (f"and the world model's window of {wm.cfg.data.actions_per_window}" if wm else "")
                          + f") and a multiple of the world model's data.frame_stride={stride}")
    return execute


def effective(targets: list[CommandedTarget], actions: np.ndarray) -> np.ndarray:
    """Each episode's actions (B, n, 7) through its controller's target (moved by them) -> effective (B, n, 7)."""
    return np.stack([[t.apply(a) for a in acts] for t, acts in zip(targets, actions)])


def plan_of(targets: list[CommandedTarget], actions: np.ndarray) -> np.ndarray:
    """The effective actions of an unexecuted plan, from copies of the targets (they do not move)."""
    copies = [CommandedTarget(t.pos, t.rpy, t.grip) for t in targets]
    return effective(copies, actions)


class Episodes:
    """All episodes (player × start frame × noise draw, player-major, the draws of a start frame together) of one
    world-model evaluation, advanced together, inside ``wm`` (None: copy-first, whose draws are all alike)."""

    def __init__(self, wm: Optional[LoadedWorldModel], players: dict[str, Player], starts: list[StartFrame],
                 draws: int = 1, views: tuple[str, ...] = SYNTH_VIEWS[:1], layout: str = "width"):
        self.wm, self.players, self.starts = wm, players, starts
        self.rows = [(name, s) for name in players for s in starts for _ in range(draws)]
        self.draw = [k for _ in players for _ in starts for k in range(draws)]  # each row's noise draw
        self.select = ViewSelector(views, layout)  # the start frames hold the views side by side
        h, w = starts[0].image.shape[:2]
        w //= len(views)  # one view's size (the simulator renders each at the judge's resolution)
        imgs = np.stack([s.image for _, s in self.rows])  # (B, H, V·W, 3)
        self.first = self._in_layout(to_unit_range(torch.from_numpy(imgs).permute(0, 3, 1, 2)))  # (B, 3, H', W')
        self.targets = [CommandedTarget(*s.target) for _, s in self.rows]
        self.frames: list[torch.Tensor] = []  # each step's new frames (B, 3, n, H, W)
        self.commanded: list[np.ndarray] = []  # each step's hand displacement the actions command (B, n, 3), metres
        self.ro = None
        if wm is not None:
            scene_no = {id(s): i for i, s in enumerate(starts)}
            text, mask = wm.text([s.scene.instruction for _, s in self.rows])
            gens = [sample_generator(wm.cfg, scene_no[id(s)] + k * DRAW_OFFSET)
                    for (_, s), k in zip(self.rows, self.draw)]
            masks = self._in_layout(torch.from_numpy(np.stack([s.mask for _, s in self.rows])).bool())
            states = torch.from_numpy(np.stack([s.state for _, s in self.rows])).double()
            sims = [s.sim_image for _, s in self.rows]  # full scene: the chain starts from the twin's start render
            first_sim = (None if any(x is None for x in sims)
                         else self._in_layout(to_unit_range(torch.from_numpy(np.stack(sims)).permute(0, 3, 1, 2))))
            twin = None
            if wm.cfg.sample.condition == "render":  # the twin executes exactly the effective actions (step)
                twin = TwinLoop.from_config(wm.cfg, [TwinEpisode(s.state, s.twin_record, s.target)
                                                     for _, s in self.rows], h, w)
            self.ro = WorldModelRollout(wm, self.first, states, text, mask, gens, first_mask=masks,
                                        first_sim=first_sim, twin=twin)
        self.states = np.stack([s.state for _, s in self.rows]).astype(np.float64)

    def _in_layout(self, x: torch.Tensor) -> torch.Tensor:
        """The simulator's views side by side (..., H, V·W) -> the world model's frame layout (``data.view_layout``)."""
        views, layout = self.select.views, self.select.layout
        return compose_views(split_views(x, len(views), "width"), layout)

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """The newest frames uint8 (B, H, W, 3) and the players' state inputs (B, 7) raw: the initial state plus the
        effective actions executed so far (position and orientation deltas summed, the gripper command set)."""
        frame = self.ro.frame if self.ro is not None else self.first
        return frames_to_uint8(frame), self.states.copy()

    def act(self, images: np.ndarray, states: np.ndarray, t: int, chunk: int) -> np.ndarray:
        """Every player's chunk for its episodes -> raw actions (B, L, 7), L the longest chunk any player plans or
        the world model's window: a shorter chunk is followed by "hold" actions (no motion, its last gripper
        command), which fill the window only (``execute_count`` keeps the executed actions within every chunk)."""
        chunks = {}
        for name, player in self.players.items():
            idx = [i for i, (n, _) in enumerate(self.rows) if n == name]
            seen = self.select.images(images[idx], player.cameras)  # the cameras this player reads
            chunks[name] = (idx, np.asarray(player.chunk(list(seen), states[idx],
                                                         [self.rows[i][1].scene for i in idx], [t] * len(idx), chunk)))
        length = max([a.shape[1] for _, a in chunks.values()]
                     + ([self.wm.cfg.data.actions_per_window] if self.wm is not None else []))
        out = np.zeros((len(self.rows), length, 7))
        for idx, a in chunks.values():
            out[idx, :a.shape[1]] = a
            out[idx, a.shape[1]:, 6] = a[:, -1:, 6]  # hold: zero deltas, the gripper as last commanded
        return out

    def step(self, actions: np.ndarray, n: int) -> torch.Tensor:
        """Execute the first ``n`` actions of every episode's chunk -> the new frames (B, 3, n, H, W)."""
        eff = effective(self.targets, actions[:, :n])
        done = self.commanded[-1][:, -1:] if self.commanded else np.zeros((len(self.rows), 1, 3))
        self.commanded.append(done + np.cumsum(eff[:, :, :3], axis=1))
        self.states[:, :6] += eff[:, :, :6].sum(axis=1)
        self.states[:, 6] = eff[:, -1, 6]
        if self.ro is None:  # copy-first: the first frame, again
            new = self.first[:, :, None].expand(-1, -1, n, -1, -1)
        else:
            plan = plan_of(self.targets, actions[:, n:])
            new = self.ro.step(torch.from_numpy(eff), plan=torch.from_numpy(plan) if plan.shape[1] else None)
        self.frames.append(new)
        return new

    def twin_verdicts(self) -> Optional[list[np.ndarray]]:
        """With a full-scene synthetic twin in the loop, its own verdict per episode: the task predicate after every
        executed action on the twin's objects and end-effector (``data.synthetic.twin.task_verdicts``), bool (T,)
        each; None otherwise (no twin, the arm alone, another renderer)."""
        loop = self.ro.twin if self.ro is not None else None
        if (loop is None or not isinstance(loop.renderer, SyntheticTwin)
                or not all("scene" in s.twin_record for _, s in self.rows)):
            return None
        return task_verdicts(loop.renderer, [s.task for _, s in self.rows])

    def close(self) -> None:
        """Release the episodes' digital twin (its renderer), when they have one."""
        if self.ro is not None and self.ro.twin is not None:
            self.ro.twin.close()

    def video(self) -> torch.Tensor:
        """(B, 3, 1 + T, H, W): the first frame and every kept frame."""
        return torch.cat([self.first[:, :, None]] + self.frames, dim=2)


def evaluate_world_model(wm_run: str, judge: SuccessJudge, runs: dict[str, str | Path], per_task: int = 10,
                         max_steps: int = 30, seed: int = EVAL_SEED, tasks=TASKS, baselines: bool = True,
                         expert_noise=(), device="cpu", execute: Optional[int] = None, layouts: Optional[int] = None,
                         jitter: Optional[float] = None, condition: Optional[str] = None, draws: int = 1,
                         progress: Callable[[str], None] = print) -> PolicyEvaluation:
    """Closed-loop success inside ``wm_run`` (module docstring), the same result type as ``evaluate_synthetic``'s
    (rows, episodes with per-frame verdicts) plus the world model's settings and timings. ``condition``: the world
    model's simulation condition (:func:`load_environment`); ``draws``: noise draws per episode (module docstring)."""
    check_episode_counts(per_task, max_steps, execute)
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise ConfigError(f"--draws: got {draws!r}; expected a whole number >= 1 (noise draws per episode)")
    players = make_players(runs, baselines, expert_noise, seed, device)
    if not players:
        raise ConfigError("--runs: nothing to evaluate (no runs, no expert noise levels and no baselines)")
    cfgs = {n: p.runner.cfg for n, p in players.items() if isinstance(p, RunPlayer)}
    layouts, jitter = scene_mode(cfgs, layouts, jitter, progress)
    wm = load_environment(wm_run, device, condition)
    domain = SimDomain.of_world_model(wm, progress)
    in_domain(wm, domain)
    check_compatible(wm, players, judge)
    views = episode_views(wm, players, judge.cameras)
    layout = wm.cfg.data.view_layout if wm is not None else "width"
    height, width = judge.benchmark["resolution"]
    judge.check_benchmark(height, width, layouts, "the world-model evaluation")
    execute = execute_count(execute, players, wm)
    wm_record = world_model_record(wm, wm_run, progress)
    t0 = time.perf_counter()
    scenes = held_out_scenes(seed, per_task, max_steps, tasks, layouts=layouts, jitter=jitter)
    starts = start_frames(scenes, seed, max_steps, height, width, layouts, jitter, domain, views)
    ep = Episodes(wm, players, starts, draws, views, layout)
    seconds = {"start": time.perf_counter() - t0, "world_model": 0.0, "players": 0.0, "judge": 0.0}
    q0 = torch.from_numpy(np.stack([s.state[:3] for _, s in ep.rows])).float()  # (B, 3) given at the start
    judged_first = ep.select.tensor(ep.first, judge.cameras)  # what the judge reads: external (| wrist)
    reading0 = judge.read(judged_first, judged_first, q0).numpy()  # the first frame against itself: r̂_0 (and d̂_0 ≈ 0)
    readings = []
    t, chunk = 0, 0
    try:  # the twin's renderer (with --wm-condition render) is released however the loop ends
        while t < max_steps:
            n = min(execute, max_steps - t)
            t1 = time.perf_counter()
            images, states = ep.observe()
            actions = ep.act(images, states, t, chunk)
            t2 = time.perf_counter()
            new = ep.step(actions, n)
            t3 = time.perf_counter()
            first = judged_first[:, :, None].expand(-1, -1, n, -1, -1)
            new = ep.select.tensor(new, judge.cameras)
            b, _, k, h, w = new.shape
            r = judge.read(first.permute(0, 2, 1, 3, 4).reshape(b * k, 3, h, w),
                           new.permute(0, 2, 1, 3, 4).reshape(b * k, 3, h, w),
                           q0[:, None].expand(b, k, 3).reshape(b * k, 3)).view(b, k, -1)
            readings.append(r)
            seconds["players"] += t2 - t1
            seconds["world_model"] += t3 - t2
            seconds["judge"] += time.perf_counter() - t3
            t, chunk = t + n, chunk + 1
            progress(f"world model {Path(wm_run).name if wm is not None else wm_run}: {t}/{max_steps} steps of "
                     f"{len(ep.rows)} episodes ({time.perf_counter() - t0:.0f} s)")
        twin_verdicts = ep.twin_verdicts()
    finally:
        ep.close()
    episodes = collect_episodes(ep, torch.cat(readings, dim=1).numpy(), tasks, max_steps, judge.consecutive,
                                reading0, twin_verdicts)
    total = time.perf_counter() - t0
    return PolicyEvaluation(
        env=WORLD_MODEL, seed=seed, per_task=per_task, max_steps=max_steps, tasks=list(tasks), layouts=layouts,
        jitter=jitter, resolution=(height, width), scenes=scenes,
        rows={n: PolicyRow.of(per, tasks) for n, per in episodes.items()}, episodes=episodes,
        runs={n: p.runner.scored for n, p in players.items() if isinstance(p, RunPlayer)},
        learned=[n for n, p in players.items() if p.learned], executed={n: execute for n in players},
        seconds=total, judge=judge_record(judge), wm=str(wm_run), world_model=wm_record,
        sampler=None if wm is None else ep.ro.sampler.settings(), timing={k: round(v, 2) for k, v in seconds.items()},
        episodes_per_minute=round(60 * len(ep.rows) / max(total, 1e-9), 1), frames=first_scene_frames(ep),
        draws=draws)


def first_scene_frames(ep: Episodes) -> dict[str, np.ndarray]:
    """The frames uint8 (1 + T, H, W, 3) of each player's episode on the first scene of each task."""
    video, out, seen = ep.video(), {}, set()
    for i, (name, s) in enumerate(ep.rows):
        if (name, s.scene.task) in seen:
            continue
        seen.add((name, s.scene.task))
        out[f"{name}|{s.scene.task}|{s.scene.index}"] = frames_to_uint8(video[i].permute(1, 0, 2, 3))
    return out


def arm_offsets_mm(readings: np.ndarray, reading0: np.ndarray, commanded: np.ndarray) -> np.ndarray:
    """How far the hand the judge reads is from where the executed actions put it, per frame (mm): the judge's hand
    displacement since the first frame, r̂_t − r̂_0 + d̂_t (ee_t − ee_0 = (r̂_t + obj_t) − (r̂_0 + obj_0)), against
    the commanded displacement (the executed position deltas summed). readings (T, 6), reading0 (6,), commanded (T, 3)."""
    seen = readings[:, :3] - reading0[None, :3] + readings[:, 3:6]
    return 1000.0 * np.linalg.norm(seen - commanded, axis=1)


def commanded_gap_mm(reading0: np.ndarray, commanded: np.ndarray) -> np.ndarray:
    """How far from the task object's start the executed actions put the hand, per frame (mm): the judge's reading of
    the first frame, hand relative to object r̂_0, plus the commanded displacement since — what the actions and the real
    first frame alone say, the world model's frames unused. reading0 (6,), commanded (T, 3) -> (T,)."""
    return 1000.0 * np.linalg.norm(reading0[None, :3] + commanded, axis=1)


def collect_episodes(ep: Episodes, readings: np.ndarray, tasks, max_steps: int, consecutive: int = 1,
                     reading0: Optional[np.ndarray] = None, twin_verdicts: Optional[list[np.ndarray]] = None
                     ) -> dict[str, dict[str, list[EpisodeOutcome]]]:
    """Per player and task the outcomes: success at the first run of ``consecutive`` judged frames, its step, the
    per-frame verdicts and, for the episode's trust score, the predicate's margins and (with ``reading0``, the
    judge's reading of each first frame) the arm's offsets from the commanded actions and the commanded hand's distance
    from the object's start (``frame_gap_mm``) — all of draw 0; with several
    noise draws per episode, every draw's verdict (``draw_success``) and largest margin (``draw_margin``);
    ``twin_verdicts`` (a full-scene twin in the loop, ``Episodes.twin_verdicts``) the twin's own verdict after each
    executed action."""
    out: dict = {name: {task: [] for task in tasks} for name in ep.players}
    commanded = np.concatenate(ep.commanded, axis=1) if ep.commanded else None
    several = max(ep.draw, default=0) > 0
    for i, (name, s) in enumerate(ep.rows):
        verdicts = frame_verdicts(s.task, readings[i])  # frames 1 … T
        hit = first_success(verdicts, consecutive)
        margin = np.round(decision_margin(s.task, readings[i]), 4).tolist()
        if ep.draw[i] > 0:  # a later draw of the episode just collected (the draws of a start frame are together)
            last = out[name][s.scene.task][-1]
            last.draw_success.append(hit is not None)
            last.draw_margin.append(max(margin))
            continue
        arm = (np.round(arm_offsets_mm(readings[i], reading0[i], commanded[i]), 1).tolist()
               if reading0 is not None and commanded is not None else None)
        gap = (np.round(commanded_gap_mm(reading0[i], commanded[i]), 1).tolist()
               if reading0 is not None and commanded is not None else None)
        out[name][s.scene.task].append(EpisodeOutcome(s.scene.index, hit is not None,
                                                      hit + 1 if hit is not None else max_steps,
                                                      frame_judged=verdicts.tolist(), frame_margin=margin,
                                                      frame_arm_mm=arm, frame_gap_mm=gap,
                                                      draw_success=[hit is not None] if several else None,
                                                      draw_margin=[max(margin)] if several else None,
                                                      twin_verdicts=None if twin_verdicts is None
                                                      else [bool(v) for v in twin_verdicts[i]]))
    return out
