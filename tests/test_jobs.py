"""The job graph behind the demo: order, slots, skipping, failure, progress, threads per job; the CLI's jobs forked
from a fork server give what plain processes give."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

import simforcing.jobs as jobs_module
from simforcing.jobs import Job, JobFailed, check_graph, progress_of, run_jobs

TESTS = str(Path(__file__).resolve().parent)


# A stand-in for simforcing.cli in the fork server (``jobs.CLI``): this module's prepare(argv) and main(argv).
def prepare(argv):
    """What the server imports before it forks (as cli.prepare imports a command's module)."""
    if argv[0] == "probe":
        import numpy  # noqa: F401
        import torch  # noqa: F401
    if argv[0] == "slow-import":
        time.sleep(300)


def main(argv):
    """``probe OUT``: what the job's process is and computes (one JSON line); ``parent OUT``: its parent's pid;
    ``sleep PIDS``: start a grandchild, record both pids, wait; ``exit N``."""
    if argv[0] == "parent":
        with open(argv[1], "a") as fh:
            fh.write(f"{os.getppid()}\n")
        return 0
    if argv[0] == "exit":
        print(f"leaving with {argv[1]}")
        return int(argv[1])
    if argv[0] == "sleep":
        import subprocess

        c = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        with open(argv[1], "a") as fh:
            fh.write(f"{os.getpid()} {c.pid}\n")
        time.sleep(300)
    import random

    import numpy as np
    import torch

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(96, 512, generator=g), torch.randn(512, 256, generator=g)
    conv = torch.nn.functional.conv2d(torch.randn(2, 8, 64, 64, generator=g), torch.randn(16, 8, 3, 3, generator=g))
    with open(argv[1], "a") as fh:
        fh.write(json.dumps({
            "threads": torch.get_num_threads(), "omp": os.environ["OMP_NUM_THREADS"], "pid": os.getpid(),
            "ppid": os.getppid(), "own_session": os.getsid(0) == os.getpid(),
            "result": [(a @ b).sum(0).tolist(), conv.sum((0, 2, 3)).tolist(), (a @ b).sum().item()],
            "draws": [torch.rand(2).tolist(), np.random.rand(2).tolist(), random.random()]}) + "\n")
    return 0


@pytest.fixture
def probe_cli(monkeypatch):
    """The fork server runs this module in place of simforcing.cli (its folder on the jobs' path)."""
    monkeypatch.setattr(jobs_module, "CLI", "test_jobs")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))


def _plain(*argv):
    """The same probe as a plain process (what `python -m simforcing` is to the CLI)."""
    return _py(f"import sys; sys.path.insert(0, {TESTS!r}); import test_jobs; sys.exit(test_jobs.main(sys.argv[1:]))") \
        + list(argv)


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


