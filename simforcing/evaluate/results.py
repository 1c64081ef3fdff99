"""What the video evaluations produce, typed: the one-window evaluation (``simforcing evaluate``), the drift of long
rollouts (``simforcing rollout``) and the sampler sweeps (``simforcing sweep steps|cfg``), each with ``to_json`` /
``from_json``.

    ev = evaluate_run(RUN, DATA, None, "val", 8, OUT)     # a WindowEvaluation
    ev.scores.psnr, ev.scores.per_sample["psnr"], ev.checkpoint
    ev = WindowEvaluation.read(OUT, "--eval")             # or a ConfigError naming the flag, the file and its kind

``eval.json`` keeps the flat keys it always had (``psnr``, ``psnr_reason``, ``af_pos``, ``latency_s``, ...) under
``format: simforcing.window-evaluation`` / ``format_version: 2``, rollout.json its keys under
``simforcing.rollout-drift``, the sweeps' under ``simforcing.sweep-steps|cfg`` (with their rendered ``table_md``
beside the data, for people); a file written before the tags (version 1) loads through the same reader. Tables are
rendered from these types by ``evaluate.tables``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import ClassVar, Optional

from simforcing.evaluate.latency import LatencySummary
from simforcing.result_files import (ROLLOUT_DRIFT, SWEEP_CFG, SWEEP_STEPS, WINDOW_EVALUATION, MalformedResult,
                                     finite_number, nested, read_typed, tagged, typed)
from simforcing.runs.scored import ScoredRun

FORMAT_VERSION = 2
METRIC_KEYS = ("psnr", "ssim", "psnr_arm", "lpips", "fid", "fvd")
REASON_KEYS = ("psnr_arm", "lpips", "fid", "fvd", "af")  # what may be missing, with ``<key>_reason`` saying why


@dataclass(frozen=True)
class ActionFollowing:
    """The state probe's action-following errors (``evaluate.probe``, state units; None where no probe ran): on the
    generated frames (``af_*``), on the recorded frames (the floor, ``af_floor_*``), over all compared frames, the
    moving ones (displacement above ``af_moving_frames_threshold``) and the gripper; the control (``af_control_*``:
    the same sampler driven by another window's actions, None where no control ran) and its PSNR."""

    af_pos: Optional[float] = None
    af_pos_moving: Optional[float] = None
    af_grip: Optional[float] = None
    af_floor_pos: Optional[float] = None
    af_floor_pos_moving: Optional[float] = None
    af_floor_grip: Optional[float] = None
    af_moving_frames_threshold: Optional[float] = None
    af_control_pos: Optional[float] = None
    af_control_pos_moving: Optional[float] = None
    af_control_psnr: Optional[float] = None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "ActionFollowing":
        return cls(**{k: d.get(k) for k in ACTION_KEYS})


ACTION_KEYS = tuple(ActionFollowing.__dataclass_fields__)


@dataclass
class WindowScores:
    """The scores of one sampler on the first ``num_samples`` windows of a split (``evaluate.run.evaluate_sampler``):
    the metrics of ``evaluate.metrics`` (None where not computed, ``reasons[metric]`` saying why), the action-following
    errors of the state probe (``reasons["af"]`` when no probe ran),
    ``per_sample`` (column -> one value per window: psnr, ssim, psnr_arm, lpips, af_*, latency_s, forwards,
    episode_id, start), the latency summary (``evaluate.latency``) and its phases, the forwards of the first sample."""

    psnr: float
    ssim: float
    psnr_arm: Optional[float]
    lpips: Optional[float]
    fid: Optional[float]
    fvd: Optional[float]
    reasons: dict[str, str]
    action: ActionFollowing
    fid_num_images: Optional[int]
    fvd_num_videos: Optional[int]
    num_samples: int
    num_frames_compared: int
    protocol: dict
    per_sample: dict[str, list]
    latency: LatencySummary
    latency_s: Optional[float]
    latency_phases_s: dict[str, float]
    forwards_per_sample: int
    # a multi-view model (data.views): each camera's frame metrics alone ({view: {psnr, ssim, psnr_arm, lpips}},
    # evaluate.metrics.ViewMetrics; the action following reads the first view); {} for a one-view model
    views: dict[str, dict[str, Optional[float]]] = field(default_factory=dict)

    def metric(self, key: str) -> Optional[float]:
        """A metric or action-following error by its eval.json key ("psnr", "af_pos", "latency_s", ...)."""
        return getattr(self.action if key in ACTION_KEYS else self, key)

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in METRIC_KEYS}
        out.update({f"{k}_reason": why for k, why in self.reasons.items()})
        out.update(self.action.to_json())
        out.update({k: getattr(self, k) for k in ("fid_num_images", "fvd_num_videos", "num_samples",
                                                  "num_frames_compared", "protocol", "per_sample")})
        out.update(latency=self.latency.to_json(), latency_s=self.latency_s, latency_phases_s=self.latency_phases_s,
                   forwards_per_sample=self.forwards_per_sample)
        if self.views:
            out["views"] = self.views
        return out

    @classmethod
    def from_json(cls, d: dict) -> "WindowScores":
        """From ``to_json``'s keys (a file of any version: keys it lacks are None); every score a finite number or
        null (an evaluation never writes NaN or infinity: a non-finite prediction is refused), the action errors
        (distances) >= 0, ``num_samples`` >= 1."""
        num, opt = ("number", "null"), {"default": None}

        def score(key: str, low: float = -math.inf, **kw) -> Optional[float]:
            v = typed(d, key, *num, **kw)
            if v is not None and not (math.isfinite(v) and v >= low):
                least = f" >= {low:g}" if low > -math.inf else ""
                raise MalformedResult(f"field {key!r} must be a finite number{least} or null; got {v!r}")
            return v

        return cls(psnr=score("psnr"), ssim=score("ssim"),
                   psnr_arm=score("psnr_arm", **opt), lpips=score("lpips", 0, **opt),
                   fid=score("fid", 0, **opt), fvd=score("fvd", 0, **opt),
                   reasons={k: str(d[f"{k}_reason"]) for k in REASON_KEYS if d.get(f"{k}_reason")},
                   action=ActionFollowing(**{k: score(k, -math.inf if k == "af_control_psnr" else 0, **opt)
                                             for k in ACTION_KEYS}),
                   fid_num_images=typed(d, "fid_num_images", "int", "null", **opt),
                   fvd_num_videos=typed(d, "fvd_num_videos", "int", "null", **opt),
                   num_samples=_count(d, "num_samples", 1),
                   num_frames_compared=typed(d, "num_frames_compared", "int", "null", **opt),
                   protocol=typed(d, "protocol", "dict", "null", **opt) or {},
                   per_sample=dict(typed(d, "per_sample", "dict", "null", **opt) or {}),
                   latency=nested("latency", LatencySummary.from_json, typed(d, "latency", "dict")),
                   latency_s=score("latency_s", 0),
                   latency_phases_s=dict(typed(d, "latency_phases_s", "dict", "null", **opt) or {}),
                   forwards_per_sample=typed(d, "forwards_per_sample", "int", "null", default=0) or 0,
                   views=_view_scores(typed(d, "views", "dict", "null", **opt) or {}))


