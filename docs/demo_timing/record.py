"""Record one `make demo` timing into timing.json (the figures docs/RESULTS.md and the README cite).

    /usr/bin/time -v make demo > demo.log 2>&1      # in a clean clone, on a quiet machine
    python docs/demo_timing/record.py LABEL CLONE/runs/demo demo.log "MACHINE" [--commit C]

Keeps each job's seconds (the demo's results.json), the wall time from nothing and the CPU time (/usr/bin/time's
lines in the log), the minute the one-window table was complete (the log's "[mm:ss] eval ...: done" lines of its
three rows) and the printed headline line.
"""

import argparse
import datetime
import json
import re
import subprocess
from pathlib import Path

TABLE_JOBS = ("eval copy-first", "eval sft", "eval simforcing")  # the one-window table's rows


def _clock(s: str) -> float:
    parts = [float(p) for p in s.split(":")]
    return sum(p * 60 ** i for i, p in enumerate(reversed(parts)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("label")
    ap.add_argument("demo", type=Path, help="the demo's folder (runs/demo)")
    ap.add_argument("log", type=Path, help="make demo's output under /usr/bin/time -v")
    ap.add_argument("machine")
    ap.add_argument("--commit", default=None)
    a = ap.parse_args()
    text = a.log.read_text(errors="replace")
    done = {m.group(2): _clock(m.group(1)) for m in re.finditer(r"^\[(\d+:\d+)\] (.+?): done in", text, re.M)}
    elapsed = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text)
    user = re.search(r"User time \(seconds\): (\S+)", text)
    system = re.search(r"System time \(seconds\): (\S+)", text)
    headline = re.search(r"^demo @ .*$", text, re.M)
    wall = json.loads((a.demo / "results.json").read_text())["wall_time_s"]
    commit = a.commit or subprocess.run(["git", "-C", str(a.demo), "rev-parse", "--short", "HEAD"],
                                        capture_output=True, text=True).stdout.strip()
    jobs = {k: round(v, 1) for k, v in sorted(wall.items(), key=lambda kv: -kv[1]) if k != "total"}
    entry = {"label": a.label, "commit": commit, "machine": a.machine, "date": datetime.date.today().isoformat(),
             "from_nothing_min": round(_clock(elapsed.group(1)) / 60, 2) if elapsed else None,
             "jobs_min": round(max(done.values()) / 60, 2) if done else None,
             "one_window_table_min": (round(max(done[j] for j in TABLE_JOBS) / 60, 2)
                                      if all(j in done for j in TABLE_JOBS) else None),
             "cpu_s": round(float(user.group(1)) + float(system.group(1))) if user and system else None,
             "job_seconds": round(sum(jobs.values())), "jobs": jobs,
             "headline": headline.group(0) if headline else None}
    out = Path(__file__).with_name("timing.json")
    runs = json.loads(out.read_text()) if out.exists() else []
    runs = [r for r in runs if r["label"] != a.label] + [entry]
    out.write_text(json.dumps(runs, indent=1) + "\n")
    print(json.dumps({k: v for k, v in entry.items() if k != "jobs"}, indent=1))


if __name__ == "__main__":
    main()
