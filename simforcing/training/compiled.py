"""Compiled network calls of a training step (``train.compile``) and of the sampler (``sample.compile``), with the
fallback to eager.

    compiled = CompiledModels([student, teacher], "train.compile", cfg.train.compile)   # the field's mode
    result = compiled.run(attempt)       # attempt() once; a compilation failure: one named warning, eager, again

Modes (``config.COMPILE_MODES``; a config's ``true`` is "module", ``false`` "off"):

- "module": each module's calls compiled whole (``nn.Module.compile``), as ``train.compile: true`` always did.
- "regional": each layer of ``model.layers`` (a ``MoTLayer``: the video block, the action block and P_j) compiled on
  its own. The layer's ``forward`` is replaced, while compilation is on, by an instance attribute (:class:`Region`)
  that calls one compiled function (:func:`region_call`) shared by every layer of every module: a graph per layer
  kind (the last layer's action block is K/V-only), grad mode, dtype and shape, compiled once and run by all 30
  layers of the 5B model — tens of seconds of compiling instead of minutes for the whole network. The stems, the
  heads, the rotary tables and the masks between the layers stay eager (a few operations per forward). With
  activation checkpointing (``model.gradient_checkpointing``) the checkpoint moves inside the compiled region
  (``torch.utils.checkpoint`` traced into it: the backward graph recomputes the layer) and the model's own per-layer
  checkpoint is switched off meanwhile, so each layer is checkpointed once, as without compile. Under FSDP2 the
  layers are compiled after ``fully_shard`` (the torchtitan pattern): FSDP2's hooks stay outside the compiled
  region and gather each layer's parameters around it as without compile.
- "graphs": "regional" with ``mode="reduce-overhead"``: inductor captures each compiled layer's kernels in a CUDA graph
  (CUDA graph trees, one private memory pool) and replays it as one launch, which removes the host's dispatch of
  every operation. What it takes here: static shapes (``dynamic=False``: each batch size gets its own graph, run
  once, recorded at its second call, replayed from the third); a new step marked (``torch.compiler.cudagraph_mark_step_begin``) at each :meth:`run`, i.e. each
  training step and each sampler call; no random numbers drawn inside the network (none is); the outputs of calls
  that need no backward (the frozen teacher, the sampler, the student's own rollout) copied out of the graphs' pool
  before the next layer runs — without a backward to wait for, each compiled call starts a new generation of the
  pool, which would overwrite the previous layer's output (pytorch/pytorch#152887), while a forward with gradients
  keeps its generation until its backward — and the checkpoint inside the region (a checkpoint around it would run forward graphs during the
  backward, which starts new generations and overwrites the gradients flowing between the layers). Refused under
  FSDP2 (a ConfigError naming the field: CUDA graphs replay fixed addresses and FSDP2 gathers each layer's parameters
  anew in every forward). Off CUDA it runs as "regional", with one line saying so.

Whatever the mode, parameter names, ``state_dict`` and checkpoints are those of the eager modules, so compile on or
off never changes a run's files and a run may be resumed either way. A compiled step computes the same function to
float rounding (inductor fuses and reorders floating-point operations; ``tests/test_compile.py`` measures the gap),
draws the same random numbers from the same generator and, on a fixed thread count, repeats bit for bit from run to
run, so an interrupted and resumed run logs exactly the losses of an uninterrupted one.

Compilation happens at the first call of each new graph (forward, and its backward at the first backward). Any
exception raised by a compiled attempt is retried once eagerly (the step re-seeds its generator and clears the
gradients first): if the eager attempt succeeds, compilation was at fault — one line ``simforcing: train.compile: ...
failed (...); continuing without it`` on stderr, the compiled calls removed for good — otherwise the eager attempt's
exception is the step's. Never a compiler traceback. An unusable inductor cache folder (``TORCHINDUCTOR_CACHE_DIR``,
``simforcing.inductor_cache``) gives up before compiling, with the same one line.

Cost and gain (docs/notebook/benchmark.md): at the demo's sizes on a 2-core CPU a compiled step is
~1.2-1.35x faster, but compiling it from a cold cache takes minutes there, more than the demo's 2,000 stage-1 steps
save; so the field is off by default and pays for long runs, or where the compiled graphs are cached already
(inductor's cache, ``TORCHINDUCTOR_CACHE_DIR``, keeps them across processes: a second run of the same shapes compiles
in seconds). On a GPU the host's dispatch is what "graphs" removes (``bench --gpu`` measures the three modes).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterable, Optional, TypeVar

import torch
from torch.utils._pytree import tree_leaves, tree_map_only
from torch.utils.checkpoint import checkpoint

import simforcing.inductor_cache as inductor_cache
from simforcing.config import ConfigError, compile_mode

T = TypeVar("T")

# what the fields ask of torch.compile: inductor's default mode, shapes specialised (a training run's batches all
# have one shape; the sampler's two, one sample and the CFG pair). "graphs" adds mode="reduce-overhead"
COMPILE_OPTIONS = {"backend": "inductor", "mode": None, "dynamic": False}
GRAPHS_MODE = "reduce-overhead"
# graphs dynamo keeps per compiled function before it runs it eagerly: the regions of every module share one function
# (kinds x grad modes x dtypes x shapes: ~8-16 in a training step, 4 more for the sampler), past torch's default of 8
RECOMPILE_LIMIT = 64
_MISSING = object()
_NOTES: set = set()  # the "graphs off CUDA" line, once per field and process


def region_call(layer: torch.nn.Module, checkpointed: bool, *args: Any, **kwargs: Any) -> Any:
    """One layer's forward — checkpointed (non-reentrant) when ``checkpointed`` and gradients are on. Compiled once
    (``torch.compile``) and called with every layer: the layer is an input, not a constant, so one graph serves all
    layers of one kind (their parameters are the graph's inputs)."""
    forward = type(layer).forward
    if checkpointed and torch.is_grad_enabled():
        return checkpoint(forward, layer, *args, use_reentrant=False, **kwargs)
    return forward(layer, *args, **kwargs)


class Region:
    """A layer's compiled forward (its instance attribute ``forward`` while regional compilation is on)."""

    def __init__(self, layer: torch.nn.Module, fn: Callable, checkpointed: bool, copy_out_of_graphs: bool):
        self.layer, self.fn, self.checkpointed, self.copy_out_of_graphs = layer, fn, checkpointed, copy_out_of_graphs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # a frozen layer (the teacher) is never checkpointed, gradients on or not: nothing of it is kept for a backward
        # (and a checkpoint in a graph without a backward is one torch cannot compile)
        checkpointed = self.checkpointed and any(p.requires_grad for p in self.layer.parameters())
        out = self.fn(self.layer, checkpointed, *args, **kwargs)
        # "graphs": a call whose outputs need no backward (no grad mode, or a frozen module) ran an inference graph,
        # whose outputs the next compiled call may overwrite: copied out of the graphs' pool (module docstring)
        if self.copy_out_of_graphs and not any(t.requires_grad for t in tree_leaves(out) if torch.is_tensor(t)):
            out = tree_map_only(torch.Tensor, torch.clone, out)
        return out


def _graphs_under_fsdp(field: str) -> str:
    return (f"{field}: 'graphs' (CUDA graphs) cannot run under FSDP2: its graphs replay fixed addresses and FSDP2 "
            f"gathers each layer's parameters anew in every forward; use {field}=regional (each layer compiled, no "
            "CUDA graphs) for a sharded run")


def check_sharded_run(field: str, setting: Any, world_size: int) -> None:
    """Before any work: a ConfigError when ``field`` asks for "graphs" in a run of ``world_size`` > 1 processes
    (torchrun: FSDP2 shards the models), as :class:`CompiledModels` would refuse it once they are built."""
    if world_size > 1 and compile_mode(setting, field) == "graphs":
        raise ConfigError(f"{_graphs_under_fsdp(field)} (world size {world_size})")


def _on_cuda(modules: list) -> bool:
    return all(p.device.type == "cuda" for m in modules for p in m.parameters())


def _sharded(modules: list) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(x, FSDPModule) for m in modules for x in m.modules())


