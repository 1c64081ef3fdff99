"""Record one `make demo` timing into timing.json (the record of the docs' demo tables: README, WORLD_MODELS,
ROLLOUTS, RESULTS).

    /usr/bin/time -v make demo > demo.log 2>&1      # in a clean clone, on a quiet machine
    python docs/demo_timing/record.py LABEL CLONE/runs/demo demo.log "MACHINE" [--commit C]
    python docs/demo_timing/record.py --readme LABEL      # the docs' demo tables from that entry

Keeps each job's seconds (the demo's results.json), the wall time from nothing and the CPU time (/usr/bin/time's
lines in the log), the minute the one-window table was complete (the log's "[mm:ss] eval ...: done" lines of its
three rows), the printed headline line, the figures the README's tables quote (``simforcing.demo.readme_tables``)
and the schedule (the chain of jobs that bounded the wall time, the slots' idle seconds: ``simforcing.demo.schedule``).
A results.json without a section the tables read (a job that failed or did not run), or a log without
/usr/bin/time's lines, is refused unless ``--allow-missing``; so are a damaged timing.json (named, never overwritten:
the entry is added by writing the file whole) and a demo outside a git checkout without ``--commit``.
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
    runs = {r["label"]: r for r in read_timing(TIMING)}
    if label not in runs or "figures" not in runs[label]:
        raise SystemExit(f"{TIMING}: no entry {label!r} with figures; entries with figures: "
                         f"{[k for k, r in runs.items() if 'figures' in r]}")
    try:
        changed = docs_tables.write(entries={docs_tables.TIMING: label})
    except docs_tables.TableError as e:  # every page is left as it was
        raise SystemExit(f"error: {e}") from None
    for page in changed:
        print(f"{page}: demo tables from {label!r}")


def read_timing(path: Path) -> list:
    """timing.json's runs ([] when there is none yet), or SystemExit naming the file: not JSON (cut short), not a
    list of runs, a run without its string label (it was a traceback; recording into it would have lost the rest)."""
    if not path.exists():
        return []
    try:
        runs = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: {e}; restore it from git (nothing was recorded)") from None
    if not isinstance(runs, list) or not all(isinstance(r, dict) and isinstance(r.get("label"), str) for r in runs):
        raise SystemExit(f"{path}: not a list of runs, each with its string 'label'; restore it from git (nothing "
                         "was recorded)")
    return runs


def read_log(path: Path, allow_missing: bool = False) -> dict:
    """From make demo's log under /usr/bin/time -v: the minute each job was done, the wall clock (h:mm:ss) and the
    user and system seconds, the headline line. A log without /usr/bin/time's lines (the demo's own output, a demo cut
    short) is refused naming what is missing unless ``allow_missing`` (then recorded as missing: "—")."""
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise SystemExit(f"{path}: {e}") from None
    found = {"done": {m.group(2): _clock(m.group(1)) for m in re.finditer(r"^\[(\d+:\d+)\] (.+?): done in", text,
                                                                           re.M)},
             "elapsed": re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text),
             "user": re.search(r"User time \(seconds\): (\S+)", text),
             "system": re.search(r"System time \(seconds\): (\S+)", text), "headline": re.search(r"^demo @ .*$", text,
                                                                                               re.M)}
    missing = [k for k in ("elapsed", "user", "system", "done") if not found[k]]
    if missing and not allow_missing:
        raise SystemExit(f"{path}: no {', '.join(missing)} line(s): not the log of a whole `/usr/bin/time -v make "
                         "demo` (the wall clock and CPU time would be recorded as missing); give that log, or record "
                         "it anyway with --allow-missing")
    return found


def commit_of(demo: Path, given: "str | None") -> str:
    """The commit the demo ran at: ``given``, else the demo folder's checkout's HEAD; SystemExit when neither says
    (an empty commit was recorded without a word for a demo outside a git checkout)."""
    if given:
        return given
    git = subprocess.run(["git", "-C", str(demo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if git.returncode != 0 or not git.stdout.strip():
        raise SystemExit(f"{demo}: not in a git checkout; give the commit the demo ran at with --commit")
    return git.stdout.strip()


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
                    "the tables read (a job failed or did not run), or whose log lacks /usr/bin/time's lines: those "
                    "figures are recorded as missing (shown \"—\"); without it such a demo is refused")
    a = ap.parse_args()
    if a.readme:
        return write_readme(a.label)
    if a.demo is None or a.log is None or a.machine is None:
        ap.error("recording needs DEMO, LOG and MACHINE")
    runs = read_timing(TIMING)  # before anything else: a damaged record is named, never overwritten
    log = read_log(a.log, a.allow_missing)
    results, figs = read_results(a.demo / "results.json", a.allow_missing)
    commit = commit_of(a.demo, a.commit)
    wall = results["wall_time_s"]
    done, elapsed, user, system, headline = (log[k] for k in ("done", "elapsed", "user", "system", "headline"))
    jobs = {k: round(v, 1) for k, v in sorted(wall.items(), key=lambda kv: -kv[1]) if k != "total"}
    entry = {"label": a.label, "commit": commit, "machine": a.machine, "date": datetime.date.today().isoformat(),
             "from_nothing_min": round(_clock(elapsed.group(1)) / 60, 2) if elapsed else None,
             "jobs_min": round(max(done.values()) / 60, 2) if done else None,
             "one_window_table_min": (round(max(done[j] for j in TABLE_JOBS) / 60, 2)
                                      if all(j in done for j in TABLE_JOBS) else None),
             "cpu_s": round(float(user.group(1)) + float(system.group(1))) if user and system else None,
             "job_seconds": round(sum(jobs.values())), "jobs": jobs,
             "headline": headline.group(0) if headline else None, "figures": figs}
    if isinstance(results.get("schedule"), dict):  # the chain that bounded the wall time, the slots' idle seconds
        entry["schedule"] = results["schedule"]
    out = TIMING
    runs = [r for r in runs if r["label"] != a.label] + [entry]
    tmp = out.with_name(f".{out.name}.tmp")  # whole or not at all
    tmp.write_text(json.dumps(runs, indent=1) + "\n")
    tmp.replace(out)
    print(json.dumps({k: v for k, v in entry.items() if k != "jobs"}, indent=1))


if __name__ == "__main__":
    main()
