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

Start-up: a fresh ``python -m simforcing`` spends 2-5 s importing torch, diffusers and the command's module before it
does anything, and the demo starts dozens of jobs. On Linux a one-thread job of the CLI (not ``raw``) is therefore
forked from a *fork server*: one process per graph, started with the jobs' environment (every variable a library reads
as it loads — ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MUJOCO_GL`` ... — is the job's), which imports what a
job's command needs once (``simforcing.cli.prepare``: torch, diffusers, transformers' T5, the package; never MuJoCo,
which the job imports itself once ``MUJOCO_GL`` is set) and forks a child per job. The child starts a session of its
own, writes to its own log, draws fresh random seeds (Python's, numpy's and torch's, as a new process does) and runs
``simforcing.cli.main(argv)``, leaving the interpreter as ``python -m simforcing`` would (threads joined, atexit); its
exit code comes back through the server. Before every fork the server checks that it is still what a fresh process
is after the same imports: one thread (torch has run no operation), its working folder, no MuJoCo or OpenGL loaded;
if not, it forks no more and the jobs run as plain subprocesses — as does a job whose environment or working folder
is not the server's, and a job of more threads (numpy's OpenBLAS starts its threads as it loads when
``OPENBLAS_NUM_THREADS`` > 1; the demo has one such job, stage 1). ``SIMFORCING_JOBS_FORK=0`` (or ``run_jobs(...,
fork=False)``) runs every job as a plain subprocess. Either way a job computes the same, to the bit
(tests/test_jobs.py; the quick demo's 30 weight files and every number, docs/notebook/benchmark.md).
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Optional, Sequence, Union

_PROGRESS = re.compile(rb"(\d+)/(\d+) \[")
FORK_ENV = "SIMFORCING_JOBS_FORK"  # "0": every job a plain subprocess (the default forks the CLI's jobs on Linux)
CLI = "simforcing.cli"  # the module whose main(argv) runs a job and prepare(argv) imports what that job needs
NOT_PRELOADED = ("mujoco", "OpenGL")  # a fork server holding one of these forks nothing: GL contexts, threads
LOST = 70  # a forked job's exit code when its fork server ended before it (EX_SOFTWARE)
KILL_REPORT_S = 10.0  # a server that has not reported a killed job's exit after this long is stuck: it is ended


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
    started: Optional[float] = None  # seconds since the graph started (None: the job did not run)


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


def fork_enabled(fork: Optional[bool] = None) -> bool:
    """Whether the CLI's jobs are forked from a fork server (module docstring): ``fork`` when given, else
    ``SIMFORCING_JOBS_FORK`` ("0"/"1"), else on Linux (where fork after importing torch is safe; not on macOS)."""
    if fork is not None:
        return fork
    value = os.environ.get(FORK_ENV, "").strip().lower()
    if value in ("0", "false", "no", "off"):
        return False
    return hasattr(os, "fork") and (value in ("1", "true", "yes", "on") or sys.platform.startswith("linux"))


class ForkedProcess:
    """A job forked by a :class:`ForkServer`: the part of ``subprocess.Popen`` that :func:`run_jobs` uses (``pid``,
    ``returncode``, ``poll``, ``wait``), and :meth:`signal_group`. ``pid`` is None until the server has forked the
    job (it may first import the command's module); a signal sent before is delivered then. When the server refuses
    (it is no longer safe to fork from) the job starts as a plain subprocess (``start_plain``) and this delegates to
    it."""

    def __init__(self, server: "ForkServer", start_plain: Callable[[], subprocess.Popen], log_file: IO[bytes]):
        self.server, self.start_plain, self.log_file = server, start_plain, log_file
        self.pid: Optional[int] = None
        self.code: Optional[int] = None  # the exit code the server reported
        self.plain: Optional[subprocess.Popen] = None
        self.signals: list[int] = []  # sent before the job had a pid
        self.refusal = False  # the server refused: start as a plain subprocess
        self.killed: Optional[float] = None  # when SIGKILL was sent to it (running)

    def forked(self, pid: int) -> None:
        self.pid = pid
        for sig in self.signals:
            self.signal_group(sig)
        self.signals.clear()

    def refused(self) -> None:
        """The server forks no more: the job starts as a plain subprocess at the next :meth:`poll` (not here: a reply
        is handled with signals held, and a process started then would inherit them held)."""
        self.refusal = True

    def _start_plain(self) -> None:
        self.refusal = False
        if self.signals:  # stopped before it started: it never runs
            self.code = -self.signals[0]
            return
        self.plain = self.start_plain()
        self.pid = self.plain.pid

    def lost(self) -> None:
        """The server ended before the job did: its exit code cannot be known; the job is stopped and fails."""
        self.signal_group(signal.SIGKILL)
        self.log_file.write(b"\nsimforcing jobs: the fork server ended before this job did; it was stopped\n")
        self.log_file.flush()
        self.code = LOST

    @property
    def returncode(self) -> Optional[int]:
        return self.plain.returncode if self.plain is not None else self.code

    def poll(self) -> Optional[int]:
        if self.plain is None and self.code is None and not self.refusal:
            self.server.pump(0)
        if self.refusal:
            self._start_plain()
        return self.plain.poll() if self.plain is not None else self.code

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self.plain is not None:
                return self.plain.wait(left)
            if left == 0:
                raise subprocess.TimeoutExpired(["simforcing"], timeout)
            if self.killed is not None and time.monotonic() - self.killed > KILL_REPORT_S:
                self.server.kill()  # killed, yet no exit reported: the server is stuck; its end ends the wait
            self.server.pump(0.5 if left is None else min(left, 0.5))
        return self.returncode

    def signal_group(self, sig: int) -> None:
        if self.plain is not None:
            signal_group(self.plain, sig)
        elif self.pid is None:
            if self.code is None:
                self.signals.append(sig)
                if sig == signal.SIGKILL:  # the server is still importing for it, past the stop's patience
                    self.server.kill()
        elif self.code is None or sig == signal.SIGKILL:  # SIGKILL: what the job left in its group
            if sig == signal.SIGKILL and self.code is None and self.killed is None:
                self.killed = time.monotonic()
            try:
                os.killpg(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


class ForkServer:
    """One fork server (module docstring): a process started with one job environment that forks the jobs asking for
    exactly that environment and folder. Requests and replies are JSON lines on two pipes; the server forks one job at
    a time, in order, and reports each job's pid, then its exit code."""

    def __init__(self, env: dict, echo: Callable[[str], None]):
        self.env, self.cwd, self.echo = dict(env), os.getcwd(), echo
        req_r, self.req = os.pipe()
        self.rep, rep_w = os.pipe()
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", f"import {CLI} as cli, simforcing.jobs as j; "
                                          "j.serve_forks(cli)", str(req_r), str(rep_w)], env=self.env,
                                         stdout=subprocess.DEVNULL,
                                         pass_fds=(req_r, rep_w), start_new_session=True)
        except BaseException:
            os.close(self.req), os.close(self.rep)
            raise
        finally:
            os.close(req_r), os.close(rep_w)
        os.set_blocking(self.rep, False)
        self.buffer = b""
        self.asked: list[ForkedProcess] = []  # in the order of the requests: the server answers in that order
        self.jobs: dict[int, ForkedProcess] = {}  # by pid
        self.ended: Optional[str] = None  # why it forks no more (refused, or the process ended)

    def fits(self, env: dict) -> bool:
        return self.ended is None and env == self.env and os.getcwd() == self.cwd

    def start(self, argv: list[str], log: Path, log_file: IO[bytes],
              start_plain: Callable[[], subprocess.Popen]) -> ForkedProcess:
        p = ForkedProcess(self, start_plain, log_file)
        try:
            os.write(self.req, (json.dumps({"argv": list(argv), "log": str(log)}) + "\n").encode())
        except OSError as e:  # the server is gone
            self.stop_forking(f"the fork server ended ({e})")
            p.refused()
            return p
        self.asked.append(p)
        return p

    def stop_forking(self, why: str) -> None:
        if self.ended is None:
            self.ended = why
            self.echo(f"jobs: {why}; the next jobs run as plain processes")

    def pump(self, timeout: float) -> None:
        """Read the server's replies (waiting up to ``timeout`` seconds for the first) and hand them to the jobs."""
        if self.rep < 0:
            return
        ready, _, _ = select.select([self.rep], [], [], timeout)
        if ready:
            with _signals_held():  # a reply read is a reply handled (Ctrl-C may come at any time)
                self._handle()

    def _handle(self) -> None:
        try:
            data = os.read(self.rep, 1 << 16)
        except BlockingIOError:
            return
        if not data:  # the server ended: what it had not forked starts plainly, what it had forked is lost
            os.close(self.rep)
            self.rep = -1
            code = self.proc.wait()
            self.stop_forking(f"the fork server ended (exit code {code})")
            for p in self.asked:
                p.refused()
            self.asked.clear()
            for p in self.jobs.values():
                if p.returncode is None:
                    p.lost()
            return
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            msg = json.loads(line)
            if "exit" in msg:
                if msg["exit"] in self.jobs:
                    self.jobs.pop(msg["exit"]).code = msg["code"]
            elif "pid" in msg:
                p = self.asked.pop(0)
                self.jobs[msg["pid"]] = p
                p.forked(msg["pid"])
            else:  # {"refused": why}
                self.stop_forking(f"fork server: {msg['refused']}")
                self.asked.pop(0).refused()

    def kill(self) -> None:
        """End the server now (what it had not forked never starts; :meth:`pump` sees the end)."""
        self.ended = self.ended or "ended by the graph"
        self.proc.kill()

    def close(self, timeout: float = 30.0) -> None:
        """Let the server end (it reads the end of its requests), after every job it forked has ended."""
        if self.req >= 0:
            os.close(self.req)
            self.req = -1
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.rep >= 0:
            os.close(self.rep)
            self.rep = -1


