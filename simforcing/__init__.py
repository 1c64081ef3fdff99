"""SimForcing: real-domain robot video world models distilled from a frozen simulation world model."""

__version__ = "0.1.0"

import importlib.abc
import importlib.machinery
import importlib.util
import sys


class _TorchvisionFirst(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """On the first import of torchvision in this process (by transformers, diffusers or SAM3), make it importable
    before it runs: where its compiled ops do not load beside this torch (PyPI's CUDA torchvision beside the CPU
    wheel), ``torchvision_ops`` provides nms and roi_align in plain PyTorch. Nothing is imported until then, so a
    command that never touches torchvision does not pay for it (nor for torch, at ``import simforcing``).

    Asking whether torchvision is installed (``importlib.util.find_spec``, as diffusers and transformers do at
    import) gets torchvision's own spec and imports nothing: the work happens when the module is created, in a real
    import (it costs 1-2 s of torch._dynamo through torchvision.ops, in every process that imports diffusers)."""

    def find_spec(self, name, path=None, target=None):
        if name != "torchvision":
            return None
        found = importlib.machinery.PathFinder.find_spec(name, path)
        if found is None:
            return None
        spec = importlib.util.spec_from_loader(name, self, origin=found.origin, is_package=True)
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


if "torchvision" not in sys.modules:
    sys.meta_path.insert(0, _TorchvisionFirst())


def __getattr__(name: str):
    """``from simforcing import WorldModelPipeline`` (and the other names of ``simforcing.api``) without importing
    torch at ``import simforcing``."""
    if name in ("WorldModelPipeline", "Prediction", "Episode", "read_episode", "load_policy", "evaluate_policies",
                "evaluate", "rollout_drift"):
        from simforcing import api

        return getattr(api, name)
    raise AttributeError(f"module 'simforcing' has no attribute {name!r}")
