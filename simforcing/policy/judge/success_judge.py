"""The success judge: task success read from frames, by the synthetic benchmark's own predicates.

A frozen network J — the state probe's keypoint architecture (``evaluate.probe.StateProbe``) — reads from an
episode's first frame x_0 and a frame x_t (external camera) two vectors in metres:

    r̂_t = ee_t − obj_t        the hand relative to the task object
    d̂_t = obj_t − obj_0       the task object's displacement since the first frame

and the task's predicate (``data.synthetic.tasks``) is applied to them exactly as the simulator applies it to its
state: reach ‖r̂_t‖ ≤ 0.10 m, push d̂_t·direction ≥ 0.04 m, grasp d̂_t[z] ≥ 0.05 m (``task_success(task, ee=r̂_t,
obj=0, obj0=−d̂_t)``). An episode succeeds at the first frame that completes ``consecutive`` (2) judged frames in a row
where the predicate holds (one frame for the simulator's own verdict; a single-frame slip of the judge is not a
success).

The judge reads scenes with one task object — the policy benchmark's LIBERO-like layouts (``data synth-policy
--layouts K``, ``data synth --layout-train N``), whose only named object is the task's — so it needs no instruction.
It is fitted (``simforcing model fit-judge``) on recorded frames with the objects' positions (``objects.npz``): the
paired datasets' real frames of such episodes and the policy datasets' external camera; the same augmentations as the
probe (shift, blur, light, noise, and ghosts: two frames blended, labelled with the blended truth) model generated
frames. Its files record the benchmark it was fitted on (resolution, layouts, predicates): an evaluation elsewhere is
refused by name. Validation (:func:`agreement_stats`) is on simulator rollouts it never saw: precision, recall and
Cohen's κ of its verdicts against MuJoCo's, per frame and per episode, per task.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from simforcing.config import ConfigError
from simforcing.data.format import (DataError, dataset_views, episode_file, is_dataset, load_npz_field, meta_dir,
                                    read_episodes, read_info, read_json, read_lowdim, read_splits, read_video,
                                    view_file)
from simforcing.data.paired import frames_to_target, to_unit_range
from simforcing.data.synthetic.tasks import LIFT_HEIGHT, PUSH_DISTANCE, REACH_RADIUS, Task, task_success
from simforcing.evaluate.probe import (ProbeConfig, ProbeFrames, StateProbe, augment_pair, ghost_frames,
                                      probe_config)
from simforcing.policy.closed_loop.results import JUDGE_OUTPUTS, Confusion
from simforcing.policy.data import FORMAT as POLICY_FORMAT, read_policy_info
from simforcing.runs.folder import JUDGE_FILE, JUDGE_META, what_folder
from simforcing.training.optim import warmup_cosine
from simforcing.utils import atomic_write, atomic_write_json

OBJECTS = "objects.npz"
OUTPUTS = JUDGE_OUTPUTS  # r̂ = ee − obj, d̂ = obj − obj_0 (metres)
PREDICATES = {"reach_radius": REACH_RADIUS, "push_distance": PUSH_DISTANCE, "lift_height": LIFT_HEIGHT}


# ----------------------------------------------------------------------------------------------------------------------
# Verdicts
# ----------------------------------------------------------------------------------------------------------------------


def frame_verdicts(task: Task, readings: np.ndarray) -> np.ndarray:
    """readings (T, 6) = [r̂, d̂] per frame -> bool (T,): the task's predicate on each frame."""
    zero = np.zeros(3)
    return np.array([task_success(task, r[:3], zero, -r[3:]) for r in np.asarray(readings, np.float64)], bool)


def true_readings(ee: np.ndarray, obj: np.ndarray) -> np.ndarray:
    """The simulator's truth in the judge's terms: ee (T, 3), obj (T, 3) the task object -> (T, 6) = [ee − obj,
    obj − obj_0]."""
    return np.concatenate([ee - obj, obj - obj[:1]], axis=1).astype(np.float32)


