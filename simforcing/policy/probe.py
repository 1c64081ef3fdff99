"""What an action-only policy reads from its frozen video expert: a linear probe of the observation tokens.

    res = probe_runs({"video base": RUN_A, "SimForcing WM": RUN_B}, train_per_task=40, test_per_task=20)
    print(res.table_md)                        # `simforcing policy probe --runs NAME=RUN ... --out DIR`
    res.runs["video base"].layers[-1]["hand"].rmse_cm
    res.write(DIR); ProbeResult.read(DIR, "--probe") == res     # DIR/probe.json (tagged) and probe.md

In the action-only setting the video expert is frozen at its initialisation and encodes the current observation once
per chunk; the action expert reads each layer's keys and values of those first-frame tokens
(``WorldModel.observation_context``). This probe asks what a linear read-out of them knows about the scene:

- **data**: scripted-expert episodes of the synthetic tasks in the runs' scene mode (``policy.closed_loop.synthetic``),
  fitting scenes from the policy dataset's seed (100) and held-out scenes from the evaluation seed (9000),
  ``*_per_task`` per task; from each scene two frames, the first and the one after ``k`` expert steps (``k`` uniform in
  [1, ``max_k``] from the scene's seed), with the hand's position (the end-effector site) and the named task
  object's centre, metres;
- **features** per run and layer: the layer's first-frame keys and values, flattened ((n_first · heads · head_dim) · 2
  numbers), computed WITHOUT the proprio-state token (``state0=None``): the policy's tokens also attend to the state,
  which holds the hand's position itself; the probe measures what the expert takes from the image and the
  instruction. Also the VAE latent of the observation (the expert's input, the same for every run);
- **read-out**: ridge regression on standardised features (dual form), its strength chosen by 5-fold
  cross-validation over the fitting scenes (folds by scene); scored on the held-out scenes: R² (1 − SSE/SST over
  x, y, z) and the RMS 3-D error in cm, against two reference errors — the fitting set's mean position, and for the
  object the mean of its layout (what knowing the layout alone gives: the object moves only by the layout's
  jitter, so a probe beats it only by reading the object's own position).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from simforcing.config import ConfigError
from simforcing.policy.closed_loop.evaluate import EVAL_SEED, scene_mode
from simforcing.policy.closed_loop.synthetic import TASKS, SyntheticTaskEnv, held_out_scenes
from simforcing.policy.infer import PolicyRunner
from simforcing.result_files import POLICY_PROBE, read_result, tagged
from simforcing.utils import atomic_write_json, atomic_write_text, derive_seed

FIT_SEED = 100  # the policy dataset's seed (`data synth-policy`): the scenes the policies were trained on
TARGETS = ("hand", "object")
LAMBDAS = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)  # × the mean diagonal of the kernel
FORMAT_VERSION = 1  # probe.json (a file written before the tags: recognised by its keys, result_files)


@dataclass(frozen=True)
class ProbeScore:
    """A read-out's held-out score: R² over x, y, z (None where the targets do not vary) and the RMS 3-D error, cm."""

    r2: Optional[float]
    rmse_cm: float

    def to_json(self) -> dict:
        return {"r2": self.r2, "rmse_cm": self.rmse_cm}

    @classmethod
    def from_json(cls, d: dict) -> "ProbeScore":
        return cls(d["r2"], float(d["rmse_cm"]))


Scores = dict[str, ProbeScore]  # target (TARGETS) or reference name -> score


@dataclass(frozen=True)
class RunProbe:
    """One run's probe: its folder, each layer's scores per target (first layer first) and the layer whose read-out
    is best per target."""

    run: str
    layers: list[Scores]
    best_layer: dict[str, int]

    def to_json(self) -> dict:
        return {"run": self.run, "layers": [_scores_json(s) for s in self.layers], "best_layer": dict(self.best_layer)}

    @classmethod
    def from_json(cls, d: dict) -> "RunProbe":
        return cls(d["run"], [_scores(s) for s in d["layers"]], {t: int(j) for t, j in d["best_layer"].items()})


