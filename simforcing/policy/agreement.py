"""How far a world model's verdicts on policies can be trusted: agreement with the simulator, as the field reports it.

    simforcing policy agreement --sim SIM_EVAL --wm simforcing=WM_EVAL sft=WM_EVAL2 copy-first=WM_EVAL3 --out OUT

Inputs are ``policy eval`` folders on the same scenes: the simulator's (``--env synthetic --judge J``: its episodes
also carry the judge's verdicts on the simulator's own frames) and one per world model (``--env world-model``).
Reported (``OUT/agreement.json``, ``agreement.md``, ``scatter.png``):

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
  errors held fixed, what remains is the world model's own disagreement.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np

from simforcing.config import ConfigError
from simforcing.policy.evaluate import wilson
from simforcing.policy.judge import OUTPUTS, confusion
from simforcing.utils import atomic_write_json, atomic_write_text, fmt_num

JUDGE_ON_SIM = "simulator frames through the judge"


def read_eval(folder: str | Path, what: str) -> dict:
    path = Path(folder) / "eval.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{what}: {path} cannot be read ({e}); expected a folder written by `simforcing policy "
                          "eval`") from e


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
    def ranks(v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, float)
        order = np.argsort(v, kind="mergesort")
        r = np.empty(len(v))
        r[order] = np.arange(len(v))
        for u in np.unique(v):
            r[v == u] = r[v == u].mean()
        return r

    return pearson(ranks(x), ranks(y))


def outcome_matrix(res: dict, players: list[str], tasks: list[str]) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """Success (players × scenes) 0/1 in a fixed scene order [(task, scene index)]."""
    scenes = [(t, o["scene"]) for t in tasks for o in res["episodes"][players[0]][t]]
    m = np.zeros((len(players), len(scenes)))
    for i, p in enumerate(players):
        got = {(t, o["scene"]): o["success"] for t in tasks for o in res["episodes"][p][t]}
        m[i] = [got[k] for k in scenes]
    return m, scenes


def average_success(m: np.ndarray, scenes: list[tuple[str, int]], tasks: list[str], cols=None) -> np.ndarray:
    """Per player the mean over tasks of the task's success rate (the table's "average"), on columns ``cols``."""
    cols = np.arange(m.shape[1]) if cols is None else np.asarray(cols)
    task_of = np.array([tasks.index(t) for t, _ in scenes])[cols]
    sub = m[:, cols]
    return np.mean([sub[:, task_of == k].mean(axis=1) for k in range(len(tasks))], axis=0)


def ranking_stats(sim: np.ndarray, wm: np.ndarray, scenes, tasks, idx: list[int], n_boot: int = 2000,
                  seed: int = 0) -> dict:
    """Pearson, Spearman and MMRV of the players ``idx`` with 95 % bootstrap intervals (scenes resampled per task),
    the success averaged over ``tasks`` (all of the scenes' tasks, or some of them)."""
    keep = [j for j, (t, _) in enumerate(scenes) if t in tasks]
    sim, wm, scenes = sim[:, keep], wm[:, keep], [scenes[j] for j in keep]

    def stats(cols=None) -> tuple[float, float, float]:
        r = average_success(sim[idx], scenes, tasks, cols)
        s = average_success(wm[idx], scenes, tasks, cols)
        return pearson(r, s), spearman(r, s), mmrv(r, s)

    point = stats()
    rng = np.random.default_rng(seed)
    by_task = [np.array([j for j, (t, _) in enumerate(scenes) if t == task]) for task in tasks]
    boot = np.array([stats(np.concatenate([rng.choice(c, len(c)) for c in by_task])) for _ in range(n_boot)])

    def ci(k: int) -> list:
        v = boot[:, k][~np.isnan(boot[:, k])]
        return [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))] if len(v) else [None, None]

    return {"n_policies": len(idx), "pearson": point[0], "pearson_ci95": ci(0), "spearman": point[1],
            "spearman_ci95": ci(1), "mmrv": point[2], "mmrv_ci95": ci(2)}