def first_success(verdicts: Sequence[bool], consecutive: int = 1) -> Optional[int]:
    """Index of the frame that completes the first run of ``consecutive`` True verdicts (the episode's success), or
    None. The simulator's own verdict is the first True (``consecutive`` = 1); a judge's single-frame slips are
    absorbed by asking for more (``SuccessJudge.consecutive``)."""
    v = np.asarray(verdicts, bool)
    run = 0
    for i, ok in enumerate(v):
        run = run + 1 if ok else 0
        if run >= consecutive:
            return i
    return None


# ----------------------------------------------------------------------------------------------------------------------
# The network and its files
# ----------------------------------------------------------------------------------------------------------------------


class JudgeNet(StateProbe):
    """The state probe's keypoint network whose head also reads the hand's initial position q_0 (B, 3) — what an
    episode is given at its first frame with its state — beside the keypoints' motion and their starting place:
    (first frame, frame, q_0) -> the six readings (normalised by ``scale`` as the probe's)."""

    def __init__(self, cfg: ProbeConfig):
        super().__init__(cfg)
        self.head[0] = torch.nn.Linear(4 * cfg.keypoints + 3, cfg.hidden)

    def normalized(self, ref: torch.Tensor, frames: torch.Tensor, q0: torch.Tensor) -> torch.Tensor:
        kp = self.keypoints(self.trunk(torch.cat([ref, frames], dim=0)))  # one trunk for both: (2B, 2K)
        kp_ref, kp = kp.chunk(2, dim=0)
        return self.head(torch.cat([kp - kp_ref, kp_ref, Q0_SCALE * q0.to(kp.dtype)], dim=1))

    def forward(self, ref: torch.Tensor, frames: torch.Tensor, q0: torch.Tensor) -> torch.Tensor:
        return self.normalized(ref, frames, q0) * self.scale


Q0_SCALE = 5.0  # metres -> about unit scale (the workspace spans ~0.4 m)


class SuccessJudge:
    """The frozen judge: ``judge.read(first (B, 3, H, W), frames (B, 3, H, W), q0 (B, 3)) -> (B, 6)`` readings in
    metres; ``judge.benchmark`` what it was fitted on."""

    def __init__(self, net: JudgeNet, benchmark: dict, report: Optional[dict] = None, consecutive: int = 2,
                 source: Optional[JudgeSource] = None):
        self.net, self.benchmark, self.report = net.eval(), dict(benchmark), report or {}
        self.consecutive = int(consecutive)  # judged frames in a row that make an episode's success
        self.source = source  # which files it was loaded from (:func:`judge_identity`); None for one not loaded

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    @property
    def cameras(self) -> int:
        """How many cameras it reads, side by side: 1 (the external camera; every judge before views) or 2
        ([external | wrist], ``model fit-judge --cameras 2``: it sees the contact where the wrist camera does)."""
        return len(self.benchmark.get("cameras") or [self.benchmark.get("camera", "external")])

    @torch.no_grad()
    def read(self, first: torch.Tensor, frames: torch.Tensor, q0, chunk: int = 512) -> torch.Tensor:
        dev = self.device
        q0 = torch.as_tensor(q0, dtype=torch.float32).reshape(-1, 3)
        out = [self.net(first[i:i + chunk].float().to(dev), frames[i:i + chunk].float().to(dev),
                        q0[i:i + chunk].to(dev)) for i in range(0, frames.shape[0], chunk)]
        return torch.cat(out).cpu()

    @torch.no_grad()
    def read_video(self, video: torch.Tensor, q0) -> torch.Tensor:
        """video (B, 3, T, H, W) in [-1, 1], the hand's initial positions q0 (B, 3) -> readings (B, T, 6), every
        frame against the video's frame 0."""
        b, _, t, h, w = video.shape
        frames = video.permute(0, 2, 1, 3, 4).reshape(b * t, 3, h, w)
        first = video[:, :, :1].permute(0, 2, 1, 3, 4).expand(b, t, 3, h, w).reshape(b * t, 3, h, w)
        q = torch.as_tensor(q0, dtype=torch.float32).reshape(b, 1, 3).expand(b, t, 3).reshape(b * t, 3)
        return self.read(first, frames, q).view(b, t, -1)

    def check_benchmark(self, height: int, width: int, layouts: int, where: str) -> None:
        """A ConfigError when the evaluation's frames or scenes are not those the judge was fitted on."""
        bm = self.benchmark
        got = {"resolution": [height, width], "layouts": layouts, "predicates": PREDICATES}
        for key, value in got.items():
            if bm.get(key) != value:
                raise ConfigError(f"--judge: the judge was fitted on a benchmark with {key} {bm.get(key)!r}; {where} "
                                  f"has {value!r}; fit one on this benchmark (`simforcing model fit-judge`)")


