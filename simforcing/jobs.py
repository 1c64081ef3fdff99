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
from typing import Callable, Optional, Sequence

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


def run_jobs(jobs: Sequence[Job], slots: int, log_dir: str | Path, echo: Callable[[str], None] = print,
             poll: float = 0.25, status_every: float = 30.0, stop_timeout: float = 120.0) -> dict[str, JobResult]:
    """Run the graph (see the module docstring); returns every job's result, or raises JobFailed."""
    check_graph(jobs, slots)
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results: dict[str, JobResult] = {j.name: JobResult(j.name, "not run") for j in jobs}
    pending = list(jobs)
    running: dict[str, tuple[Job, subprocess.Popen, object, float, Path]] = {}
    last_status = time.perf_counter()

    def stamp() -> str:
        s = int(time.perf_counter() - t0)
        return f"[{s // 60:02d}:{s % 60:02d}]"

    def finished(name: str) -> bool:
        return results[name].state in ("done", "skipped")

    def stop_all(sig=signal.SIGTERM) -> None:
        for _, proc, fh, _, _ in running.values():
            if proc.poll() is None:
                signal_group(proc, sig)
        for name, (job, proc, fh, start, log) in list(running.items()):
            try:
                proc.wait(timeout=stop_timeout)
            except subprocess.TimeoutExpired:  # a job that ignores SIGTERM: its whole group is killed
                signal_group(proc, signal.SIGKILL)
                proc.wait()
            signal_group(proc, signal.SIGKILL)  # what the job left behind in its group (e.g. pool workers)
            fh.close()
            results[name] = JobResult(name, "stopped", proc.returncode, time.perf_counter() - start, str(log))
        running.clear()

    handlers = _terminate_like_ctrl_c()
    try:
        while pending or running:
            # start every ready job that fits, highest priority first
            free = slots - sum(j.slots for j, *_ in running.values())
            ready = sorted((j for j in pending if all(finished(d) for d in j.deps)), key=lambda j: -j.priority)
            skipped = [j for j in ready if j.skip is not None and j.skip()]
            for job in skipped:
                pending.remove(job)
                results[job.name] = JobResult(job.name, "skipped")
                echo(f"{stamp()} {job.name}: already done, reused")
            if skipped:
                continue  # their dependents may be ready now
            for job in ready:
                if job.slots > free:
                    continue
                pending.remove(job)
                if job.on_start is not None:
                    job.on_start()
                log = log_dir / (re.sub(r"[^A-Za-z0-9_.-]+", "_", job.name) + ".log")
                fh = open(log, "wb")
                fh.write(("$ " + job.cite() + "\n").encode())
                fh.flush()
                proc = subprocess.Popen(job.command(), stdout=fh, stderr=subprocess.STDOUT, env=job_env(job.threads),
                                        start_new_session=True)  # Ctrl-C reaches us; we stop the children
                running[job.name] = (job, proc, fh, time.perf_counter(), log)
                free -= job.slots
                echo(f"{stamp()} {job.name}: started ({job.slots} slot{'s' if job.slots > 1 else ''}, log {log})")
            if not running:
                if pending:  # nothing runs and nothing can start: a dependency did not finish
                    raise RuntimeError(f"jobs: {', '.join(j.name for j in pending)} cannot start")
                break
            time.sleep(poll)
            for name, (job, proc, fh, start, log) in list(running.items()):
                if proc.poll() is None:
                    continue
                fh.close()
                del running[name]
                secs = time.perf_counter() - start
                if proc.returncode == 0:
                    if job.on_done is not None:
                        job.on_done()
                    results[name] = JobResult(name, "done", 0, secs, str(log))
                    echo(f"{stamp()} {name}: done in {secs:.0f} s")
                    continue
                results[name] = JobResult(name, "failed", proc.returncode, secs, str(log))
                stop_all()
                tail = b"\n".join(log.read_bytes().splitlines()[-12:]).decode(errors="replace")
                raise JobFailed(name, proc.returncode, log, tail)
            if running and time.perf_counter() - last_status >= status_every:
                last_status = time.perf_counter()
                parts = [f"{n} {progress_of(r[4]) or '…'}" for n, r in running.items()]
                done = sum(finished(n) for n in results)
                echo(f"{stamp()} running: {' | '.join(parts)} — {done}/{len(results)} done")
    except KeyboardInterrupt:
        echo(f"{stamp()} interrupted: stopping {', '.join(running) or 'nothing'} (runs checkpoint and resume)")
        stop_all()
        raise
    finally:
        for sig, old in handlers.items():
            signal.signal(sig, old)
    return results


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


