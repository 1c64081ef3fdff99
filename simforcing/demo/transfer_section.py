"""`demo --full`'s policy section: the seeds × initialisations measurement (paper Tab. 5 with its noise).

    jobs, info = full_policy_jobs(OUT, {"video_base": RUN0, "sft": ..., "simforcing": ..., "sft_seed43": ...},
                                  42, PolicyBudget(), TransferBudget())
    res = collect_full(info, wall)       # a PolicySectionResult: res.table_md, res.full.transfer_md, res.full.probe

``simforcing.demo.policy_section.policy_jobs(..., full=True)`` and ``collect_policy`` hand over to these; the default
demo's section (``policy_jobs(full=False)``) is not changed by them.

Initialisations (the paper's base is Wan2.2, its "our WM" the world model trained from it):
- ``random``: the world model's architecture and VAE with no pretrained weight (``--init base --config WM``);
- ``video_base``: the demo's video base (``pretrain --method video_prior``, ``simforcing.prior``), from which stage 1
  is trained in ``--full`` (``pretrain --init``) — what stands in for Wan2.2: its video expert, a new action expert;
- ``sft``, ``simforcing``: the world models (stage 2 from that stage 1), at ``wm_seeds`` stage-2 seeds (``wm_runs``
  holds ``sft_seed43`` ... as the demo names them, :func:`wm_key`);
- ``simforcing_video`` (``video_only``): the SimForcing world model's video expert alone, its action expert new
  (``--policy.init_from=video``), action-only at the demo's budget — which of the two experts a policy's gain from the
  world model comes from.

Policies: action-only from all four × world-model seeds × ``policy_seeds`` policy seeds, at the demo's budget
(``PolicyBudget.train_steps``) and at ``long_steps``; unconditional and video + action for ``joint_inits`` (the main
comparison) at the demo's budget; every policy on the same ``eval_per_task`` held-out scenes per task; the paired
differences with intervals (``demo.transfer_stats``) and the linear probe of what the frozen video expert gives an
action-only policy (``policy.probe``, one job). Folders: OUT/policy/data (the default section's dataset, shared),
OUT/policy/transfer/{RUN, eval_N/..., probe}. Every folder records its provenance as in the default section.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from simforcing.demo.policy_jobs import eval_job, policy_data_job, stale_fields, train_job, wm_digests
from simforcing.demo.policy_results import FullMeasurement, PolicySectionResult, read_inits
from simforcing.demo.transfer_stats import COMPARISONS, default_note, transfer_analysis, transfer_markdown
from simforcing.jobs import Job
from simforcing.policy.closed_loop.evaluate import EXPERT, FLOOR
from simforcing.policy.closed_loop.results import PolicyEvaluation
from simforcing.policy.closed_loop.tables import format_table
from simforcing.policy.probe import ProbeResult
from simforcing.runs.provenance import digest, provenance_record, write_provenance
from simforcing.utils import atomic_write_json, atomic_write_text

SEED = 42
INIT_LABELS = {"random": "random (no prior)", "video_base": "video base", "sft": "SFT WM",
               "simforcing": "SimForcing WM", "simforcing_video": "SimForcing WM video expert only"}
INITS = tuple(INIT_LABELS)
WM_SOURCE = {"sft": "sft", "simforcing": "simforcing", "simforcing_video": "simforcing"}  # init -> world model it reads
WM_INITS = tuple(WM_SOURCE)  # the initialisations from a world model (one per world-model seed)


@dataclass
class TransferBudget:
    """The sizes of `demo --full`'s seeds × initialisations measurement (the rest:
    ``demo.policy_section.PolicyBudget``)."""

    video_base_steps: int = 1000  # stage 0: the video base stage 1 starts from
    video_base_batch: int = 16
    long_steps: int = 1000  # the longer action-only budget
    eval_per_task: int = 30  # held-out scenes per task
    wm_seeds: int = 3  # stage-2 seeds of the world models
    policy_seeds: int = 3  # policy training seeds
    joint_inits: tuple = ("video_base", "simforcing")  # unconditional and video + action
    video_only: bool = True  # action-only at the demo's budget from the SimForcing WM's video expert alone
    probe_train_scenes: int = 40  # per task: the probe's fitting scenes (training seed)
    probe_test_scenes: int = 20  # per task: its held-out scenes


TRANSFER_QUICK = TransferBudget(video_base_steps=20, video_base_batch=8, long_steps=4, eval_per_task=1, wm_seeds=2,
                                policy_seeds=2, probe_train_scenes=3, probe_test_scenes=2)


def wm_key(init: str, seed: int) -> str:
    """The key of a world-model run in :func:`full_policy_jobs`' dicts: the demo's run tag (``demo.plan.run_tag``)."""
    return init if seed == SEED else f"{init}_seed{seed}"


def wm_seed_list(transfer: TransferBudget) -> list[int]:
    """The world models' stage-2 seeds the measurement needs (the demo trains `sft` and `simforcing` at each)."""
    return [SEED + k for k in range(transfer.wm_seeds)]