def _view_scores(d: dict) -> dict[str, dict[str, Optional[float]]]:
    """eval.json's ``views``: per camera name its frame metrics, each a number or null (MalformedResult naming the
    field otherwise)."""
    from simforcing.evaluate.metrics import VIEW_METRICS

    out = {}
    for view, scores in d.items():
        if not isinstance(scores, dict):
            raise MalformedResult(f"field 'views.{view}' must be an object of {', '.join(VIEW_METRICS)}; got "
                                  f"{type(scores).__name__}")
        out[view] = nested(f"views.{view}", lambda x: {k: typed(x, k, "number", "null", default=None)
                                                       for k in VIEW_METRICS}, scores)
    return out


def _count(d: dict, key: str, low: int = 0) -> int:
    """``d[key]``, an integer >= ``low`` (a result file's count), else a MalformedResult naming it."""
    n = typed(d, key, "int")
    if n < low:
        raise MalformedResult(f"field {key!r} must be an integer >= {low}; got {n}")
    return n


SAMPLER_KEYS = ("n_sim", "n_real", "w", "mask_mode", "seed")  # a world model's sampler settings, also at the top


@dataclass
class WindowEvaluation:
    """``simforcing evaluate``: the scores of a checkpoint (``checkpoint``: its run, path, step and whether the run
    finished, ``runs.scored.ScoredRun``) or of a ``baseline`` on ``scores.num_samples`` windows of ``split`` of
    dataset ``data`` (``requested_samples`` asked for), in ``domain`` "real" or "sim", with the ``sampler``'s
    settings, on ``device``; ``include_first_frame``: whether the given first frame was scored."""

    scores: WindowScores
    split: str
    domain: str
    data: str
    requested_samples: int
    sampler: dict
    device: str
    include_first_frame: bool
    baseline: Optional[str] = None
    checkpoint: Optional[ScoredRun] = None

    def to_json(self) -> dict:
        body = {**self.scores.to_json(), "split": self.split, "domain": self.domain, "data": self.data,
                "requested_samples": self.requested_samples, "baseline": self.baseline, "sampler": self.sampler,
                "device": self.device, "include_first_frame": self.include_first_frame,
                "checkpoint": None if self.checkpoint is None else self.checkpoint.to_json()}
        if self.baseline is None:
            body.update({k: self.sampler[k] for k in SAMPLER_KEYS})
        return tagged(WINDOW_EVALUATION, FORMAT_VERSION, body)

    @classmethod
    def from_json(cls, d: dict, version: int = FORMAT_VERSION) -> "WindowEvaluation":
        """From ``to_json``'s dict or a version-1 eval.json (the same keys, untagged; older ones lack the domain)."""
        scores = WindowScores.from_json(d)
        checkpoint = typed(d, "checkpoint", "dict", "null", default=None)
        return cls(scores=scores, split=typed(d, "split", "str"), domain=typed(d, "domain", "str", default="real"),
                   data=typed(d, "data", "str"),
                   requested_samples=_count(d, "requested_samples") if "requested_samples" in d else
                   scores.num_samples, sampler=dict(typed(d, "sampler", "dict")),
                   device=typed(d, "device", "str", default="cpu"),
                   include_first_frame=typed(d, "include_first_frame", "bool", default=False),
                   baseline=typed(d, "baseline", "str", "null", default=None),
                   checkpoint=nested("checkpoint", ScoredRun.from_json, checkpoint) if checkpoint else None)

    @classmethod
    def read(cls, folder: str | Path, what: str) -> "WindowEvaluation":
        """FOLDER/eval.json, or a ConfigError naming ``what`` (the flag) and what the file holds instead, or the field
        that is missing or of the wrong type (``result_files.read_typed``)."""
        return read_typed(Path(folder) / "eval.json", WINDOW_EVALUATION, FORMAT_VERSION, what, cls.from_json)

    def write(self, folder: str | Path, report: str) -> None:
        """FOLDER/eval.json (this result, tagged) and FOLDER/eval.md (``report``: its markdown,
        ``evaluate.tables.eval_markdown``, which reads this module — so the caller renders it), each written
        atomically."""
        from simforcing.utils import atomic_write_json, atomic_write_text

        atomic_write_json(Path(folder) / "eval.json", self.to_json())
        atomic_write_text(Path(folder) / "eval.md", report)