@dataclass(frozen=True)
class ProbeResult:
    """``policy probe``'s result (module docstring): every run's probe, the fitting and held-out frame counts, the
    scenes' layouts and jitter, the reference errors (target -> reference name -> score), the VAE latent's scores and
    the table (``probe_table``)."""

    runs: dict[str, RunProbe]
    n_fit: int
    n_test: int
    layouts: int
    jitter: float
    reference: dict[str, Scores]
    latent: Scores
    table_md: str

    def to_json(self) -> dict:
        return tagged(POLICY_PROBE, FORMAT_VERSION, {
            "runs": {n: r.to_json() for n, r in self.runs.items()}, "n_fit": self.n_fit, "n_test": self.n_test,
            "layouts": self.layouts, "jitter": self.jitter,
            "reference": {t: _scores_json(s) for t, s in self.reference.items()}, "latent": _scores_json(self.latent),
            "table_md": self.table_md})

    @classmethod
    def from_json(cls, d: dict) -> "ProbeResult":
        return cls({n: RunProbe.from_json(r) for n, r in d["runs"].items()}, int(d["n_fit"]), int(d["n_test"]),
                   d["layouts"], d["jitter"], {t: _scores(s) for t, s in d["reference"].items()},
                   _scores(d["latent"]), d["table_md"])

    @classmethod
    def read(cls, folder: str | Path, what: str) -> "ProbeResult":
        """FOLDER/probe.json, or a ConfigError naming ``what`` and what the file holds instead."""
        obj, _ = read_result(Path(folder) / "probe.json", POLICY_PROBE, FORMAT_VERSION, what)
        return cls.from_json(obj)

    def write(self, folder: str | Path) -> None:
        """FOLDER/probe.json (tagged) and FOLDER/probe.md (the table), each written atomically."""
        atomic_write_json(Path(folder) / "probe.json", self.to_json())
        atomic_write_text(Path(folder) / "probe.md", self.table_md + "\n")


def _scores_json(s: Scores) -> dict:
    return {k: v.to_json() for k, v in s.items()}


def _scores(d: dict) -> Scores:
    return {k: ProbeScore.from_json(v) for k, v in d.items()}


def probe_frames(seed: int, per_task: int, max_steps: int, layouts: int, jitter: float, height: int, width: int,
                 max_k: int = 8, cameras: int = 2) -> dict:
    """Two frames per scene (module docstring): images uint8 (N, H, cameras·W, 3), instructions, hand and object
    (N, 3) in metres, layout (N,) (-1 without layouts), scene (N,) index."""
    scenes = held_out_scenes(seed, per_task, max_steps, TASKS, layouts=layouts, jitter=jitter)
    out: dict = {"images": [], "instructions": [], "hand": [], "object": [], "layout": [], "scene": []}
    for task in TASKS:
        for idx in scenes[task]:
            env = SyntheticTaskEnv(seed, idx, max_steps, height, width, layouts, jitter)
            try:
                k = int(np.random.default_rng(derive_seed(seed, "probe", idx) & 0xFFFFFFFF).integers(1, max_k + 1))
                for t in range(k + 1):
                    if t in (0, k):
                        out["images"].append(env.image(cameras))
                        out["instructions"].append(env.instruction)
                        out["hand"].append(env.ep.data.site_xpos[env.ep.site].copy())
                        out["object"].append(env.ep.object_positions()[env.task.object_index].copy())
                        out["layout"].append(idx % layouts if layouts else -1)
                        out["scene"].append(idx)
                    if t < k and env.step(env.expert_action()):
                        pass  # a success does not end a probe episode: its frame is as good as any
            finally:
                env.close()
    return {k: np.asarray(v) if k != "instructions" else v for k, v in out.items()}