@dataclass(frozen=True)
class PolicySpec:
    """One policy: setting, initialisation, world-model seed (WM inits only), policy seed, training steps."""

    setting: str
    init: str
    wm_seed: Optional[int]
    seed: int
    steps: int

    def tags(self, train_steps: int) -> list[str]:
        out = []
        if self.wm_seed is not None and self.wm_seed != SEED:
            out.append(f"wm{self.wm_seed}")
        if self.seed != SEED:
            out.append(f"seed{self.seed}")
        if self.steps != train_steps:
            out.append(f"{self.steps}steps")
        return out

    def folder(self, train_steps: int) -> str:
        return "_".join([self.setting, self.init, *self.tags(train_steps)])

    def label(self, train_steps: int) -> str:
        extra = [f"WM seed {self.wm_seed}" if t.startswith("wm") else f"seed {self.seed}" if t.startswith("seed")
                 else f"{self.steps} steps" for t in self.tags(train_steps)]
        return " / ".join([self.setting, INIT_LABELS[self.init], *extra])


def policy_specs(train_steps: int, transfer: TransferBudget, inits: tuple = INITS,
                 seed: int = SEED) -> list[PolicySpec]:
    """Every policy of the measurement, in table order (module docstring); ``inits``: those available; ``seed``: the
    first policy seed (world-model seeds are the demo's, from 42)."""
    wm_seeds = wm_seed_list(transfer)
    seeds = [seed + k for k in range(transfer.policy_seeds)]
    out = []
    for setting, steps_list, setting_inits in (("action_only", (train_steps, transfer.long_steps), inits),
                                               ("unconditional", (train_steps,), transfer.joint_inits),
                                               ("video_action", (train_steps,), transfer.joint_inits)):
        for steps in dict.fromkeys(steps_list):
            for init in (i for i in INITS if i in setting_inits and i in inits):
                if init == "simforcing_video" and not (transfer.video_only and steps == train_steps):
                    continue  # the video expert alone: only with video_only, at the demo's budget
                for wm in (wm_seeds if init in WM_INITS else [None]):
                    out += [PolicySpec(setting, init, wm, s, steps) for s in seeds]
    return out


