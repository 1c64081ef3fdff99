"""The demo report's section on how faithful its evaluator (without the policy section: its SimForcing world model) is
as a simulator (``fidelity point``, docs/ROLLOUTS.md): the oracle condition on one window, the twin's rollout drift,
the do-nothing frame change and the ranking of the policies inside it with the twin, each beside its aim, and what
training it cost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from simforcing.config import ConfigError
from simforcing.demo.plan import Plan
from simforcing.fidelity import FidelityPoint


@dataclass(frozen=True)
class FidelitySection:
    """The fidelity point the demo wrote (``point``) and its folder; results.json holds the point's JSON with its
    headline numbers under "table" and the folder."""

    point: FidelityPoint
    folder: str

    def to_json(self) -> dict:
        return {**self.point.to_json(), "table": self.point.headline.to_json(), "folder": self.folder}


def collect_fidelity(plan: Plan) -> Optional[FidelitySection]:
    """The fidelity point the demo wrote, or None when it has not finished."""
    if plan.fidelity is None:
        return None
    try:
        point = FidelityPoint.read(plan.fidelity, "the fidelity section")
    except ConfigError:
        return None
    return FidelitySection(point, str(plan.fidelity))


def fidelity_lines(section: Optional[FidelitySection]) -> list[str]:
    if not section:
        return []
    core_s = section.point.headline.core_s
    cost = "" if core_s is None else (f" Its training (stage 1 + stage 2) took {core_s:.0f} core-seconds; "
                                      "docs/ROLLOUTS.md's fidelity–compute curve says what more buys.")
    who = ("The evaluator's few-step student (the world model the policy sections use)" if section.point.label ==
           "evaluator" else "The SimForcing world model")
    return ["", "## How faithful the world model is as a simulator", "",
            f"{who} given an exact condition (the recorded simulation video on one window, the robot's digital twin "
            "over a rollout) — what is left is its real branch's own error — and commanded to stay still; then the "
            "policies ranked inside it with the twin against the simulator. Each number beside its aim "
            f"(docs/ROLLOUTS.md).{cost}", "", *section.point.markdown().rstrip().splitlines()]