def save_judge(judge: SuccessJudge, out: str | Path) -> Path:
    """Write the judge's two files into ``out``; a folder that is another simforcing folder (a world-model run, a
    dataset, results) is refused by name — a judge has a folder of its own. Weights that are not finite are refused
    (nothing is written)."""
    out = Path(out)
    kind = what_folder(out)
    if kind is not None and not kind.startswith("a success judge"):
        raise ConfigError(f"--out: {out} is {kind}; a success judge is written to a folder of its own (e.g. "
                          "--out runs/judge)")
    bad = [k for k, v in judge.net.state_dict().items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise DataError(f"the fitted judge's weights are not finite ({', '.join(bad[:3])}); nothing was written — "
                        "check the fitting data (simforcing data check) and --steps / --batch-size", kind="non_finite")
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in judge.net.state_dict().items()}
    atomic_write(out / JUDGE_FILE, lambda p: save_file(state, str(p)))
    atomic_write_json(out / JUDGE_META, {"format": "simforcing-success-judge", "version": 2,
                                         "config": asdict(judge.net.cfg), "outputs": list(OUTPUTS),
                                         "consecutive": judge.consecutive, "benchmark": judge.benchmark,
                                         "report": judge.report})
    return out


@dataclass(frozen=True)
class JudgeSource:
    """Which judge judged, exactly: the folder it was loaded from (resolved) and one digest over its two files."""

    path: str
    sha256: str


def judge_identity(folder: str | Path) -> JudgeSource:
    """The :class:`JudgeSource` of the judge in ``folder``."""
    folder = Path(folder)
    h = hashlib.sha256()
    for name in (JUDGE_META, JUDGE_FILE):
        h.update(name.encode())
        h.update((folder / name).read_bytes())
    return JudgeSource(str(folder.resolve()), h.hexdigest())


def load_judge(folder: str | Path, device: str | torch.device = "cpu") -> SuccessJudge:
    """The judge written by :func:`save_judge`; a missing or malformed folder is a ValueError naming the file, and
    another simforcing folder (a world-model or policy run, a dataset, results) is named for what it is."""
    folder = Path(folder)
    meta_path, weights = folder / JUDGE_META, folder / JUDGE_FILE
    kind = what_folder(folder)
    if kind is not None and not kind.startswith("a success judge"):
        raise ValueError(f"--judge: {folder} is {kind}, not a success judge; give the folder `simforcing model "
                         "fit-judge --data DIR --out JUDGE` wrote")
    if not meta_path.is_file() or not weights.is_file():
        raise ValueError(f"--judge: {folder} holds no success judge ({JUDGE_META} + {JUDGE_FILE}); fit one with "
                         "`simforcing model fit-judge --data DIR --out JUDGE` (a folder of its own) and give --judge "
                         "JUDGE")
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != "simforcing-success-judge":
            raise ValueError(f"format {meta.get('format')!r}")
        benchmark, report, consecutive = _judge_record(meta)
        net = JudgeNet(probe_config(meta, meta_path))
        net.load_state_dict(load_file(str(weights)))
        if not all(torch.isfinite(v).all() for v in net.state_dict().values() if v.is_floating_point()):
            raise ValueError("its weights are not finite")
    except Exception as e:  # safetensors' own error type, JSON, shapes: all "not a judge", named below
        raise ValueError(f"--judge: {meta_path} / {weights.name} cannot be read as a success judge ({e}); fit it "
                         "again with `simforcing model fit-judge`") from e
    return SuccessJudge(net.to(device), benchmark, report, consecutive, judge_identity(folder))


