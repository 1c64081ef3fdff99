"""The demo report's section on how faithful its SimForcing world model is as a simulator (``fidelity point``,
docs/FAITHFUL.md): the oracle condition on one window, the twin's rollout drift, the do-nothing frame change and the
ranking of the policies inside it with the twin, each beside its aim, and what training it cost."""

from __future__ import annotations

from typing import Optional

from simforcing.config import ConfigError
from simforcing.demo.plan import Plan
from simforcing.evaluate.fidelity import flat, point_md, read_point


def collect_fidelity(plan: Plan) -> Optional[dict]:
    """The fidelity point the demo wrote (its headline numbers under "table"), or None when it has not finished."""
    if plan.fidelity is None:
        return None
    try:
        body = read_point(plan.fidelity, "the fidelity section")
    except ConfigError:
        return None
    return dict(body, table=flat(body), folder=str(plan.fidelity))


def fidelity_lines(section: Optional[dict]) -> list[str]:
    if not section:
        return []
    t = section["table"]
    cost = "" if t["core_s"] is None else (f" Its training (stage 1 + stage 2) took {t['core_s']:.0f} core-seconds; "
                                           "docs/FAITHFUL.md's fidelity–compute curve says what more buys.")
    return ["", "## How faithful the world model is as a simulator", "",
            "The SimForcing world model given an exact condition (the recorded simulation video on one window, the "
            "robot's digital twin over a rollout) — what is left is its real branch's own error — and commanded to "
            "stay still; then the policies ranked inside it with the twin against the simulator. Each number beside "
            f"its aim (docs/FAITHFUL.md).{cost}", "", *point_md(section).rstrip().splitlines()]