# ----------------------------------------------------------------------------------------------------------------------
# The drift of long rollouts (``simforcing rollout``, ``evaluate.rollouts``)
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class ChunkSeries:
    """One row of a rollout scored against the recorded truth, per metric (psnr, ssim, psnr_arm, af_pos; None where
    nothing was scored): the mean of each chunk over episodes (``per_chunk``, K values), the mean over chunks
    (``mean``), each frame's mean over episodes (``per_frame``, T values) and each episode's chunk means
    (``per_episode_chunk``, B × K, kept for paired comparisons)."""

    per_chunk: dict[str, list]
    mean: dict[str, Optional[float]]
    per_frame: dict[str, list]
    per_episode_chunk: dict[str, list[list]]

    def to_json(self) -> dict:
        return {"per_chunk": self.per_chunk, "mean": self.mean, "per_frame": self.per_frame,
                "per_episode_chunk": self.per_episode_chunk}

    @classmethod
    def from_json(cls, d: dict) -> "ChunkSeries":
        """From ``to_json``'s dict, every value a finite number or null (nothing scored; the rollout writes NaN as
        null): a NaN, an infinity or a string is a ``result_files.MalformedResult`` naming the field."""
        def series(key: str, depth: int) -> dict:
            table = typed(d, key, "dict")
            for metric, v in table.items():
                if not _scores(v, depth):
                    shape = {0: "a finite number or null", 1: "a list of finite numbers or nulls",
                             2: "a list of lists of finite numbers or nulls"}[depth]
                    raise MalformedResult(f"field '{key}.{metric}' must be {shape}; got {v!r:.80}")
            return dict(table)

        return cls(series("per_chunk", 1), series("mean", 0), series("per_frame", 1), series("per_episode_chunk", 2))


