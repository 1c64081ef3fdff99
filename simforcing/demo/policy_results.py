"""The demo's policy section as a typed result: what ``demo.policy_section.collect_policy`` (and, for ``demo --full``,
``demo.transfer_section.collect_full``) read from the files their jobs wrote, what the report renders and what
OUT/policy/results.json (OUT/policy/transfer/results.json) and the demo's results.json hold under "policy".

    res = collect_policy(info, wall)         # a PolicySectionResult
    res.table_md, res.rows["action_only / base"].average.rate, res.init["action_only / base"].inherited
    res.full.transfer_md, res.full.probe     # demo --full only (None otherwise)
    PolicySectionResult.from_json(json.loads(path.read_text())) == res

``to_json`` writes the section's results.json as it always was (the same keys in the same order); ``from_json``
reads it back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from simforcing.demo.transfer_stats import TransferAnalysis
from simforcing.policy.closed_loop.results import PolicyRow
from simforcing.policy.probe import ProbeResult


@dataclass(frozen=True)
class PolicyInit:
    """How a policy run was initialised (its init.json, ``policy.init.InitReport``, summarised): the run or ``base`` it
    started from, how many tensors it inherited, how many are new, and the names of those partly inherited."""

    source: str
    inherited: int
    new: int
    partial: list[str]

    def to_json(self) -> dict:
        return {"source": self.source, "inherited": self.inherited, "new": self.new, "partial": list(self.partial)}

    @classmethod
    def from_json(cls, d: dict) -> "PolicyInit":
        return cls(d["source"], int(d["inherited"]), int(d["new"]), list(d["partial"]))


def read_inits(runs: dict[str, str]) -> dict[str, PolicyInit]:
    """Each run's :class:`PolicyInit` from RUN/init.json (label -> run folder; a run without one is left out)."""
    out = {}
    for label, run in runs.items():
        p = Path(run) / "init.json"
        if p.exists():
            rep = json.loads(p.read_text())
            out[label] = PolicyInit(rep["source"], len(rep["inherited"]), len(rep["new"]), list(rep["partial"]))
    return out


@dataclass(frozen=True)
class FullMeasurement:
    """``demo --full``'s seeds × initialisations measurement (``demo.transfer_section``) beside the main table: every
    run's initialisation (``init_all``), the measurement's budget, the held-out scenes per task, the main table's
    policies (``main``), the analysis and its markdown, the probe (None where it did not finish), what one seed's table
    can show (``note``) and the plot of every run's success (``transfer_png``)."""

    init_all: dict[str, PolicyInit]
    transfer_budget: dict
    per_task: int
    main: list[str]
    transfer: TransferAnalysis
    probe: Optional[ProbeResult]
    transfer_md: str
    note: str
    transfer_png: str


@dataclass(frozen=True)
class PolicySectionResult:
    """The policy section (paper Tab. 5 at demo scale): every evaluated row (expert, floor, each policy), the table,
    the commands behind it, the seconds of its jobs, the policy runs and their initialisations (the main table's), the
    dataset, the budget (``demo.policy_section.PolicyBudget`` as a dict; with --full its ``eval_per_task`` is the
    measurement's), the seed and, with --full, the measurement."""

    rows: dict[str, PolicyRow]
    table_md: str
    commands: dict[str, str]
    wall_time_s: dict[str, float]
    runs: dict[str, str]
    init: dict[str, PolicyInit]
    data: str
    budget: dict
    seed: int
    full: Optional[FullMeasurement] = None

    def to_json(self) -> dict:
        head = {"rows": {k: r.to_json() for k, r in self.rows.items()}, "table_md": self.table_md,
                "commands": self.commands, "wall_time_s": self.wall_time_s, "runs": self.runs,
                "init": _inits_json(self.init)}
        f = self.full
        if f is None:
            return {**head, "data": self.data, "budget": self.budget, "seed": self.seed}
        return {**head, "init_all": _inits_json(f.init_all), "data": self.data, "budget": self.budget,
                "transfer_budget": f.transfer_budget, "seed": self.seed, "full": True, "per_task": f.per_task,
                "main": list(f.main), "transfer": f.transfer.to_json(),
                "probe": None if f.probe is None else f.probe.to_json(), "transfer_md": f.transfer_md,
                "note": f.note, "transfer_png": f.transfer_png}

    @classmethod
    def from_json(cls, d: dict) -> "PolicySectionResult":
        full = None
        if d.get("full"):
            full = FullMeasurement(_inits(d["init_all"]), dict(d["transfer_budget"]), int(d["per_task"]),
                                   list(d["main"]), TransferAnalysis.from_json(d["transfer"]),
                                   None if d.get("probe") is None else ProbeResult.from_json(d["probe"]),
                                   d["transfer_md"], d["note"], d["transfer_png"])
        return cls({k: PolicyRow.from_json(r) for k, r in d["rows"].items()}, d["table_md"], dict(d["commands"]),
                   dict(d["wall_time_s"]), dict(d["runs"]), _inits(d["init"]), d["data"], dict(d["budget"]),
                   int(d["seed"]), full)


def _inits_json(inits: dict[str, PolicyInit]) -> dict:
    return {k: v.to_json() for k, v in inits.items()}


def _inits(d: dict) -> dict[str, PolicyInit]:
    return {k: PolicyInit.from_json(v) for k, v in d.items()}
