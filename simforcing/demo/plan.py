"""The demo as a graph of `simforcing` commands: what runs, in which order, on how many cores, and what is reused.

Every number of the report comes from one command of this graph (the report cites it). Each job writes into its own
folder and records its provenance there (:mod:`simforcing.runs.provenance`: the command, sizes, seed, code version and
the records of its inputs); a job whose folder records exactly what this demo run asks for — and finished — is not
run again, and a folder made from other inputs is remade (a run folder only when it is a simforcing run or carries a
demo record). Jobs run side by side on ``jobs`` slots (:mod:`simforcing.jobs`) with a fixed thread count each, so the
results do not depend on ``jobs``.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from simforcing.data.format import is_dataset
from simforcing.data.synthetic.generate import GENERATOR_VERSION
from simforcing.jobs import Job
from simforcing.demo.policy_section import QUICK as POLICY_QUICK, PolicyBudget, policy_jobs
from simforcing.demo.transfer_section import TRANSFER_QUICK, TransferBudget, full_policy_jobs, wm_key, wm_seed_list
from simforcing.runs.provenance import (check_provenance, digest, provenance_record, remove_stale_run, run_finished,
                                        spelled, why_stale, write_provenance)

SEED = 42
BASE_METHODS = ("sft", "simforcing")


@dataclass
class WorldModelEvalBudget:
    """The world-model policy evaluation's sizes (``_Builder.world_model_eval``)."""

    per_task: int = 5  # held-out layout scenes per task (the default demo)
    per_task_full: int = 30  # with --full
    budgets: tuple = (500,)  # training steps of the one-camera policies (the default demo)
    budgets_full: tuple = (250, 500)  # with --full: two budgets
    expert_noise: tuple = (0.01, 0.02, 0.04)  # metres per step: the scripted expert degraded
    # the success judge (its accuracy caps the agreement; both validated in docs/notebook/policy_evaluation.md): fitting
    # steps, simulator rollouts it is also fitted on (another scene seed), and the rendered frames of each rollout
    # (``model fit-judge --sim-frames K``: only K frames rendered, so many more scenes for the time; None: every frame)
    judge_steps: int = 5000
    judge_steps_full: int = 5000
    judge_rollouts: int = 600
    judge_rollouts_full: int = 600
    judge_frames: Optional[int] = 8
    judge_frames_full: Optional[int] = None
    # the prediction-powered estimate (``policy estimate``, docs/POLICY_EVALUATION.md): a pool of scenes per task
    # evaluated in the simulator (the truth) and inside the world models (the few-step student by default: 2 network
    # evaluations per chunk; --full also SimForcing, sft and the twin), n ground-truth scenes per policy drawn
    # ``estimate_draws`` times for the coverage study over ``estimate_study_n``
    pool_per_task: int = 20
    pool_per_task_full: int = 30
    estimate_n: int = 10
    estimate_draws: int = 400
    estimate_study_n: tuple = (10,)
    estimate_study_n_full: tuple = (5, 10, 20, 40)


@dataclass
class FewStepBudget:
    """The few-step student of the SimForcing world model (``simforcing distill``, docs/FEWSTEP.md): its K, the
    objective and the short fine-tuning of the teacher that distils it."""

    steps: int = 1  # K: network evaluations of the real branch per chunk (N_s + K in all; docs/FEWSTEP.md)
    objective: str = "trajectory"
    distill_steps: int = 100
    batch_size: int = 2
    lr: float = 3e-4


WM_EVAL_QUICK = WorldModelEvalBudget(per_task=1, per_task_full=1, budgets=(3,), budgets_full=(3,), expert_noise=(0.02,),
                                     judge_steps=20, judge_steps_full=20, judge_rollouts=2, judge_rollouts_full=2,
                                     pool_per_task=2, pool_per_task_full=2, estimate_n=2, estimate_draws=3,
                                     estimate_study_n=(2, 3), estimate_study_n_full=(2, 3))


@dataclass
class EvaluatorBudget:
    """The evaluator world model (``simforcing.recipes.EVALUATOR``, docs/POLICY_EVALUATION.md): SimForcing's stage 2
    from the demo's stage 1 on paired episodes that show what policies do — the recipe's operators in ``layout_train``
    episodes of the policy benchmark's layouts beside ``num_train`` of varied scenes — and its few-step student, which
    the policy evaluations, the estimate and the fidelity point use. The paper's tables keep the paper's data."""

    num_train: int = 20
    layout_train: int = 100
    steps: int = 600
    batch: int = 8


VIEWS = ("external", "wrist")  # the multi-view world model's cameras (``data synth --views``, ``data.views``)
VIEWS_TAG = "-views"  # a run tag's suffix: the same method on both cameras


def views_of(tag: str) -> str:
    """The run tag (and world-model name) of method ``tag`` trained on both cameras."""
    return tag + VIEWS_TAG


@dataclass
class ViewsBudget:
    """The multi-view world model (issue 67, ``data.views=external,wrist``): stage 1 continued from the one-view
    stage 1 on both cameras (``pretrain --init STAGE1``: the same network, a frame twice as wide), then `sft` and
    SimForcing on the paper's data with both cameras for as many steps as the one-view runs (the comparison is the
    camera alone), SimForcing's few-step student; its policy evaluations with the twin."""

    enabled: bool = True
    stage1_steps: int = 250  # the second camera's simulation: the fingers on black, little to learn (notebook/views)
    stage1_batch: int = 16
    stage1_lr: float = 1e-3  # a continuation: below stage 1's 3e-3


@dataclass
class Budget:
    """Sizes of one demo run; `--quick` and the default differ only here."""

    num_train: int = 20
    num_val: int = 16
    num_sim_pool: int = 300
    length: int = 33
    stage1_steps: int = 2000
    stage1_batch: int = 16
    # stage 1's threads and slots. 2: both cores to itself (1.5x faster than one thread; the judge and the policy
    # benchmark's data after it), so the one-window table comes ~2 minutes sooner for ~1 more minute of demo
    # (docs/notebook/world_models.md, "Wall time"); its threads follow the governor (train.threads=auto: 2 on a quiet
    # machine, the same float sums every run; fewer, logged, while another program keeps a core busy). 1: one fixed
    # thread, the judge beside it on the other core.
    stage1_threads: int = 2
    stage2_steps: int = 600
    stage2_batch: int = 8
    eval_windows: int = 5  # evaluation windows per validation episode (evenly spaced)
    sweep_windows: int = 2
    sweep_n_real: tuple = (1, 5, 10)
    sweep_w: tuple = (0.0, 0.6, 1.0)
    cfg_sweep_w: tuple = (0.0, 0.3, 0.6, 1.0)
    probe_steps: int = 1200
    report_videos: int = 3
    long_val: int = 16  # held-out episodes for long rollouts (their own dataset, seed 1)
    long_length: int = 65  # frames: 8 chunks of 8 actions
    rollout_horizon: int = 64
    rollout_videos: int = 2
    layout_train: int = 20  # paired training episodes in the policy benchmark's layouts (the world model knows them)
    policy: PolicyBudget = field(default_factory=PolicyBudget)
    wm_eval: WorldModelEvalBudget = field(default_factory=WorldModelEvalBudget)
    transfer: TransferBudget = field(default_factory=TransferBudget)  # --full: the video base, seeds × inits
    fewstep: FewStepBudget = field(default_factory=FewStepBudget)
    evaluator: EvaluatorBudget = field(default_factory=EvaluatorBudget)
    views: ViewsBudget = field(default_factory=ViewsBudget)


QUICK = Budget(num_train=4, num_val=3, num_sim_pool=12, length=17, stage1_steps=30, stage1_batch=8, stage2_steps=20,
               eval_windows=1, sweep_windows=1, sweep_n_real=(1, 2), probe_steps=30, report_videos=1, long_val=3,
               long_length=25, rollout_horizon=24, rollout_videos=1, layout_train=4, policy=POLICY_QUICK,
               wm_eval=WM_EVAL_QUICK, transfer=TRANSFER_QUICK, fewstep=FewStepBudget(distill_steps=3),
               evaluator=EvaluatorBudget(num_train=2, layout_train=4, steps=10, batch=4),
               views=ViewsBudget(stage1_steps=5, stage1_batch=4))