def judge_validation(sim: dict, tasks: list[str]) -> Optional[dict]:
    """The judge on the simulator's own frames against MuJoCo's verdicts, per task: per frame and per episode."""
    out = {}
    for task in tasks + ["all"]:
        eps = [o for per in sim["episodes"].values() for t, os_ in per.items() if task in (t, "all") for o in os_]
        if not eps or "judged" not in eps[0]:
            return None
        fj = [v for o in eps for v in o["frame_judged"]]
        ft = [v for o in eps for v in o["frame_true"]]
        out[task] = {"frame": confusion(fj, ft), "episode": confusion([o["judged"] for o in eps],
                                                                      [o["success"] for o in eps])}
        errors = [row for o in eps for row in o.get("frame_error_mm", ())]
        if errors:  # the judge's readings against the simulator's truth: median |error| per output, every frame
            med = np.median(np.asarray(errors, float), axis=0) / 10
            out[task]["median_error_cm"] = {k: round(float(v), 2) for k, v in zip(OUTPUTS, med)}
    return out


# ----------------------------------------------------------------------------------------------------------------------
# The comparison
# ----------------------------------------------------------------------------------------------------------------------


def agreement(sim: dict, wms: dict[str, dict], n_boot: int = 2000) -> dict:
    """Everything the module docstring lists, from a simulator evaluation and world-model evaluations by name."""
    tasks = list(sim["tasks"])
    players = [p for p in sim["rows"] if all(p in w["rows"] for w in wms.values())]
    if len(players) < 2:
        raise ConfigError(f"agreement: the evaluations share {len(players)} policies; expected at least 2 evaluated "
                          "in the simulator and in every world model")
    for name, w in wms.items():
        if w["scenes"] != sim["scenes"] or w["seed"] != sim["seed"]:
            raise ConfigError(f"--wm {name}: its scenes are not the simulator evaluation's (other --per-task, "
                              "--layouts or seed); evaluate both on the same scenes")
    learned = [i for i, p in enumerate(players) if p in sim.get("learned", [])]
    sim_m, scenes = outcome_matrix(sim, players, tasks)
    envs = dict(wms)
    judged = judge_validation(sim, tasks)
    if judged is not None:  # the harness check as one more "world model": the simulator's frames, the judge's verdicts
        envs = {JUDGE_ON_SIM: {"episodes": {p: {t: [dict(o, success=o["judged"]) for o in sim["episodes"][p][t]]
                                                for t in tasks} for p in players}}, **envs}
    rows, rank, per_episode = {}, {}, {}
    for name, w in envs.items():
        m, _ = outcome_matrix(w, players, tasks)
        rows[name] = {p: _rate(m[i]) for i, p in enumerate(players)}
        everyone = list(range(len(players)))
        rank[name] = {"all": ranking_stats(sim_m, m, scenes, tasks, everyone, n_boot),
                      "learned": ranking_stats(sim_m, m, scenes, tasks, learned, n_boot) if len(learned) > 1 else None,
                      **{f"all, {t} only": ranking_stats(sim_m, m, scenes, [t], everyone, n_boot) for t in tasks}}
        per_episode[name] = {"all": float((m == sim_m).mean()),
                             **{p: float((m[i] == sim_m[i]).mean()) for i, p in enumerate(players)}}
    alone = {}  # each world model against the simulator's frames through the same judge: the judge's errors held fixed
    if judged is not None:
        judged_m, _ = outcome_matrix(envs[JUDGE_ON_SIM], players, tasks)
        for name, w in wms.items():
            m, _ = outcome_matrix(w, players, tasks)
            alone[name] = {"all": ranking_stats(judged_m, m, scenes, tasks, list(range(len(players))), n_boot),
                           "learned": ranking_stats(judged_m, m, scenes, tasks, learned, n_boot)
                           if len(learned) > 1 else None,
                           "episodes_agreeing": float((m == judged_m).mean())}
    return {"players": players, "learned": [players[i] for i in learned], "tasks": tasks,
            "scenes": len(scenes), "sim": {p: _rate(sim_m[i]) for i, p in enumerate(players)}, "envs": rows,
            "ranking": rank, "episode_agreement": per_episode, "judge_validation": judged,
            "vs_judged_simulator": alone, "n_boot": n_boot}


def _rate(row: np.ndarray) -> dict:
    k, n = int(row.sum()), len(row)
    lo, hi = wilson(k, n)
    return {"successes": k, "episodes": n, "rate": k / n if n else None, "ci95": [lo, hi]}