def full_policy_jobs(out_dir: str | Path, wm_runs: dict[str, Path], seed: int, budget,
                     transfer: Optional[TransferBudget] = None, wm_deps: Optional[dict[str, str]] = None,
                     after: tuple = (), wm_records: Optional[dict[str, dict]] = None) -> tuple[list[Job], dict]:
    """The measurement as jobs of a :mod:`simforcing.jobs` graph, and what :func:`collect_full` needs. ``wm_runs``:
    "video_base", "sft", "simforcing" and the other world-model seeds' runs (:func:`wm_key`); ``wm_deps``: the job
    that makes each (the policies start when it finished); ``after``: jobs the dataset generation waits for;
    ``wm_records``: their provenance records (default: what each run folder records); ``budget``: the default
    section's ``PolicyBudget`` (dataset, training and evaluation sizes); ``seed``: the first policy seed."""
    transfer = transfer or TransferBudget()
    root = Path(out_dir) / "policy"
    out = root / "transfer"
    wm_deps = wm_deps or {}
    for key in ("simforcing", "video_base"):
        if key not in wm_runs:
            raise ValueError(f"wm_runs: expected a {key!r} run; got {sorted(wm_runs)}")
    specs = policy_specs(budget.train_steps, transfer, INITS, seed)
    missing = sorted({wm_key(WM_SOURCE[s.init], s.wm_seed) for s in specs if s.wm_seed is not None} - set(wm_runs))
    if missing:
        raise ValueError(f"wm_runs: the world-model runs {missing} are missing (demo --full trains "
                         f"{transfer.wm_seeds} world-model seeds)")
    wm_digest = wm_digests(wm_runs, wm_records)
    notes: list[str] = []
    # the dataset: the default section's command and folder (demo.policy_section.policy_jobs), so both share it
    data = root / "data"
    data_job, data_rec = policy_data_job(data, budget, seed, after)
    jobs: list[Job] = [data_job]
    runs: dict[str, Path] = {}
    train_recs: dict[str, dict] = {}
    sf_cfg = Path(wm_runs["simforcing"]) / "config.json"
    for spec in specs:
        label, run = spec.label(budget.train_steps), out / spec.folder(budget.train_steps)
        runs[label] = run
        source = "simforcing" if spec.init == "random" else \
            spec.init if spec.wm_seed is None else wm_key(WM_SOURCE[spec.init], spec.wm_seed)
        init = "base" if spec.init == "random" else str(wm_runs[source])
        deps = ("policy data",) + tuple(wm_deps[k] for k in ("simforcing", source) if k in wm_deps)
        # the first seeds at the demo's budget first, then the longer budget and the joint settings, then the rest
        priority = 35 if (spec.seed, spec.wm_seed or SEED) == (seed, SEED) and spec.steps == budget.train_steps \
            else 20 if spec.steps != budget.train_steps or spec.setting != "action_only" else 15
        job, train_recs[label] = train_job(label, run, spec.setting, init,
                                           sf_cfg if spec.init == "random" else None, data, spec.steps, spec.seed,
                                           budget, {"data": digest(data_rec), "world model": wm_digest[source]},
                                           deps, priority, notes,
                                           ("--policy.init_from=video",) if spec.init == "simforcing_video" else ())
        jobs.append(job)
    per_task = transfer.eval_per_task
    evals: dict[str, Path] = {}
    eval_root = out / f"eval_{per_task}"
    for label in [EXPERT] + list(runs):
        ev = evals[label] = eval_root / ("baselines" if label == EXPERT else Path(runs[label]).name)
        if label == EXPERT:
            jobs.append(eval_job("policy eval expert + floor", ev, per_task, budget, seed, None,
                                 {"data": digest(data_rec)}, ("policy data",)))
        else:
            jobs.append(eval_job(f"policy eval {label}", ev, per_task, budget, seed, (label, runs[label]),
                                 {"policy": digest(train_recs[label])}, (f"policy train {label}",)))
    # what the frozen video expert gives an action-only policy: one per initialisation and world model (the video
    # expert alone is the SimForcing WM's own: not probed twice)
    probed = [s for s in specs if s.setting == "action_only" and s.steps == budget.train_steps and s.seed == seed
              and s.init != "simforcing_video"]
    probe = out / "probe"
    names = {s.label(budget.train_steps): s.label(budget.train_steps).split(" / ", 1)[1] for s in probed}
    argv = ["policy", "probe", "--out", str(probe), "--train-scenes", str(transfer.probe_train_scenes),
            "--test-scenes", str(transfer.probe_test_scenes), "--max-steps", str(budget.max_steps),
            "--layouts", str(budget.layouts), "--jitter", str(budget.jitter),
            "--runs", *(f"{names[label]}={runs[label]}" for label in names)]
    probe_rec = provenance_record("simforcing " + " ".join(argv), None, seed,
                                  {label: digest(train_recs[label]) for label in names})
    jobs.append(Job("policy probe", argv, deps=tuple(f"policy train {label}" for label in names), priority=22,
                    skip=lambda: not stale_fields(probe, probe_rec) and (probe / "probe.json").exists(),
                    on_done=lambda: write_provenance(probe, probe_rec)))
    info = {"out": str(root), "transfer_out": str(out), "data": str(data), "runs": {k: str(v) for k, v in runs.items()},
            "specs": {s.label(budget.train_steps): asdict(s) for s in specs},
            "evals": {k: str(v) for k, v in evals.items()}, "probe": str(probe), "budget": asdict(budget),
            "transfer_budget": asdict(transfer), "seed": seed, "full": True, "per_task": per_task,
            "commands": {j.name: j.cite() for j in jobs}, "notes": notes}
    return jobs, info


