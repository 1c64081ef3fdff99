"""One writer per folder: an exclusive ``flock`` on ``FOLDER/.lock``, held while a process writes the folder.

    lock = lock_folder(RUN, "training run")   # raises FolderBusy (a ConfigError, exit 2) when another process has it
    ...                                        # write the folder
    lock.release()                             # or leave it to the process's exit

The kernel releases a ``flock`` when its file descriptor is closed, which happens when the process exits in any
way — a crash, ``SIGKILL`` or a power loss included — so a dead writer never leaves a stuck lock; the ``.lock`` file
itself stays (its content is only the holder's description: pid, host, what, time). Two open file descriptions
conflict even within one process, so a second ``lock_folder`` of the same folder fails while the first is held.

Training (``simforcing pretrain/train``) holds its run folder's lock from the moment it knows the run can start until
it returns; any other writer of run folders (policy training, ...) should take the same lock with this function.
``flock`` is advisory and local: it does not protect a folder on a network file system that does not support it
(NFS without lock support); there two hosts could still write one folder.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from simforcing.errors import ConfigError

LOCK_FILE = ".lock"


class FolderBusy(ConfigError):
    """Another process holds the folder's lock. A config error (exit 2): choose another folder or wait."""


class FolderLock:
    """A held lock; ``release()`` (idempotent) drops it. Also a context manager."""

    def __init__(self, folder: Path, fd: int):
        self.folder, self._fd = folder, fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> "FolderLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:  # a forgotten lock is released with the object (and always with the process)
        try:
            self.release()
        except OSError:
            pass


def holder(folder: str | Path) -> dict:
    """What the last holder wrote into ``FOLDER/.lock`` ({} when unreadable); informative only."""
    try:
        return json.loads((Path(folder) / LOCK_FILE).read_text())
    except (OSError, ValueError):
        return {}


def is_locked(folder: str | Path) -> bool:
    """True while some process holds the folder's lock (probes without taking it for long)."""
    path = Path(folder) / LOCK_FILE
    if not path.exists():
        return False
    try:
        probe = lock_folder(folder, "probe", create=False)
    except FolderBusy:
        return True
    probe.release()
    return False


def lock_folder(folder: str | Path, what: str = "training run", create: bool = True) -> FolderLock:
    """Take the exclusive lock of ``folder`` (created with its parents when ``create``) without waiting.

    Raises :class:`FolderBusy` naming the holder's pid, host and start time when another process holds it.
    """
    folder = Path(folder)
    if create:
        folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        h = holder(folder)
        who = (f"process {h.get('pid')} on {h.get('host')} ({h.get('what')}, since "
               f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(h['time']))})" if "time" in h
               else "another process")
        raise FolderBusy(f"--out: {folder} is being written by {who}; one writer per folder — wait for it to end "
                         "or choose another folder") from None
    if what != "probe":
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "what": what, "time": time.time()})
        try:
            os.ftruncate(fd, 0)
            os.write(fd, (record + "\n").encode())
        except OSError:
            pass  # the description is informative; the lock is what counts (e.g. a full disk)
    return FolderLock(folder, fd)
