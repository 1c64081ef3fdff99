"""How far a world model's verdicts on policies can be trusted: agreement with the simulator, as the field reports it.

    simforcing policy agreement --sim SIM_EVAL --wm simforcing=WM_EVAL sft=WM_EVAL2 copy-first=WM_EVAL3 --out OUT

Inputs are ``policy eval`` folders (``policy.closed_loop.results.PolicyEvaluation``): the simulator's (``--env synthetic
--judge J``: its episodes also carry the judge's verdicts on the simulator's own frames) and one per world model
(``--env world-model``). They are compared only when they match (:func:`check_matching`): the same scenes (dataset seed,
layouts, jitter, step limit, frame size, scene indices), the same policies — by what they evaluated (run folder,
checkpoint and step), not by their names — with the same actions executed per chunk, the same tasks and episodes,
and the same judge; anything else is refused with the difference named. Reported (``OUT/agreement.json``,
``agreement.md``, ``scatter.png``; ``policy.closed_loop.results.AgreementResult``):

- per policy: success in the simulator and inside each world model, 95 % Wilson intervals;
- across policies: Pearson and Spearman correlation of the average success and MMRV (SPEC §10: the mean over
  policies of the largest success gap among the pairs the world model orders differently from the simulator, strict
  comparisons), over all policies and over the learned ones alone, each with a 95 % bootstrap interval — the scenes
  resampled with replacement per task, the same draw for every policy and environment (the policies are fixed; the
  uncertainty is the finite scene set);
- per episode: how often the world model's verdict equals the simulator's on the same scene and policy;
- the judge: on the simulator's own frames, precision / recall / Cohen's κ against MuJoCo's verdict per task, per
  frame and per episode (the harness check: near perfect, or the rest means little);
- each world model against the simulator's frames through the same judge (``vs_judged_simulator``): the judge's
  errors held fixed, what remains is the world model's own disagreement;
- with ``--reference NAME`` (one of the world models, e.g. a few-step student's teacher), every other world model
  against it on the same episodes (``vs_reference``): Pearson / Spearman / MMRV of its success against the
  reference's, the share of episodes with the reference's verdict, and the paired differences of its agreement with
  the simulator (Pearson and MMRV minus the reference's) with 95 % intervals over the same scene draws — whether a
  cheaper world model ranks policies as well as the one it replaces, with the scene noise they share cancelled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import numpy as np

from simforcing.config import ConfigError
from simforcing.policy.closed_loop.results import (ENV_NAMES, SIMULATOR, WORLD_MODEL, AgreementResult, EpisodeOutcome,
                                                   JudgeHeldFixed, JudgeRecord, PolicyEvaluation, RankingStats, Rate,
                                                   ReferenceComparison, same_judge)
from simforcing.policy.closed_loop.tables import agreement_markdown
from simforcing.runs.scored import ScoredRun
from simforcing.utils import atomic_write_json, atomic_write_text

JUDGE_ON_SIM = "simulator frames through the judge"


# ----------------------------------------------------------------------------------------------------------------------
# Statistics
# ----------------------------------------------------------------------------------------------------------------------


def mmrv(real: np.ndarray, model: np.ndarray) -> float:
    """Mean maximum rank violation (SPEC §10): (1/N) Σ_i max_j |R_i − R_j| · 1[(S_i > S_j) ≠ (R_i > R_j)]."""
    r, s = np.asarray(real, float), np.asarray(model, float)
    viol = (s[:, None] > s[None, :]) != (r[:, None] > r[None, :])
    gaps = np.abs(r[:, None] - r[None, :]) * viol
    return float(gaps.max(axis=1).mean()) if len(r) else float("nan")


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson of the ranks, ties at their average rank."""
    from scipy.stats import rankdata  # not at the top: reading an agreement needs no scipy

    return pearson(rankdata(np.asarray(x, float)), rankdata(np.asarray(y, float)))


# ----------------------------------------------------------------------------------------------------------------------
# What may be compared
# ----------------------------------------------------------------------------------------------------------------------