@torch.no_grad()
def observation_features(runner: PolicyRunner, frames: dict, batch: int = 64) -> tuple[list[np.ndarray], np.ndarray]:
    """Per layer (N, F_layer) float64 features — the first-frame keys and values, no state token — and the VAE
    latents (N, C·h·w)."""
    layers: list[list[np.ndarray]] = []
    latents = []
    for i in range(0, len(frames["images"]), batch):
        imgs = frames["images"][i:i + batch]
        x = torch.cat([runner.observation(im) for im in imgs])  # (b, 3, 1, H, W)
        z0 = runner.vae.encode(x)  # (b, C, 1, h, w)
        text = [runner.text(s)[0] for s in frames["instructions"][i:i + batch]]
        n = max(t.shape[0] for t in text)
        tt = torch.zeros(len(text), n, text[0].shape[1])
        mask = torch.zeros(len(text), n, dtype=torch.bool)
        for j, t in enumerate(text):
            tt[j, :t.shape[0]], mask[j, :t.shape[0]] = t, True
        obs = runner.model.observation_context(z0, None, tt.to(z0.device), mask.to(z0.device))
        for j, (k, v) in enumerate(obs.video_kv):  # (b, n_first, H, D) each
            if len(layers) <= j:
                layers.append([])
            layers[j].append(torch.cat([k.flatten(1), v.flatten(1)], 1).double().cpu().numpy())
        latents.append(z0.flatten(1).double().cpu().numpy())
    return [np.concatenate(f) for f in layers], np.concatenate(latents)


def _kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a @ b.T


def ridge_probe(x_fit: np.ndarray, y_fit: np.ndarray, groups: np.ndarray, x_test: np.ndarray,
                folds: int = 5) -> tuple[np.ndarray, float]:
    """Predictions (N_test, 3) of a ridge read-out fitted on (x_fit, y_fit), its strength chosen by ``folds``-fold
    cross-validation with folds by ``groups``; returns them and the chosen relative strength."""
    mu, sd = x_fit.mean(0), x_fit.std(0)
    sd[sd < 1e-12] = 1.0
    xf, xt = (x_fit - mu) / sd, (x_test - mu) / sd
    y_mu = y_fit.mean(0)
    yf = y_fit - y_mu
    k_fit = _kernel(xf, xf)
    scale = float(np.mean(np.diag(k_fit))) or 1.0
    uniq = np.unique(groups)
    fold_of = {g: i % folds for i, g in enumerate(uniq)}
    fold = np.array([fold_of[g] for g in groups])
    best, best_err = LAMBDAS[0], np.inf
    for lam in LAMBDAS:
        err = 0.0
        for f in range(min(folds, len(uniq))):
            tr, va = fold != f, fold == f
            ytr = yf[tr] - yf[tr].mean(0)
            alpha = np.linalg.solve(k_fit[np.ix_(tr, tr)] + lam * scale * np.eye(tr.sum()), ytr)
            pred = k_fit[np.ix_(va, tr)] @ alpha + yf[tr].mean(0)
            err += float(((pred - yf[va]) ** 2).sum())
        if err < best_err:
            best, best_err = lam, err
    alpha = np.linalg.solve(k_fit + best * scale * np.eye(len(yf)), yf)
    return _kernel(xt, xf) @ alpha + y_mu, best


def score(pred: np.ndarray, y: np.ndarray) -> ProbeScore:
    """R² over the three coordinates and the RMS 3-D error in cm."""
    sse = float(((pred - y) ** 2).sum())
    sst = float(((y - y.mean(0)) ** 2).sum())
    return ProbeScore(1.0 - sse / sst if sst > 0 else None, 100.0 * float(np.sqrt(sse / len(y))))


def _reference(fit: dict, test: dict) -> dict[str, Scores]:
    out = {t: {"fit mean": score(np.broadcast_to(fit[t].mean(0), test[t].shape), test[t])} for t in TARGETS}
    if (fit["layout"] >= 0).all():
        means = {l: fit["object"][fit["layout"] == l].mean(0) for l in np.unique(fit["layout"])}
        pred = np.stack([means.get(l, fit["object"].mean(0)) for l in test["layout"]])
        out["object"]["layout mean"] = score(pred, test["object"])
    return out