@pytest.mark.parametrize("forked", [False, True], ids=["plain", "forked"])
def test_sigterm_stops_every_job_and_what_it_started(tmp_path, forked):
    """`kill` on the demo stops its jobs and their own children (they run in sessions of their own and would
    otherwise outlive it, burning the cores); forked jobs too, and a job the fork server is still importing for never
    starts (the server is ended once the stop's patience is spent)."""
    import os
    import signal
    import subprocess

    pids = tmp_path / "pids"
    # each job starts a grandchild (as a data generator's worker pool does), records both pids and waits
    job = ("import os, subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; "
           "time.sleep(300)']); open(sys.argv[1], 'a').write(f'{os.getpid()} {c.pid}\\n'); time.sleep(300)")
    if forked:  # this module's main(["sleep", PIDS]) does the same; a third job's imports take 300 s
        jobs = (f"[Job(n, ['sleep', {str(pids)!r}], priority=1) for n in 'ab'] + [Job('c', ['slow-import'])]\n"
                "import simforcing.jobs; simforcing.jobs.CLI = 'test_jobs'\n")
    else:
        jobs = f"[Job(n, [sys.executable, '-c', {job!r}, {str(pids)!r}], raw=True) for n in 'ab']\n"
    driver = (f"import sys; from simforcing.jobs import Job, run_jobs\n"
              f"jobs = {jobs}"
              f"try:\n    run_jobs(jobs, slots=3, log_dir={str(tmp_path / 'logs')!r}, poll=0.02, stop_timeout=5)\n"
              f"except KeyboardInterrupt:\n    sys.exit(130)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, "-c", driver], env=env)
    try:
        deadline = time.time() + 180  # generous: a loaded 2-core machine
        while (not pids.exists() or len(pids.read_text().split()) < 4) and time.time() < deadline:
            time.sleep(0.05)
        started = [int(p) for p in pids.read_text().split()]
        assert len(started) == 4, started
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 130  # the slow import (300 s) did not hold the stop
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(pids.read_text().split()) == 4  # and its job never ran

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


def test_forked_jobs_are_what_plain_processes_are(tmp_path, probe_cli):
    """Forked from the fork server, a job has its thread count, a session of its own, fresh random seeds, and
    computes to the bit what a plain process computes; a job of two threads runs as a plain process (numpy's OpenBLAS
    starts threads as it loads: the server would not be forkable)."""
    out = tmp_path / "probe.jsonl"
    graph = [Job(f"fork {k}", ["probe", str(out)]) for k in "ab"]
    graph += [Job("plain", _plain("probe", str(out)), raw=True)]
    said = []
    run_jobs(graph, 1, tmp_path / "logs", echo=said.append, poll=0.02)
    with pytest.raises(JobFailed):  # the two-thread job was not forked: `python -m simforcing probe` is no command
        run_jobs([Job("two", ["probe", str(out)], threads=2)], 1, tmp_path / "two", echo=said.append, poll=0.02)
    fork_a, fork_b, plain_1 = _lines(out)
    assert [r["threads"] for r in (fork_a, fork_b, plain_1)] == [1, 1, 1]
    assert fork_a["omp"] == fork_b["omp"] == "1"
    assert fork_a["ppid"] == fork_b["ppid"] != os.getpid() and plain_1["ppid"] == os.getpid()  # one server
    assert all(r["own_session"] for r in (fork_a, fork_b, plain_1))
    assert fork_a["result"] == fork_b["result"] == plain_1["result"]  # to the bit (JSON floats round-trip exactly)
    assert all(x != y for x, y in zip(fork_a["draws"], fork_b["draws"]))  # torch, numpy, random: own seeds each
    assert not [s for s in said if "plain processes" in s], said


def test_forking_can_be_turned_off(tmp_path, probe_cli, monkeypatch):
    """SIMFORCING_JOBS_FORK=0 or fork=False: every job is `python -m simforcing ...` (which has no `parent`)."""
    out = tmp_path / "parent"
    monkeypatch.setenv("SIMFORCING_JOBS_FORK", "0")
    with pytest.raises(JobFailed, match="exit code 2"):
        run_jobs([Job("a", ["parent", str(out)])], 1, tmp_path, echo=lambda s: None, poll=0.02)
    monkeypatch.delenv("SIMFORCING_JOBS_FORK")
    with pytest.raises(JobFailed, match="exit code 2"):
        run_jobs([Job("b", ["parent", str(out)])], 1, tmp_path, echo=lambda s: None, poll=0.02, fork=False)
    run_jobs([Job("c", ["parent", str(out)])], 1, tmp_path, echo=lambda s: None, poll=0.02)
    assert int(out.read_text()) != os.getpid()  # forked: its parent is the fork server


def test_a_forked_job_fails_as_a_plain_one_does(tmp_path, probe_cli):
    """Its exit code and log end in JobFailed, and the forked job beside it is stopped with what it started."""
    pids = tmp_path / "pids"
    t = time.perf_counter()
    with pytest.raises(JobFailed, match="'bad' failed with exit code 3") as e:
        run_jobs([Job("slow", ["sleep", str(pids)], priority=1), Job("bad", ["exit", "3"], deps=("wait",)),
                  Job("wait", _py(f"import os, time\nwhile not os.path.exists({str(pids)!r}): time.sleep(0.02)"),
                      raw=True)], 2, tmp_path, echo=lambda s: None, poll=0.02)
    assert "leaving with 3" in str(e.value) and time.perf_counter() - t < 60
    assert (tmp_path / "bad.log").read_text() == "$ simforcing exit 3\nleaving with 3\n"
    for pid in map(int, pids.read_text().split()):  # the job and its child: gone (or a zombie of their reaper)
        deadline = time.time() + 30
        while time.time() < deadline and _alive(pid):
            time.sleep(0.05)
        assert not _alive(pid), pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_clis_jobs_forked_and_plain_write_the_same_logs(tmp_path):
    """The real CLI through the fork server: exit codes and logs as `python -m simforcing` gives them."""
    graph = [Job("version", ["--version"]), Job("info", ["model", "info", "--preset", "demo"])]
    logs = {}
    for fork in (False, True):
        run_jobs(graph, 2, tmp_path / str(fork), echo=lambda s: None, poll=0.02, fork=fork)
        with pytest.raises(JobFailed, match="'unknown' failed with exit code 2") as e:
            run_jobs([Job("unknown", ["no-such-command"])], 1, tmp_path / str(fork), echo=lambda s: None, fork=fork)
        assert "unknown command 'no-such-command'" in e.value.log.read_text()
        logs[fork] = {n: (tmp_path / str(fork) / f"{n}.log").read_text() for n in ("version", "info", "unknown")}
    assert logs[True] == logs[False] and "parameters:" in logs[True]["info"]


def test_a_private_inductor_cache_folder_is_not_forked_from(tmp_path, monkeypatch):
    """An unusable TORCHINDUCTOR_CACHE_DIR gives the process that meets it a private folder, removed when it exits: the
    fork server meeting it forks nothing (its jobs would share and remove it); the jobs run as plain processes."""
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "file"))
    said = []
    with pytest.raises(JobFailed, match="exit code 1"):  # a plain `simforcing data stats` of a missing folder
        run_jobs([Job("stats", ["data", "stats", str(tmp_path / "missing")])], 1, tmp_path, echo=said.append,
                 poll=0.02)
    assert [s for s in said if "private inductor cache folder of its own" in s and "plain processes" in s], said
    assert "data error [missing_meta]" in (tmp_path / "stats.log").read_text()  # the job ran, plainly