def _scores(v: object, depth: int) -> bool:
    """Whether ``v`` is a finite number or null (``depth`` 0), or a list of what ``depth − 1`` allows."""
    if depth == 0:
        return v is None or finite_number(v)
    return isinstance(v, list) and all(_scores(x, depth - 1) for x in v)


@dataclass
class RolloutDrift:
    """``simforcing rollout``: ``num_episodes`` episodes (``episode_ids``) of ``split`` rolled out over ``horizon``
    actions in chunks of ``chunk_frames`` frames by the checkpoint of ``run`` (``checkpoint``: step and path), with
    the ``sampler``'s settings, the state input (``state_input``: integrated or read by the ``probe``) and the
    simulation chain (``sim_chain``); every row (``evaluate.rollouts.ROWS``) scored per chunk; the forwards of one
    episode and the seconds (rollout, total)."""

    run: str
    checkpoint: dict
    data: str
    split: str
    horizon: int
    chunk_frames: list[int]
    num_episodes: int
    episode_ids: list[str]
    sampler: dict
    state_input: str
    sim_chain: str
    probe: Optional[str]
    units: str
    forwards_per_episode: int
    rows: dict[str, ChunkSeries]
    seconds: dict[str, float]

    @property
    def chunks(self) -> int:
        return len(self.chunk_frames)

    @property
    def frames(self) -> int:
        """Frames after the first (T)."""
        return sum(self.chunk_frames)

    def to_json(self) -> dict:
        return tagged(ROLLOUT_DRIFT, FORMAT_VERSION, {
            "run": self.run, "checkpoint": self.checkpoint, "data": self.data, "split": self.split,
            "horizon": self.horizon, "chunks": self.chunks, "chunk_frames": self.chunk_frames, "frames": self.frames,
            "num_episodes": self.num_episodes, "episode_ids": self.episode_ids, "sampler": self.sampler,
            "state_input": self.state_input, "sim_chain": self.sim_chain, "probe": self.probe, "units": self.units,
            "forwards_per_episode": self.forwards_per_episode,
            "rows": {name: r.to_json() for name, r in self.rows.items()}, "seconds": self.seconds})

    @classmethod
    def from_json(cls, d: dict, version: int = FORMAT_VERSION) -> "RolloutDrift":
        """From ``to_json``'s dict or a version-1 rollout.json (the same keys, untagged), every field of its type (each
        row's scores finite numbers or null, ``ChunkSeries.from_json``; the seconds finite and >= 0); else a
        ``result_files.MalformedResult`` naming the field."""
        return cls(run=typed(d, "run", "str"), checkpoint=dict(typed(d, "checkpoint", "dict")),
                   data=typed(d, "data", "str"), split=typed(d, "split", "str"), horizon=_count(d, "horizon", 1),
                   chunk_frames=[typed({"chunk_frames": n}, "chunk_frames", "int")
                                 for n in typed(d, "chunk_frames", "list")],
                   num_episodes=_count(d, "num_episodes", 1), episode_ids=list(typed(d, "episode_ids", "list")),
                   sampler=dict(typed(d, "sampler", "dict")),
                   state_input=typed(d, "state_input", "str"), sim_chain=typed(d, "sim_chain", "str"),
                   probe=typed(d, "probe", "str", "null", default=None), units=typed(d, "units", "str"),
                   forwards_per_episode=_count(d, "forwards_per_episode"),
                   rows={name: nested(f"rows.{name}", ChunkSeries.from_json, r)
                         for name, r in typed(d, "rows", "dict").items()}, seconds=_seconds(d))

    @classmethod
    def read(cls, folder: str | Path, what: str) -> "RolloutDrift":
        """FOLDER/rollout.json, or a ConfigError naming ``what`` and what the file holds instead."""
        return read_typed(Path(folder) / "rollout.json", ROLLOUT_DRIFT, FORMAT_VERSION, what, cls.from_json)


