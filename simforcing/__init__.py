"""SimForcing: real-domain robot video world models distilled from a frozen simulation world model.

``import simforcing`` imports neither torch nor any other library, and changes no other library's import. Where
torchvision's compiled ops do not load beside torch, the environment's startup file (``make install``:
``simforcing.torchvision_startup``) makes torchvision importable in every process of it.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``from simforcing import WorldModelPipeline`` (and the other names of ``simforcing.api``) without importing
    torch at ``import simforcing``."""
    if name in ("WorldModelPipeline", "Prediction", "Episode", "read_episode", "load_policy", "evaluate_policies",
                "evaluate", "rollout_drift", "estimate_success"):
        from simforcing import api

        return getattr(api, name)
    raise AttributeError(f"module 'simforcing' has no attribute {name!r}")
