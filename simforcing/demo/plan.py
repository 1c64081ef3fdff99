"""The demo as a graph of `simforcing` commands: what runs, in which order, on how many cores, and what is reused.

Every number of the report comes from one command of this graph (the report cites it). Each job writes into its own
folder and records its provenance there (:mod:`simforcing.provenance`: the command, sizes, seed, code version and
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
from simforcing.policy.demo import QUICK as POLICY_QUICK, PolicyBudget, policy_jobs
from simforcing.provenance import (check_provenance, digest, provenance_record, remove_stale_run, run_finished,
                                   spelled, why_stale, write_provenance)

SEED = 42
BASE_METHODS = ("sft", "simforcing")


@dataclass
class Budget:
    """Sizes of one demo run; `--quick` and the default differ only here."""

    num_train: int = 20
    num_val: int = 16
    num_sim_pool: int = 300
    length: int = 33
    stage1_steps: int = 2000
    stage1_batch: int = 16
    stage1_threads: int = 2  # the one job that has both cores to itself
    stage2_steps: int = 600
    stage2_batch: int = 8
    eval_windows: int = 5  # evaluation windows per validation episode (evenly spaced)
    sweep_windows: int = 2
    sweep_n_real: tuple = (1, 5, 10)
    sweep_w: tuple = (0.0, 0.6, 1.0)
    cfg_sweep_w: tuple = (0.0, 0.3, 0.6, 1.0)
    probe_steps: int = 1200
    report_videos: int = 3
    policy: PolicyBudget = field(default_factory=PolicyBudget)


QUICK = Budget(num_train=4, num_val=3, num_sim_pool=12, length=17, stage1_steps=30, stage1_batch=8, stage2_steps=20,
               eval_windows=1, sweep_windows=1, sweep_n_real=(1, 2), probe_steps=30, report_videos=1,
               policy=POLICY_QUICK)


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


# ----------------------------------------------------------------------------------------------------------------------
# Building the graph
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class Plan:
    out: Path
    data: Path
    budget: Budget
    jobs: list
    evals: dict  # eval name -> folder holding eval.json
    runs: dict  # run tag -> folder
    sweeps: dict  # "steps" / "cfg" -> folder
    videos: dict  # method -> folder
    policy: Optional[dict]  # what the policy section writes, or None
    methods: tuple
    seeds: list
    full: bool
    notes: list  # lines printed before running (what is remade and why)
    commands: dict  # job name -> the command a user types to reproduce its output


class _Builder:
    def __init__(self, out: Path, data: Path, budget: Budget, overrides: list[str], jobs: int):
        self.out, self.data, self.b, self.ov, self.slots = out, data, budget, list(overrides), max(1, int(jobs))
        self.jobs: list[Job] = []
        self.records: dict[str, dict] = {}  # job name -> provenance record (its digest feeds its dependents)
        self.notes: list[str] = []

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

def build_plan(out: Path, data: Optional[Path], budget: Budget, overrides: list[str] = (), seeds: int = 1,
               full: bool = False, jobs: int = 2, policy: bool = True) -> Plan:
    """The demo's job graph into ``out`` (see the module docstring)."""
    out = spelled(out)  # one spelling of the folder, so the recorded commands compare equal however it was typed
    own_data = data is None
    data = spelled(data) if data is not None else out / "data"
    b = budget
    B = _Builder(out, data, b, list(overrides), jobs)
    ov = list(overrides)
    vae, probe, stage1 = out / "vae", out / "probe", out / "stage1"
    n_eval = b.num_val * b.eval_windows

    # 1. data, the demo VAE ------------------------------------------------------------------------------------------
    if own_data:
        argv = ["data", "synth", "--out", str(data), "--num-train", str(b.num_train), "--num-val", str(b.num_val),
                "--num-sim-pool", str(b.num_sim_pool), "--length", str(b.length), "--height", "32", "--width", "48",
                "--seed", "0", "--workers", str(min(2, B.slots))]
        sizes = {"num_train": b.num_train, "num_val": b.num_val, "num_sim_pool": b.num_sim_pool, "length": b.length,
                 "generator": GENERATOR_VERSION}
        B.add("data", argv, data, "meta/stats.json", priority=100, slots=2, sizes=sizes, seed=0,
              extra=("--overwrite",) if is_dataset(data) else ())
        stale_data = is_dataset(data) and check_provenance(data, B.records["data"])
        if stale_data:
            B.notes.append(f"regenerating {data}: it was not made by this demo run ({why_stale(stale_data)})")
        data_dep: tuple = ("data",)
    else:  # the user's dataset, used as it is
        B.records["data"] = {"given": str(data.resolve())}
        data_dep = ()
    B.add("vae", ["model", "fit-vae", "--data", str(data), "--out", str(vae)], vae, "config.json", data_dep,
          inputs=("data",), priority=90)

    # 2. stage 1: the simulation world model (both cores) --------------------------------------------------------------
    s1 = ["pretrain", "--preset", "demo", "--data", str(data), "--out", str(stage1), f"--model.vae.path={vae}",
          f"--train.max_steps={b.stage1_steps}", f"--train.batch_size={b.stage1_batch}", "--train.threads=auto", *ov]
    B.add("stage1", s1, stage1, None, ("vae",), sizes={"stage1_steps": b.stage1_steps}, seed=SEED,
          inputs=("data", "vae"), priority=80, slots=b.stage1_threads, threads=b.stage1_threads,
          run_steps=b.stage1_steps)

    # 3. the state probe (after stage 1: it would hold a core stage 1 wants) ------------------------------------------
    B.add("probe", ["model", "fit-probe", "--data", str(data), "--out", str(probe), "--steps", str(b.probe_steps)],
          probe, "probe.json", ("stage1",), inputs=("data",), priority=60)

    # 4. stage 2 per method and seed -------------------------------------------------------------------------------
    seed_list = [SEED + i for i in range(max(1, seeds))]
    names = list(BASE_METHODS) + (list(FULL_RUNS) if full else [])
    runs: dict[str, Path] = {}
    for seed in seed_list:
        for name in names:
            method, extra = FULL_RUNS.get(name, (name, []))
            tag = run_tag(name, seed)
            run = out / tag
            runs[tag] = run
            argv = ["train", "--method", method, "--teacher", str(stage1), "--data", str(data), "--out", str(run),
                    f"--train.seed={seed}", f"--train.max_steps={b.stage2_steps}",
                    f"--train.batch_size={b.stage2_batch}", "--train.threads=1", *extra, *ov]
            B.add(f"train {tag}", argv, run, None, ("stage1",), sizes={"stage2_steps": b.stage2_steps}, seed=seed,
                  inputs=("stage1",), priority=70 + (5 if method == "simforcing" else 0), run_steps=b.stage2_steps)

    # 5. evaluation: the paper's sampler (1, 10, 0.6) with the action-following error and its control ---------------
    evals: dict[str, Path] = {}
    common = ["--data", str(data), "--split", "val", "--num-samples", str(n_eval), f"--eval.probe={probe}",
              f"--eval.windows_per_episode={b.eval_windows}"]

    def evaluate(name: str, argv: list[str], deps: tuple, priority: int = 50) -> None:
        folder = out / "eval" / name.replace(" ", "_")
        evals[name] = folder
        B.add(f"eval {name}", ["evaluate", *argv, "--out", str(folder), *common, *ov], folder, "eval.json",
              deps + ("probe",), inputs=deps + ("probe",), priority=priority)

    for base in ("copy-first", "vae-recon"):
        evaluate(base, ["--baseline", base, "--preset", "demo", f"--model.vae.path={vae}"], ("vae",))
        evaluate(f"sim {base}", ["--baseline", base, "--preset", "demo", f"--model.vae.path={vae}", "--domain", "sim"],
                 ("vae",))
    for tag, run in runs.items():
        evaluate(tag, ["--ckpt", str(run)], (f"train {tag}",), priority=55)
    for m in BASE_METHODS:  # the network's one-step prediction (its conditional mean), an extra row
        evaluate(f"{m} N_r=1", ["--ckpt", str(runs[m]), "--sample.n_real=1", "--eval.action_control=false"],
                 (f"train {m}",))
    # where the gain is lost: the teacher in simulation, the students' own simulation rollouts (the condition at
    # inference, N_s = 1 steps), and the real rollout with the recorded sim video as the condition (upper bound)
    for steps in (1, 10):
        evaluate(f"sim teacher N={steps}", ["--ckpt", str(stage1), "--domain", "sim", f"--sample.n_real={steps}"],
                 ("stage1",))
    for m in BASE_METHODS:
        evaluate(f"sim {m} rollout", ["--ckpt", str(runs[m]), "--domain", "sim", "--sample.n_real=1"],
                 (f"train {m}",))
    evaluate("simforcing oracle condition", ["--ckpt", str(runs["simforcing"]), "--sample.condition=oracle"],
             ("train simforcing",))

    # 6. sweeps, videos -------------------------------------------------------------------------------------------
    sweeps = {"steps": out / "sweep_steps"}
    n_sweep = b.num_val * b.sweep_windows
    sw = ["sweep", "steps", "--ckpt", str(runs["simforcing"]), "--data", str(data), "--n-sim", "1", "--n-real",
          *map(str, b.sweep_n_real), "--w", *(f"{w:g}" for w in b.sweep_w), "--num-samples", str(n_sweep),
          "--out", str(sweeps["steps"]), f"--eval.probe={probe}", f"--eval.windows_per_episode={b.sweep_windows}", *ov]
    B.add("sweep steps", sw, sweeps["steps"], "sweep_steps.json", ("train simforcing", "probe"), priority=45)
    if full:
        sweeps["cfg"] = out / "sweep_cfg"
        sc = ["sweep", "cfg", "--ckpts", *(str(runs[r]) for r in P_RUNS), "--data", str(data), "--w",
              *(f"{w:g}" for w in b.cfg_sweep_w), "--num-samples", str(n_sweep), "--out", str(sweeps["cfg"]),
              f"--eval.probe={probe}", f"--eval.windows_per_episode={b.sweep_windows}", *ov]
        B.add("sweep cfg", sc, sweeps["cfg"], "sweep_cfg.json", tuple(f"train {r}" for r in P_RUNS) + ("probe",),
              priority=45)
    videos = {}
    for m in BASE_METHODS:
        videos[m] = out / "videos" / m
        B.add(f"videos {m}", ["generate", "--ckpt", str(runs[m]), "--data", str(data), "--split", "val", "--out",
                              str(videos[m]), "--num-samples", str(b.report_videos), *ov], videos[m], None,
              (f"train {m}",), priority=40)

    # 7. the policy section (paper Tab. 5): its own jobs, after stage 1 ------------------------------------------------
    pol = None
    if policy:
        wm = {"simforcing": runs["simforcing"], "sft": runs["sft"]}
        pjobs, pol = policy_jobs(out, wm, full=full, seed=SEED, budget=b.policy,
                                 wm_deps={"simforcing": "train simforcing", "sft": "train sft"}, after=("stage1",),
                                 wm_records={k: B.records[f"train {k}"] for k in wm})
        B.notes += pol["notes"]
        for j in pjobs:
            j.slots = min(j.slots, B.slots)
        B.jobs += pjobs
    commands = {j.name: B.records[j.name]["command"] if "command" in B.records.get(j.name, {}) else j.cite()
                for j in B.jobs}
    return Plan(out, data, b, B.jobs, evals, runs, sweeps, videos, pol, tuple(names), seed_list, full, B.notes,
                commands)


def budget_dict(b: Budget) -> dict:
    return json.loads(json.dumps(asdict(b)))