class _signals_held:
    """Ctrl-C, SIGTERM and SIGHUP wait (are delivered at the end of the block): what the block reads or writes on a
    fork server's pipes is handled whole."""

    def __enter__(self):
        self.old = signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))

    def __exit__(self, *exc):
        signal.pthread_sigmask(signal.SIG_SETMASK, self.old)


def serve_forks(cli) -> None:
    """The fork server's program (``python -c "import simforcing.cli as cli, ...; serve_forks(cli)" REQ_FD
    REP_FD``: the CLI module imported by the program's own line, so this module imports nothing above it): returns
    only in a forked job, which then runs the command and leaves the interpreter as ``python -m simforcing`` would."""
    req_fd, rep_fd = int(sys.argv[1]), int(sys.argv[2])
    sys.path[0] = os.getcwd()  # as `python -m` has it (`-c` puts "")
    job = _serve(req_fd, rep_fd, cli)
    if job is None:  # the end of the requests: nothing of its own to flush or remove, and the interpreter's tear-down
        os._exit(0)  # of torch and the rest takes seconds the graph would wait for
    fd = os.open(job["log"], os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    _fresh_random_state()
    sys.argv = [os.path.join(os.path.dirname(cli.__file__), "__main__.py"), *job["argv"]]
    sys.exit(cli.main(job["argv"]))


def _serve(req_fd: int, rep_fd: int, cli) -> Optional[dict]:
    """The server's loop: fork each request, report pids and exit codes; None at the end of the requests, the
    request in a forked child. Exits are reaped and reported on SIGCHLD, also while the server imports for a job."""
    for fd in (req_fd, rep_fd):
        os.set_inheritable(fd, False)  # not in what the server or a job starts (close_fds=False, exec)
    cwd = os.getcwd()
    unsafe: Optional[str] = None
    buffer = b""

    def say(msg: dict) -> bool:
        try:  # one write of a short line: whole, even from the handler below
            os.write(rep_fd, (json.dumps(msg) + "\n").encode())
            return True
        except OSError:  # the graph's process is gone
            return False

    def reap(signum=None, frame=None) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            say({"exit": pid, "code": os.waitstatus_to_exitcode(status)})

    signal.signal(signal.SIGCHLD, reap)
    while True:
        data = os.read(req_fd, 1 << 16)
        if not data:  # the graph's process closed its end (or is gone)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            return None
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            job = json.loads(line)
            if unsafe is None:
                unsafe = _prepare(cli, job) or _unsafe_to_fork(cwd)
            if unsafe is not None:
                if not say({"refused": unsafe}):
                    return None
                continue
            sync_r, sync_w = os.pipe()
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])  # its pid is said before its exit
            pid = os.fork()
            if pid == 0:  # the job: a session of its own before the server names it, signals as a new process's
                os.setsid()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                for fd in (sync_r, sync_w, req_fd, rep_fd):
                    os.close(fd)
                return job
            os.close(sync_w)
            os.read(sync_r, 1)  # the end of the pipe: the child has its session
            os.close(sync_r)
            said = say({"pid": pid})
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            if not said:
                return None