SCENE_SETTINGS = ("seed", "per_task", "max_steps", "tasks", "layouts", "jitter", "resolution", "scenes")


def read_eval(folder: str | Path, what: str, env: str) -> PolicyEvaluation:
    """FOLDER/eval.json as a policy evaluation made in ``env``, or a ConfigError naming ``what`` (the flag), the file
    and what it holds instead (another kind of result, or an evaluation in the other environment)."""
    ev = PolicyEvaluation.read(folder, what)
    if ev.env != env:
        raise ConfigError(f"{what}: {Path(folder) / 'eval.json'} is {ENV_NAMES.get(ev.env, repr(ev.env))}; expected "
                          f"{ENV_NAMES[env]} here")
    return ev


def _identity(rec: Optional[ScoredRun]) -> Optional[tuple]:
    """What a learned player evaluated: its run folder (recorded absolute), its checkpoint's folder name in that run
    and its step. The checkpoint is recorded as the evaluation was given it — relative to the working directory of
    the time (`make demo`'s ``runs/demo/...``) or absolute — so two evaluations of one checkpoint made from different
    directories compare by its name, not by that spelling."""
    if rec is None:
        return None
    return rec.run, None if rec.checkpoint is None else Path(rec.checkpoint).name, rec.step


def scene_differences(a: PolicyEvaluation, b: PolicyEvaluation,
                      settings: tuple[str, ...] = SCENE_SETTINGS) -> list[str]:
    """The scene ``settings`` in which two evaluations differ, each as "SETTING A here, B there"."""
    def norm(v):
        return list(v) if isinstance(v, tuple) else v

    return [f"{k} {norm(getattr(a, k))!r} here, {norm(getattr(b, k))!r} there" for k in settings
            if norm(getattr(a, k)) != norm(getattr(b, k))]


def policy_differences(a: PolicyEvaluation, b: PolicyEvaluation, other: str, players: Optional[list[str]] = None,
                       episodes: bool = True) -> list[str]:
    """How the policies two evaluations scored differ: a policy in one only, a name that scored another run (folder,
    checkpoint, step), learned in one only, another number of actions executed per chunk, other episodes.
    ``players``: only these of ``a`` (more policies in ``b`` are no difference); ``episodes`` False: the episodes'
    scenes are not compared."""
    out = []
    names = list(a.rows) if players is None else list(players)
    for p in names:
        if p not in b.rows:
            out.append(f"policy {p!r} is evaluated here but not in {other}")
    for p in b.rows if players is None else ():
        if p not in a.rows:
            out.append(f"policy {p!r} is evaluated in {other} but not here")
    for p in (p for p in names if p in b.rows):
        if (p in a.learned) != (p in b.learned):
            out.append(f"policy {p!r} is a learned run in one evaluation and a baseline in the other")
        elif _identity(a.runs.get(p)) != _identity(b.runs.get(p)):
            out.append(f"policy {p!r} scored {_identity(a.runs.get(p))} here and {_identity(b.runs.get(p))} in "
                       f"{other} (run folder, checkpoint, step)")
        elif p in a.learned and a.executed.get(p) != b.executed.get(p):
            out.append(f"policy {p!r} executed {a.executed.get(p)} actions per chunk here and {b.executed.get(p)} in "
                       f"{other}")
        for t in a.tasks if episodes else ():
            got = [[o.scene for o in ev.episodes.get(p, {}).get(t, [])] for ev in (a, b)]
            if got[0] != a.scenes.get(t) or got[1] != b.scenes.get(t):
                out.append(f"policy {p!r}, task {t}: episodes on scenes {got[0]} here and {got[1]} in {other}; "
                           f"expected {a.scenes.get(t)}")
    return out


