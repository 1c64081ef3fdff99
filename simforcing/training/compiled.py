"""Compiled network calls of a training step (``train.compile``), with the fallback to eager.

    compiled = CompiledModels([student, teacher], "train.compile")     # each module's calls through torch.compile
    result = compiled.run(attempt)       # attempt() once; a compilation failure: one named warning, eager, again

``torch.compile`` (inductor, static shapes) fuses the elementwise work of the blocks — norms, adaLN modulation,
RoPE, gated residuals, GELU and its backward — into generated kernels and removes their dispatch; the matrix products
and attention stay library calls. ``nn.Module.compile`` compiles the module's own calls in place: parameter names,
``state_dict`` and checkpoints are those of the eager module, so compile on or off never changes a run's files and a
run may be resumed either way. A step under compile computes the same function to float rounding (inductor fuses and
reorders floating-point operations; ``tests/test_compile.py`` measures the gap), draws the same random numbers from
the same generator (none is drawn inside the network) and, on a fixed thread count, repeats bit for bit from run to
run, so an interrupted and resumed run still logs exactly the losses of an uninterrupted one.

Compilation happens at the first call of each new graph (forward, and its backward at the first backward). Any
exception raised by a compiled attempt is retried once eagerly (the step re-seeds its generator and clears the
gradients first): if the eager attempt succeeds, compilation was at fault — one line ``simforcing: train.compile: ...
failed (...); continuing without it`` on stderr, the modules' compiled calls removed for good — otherwise the eager
attempt's exception is the step's. Never a compiler traceback.

Cost and gain (docs/BENCHMARK.md, "Compiled training steps"): at the demo's sizes on a 2-core CPU a compiled step is
~1.2-1.35x faster, but compiling it from a cold cache takes minutes there, more than the demo's 2,000 stage-1 steps
save; so the field is off by default and pays for long runs, or where the compiled graphs are cached already
(inductor's cache, ``TORCHINDUCTOR_CACHE_DIR``, keeps them across processes: a second run of the same shapes compiles
in seconds).
"""

from __future__ import annotations

import sys
from typing import Callable, Iterable, Optional, TypeVar

import torch

T = TypeVar("T")

# what train.compile asks of torch.compile: inductor's default mode (on a CPU "reduce-overhead" means nothing more:
# its CUDA graphs need a GPU), shapes specialised (a training run's batches all have one shape)
COMPILE_OPTIONS = {"backend": "inductor", "mode": None, "dynamic": False}


class CompiledModels:
    """The modules' calls compiled (``nn.Module.compile``) while ``active``; ``run`` falls back to eager once."""

    def __init__(self, modules: Iterable[Optional[torch.nn.Module]], field: str, enabled: bool = True,
                 methods: tuple[str, ...] = (), passthrough: tuple[type, ...] = ()):
        """``methods``: other entry points of the modules compiled besides their calls (the policy's
        ``policy_forward``); ``passthrough``: exceptions that are results, not failures (a non-finite loss), raised
        as they are."""
        self.modules = [m for m in modules if m is not None]
        self.field, self.methods, self.passthrough = field, methods, passthrough
        self.active = False
        self.failure: Optional[str] = None  # why compilation was given up (the warning's text)
        self._saved: list = []  # (module, method name, its instance attribute before: None when it had none)
        if enabled:
            try:
                for m in self.modules:
                    m.compile(**COMPILE_OPTIONS)
                    for name in methods:
                        if hasattr(m, name):
                            self._saved.append((m, name, m.__dict__.get(name)))
                            setattr(m, name, torch.compile(getattr(m, name), **COMPILE_OPTIONS))
                self.active = True
            except Exception as e:  # torch.compile itself refused (e.g. an unsupported Python): eager from the start
                self._give_up(e)

    def run(self, attempt: Callable[[], T], reset: Callable[[], None] = lambda: None) -> T:
        """``attempt()``; when compiled and it raises, ``reset()`` then ``attempt()`` eagerly: its result (the
        compiled path given up for good, with one warning) or its exception."""
        if not self.active:
            return attempt()
        try:
            return attempt()
        except self.passthrough:
            raise
        except Exception as compiled_error:
            self._uncompile()
            reset()
            out = attempt()  # eager: a genuine error raises here, as it would without compile
            self._give_up(compiled_error)
            return out

    def _uncompile(self) -> None:
        for m in self.modules:
            m._compiled_call_impl = None  # what nn.Module.compile set: the module's calls are eager again
        for m, name, before in reversed(self._saved):
            if before is None:
                m.__dict__.pop(name, None)
            else:
                setattr(m, name, before)
        self._saved, self.active = [], False

    def _give_up(self, e: BaseException) -> None:
        self._uncompile()
        self.failure = _summary(e)
        print(f"simforcing: {self.field}: compilation failed ({self.failure}); continuing without it",
              file=sys.stderr, flush=True)


def _summary(e: BaseException) -> str:
    """One line: the exception's type and first line, and the compiler's own error inside it (torch wraps it:
    ``BackendCompilerFailed: backend='inductor' raised:`` then the cause)."""
    inner = getattr(e, "inner_exception", None) or e.__cause__
    first = (str(e).strip().splitlines() or [""])[0]
    text = f"{type(e).__name__}: {first}"
    if inner is not None and inner is not e:
        text += f" {type(inner).__name__}: {(str(inner).strip().splitlines() or [''])[0]}"
    return text[:400]