def demo_budget(quick: bool = False, stage1_steps: Optional[int] = None,
                stage2_steps: Optional[int] = None) -> Budget:
    budget = copy.deepcopy(QUICK if quick else Budget())
    if stage1_steps:
        budget.stage1_steps = stage1_steps
    if stage2_steps:
        budget.stage2_steps = stage2_steps
    return budget


# ----------------------------------------------------------------------------------------------------------------------
# The ablations of --full (paper Tab. 2, Tab. 3, Tab. A1): name -> (method, extra overrides)
# ----------------------------------------------------------------------------------------------------------------------

FULL_RUNS = {
    "joint_fm": ("joint_fm", []),
    "motion_distill": ("motion_distill", []),
    "value_distill": ("value_distill", []),
    "simforcing_fixed_window": ("simforcing", ["--data.fixed_window=true"]),  # Tab. 2 "trajectory augmentation" off
    "simforcing_p0": ("simforcing", ["--conditioning.p=0"]),
    "simforcing_p0.3": ("simforcing", ["--conditioning.p=0.3"]),
    "simforcing_p1": ("simforcing", ["--conditioning.p=1"]),
}
P_RUNS = ("simforcing_p0", "simforcing_p0.3", "simforcing", "simforcing_p1")  # Tab. A1 rows (p = 0, 0.3, 0.7, 1)


def run_tag(name: str, seed: int) -> str:
    return name if seed == SEED else f"{name}_seed{seed}"


@dataclass(frozen=True)
class EvalKey:
    """One evaluation of the demo (``Plan.evals``), as the report looks it up: what is scored (``subject``: a run tag,
    a baseline, "teacher"), in which domain ("real", or "sim": the recorded simulation video, the gate off) and with
    which change to the paper's sampler (``variant``: "" for none). ``name`` is its job's and folder's name."""

    subject: str
    domain: str = "real"
    variant: str = ""

    @property
    def name(self) -> str:
        return ("sim " if self.domain == "sim" else "") + self.subject + (f" {self.variant}" if self.variant else "")


def one_step(method: str) -> EvalKey:
    """The network's one-step prediction (N_r = 1) of a method's run: an extra row of the windows table."""
    return EvalKey(method, variant="N_r=1")


def teacher_in_sim(steps: int) -> EvalKey:
    return EvalKey("teacher", "sim", f"N={steps}")


def own_rollout_in_sim(method: str) -> EvalKey:
    """A student's own simulation rollout (N_s = 1), scored on the recorded simulation video: its condition."""
    return EvalKey(method, "sim", "rollout")


ORACLE_CONDITION = EvalKey("simforcing", variant="oracle condition")  # the recorded sim video as the condition
REMASK = EvalKey("simforcing", variant="remask")  # rollouts: the simulation chain re-masked from the recorded masks


def twin_condition(method: str) -> EvalKey:
    """Rollouts: every chunk's condition rendered by the robot's digital twin from the actions."""
    return EvalKey(method, variant="twin")


STUDENT = "simforcing-fewstep"  # the few-step student's run tag (and its world model's name in the agreement)
EVALUATOR = "evaluator"  # the evaluator world model's run tag (EvaluatorBudget)
TWIN = "-twin"  # a world model's name with the robot's digital twin as its condition (--wm-condition render)


def student_of(tag: str) -> str:
    """The run tag (and world-model name) of the few-step student of run ``tag``."""
    return f"{tag}-fewstep"


def few_step(method: str = "simforcing") -> EvalKey:
    """The few-step student of a method's world model (``simforcing distill``), scored as its teacher is."""
    return EvalKey(method, variant="few-step")


def evaluator_oracle() -> EvalKey:
    """The evaluator's few-step student on one window with the recorded simulation video as its condition."""
    return EvalKey(student_of(EVALUATOR), variant="oracle condition")


def probe_state(method: str) -> EvalKey:
    """Rollouts: later chunks' state input read from the generated frames by the state probe."""
    return EvalKey(method, variant="probe state")


# ----------------------------------------------------------------------------------------------------------------------
# Building the graph
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvaluatorRuns:
    """The evaluator's folders (``_Builder.evaluator``): its data, its stage-2 run and its few-step student."""

    data: Path
    run: Path
    student: Path


@dataclass(frozen=True)
class PoolFolders:
    """The pool's folders (``_Builder.estimate_pool``): the simulator's evaluation (the truth), each world model's
    evaluation and estimate by name, and their agreement."""

    sim_pool: Path
    pool_evals: dict
    estimate: dict
    pool_agreement: Path


@dataclass(frozen=True)
class TwoCameraFolders:
    """Tab. 5's two-camera policies inside the multi-view world model (``_Builder.two_camera_policies``): Tab. 5's
    simulator evaluations (the truth), the world model's evaluation, their agreement, the policies' names."""

    sim: list[Path]
    wm: Path
    agreement: Path
    players: list[str]


@dataclass(frozen=True)
class SceneFolders:
    """--full's full-scene pairing (``_Builder.full_scene``): its data, runs and students by method, one-window
    evaluations and rollouts by name, the pool's evaluations and estimates by name, their agreement."""

    out: Path
    data: Path
    runs: dict
    students: dict
    evals: dict
    rollouts: dict
    pool: dict
    estimates: dict
    agreement: Path


@dataclass
class Plan:
    out: Path
    data: Path
    budget: Budget
    jobs: list
    evals: dict  # EvalKey -> folder holding eval.json
    runs: dict  # run tag -> folder
    sweeps: dict  # "steps" / "cfg" -> folder
    videos: dict  # method -> folder
    policy: Optional[dict]  # what the policy section writes, or None
    methods: tuple
    seeds: list
    full: bool
    notes: list  # lines printed before running (what is remade and why)
    commands: dict  # job name -> the command a user types to reproduce its output
    rollouts: dict = field(default_factory=dict)  # {"data": the long episodes, "folders": EvalKey -> rollout folder}
    wm_eval: Optional[dict] = None  # the world-model policy evaluation's folders (None without it)
    student: Optional[Path] = None  # the few-step student's run folder
    fidelity: Optional[Path] = None  # the evaluator's fidelity (``fidelity point``)
    evaluator: Optional[EvaluatorRuns] = None  # the evaluator's folders (None without the policy section)
    students: dict = field(default_factory=dict)  # run tag -> its few-step student's folder
    scene: Optional[SceneFolders] = None  # --full: the full-scene pairing's folders (``_Builder.full_scene``)
    views: dict = field(default_factory=dict)  # method -> its multi-view run (``_Builder.views_section``)