def _judge_record(meta: dict) -> tuple[dict, Optional[dict], int]:
    """(benchmark, report, consecutive) of a judge.json, each of its type (``result_files.typed``): the benchmark an
    object whose resolution is two sizes >= 1 and whose layouts a count >= 0, the report an object or null, the
    consecutive-frames rule an integer >= 1 (a 0 judged every episode a success at its first frame; a string ended
    in a traceback, a missing benchmark passed as an empty one; version 1, before the rule: 1)."""
    from simforcing.result_files import MalformedResult, typed

    benchmark = typed(meta, "benchmark", "dict")
    resolution, layouts = typed(benchmark, "resolution", "list"), typed(benchmark, "layouts", "int")
    if len(resolution) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in resolution):
        raise MalformedResult(f"benchmark.resolution must be [height, width], two integers >= 1; got {resolution!r}")
    if layouts < 0:
        raise MalformedResult(f"benchmark.layouts must be a count >= 0; got {layouts}")
    # a judge of format version 1 predates the rule: it judged one frame (consecutive 1)
    consecutive = typed(meta, "consecutive", "int", **({"default": 1} if meta.get("version") == 1 else {}))
    if consecutive < 1:
        raise MalformedResult(f"field 'consecutive' must be an integer >= 1 (judged frames in a row that make a "
                              f"success); got {consecutive}")
    return benchmark, typed(meta, "report", "dict", "null", default=None), consecutive


# ----------------------------------------------------------------------------------------------------------------------
# Fitting data: recorded frames with the task object's position
# ----------------------------------------------------------------------------------------------------------------------


def _objects(root: Path, eid: str) -> Optional[dict]:
    path = episode_file(root, eid, OBJECTS)
    if not path.exists():
        return None
    names = [str(n) for n in load_npz_field(path, "names", eid)]
    return {"xyz": load_npz_field(path, "xyz", eid).astype(np.float32), "names": names,
            "target": int(load_npz_field(path, "target", eid))}


@dataclass
class JudgeFrames:
    """Frames uint8 (N, 3, H, W), their readings' truth (N, 6), the episode of each (N,) and its hand's initial
    position q_0 (N, 3)."""

    frames: torch.Tensor
    labels: torch.Tensor
    episode: torch.Tensor
    q0: torch.Tensor

    def merged(self, other: Optional["JudgeFrames"]) -> "JudgeFrames":
        """Both sets as one (``other``'s episode numbers moved past these)."""
        if other is None:
            return self
        shift = int(self.episode.max()) + 1 if len(self.episode) else 0
        return JudgeFrames(torch.cat([self.frames, other.frames]), torch.cat([self.labels, other.labels]),
                           torch.cat([self.episode, other.episode + shift]), torch.cat([self.q0, other.q0]))


def benchmark_layouts(roots: Sequence[str | Path]) -> int:
    """The LIBERO-like layouts the datasets were generated in (0: none)."""
    found = {int((read_json(meta_dir(r) / "info.json", "dataset info").get("synth") or {}).get("layouts") or 0)
             for r in roots}
    found.discard(0)
    return max(found) if found else 0


JUDGE_CAMERAS = ("external", "wrist")  # what a judge of ``cameras`` = 1 or 2 reads, side by side in this order