def _seconds(d: dict) -> dict[str, float]:
    seconds = typed(d, "seconds", "dict")
    if not all(finite_number(v) and v >= 0 for v in seconds.values()):
        raise MalformedResult(f"field 'seconds' must map each part to a finite number of seconds >= 0; got "
                              f"{seconds!r:.80}")
    return dict(seconds)


# ----------------------------------------------------------------------------------------------------------------------
# Sampler sweeps (``simforcing sweep steps|cfg``, ``evaluate.sweeps``)
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class SweepRow:
    """One configuration of a sweep: its sampler settings (w, N_s, N_r), the checkpoint's training ``p``, ``run`` and
    step (``sweep cfg``), where a w = 0 row was copied from (``reused_from``: the N_s and N_r it was evaluated at,
    ``sweep steps``), and the evaluation's scores (``WindowScores``) that the tables show, with the per-sample PSNR."""

    w: float
    n_sim: int
    n_real: int
    psnr: float
    ssim: float
    psnr_arm: Optional[float]
    lpips: Optional[float]
    fid: Optional[float]
    fvd: Optional[float]
    af_pos: Optional[float]
    af_pos_moving: Optional[float]
    af_floor_pos: Optional[float]
    latency_s: Optional[float]
    latency_phases_s: dict[str, float]
    forwards_per_sample: int
    num_samples: int
    per_sample_psnr: list[float]
    reused_from: Optional[dict] = None
    p: Optional[float] = None
    run: Optional[str] = None
    checkpoint_step: Optional[int] = None

    @classmethod
    def of(cls, scores: WindowScores, w: float, n_sim: int, n_real: int, **where) -> "SweepRow":
        """The row of one evaluated configuration (``where``: p, run and checkpoint_step of ``sweep cfg``)."""
        kept = {k: scores.metric(k) for k in SWEEP_METRICS}
        return cls(w=float(w), n_sim=n_sim, n_real=n_real, **kept, per_sample_psnr=scores.per_sample.get("psnr"),
                   **where)

    def to_json(self) -> dict:
        out = asdict(self)
        return {k: v for k, v in out.items() if v is not None or k not in ("p", "run", "checkpoint_step")}

    @classmethod
    def from_json(cls, d: dict) -> "SweepRow":
        return cls(**{k: d.get(k) for k in SweepRow.__dataclass_fields__})