class CompiledModels:
    """The modules' calls compiled (``mode``: see the module docstring) while ``active``; ``run`` falls back to eager
    once."""

    def __init__(self, modules: Iterable[Optional[torch.nn.Module]], field: str, mode: Any = True,
                 methods: tuple[str, ...] = (), passthrough: tuple[type, ...] = ()):
        """``mode``: the field's value (a mode of ``config.COMPILE_MODES`` or a boolean); ``methods``: other entry
        points compiled besides the modules' calls in "module" mode (the policy's ``policy_forward``; in the other
        modes every entry point runs the compiled layers); ``passthrough``: exceptions that are results, not failures
        (a non-finite loss), raised as they are. ConfigError (before anything is compiled) for "regional"/"graphs"
        on a module without ``layers`` and for "graphs" under FSDP2."""
        self.modules = [m for m in modules if m is not None]
        self.field, self.methods, self.passthrough = field, methods, passthrough
        self.requested = compile_mode(mode, field)
        self.mode = self._runnable_mode(self.requested)  # what runs ("graphs" off CUDA: "regional")
        self.active = False
        self.failure: Optional[str] = None  # why compilation was given up (the warning's text)
        self._saved: list = []  # (object, attribute, its instance attribute before: _MISSING when it had none)
        if self.mode == "off":
            return
        cache = inductor_cache.problem() if COMPILE_OPTIONS.get("backend") == "inductor" else None
        if cache is not None:  # inductor could not write what it compiles: eager from the start
            self._give_up(cache)
            return
        try:
            if self.mode == "module":
                self._compile_modules()
            else:
                self._compile_regions()
            self.active = True
        except Exception as e:  # torch.compile itself refused (e.g. an unsupported Python): eager from the start
            self._give_up(e)

    def _runnable_mode(self, mode: str) -> str:
        if mode in ("regional", "graphs"):
            for m in self.modules:
                if not isinstance(getattr(m, "layers", None), torch.nn.ModuleList):
                    raise ConfigError(f"{self.field}: {mode!r} compiles each layer of model.layers; a "
                                      f"{type(m).__name__} has none; use {self.field}=module")
        if mode != "graphs":
            return mode
        if _sharded(self.modules):
            raise ConfigError(_graphs_under_fsdp(self.field))
        if not _on_cuda(self.modules):
            device = next((p.device.type for m in self.modules for p in m.parameters()), "cpu")
            if self.field not in _NOTES:
                _NOTES.add(self.field)
                print(f"simforcing: {self.field}: 'graphs' captures CUDA graphs, which need a CUDA device; on "
                      f"{device} it runs as 'regional' (each layer compiled, no CUDA graphs)", file=sys.stderr,
                      flush=True)
            return "regional"
        return mode

    def _set(self, obj: Any, name: str, value: Any) -> None:
        self._saved.append((obj, name, obj.__dict__.get(name, _MISSING)))
        setattr(obj, name, value)

    def _compile_modules(self) -> None:
        for m in self.modules:
            self._saved.append((m, "_compiled_call_impl", m.__dict__.get("_compiled_call_impl")))
            m.compile(**COMPILE_OPTIONS)  # sets m._compiled_call_impl: the module's calls compiled
            for name in self.methods:
                if hasattr(m, name):
                    self._set(m, name, torch.compile(getattr(m, name), **COMPILE_OPTIONS))

    def _compile_regions(self) -> None:
        graphs = self.mode == "graphs"
        fn = torch.compile(region_call, **{**COMPILE_OPTIONS, **({"mode": GRAPHS_MODE} if graphs else {})})
        config = torch._dynamo.config
        limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # (its older name)
        setattr(config, limit, max(getattr(config, limit), RECOMPILE_LIMIT))
        for m in self.modules:
            checkpointed = bool(getattr(m, "gradient_checkpointing", False))
            if checkpointed:  # the region checkpoints each layer itself (inside the compiled graph)
                self._set(m, "gradient_checkpointing", False)
            for layer in m.layers:
                self._set(layer, "forward", Region(layer, fn, checkpointed, graphs))

    def run(self, attempt: Callable[[], T], reset: Callable[[], None] = lambda: None) -> T:
        """``attempt()``; when compiled and it raises, ``reset()`` then ``attempt()`` eagerly: its result (the
        compiled path given up for good, with one warning) or its exception."""
        if not self.active:
            return attempt()
        if self.mode == "graphs":  # a new step: the graphs' outputs of the last one may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        try:
            return attempt()
        except self.passthrough:
            raise
        except Exception as compiled_error:
            self.uncompile()
            reset()
            out = attempt()  # eager: a genuine error raises here, as it would without compile
            self._give_up(compiled_error)
            return out

    def uncompile(self) -> None:
        """Every attribute set by compilation back to what it was: the modules' calls are eager again."""
        for obj, name, before in reversed(self._saved):
            if before is _MISSING:
                obj.__dict__.pop(name, None)
            else:
                setattr(obj, name, before)
        self._saved, self.active = [], False

    def _give_up(self, why: BaseException | str) -> None:
        self.uncompile()
        self.failure = why if isinstance(why, str) else _summary(why)
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