def _episode_cameras(root: Path, info: dict, policy: bool, eid: str, cameras: int) -> list[np.ndarray]:
    """The real frames of an episode's first ``cameras`` of :data:`JUDGE_CAMERAS`, uint8 (T, h, w, 3) each: a
    policy dataset's side-by-side video cut into its cameras, a paired dataset's real video of each view (a
    paired dataset without the wrist camera is a DataError naming it and the fix)."""
    if policy:
        video = read_video(episode_file(root, eid, "obs.mp4"), eid)
        w = video.shape[2] // len(info["cameras"])
        return [video[:, :, k * w:(k + 1) * w] for k in range(cameras)]
    have = dataset_views(info)
    missing = [v for v in JUDGE_CAMERAS[:cameras] if v not in have]
    if missing:
        raise DataError(f"a judge of {cameras} cameras reads the {missing[0]} camera, which this dataset lacks (its "
                        f"views: {', '.join(have)}); synthesize it with `data synth --views external wrist`, or fit a "
                        "one-camera judge (--cameras 1)", path=meta_dir(root) / "info.json", kind="missing_video")
    return [read_video(episode_file(root, eid, view_file("real", v, have)), eid) for v in JUDGE_CAMERAS[:cameras]]


def read_judge_frames(roots: Sequence[str | Path], height: int, width: int,
                      splits: Sequence[str] = ("train",), cameras: int = 1) -> tuple[JudgeFrames, dict]:
    """Frames (the real look) of every episode of ``splits`` with one named object and an objects.npz, from paired
    or policy datasets, with the judge's labels: the external camera, and with ``cameras`` 2 the wrist camera beside
    it ([external | wrist], each at height × width). Returns (frames, benchmark)."""
    frames, labels, owner, q0 = [], [], [], []
    e = 0
    for root in map(Path, roots):
        check_dataset_folder(root)
        policy = read_json(meta_dir(root) / "info.json", "dataset info").get("format") == POLICY_FORMAT
        info = read_policy_info(root, cameras) if policy else read_info(root)
        index, split_ids = read_episodes(root), read_splits(root)
        for eid in [x for s in splits for x in split_ids.get(s, [])]:
            obj = _objects(root, eid)
            if obj is None or sum(n != "distractor" for n in obj["names"]) != 1:
                continue
            ep = index[eid]
            videos = _episode_cameras(root, info, policy, eid, cameras)
            _, states = read_lowdim(root, eid)
            n = min(*(len(v) for v in videos), len(states), len(obj["xyz"]), ep.length)
            _check_readings(root, eid, n, states[:n], obj["xyz"][:n])
            frames.append(torch.cat([frames_to_target(v[:n], height, width) for v in videos], dim=3)
                          .permute(1, 0, 2, 3))  # (T, 3, H, cameras·W)
            labels.append(torch.from_numpy(true_readings(states[:n, :3], obj["xyz"][:n, obj["target"]])))
            owner.append(torch.full((n,), e))
            q0.append(torch.from_numpy(np.asarray(states[0, :3], np.float32)).expand(n, 3))
            e += 1
    if not frames:
        raise DataError(f"no episode of splits {list(splits)} in {', '.join(map(str, roots))} has one task object "
                        f"and {OBJECTS} (the policy benchmark's layouts: `simforcing data synth --layout-train N` or "
                        "`simforcing data synth-policy --layouts K`, generator version >= 2)", kind="empty_split")
    benchmark = {"resolution": [height, width], "layouts": benchmark_layouts(roots), "predicates": PREDICATES,
                 "camera": "external", "episodes": e, **({"cameras": list(JUDGE_CAMERAS[:cameras])}
                                                          if cameras > 1 else {})}
    return JudgeFrames(torch.cat(frames), torch.cat(labels), torch.cat(owner), torch.cat(q0)), benchmark


def check_dataset_folder(root: Path) -> None:
    """DataError naming ``root`` when it is not a dataset (another simforcing folder is named for what it is)."""
    if not is_dataset(root):
        kind = what_folder(root)
        raise DataError(f"--data: not a dataset ({'it is ' + kind if kind else 'no meta/info.json'}); give the "
                        "folder of `simforcing data synth --layout-train N` or `data synth-policy --layouts K`",
                        path=root, kind="missing_meta")