def _pct(r: dict) -> str:
    return f"{100 * r['rate']:.0f} [{100 * r['ci95'][0]:.0f}, {100 * r['ci95'][1]:.0f}]"


def _stat(v, ci, nd=2) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "—"
    lo, hi = ci
    return f"{v:.{nd}f} [{fmt_num(lo, nd)}, {fmt_num(hi, nd)}]"


def agreement_markdown(res: dict) -> str:
    envs = list(res["envs"])
    lines = [f"Success over all tasks (%, 95 % Wilson interval), {res['scenes']} held-out scenes per policy:", "",
             "| policy | simulator | " + " | ".join(envs) + " |", "|---" * (len(envs) + 2) + "|"]
    for p in res["players"]:
        lines.append(f"| {p}{' (learned)' if p in res['learned'] else ''} | {_pct(res['sim'][p])} | "
                     + " | ".join(_pct(res["envs"][e][p]) for e in envs) + " |")
    lines += ["", "Agreement with the simulator's ranking (95 % bootstrap interval over scenes; MMRV lower is "
                  "better) and per-episode agreement (the same verdict on the same scene and policy):", "",
              "| verdicts from | policies | Pearson | Spearman | MMRV | episodes agreeing |", "|---|---|---|---|---|---|"]
    for e in envs:
        for subset in ("all", "learned", *(f"all, {t} only" for t in res["tasks"])):
            r = res["ranking"][e].get(subset)
            if r:
                agree = f"{100 * res['episode_agreement'][e]['all']:.0f} %" if subset == "all" else ""
                lines.append(f"| {e} | {subset} ({r['n_policies']}) | {_stat(r['pearson'], r['pearson_ci95'])} | "
                             f"{_stat(r['spearman'], r['spearman_ci95'])} | {_stat(r['mmrv'], r['mmrv_ci95'], 3)} | "
                             f"{agree} |")
    alone = res.get("vs_judged_simulator") or {}
    if alone:
        lines += ["", "The world model alone: agreement with the simulator's frames through the same judge (the "
                      "judge's errors held fixed; what remains is the world model's):", "",
                  "| world model | policies | Pearson | Spearman | MMRV | episodes agreeing |", "|---|---|---|---|---|---|"]
        for e, v in alone.items():
            for subset in ("all", "learned"):
                r = v.get(subset)
                if r:
                    agree = f"{100 * v['episodes_agreeing']:.0f} %" if subset == "all" else ""
                    lines.append(f"| {e} | {subset} ({r['n_policies']}) | {_stat(r['pearson'], r['pearson_ci95'])} | "
                                 f"{_stat(r['spearman'], r['spearman_ci95'])} | "
                                 f"{_stat(r['mmrv'], r['mmrv_ci95'], 3)} | {agree} |")
    if res.get("judge_validation"):
        lines += ["", *judge_validation_md(res["judge_validation"])]
    return "\n".join(lines)


def with_judge_validation(res: dict) -> dict:
    """A simulator evaluation made with a judge (``evaluate_synthetic(judge=...)``) with the judge's validation on its
    own scenes added: ``res["judge_validation"]`` and its table under ``res["table_md"]``. Unchanged without a
    judge."""
    jv = judge_validation(res, list(res["tasks"]))
    if jv is not None:
        res["judge_validation"] = jv
        res["table_md"] += "\n\n" + "\n".join(judge_validation_md(jv))
    return res


def judge_validation_md(jv: dict) -> list[str]:
    """:func:`judge_validation` as a markdown table (``policy agreement``, and ``policy eval --judge`` in the
    simulator)."""
    lines = ["The judge on the simulator's own frames against MuJoCo's verdicts:", "",
             "| task | frames: precision | recall | κ | episodes: precision | recall | κ |",
             "|---|---|---|---|---|---|---|"]
    for t, v in jv.items():
        f, e = v["frame"], v["episode"]
        lines.append(f"| {t} | {fmt_num(f['precision'], 2)} | {fmt_num(f['recall'], 2)} | {fmt_num(f['kappa'], 2)} "
                     f"| {fmt_num(e['precision'], 2)} | {fmt_num(e['recall'], 2)} | {fmt_num(e['kappa'], 2)} |")
    med = {t: v["median_error_cm"] for t, v in jv.items() if "median_error_cm" in v}
    if med:
        lines += ["", "Its readings against the simulator's truth, median |error| over every frame (cm; r = hand − "
                  "object, d = object's displacement):", "",
                  "| task | " + " | ".join(OUTPUTS) + " |", "|---|" + "---|" * len(OUTPUTS)]
        lines += [f"| {t} | " + " | ".join(f"{m[k]:.1f}" for k in OUTPUTS) + " |" for t, m in med.items()]
    return lines


