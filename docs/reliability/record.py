"""Record the fault-injection suite into faults.json (the record of docs/RELIABILITY.md's table).

    python docs/reliability/record.py --machine "MACHINE"                  # runs `pytest -m faults tests`
    python docs/reliability/record.py --machine "MACHINE" --collect-only   # counts its tests, runs none

Keeps, per test file of the suite, its tests and (when it ran) how many passed, failed or were skipped — from
pytest's JUnit XML — with the wall time, the command, and the commit, machine and date in docs/records.json
(``simforcing.docs_tables.set_provenance``); then rewrites the docs' tables.
"""

import argparse
import datetime
import json
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from simforcing import docs_tables

ROOT = Path(__file__).resolve().parents[2]
RECORD = "docs/reliability/faults.json"
PYTEST = [sys.executable, "-m", "pytest", "-m", "faults", "tests", "-p", "no:cacheprovider"]


def _file_of(classname: str) -> str:
    """``tests.faults.test_faults_x`` (pytest's JUnit classname, a class after it or not) -> ``test_faults_x.py``."""
    parts = classname.split(".")
    mod = next((p for p in parts if p.startswith("test_")), parts[-1])
    return f"{mod}.py"


def counts_from_junit(xml: Path) -> dict[str, dict]:
    """Per test file: tests, passed, failed (failures and errors), skipped."""
    out: dict[str, dict] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        f = out.setdefault(_file_of(case.get("classname", "")), {"tests": 0, "passed": 0, "failed": 0, "skipped": 0})
        f["tests"] += 1
        kinds = {child.tag for child in case}
        key = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        f[key] += 1
    return dict(sorted(out.items()))


def counts_from_collection(text: str) -> dict[str, dict]:
    """Per test file: the tests ``pytest --collect-only -q`` lists (``path/test_x.py::test_y[...]``)."""
    out: dict[str, dict] = {}
    for m in re.finditer(r"^(?:\S+/)?(test_\w+\.py)::", text, re.M):
        f = out.setdefault(m.group(1), {"tests": 0, "passed": None, "failed": None, "skipped": None})
        f["tests"] += 1
    return dict(sorted(out.items()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--machine", required=True, help="the machine, in words (cores, CPU, quiet or not)")
    ap.add_argument("--collect-only", action="store_true", help="count the suite's tests without running them")
    ap.add_argument("--commit", default=None, help="default: this checkout's HEAD")
    a = ap.parse_args()
    start = time.monotonic()
    if a.collect_only:
        cmd = PYTEST + ["--collect-only", "-q"]
        run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        files = counts_from_collection(run.stdout)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            xml = Path(tmp) / "faults.xml"
            cmd = PYTEST + [f"--junitxml={xml}"]
            run = subprocess.run(cmd, cwd=ROOT)
            files = counts_from_junit(xml) if xml.exists() else {}
    if not files:
        raise SystemExit(f"{' '.join(cmd)}: no test of the suite collected (exit {run.returncode})")
    commit = a.commit or subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                        capture_output=True, text=True).stdout.strip()
    shown = "python -m pytest -m faults tests" + (" --collect-only" if a.collect_only else "")
    body = {"format": "simforcing.fault-suite", "format_version": 1, "command": shown, "ran": not a.collect_only,
            "seconds": None if a.collect_only else round(time.monotonic() - start), "files": files}
    (ROOT / RECORD).write_text(json.dumps(body, indent=1) + "\n")
    docs_tables.set_provenance(RECORD, commit, a.machine, datetime.date.today().isoformat(),
                               f"recorded by docs/reliability/record.py{' --collect-only' if a.collect_only else ''}")
    for page in docs_tables.write():
        print(f"{page}: tables rewritten")
    print(json.dumps({k: v for k, v in body.items() if k != "files"}))


if __name__ == "__main__":
    main()