def _check_readings(root: Path, eid: str, n: int, states: np.ndarray, xyz: np.ndarray) -> None:
    """DataError naming the episode and file when it has no frame or its states / object positions are not finite
    (a judge fitted on them would have NaN weights)."""
    if n < 1:
        raise DataError("no frames to fit on (its video, states or objects are empty)", eid,
                        episode_file(root, eid, OBJECTS), kind="too_short_episode")
    for name, x, file in (("states", states, "lowdim.npz"), ("object positions", xyz, OBJECTS)):
        if not np.isfinite(np.asarray(x, np.float64)).all():
            raise DataError(f"{name} hold NaN or inf", eid, episode_file(root, eid, file), kind="non_finite")


MOVED = min(PUSH_DISTANCE, LIFT_HEIGHT)  # the smallest displacement of the task object any predicate counts (m)


def check_fitting_data(data: JudgeFrames, where: str) -> None:
    """DataError before any fitting when ``data`` cannot teach the judge the predicates: readings that are not
    finite, a task object that never moves as far as a predicate counts, or every frame on one side of the reach
    radius (one class only: the judge would learn one answer)."""
    if not torch.isfinite(data.labels).all() or not torch.isfinite(data.q0).all():
        raise DataError(f"the fitting data of {where} hold non-finite readings", kind="non_finite")
    moved = float(data.labels[:, 3:].norm(dim=1).max())
    if moved < MOVED:
        raise DataError(f"the task object never moves {MOVED} m or more in the {len(data.labels)} frames of {where} "
                        f"(at most {moved:.4f} m): the judge could not learn a push or a lift; fit it on episodes "
                        "where objects are pushed and lifted (--sim-episodes N adds simulator rollouts)",
                        kind="degenerate")
    near = data.labels[:, :3].norm(dim=1) <= REACH_RADIUS
    if bool(near.all()) or not bool(near.any()):
        side = "within" if bool(near.all()) else "beyond"
        raise DataError(f"every one of the {len(data.labels)} frames of {where} has the hand {side} the reach radius "
                        f"({REACH_RADIUS} m) of the task object: one class only, the judge could not learn to tell "
                        "success from failure; add episodes where the hand moves to the object", kind="degenerate")


# ----------------------------------------------------------------------------------------------------------------------
# Fitting
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class JudgeFitOptions:
    steps: int = 3000
    batch_size: int = 48
    lr: float = 2e-3
    seed: int = 0
    shift: int = 1
    ghost_share: float = 0.2  # of each batch: second frames blended from two frames (labels blended)
    consecutive: int = 2  # judged frames in a row that make an episode's success


def _first_of_episode(episode: torch.Tensor) -> torch.Tensor:
    """For every frame the index of its episode's first frame."""
    first = torch.zeros_like(episode)
    for e in episode.unique():
        idx = (episode == e).nonzero().flatten()
        first[idx] = idx[0]
    return first