def _prepare(cli, job: dict) -> Optional[str]:
    """Import what the job's command needs (``cli.prepare``), what that prints going to the job's log (as it would in
    a fresh process). Returns why this process should fork no more (None: it may). A failed import is the job's to
    meet: it imports again itself and fails in its log."""
    fd = os.open(job["log"], os.O_WRONLY | os.O_APPEND)
    saved = os.dup(1), os.dup(2)
    sys.stdout.flush(), sys.stderr.flush()
    os.dup2(fd, 1), os.dup2(fd, 2)
    try:
        return cli.prepare(job["argv"])
    except Exception:
        return None
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(saved[0], 1), os.dup2(saved[1], 2)
        for x in (fd, *saved):
            os.close(x)


def _unsafe_to_fork(cwd: str) -> Optional[str]:
    """Why this process is no longer what a fresh one would be after the same imports (None: it is). The environment
    as the imports left it is kept: they change it as they would in the job (torch sets ``TORCHINDUCTOR_CACHE_DIR``)."""
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = threading.active_count()
    if threads != 1:
        return f"{threads} threads after the imports (a fork copies one)"
    loaded = [m for m in NOT_PRELOADED if m in sys.modules]
    if loaded:
        return f"the imports loaded {', '.join(loaded)}"
    if os.getcwd() != cwd:
        return "the imports changed the working folder"
    return None