def check_matching(sim: PolicyEvaluation, wms: dict[str, PolicyEvaluation], sim_what: str = "--sim") -> None:
    """A ConfigError naming the first world-model evaluation that does not match the simulator's (scenes, policies,
    tasks, episodes, judge: the module docstring) and every difference; nothing when all match."""
    judges = {name: w.judge for name, w in wms.items()}
    if sim.judge_validation is not None and sim.judge is None:
        raise ConfigError(f"{sim_what}: the simulator evaluation carries a judge's verdicts but does not record which "
                          "judge (written by an earlier simforcing); run `simforcing policy eval --judge J` again")
    for name, w in wms.items():
        what = f"--wm {name}"
        diffs = [f"scenes: {d}" for d in scene_differences(w, sim)] + policy_differences(w, sim, f"{sim_what}")
        if w.judge is None:
            diffs.append("it records no judge (written by an earlier simforcing; run `policy eval --env world-model` "
                         "again)")
        elif sim.judge is not None and not same_judge(w.judge, sim.judge):
            diffs.append(f"judged by another judge than the simulator evaluation's (judge {_judge_name(w.judge)} "
                         f"here, {_judge_name(sim.judge)} in {sim_what})")
        else:
            first = next(iter(judges))
            if not same_judge(w.judge, judges[first]):
                diffs.append(f"judged by another judge than --wm {first} ({_judge_name(w.judge)} here, "
                             f"{_judge_name(judges[first])} there)")
        if diffs:
            raise ConfigError(f"{what}: this evaluation does not match the simulator evaluation ({sim_what}) — "
                              + "; ".join(diffs) + ". Agreement is computed over matching evaluations only: evaluate "
                              "the same policies on the same scenes with the same judge in every environment")


def _judge_json(rec: Optional[JudgeRecord]) -> Optional[dict]:
    """The judge as ``matched`` holds it (agreement.json's record of what every evaluation shared)."""
    return None if rec is None else rec.to_json()


def _judge_name(rec: Optional[JudgeRecord]) -> str:
    if rec is None:
        return "none"
    return f"weights {rec.weights_sha256[:12]}" if rec.weights_sha256 else f"fitted on {rec.benchmark}"


def merge_evals(evals: list[PolicyEvaluation], what: str = "--sim") -> PolicyEvaluation:
    """Simulator evaluations of disjoint players on the same scenes with the same judge (e.g. one process per group)
    as one."""
    first = evals[0]
    out = PolicyEvaluation(**{**first.__dict__, "rows": dict(first.rows), "episodes": dict(first.episodes),
                              "runs": dict(first.runs), "learned": list(first.learned),
                              "executed": dict(first.executed)})
    for i, e in enumerate(evals[1:], 1):
        diffs = [f"scenes: {d}" for d in scene_differences(e, first)]
        if not same_judge(e.judge, first.judge):
            diffs.append("another judge (or none)")
        diffs += [f"policy {p!r} is in more than one" for p in e.rows if p in out.rows]
        if diffs:
            raise ConfigError(f"{what}: the simulator evaluation #{i + 1} does not match the first: " + "; ".join(diffs)
                              + "; evaluate disjoint policies with the same --per-task, --layouts, --jitter, "
                              "--max-steps, --scene-seed and --judge")
        out.rows.update(e.rows)
        out.episodes.update(e.episodes)
        out.runs.update(e.runs)
        out.executed.update(e.executed)
        out.learned += e.learned
    if len(evals) > 1:
        from simforcing.policy.judge.validation import judge_validation

        out.judge_validation = judge_validation(out.episodes, list(out.tasks))
    return out


# ----------------------------------------------------------------------------------------------------------------------
# The comparison
# ----------------------------------------------------------------------------------------------------------------------


def simulator_verdict(o: EpisodeOutcome) -> bool:
    return o.success


def judged_verdict(o: EpisodeOutcome) -> bool:
    """The judge's verdict on the simulator's own frames (a simulator evaluation made with a judge)."""
    return bool(o.judged)


