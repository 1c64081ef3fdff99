"""Record one `make demo` timing into timing.json (the record of the docs' demo tables: README, WORLD_MODELS,
ROLLOUTS, RESULTS).

    /usr/bin/time -v make demo > demo.log 2>&1      # in a clean clone, on a quiet machine
    python docs/demo_timing/record.py LABEL CLONE/runs/demo demo.log "MACHINE" [--commit C]
    python docs/demo_timing/record.py --readme LABEL      # the docs' demo tables from that entry

Keeps each job's seconds (the demo's results.json), the wall time from nothing and the CPU time (/usr/bin/time's
lines in the log), the minute the one-window table was complete (the log's "[mm:ss] eval ...: done" lines of its
three rows), the printed headline line and the figures the README's tables quote (``simforcing.demo.readme_tables``).
A results.json without a section the tables read (a job that failed or did not run) is refused unless
``--allow-missing``.
"""

import argparse
import datetime
import json
import re
import subprocess
from pathlib import Path

from simforcing import docs_tables
from simforcing.demo.readme_tables import figures, missing_sections

TABLE_JOBS = ("eval copy-first", "eval sft", "eval simforcing")  # the one-window table's rows


def _clock(s: str) -> float:
    parts = [float(p) for p in s.split(":")]
    return sum(p * 60 ** i for i, p in enumerate(reversed(parts)))


TIMING = Path(__file__).with_name("timing.json")


def write_readme(label: str) -> None:
    """Point every docs block that shows one timing.json run (the README's demo tables and the rest) at the entry
    ``label`` and rewrite the pages (``simforcing.docs_tables``)."""
    runs = {r["label"]: r for r in json.loads(TIMING.read_text())}
    if label not in runs or "figures" not in runs[label]:
        raise SystemExit(f"{TIMING}: no entry {label!r} with figures; entries with figures: "
                         f"{[k for k, r in runs.items() if 'figures' in r]}")
    for page in docs_tables.write(entries={docs_tables.TIMING: label}):
        print(f"{page}: demo tables from {label!r}")


def read_results(path: Path, allow_missing: bool = False) -> tuple[dict, dict]:
    """The demo's results.json and the figures the tables quote (``readme_tables.figures``), or SystemExit naming the
    file and what is wrong: not JSON, no job seconds (``wall_time_s``), a section or figure of the wrong type, or —
    unless ``allow_missing`` — sections the tables read that a failed or skipped job left out (recorded, they showed
    "—" in the README without a word)."""
    try:
        results = json.loads(path.read_text())
        figs = figures(results)
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: {e}; give the folder of a finished `make demo`") from None
    wall = results.get("wall_time_s")
    if not isinstance(wall, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                             for v in wall.values()):
        raise SystemExit(f"{path}: field 'wall_time_s' must map each job to its seconds; got {wall!r:.80}")
    missing = missing_sections(results)
    if missing and not allow_missing:
        raise SystemExit(f"{path}: no {', '.join(missing)} section(s) (a job failed or did not run): their figures "
                         "would be recorded as missing; finish the demo (`make demo` again), or record it anyway "
                         "with --allow-missing")
    return results, figs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("label")
    ap.add_argument("demo", type=Path, nargs="?", help="the demo's folder (runs/demo)")
    ap.add_argument("log", type=Path, nargs="?", help="make demo's output under /usr/bin/time -v")
    ap.add_argument("machine", nargs="?")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--readme", action="store_true", help="only rewrite the docs' demo tables from entry LABEL")
    ap.add_argument("--allow-missing", action="store_true", help="record a demo whose results.json lacks sections "
                    "the tables read (a job failed or did not run): their figures are recorded as missing (shown "
                    "\"—\"); without it such a demo is refused")
    a = ap.parse_args()
    if a.readme:
        return write_readme(a.label)
    if a.demo is None or a.log is None or a.machine is None:
        ap.error("recording needs DEMO, LOG and MACHINE")
    text = a.log.read_text(errors="replace")
    done = {m.group(2): _clock(m.group(1)) for m in re.finditer(r"^\[(\d+:\d+)\] (.+?): done in", text, re.M)}
    elapsed = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text)
    user = re.search(r"User time \(seconds\): (\S+)", text)
    system = re.search(r"System time \(seconds\): (\S+)", text)
    headline = re.search(r"^demo @ .*$", text, re.M)
    results, figs = read_results(a.demo / "results.json", a.allow_missing)
    wall = results["wall_time_s"]
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
             "headline": headline.group(0) if headline else None, "figures": figs}
    out = TIMING
    runs = json.loads(out.read_text()) if out.exists() else []
    runs = [r for r in runs if r["label"] != a.label] + [entry]
    out.write_text(json.dumps(runs, indent=1) + "\n")
    print(json.dumps({k: v for k, v in entry.items() if k != "jobs"}, indent=1))


if __name__ == "__main__":
    main()