class _Builder:
    def __init__(self, out: Path, data: Path, budget: Budget, overrides: list[str], jobs: int):
        self.out, self.data, self.b, self.ov, self.slots = out, data, budget, list(overrides), max(1, int(jobs))
        from simforcing.runs.loaded import sampling_overrides

        # the overrides a command sampling a trained run honours (the rest is in the runs' configs already; a loaded
        # run refuses them: runs.loaded.check_sampling_overrides), and those of a sampler whose steps and w are its
        # own (the sweeps': their --n-* / --w; the few-step student's: distilled)
        self.sample_ov = sampling_overrides(self.ov)
        self.own_steps_ov = sampling_overrides(self.ov, leave_out=("sample.n_sim", "sample.n_real", "sample.w"))
        self.jobs: list[Job] = []
        self.records: dict[str, dict] = {}  # job name -> provenance record (its digest feeds its dependents)
        self.notes: list[str] = []
        self.data_dep: tuple = ()  # ("data",) when the demo makes the dataset itself (data_and_vae)
        self.vae, self.probe, self.stage1 = out / "vae", out / "probe", out / "stage1"
        self.video_base_dir: Optional[Path] = None  # --full: stage 0, which stage 1 starts from (video_base_section)
        self.student = out / STUDENT.replace("-", "_")  # the few-step student of the SimForcing world model
        self.students: dict[str, Path] = {}  # run tag -> its few-step student (:meth:`distill`)
        self.evaluator_run: Optional[Path] = None  # the evaluator world model (:meth:`evaluator`)
        self.views_runs: dict[str, Path] = {}  # method -> its run on both cameras (:meth:`views_section`)
        self.pool_args: list[str] = []  # the pool's `policy eval` arguments (:meth:`estimate_pool`)

    # -- provenance --------------------------------------------------------------------------------------------------
    def record(self, name: str, job_argv: list[str], sizes: dict, seed: Optional[int], inputs: tuple) -> dict:
        rec = provenance_record("simforcing " + " ".join(job_argv), sizes, seed,
                                {i: digest(self.records[i]) for i in inputs})
        self.records[name] = rec
        return rec

    def add(self, name: str, argv: list[str], folder: Path, done_file: Optional[str], deps: tuple = (), *,
            sizes: Optional[dict] = None, seed: Optional[int] = None, inputs: tuple = (), priority: int = 0,
            slots: int = 1, threads: int = 1, run_steps: Optional[int] = None, extra: tuple = ()) -> Job:
        """A job writing ``folder``: skipped when the folder records this job and is complete (``done_file`` exists,
        or, for a training run, its status says finished at ``run_steps``); a stale training run is removed.
        ``extra`` arguments are run but not recorded (e.g. --overwrite)."""
        rec = self.record(name, argv, sizes or {}, seed, inputs or deps)
        argv = argv + list(extra)
        stale = check_provenance(folder, rec) if folder.exists() else []
        if run_steps is not None:
            def complete() -> bool:
                return not check_provenance(folder, rec) and run_finished(folder, run_steps)
            if folder.exists() and stale:
                self.notes.append(remove_stale_run(folder, stale))
            elif folder.exists() and (folder / "checkpoints").exists() and not run_finished(folder, run_steps):
                argv = argv + ["--resume"]

            def start(folder=folder, rec=rec):
                folder.mkdir(parents=True, exist_ok=True)
                write_provenance(folder, rec)
            on_start, on_done = start, None
        else:
            def complete() -> bool:
                return not check_provenance(folder, rec) and (done_file is None or (folder / done_file).exists())
            if folder.exists() and stale and done_file is not None and (folder / done_file).exists() \
                    and name != "data":
                self.notes.append(f"{folder}: made again ({why_stale(stale)})")
            on_start, on_done = None, (lambda folder=folder, rec=rec: write_provenance(folder, rec))
        job = Job(name, argv, deps=deps, slots=min(slots, self.slots), threads=threads, priority=priority,
                  skip=complete, on_start=on_start, on_done=on_done)
        self.jobs.append(job)
        return job

    # -- the sections of the graph ------------------------------------------------------------------------------------
    def data_and_vae(self, own_data: bool) -> tuple:
        """1. the benchmark (unless the user gave one) and the demo VAE; returns the data dependency."""
        b, data = self.b, self.data
        if own_data:
            argv = ["data", "synth", "--out", str(data), "--num-train", str(b.num_train), "--num-val", str(b.num_val),
                    "--num-sim-pool", str(b.num_sim_pool), "--length", str(b.length), "--height", "32", "--width",
                    "48", "--seed", "0", "--workers", str(min(2, self.slots)), *self.views_flags()]
            if b.layout_train:  # the policy benchmark's scenes, so the world models know where policies act
                argv += ["--layout-train", str(b.layout_train), "--layouts", str(b.policy.layouts), "--jitter",
                         f"{b.policy.jitter:g}"]
            sizes = {"num_train": b.num_train, "num_val": b.num_val, "num_sim_pool": b.num_sim_pool,
                     "length": b.length, "generator": GENERATOR_VERSION, "layout_train": b.layout_train}
            self.add("data", argv, data, "meta/stats.json", priority=100, slots=2, sizes=sizes, seed=0,
                     extra=("--overwrite",) if is_dataset(data) else ())
            stale_data = is_dataset(data) and check_provenance(data, self.records["data"])
            if stale_data:
                self.notes.append(f"regenerating {data}: it was not made by this demo run ({why_stale(stale_data)})")
            self.data_dep = ("data",)
        else:  # the user's dataset, used as it is
            self.records["data"] = {"given": str(data.resolve())}
            self.data_dep = ()
        self.add("vae", ["model", "fit-vae", "--data", str(data), "--out", str(self.vae)], self.vae, "config.json",
                 self.data_dep, inputs=("data",), priority=90)
        return self.data_dep

    def views_flags(self) -> list[str]:
        """``data synth``'s cameras: the wrist camera beside the external one when the demo trains the multi-view
        world model (the external camera's files are the one-view dataset's, byte for byte)."""
        return ["--views", *VIEWS] if self.b.views.enabled else []

    def long_threads(self) -> str:
        """The threads flag of the long pre-training jobs (stage 1, the video base): one fixed thread on one slot, or
        the governor (``train.threads=auto``) when they hold more (``Budget.stage1_threads``)."""
        return f"--train.threads={'auto' if self.b.stage1_threads > 1 else 1}"

    def policy_data_after(self) -> tuple:
        """What the policy benchmark's data waits for: the demo's data, and stage 1 when stage 1 holds every slot
        (made before it, the data would hold a core stage 1 waits for)."""
        return self.data_dep + (("stage1",) if min(self.b.stage1_threads, self.slots) >= self.slots else ())

    def stage1_and_probe(self) -> None:
        """2. stage 1, the simulation world model (``Budget.stage1_threads`` cores: both, the judge after it; one, the
        judge beside it); 3. the state probe (after stage 1: it would hold a core stage 1 wants). Every one-window
        score needs the probe, so it starts before the `sft` run and the few-step student (priority 73: SimForcing 75,
        the student 72, `sft` 70): the one-window table half a minute earlier, the demo as long
        (docs/demo_timing/replay.py)."""
        b = self.b
        base = ("video base",) if self.video_base_dir else ()  # --full: from the video base (video_base_section)
        s1 = ["pretrain", *(["--init", str(self.video_base_dir)] if base else []), "--preset", "demo", "--data",
              str(self.data), "--out", str(self.stage1), f"--model.vae.path={self.vae}",
              f"--train.max_steps={b.stage1_steps}", f"--train.batch_size={b.stage1_batch}", self.long_threads(),
              *self.ov]
        self.add("stage1", s1, self.stage1, None, ("vae",) + base, sizes={"stage1_steps": b.stage1_steps}, seed=SEED,
                 inputs=("data", "vae") + base, priority=80, slots=b.stage1_threads, threads=b.stage1_threads,
                 run_steps=b.stage1_steps)
        self.add("probe", ["model", "fit-probe", "--data", str(self.data), "--out", str(self.probe), "--steps",
                           str(b.probe_steps)], self.probe, "probe.json", ("stage1",), inputs=("data",), priority=73)

    def stage2(self, names: list[str], seed_list: list[int]) -> dict[str, Path]:
        """4. stage 2 per method and seed, from the one stage-1 checkpoint."""
        b, runs = self.b, {}
        for seed in seed_list:
            for name in names:
                method, extra = FULL_RUNS.get(name, (name, []))
                tag = run_tag(name, seed)
                run = runs[tag] = self.out / tag
                argv = ["train", "--method", method, "--teacher", str(self.stage1), "--data", str(self.data), "--out",
                        str(run), f"--train.seed={seed}", f"--train.max_steps={b.stage2_steps}",
                        f"--train.batch_size={b.stage2_batch}", "--train.threads=1", *extra, *self.ov]
                self.add(f"train {tag}", argv, run, None, ("stage1",), sizes={"stage2_steps": b.stage2_steps},
                         seed=seed, inputs=("stage1",), priority=70 + (5 if method == "simforcing" else 0),
                         run_steps=b.stage2_steps)
        return runs

    def distill(self, tag: str = "simforcing", teacher: Optional[Path] = None, data: Optional[Path] = None,
                deps: tuple = ()) -> Path:
        """4a. the few-step student of run ``tag`` (``simforcing distill``; its folder ``teacher``, default OUT/tag,
        on ``data``, default the demo's): the same network fine-tuned so that K steps of its conditional branch
        reproduce the teacher's guided sampler (an unconditioned run's: its K-step sampler). Returns its folder."""
        f = self.b.fewstep
        teacher, data = teacher or self.out / tag, data or self.data
        folder = self.student if tag == "simforcing" else self.out / student_of(tag).replace("-", "_")
        argv = ["distill", "--teacher", str(teacher), "--steps", str(f.steps), "--objective",
                f.objective, "--data", str(data), "--out", str(folder), f"--train.lr={f.lr:g}",
                f"--train.batch_size={f.batch_size}", f"--train.max_steps={f.distill_steps}",
                f"--train.ckpt_every={f.distill_steps}", "--train.threads=1", "--no-progress"]
        self.add(f"distill {tag}", argv, folder, None, (f"train {tag}",) + deps,
                 sizes={"distill_steps": f.distill_steps}, seed=SEED, inputs=(f"train {tag}",) + deps,
                 priority=72 if tag == "simforcing" else 65, run_steps=f.distill_steps)
        self.students[tag] = folder
        return folder

    def evaluator(self) -> EvaluatorRuns:
        """4b. the evaluator world model (``EvaluatorBudget``, ``simforcing.recipes.EVALUATOR``): its data — the
        recipe's operators in the policy benchmark's layouts — SimForcing's stage 2 on it from the one stage-1
        checkpoint, and its few-step student."""
        from simforcing.recipes import EVALUATOR as RECIPE

        b, e = self.b, self.b.evaluator
        data, run = self.out / "data_evaluator", self.out / EVALUATOR
        argv = ["data", "synth", "--out", str(data), "--num-train", str(e.num_train), "--num-val", "0",
                "--num-sim-pool", "0", "--length", str(b.length), "--height", "32", "--width", "48", "--seed", "0",
                "--workers", "1", "--layout-train", str(e.layout_train), "--layouts", str(b.policy.layouts),
                "--jitter", f"{b.policy.jitter:g}", "--recipe", RECIPE.name]
        self.add("data evaluator", argv, data, "meta/stats.json", ("stage1",), priority=68, seed=0,
                 sizes={"num_train": e.num_train, "layout_train": e.layout_train, "generator": GENERATOR_VERSION,
                        "recipe": RECIPE.record()}, inputs=(), extra=("--overwrite",) if is_dataset(data) else ())
        argv = ["train", "--method", "simforcing", "--recipe", RECIPE.name, "--teacher", str(self.stage1), "--data",
                str(data), "--out", str(run), f"--train.seed={SEED}", f"--train.max_steps={e.steps}",
                f"--train.batch_size={e.batch}", "--train.threads=1", *self.ov]
        self.add(f"train {EVALUATOR}", argv, run, None, ("stage1", "data evaluator"), sizes={"steps": e.steps},
                 seed=SEED, inputs=("stage1", "data evaluator"), priority=69, run_steps=e.steps)
        self.evaluator_run = run
        student = self.distill(EVALUATOR, run, data, ("data evaluator",))
        return EvaluatorRuns(data, run, student)

    def views_section(self) -> dict[str, Path]:
        """4c. the multi-view world model (``ViewsBudget``, issue 67): stage 1 continued on both cameras from the
        one-view stage 1, `sft` and SimForcing on them from it (the paper's data, its steps), SimForcing's few-step
        student. Returns the runs by method (their scores: :meth:`evaluations`, their rollouts and pools: the
        sections after)."""
        b, v = self.b, self.b.views
        stage1 = self.out / "stage1_views"
        argv = ["pretrain", "--init", str(self.stage1), "--preset", "demo", "--data", str(self.data), "--out",
                str(stage1), f"--model.vae.path={self.vae}", f"--data.views={','.join(VIEWS)}",
                f"--train.max_steps={v.stage1_steps}", f"--train.batch_size={v.stage1_batch}",
                f"--train.lr={v.stage1_lr:g}", "--train.threads=1", *self.ov]
        self.add("stage1 views", argv, stage1, None, ("stage1",), sizes={"views_stage1_steps": v.stage1_steps},
                 seed=SEED, inputs=("data", "vae", "stage1"), priority=74, run_steps=v.stage1_steps)
        for m in BASE_METHODS:
            tag = views_of(m)
            run = self.views_runs[m] = self.out / tag.replace("-", "_")
            argv = ["train", "--method", m, "--teacher", str(stage1), "--data", str(self.data), "--out", str(run),
                    f"--train.seed={SEED}", f"--train.max_steps={b.stage2_steps}",
                    f"--train.batch_size={b.stage2_batch}", "--train.threads=1", *self.ov]
            self.add(f"train {tag}", argv, run, None, ("stage1 views",), sizes={"stage2_steps": b.stage2_steps},
                     seed=SEED, inputs=("stage1 views",), priority=66 + (2 if m == "simforcing" else 0),
                     run_steps=b.stage2_steps)
        self.distill(views_of("simforcing"), self.views_runs["simforcing"])
        return dict(self.views_runs)

    def evaluations(self, runs: dict[str, Path]) -> dict[EvalKey, Path]:
        """5. evaluation at the paper's sampler (1, 10, 0.6) with the action-following error and its control; the
        baselines; where the gain is lost."""
        b, evals = self.b, {}
        common = ["--data", str(self.data), "--split", "val", "--num-samples", str(b.num_val * b.eval_windows),
                  f"--eval.probe={self.probe}", f"--eval.windows_per_episode={b.eval_windows}"]

        def evaluate(key: EvalKey, argv: list[str], deps: tuple, priority: int = 50) -> None:
            folder = evals[key] = self.out / "eval" / key.name.replace(" ", "_")
            students = {str(f) for f in self.students.values()} | {str(self.student)}
            ov = (self.ov if "--baseline" in argv else self.own_steps_ov if students & set(argv)
                  else self.sample_ov)
            self.add(f"eval {key.name}", ["evaluate", *argv, "--out", str(folder), *common, *ov], folder,
                     "eval.json", deps + ("probe",), inputs=deps + ("probe",), priority=priority)

        vae = f"--model.vae.path={self.vae}"
        for base in ("copy-first", "vae-recon"):  # the one-window table's floor and ceiling: as soon as the probe is
            evaluate(EvalKey(base), ["--baseline", base, "--preset", "demo", vae], ("vae",), priority=71)
            evaluate(EvalKey(base, "sim"), ["--baseline", base, "--preset", "demo", vae, "--domain", "sim"], ("vae",))
        for tag, run in runs.items():  # before the evaluator's data and stage 2 (68, 69): a minute of jobs that
            # completes the table ~5 minutes sooner (docs/demo_timing/replay.py on 7fd1d3f's run: 16.4 -> 11.3 min)
            evaluate(EvalKey(tag), ["--ckpt", str(run)], (f"train {tag}",), priority=70)
        for m in BASE_METHODS:  # the network's one-step prediction (its conditional mean), an extra row
            evaluate(one_step(m), ["--ckpt", str(runs[m]), "--sample.n_real=1", "--eval.action_control=false"],
                     (f"train {m}",))
        # where the gain is lost: the teacher in simulation, the students' own simulation rollouts (the condition at
        # inference, N_s = 1 steps), and the real rollout with the recorded sim video as the condition (upper bound)
        for steps in (1, 10):
            evaluate(teacher_in_sim(steps), ["--ckpt", str(self.stage1), "--domain", "sim",
                                             f"--sample.n_real={steps}"], ("stage1",))
        for m in BASE_METHODS:
            evaluate(own_rollout_in_sim(m), ["--ckpt", str(runs[m]), "--domain", "sim", "--sample.n_real=1"],
                     (f"train {m}",))
        evaluate(ORACLE_CONDITION, ["--ckpt", str(runs["simforcing"]), "--sample.condition=oracle"],
                 ("train simforcing",))
        evaluate(few_step(), ["--ckpt", str(self.student)], ("distill simforcing",), priority=55)
        if EVALUATOR in self.students:  # the evaluator's fidelity point: its real branch given the exact condition
            evaluate(evaluator_oracle(), ["--ckpt", str(self.students[EVALUATOR]), "--sample.condition=oracle"],
                     (f"distill {EVALUATOR}",), priority=28)
        if self.views_runs:  # the multi-view world model on the same windows, scored per camera
            evaluate(EvalKey(views_of("copy-first")), ["--baseline", "copy-first", "--preset", "demo", vae,
                                                       f"--data.views={','.join(VIEWS)}"], ("vae",), priority=50)
            for m, run in self.views_runs.items():
                evaluate(EvalKey(views_of(m)), ["--ckpt", str(run)], (f"train {views_of(m)}",), priority=50)
            tag = views_of("simforcing")
            evaluate(few_step(tag), ["--ckpt", str(self.students[tag])], (f"distill {tag}",), priority=48)
        return evals

    def sweeps_and_videos(self, runs: dict[str, Path], full: bool) -> tuple[dict, dict]:
        """6. the N_r × w sweep (and Tab. A1's p × w with --full), the sample videos."""
        b, out = self.b, self.out
        sweeps = {"steps": out / "sweep_steps"}
        n_sweep = b.num_val * b.sweep_windows
        tail = [f"--eval.probe={self.probe}", f"--eval.windows_per_episode={b.sweep_windows}", *self.own_steps_ov]
        sw = ["sweep", "steps", "--ckpt", str(runs["simforcing"]), "--data", str(self.data), "--n-sim", "1",
              "--n-real", *map(str, b.sweep_n_real), "--w", *(f"{w:g}" for w in b.sweep_w), "--num-samples",
              str(n_sweep), "--out", str(sweeps["steps"]), *tail]
        self.add("sweep steps", sw, sweeps["steps"], "sweep_steps.json", ("train simforcing", "probe"), priority=45)
        if full:
            sweeps["cfg"] = out / "sweep_cfg"
            sc = ["sweep", "cfg", "--ckpts", *(str(runs[r]) for r in P_RUNS), "--data", str(self.data), "--w",
                  *(f"{w:g}" for w in b.cfg_sweep_w), "--num-samples", str(n_sweep), "--out", str(sweeps["cfg"]),
                  *tail]
            self.add("sweep cfg", sc, sweeps["cfg"], "sweep_cfg.json", tuple(f"train {r}" for r in P_RUNS)
                     + ("probe",), priority=45)
        videos = {}
        for m in BASE_METHODS:
            videos[m] = out / "videos" / m
            self.add(f"videos {m}", ["generate", "--ckpt", str(runs[m]), "--data", str(self.data), "--split", "val",
                                     "--out", str(videos[m]), "--num-samples", str(b.report_videos),
                                     *self.sample_ov],
                     videos[m], None, (f"train {m}",), priority=40)
        return sweeps, videos

    def rollouts(self, runs: dict[str, Path], seed_list: list[int], full: bool) -> dict:
        """7. long rollouts: held-out episodes longer than a window (their own dataset), each model rolled out chunk
        after chunk over ``rollout_horizon`` actions with every drift row; with --full the state input read by the
        probe instead of integrated, the simulation chain re-masked from the recorded masks and the recorded sim video
        as the condition (analyses of where the drift comes from)."""
        b, out = self.b, self.out
        data_long = out / "data_long"
        argv = ["data", "synth", "--out", str(data_long), "--num-train", "0", "--num-val", str(b.long_val),
                "--num-sim-pool", "0", "--length", str(b.long_length), "--height", "32", "--width", "48", "--seed",
                "1", "--workers", "1", *self.views_flags()]
        self.add("data long", argv, data_long, "meta/stats.json", ("stage1",), priority=58,
                 sizes={"num_val": b.long_val, "length": b.long_length, "generator": GENERATOR_VERSION}, seed=1,
                 inputs=(), extra=("--overwrite",) if is_dataset(data_long) else ())
        folders: dict[EvalKey, Path] = {}
        common = ["--data", str(data_long), "--horizon", str(b.rollout_horizon), f"--eval.probe={self.probe}"]

        def add(key: EvalKey, run_tag_: str, extra: list[str], run: Optional[Path] = None,
                job: Optional[str] = None) -> None:
            folder = folders[key] = out / "rollout" / key.name.replace(" ", "_")
            deps = (job or f"train {run_tag_}", "probe", "data long")
            self.add(f"rollout {key.name}", ["rollout", "--ckpt", str(run or runs[run_tag_]), *common, "--out",
                                             str(folder), *extra,
                                             *(self.own_steps_ov if run in (self.student, *self.students.values())
                                               else self.sample_ov)],
                     folder, "rollout.json", deps, inputs=deps, priority=52)

        for seed in seed_list:
            for m in (BASE_METHODS if full else ("simforcing",)):  # `sft`'s drift beside it: --full (issue 68)
                add(EvalKey(run_tag(m, seed)), run_tag(m, seed),
                    ["--videos", str(b.rollout_videos if seed == SEED else 0)])
        # the robot's digital twin renders every chunk's condition from the actions (beyond the paper: simforcing.twin)
        for m in (BASE_METHODS if full else ("simforcing",)):
            add(twin_condition(m), m, ["--sample.condition=render", "--rows", "rollout", "restart", "sim chain",
                                       "--videos", "1"])  # the reference rows are the own chain's
        # the few-step student, the paper's own simulation chain: its drift against its teacher's
        add(few_step(), "simforcing", ["--rows", "rollout", "restart", "--videos", "0"], self.student,
            "distill simforcing")
        if EVALUATOR in self.students:  # the evaluator's fidelity point: its drift with the twin
            add(twin_condition(student_of(EVALUATOR)), EVALUATOR, ["--sample.condition=render", "--rows", "rollout",
                                                                    "restart", "--videos", "0"],
                self.students[EVALUATOR], f"distill {EVALUATOR}")
        if self.views_runs:  # the multi-view world model with the twin rendering both cameras, drift per camera
            tag = views_of("simforcing")
            add(twin_condition(tag), tag, ["--sample.condition=render", "--rows", "rollout", "restart", "--videos",
                                           "1"], self.views_runs["simforcing"], f"train {tag}")
        if full:
            for m in BASE_METHODS:
                add(probe_state(m), m, ["--rollout.state=probe", "--rows", "rollout", "--videos", "0"])
            add(REMASK, "simforcing", ["--rollout.sim_chain=remask", "--rows", "rollout", "sim chain", "--videos", "1"])
            add(ORACLE_CONDITION, "simforcing", ["--sample.condition=oracle", "--rows", "rollout", "--videos", "0"])
        return {"data": data_long, "folders": folders}

    def world_model_eval(self, runs: dict[str, Path], pol: dict, full: bool, seeds: list[int]) -> dict:
        """9. policies evaluated inside the world models (``policy.closed_loop.world_model_eval``), on the policy
        benchmark's held-out layout scenes, against the simulator: the success judge fitted on the layout episodes of the
        demo's data and the policy demonstrations; one-camera action-only policies (the world model predicts the
        external camera) from base, the `sft` and the SimForcing world model (two budgets with --full); the
        scripted expert at several action-noise levels and do-nothing. On ``per_task`` scenes the judge's harness
        check (the simulator's own frames through it) and the floor (copy-first); on the pool of ``pool_per_task``
        scenes every world model — the few-step students of the evaluator, of SimForcing (each with its own chain and
        with the twin) and of `sft` (the teachers too with --full) — their agreement with the simulator and the
        prediction-powered estimate of each (:meth:`estimate_pool`). 15 scenes per policy cannot rank world models
        (a ranking's interval is 0.4–0.7 wide there); 60 can."""
        b, w, out = self.b, self.b.wm_eval, self.out / "wm_eval"
        pdata = Path(pol["data"])
        self.records["policy data"] = {"command": pol["commands"]["policy data"], "generator": GENERATOR_VERSION}
        judge = out / "judge"
        frames = w.judge_frames_full if full else w.judge_frames
        sim_frames = ["--sim-frames", str(frames)] if frames is not None else []
        self.add("judge", ["model", "fit-judge", "--data", str(self.data), str(pdata), "--out", str(judge), "--steps",
                           str(w.judge_steps_full if full else w.judge_steps), "--sim-episodes",
                           str(w.judge_rollouts_full if full else w.judge_rollouts), "--layouts", str(b.policy.layouts),
                           "--jitter", f"{b.policy.jitter:g}", *sim_frames], judge, "judge.json",
                 self.data_dep + ("policy data",),
                 inputs=("data", "policy data"), priority=57)
        budgets = w.budgets_full if full else w.budgets
        policies: dict[str, Path] = {}
        for steps in budgets:
            for label, init in (("base", "base"), ("SFT-WM", "sft"), ("SimForcing-WM", "simforcing")):
                name = f"{label}@{steps}"
                run = policies[name] = out / "policies" / f"{init}_{steps}"
                argv = ["policy", "train", "--setting", "action_only", "--init",
                        "base" if init == "base" else str(runs[init]), "--data", str(pdata), "--out", str(run)]
                argv += (["--config", str(runs["simforcing"] / "config.json")] if init == "base" else [])
                argv += [f"--train.max_steps={steps}", f"--train.batch_size={b.policy.batch_size}",
                         f"--policy.execute={b.policy.execute}", f"--train.seed={SEED}", f"--train.ckpt_every={steps}",
                         "--train.log_every=25", "--train.threads=1", "--policy.cameras=1"]
                deps = ("policy data",) + ((f"train {init}",) if init != "base" else ("train simforcing",))
                self.add(f"wm-eval policy {name}", argv, run, None, deps, inputs=deps, priority=35, seed=SEED,
                         run_steps=steps)
        common = ["--per-task", str(w.per_task_full if full else w.per_task), "--max-steps", str(b.policy.max_steps),
                  "--layouts", str(b.policy.layouts), "--jitter", str(b.policy.jitter), "--judge", str(judge)]
        noise = ["--expert-noise", *(f"{x:g}" for x in w.expert_noise)]
        learned = [f"{n}={p}" for n, p in policies.items()]
        policy_jobs_ = tuple(f"wm-eval policy {n}" for n in policies)
        # the judge's harness check: the simulator's own frames through it, on the held-out scenes (and the floor)
        evals = {"sim experts": (out / "sim_experts", ["policy", "eval", *noise, *common]),
                 "sim policies": (out / "sim_policies", ["policy", "eval", "--runs", *learned, "--no-baselines",
                                                         *common]),
                 "world model copy-first": (out / "wm_copy-first", ["policy", "eval", "--env", "world-model", "--wm",
                                                                   "copy-first", "--runs", *learned, *noise,
                                                                   *common])}
        for name, (folder, argv) in evals.items():
            deps = ("judge",) + (policy_jobs_ if "experts" not in name else ())
            self.add(f"wm-eval {name}", argv + ["--out", str(folder)], folder, "eval.json", deps, inputs=deps,
                     priority=30)
        agree = out / "agreement"
        argv = ["policy", "agreement", "--sim", str(out / "sim_experts"), str(out / "sim_policies"), "--wm",
                f"copy-first={out / 'wm_copy-first'}", "--out", str(agree)]
        deps = tuple(f"wm-eval {n}" for n in evals)
        self.add("wm-eval agreement", argv, agree, "agreement.json", deps, inputs=deps, priority=30)
        pool = self.estimate_pool(out, self.pool_world_models(runs, full), learned, noise, policy_jobs_, judge, full)
        two = self.two_camera_policies(out, pol, judge)
        return {"out": out, "agreement": agree, "judge": judge, "policies": policies,
                "evals": {k: v[0] for k, v in evals.items()}, **vars(pool), "two_camera": two}

    def pool_world_models(self, runs: dict[str, Path], full: bool) -> dict[str, tuple]:
        """The world models on the pool: name -> (run or copy-first, its job, extra flags); the few-step students
        (K + 1 forwards per chunk: they rank within their teachers' noise, docs/FEWSTEP.md), each with the robot's
        digital twin where it has a simulation branch; --full adds the teachers."""
        wms: dict[str, tuple] = {"copy-first": ("copy-first", None, [])}
        for tag in (views_of("simforcing"), EVALUATOR, "simforcing", "sft"):
            if tag in self.students:
                name = student_of(tag)
                if full or tag not in ("simforcing", views_of("simforcing")):  # own chains: --full (the twin's
                    wms[name] = (self.students[tag], f"distill {tag}", [])      # rows are the default's)
                if tag != "sft":
                    wms[name + TWIN] = (self.students[tag], f"distill {tag}", ["--wm-condition", "render"])
        if full:
            for tag in [t for t in (EVALUATOR, *runs) if t == EVALUATOR or t.split("_")[0] in BASE_METHODS]:
                run = self.evaluator_run if tag == EVALUATOR else runs[tag]
                if run is None:
                    continue
                wms[tag] = (run, f"train {tag}", [])
                if not tag.startswith("sft"):
                    wms[tag + TWIN] = (run, f"train {tag}", ["--wm-condition", "render"])
        return wms

    def two_camera_policies(self, out: Path, pol: dict, judge: Path) -> Optional[TwoCameraFolders]:
        """9c. Tab. 5's policies — they read the external and the wrist camera — inside the multi-view world model
        with the twin, on the scenes Tab. 5 evaluated them on in the simulator (its evaluations are the truth: the
        same seed, scenes, step limit and layouts), scripted expert and do-nothing beside them; their success rates
        and verdicts against the simulator's (``policy agreement``). None without the multi-view world model or
        Tab. 5's runs and evaluations."""
        tag = views_of("simforcing")
        runs = {label: path for label, path in ((pol or {}).get("runs") or {}).items()
                if f"policy train {label}" in self.records}
        truth = [Path(e) for e in (pol or {}).get("evals") or []]
        if tag not in self.students or not runs or not truth:
            return None
        p = self.b.policy
        wm = out / "two_camera_views"
        deps = ("judge", f"distill {tag}") + tuple(f"policy train {label}" for label in runs)
        self.add("wm-eval views two-camera policies", [
            "policy", "eval", "--env", "world-model", "--wm", str(self.students[tag]), "--wm-condition", "render",
            "--runs", *(f"{label}={path}" for label, path in runs.items()), "--per-task", str(p.eval_per_task),
            "--max-steps", str(p.max_steps), "--layouts", str(p.layouts), "--jitter", str(p.jitter), "--judge",
            str(judge), "--out", str(wm)], wm, "eval.json", deps, inputs=deps, priority=28)
        agree = out / "two_camera_agreement"
        evals = ("policy eval expert + floor",) + tuple(f"policy eval {label}" for label in runs)
        deps = ("wm-eval views two-camera policies",) + evals
        self.add("wm-eval two-camera agreement", ["policy", "agreement", "--sim", *map(str, truth), "--wm",
                                                  f"{student_of(tag) + TWIN}={wm}", "--out", str(agree)], agree,
                 "agreement.json", deps, inputs=("wm-eval views two-camera policies",), priority=28)
        return TwoCameraFolders(truth, wm, agree, list(runs))

    def estimate_pool(self, out: Path, wms: dict, learned: list[str], noise: list[str], policy_jobs: tuple,
                      judge: Path, full: bool) -> PoolFolders:
        """9b. the policies on a pool of scenes per task (``WorldModelEvalBudget.pool_per_task``): in the simulator
        (every episode's truth) and inside each world model of ``wms``; their agreement with the simulator (Pearson,
        MMRV with intervals) and, per world model, the prediction-powered estimate (``policy estimate``: n
        ground-truth scenes per policy correcting the rest) with its coverage study over many draws."""
        b, w = self.b, self.b.wm_eval
        pool = ["--per-task", str(w.pool_per_task_full if full else w.pool_per_task), "--max-steps",
                str(b.policy.max_steps), "--layouts", str(b.policy.layouts), "--jitter", str(b.policy.jitter),
                "--runs", *learned, *noise]
        sim = out / "pool_sim"
        self.pool_args = pool  # the pool's scenes and players: every world model of it, the full scene's too
        self.add("estimate sim pool", ["policy", "eval", *pool, "--out", str(sim)], sim, "eval.json", policy_jobs,
                 inputs=policy_jobs, priority=30)
        evals, estimates = {}, {}
        study = w.estimate_study_n_full if full else w.estimate_study_n
        for wm, (run, train_job, extra) in wms.items():
            ev, est = out / f"pool_wm_{wm}", out / f"estimate_{wm}"
            deps = ("judge",) + policy_jobs + ((train_job,) if train_job else ())
            self.add(f"estimate wm pool {wm}", ["policy", "eval", "--env", "world-model", "--wm", str(run), *extra,
                                                "--judge", str(judge), *pool, "--out", str(ev)], ev, "eval.json", deps,
                     inputs=deps, priority=30)
            evals[wm] = ev  # copy-first too: what the actions alone give the same predictor (the frames' worth)
            deps = ("estimate sim pool", f"estimate wm pool {wm}")
            self.add(f"estimate {wm}", ["policy", "estimate", "--ground-truth", str(sim), "--wm-eval", str(ev),
                                        "--n", str(w.estimate_n), "--draws", str(w.estimate_draws), "--study-n",
                                        *(str(n) for n in study), "--out", str(est)],
                     est, "estimate.json", deps, inputs=deps, priority=30)
            estimates[wm] = est
        agree = out / "pool_agreement"
        order = [n for n in wms if n != "copy-first"] + ["copy-first"]
        reference = ["--reference", "simforcing"] if "simforcing" in wms else []  # --full: students vs teacher
        argv = ["policy", "agreement", "--sim", str(sim), "--wm", *(f"{n}={evals[n]}" for n in order), *reference,
                "--out", str(agree)]
        deps = ("estimate sim pool",) + tuple(f"estimate wm pool {n}" for n in wms)
        self.add("pool agreement", argv, agree, "agreement.json", deps, inputs=deps, priority=30)
        return PoolFolders(sim, evals, estimates, agree)

    def full_scene(self, wm_eval: dict) -> SceneFolders:
        """--full, 11. the benchmark's second pairing (issue 54, docs/POLICY_EVALUATION.md "The full-scene pairing"):
        the same real episodes paired with a simulation of the whole scene — arm and objects, plain, with physics of its
        own (``data synth --pairing scene``, the physics gap at 1) — its VAE, stage 1, `sft` and SimForcing from it and
        their students; the paper's one-window table and the long rollouts on it; and the policies on the same pool as
        the arm pairing's (the same real scenes: the same truth) inside the students, with the full-scene twin and with
        their own chain, each estimated — and the twin's own verdict as a third predictor (the simulator alone)."""
        b, out = self.b, self.out / "scene"
        data, vae, stage1 = out / "data", out / "vae", out / "stage1"
        synth = ["data", "synth", "--num-train", str(b.num_train), "--num-val", str(b.num_val), "--length",
                 str(b.length), "--height", "32", "--width", "48", "--seed", "0", "--workers", "1", "--pairing",
                 "scene", "--physics-gap", "1"]
        self.add("scene data", synth + ["--out", str(data), "--num-sim-pool", str(b.num_sim_pool), "--layout-train",
                                        str(b.layout_train), "--layouts", str(b.policy.layouts), "--jitter",
                                        f"{b.policy.jitter:g}"], data, "meta/stats.json", ("stage1",), priority=20,
                 seed=0, sizes={"generator": GENERATOR_VERSION}, inputs=(),
                 extra=("--overwrite",) if is_dataset(data) else ())
        long = out / "data_long"
        self.add("scene data long", ["data", "synth", "--out", str(long), "--num-train", "0", "--num-val",
                                     str(b.long_val), "--num-sim-pool", "0", "--length", str(b.long_length), "--height",
                                     "32", "--width", "48", "--seed", "1", "--workers", "1", "--pairing", "scene",
                                     "--physics-gap", "1"], long, "meta/stats.json", ("stage1",), priority=20, seed=1,
                 sizes={"generator": GENERATOR_VERSION}, inputs=(), extra=("--overwrite",) if is_dataset(long) else ())
        self.add("scene vae", ["model", "fit-vae", "--data", str(data), "--out", str(vae)], vae, "config.json",
                 ("scene data",), inputs=("scene data",), priority=20)
        self.add("scene stage1", ["pretrain", "--preset", "demo", "--data", str(data), "--out", str(stage1),
                                  f"--model.vae.path={vae}", f"--train.max_steps={b.stage1_steps}",
                                  f"--train.batch_size={b.stage1_batch}", "--train.threads=1", *self.ov], stage1, None,
                 ("scene vae",), sizes={"stage1_steps": b.stage1_steps}, seed=SEED, inputs=("scene data", "scene vae"),
                 priority=20, run_steps=b.stage1_steps)
        runs, students, evals, rollouts = {}, {}, {}, {}
        probe = ["--split", "val", "--num-samples", str(b.num_val * b.eval_windows), f"--eval.probe={self.probe}",
                 f"--eval.windows_per_episode={b.eval_windows}", "--sample.mask_mode=paired-sim"]
        for m in BASE_METHODS:
            run = runs[m] = out / m
            self.add(f"scene train {m}", ["train", "--method", m, "--teacher", str(stage1), "--data", str(data),
                                          "--out", str(run), f"--train.seed={SEED}",
                                          f"--train.max_steps={b.stage2_steps}", f"--train.batch_size={b.stage2_batch}",
                                          "--train.threads=1", *self.ov], run, None, ("scene stage1",),
                     sizes={"stage2_steps": b.stage2_steps}, seed=SEED, inputs=("scene stage1",), priority=20,
                     run_steps=b.stage2_steps)
            f = self.b.fewstep
            student = students[m] = out / f"{m}_fewstep"
            self.add(f"scene distill {m}", ["distill", "--teacher", str(run), "--steps", str(f.steps), "--objective",
                                            f.objective, "--data", str(data), "--out", str(student),
                                            f"--train.lr={f.lr:g}", f"--train.batch_size={f.batch_size}",
                                            f"--train.max_steps={f.distill_steps}",
                                            f"--train.ckpt_every={f.distill_steps}", "--train.threads=1",
                                            "--no-progress"], student, None, (f"scene train {m}",),
                     sizes={"distill_steps": f.distill_steps}, seed=SEED, inputs=(f"scene train {m}",), priority=20,
                     run_steps=f.distill_steps)
            evals[m] = out / "eval" / m
            self.add(f"scene eval {m}", ["evaluate", "--ckpt", str(run), "--data", str(data), *probe, "--out",
                                         str(evals[m]), *self.sample_ov], evals[m], "eval.json",
                     (f"scene train {m}", "probe"), inputs=(f"scene train {m}", "probe"), priority=20)
        evals["copy-first"] = out / "eval" / "copy-first"
        self.add("scene eval copy-first", ["evaluate", "--baseline", "copy-first", "--preset", "demo",
                                           f"--model.vae.path={vae}", "--data", str(data), *probe, "--out",
                                           str(evals["copy-first"])], evals["copy-first"], "eval.json",
                 ("scene vae", "probe"), inputs=("scene vae", "probe"), priority=20)
        for name, extra in (("simforcing", ["--rows", "rollout", "restart", "sim chain"]),
                            ("simforcing twin", ["--sample.condition=render", "--rows", "rollout", "restart"])):
            folder = rollouts[name] = out / "rollout" / name.replace(" ", "_")
            deps = ("scene train simforcing", "scene data long", "probe")
            self.add(f"scene rollout {name}", ["rollout", "--ckpt", str(runs["simforcing"]), "--data", str(long),
                                               "--horizon", str(b.rollout_horizon), f"--eval.probe={self.probe}",
                                               "--sample.mask_mode=paired-sim", *extra, "--videos", "1", "--out",
                                               str(folder), *self.sample_ov], folder, "rollout.json", deps, inputs=deps,
                     priority=20)
        pool, estimates, agree = self._scene_pool(out, students, wm_eval)
        return SceneFolders(out, data, runs, students, evals, rollouts, pool, estimates, agree)

    def _scene_pool(self, out: Path, students: dict[str, Path], wm_eval: dict) -> tuple[dict, dict, Path]:
        """The policies on the arm pairing's pool (the same real scenes and truth) inside the full-scene students, each
        estimated with its predictors (the full-scene twin's own verdict too), and their agreement with the simulator
        -> (pool evaluations, estimates, agreement folder)."""
        w = self.b.wm_eval
        pool_args = self.pool_args
        pool, estimates = {}, {}
        for name, (m, extra) in {"scene-simforcing-fewstep-twin": ("simforcing", ["--wm-condition", "render"]),
                                 "scene-simforcing-fewstep": ("simforcing", []),
                                 "scene-sft-fewstep": ("sft", [])}.items():
            ev = pool[name] = out / f"pool_{name}"
            deps = ("judge", f"scene distill {m}", "estimate sim pool")
            self.add(f"scene pool {name}", ["policy", "eval", "--env", "world-model", "--wm", str(students[m]), *extra,
                                            *pool_args, "--judge", str(wm_eval["judge"]), "--out", str(ev)], ev,
                     "eval.json", deps, inputs=deps, priority=20)
            predictors = ("learned", "verdict") + (("twin",) if "twin" in name else ())
            for predictor in predictors:
                key = "scene-simulator" if predictor == "twin" else f"{name} ({predictor})"
                est = estimates[key] = out / f"estimate_{key.replace(' ', '_').replace('(', '').replace(')', '')}"
                deps = ("estimate sim pool", f"scene pool {name}")
                self.add(f"scene estimate {key}", ["policy", "estimate", "--ground-truth", str(wm_eval["sim_pool"]),
                                                   "--wm-eval", str(ev), "--predictor", predictor, "--n",
                                                   str(w.estimate_n), "--draws", str(w.estimate_draws), "--study-n",
                                                   str(w.estimate_n), "--out", str(est)], est, "estimate.json", deps,
                         inputs=deps, priority=20)
        agree = out / "pool_agreement"
        deps = ("estimate sim pool",) + tuple(f"scene pool {n}" for n in pool)
        self.add("scene pool agreement", ["policy", "agreement", "--sim", str(wm_eval["sim_pool"]), "--wm",
                                          *(f"{n}={f}" for n, f in pool.items()), "--out", str(agree)], agree,
                 "agreement.json", deps, inputs=deps, priority=20)
        return pool, estimates, agree

    def fidelity(self, runs: dict[str, Path], evals: dict, rollouts: dict, wm_eval: Optional[dict]) -> Path:
        """10. the evaluator's fidelity as a simulator (``fidelity point``, docs/ROLLOUTS.md) — its few-step student,
        the world model the policy evaluations use — read from results the graph already writes: the oracle
        condition on one window, the twin's rollout drift, the do-nothing frame change and the ranking inside it with
        the twin on the pool, and what its training cost in core-seconds (stage 1, stage 2, the distillation).
        Without an evaluator (the default demo, whose pool is judged inside SimForcing's few-step student): the
        SimForcing world model's oracle condition, twin drift and training cost — a fidelity point is one world
        model's (``fidelity.one_world_model``), and the pool's ranking is the student's, in its own tables."""
        folder = self.out / "fidelity"
        if wm_eval is not None and EVALUATOR in self.students:
            student, name = self.students[EVALUATOR], student_of(EVALUATOR)
            argv = ["fidelity", "point", "--label", EVALUATOR, "--oracle", str(evals[evaluator_oracle()]), "--twin",
                    str(rollouts["folders"][twin_condition(name)]), "--runs", str(self.stage1),
                    str(self.evaluator_run), str(student), "--wm-eval", str(wm_eval["pool_evals"][name + TWIN]),
                    "--agreement", str(wm_eval["pool_agreement"]), "--wm-name", name + TWIN]
            deps = (f"eval {evaluator_oracle().name}", f"rollout {twin_condition(name).name}", f"distill {EVALUATOR}",
                    f"estimate wm pool {name + TWIN}", "pool agreement")
        else:  # SimForcing's (the default demo)
            argv = ["fidelity", "point", "--label", "simforcing", "--oracle", str(evals[ORACLE_CONDITION]), "--twin",
                    str(rollouts["folders"][twin_condition("simforcing")]), "--runs", str(self.stage1),
                    str(runs["simforcing"])]
            deps = (f"eval {ORACLE_CONDITION.name}", f"rollout {twin_condition('simforcing').name}",
                    "train simforcing")
        self.add("fidelity", argv + ["--out", str(folder)], folder, "fidelity.json", deps, inputs=deps, priority=25)
        return folder

    def video_base_section(self) -> None:
        """--full, 2a. stage 0: the video base (``pretrain --method video_prior``, on stage 1's slots), a plain video
        model of the same network (no actions) that stands in for Wan2.2; stage 1 starts from it (``pretrain --init``)."""
        t = self.b.transfer
        self.video_base_dir = folder = self.out / "video_base"
        argv = ["pretrain", "--method", "video_prior", "--preset", "demo", "--data", str(self.data), "--out",
                str(folder), f"--model.vae.path={self.vae}", f"--train.max_steps={t.video_base_steps}",
                f"--train.batch_size={t.video_base_batch}", self.long_threads(), *self.ov]
        self.add("video base", argv, folder, None, ("vae",), sizes={"video_base_steps": t.video_base_steps},
                 seed=SEED, inputs=("data", "vae"), priority=85, slots=self.b.stage1_threads,
                 threads=self.b.stage1_threads, run_steps=t.video_base_steps)

    def transfer_section(self, runs: dict[str, Path]) -> dict:
        """--full, 8. the policy section as the seeds × initialisations measurement (``demo.transfer_section``):
        random, the video base, sft and SimForcing × the world-model seeds × the policy seeds, two budgets, the probe."""
        wm = {wm_key(m, s): runs[run_tag(m, s)] for m in BASE_METHODS for s in wm_seed_list(self.b.transfer)}
        deps = {k: f"train {k}" for k in wm}
        wm["video_base"], deps["video_base"] = self.video_base_dir, "video base"
        pjobs, pol = full_policy_jobs(self.out, wm, SEED, self.b.policy, self.b.transfer, wm_deps=deps,
                                      after=self.policy_data_after(),
                                      wm_records={k: self.records[v] for k, v in deps.items()})
        self.notes += pol["notes"]
        for j in pjobs:
            j.slots = min(j.slots, self.slots)
        self.jobs += pjobs
        return pol

    def policy_section(self, runs: dict[str, Path], full: bool) -> dict:
        """8. the policy section (paper Tab. 5): its own jobs; its dataset after the demo's and stage 1
        (:meth:`policy_data_after`; the judge fits on both)."""
        if full:  # the seeds × initialisations measurement
            return self.transfer_section(runs)
        wm = {"simforcing": runs["simforcing"], "sft": runs["sft"]}
        pjobs, pol = policy_jobs(self.out, wm, full=full, seed=SEED, budget=self.b.policy,
                                 wm_deps={"simforcing": "train simforcing", "sft": "train sft"},
                                 after=self.policy_data_after(),
                                 wm_records={k: self.records[f"train {k}"] for k in wm})
        self.notes += pol["notes"]
        self.records.update(pol.get("records") or {})  # what a later job reading a policy records of it
        for j in pjobs:
            j.slots = min(j.slots, self.slots)
        self.jobs += pjobs
        return pol