def outcome_matrix(ev: PolicyEvaluation, players: list[str], tasks: list[str],
                   verdict: Callable[[EpisodeOutcome], bool] = simulator_verdict) -> tuple[np.ndarray, list]:
    """Success 0/1 (players, scenes) by ``verdict`` on each outcome, the scenes in a fixed order: the columns are
    [(task, scene index)]."""
    scenes = [(t, o.scene) for t in tasks for o in ev.episodes[players[0]][t]]
    m = np.zeros((len(players), len(scenes)))
    for i, p in enumerate(players):
        got = {(t, o.scene): verdict(o) for t in tasks for o in ev.episodes[p][t]}
        m[i] = [got[k] for k in scenes]
    return m, scenes


def average_success(m: np.ndarray, scenes: list[tuple[str, int]], tasks: list[str], cols=None) -> np.ndarray:
    """Per player the mean over tasks of the task's success rate (the table's "average"), on columns ``cols``."""
    cols = np.arange(m.shape[1]) if cols is None else np.asarray(cols)
    task_of = np.array([tasks.index(t) for t, _ in scenes])[cols]
    sub = m[:, cols]
    return np.mean([sub[:, task_of == k].mean(axis=1) for k in range(len(tasks))], axis=0)


def ranking_stats(sim: np.ndarray, wm: np.ndarray, scenes, tasks, idx: list[int], n_boot: int = 2000,
                  seed: int = 0) -> RankingStats:
    """Pearson, Spearman and MMRV of the players ``idx`` with 95 % bootstrap intervals (scenes resampled per task),
    the success averaged over ``tasks`` (all of the scenes' tasks, or some of them)."""
    keep = [j for j, (t, _) in enumerate(scenes) if t in tasks]
    sim, wm, scenes = sim[:, keep], wm[:, keep], [scenes[j] for j in keep]

    def stats(cols=None) -> tuple[float, float, float]:
        r = average_success(sim[idx], scenes, tasks, cols)
        s = average_success(wm[idx], scenes, tasks, cols)
        return pearson(r, s), spearman(r, s), mmrv(r, s)

    point = stats()
    boot = np.array([stats(cols) for cols in scene_draws(scenes, tasks, n_boot, seed)])
    return RankingStats(len(idx), point[0], _ci95(boot[:, 0]), point[1], _ci95(boot[:, 1]), point[2],
                        _ci95(boot[:, 2]))


def scene_draws(scenes: list[tuple[str, int]], tasks: list[str], n_boot: int, seed: int = 0) -> list[np.ndarray]:
    """``n_boot`` bootstrap draws of the scene columns, resampled with replacement within each task (the same draws
    for every statistic computed with the same seed)."""
    rng = np.random.default_rng(seed)
    by_task = [np.array([j for j, (t, _) in enumerate(scenes) if t == task]) for task in tasks]
    return [np.concatenate([rng.choice(c, len(c)) for c in by_task]) for _ in range(n_boot)]


def _ci95(values: np.ndarray) -> tuple:
    v = values[~np.isnan(values)]
    return (float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))) if len(v) else (None, None)


def paired_differences(sim: np.ndarray, wm: np.ndarray, ref: np.ndarray, scenes, tasks, idx: list[int],
                       n_boot: int = 2000, seed: int = 0) -> tuple[tuple[float, tuple], tuple[float, tuple]]:
    """(Pearson, MMRV) of ``wm`` against the simulator minus those of ``ref``, for the players ``idx``: the point
    difference and its 95 % interval, both models' statistics computed on the same bootstrap draws of the scenes."""
    def diff(cols=None) -> tuple[float, float]:
        r = average_success(sim[idx], scenes, tasks, cols)
        a, b = average_success(wm[idx], scenes, tasks, cols), average_success(ref[idx], scenes, tasks, cols)
        return pearson(r, a) - pearson(r, b), mmrv(r, a) - mmrv(r, b)

    point = diff()
    boot = np.array([diff(cols) for cols in scene_draws(scenes, tasks, n_boot, seed)])
    return (point[0], _ci95(boot[:, 0])), (point[1], _ci95(boot[:, 1]))


