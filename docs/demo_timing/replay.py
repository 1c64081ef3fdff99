"""Replay the demo's scheduler (simforcing.jobs: ready jobs by priority on 2 slots) on recorded job times.

    python docs/demo_timing/replay.py LABEL [JOB=PRIORITY] [slots:JOB=N] [time:JOB=SECONDS] ...

LABEL names an entry of timing.json; the graph is today's `build_plan` of the default demo, so a changed priority,
a job on more slots or a job made faster can be tried before a 20-minute run. Prints each job's end, the minute the
one-window table is complete and the demo's end (jobs only, no install).
"""

import heapq
import json
import sys
from pathlib import Path

from record import TABLE_JOBS  # this folder's record.py (the script's folder is on sys.path)
from simforcing.demo.plan import build_plan, demo_budget


def replay(wall: dict, changes: list[str], slots: int = 2) -> dict:
    jobs = {j.name: j for j in build_plan(Path("runs/demo"), None, demo_budget(), jobs=slots).jobs}
    for change in changes:
        key, value = change.split("=")
        if key.startswith("slots:"):
            jobs[key[6:]].slots = int(value)
        elif key.startswith("time:"):
            wall[key[5:]] = float(value)
        else:
            jobs[key].priority = int(value)
    missing = [n for n in jobs if n not in wall]
    if missing:
        raise SystemExit(f"no recorded time for {missing}")
    t, free, running, done, pending, ends = 0.0, slots, [], set(), set(jobs), {}
    while pending or running:
        for j in sorted((jobs[n] for n in pending if all(d in done for d in jobs[n].deps)), key=lambda j: -j.priority):
            if j.slots <= free:
                pending.remove(j.name)
                free -= j.slots
                heapq.heappush(running, (t + wall[j.name], j.name))
        t, name = heapq.heappop(running)
        done.add(name)
        free += jobs[name].slots
        ends[name] = t
    return {"ends": ends, "table_min": max(ends[j] for j in TABLE_JOBS) / 60, "demo_min": t / 60}


if __name__ == "__main__":
    runs = {r["label"]: r for r in json.loads(Path(__file__).with_name("timing.json").read_text())}
    r = replay(dict(runs[sys.argv[1]]["jobs"]), sys.argv[2:])
    for name, end in sorted(r["ends"].items(), key=lambda kv: kv[1]):
        print(f"{end / 60:6.1f} min  {name}")
    print(f"one-window table {r['table_min']:.1f} min, the demo {r['demo_min']:.1f} min of jobs")