def _fresh_random_state() -> None:
    """The seeds a new process would draw: Python's ``random`` reseeds itself at fork; numpy's and torch's global
    generators (seeded once at their import, in the server) draw new ones here."""
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    if "torch" in sys.modules:
        sys.modules["torch"].default_generator.seed()


@dataclass
class Running:
    """A job that has been started: its process, its open log file and when it started."""

    job: Job
    proc: Union[subprocess.Popen, ForkedProcess]
    log_file: IO[bytes]
    log: Path
    start: float


class _Scheduler:
    """The state of one :func:`run_jobs` call: what is pending, running and done."""

    def __init__(self, jobs: Sequence[Job], slots: int, log_dir: Path, echo: Callable[[str], None],
                 stop_timeout: float, on_done: Optional[Callable[[str, dict], None]] = None, fork: bool = False):
        self.pending, self.slots, self.log_dir, self.echo = list(jobs), slots, log_dir, echo
        self.on_done = on_done
        self.fork = fork
        self.server: Optional[ForkServer] = None  # started for the first job it forks
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
        self.running[job.name] = Running(job, self.launch(job, fh, log), fh, log, time.perf_counter())
        self.echo(f"{self.stamp()} {job.name}: started ({job.slots} slot{'s' if job.slots > 1 else ''}, log {log})")

    def launch(self, job: Job, fh: IO[bytes], log: Path) -> Union[subprocess.Popen, ForkedProcess]:
        """The job's process: forked from the fork server (module docstring), or a plain subprocess (``raw``, more
        than one thread, forking off, or an environment or folder the server was not started with)."""
        env = job_env(job.threads)

        def plain() -> subprocess.Popen:
            fh.seek(0, os.SEEK_END)  # after what the fork server may have written there
            return subprocess.Popen(job.command(), stdout=fh, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)  # Ctrl-C reaches us; we stop the children

        if job.raw or job.threads != 1 or not self.fork:
            return plain()
        if self.server is None:
            try:
                self.server = ForkServer(env, self.echo)
            except OSError as e:
                self.echo(f"jobs: no fork server ({e}); jobs run as plain processes")
                self.fork = False
                return plain()
        if not self.server.fits(env):
            return plain()
        with _signals_held():  # a request and its record go together (Ctrl-C may come at any time)
            return self.server.start(job.argv, log, fh, plain)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

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
                self.results[name] = JobResult(name, "done", 0, secs, str(r.log), r.start - self.t0)
                self.echo(f"{self.stamp()} {name}: done in {secs:.0f} s")
                if self.on_done is not None:
                    self.on_done(name, self.results)
                continue
            self.results[name] = JobResult(name, "failed", r.proc.returncode, secs, str(r.log), r.start - self.t0)
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
             on_done: Optional[Callable[[str, dict], None]] = None,
             fork: Optional[bool] = None) -> dict[str, JobResult]:
    """Run the graph (see the module docstring); returns every job's result, or raises JobFailed. ``on_done(name,
    results)`` is called in this process after each job that ran succeeds (e.g. a report rewritten as jobs finish).
    ``fork``: whether the CLI's jobs are forked from a fork server (default: :func:`fork_enabled`)."""
    check_graph(jobs, slots)
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    s = _Scheduler(jobs, slots, log_dir, echo, stop_timeout, on_done, fork_enabled(fork))
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
        s.close()
        for sig, old in handlers.items():
            signal.signal(sig, old)
    return s.results


def signal_group(proc: Union[subprocess.Popen, ForkedProcess], sig: int) -> None:
    """Send ``sig`` to the job's process group (it is the leader: ``start_new_session``, or its own ``setsid`` when
    forked), so that what it started (a data generator's worker pool, torchrun's ranks) stops with it."""
    if isinstance(proc, ForkedProcess):
        proc.signal_group(sig)
        return
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


def spans(results: dict[str, JobResult]) -> dict[str, tuple[float, float]]:
    """(start, end) seconds since the graph started of every job that ran to its end in this run."""
    return {n: (round(r.started, 1), round(r.started + r.seconds, 1)) for n, r in results.items()
            if r.state == "done" and r.started is not None}


