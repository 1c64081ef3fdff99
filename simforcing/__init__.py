"""SimForcing: real-domain robot video world models distilled from a frozen simulation world model."""

__version__ = "0.1.0"

import importlib.abc
import importlib.util
import sys


class _TorchvisionFirst(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """On the first import of torchvision in this process (by transformers, diffusers or SAM3), make it importable
    before it runs: where its compiled ops do not load beside this torch (PyPI's CUDA torchvision beside the CPU
    wheel), ``torchvision_ops`` provides nms and roi_align in plain PyTorch. Nothing is imported until then, so a
    command that never touches torchvision does not pay for it (nor for torch, at ``import simforcing``)."""

    def find_spec(self, name, path=None, target=None):
        if name != "torchvision":
            return None
        sys.meta_path.remove(self)  # once; the imports below go through the usual finders
        from simforcing.torchvision_ops import provide_missing_ops

        provide_missing_ops()  # imports torchvision (again, once its missing ops exist)
        module = sys.modules.get("torchvision")
        if module is None or module.__spec__ is None:
            return None
        self.module = module
        spec = importlib.util.spec_from_loader(name, self, origin=module.__spec__.origin, is_package=True)
        spec.submodule_search_locations = module.__spec__.submodule_search_locations
        return spec

    def create_module(self, spec):
        return self.module  # the package provide_missing_ops imported

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
