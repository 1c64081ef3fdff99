"""The job graph behind the demo: order, slots, skipping, failure, progress, threads per job."""

import json
import sys
import time

import pytest

from simforcing.jobs import Job, JobFailed, check_graph, progress_of, run_jobs


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _writer(path, text, sleep=0.0):
    """A job that sleeps, then appends ``text`` and the wall clock to ``path`` (a JSON line)."""
    return _py(f"import json, os, time; t0 = time.time(); time.sleep({sleep}); "
               f"open({str(path)!r}, 'a').write(json.dumps([{text!r}, t0, time.time(), "
               f"os.environ['OMP_NUM_THREADS']]) + '\\n')")


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_graph_is_checked():
    with pytest.raises(ValueError, match="duplicate"):
        check_graph([Job("a", []), Job("a", [])], 2)
    with pytest.raises(ValueError, match="unknown dependencies"):
        check_graph([Job("a", [], deps=("b",))], 2)
    with pytest.raises(ValueError, match="cycle"):
        check_graph([Job("a", [], deps=("b",)), Job("b", [], deps=("a",))], 2)
    with pytest.raises(ValueError, match="needs 2 slots"):
        check_graph([Job("a", [], slots=2)], 1)


def test_dependencies_slots_priority_and_threads(tmp_path):
    out = tmp_path / "events.jsonl"
    jobs = [Job("first", _writer(out, "first", 0.3), raw=True, slots=2, threads=2),
            Job("low", _writer(out, "low", 0.6), raw=True, deps=("first",)),
            Job("high", _writer(out, "high", 0.6), raw=True, deps=("first",), priority=5),
            Job("last", _writer(out, "last"), raw=True, deps=("low", "high"))]
    said = []
    res = run_jobs(jobs, slots=2, log_dir=tmp_path / "logs", echo=said.append, poll=0.02)
    assert all(r.state == "done" for r in res.values())
    ev = {name: (t0, t1, threads) for name, t0, t1, threads in _lines(out)}
    assert ev["first"][1] <= ev["low"][0] and ev["first"][1] <= ev["high"][0]  # dependencies first
    assert ev["low"][0] < ev["high"][1] and ev["high"][0] < ev["low"][1]  # two 1-slot jobs side by side
    assert ev["last"][0] >= max(ev["low"][1], ev["high"][1])
    assert ev["first"][2] == "2" and ev["low"][2] == "1"  # each job's own thread count
    assert said[0].endswith("started (2 slots, log " + str(tmp_path / "logs" / "first.log") + ")")
    starts = [s for s in said if "started" in s]
    assert "high" in starts[1]  # the higher priority starts first
    assert (tmp_path / "logs" / "low.log").read_text().startswith("$ " + sys.executable)


def test_one_slot_runs_one_job_at_a_time(tmp_path):
    out = tmp_path / "events.jsonl"
    run_jobs([Job(n, _writer(out, n, 0.2), raw=True) for n in "abc"], slots=1, log_dir=tmp_path, echo=lambda s: None,
             poll=0.02)
    ev = sorted(_lines(out), key=lambda e: e[1])
    assert all(a[2] <= b[1] for a, b in zip(ev, ev[1:]))


def test_skipped_jobs_are_not_run_and_unblock_their_dependents(tmp_path):
    out = tmp_path / "events.jsonl"
    res = run_jobs([Job("done", _writer(out, "done"), raw=True, skip=lambda: True),
                    Job("next", _writer(out, "next"), raw=True, deps=("done",))], 2, tmp_path, echo=lambda s: None,
                   poll=0.02)
    assert res["done"].state == "skipped" and res["next"].state == "done"
    assert [e[0] for e in _lines(out)] == ["next"]


def test_a_failed_job_stops_the_graph_and_names_itself(tmp_path):
    out = tmp_path / "events.jsonl"
    jobs = [Job("bad", _py("import sys; print('boom: the reason'); sys.exit(3)"), raw=True),
            Job("slow", _py("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(75)); "
                            "time.sleep(30)"), raw=True),
            Job("after", _writer(out, "after"), raw=True, deps=("bad",))]
    t = time.perf_counter()
    with pytest.raises(JobFailed, match="'bad' failed with exit code 3") as e:
        run_jobs(jobs, 2, tmp_path, echo=lambda s: None, poll=0.02)
    assert "boom: the reason" in str(e.value) and time.perf_counter() - t < 20  # the slow one was stopped
    assert not out.exists()


def test_progress_is_the_last_count_of_the_log(tmp_path):
    log = tmp_path / "x.log"
    log.write_bytes(b"step:  10%|#  | 3/30 [00:01<00:09]\rstep:  20%|## | 6/30 [00:02<00:08]\r")
    assert progress_of(log) == "6/30"
    assert progress_of(tmp_path / "missing.log") == ""


def test_sigterm_stops_every_job_and_what_it_started(tmp_path):
    """`kill` on the demo stops its jobs and their own children (they run in sessions of their own and would
    otherwise outlive it, burning the cores)."""
    import os
    import signal
    import subprocess

    pids = tmp_path / "pids"
    # each job starts a grandchild (as a data generator's worker pool does), records both pids and waits
    job = ("import os, subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; "
           "time.sleep(300)']); open(sys.argv[1], 'a').write(f'{os.getpid()} {c.pid}\\n'); time.sleep(300)")
    driver = (f"import sys; from simforcing.jobs import Job, run_jobs\n"
              f"jobs = [Job(n, [sys.executable, '-c', {job!r}, {str(pids)!r}], raw=True) for n in 'ab']\n"
              f"try:\n    run_jobs(jobs, slots=2, log_dir={str(tmp_path / 'logs')!r}, poll=0.02, stop_timeout=20)\n"
              f"except KeyboardInterrupt:\n    sys.exit(130)\n")
    proc = subprocess.Popen([sys.executable, "-c", driver])
    deadline = time.time() + 180  # generous: a loaded 2-core machine
    while (not pids.exists() or len(pids.read_text().split()) < 4) and time.time() < deadline:
        time.sleep(0.05)
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 4, started
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 130

    def alive(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as fh:  # a zombie waiting for its reaper is gone too
            return fh.read().split(")")[-1].split()[0] != "Z"

    deadline = time.time() + 30
    while any(alive(p) for p in started) and time.time() < deadline:
        time.sleep(0.05)
    assert not [p for p in started if alive(p)]


def test_on_done_follows_each_job_that_ran_with_the_results_so_far(tmp_path):
    out = tmp_path / "events.jsonl"
    seen = []
    run_jobs([Job("reused", _writer(out, "reused"), raw=True, skip=lambda: True),
              Job("a", _writer(out, "a"), raw=True, deps=("reused",)),
              Job("b", _writer(out, "b"), raw=True, deps=("a",))], 2, tmp_path, echo=lambda s: None, poll=0.02,
             on_done=lambda name, res: seen.append((name, sorted(n for n, r in res.items() if r.state != "not run"))))
    assert seen == [("a", ["a", "reused"]), ("b", ["a", "b", "reused"])]  # a reused job is not reported
