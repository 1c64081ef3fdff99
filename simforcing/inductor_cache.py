"""Inductor's cache folder (``TORCHINDUCTOR_CACHE_DIR``), checked before torch's compiler is imported.

torch creates that folder when ``torch._dynamo`` is imported — which diffusers does at its import, so in every command
that builds a network — and raises there when it cannot (the variable names a file, or a folder below a file): a
traceback before any work, whatever ``train.compile`` / ``sample.compile`` say. :func:`guard`, which the
``simforcing`` command calls before it imports a command's module, checks the folder first. When it is unusable:

- it records why in the environment (``SIMFORCING_INDUCTOR_CACHE_PROBLEM``, inherited by the processes the command
  starts) and points ``TORCHINDUCTOR_CACHE_DIR`` at a fresh private folder of this process, removed at its exit, so
  that torch imports; a command that compiles nothing runs as it would with a usable folder;
- a compilation asked for (``training.compiled.CompiledModels``) is given up before it starts with the one-line
  warning ``simforcing: train.compile: compilation failed (TORCHINDUCTOR_CACHE_DIR=...: ...); continuing without it``
  and the run goes on eagerly — rather than compiling into a temporary folder the user did not ask for.

A folder that exists but cannot be written is the same (torch would import, then fail at the first compilation).
Imports nothing beyond the standard library (``import simforcing.cli`` stays light).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import MutableMapping, Optional

ENV = "TORCHINDUCTOR_CACHE_DIR"
PROBLEM_ENV = "SIMFORCING_INDUCTOR_CACHE_PROBLEM"
FIX = f"point {ENV} at a writable folder or unset it"


def unusable(path: str) -> Optional[str]:
    """Why inductor cannot keep its cache in ``path`` (one line: the variable, the path, the reason, the fix), or
    None. Creates the folder when it is missing, as torch would."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        return f"{ENV}={path} is a file, not a folder; {FIX}"
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"{ENV}={path}: cannot create the folder ({e.strerror or e}); {FIX}"
    if not os.access(p, os.W_OK | os.X_OK):
        return f"{ENV}={path}: the folder is not writable; {FIX}"
    return None


def problem(environ: MutableMapping[str, str] = os.environ) -> Optional[str]:
    """Why compilation cannot use the cache folder this process was given (recorded by :func:`guard`, here or in the
    process that started this one, or found now), or None."""
    if environ.get(PROBLEM_ENV):
        return environ[PROBLEM_ENV]
    path = environ.get(ENV)
    return unusable(path) if path else None


def guard(environ: MutableMapping[str, str] = os.environ) -> Optional[str]:
    """Make ``import torch._dynamo`` safe: when ``TORCHINDUCTOR_CACHE_DIR`` is unusable, record why
    (``PROBLEM_ENV``) and point the variable at a private folder removed at exit. Returns the problem (None: the
    folder is usable or the variable unset, nothing changed)."""
    why = problem(environ)
    if why is None:
        return None
    environ[PROBLEM_ENV] = why
    path = environ.get(ENV)
    if path and unusable(path) is not None:  # (a process started by a guarded one inherits a usable folder)
        private = tempfile.mkdtemp(prefix="simforcing-inductor-")
        atexit.register(shutil.rmtree, private, True)
        environ[ENV] = private
    return why
