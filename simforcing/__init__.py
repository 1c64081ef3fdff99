"""SimForcing: real-domain robot video world models distilled from a frozen simulation world model.

``import simforcing`` imports neither torch nor any other library, and changes no other library's import. Where
torchvision's compiled ops do not load beside torch, the environment's startup file (``make install``:
``simforcing.torchvision_startup``) makes torchvision importable in every process of it.

``from simforcing import WorldModelPipeline`` (and the other names of ``_API``) imports ``simforcing.api`` on first
use. The package's own modules never import from here — they import the module they need — so nothing below the API
depends on it (tests/test_layout.py).
"""

from simforcing.version import __version__

# The Python API: the names of ``simforcing.api`` served here, imported on first use (PEP 562). Not ``evaluate``: the
# package ``simforcing.evaluate`` holds that name once imported (use ``simforcing.api.evaluate``).
_API = ("WorldModelPipeline", "Prediction", "Episode", "read_episode", "load_policy", "evaluate_policies",
        "rollout_drift", "estimate_success")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    """``from simforcing import WorldModelPipeline`` without importing torch at ``import simforcing``."""
    if name in _API:
        from simforcing import api

        return getattr(api, name)
    raise AttributeError(f"module 'simforcing' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
