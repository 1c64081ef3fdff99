"""How faithful a world model is as a simulator, in a few numbers read from results its commands already wrote
(docs/FAITHFUL.md), and the fidelity–compute curve over several trained models.

    point = fidelity_point(oracle="eval_oracle", twin="rollout_twin", wm_eval="wm_twin", agreement="agreement",
                           wm_name="simforcing-twin", runs=["stage1", "stage2"])
    write_point(point, "fidelity/")                       # fidelity.json (tagged) + fidelity.md
    write_curve({"2x2": p1, "1x1": p2, ...}, "curve/")    # fidelity_curve.json + .md + .png

The numbers, each optional (a missing input leaves its entry out; nothing is guessed):

- **oracle**: the one-window action error (cm) and PSNR with the recorded simulation video as the condition
  (``evaluate --sample.condition=oracle``): how well the real branch renders what an exact condition shows;
- **twin**: the rollout's drift over its chunks with the digital twin's rendering as every chunk's condition
  (``rollout --sample.condition=render --rows rollout restart``): rollout − restarted, in cm and dB, so that only the
  real branch can drift;
- **still**: the do-nothing frame change — the mean absolute change (0–255) of the world model's frame at policy
  step 5, 10 and 30 against its first frame while the commanded arm does not move (``policy eval --env world-model``
  keeps the first scene of each task in frames.npz); the simulator's is about 0.01;
- **inside**: how the world model ranks the policies against the simulator (``policy agreement``): Pearson of the
  success rates over every policy with its interval, MMRV, and the clean scripted expert's success inside it;
- **training**: the core-seconds of the training runs that made the model (the sum of each run's process CPU time,
  the ``core_s`` of its last metrics row), or a number measured outside (``core_s=``).

Each number is compared with the aim of docs/FAITHFUL.md (``AIMS``); the comparison is written beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

from simforcing.errors import ConfigError
from simforcing.result_files import (AGREEMENT, FIDELITY, FIDELITY_CURVE, ROLLOUT_DRIFT, WINDOW_EVALUATION,
                                     read_result, tagged)
from simforcing.runs.folder import METRICS_FILE
from simforcing.utils import atomic_write, atomic_write_json, atomic_write_text, read_jsonl

FORMAT_VERSION = 1
STILL_PLAYER = "do nothing (floor)"  # the policy evaluation's do-nothing player (frames.npz keys "player|task|scene")
CLEAN_EXPERT = "scripted expert (ceiling)"
STILL_STEPS = (5, 10, 30)


@dataclass(frozen=True)
class Aim:
    key: str  # the point's flat key (``flat``)
    label: str
    bound: float
    below: bool = True  # met when value <= bound (else value >= bound)

    def met(self, value: Optional[float]) -> Optional[bool]:
        if value is None or not math.isfinite(value):
            return None
        return value <= self.bound if self.below else value >= self.bound


# docs/FAITHFUL.md's aims for the demo's default world model (issue 44)
AIMS = (Aim("oracle_af_cm", "oracle condition, one window: action error (cm)", 4.0),
        Aim("twin_drift_cm", "twin, rollout − restarted: action error (cm)", 2.0),
        Aim("twin_drift_db", "twin, restarted − rollout: PSNR (dB)", 1.0),
        Aim("still_30", "do-nothing frame change by step 30 (0–255)", 2.0),
        Aim("pearson", "inside the world model: Pearson with the simulator", 0.85, below=False),
        Aim("clean_expert", "inside the world model: the clean expert's success", 0.70, below=False))


# -- the measurements ---------------------------------------------------------------------------------------------------
def _folder_file(path: str | Path, name: str) -> Path:
    path = Path(path)
    return path / name if path.is_dir() else path


def _read_made_with(path: str | Path, name: str, kind: str, what: str, condition: str,
                    made: str, command: str) -> tuple[Path, dict]:
    """The result file ``name`` at ``path`` (a folder or the file) of ``kind``, refused by name unless its sampler
    used ``condition``."""
    f = _folder_file(path, name)
    body, _ = read_result(f, kind, 2, what)
    cond = (body.get("sampler") or {}).get("condition")
    if cond != condition:
        raise ConfigError(f"{what}: {f} was {made} with the condition {cond!r}; give {command}")
    return f, body


def oracle_window(path: str | Path) -> dict:
    """The one-window evaluation at ``path`` (a folder of ``evaluate``, or its eval.json), which must have used the
    oracle condition: action error and its floor in cm, PSNR, arm PSNR, the guidance w and seconds per window."""
    f, e = _read_made_with(path, "eval.json", WINDOW_EVALUATION, "oracle", "oracle", "evaluated",
                           "an evaluation made with `simforcing evaluate ... --sample.condition=oracle`")
    if e.get("af_pos") is None:
        raise ConfigError(f"oracle: {f} has no action error (af_pos); evaluate with --eval.probe=PROBE")
    return {"af_cm": 100 * e["af_pos"], "floor_cm": _cm(e.get("af_floor_pos")), "psnr": e["psnr"],
            "psnr_arm": e.get("psnr_arm"), "w": e["sampler"].get("w"), "latency_s": e.get("latency_s"),
            "windows": e.get("num_samples"), "folder": str(f.parent)}


def twin_drift(path: str | Path) -> dict:
    """The rollout at ``path`` (``rollout``'s folder or rollout.json), made with the twin as every chunk's
    condition and with the rollout and restart rows: the mean over chunks of each, and the drift between them."""
    f, r = _read_made_with(path, "rollout.json", ROLLOUT_DRIFT, "twin", "render", "rolled out",
                           "a rollout made with `simforcing rollout ... --sample.condition=render --rows rollout "
                           "restart`")
    rows = r.get("rows") or {}
    missing = [k for k in ("rollout", "restart") if k not in rows]
    if missing:
        raise ConfigError(f"twin: {f} has no {' or '.join(missing)} row; roll out with --rows rollout restart")
    ro, rs = rows["rollout"]["mean"], rows["restart"]["mean"]
    if ro.get("af_pos") is None or rs.get("af_pos") is None:
        raise ConfigError(f"twin: {f} has no action error (af_pos); roll out with --eval.probe=PROBE")
    return {"chunks": r.get("chunks"), "episodes": r.get("num_episodes"), "rollout_cm": 100 * ro["af_pos"],
            "restart_cm": 100 * rs["af_pos"], "drift_cm": 100 * (ro["af_pos"] - rs["af_pos"]),
            "rollout_psnr": ro["psnr"], "restart_psnr": rs["psnr"], "drift_db": rs["psnr"] - ro["psnr"],
            "last_chunk_cm": 100 * rows["rollout"]["per_chunk"]["af_pos"][-1], "folder": str(f.parent)}


def still_change(path: str | Path, player: str = STILL_PLAYER, steps: Sequence[int] = STILL_STEPS) -> dict:
    """The do-nothing frame change of a policy evaluation folder (its frames.npz): for each step t, the mean over
    pixels and episodes of |frame_t − frame_0| (0–255); an episode shorter than t uses its last frame."""
    f = _folder_file(path, "frames.npz")
    if not f.is_file():
        raise ConfigError(f"still: {f} does not exist; give the folder `simforcing policy eval` wrote (it keeps the "
                          "first scene of each task in frames.npz)")
    with np.load(f) as z:
        keys = [k for k in z.files if k.split("|")[0] == player]
        if not keys:
            players = sorted({k.split("|")[0] for k in z.files})
            raise ConfigError(f"still: {f} has no episode of {player!r} (it holds {', '.join(players) or 'none'}); "
                              "evaluate with the baselines on (no --no-baselines)")
        per = {}
        for k in keys:
            frames = z[k].astype(np.float64)
            per[k] = [float(np.abs(frames[min(t, len(frames) - 1)] - frames[0]).mean()) for t in steps]
    mean = np.mean(np.array(list(per.values())), axis=0)
    return {"steps": list(steps), "change": [float(v) for v in mean], "episodes": len(per), "folder": str(f.parent)}


def inside(path: str | Path, wm_name: Optional[str] = None) -> dict:
    """The world model ``wm_name`` in an agreement (``policy agreement``'s folder or agreement.json): Pearson over
    every policy with its interval, Spearman, MMRV, and the clean expert's success inside it against the simulator's.
    Without ``wm_name`` the agreement must hold one world model."""
    f = _folder_file(path, "agreement.json")
    a, _ = read_result(f, AGREEMENT, 2, "agreement")
    wms = [k for k in a.get("ranking", {}) if k != "simulator frames through the judge"]
    if wm_name is None:
        if len(wms) != 1:
            raise ConfigError(f"agreement: {f} holds the world models {', '.join(wms)}; say which with --wm-name")
        wm_name = wms[0]
    if wm_name not in wms:
        raise ConfigError(f"--wm-name: {f} has no world model {wm_name!r} (it holds {', '.join(wms) or 'none'})")
    rank = a["ranking"][wm_name]["all"]
    expert = (a.get("envs", {}).get(wm_name) or {}).get(CLEAN_EXPERT) or {}
    return {"wm": wm_name, "pearson": rank.get("pearson"), "pearson_ci95": rank.get("pearson_ci95"),
            "spearman": rank.get("spearman"), "mmrv": rank.get("mmrv"), "n_policies": rank.get("n_policies"),
            "clean_expert": expert.get("rate"), "clean_expert_ci95": expert.get("ci95"), "scenes": a.get("scenes"),
            "folder": str(f.parent)}


def training_core_s(runs: Sequence[str | Path]) -> dict:
    """The core-seconds of training runs: each run's ``core_s`` (process CPU time, kept across resumes) from its
    last metrics row, and their sum — None when a run does not record it (a run from before simforcing measured it:
    then ``fidelity point --core-s`` gives a number measured outside)."""
    per = {}
    for run in runs:
        m = Path(run) / METRICS_FILE
        rows = read_jsonl(m) if m.is_file() else []
        if not rows:
            raise ConfigError(f"--runs: {m} does not exist or is empty; give training run folders (pretrain / train)")
        per[str(run)] = float(rows[-1]["core_s"]) if "core_s" in rows[-1] else None
    missing = [r for r, v in per.items() if v is None]
    return {"core_s": None if missing else sum(per.values()), "runs": per, "not_recorded": missing}


def _cm(v: Optional[float]) -> Optional[float]:
    return None if v is None else 100 * v


# -- a point ------------------------------------------------------------------------------------------------------------
def flat(point: Mapping) -> dict:
    """The point's headline numbers by key (``AIMS`` keys, ``core_s``, the oracle PSNR); None where not measured."""
    o, t, s, i = (point.get(k) or {} for k in ("oracle", "twin", "still", "inside"))
    still = dict(zip(s.get("steps", ()), s.get("change", ())))
    return {"core_s": (point.get("training") or {}).get("core_s"), "oracle_af_cm": o.get("af_cm"),
            "oracle_psnr": o.get("psnr"), "twin_drift_cm": t.get("drift_cm"), "twin_drift_db": t.get("drift_db"),
            "twin_rollout_cm": t.get("rollout_cm"), "still_30": still.get(30), "pearson": i.get("pearson"),
            "mmrv": i.get("mmrv"), "clean_expert": i.get("clean_expert")}


def fidelity_point(oracle=None, twin=None, wm_eval=None, agreement=None, wm_name: Optional[str] = None,
                   runs: Sequence = (), core_s: Optional[float] = None, label: str = "",
                   config: Optional[Mapping] = None) -> dict:
    """One model's fidelity from the result folders its commands wrote (each optional); see the module docstring."""
    point: dict = {"label": label}
    if config:
        point["config"] = dict(config)
    if oracle is not None:
        point["oracle"] = oracle_window(oracle)
    if twin is not None:
        point["twin"] = twin_drift(twin)
    if wm_eval is not None:
        point["still"] = still_change(wm_eval)
    if agreement is not None:
        point["inside"] = inside(agreement, wm_name)
    if core_s is not None:
        point["training"] = {"core_s": float(core_s), "runs": {str(r): None for r in runs}, "measured": "given"}
    elif runs:
        point["training"] = dict(training_core_s(runs), measured="metrics core_s")
    values = flat(point)
    point["aims"] = {a.key: {"label": a.label, "value": values[a.key], "bound": a.bound,
                             "below": a.below, "met": a.met(values[a.key])} for a in AIMS}
    return point


def _fmt(v, spec: str = ".2f") -> str:
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def point_md(point: Mapping) -> str:
    """The point as a small markdown table: each aim, its value and whether it is met."""
    lines = ["| measure | value | aim | met? |", "|---|---|---|---|"]
    for a in AIMS:
        row = point["aims"][a.key]
        met = {True: "yes", False: "no", None: "not measured"}[row["met"]]
        lines.append(f"| {a.label} | {_fmt(row['value'])} | {'≤' if a.below else '≥'} {a.bound:g} | {met} |")
    extra = []
    if "oracle" in point:
        o = point["oracle"]
        extra.append(f"oracle: {o['windows']} windows at w = {_fmt(o['w'], 'g')}, PSNR {_fmt(o['psnr'])} dB, "
                     f"probe floor {_fmt(o['floor_cm'])} cm")
    if "twin" in point:
        t = point["twin"]
        extra.append(f"twin: {t['episodes']} episodes × {t['chunks']} chunks, rollout {_fmt(t['rollout_cm'])} cm "
                     f"against restarted {_fmt(t['restart_cm'])} cm")
    if "still" in point:
        s = point["still"]
        extra.append("do-nothing frame change by step " + " / ".join(map(str, s["steps"])) + ": "
                     + " / ".join(_fmt(v) for v in s["change"]) + f" ({s['episodes']} episodes)")
    if "inside" in point:
        i = point["inside"]
        ci = i.get("pearson_ci95") or [None, None]
        extra.append(f"inside `{i['wm']}`: Pearson {_fmt(i['pearson'])} [{_fmt(ci[0])}, {_fmt(ci[1])}] over "
                     f"{i['n_policies']} policies and {i['scenes']} scenes, MMRV {_fmt(i['mmrv'])}")
    if "training" in point:
        tr = point["training"]
        extra.append(f"training: {_fmt(tr['core_s'], '.0f')} core-seconds" if tr["core_s"] is not None else
                     "training: core-seconds not recorded by " + ", ".join(tr.get("not_recorded") or ()))
    return "\n".join(lines + [""] + [f"- {e}" for e in extra]) + "\n"


def write_point(point: Mapping, out: str | Path) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "fidelity.json", tagged(FIDELITY, FORMAT_VERSION, dict(point)))
    atomic_write_text(out / "fidelity.md", point_md(point))
    return out / "fidelity.json"


def read_point(path: str | Path, what: str = "--points") -> dict:
    body, _ = read_result(_folder_file(path, "fidelity.json"), FIDELITY, FORMAT_VERSION, what)
    return body


# -- the curve ----------------------------------------------------------------------------------------------------------
CURVE_PANELS = (("oracle_af_cm", "oracle one-window action error (cm)"),
                ("twin_drift_cm", "twin drift over the rollout (cm)"),
                ("still_30", "do-nothing frame change, step 30"),
                ("pearson", "Pearson inside, twin vs simulator"))


def curve_md(points: Mapping[str, Mapping]) -> str:
    """One row per point, in order of training core-seconds."""
    head = ("| point | training core-s | oracle action error (cm) | oracle PSNR | twin drift (cm / dB) | "
            "do-nothing change, step 30 | Pearson inside (twin) | MMRV | clean expert |")
    lines = [head, "|" + "---|" * 9]
    for name, p in sorted(points.items(), key=lambda kv: flat(kv[1])["core_s"] or math.inf):
        v = flat(p)
        lines.append(f"| {name} | {_fmt(v['core_s'], '.0f')} | {_fmt(v['oracle_af_cm'])} | {_fmt(v['oracle_psnr'])} "
                     f"| {_fmt(v['twin_drift_cm'])} / {_fmt(v['twin_drift_db'])} | {_fmt(v['still_30'])} | "
                     f"{_fmt(v['pearson'])} | {_fmt(v['mmrv'])} | {_fmt(v['clean_expert'], '.0%')} |")
    return "\n".join(lines) + "\n"


def plot_curve(points: Mapping[str, Mapping], path: str | Path) -> Path:
    """Each fidelity number against training core-seconds (log x), one panel each, the aim drawn as a line; one
    colour and marker per point, named in the legend below the panels."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 8.5))
    axes = fig.subplots(2, 2).ravel()
    aims = {a.key: a for a in AIMS}
    markers = "osD^vP*Xh<>"
    handles = {}
    for ax, (key, title) in zip(axes, CURVE_PANELS):
        for k, (name, p) in enumerate(points.items()):
            v = flat(p)
            if v["core_s"] is None or v[key] is None:
                continue
            handles[name] = ax.scatter([v["core_s"]], [v[key]], s=46, color=f"C{k % 10}",
                                       marker=markers[k % len(markers)])
        if key in aims:
            ax.axhline(aims[key].bound, color="0.5", ls="--", lw=1)
            ax.annotate(f"aim {aims[key].bound:g}", (0.01, aims[key].bound), xycoords=("axes fraction", "data"),
                        fontsize=7, color="0.4", xytext=(0, 2), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel("training core-seconds (stage 1 + stage 2)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path = Path(path)
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=110))
    return path


def write_curve(points: Mapping[str, Mapping], out: str | Path) -> dict:
    """fidelity_curve.json (tagged: every point in full), fidelity_curve.md (the table) and fidelity_curve.png."""
    if not points:
        raise ConfigError("--points: no point given; give the folders `simforcing fidelity point` wrote")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    body = {"points": {k: dict(v) for k, v in points.items()}, "table": {k: flat(v) for k, v in points.items()}}
    atomic_write_json(out / "fidelity_curve.json", tagged(FIDELITY_CURVE, FORMAT_VERSION, body))
    atomic_write_text(out / "fidelity_curve.md", curve_md(points))
    plot_curve(points, out / "fidelity_curve.png")
    return body