def build_plan(out: Path, data: Optional[Path], budget: Budget, overrides: list[str] = (), seeds: int = 1,
               full: bool = False, jobs: int = 2, policy: bool = True) -> Plan:
    """The demo's job graph into ``out`` (see the module docstring)."""
    out = spelled(out)  # one spelling of the folder, so the recorded commands compare equal however it was typed
    own_data = data is None
    data = spelled(data) if data is not None else out / "data"
    if not own_data and budget.views.enabled and not _has_views(data):  # the user's one-view data: one view
        budget = copy.deepcopy(budget)
        budget.views.enabled = False
    B = _Builder(out, data, budget, list(overrides), jobs)
    B.data_and_vae(own_data)
    if full:  # stage 0, the video base; stage 1 starts from it
        B.video_base_section()
    B.stage1_and_probe()
    seed_list = [SEED + i for i in range(max(1, seeds))]
    names = list(BASE_METHODS) + (list(FULL_RUNS) if full else [])
    runs = B.stage2(names, seed_list)
    B.distill()
    if budget.views.enabled:  # the multi-view world model (issue 67)
        B.views_section()
    evaluator = None
    if full and policy and budget.layout_train:  # the evaluator and the `sft` student: more world models to judge
        evaluator = B.evaluator()                # policies in (the default's pool: SimForcing's, one and two views)
        B.distill("sft")
    if full and policy:  # the policy measurement's world-model seeds: sft and simforcing only (the ablations: --seeds)
        extra = [s for s in wm_seed_list(budget.transfer) if s not in seed_list]
        runs.update(B.stage2(list(BASE_METHODS), extra))
        seed_list += extra
    evals = B.evaluations(runs)
    sweeps, videos = B.sweeps_and_videos(runs, full)
    rollouts = B.rollouts(runs, seed_list, full)
    pol = B.policy_section(runs, full) if policy else None
    wm_eval = B.world_model_eval(runs, pol, full, seed_list) if policy and budget.layout_train else None
    fidelity = B.fidelity(runs, evals, rollouts, wm_eval)
    scene = B.full_scene(wm_eval) if full and wm_eval is not None else None
    commands = {j.name: B.records[j.name]["command"] if "command" in B.records.get(j.name, {}) else j.cite()
                for j in B.jobs}
    return Plan(out, data, budget, B.jobs, evals, runs, sweeps, videos, pol, tuple(names), seed_list, full, B.notes,
                commands, rollouts, wm_eval, B.student, fidelity, evaluator, dict(B.students), scene,
                dict(B.views_runs))


def _has_views(data: Path) -> bool:
    """Whether a given dataset holds the multi-view world model's cameras (its info.json ``views``)."""
    try:
        return set(VIEWS) <= set(json.loads((data / "meta" / "info.json").read_text()).get("views") or ())
    except (OSError, ValueError, AttributeError):
        return False


def budget_dict(b: Budget) -> dict:
    return json.loads(json.dumps(asdict(b)))
