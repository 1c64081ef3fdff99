"""simforcing's version: a module of its own, so that the modules that record it (run records, exports, the command
line) need nothing from the package root (whose ``__getattr__`` serves the Python API: tests/test_layout.py)."""

__version__ = "0.1.0"