def _rate(row: np.ndarray) -> Rate:
    return Rate.of(int(row.sum()), len(row))


def agreement(sim: PolicyEvaluation, wms: dict[str, PolicyEvaluation], n_boot: int = 2000,
              reference: Optional[str] = None) -> AgreementResult:
    """Everything the module docstring lists, from a simulator evaluation and world-model evaluations by name that
    match (:func:`check_matching`); with ``reference`` (one of ``wms``) every other world model against it."""
    if reference is not None and reference not in wms:
        raise ConfigError(f"--reference: {reference!r} is not one of the world models given with --wm "
                          f"({', '.join(wms)}); name one of them")
    if reference is not None and len(wms) < 2:  # it wrote an empty comparison, exit 0
        raise ConfigError(f"--reference: {reference!r} is the only world model given with --wm: nothing would be "
                          "compared against it; give the world models to compare with it too (--wm NAME=EVAL ...), or "
                          "leave out --reference")
    check_matching(sim, wms)
    tasks, players = list(sim.tasks), list(sim.rows)
    if len(players) < 2:
        raise ConfigError(f"agreement: the evaluations hold {len(players)} policies; expected at least 2 evaluated "
                          "in the simulator and in every world model")
    learned = [i for i, p in enumerate(players) if p in sim.learned]
    everyone = list(range(len(players)))
    sim_m, scenes = outcome_matrix(sim, players, tasks)
    matrices = {name: outcome_matrix(w, players, tasks)[0] for name, w in wms.items()}
    if sim.judge_validation is not None:  # the harness check as one more environment: the simulator's frames judged
        matrices = {JUDGE_ON_SIM: outcome_matrix(sim, players, tasks, judged_verdict)[0], **matrices}

    def ranking(ref: np.ndarray, m: np.ndarray, subset: list[int], only=None) -> Optional[RankingStats]:
        if len(subset) < 2:
            return None
        return ranking_stats(ref, m, scenes, only or tasks, subset, n_boot)

    rank, per_episode = {}, {}
    for name, m in matrices.items():
        rank[name] = {"all": ranking(sim_m, m, everyone), "learned": ranking(sim_m, m, learned),
                      **{f"all, {t} only": ranking(sim_m, m, everyone, [t]) for t in tasks}}
        per_episode[name] = {"all": float((m == sim_m).mean()),
                             **{p: float((m[i] == sim_m[i]).mean()) for i, p in enumerate(players)}}
    alone = {}  # each world model against the simulator's frames through the same judge: the judge's errors held fixed
    if JUDGE_ON_SIM in matrices:
        judged_m = matrices[JUDGE_ON_SIM]
        alone = {name: JudgeHeldFixed(ranking(judged_m, matrices[name], everyone),
                                      ranking(judged_m, matrices[name], learned),
                                      float((matrices[name] == judged_m).mean())) for name in wms}
    vs_ref = {}
    if reference is not None:
        ref_m = matrices[reference]
        for name in wms:
            if name == reference:
                continue
            (dp, dp_ci), (dm, dm_ci) = paired_differences(sim_m, matrices[name], ref_m, scenes, tasks, everyone,
                                                          n_boot)
            vs_ref[name] = ReferenceComparison(reference, ranking(ref_m, matrices[name], everyone),
                                               float((matrices[name] == ref_m).mean()), dp, dp_ci, dm, dm_ci)
    return AgreementResult(
        players=players, learned=[players[i] for i in learned], tasks=tasks, scenes=len(scenes),
        sim={p: _rate(sim_m[i]) for i, p in enumerate(players)},
        envs={name: {p: _rate(m[i]) for i, p in enumerate(players)} for name, m in matrices.items()},
        ranking=rank, episode_agreement=per_episode, judge_validation=sim.judge_validation,
        vs_judged_simulator=alone, n_boot=n_boot, vs_reference=vs_ref,
        world_models={name: w.world_model for name, w in wms.items()},
        matched={**{k: getattr(sim, k) for k in SCENE_SETTINGS}, "judge": _judge_json(next(iter(wms.values())).judge)})