def main_rows(info: dict) -> list[str]:
    """The labels of the first seeds' action-only policies at the demo's budget (the section's main table)."""
    return [label for label, s in info["specs"].items() if s["setting"] == "action_only" and s["seed"] == info["seed"]
            and (s["wm_seed"] or SEED) == SEED and s["steps"] == info["budget"]["train_steps"]]


def collect_full(info: dict, wall_time_s: Optional[dict] = None) -> PolicySectionResult:
    """The measurement's results from the files its jobs wrote: the main table (expert, floor, the first seeds'
    action-only policies), the seeds × initialisations analysis and the probe (``PolicySectionResult.full``), the
    commands, the main rows' initialisation reports (every run's: ``full.init_all``). Also
    OUT/policy/transfer/results.json, table.md and transfer.png (every run's success, the means and their intervals,
    per setting and budget)."""
    rows, episodes = {}, {}
    for ev in info["evals"].values():
        res = PolicyEvaluation.read(ev, "the policy measurement's evaluation")
        rows.update(res.rows)
        episodes.update(res.episodes)
    main = main_rows(info)
    table_rows = {k: rows[k] for k in [EXPERT, FLOOR] + main if k in rows}
    init_all = read_inits(info["runs"])
    transfer = transfer_analysis(rows, episodes, info["specs"], {"full_eval_per_task": info["per_task"]},
                                 COMPARISONS)
    probe_dir = Path(info["probe"])
    probe = ProbeResult.read(probe_dir, "the policy measurement's probe") if (probe_dir / "probe.json").exists() \
        else None
    note = default_note({k: rows[k] for k in main if k in rows}, {k: episodes.get(k) for k in main},
                        {k: info["specs"][k]["init"] for k in main}, INIT_LABELS)
    out = Path(info["transfer_out"])
    from simforcing.plots import plot_transfer  # matplotlib: only here
    png = plot_transfer(transfer.blocks, INIT_LABELS, out / "transfer.png",
                        f"success per policy run, {info['per_task']} held-out scenes per task")
    full = FullMeasurement(init_all, info["transfer_budget"], info["per_task"], main, transfer, probe,
                           transfer_markdown(transfer, probe, INIT_LABELS), note, str(png))
    # the report's setup line (demo.report._policy_setup) reads eval_per_task: the measurement's
    res = PolicySectionResult(rows, format_table(table_rows, ["reach", "push", "grasp"]), info["commands"],
                              wall_time_s or {}, info["runs"], {k: v for k, v in init_all.items() if k in main},
                              info["data"], {**info["budget"], "eval_per_task": info["per_task"]}, info["seed"], full)
    atomic_write_json(out / "results.json", res.to_json())
    atomic_write_text(out / "table.md", res.table_md + "\n\n" + note + "\n\n" + full.transfer_md + "\n")
    return res
