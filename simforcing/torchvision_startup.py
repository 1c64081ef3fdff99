"""The environment's startup file for torchvision: where its compiled ops do not load beside torch, every process of
the environment still imports torchvision (and so diffusers and transformers) — without importing simforcing first,
and without ``import simforcing`` changing any other library's import.

    python -m simforcing.torchvision_startup [--check]     # `make install`: write or remove the startup file

PyPI's torchvision for Linux x86_64 is a CUDA build; beside the CPU wheel of torch its compiled ops do not load and
``import torchvision`` stops with "operator torchvision::nms does not exist" (``torchvision_ops`` explains why). Run
once per environment, this module asks a fresh interpreter whether ``import torchvision`` works:

- it does (a CUDA torch with its torchvision, or no torchvision at all): nothing is needed, and a startup file left
  from an earlier install is removed;
- it fails that way: ``simforcing-torchvision.pth`` is written into the environment's site-packages. Its one line
  loads this file by its path (stdlib only: no torch, no simforcing) and puts :class:`TorchvisionFirst` in
  ``sys.meta_path``, which does nothing until the process first imports torchvision; then
  ``torchvision_ops.provide_missing_ops`` defines nms and roi_align in plain PyTorch and imports it.
- it fails another way: the error is shown and the install stops (exit 1).

``--check`` only reports (exit 0: the environment imports torchvision, with or without the startup file; 1: not).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys

# Every process of the environment loads this file: its imports are what the interpreter has loaded anyway (os, sys)
# and importlib.machinery; what only `make install` runs imports subprocess and sysconfig where it runs.

STARTUP_FILE = "simforcing-torchvision.pth"
_MODULE = "simforcing_torchvision_startup"  # this file's name when the startup file loads it
_MISSING_OP = "operator torchvision::nms does not exist"


class TorchvisionFirst:
    """On the first import of torchvision in this process (by transformers, diffusers, SAM3 or a user's script),
    make it importable before it runs (``torchvision_ops.provide_missing_ops``), then leave ``sys.meta_path``. A
    meta-path finder and its module's loader (the protocol, without importlib.abc: it imports pathlib and more).

    Asking whether torchvision is installed (``importlib.util.find_spec``, as diffusers and transformers do at
    import) gets torchvision's own spec and imports nothing: the work happens when the module is created, in a real
    import."""

    def find_spec(self, name, path=None, target=None):
        if name != "torchvision":
            return None
        found = importlib.machinery.PathFinder.find_spec(name, path)
        if found is None:
            return None
        spec = importlib.machinery.ModuleSpec(name, self, origin=found.origin, is_package=True)
        spec.submodule_search_locations = found.submodule_search_locations
        return spec

    def create_module(self, spec):
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once; the import below goes through the usual finders
        from simforcing.torchvision_ops import provide_missing_ops

        provide_missing_ops()  # imports torchvision (again, once its missing ops exist)
        module = sys.modules.get("torchvision")
        if module is None:
            raise ImportError("torchvision: installed, but its import left no module")
        return module  # the package provide_missing_ops imported

    def exec_module(self, module):
        pass


def install() -> None:
    """What the startup file calls in every process: the finder, unless torchvision is already imported or a finder
    is in place (site may read a startup file twice, each time loading this file as a new module)."""
    placed = any(type(f).__name__ == TorchvisionFirst.__name__ for f in sys.meta_path)
    if "torchvision" not in sys.modules and not placed:
        sys.meta_path.insert(0, TorchvisionFirst())


def startup_line(path: str = __file__) -> str:
    """The startup file's line: load ``path`` (this file; its cached bytecode) as a module and call its
    :func:`install`; a line that does nothing once the file is gone."""
    return (f"import importlib.machinery as im, os, types; p = {os.path.abspath(path)!r}; "
            f"m = os.path.isfile(p) and types.ModuleType({_MODULE!r}); m and setattr(m, '__file__', p); "
            "m and im.SourceFileLoader(m.__name__, p).exec_module(m); m and m.install()\n")


def torchvision_import_error(python: str = sys.executable) -> str | None:
    """The last line of the error of ``import torchvision`` in a fresh interpreter of ``python`` (None: it imports,
    or torchvision is not installed)."""
    import subprocess

    code = ("import importlib.util, sys; sys.exit(0) if importlib.util.find_spec('torchvision') is None else None; "
            "import torchvision")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=600)
    return None if out.returncode == 0 else (out.stderr.strip().splitlines() or ["(no message)"])[-1]


def startup_file() -> str:
    """Where this environment's startup file goes: its site-packages (where pip installed torch)."""
    import sysconfig

    return os.path.join(sysconfig.get_paths()["purelib"], STARTUP_FILE)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    target = startup_file()
    if args == ["--check"]:
        error = torchvision_import_error()
        print(f"import torchvision: {'works' if error is None else error}"
              f" ({target if os.path.exists(target) else 'no startup file'})")
        return 0 if error is None else 1
    if args:
        print(f"usage: python -m simforcing.torchvision_startup [--check]; got {' '.join(args)}", file=sys.stderr)
        return 2
    _remove(target)  # the question is whether this environment needs it
    error = torchvision_import_error()
    if error is None:
        print(f"torchvision imports as installed (or is not installed): no startup file ({target})")
        return 0
    if _MISSING_OP not in error:
        print(f"import torchvision fails: {error}; expected it to work or to miss only its compiled ops "
              "(a CPU torch beside PyPI's CUDA torchvision): install the torchvision built for this torch",
              file=sys.stderr)
        return 1
    with open(target, "w") as f:
        f.write(startup_line())
    error = torchvision_import_error()
    if error is not None:
        _remove(target)
        print(f"import torchvision fails even with {STARTUP_FILE}: {error}", file=sys.stderr)
        return 1
    print(f"torchvision's compiled ops do not load beside this torch: wrote {target} (nms and roi_align in plain "
          "PyTorch, simforcing/torchvision_ops.py)")
    return 0


def _remove(path: str) -> None:
    if os.path.exists(path):
        os.remove(path)


if __name__ == "__main__":
    sys.exit(main())
