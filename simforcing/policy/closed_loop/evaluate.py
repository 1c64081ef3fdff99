"""Closed-loop evaluation on the synthetic benchmark and the Tab. 5-style table (`simforcing policy eval`).

    ev = evaluate_synthetic({"base": RUN_A, "simforcing": RUN_B}, per_task=10, max_steps=30)
    print(evaluation_markdown(ev))       # policy.closed_loop.tables; ev: a policy.closed_loop.results.PolicyEvaluation

Scenes: the first ``per_task`` episodes of each task (reach, push, grasp) of dataset seed ``EVAL_SEED`` (the policy
dataset's demonstrations come from another seed, so they are held out), in the scene mode the runs were trained on
(``layouts``: the LIBERO-like fixed layouts of ``policy.closed_loop.synthetic``, or every scene its own); the same
scenes, in the same order and with the same action noise per (scene, chunk), for every policy. Each episode runs until
its success predicate holds or ``max_steps`` actions were executed; a policy's chunk is executed for its first
``policy.execute`` actions, then it re-plans. Every table carries the scripted expert (ceiling) and "do nothing"
(floor). Success rates come with 95 % Wilson score intervals (per task over its episodes; the average over tasks with
the interval of the pooled count). With a success judge every episode's frames also go through it: its verdicts beside
MuJoCo's and their agreement (``policy.judge.validation``). The result is a
``policy.closed_loop.results.PolicyEvaluation``; ``eval.json`` records the run folder, checkpoint and step each row
scored (``runs``); a run that was not finished (still training, stopped, failed) is marked in its row and named under
the table.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from simforcing.config import ConfigError
from simforcing.data.paired import to_unit_range
from simforcing.policy.closed_loop.results import SIMULATOR, EpisodeOutcome, JudgeRecord, PolicyEvaluation, PolicyRow
from simforcing.policy.closed_loop.synthetic import TASKS, SyntheticTaskEnv, held_out_scenes
from simforcing.policy.infer import PolicyRunner
from simforcing.policy.judge.success_judge import first_success, frame_verdicts
from simforcing.policy.judge.validation import judge_validation
from simforcing.policy.settings import check_episode_counts
from simforcing.utils import derive_seed

EVAL_SEED = 9000  # dataset seed of the held-out evaluation scenes (synth-policy demonstrations use 100)
EXPERT, FLOOR = "scripted expert (ceiling)", "do nothing (floor)"


@dataclass
class ClosedLoopRun:
    """One episode as :func:`run_episode` ran it: the simulator's verdict, the actions taken (``steps``) and chunks
    planned; recorded, the external camera's frames uint8 (T, H, W, 3) and the truth in the success judge's terms
    (T, 6) from the first frame on."""

    success: bool
    steps: int
    chunks: int
    frames: Optional[np.ndarray] = None
    truth: Optional[np.ndarray] = None


def run_episode(env: SyntheticTaskEnv, chunk_fn: Callable[[SyntheticTaskEnv, int], np.ndarray], max_steps: int,
                execute: int, record: bool = False, tail: int = 0, cameras: int = 1) -> ClosedLoopRun:
    """Act until success or ``max_steps`` actions; ``chunk_fn(env, chunk_index)`` gives the next chunk (k, 7).
    ``record``: also keep the frames (of ``cameras``: the external one, or [external | wrist]) and the truth
    (:class:`ClosedLoopRun`; ``policy.judge.success_judge.true_readings``) and act ``tail`` more steps after a
    success (the verdict stays the first success) — what the judge is validated on."""
    steps, chunk_i, done = 0, 0, None
    frames, truth = ([env.image(cameras)], [env.truth()]) if record else (None, None)
    after = 0
    while steps < max_steps and (done is None or after < tail):
        chunk = np.asarray(chunk_fn(env, chunk_i))[:execute]
        chunk_i += 1
        for a in chunk:
            steps += 1
            hit = env.step(a)
            if record:
                frames.append(env.image(cameras))
                truth.append(env.truth())
            if done is not None:
                after += 1
            elif hit:
                done = ClosedLoopRun(True, steps, chunk_i)
                if not record:
                    return done
            if steps >= max_steps or (done is not None and after >= tail):
                break
    out = done or ClosedLoopRun(False, steps, chunk_i)
    if record:
        out.frames, out.truth = np.stack(frames), np.stack(truth)
    return out


# ----------------------------------------------------------------------------------------------------------------------
# Players: the evaluated policies, acting on a batch of episodes (the simulator runs one, a world model all at once)
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scene:
    """An evaluation scene as an episode starts: what every player may know before acting (``index`` of dataset
    ``seed``, its task and instruction, the scripted expert's actions, the controller's initial gripper command)."""

    seed: int
    index: int
    task: str
    instruction: str
    expert_actions: np.ndarray  # (max_steps, 7)
    grip0: float

    @property
    def key(self) -> tuple:
        return (self.task, self.index)


def scene_of(env: SyntheticTaskEnv) -> Scene:
    return Scene(env.seed, env.index, env.task.kind, env.instruction, env.expert_actions, env.target.grip)


class Player:
    """A policy in closed loop: ``chunk(images, states, scenes, steps, chunk_index) -> (B, A, 7)`` raw actions for a
    batch of episodes (images uint8 (H, cameras·W, 3) each, states (B, 7), each episode's step count); the first
    ``execute`` are executed, then it plans again."""

    name: str = "player"
    execute: int = 1
    cameras: int = 1
    learned: bool = False
    span: int = 8  # actions per chunk
    looks: bool = True  # reads its images; the scripted players do not, so the simulator renders none for them

    def chunk(self, images, states: np.ndarray, scenes: list[Scene], steps: list[int], chunk_index: int) -> np.ndarray:
        raise NotImplementedError

    def env_chunk(self, scene: Scene) -> Callable[[SyntheticTaskEnv, int], np.ndarray]:
        """The simulator's chunk function (:func:`run_episode`) for one episode of ``scene``."""
        def chunk(env: SyntheticTaskEnv, i: int) -> np.ndarray:
            # a frame costs ~18 ms on a CPU (the physics of a step ~3): none for a player that does not look
            images = [env.image(self.cameras) if self.looks else None]
            return self.chunk(images, env.state()[None], [scene], [env.t], i)[0]

        return chunk


class ExpertPlayer(Player):
    """The scripted expert, replayed open loop; with ``noise`` σ > 0 every action's position delta gets N(0, σ²)
    per axis (metres), drawn from (seed, scene, step): the same noise wherever the episode runs."""

    looks = False

    def __init__(self, noise: float = 0.0, seed: int = EVAL_SEED):
        self.noise, self.seed = float(noise), seed
        self.name = EXPERT if noise == 0 else f"scripted expert, noise {100 * noise:g} cm/step"

    def chunk(self, images, states, scenes, steps, chunk_index):
        out = np.zeros((len(scenes), self.span, 7))
        for b, (sc, t) in enumerate(zip(scenes, steps)):
            for k in range(self.span):
                a = sc.expert_actions[min(t + k, len(sc.expert_actions) - 1)].astype(np.float64).copy()
                if self.noise:
                    a[:3] += np.random.default_rng(derive_seed(self.seed, "expert-noise", *sc.key, t + k)).normal(
                        0.0, self.noise, 3)
                out[b, k] = a
        return out


class IdlePlayer(Player):
    """Do nothing: the target stays, the gripper as it started."""

    name = FLOOR
    looks = False

    def chunk(self, images, states, scenes, steps, chunk_index):
        out = np.zeros((len(scenes), self.span, 7))
        out[:, :, 6] = [[sc.grip0] for sc in scenes]
        return out


class RunPlayer(Player):
    """A trained policy run; its noise for chunk i of a scene is drawn from (seed, scene, i), as in every
    evaluation of it."""

    learned = True

    def __init__(self, name: str, runner: PolicyRunner, seed: int = EVAL_SEED, execute: int | None = None):
        self.name, self.runner, self.seed = name, runner, seed
        self.execute = execute if execute is not None else runner.cfg.policy.execute
        self.cameras = runner.cfg.policy.cameras
        self.span = runner.cfg.data.actions_per_window

    def chunk(self, images, states, scenes, steps, chunk_index):
        gens = [torch.Generator().manual_seed(derive_seed(self.seed, "policy-noise", *sc.key, chunk_index)
                                              & 0x7FFFFFFF) for sc in scenes]
        return self.runner.act_batch(images, states, [sc.instruction for sc in scenes], gens)


def training_scene_mode(cfg) -> tuple[int, float] | None:
    """(layouts, jitter) of the `data synth-policy` dataset a policy was trained on (``cfg.data.root``); (0, 0.03) for
    a synthetic dataset written before layouts existed; None when the dataset is not a synthetic one or is gone."""
    path = Path(cfg.data.root or "") / "meta" / "info.json"
    try:
        synth = json.loads(path.read_text()).get("synth")
    except (OSError, ValueError):
        return None
    if not isinstance(synth, dict):
        return None
    return int(synth.get("layouts", 0)), float(synth.get("jitter", 0.03))


def scene_mode(cfgs: dict, layouts: int | None, jitter: float | None,
               progress: Callable[[str], None] = print) -> tuple[int, float]:
    """The evaluation scenes' (layouts, jitter): the explicit values where given, else those of the runs' training
    data (:func:`training_scene_mode`; ConfigError when the runs were trained in different modes), else (0, 0.03).
    Evaluating a run in another mode than it was trained in is allowed (a generalisation test) and said."""
    trained = {name: m for name, cfg in cfgs.items() if (m := training_scene_mode(cfg)) is not None}
    if layouts is None:
        modes = set(trained.values())
        if len(modes) > 1:
            raise ConfigError("--layouts: the runs were trained on datasets of different scene modes ("
                              + ", ".join(f"{n}: layouts {m[0]}" for n, m in trained.items())
                              + "); pass --layouts K [--jitter M] to choose the evaluation scenes")
        layouts, jitter_default = modes.pop() if modes else (0, 0.03)
        jitter = jitter_default if jitter is None else jitter
    jitter = 0.03 if jitter is None else float(jitter)
    if layouts < 0 or not 0 <= jitter <= 0.1:
        raise ConfigError(f"--layouts {layouts} --jitter {jitter}: expected layouts >= 0 and 0 <= jitter <= 0.1 m")
    for name, m in trained.items():
        if m[0] != layouts or (layouts and abs(m[1] - jitter) > 1e-12):
            progress(f"note: {name} was trained on scenes with layouts {m[0]} (jitter {m[1]}); evaluating on layouts "
                     f"{layouts} (jitter {jitter})")
    return int(layouts), jitter


def make_players(runs: dict[str, str | Path], baselines: bool = True, expert_noise=(), seed: int = EVAL_SEED,
                 device="cpu", execute: int | None = None) -> dict[str, Player]:
    """The evaluated players by name: the scripted expert (ceiling) and do-nothing (floor) with ``baselines``, the
    expert at each action-noise level of ``expert_noise`` (m per step), and each policy run (name -> folder)."""
    players: dict[str, Player] = {}
    if baselines:
        players[EXPERT], players[FLOOR] = ExpertPlayer(0.0, seed), IdlePlayer()
    for sigma in expert_noise:
        if not 0 < float(sigma) <= 0.2:
            raise ConfigError(f"--expert-noise: got {sigma}; expected noise levels in (0, 0.2] metres per step")
        p = ExpertPlayer(float(sigma), seed)
        players[p.name] = p
    for name, run in runs.items():
        players[name] = RunPlayer(name, PolicyRunner.load(run, device), seed, execute)
    return players


def judge_record(judge) -> JudgeRecord:
    """What an evaluation records about the success judge that judged it: the benchmark it was fitted on, its
    consecutive-frames rule and a digest of its weights (two evaluations were judged alike iff these agree,
    :func:`same_judge`), and where it was loaded from (its folder and a digest of its files) when it was."""
    h = hashlib.sha256()
    for name, t in sorted(judge.net.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    src = judge.source
    return JudgeRecord(judge.benchmark, judge.consecutive, h.hexdigest(), src and src.path, src and src.sha256)



def judge_episode(judge, outcome: ClosedLoopRun, task, q0: np.ndarray, scene: int) -> EpisodeOutcome:
    """The judge's verdicts on a recorded simulator episode (``q0``: the hand's initial position): per frame
    (against the simulator's own predicate on its state) and for the episode (its first success within its
    steps)."""
    frames = to_unit_range(torch.from_numpy(outcome.frames).permute(3, 0, 1, 2)[None])
    readings = judge.read_video(frames, torch.as_tensor(q0)[None])[0].numpy()  # (T, 6)
    truth = outcome.truth
    judged, true = frame_verdicts(task, readings), frame_verdicts(task, truth)
    limit = outcome.steps + 1 if not outcome.success else len(judged)
    hit = first_success(judged[:limit], judge.consecutive)
    error_mm = np.rint(1000 * np.abs(readings - truth)).astype(int)  # (T, 6): |judge − truth| per output, millimetres
    return EpisodeOutcome(scene, outcome.success, outcome.steps, outcome.chunks, hit is not None, hit,
                          judged.tolist(), true.tolist(), error_mm.tolist())


def simulate_player(player: Player, scenes: dict[str, list[int]], seed: int, max_steps: int, size: tuple[int, int],
                    mode: tuple[int, float], judge=None, judge_tail: int = 4
                    ) -> tuple[dict[str, list[EpisodeOutcome]], dict[str, np.ndarray]]:
    """One player's episodes on every scene (task -> indices) in the simulator at frame ``size`` (H, W) and scene
    ``mode`` (layouts, jitter) -> its outcomes per task, and with a ``judge`` the frames of its first scene of each
    task by "player|task|scene"."""
    episodes, kept = {}, {}
    for task, indices in scenes.items():
        outcomes = []
        for j, idx in enumerate(indices):
            env = SyntheticTaskEnv(seed, idx, max_steps, *size, *mode)
            try:
                q0 = env.state()[:3].copy()
                o = run_episode(env, player.env_chunk(scene_of(env)), max_steps, player.execute,
                                record=judge is not None, tail=judge_tail,
                                cameras=judge.cameras if judge is not None else 1)
                if judge is None:
                    outcomes.append(EpisodeOutcome(idx, o.success, o.steps, o.chunks))
                    continue
                if j == 0:
                    kept[f"{player.name}|{task}|{idx}"] = o.frames
                outcomes.append(judge_episode(judge, o, env.task, q0, idx))
            finally:
                env.close()
        episodes[task] = outcomes
    return episodes, kept


def evaluate_synthetic(runs: dict[str, str | Path], per_task: int = 10, max_steps: int = 30, seed: int = EVAL_SEED,
                       tasks=TASKS, baselines: bool = True, device="cpu", progress: Callable[[str], None] = print,
                       height: int | None = None, width: int | None = None, execute: int | None = None,
                       layouts: int | None = None, jitter: float | None = None, expert_noise=(),
                       judge=None, judge_tail: int = 4) -> PolicyEvaluation:
    """Closed-loop success of each run (name -> policy run folder), of the expert / floor rows and of the noisy
    experts (``expert_noise``) on the same held-out scenes. ``execute`` overrides the runs' ``policy.execute``;
    ``layouts``/``jitter``: the scene mode (:func:`scene_mode`). With a success ``judge``
    (``policy.judge.success_judge``) every episode's external frames also go through it: its verdicts beside the
    simulator's and the judge's validation."""
    check_episode_counts(per_task, max_steps, execute)
    players = make_players(runs, baselines, expert_noise, seed, device, execute)
    cfgs = {n: p.runner.cfg for n, p in players.items() if isinstance(p, RunPlayer)}
    layouts, jitter = scene_mode(cfgs, layouts, jitter, progress)
    scenes = held_out_scenes(seed, per_task, max_steps, tasks, layouts=layouts, jitter=jitter)
    any_cfg = next(iter(cfgs.values())) if cfgs else None
    height = height or (any_cfg.data.height if any_cfg else 32)
    width = width or (any_cfg.data.width // any_cfg.policy.cameras if any_cfg else 48)
    if judge is not None:
        judge.check_benchmark(height, width, layouts, "the simulator evaluation")
    episodes, rows, kept = {}, {}, {}  # kept: the first scene of each task per player, its frames (with a judge)
    t0 = time.perf_counter()
    for name, player in players.items():
        t_run = time.perf_counter()
        episodes[name], frames = simulate_player(player, {t: scenes[t] for t in tasks}, seed, max_steps,
                                                 (height, width), (layouts, jitter), judge, judge_tail)
        kept.update(frames)
        rows[name] = PolicyRow.of(episodes[name], tasks, time.perf_counter() - t_run)
        progress(f"closed loop {name}: " + ", ".join(f"{t} {r.successes}/{r.episodes}"
                                                      for t, r in rows[name].tasks.items())
                 + f" ({rows[name].seconds:.0f} s)")
    return PolicyEvaluation(
        env=SIMULATOR, seed=seed, per_task=per_task, max_steps=max_steps, tasks=list(tasks), layouts=layouts,
        jitter=jitter, resolution=(height, width), scenes=scenes, rows=rows, episodes=episodes,
        runs={n: p.runner.scored for n, p in players.items() if isinstance(p, RunPlayer)},  # folder, checkpoint, step
        learned=[n for n, p in players.items() if p.learned], executed={n: p.execute for n, p in players.items()},
        seconds=time.perf_counter() - t0, judge=None if judge is None else judge_record(judge),
        judge_validation=None if judge is None else judge_validation(episodes, list(tasks)), frames=kept)