def merge_evals(evals: list[dict]) -> dict:
    """Simulator evaluations of disjoint players on the same scenes (e.g. one process per group) as one."""
    out = dict(evals[0], rows=dict(evals[0]["rows"]), episodes=dict(evals[0]["episodes"]),
               learned=list(evals[0].get("learned", [])), runs=dict(evals[0].get("runs", {})))
    for e in evals[1:]:
        if e["scenes"] != out["scenes"] or e["seed"] != out["seed"]:
            raise ConfigError("--sim: the simulator evaluations were made on other scenes; evaluate them with the same "
                              "--per-task, --layouts and seed")
        for key in ("rows", "episodes", "runs"):
            out[key].update(e.get(key, {}))
        out["learned"] += e.get("learned", [])
    return out


def write_agreement(sim_dirs: list[str | Path], wm_dirs: dict[str, str | Path], out: str | Path,
                    n_boot: int = 2000, video_policy: Optional[str] = None) -> dict:
    """Read the evaluations (the simulator's may be several folders of disjoint players), compute
    :func:`agreement`, write agreement.json / .md, scatter.png and the side-by-side videos of ``video_policy``
    (default: the first learned policy) on the first scene of each task."""
    from simforcing.policy.agreement_media import scatter_plot  # matplotlib: only here

    sim = merge_evals([read_eval(d, "--sim") for d in sim_dirs])
    wms = {name: read_eval(d, f"--wm {name}") for name, d in wm_dirs.items()}
    res = agreement(sim, wms, n_boot)
    res["table_md"] = agreement_markdown(res)
    out = Path(out)
    res["scatter"] = str(scatter_plot(res, out / "scatter.png"))
    player = video_policy or (res["learned"] or res["players"])[0]
    if player not in res["players"]:
        raise ConfigError(f"--video-policy: {player!r} is not one of the evaluated policies {res['players']}")
    res["videos"] = write_episode_videos(sim_dirs, sim, {n: (wm_dirs[n], w) for n, w in wms.items()}, player, out)
    atomic_write_json(out / "agreement.json", res)
    atomic_write_text(out / "agreement.md", res["table_md"] + "\n")
    return res


def write_episode_videos(sim_dirs: list, sim: dict, wms: dict[str, tuple], player: str, out: Path) -> list[str]:
    """One episode of ``player`` per task, side by side: the simulator, each world model (frames.npz of each
    evaluation folder), each frame marked with the judge's verdict."""
    from simforcing.policy.agreement_media import episode_video

    def frames(folder) -> dict:
        path = Path(folder) / "frames.npz"
        if not path.is_file():
            return {}
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}

    def verdicts(res: dict, task: str, scene: int, offset: int) -> list:
        o = next(o for o in res["episodes"][player][task] if o["scene"] == scene)
        return [None] * offset + list(o.get("frame_judged", []))

    sim_frames, written = {k: v for d in sim_dirs for k, v in frames(d).items()}, []
    wm_frames = {n: frames(d) for n, (d, _) in wms.items()}
    for key, f in sim_frames.items():
        name, task, scene = key.split("|")
        if name != player:
            continue
        panels = {"simulator": (f, verdicts(sim, task, int(scene), 0))}
        for n, (_, res) in wms.items():
            if key in wm_frames[n]:
                panels[n] = (wm_frames[n][key], verdicts(res, task, int(scene), 1))
        ok = next(o for o in sim["episodes"][player][task] if o["scene"] == int(scene))["success"]
        files = episode_video(out / "videos" / f"{task}_{scene}", panels,
                              f"{player}: {task}, scene {scene} (simulator: {'success' if ok else 'failure'})")
        written.append(str(files["gif"]))
    return written