def write_agreement(sim_dirs: list[str | Path], wm_dirs: dict[str, str | Path], out: str | Path,
                    n_boot: int = 2000, video_policy: Optional[str] = None,
                    reference: Optional[str] = None, into: Optional[str | Path] = None) -> AgreementResult:
    """Read the evaluations (the simulator's may be several folders of disjoint players), compute
    :func:`agreement`, write agreement.json / .md, scatter.png and the side-by-side videos of ``video_policy``
    (default: the first learned policy) on the first scene of each task — into ``into`` when given (a staging
    folder that becomes ``out``: the files record their paths under ``out``)."""
    from simforcing.policy.agreement.media import scatter_plot  # matplotlib: only here

    seen = {}
    for d in sim_dirs:  # one evaluation given twice would be refused as overlapping policies: name the folder
        key = Path(d).resolve()
        if key in seen:
            also = "" if str(seen[key]) == str(d) else f" (also as {seen[key]})"
            raise ConfigError(f"--sim: {d} is given twice{also}; give each simulator evaluation once (several only "
                              "for disjoint policies)")
        seen[key] = d
    sim = merge_evals([read_eval(d, "--sim", SIMULATOR) for d in sim_dirs])
    wms = {name: read_eval(d, f"--wm {name}", WORLD_MODEL) for name, d in wm_dirs.items()}
    res = agreement(sim, wms, n_boot, reference)
    player = video_policy or (res.learned or res.players)[0]
    if player not in res.players:
        raise ConfigError(f"--video-policy: {player!r} is not one of the evaluated policies {res.players}")
    out, folder = Path(out), Path(into if into is not None else out)

    def final(path) -> str:  # where a written file will be once ``folder`` is ``out``
        return str(out / Path(path).relative_to(folder))

    res.scatter = final(scatter_plot(res, folder / "scatter.png"))
    res.videos = [final(v) for v in write_episode_videos(sim_dirs, sim, {n: (wm_dirs[n], w) for n, w in wms.items()},
                                                         player, folder)]
    atomic_write_json(folder / "agreement.json", res.to_json())
    atomic_write_text(folder / "agreement.md", agreement_markdown(res) + "\n")
    return res


def write_episode_videos(sim_dirs: list, sim: PolicyEvaluation, wms: dict[str, tuple], player: str,
                         out: Path) -> list[str]:
    """One episode of ``player`` per task, side by side: the simulator, each world model (frames.npz of each
    evaluation folder), each frame marked with the judge's verdict."""
    from simforcing.policy.agreement.media import episode_video

    def frames(folder) -> dict:
        path = Path(folder) / "frames.npz"
        if not path.is_file():
            return {}
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}

    def outcome(ev: PolicyEvaluation, task: str, scene: int) -> EpisodeOutcome:
        return next(o for o in ev.episodes[player][task] if o.scene == scene)

    def verdicts(ev: PolicyEvaluation, task: str, scene: int, offset: int) -> list:
        return [None] * offset + list(outcome(ev, task, scene).frame_judged or [])

    sim_frames, written = {k: v for d in sim_dirs for k, v in frames(d).items()}, []
    wm_frames = {n: frames(d) for n, (d, _) in wms.items()}
    for key, f in sim_frames.items():
        name, task, scene = key.split("|")
        if name != player:
            continue
        panels = {"simulator": (f, verdicts(sim, task, int(scene), 0))}
        for n, (_, ev) in wms.items():
            if key in wm_frames[n]:
                panels[n] = (wm_frames[n][key], verdicts(ev, task, int(scene), 1))
        ok = outcome(sim, task, int(scene)).success
        files = episode_video(out / "videos" / f"{task}_{scene}", panels,
                              f"{player}: {task}, scene {scene} (simulator: {'success' if ok else 'failure'})")
        written.append(str(files.gif))
    return written