def fit_judge(roots: Sequence[str | Path], height: int, width: int, opts: JudgeFitOptions = JudgeFitOptions(),
              progress: bool = True, rollouts: Optional[JudgeFrames] = None, cameras: int = 1) -> SuccessJudge:
    """Fit the judge on ``roots`` and the simulator ``rollouts`` (``judge_data.simulated_frames``, of the same
    ``cameras``; module docstring); its report holds the sources and its training errors. ``cameras`` 2: it reads
    [external | wrist] side by side (each ``height × width``)."""
    if cameras not in (1, 2):
        raise ConfigError(f"--cameras: got {cameras}; expected 1 (the external camera) or 2 (external and wrist)")
    torch.manual_seed(opts.seed)
    gen = torch.Generator().manual_seed(opts.seed)
    data, benchmark = read_judge_frames(roots, height, width, cameras=cameras)
    if rollouts is not None and rollouts.frames.shape[-1] != data.frames.shape[-1]:
        raise ConfigError(f"--sim-episodes: the rollouts' frames are {rollouts.frames.shape[-1]} pixels wide, the "
                          f"datasets' {data.frames.shape[-1]}: render them with the judge's cameras ({cameras})")
    data = data.merged(rollouts)
    check_fitting_data(data, ", ".join(map(str, roots)) + (" and the simulator rollouts" if rollouts else ""))
    first = _first_of_episode(data.episode)
    as_probe = ProbeFrames(data.frames, data.labels, data.episode)  # what the probe's ghost augmentation reads
    cfg = ProbeConfig(height=height, width=width * cameras, state_dim=len(OUTPUTS), position_dims=(0, 1, 2),
                      gripper_dim=None)
    net = JudgeNet(cfg)
    net.scale.copy_(data.labels.std(0).clamp(min=1e-3))
    opt = torch.optim.AdamW(net.parameters(), lr=opts.lr, weight_decay=1e-4)
    sched = warmup_cosine(opt, opts.steps, max(1, opts.steps // 20))  # linear warm-up over 5 %, then cosine to 0
    # rare but decisive frames get fixed shares of every batch: the object moved (pushes, lifts), the hand near it
    pools = [((data.labels[:, 3:].norm(dim=1) > 0.02).nonzero().flatten(), 0, opts.batch_size // 3),
             ((data.labels[:, :3].norm(dim=1) < 0.14).nonzero().flatten(), opts.batch_size // 3, opts.batch_size // 2)]
    n_ghost = int(opts.batch_size * opts.ghost_share)
    t0 = time.perf_counter()
    net.train()
    for _ in tqdm(range(opts.steps), desc="fit success judge", leave=False, disable=not progress):
        j = torch.randint(0, data.frames.shape[0], (opts.batch_size,), generator=gen)
        for pool, a, b in pools:
            if len(pool):
                j[a:b] = pool[torch.randint(0, len(pool), (b - a,), generator=gen)]
        x, y = data.frames[j].float(), data.labels[j].clone()
        gx, gy = ghost_frames(as_probe, j[-n_ghost:], j[-n_ghost:], gen)
        x[-n_ghost:], y[-n_ghost:] = gx, gy
        ref, x = augment_pair(to_unit_range(data.frames[first[j]]), to_unit_range(x), gen, opts.shift)
        loss = F.smooth_l1_loss(net.normalized(ref, x, data.q0[j]), y / net.scale, beta=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    net.eval()
    with torch.no_grad():
        pred = torch.cat([net(to_unit_range(data.frames[first[k:k + 512]]), to_unit_range(data.frames[k:k + 512]),
                              data.q0[k:k + 512])
                          for k in range(0, data.frames.shape[0], 512)])
    err = (pred - data.labels).abs().mean(0)
    report = {"frames": int(data.frames.shape[0]), "episodes": int(data.episode.max()) + 1,
              "rollout_frames": 0 if rollouts is None else int(rollouts.frames.shape[0]), "steps": opts.steps,
              "batch_size": opts.batch_size, "seed": opts.seed, "fit_seconds": round(time.perf_counter() - t0, 1),
              "train_mean_abs_error_m": {k: round(float(v), 4) for k, v in zip(OUTPUTS, err)}}
    return SuccessJudge(net, benchmark, report, opts.consecutive)


# ----------------------------------------------------------------------------------------------------------------------
# Agreement with the simulator's verdicts
# ----------------------------------------------------------------------------------------------------------------------


def confusion(pred: Sequence[bool], true: Sequence[bool]) -> Confusion:
    """Precision, recall, accuracy and Cohen's κ of ``pred`` against ``true`` (None where undefined)."""
    p, t = np.asarray(pred, bool), np.asarray(true, bool)
    tp, fp = int((p & t).sum()), int((p & ~t).sum())
    fn, tn = int((~p & t).sum()), int((~p & ~t).sum())
    n = tp + fp + fn + tn
    acc = (tp + tn) / n if n else None
    pe = ((tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)) / (n * n) if n else None
    kappa = None if n == 0 or pe is None or pe >= 1 else (acc - pe) / (1 - pe)
    return Confusion(tp, fp, fn, tn, n, tp / (tp + fp) if tp + fp else None, tp / (tp + fn) if tp + fn else None,
                     acc, kappa)
