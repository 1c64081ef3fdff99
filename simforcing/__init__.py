"""SimForcing: real-domain robot video world models distilled from a frozen simulation world model."""

__version__ = "0.1.0"

# Before transformers or diffusers import torchvision: where its compiled ops do not load beside this torch (PyPI's
# CUDA torchvision beside the CPU wheel), provide nms and roi_align in plain PyTorch (see the module's docstring).
from simforcing.torchvision_ops import provide_missing_ops  # noqa: E402

provide_missing_ops()
