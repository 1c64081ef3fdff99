"""The errors a command reports by name (no traceback) and the exit codes, in one place.

- ``ConfigError`` (exit 2): a config value or a command-line argument is unknown, ill-typed or inconsistent; an
  output that is already there (``FileExistsError``) is reported the same way.
- ``DataError`` (exit 1): a dataset file is missing or malformed; the message names the episode, file and field.
- ``CheckpointError`` (exit 1): a checkpoint is missing, damaged or could not be written; the message names the file.
- ``OutputError`` (exit 1): an output file could not be written (disk full, permission, read-only file system); the
  message names the file and the operating system's cause. Any other ``OSError`` reaching the command line is
  reported the same way (``I/O error``), without a traceback.

Training adds two outcomes that are results, not errors: diverged (3) and stopped by a signal (75). Ctrl-C anywhere
else ends a command with 130 and one line saying how to continue. A command that
needs a CUDA device and finds none (``bench --gpu``) says so and exits with 69 (``EX_UNAVAILABLE`` of sysexits).
The policy itself (which message, which code) lives in ``simforcing.cli``; this module imports nothing heavy so the
command line can name the classes before any subcommand runs.
"""

from __future__ import annotations

from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_DIVERGED, EXIT_STOPPED = 0, 1, 2, 3, 75
EXIT_NO_DEVICE = 69
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), the shell's convention


class ConfigError(ValueError):
    """A configuration value is unknown, ill-typed or inconsistent. The message names the field."""


class DataError(ValueError):
    """A dataset file is missing or malformed. The message names the episode, the file and the field."""

    def __init__(self, message: str, episode: str | None = None, path: str | Path | None = None,
                 kind: str = "invalid"):
        self.episode, self.path, self.kind = episode, (str(path) if path is not None else None), kind
        where = []
        if episode is not None:
            where.append(f"episode {episode}")
        if path is not None:
            where.append(str(path))
        super().__init__(f"{': '.join(where)}: {message}" if where else message)


class CheckpointError(RuntimeError):
    """A checkpoint is missing, damaged or could not be written. ``path`` names the file or folder."""

    def __init__(self, message: str, path: str | Path | None = None):
        self.path = str(path) if path is not None else None
        super().__init__(f"{path}: {message}" if path is not None else message)


class OutputError(RuntimeError):
    """Writing an output file failed (disk full, no permission, ...). ``path`` names the file; ``cause`` is the
    operating system's error (kept as ``__cause__`` too)."""

    def __init__(self, message: str, path: str | Path | None = None, cause: BaseException | None = None):
        self.path, self.cause = (str(path) if path is not None else None), cause
        super().__init__(f"{path}: {message}" if path is not None else message)


def os_cause(e: BaseException) -> str:
    """The operating system's words for an OSError ('No space left on device (errno 28)'), else str(e)."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror} (errno {e.errno})"
    return f"{type(e).__name__}: {e}"
