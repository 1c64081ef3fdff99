"""Independent work side by side: a small job graph run as `simforcing` subprocesses on a fixed number of slots.

    jobs = [Job("stage1", ["pretrain", ...], slots=2), Job("sft", ["train", ...], deps=("stage1",)), ...]
    results = run_jobs(jobs, slots=2, log_dir=OUT / "logs")

Each job is one command line of the `simforcing` CLI (what the report cites), run as ``python -m simforcing ...`` in
its own process with a fixed number of torch threads (``threads``, default 1) whatever the number of slots: a
job's result does not depend on how many jobs run beside it, and one thread per process does not lose most of its
speed when another program is busy on the same cores (torch's OpenMP threads wait on each other; a single thread
has no one to wait for). ``slots`` is what a job occupies (a 2-process torchrun job takes 2).

Scheduling: a job starts when its dependencies have finished and enough slots are free, the ready job with the
highest ``priority`` first (the critical path: stage 1 before the state probe). A job whose ``skip`` returns True
(it finished in an earlier run) is not run. The first job that fails stops the graph: no new job starts, running
ones finish their step and checkpoint (SIGTERM), and :class:`JobFailed` names the job, its exit code and the end of
its log. Ctrl-C, SIGTERM and SIGHUP do the same and raise ``KeyboardInterrupt`` once the children have stopped.
Signals go to each job's whole process group (what it started stops with it); a job still running
``stop_timeout`` seconds after SIGTERM is killed.

Progress: one line when a job starts or ends, and every ``status_every`` seconds one line with each running job's
progress (the last ``N/M`` of its log, e.g. a tqdm bar), so jobs side by side stay readable.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Optional, Sequence

_PROGRESS = re.compile(rb"(\d+)/(\d+) \[")


@dataclass
class Job:
    name: str
    argv: list[str]  # the simforcing command after "simforcing" (or a full command line with ``raw``)
    deps: tuple[str, ...] = ()
    slots: int = 1  # cores the job occupies
    threads: int = 1  # torch / OpenMP threads per process
    priority: int = 0  # higher starts first among ready jobs
    skip: Optional[Callable[[], bool]] = None  # True: already done (a finished run), not run again
    raw: bool = False  # argv is a whole command line (e.g. torchrun), not simforcing's arguments
    on_start: Optional[Callable[[], None]] = None  # in this process, right before the job starts
    on_done: Optional[Callable[[], None]] = None  # in this process, after it succeeded (e.g. record provenance)

    def command(self) -> list[str]:
        return list(self.argv) if self.raw else [sys.executable, "-m", "simforcing", *self.argv]

    def cite(self) -> str:
        """The command as a user would type it."""
        return shlex.join(self.argv) if self.raw else "simforcing " + shlex.join(self.argv)


@dataclass
class JobResult:
    name: str
    state: str  # "done", "skipped", "failed", "stopped", "not run"
    exit_code: Optional[int] = None
    seconds: float = 0.0
    log: Optional[str] = None


class JobFailed(RuntimeError):
    def __init__(self, job: str, exit_code: int, log: Path, tail: str):
        super().__init__(f"job {job!r} failed with exit code {exit_code}; its log {log} ends with:\n{tail}")
        self.job, self.exit_code, self.log = job, exit_code, log


def check_graph(jobs: Sequence[Job], slots: int) -> None:
    """Unique names, known dependencies, no cycle, every job fits the slots."""
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"jobs: duplicate names {sorted({n for n in names if names.count(n) > 1})}")
    known = set(names)
    for j in jobs:
        missing = [d for d in j.deps if d not in known]
        if missing:
            raise ValueError(f"job {j.name!r}: unknown dependencies {missing}")
        if j.slots > slots:
            raise ValueError(f"job {j.name!r} needs {j.slots} slots; only {slots} available")
    state = {n: 0 for n in names}
    by_name = {j.name: j for j in jobs}

    def visit(n: str, path: tuple) -> None:
        if state[n] == 1:
            raise ValueError(f"jobs: dependency cycle {' -> '.join(path + (n,))}")
        if state[n] == 2:
            return
        state[n] = 1
        for d in by_name[n].deps:
            visit(d, path + (n,))
        state[n] = 2

    for n in names:
        visit(n, ())


def job_env(threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    env.setdefault("MUJOCO_GL", "egl")
    return env


def progress_of(log: Path) -> str:
    """The last ``N/M`` progress mark in the end of a log, as "N/M" ("" when none)."""
    try:
        with open(log, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4096))
            tail = fh.read()
    except OSError:
        return ""
    marks = _PROGRESS.findall(tail)
    return f"{int(marks[-1][0])}/{int(marks[-1][1])}" if marks else ""


@dataclass
class Running:
    """A job that has been started: its process, its open log file and when it started."""

    job: Job
    proc: subprocess.Popen
    log_file: IO[bytes]
    log: Path
    start: float


class _Scheduler:
    """The state of one :func:`run_jobs` call: what is pending, running and done."""

    def __init__(self, jobs: Sequence[Job], slots: int, log_dir: Path, echo: Callable[[str], None],
                 stop_timeout: float, on_done: Optional[Callable[[str, dict], None]] = None):
        self.pending, self.slots, self.log_dir, self.echo = list(jobs), slots, log_dir, echo
        self.on_done = on_done
        self.stop_timeout = stop_timeout
        self.results: dict[str, JobResult] = {j.name: JobResult(j.name, "not run") for j in jobs}
        self.running: dict[str, Running] = {}
        self.t0 = time.perf_counter()

    def stamp(self) -> str:
        s = int(time.perf_counter() - self.t0)
        return f"[{s // 60:02d}:{s % 60:02d}]"

    def finished(self, name: str) -> bool:
        return self.results[name].state in ("done", "skipped")

    def start_ready(self) -> bool:
        """Skip the ready jobs that are already done, else start every ready job that fits, highest priority first.
        Returns True when jobs were skipped (their dependents may be ready now: look again)."""
        ready = sorted((j for j in self.pending if all(self.finished(d) for d in j.deps)), key=lambda j: -j.priority)
        skipped = [j for j in ready if j.skip is not None and j.skip()]
        for job in skipped:
            self.pending.remove(job)
            self.results[job.name] = JobResult(job.name, "skipped")
            self.echo(f"{self.stamp()} {job.name}: already done, reused")
        if skipped:
            return True
        free = self.slots - sum(r.job.slots for r in self.running.values())
        for job in ready:
            if job.slots <= free:
                self.start(job)
                free -= job.slots
        return False

    def start(self, job: Job) -> None:
        self.pending.remove(job)
        if job.on_start is not None:
            job.on_start()
        log = self.log_dir / (re.sub(r"[^A-Za-z0-9_.-]+", "_", job.name) + ".log")
        fh = open(log, "wb")
        fh.write(("$ " + job.cite() + "\n").encode())
        fh.flush()
        proc = subprocess.Popen(job.command(), stdout=fh, stderr=subprocess.STDOUT, env=job_env(job.threads),
                                start_new_session=True)  # Ctrl-C reaches us; we stop the children
        self.running[job.name] = Running(job, proc, fh, log, time.perf_counter())
        self.echo(f"{self.stamp()} {job.name}: started ({job.slots} slot{'s' if job.slots > 1 else ''}, log {log})")

    def reap(self) -> None:
        """Record every job that has ended; the first failure stops the others and raises JobFailed."""
        for name, r in list(self.running.items()):
            if r.proc.poll() is None:
                continue
            r.log_file.close()
            del self.running[name]
            secs = time.perf_counter() - r.start
            if r.proc.returncode == 0:
                if r.job.on_done is not None:
                    r.job.on_done()
                self.results[name] = JobResult(name, "done", 0, secs, str(r.log))
                self.echo(f"{self.stamp()} {name}: done in {secs:.0f} s")
                if self.on_done is not None:
                    self.on_done(name, self.results)
                continue
            self.results[name] = JobResult(name, "failed", r.proc.returncode, secs, str(r.log))
            self.stop_all()
            tail = b"\n".join(r.log.read_bytes().splitlines()[-12:]).decode(errors="replace")
            raise JobFailed(name, r.proc.returncode, r.log, tail)

    def status_line(self) -> str:
        parts = [f"{n} {progress_of(r.log) or '…'}" for n, r in self.running.items()]
        done = sum(self.finished(n) for n in self.results)
        return f"{self.stamp()} running: {' | '.join(parts)} — {done}/{len(self.results)} done"

    def stop_all(self) -> None:
        """SIGTERM every running job's process group (runs checkpoint and exit), SIGKILL what outlives
        ``stop_timeout`` and what a job left behind."""
        for r in self.running.values():
            if r.proc.poll() is None:
                signal_group(r.proc, signal.SIGTERM)
        for name, r in list(self.running.items()):
            try:
                r.proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:  # a job that ignores SIGTERM: its whole group is killed
                signal_group(r.proc, signal.SIGKILL)
                r.proc.wait()
            signal_group(r.proc, signal.SIGKILL)  # what the job left behind in its group (e.g. pool workers)
            r.log_file.close()
            self.results[name] = JobResult(name, "stopped", r.proc.returncode, time.perf_counter() - r.start,
                                           str(r.log))
        self.running.clear()


def run_jobs(jobs: Sequence[Job], slots: int, log_dir: str | Path, echo: Callable[[str], None] = print,
             poll: float = 0.25, status_every: float = 30.0, stop_timeout: float = 120.0,
             on_done: Optional[Callable[[str, dict], None]] = None) -> dict[str, JobResult]:
    """Run the graph (see the module docstring); returns every job's result, or raises JobFailed. ``on_done(name,
    results)`` is called in this process after each job that ran succeeds (e.g. a report rewritten as jobs finish)."""
    check_graph(jobs, slots)
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    s = _Scheduler(jobs, slots, log_dir, echo, stop_timeout, on_done)
    last_status = time.perf_counter()
    handlers = _terminate_like_ctrl_c()
    try:
        while s.pending or s.running:
            if s.start_ready():
                continue
            if not s.running:
                if s.pending:  # nothing runs and nothing can start: a dependency did not finish
                    raise RuntimeError(f"jobs: {', '.join(j.name for j in s.pending)} cannot start")
                break
            time.sleep(poll)
            s.reap()
            if s.running and time.perf_counter() - last_status >= status_every:
                last_status = time.perf_counter()
                echo(s.status_line())
    except KeyboardInterrupt:
        echo(f"{s.stamp()} interrupted: stopping {', '.join(s.running) or 'nothing'} (runs checkpoint and resume)")
        s.stop_all()
        raise
    finally:
        for sig, old in handlers.items():
            signal.signal(sig, old)
    return s.results


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Send ``sig`` to the job's process group (it is the leader: ``start_new_session``), so that what it started
    (a data generator's worker pool, torchrun's ranks) stops with it."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):  # the group is gone
        pass


def _terminate_like_ctrl_c() -> dict:
    """SIGTERM / SIGHUP (``kill``, a closed terminal) stop the graph as Ctrl-C does: the jobs run in sessions of
    their own and would outlive this process otherwise. Only the main thread can install handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}


def timings(results: dict[str, JobResult]) -> dict[str, float]:
    return {n: round(r.seconds, 1) for n, r in results.items() if r.state == "done"}