SWEEP_METRICS = tuple(k for k in SweepRow.__dataclass_fields__ if k in WindowScores.__dataclass_fields__
                      or k in ACTION_KEYS)


class _Sweep:
    """What both sweeps' results share: their JSON is their fields with the configs' rows and the rendered table
    (``table_md``, for people: ``evaluate.tables.steps_markdown`` / ``cfg_markdown``, set by the sweep that made it;
    not compared), tagged as ``KIND``, in ``FILE`` of the sweep's folder."""

    KIND: ClassVar[str]
    FILE: ClassVar[str]

    def to_json(self) -> dict:
        body = {f.name: getattr(self, f.name) for f in fields(self)}
        body["configs"] = [r.to_json() for r in self.configs]
        if "checkpoint" in body:  # the scored runs (runs.scored.ScoredRun)
            body["checkpoint"] = body["checkpoint"].to_json()
        if "checkpoints" in body:
            body["checkpoints"] = {r: v.to_json() for r, v in body["checkpoints"].items()}
        return tagged(self.KIND, FORMAT_VERSION, body)

    @classmethod
    def from_json(cls, d: dict, version: int = FORMAT_VERSION):
        """From ``to_json``'s dict or a version-1 file (the same keys, untagged)."""
        body = {f.name: d[f.name] for f in fields(cls) if f.name != "table_md"}
        if "checkpoint" in body:
            body["checkpoint"] = ScoredRun.from_json(body["checkpoint"])
        if "checkpoints" in body:
            body["checkpoints"] = {r: ScoredRun.from_json(v) for r, v in body["checkpoints"].items()}
        return cls(**{**body, "configs": [SweepRow.from_json(r) for r in d["configs"]],
                      "table_md": typed(d, "table_md", "str", default="")})

    @classmethod
    def read(cls, folder: str | Path, what: str):
        """FOLDER/FILE, or a ConfigError naming ``what`` and what the file holds instead."""
        return read_typed(Path(folder) / cls.FILE, cls.KIND, FORMAT_VERSION, what, cls.from_json)


@dataclass
class StepsSweep(_Sweep):
    """``sweep steps`` (paper Tab. A2–A4): one checkpoint (``run``, ``checkpoint``: ``runs.scored.ScoredRun``) at
    every (N_s, N_r, w) of ``n_sim`` × ``n_real`` × ``w`` on ``num_samples`` windows of ``split``; ``configs`` in that
    order, ``tables`` (metric -> rows (N_s, N_r) × columns w), the heatmap and the notes on reuse and latency."""

    run: str
    checkpoint_step: int
    checkpoint: ScoredRun
    split: str
    num_samples: int
    n_sim: list[int]
    n_real: list[int]
    w: list[float]
    mask_mode: str
    seed: int
    configs: list[SweepRow]
    tables: dict[str, list[list]]
    heatmap: str
    json: str
    notes: list[str]

    table_md: str = field(default="", compare=False)

    KIND: ClassVar[str] = SWEEP_STEPS
    FILE: ClassVar[str] = "sweep_steps.json"


@dataclass
class CfgSweep(_Sweep):
    """``sweep cfg`` (paper Tab. A1): checkpoints trained with different p (``runs``, ``checkpoints``: each one's
    ``runs.scored.ScoredRun``) × guidance weights ``w`` on ``num_samples`` windows of ``split``; ``configs``,
    ``tables`` (metric -> rows p × columns w), the rows' labels and the heatmap."""

    runs: list[str]
    checkpoints: dict[str, ScoredRun]
    split: str
    num_samples: int
    w: list[float]
    configs: list[SweepRow]
    tables: dict[str, list[list]]
    row_labels: list[str]
    heatmap: str
    json: str

    table_md: str = field(default="", compare=False)

    KIND: ClassVar[str] = SWEEP_CFG
    FILE: ClassVar[str] = "sweep_cfg.json"