def probe_runs(runs: dict[str, str | Path], train_per_task: int = 40, test_per_task: int = 20, max_steps: int = 30,
               layouts: int | None = None, jitter: float | None = None, device="cpu",
               progress: Callable[[str], None] = print) -> ProbeResult:
    """The probe of every run (name -> an action-only policy run; its frozen video expert is its initialisation's;
    module docstring)."""
    if train_per_task < 2 or test_per_task < 1:
        raise ConfigError(f"--train-scenes {train_per_task} --test-scenes {test_per_task}: expected at least 2 fitting "
                          "scenes and 1 held-out scene per task")
    if not runs:
        raise ConfigError("--runs: nothing to probe; give NAME=RUN for one or more action-only policy runs")
    runners = {name: PolicyRunner.load(run, device) for name, run in runs.items()}
    for name, r in runners.items():
        if r.cfg.policy.setting != "action_only":
            raise ConfigError(f"--runs {name}: {runs[name]} is a {r.cfg.policy.setting!r} policy; the probe reads the "
                              "frozen video expert of an action-only policy (its initialisation's)")
    layouts, jitter = scene_mode({n: r.cfg for n, r in runners.items()}, layouts, jitter, progress)
    first = next(iter(runners.values())).cfg
    cams = {r.cfg.policy.cameras for r in runners.values()}
    if len(cams) > 1:
        raise ConfigError(f"--runs: the runs read {sorted(cams)} cameras; the probe shows every run the same frames "
                          "(give runs of one policy.cameras)")
    h, w = first.data.height, first.data.width // first.policy.cameras
    fit = probe_frames(FIT_SEED, train_per_task, max_steps, layouts, jitter, h, w, cameras=first.policy.cameras)
    test = probe_frames(EVAL_SEED, test_per_task, max_steps, layouts, jitter, h, w, cameras=first.policy.cameras)
    progress(f"probe: {len(fit['hand'])} fitting frames, {len(test['hand'])} held-out frames")
    probes: dict[str, RunProbe] = {}
    latent: Optional[Scores] = None
    for name, runner in runners.items():
        f_layers, f_lat = observation_features(runner, fit)
        t_layers, t_lat = observation_features(runner, test)
        if latent is None:
            latent = {t: score(ridge_probe(f_lat, fit[t], fit["scene"], t_lat)[0], test[t]) for t in TARGETS}
        layers = []
        for xf, xt in zip(f_layers, t_layers):
            layers.append({t: score(ridge_probe(xf, fit[t], fit["scene"], xt)[0], test[t]) for t in TARGETS})
        best = {t: min(range(len(layers)), key=lambda j, t=t: layers[j][t].rmse_cm) for t in TARGETS}
        probes[name] = RunProbe(str(runs[name]), layers, best)
        progress(f"probe {name}: " + ", ".join(f"{t} {layers[-1][t].rmse_cm:.1f} cm (last layer)" for t in TARGETS))
    reference = _reference(fit, test)
    return ProbeResult(probes, len(fit["hand"]), len(test["hand"]), layouts, jitter, reference, latent,
                       probe_table(probes, latent, reference))


def _cell(s: ProbeScore) -> str:
    return f"{s.rmse_cm:.1f} cm, R² {s.r2:.2f}" if s.r2 is not None else f"{s.rmse_cm:.1f} cm"


def probe_table(runs: dict[str, RunProbe], latent: Optional[Scores], reference: dict[str, Scores],
                labels: dict | None = None) -> str:
    """Markdown: per run the held-out error of the last layer's and the best layer's read-out, hand and object."""
    labels = labels or {}
    lines = ["| video expert of | hand, last layer | hand, best layer | object, last layer | object, best layer |",
             "|---|---|---|---|---|"]
    for name, r in runs.items():
        last, best = r.layers[-1], r.best_layer
        lines.append(f"| {labels.get(name, name)} | {_cell(last['hand'])} | {_cell(r.layers[best['hand']]['hand'])}"
                     f" (layer {best['hand']}) | {_cell(last['object'])} | "
                     f"{_cell(r.layers[best['object']]['object'])} (layer {best['object']}) |")
    if latent:
        lines.append(f"| (the VAE latent, the expert's input) | {_cell(latent['hand'])} | — | "
                     f"{_cell(latent['object'])} | — |")
    obj_ref = "; ".join(f"{k} {v.rmse_cm:.1f} cm" for k, v in reference["object"].items())
    lines.append(f"| (reference: no read-out) | fit mean {reference['hand']['fit mean'].rmse_cm:.1f} cm | — | {obj_ref} "
                 "| — |")
    return "\n".join(lines)
