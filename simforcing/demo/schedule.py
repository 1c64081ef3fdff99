"""How the demo's wall time was spent (issue 68): the chain of jobs that bounds it and the slots' idle seconds.

    s = schedule_summary(spans, deps, slots=2)      # spans: job -> (start, end) seconds since the graph started
    s.chain, s.idle_s, s.busy_s, s.wall_s

The chain is read backwards from the job that ended last: each job's predecessor on it is what it waited for — the
dependency that ended last, when the job started as that dependency ended (within ``slack`` seconds), else the job
that freed the slot it took (the one that ended last before it started). A job that started at once (nothing before
it) ends the chain. Idle seconds are the slots' time no job held: ``slots · wall − Σ slots × seconds``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence


@dataclass(frozen=True)
class ScheduleSummary:
    """``chain``: the jobs that bound the wall time, first to last, each with why it waited ("start", "after
    DEP" or "slot of JOB") and its seconds; ``idle_s``: slot-seconds no job held; ``busy_s``: slot-seconds held;
    ``wall_s``: the graph's wall time."""

    chain: list = field(default_factory=list)  # [(job, reason, seconds)]
    idle_s: float = 0.0
    busy_s: float = 0.0
    wall_s: float = 0.0

    def to_json(self) -> dict:
        return {"chain": [{"job": j, "waited_for": r, "seconds": round(s, 1)} for j, r, s in self.chain],
                "idle_slot_s": round(self.idle_s, 1), "busy_slot_s": round(self.busy_s, 1),
                "wall_s": round(self.wall_s, 1)}


def schedule_summary(spans: Mapping[str, tuple[float, float]], deps: Mapping[str, Sequence[str]], slots: int = 2,
                     job_slots: Mapping[str, int] | None = None, slack: float = 2.0) -> ScheduleSummary:
    """The chain and the idle time of one run of a job graph (module docstring); ``job_slots``: slots each job held
    (1 where not given). Jobs without a span (skipped, reused) are left out."""
    spans = {n: (float(a), float(b)) for n, (a, b) in spans.items() if b >= a}
    if not spans:
        return ScheduleSummary()
    held = job_slots or {}
    wall = max(b for _, b in spans.values())
    busy = sum((b - a) * held.get(n, 1) for n, (a, b) in spans.items())
    chain = []
    name = max(spans, key=lambda n: spans[n][1])
    seen = set()
    while name is not None and name not in seen:
        seen.add(name)
        start, end = spans[name]
        before = [d for d in deps.get(name, ()) if d in spans]
        dep = max(before, key=lambda d: spans[d][1], default=None)
        if dep is not None and spans[dep][1] >= start - slack:
            chain.append((name, f"after {dep}", end - start))
            name = dep
            continue
        freed = [n for n, (_, b) in spans.items() if n not in seen and start - slack <= b <= start + slack]
        if start > slack and freed:
            prev = max(freed, key=lambda n: spans[n][1])
            chain.append((name, f"slot of {prev}", end - start))
            name = prev
            continue
        chain.append((name, "start", end - start))
        name = None
    return ScheduleSummary(list(reversed(chain)), max(0.0, slots * wall - busy), busy, wall)
