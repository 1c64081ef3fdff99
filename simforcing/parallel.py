"""Multi-process training: the only module that knows about ranks.

    torchrun --nproc_per_node=8 -m simforcing train --method simforcing --teacher RUN1 --data DIR --out RUN2

- :func:`init_distributed` reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) and starts
  a process group: NCCL on CUDA, gloo on CPU. The group lives as long as the process (several runs in one process
  reuse it; it is destroyed at exit). Without those variables (or WORLD_SIZE=1) it does nothing and every helper
  below degrades to the single-process case.
- :func:`parallelize` applies FSDP2 ``fully_shard`` per entry of ``model.layers``, then on the root, with
  ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`` on CUDA with ``train.mixed_precision == "bf16"``
  (fp32 otherwise, e.g. on CPU). The frozen teacher is sharded the same way and has no optimizer. Activation
  checkpointing is the model's own (``WorldModel.gradient_checkpointing``, per layer, from
  ``cfg.model.gradient_checkpointing``): the same in one process and under FSDP, where each checkpointed layer is
  gathered again for its recomputation in backward.
- :func:`shard_from_rank0`: only rank 0 builds (and loads) the full model on CPU; the other ranks build it on the
  meta device, and after sharding rank 0's weights are broadcast into every shard — one full copy in a node's host
  memory instead of one per rank (at 5B: 20 GB fp32 once, not 8 times).
- :class:`GlobalBatchSampler`: one permutation of all windows per epoch, from a seed that depends only on
  (train.seed, epoch); global batch ``b`` is ``perm[b·G:(b+1)·G]`` with ``G = batch_size × world_size`` and rank
  ``r`` takes the contiguous slice ``[r·B:(r+1)·B]`` of it, so the global batch equals the batch a single process
  with batch size G would see. The last global batch of an epoch is filled up by wrapping around to the start of the
  permutation (every step has the same shape). Starting at batch ``k`` (resume) skips the first ``k`` batches
  without loading them.
- Sharded checkpoints (world size > 1): model and optimizer through torch.distributed.checkpoint (DCP), one shard
  per rank; single-process runs keep the safetensors format of simforcing.runs.checkpoint. Either resumes at any world
  size: :func:`load_sharded` (DCP reshards; without a process group it reads every shard) and
  :func:`load_full_into_sharded` (a single-process checkpoint into a sharded run).

Gradients are averaged over ranks by FSDP (each rank's loss is its local mean; equal local batch sizes make the
average the global mean). Logged values are averaged over ranks with :func:`all_reduce_mean`.

FSDP, DCP and the device mesh are imported inside the functions that use them: together they take about half a second
to import, and every command that trains or loads a model imports this module, most of them in one process.
"""

from __future__ import annotations

import atexit
import datetime
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist

from simforcing.config import Config
from simforcing.utils import resolve_device


@dataclass
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    mesh: Any  # DeviceMesh or None (single process)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def init_distributed(device: str = "auto") -> DistInfo:
    """Start the process group from torchrun's environment; single-process DistInfo when not launched that way.

    ``device``: cfg.train.device ("auto", "cpu", "cuda"). CUDA ranks use GPU ``LOCAL_RANK``.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    dev = resolve_device(device)
    if world <= 1:
        return DistInfo(0, 1, 0, dev, None)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if dev.type == "cuda":
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    if not dist.is_initialized():  # one process group per process, reused by later runs, destroyed at exit
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
        atexit.register(cleanup)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(dev.type, (dist.get_world_size(),))
    return DistInfo(dist.get_rank(), dist.get_world_size(), local, dev, mesh)


EXIT_BARRIER_S = 120  # how long a rank waits at exit for the others before tearing its process group down alone


def cleanup() -> None:
    """Tear the process group down at exit, after every rank has reached it: a rank that destroyed its group while
    a peer's gloo threads still talked to it could abort that peer ("terminate called without an active exception",
    SIGABRT, after a run that had finished and written its checkpoint). The barrier is bounded (gloo's monitored
    barrier, ``EXIT_BARRIER_S``): a peer that died does not hold the others at exit."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    try:
        if dist.get_world_size() > 1:
            if dist.get_backend() == "gloo":
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=EXIT_BARRIER_S))
            else:
                dist.barrier()
    except RuntimeError:  # a peer already gone (DistBackendError is one): tear down what is left
        pass
    dist.destroy_process_group()


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank (identity in a single process)."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_reduce_mean(values: dict[str, float], device: torch.device | str = "cpu") -> dict[str, float]:
    """Mean over ranks of each value (same keys on every rank)."""
    if not is_distributed() or not values:
        return dict(values)
    keys = sorted(values)
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    t /= dist.get_world_size()
    return {k: float(v) for k, v in zip(keys, t.tolist())}


def any_rank(flag: bool, device: torch.device | str = "cpu") -> bool:
    """True on every rank when ``flag`` is True on at least one (e.g. a stop request)."""
    if not is_distributed():
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


# ----------------------------------------------------------------------------------------------------------------------
# Data split across ranks
# ----------------------------------------------------------------------------------------------------------------------


class GlobalBatchSampler:
    """Yields this rank's index lists, batch ``start`` .. end of the epoch (see module docstring).

    n: windows in the dataset; batch_size: per rank; order_seed: seeds this epoch's permutation.
    """

    def __init__(self, n: int, batch_size: int, order_seed: int, rank: int = 0, world_size: int = 1,
                 start: int = 0):
        if n < 1:
            raise ValueError("GlobalBatchSampler: the dataset is empty (0 windows)")
        self.n, self.batch_size, self.rank, self.world_size = n, batch_size, rank, world_size
        self.start = start
        self.global_batch = batch_size * world_size
        self.num_batches = -(-n // self.global_batch)  # ceil
        gen = torch.Generator().manual_seed(order_seed)
        self.perm = torch.randperm(n, generator=gen).tolist()

    def global_indices(self, b: int) -> list[int]:
        """Global batch ``b`` (G indices, wrapping around the permutation)."""
        g = self.global_batch
        return [self.perm[(b * g + i) % self.n] for i in range(g)]

    def __iter__(self) -> Iterator[list[int]]:
        lo = self.rank * self.batch_size
        for b in range(self.start, self.num_batches):
            yield self.global_indices(b)[lo: lo + self.batch_size]

    def __len__(self) -> int:
        return max(0, self.num_batches - self.start)


# ----------------------------------------------------------------------------------------------------------------------
# FSDP2
# ----------------------------------------------------------------------------------------------------------------------


def mixed_precision_dtype(cfg: Config, device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" and cfg.train.mixed_precision == "bf16" else torch.float32


def parallelize(model: torch.nn.Module, cfg: Config, mesh: Any) -> torch.nn.Module:
    """fully_shard per ``model.layers`` entry, then the root. Returns the same (now sharded) module. ``mesh`` None
    (single process) returns the model unchanged. Activation checkpointing stays the model's own (module docstring)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if mesh is None:
        return model
    layers = getattr(model, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise TypeError(f"parallelize: expected model.layers to be an nn.ModuleList, got {type(layers).__name__}")
    dtype = mixed_precision_dtype(cfg, torch.device(mesh.device_type))
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def shard_from_rank0(model: torch.nn.Module, cfg: Config, mesh: Any, device: torch.device,
                     forward_methods: tuple = ()) -> torch.nn.Module:
    """:func:`parallelize` a model that only rank 0 holds in full (its weights on CPU, initialised or loaded); every
    other rank passes the same architecture built on the meta device (``build_world_model(cfg, meta=True)``), so a
    node keeps one full copy in host memory instead of one per rank. After sharding, rank 0's full state is
    broadcast into every rank's shards. ``mesh`` None: the model moved to ``device``, unchanged otherwise.
    ``forward_methods``: names of other methods the training step calls instead of ``forward`` (FSDP2 then runs its
    gather/reshard hooks around them as around ``forward``)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.fsdp import register_fsdp_forward_method

    if mesh is None:
        return model.to(device)
    meta = any(t.is_meta for t in model.state_dict().values())
    if meta == (rank() == 0):
        raise ValueError(f"shard_from_rank0: rank {rank()} passed a model {'on' if meta else 'off'} the meta device; "
                         "expected the full model on rank 0 and meta-device models elsewhere")
    full = {k: v.detach() for k, v in model.state_dict().items()} if rank() == 0 else {}
    model = parallelize(model, cfg, mesh)
    if meta:
        model.to_empty(device=device)  # allocated, uninitialised: every value comes from rank 0 below
    else:
        model.to(device)
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    for name in forward_methods:  # methods called instead of forward (the policy's) gather the root's shards too
        register_fsdp_forward_method(model, name)
    return model


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float) -> float:
    """Clip the global gradient norm (DTensor-aware); returns the norm before clipping (may be inf/NaN)."""
    params = [p for p in params if p.grad is not None]
    if not params:
        return 0.0
    limit = max_norm if max_norm > 0 else float("inf")
    norm = torch.nn.utils.clip_grad_norm_(params, limit, error_if_nonfinite=False)
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    return float(norm)


# ----------------------------------------------------------------------------------------------------------------------
# Sharded state (DCP)
# ----------------------------------------------------------------------------------------------------------------------


def save_sharded(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    """Every rank writes its shard of the model (and optimizer) under ``path`` (a folder)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer if optimizer is not None else [])
    state = {"model": model_sd}
    if optimizer is not None:
        state["optim"] = optim_sd
    dcp.save(state, checkpoint_id=str(path))


def load_sharded(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    """Every rank reads its shard of the model (and optimizer) from ``path`` (resharding when the world changed)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer if optimizer is not None else [])
    state = {"model": model_sd}
    if optimizer is not None:
        state["optim"] = optim_sd
    # partial: parameters that never received a gradient (e.g. the last layer's action-token outputs, which nothing
    # reads) have no optimizer state in the checkpoint; their freshly initialised state stays unused by AdamW
    with warnings.catch_warnings():  # one process reading a multi-process checkpoint: "assuming ... single process"
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state, checkpoint_id=str(path), planner=DefaultLoadPlanner(allow_partial_load=True),
                 no_dist=not is_distributed())
    if optimizer is not None:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    else:
        set_state_dict(model, [], model_state_dict=state["model"], optim_state_dict={})


def load_full_into_sharded(model: torch.nn.Module, optimizer: torch.optim.Optimizer, model_state: dict,
                           optim_state: dict) -> None:
    """A single-process checkpoint into a sharded run: ``model_state`` the full weights, ``optim_state`` a plain
    ``optimizer.state_dict()`` (parameters by index). The indices are mapped to parameter names through this run's
    optimizer, built by the same ``train.build_optimizer`` (same groups, same order), then both are sharded."""
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict,
                                                         set_model_state_dict, set_optimizer_state_dict)

    names = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))
    fqns = [f for group in names["param_groups"] for f in group["params"]]
    ours = [p for group in optimizer.param_groups for p in group["params"]]
    theirs = [i for group in optim_state["param_groups"] for i in group["params"]]
    if len(theirs) != len(fqns) or len(ours) != len(fqns):
        raise ValueError(f"optimizer state: the checkpoint holds {len(theirs)} parameters, this run's optimizer "
                         f"{len(fqns)}; was the model or train.weight_decay grouping changed?")
    index = dict(zip(theirs, fqns))
    by_name = {"state": {index[i]: s for i, s in optim_state["state"].items()},
               "param_groups": [{**g, "params": [index[i] for i in g["params"]]} for g in optim_state["param_groups"]]}
    set_model_state_dict(model, model_state, options=StateDictOptions(full_state_dict=True))
    # not strict: parameters that never received a gradient (e.g. P_j in stage 1) have no optimizer state, as in a
    # single process
    set_optimizer_state_dict(model, optimizer, by_name, options=StateDictOptions(full_state_dict=True, strict=False))


def load_sharded_model_offline(path: str | Path, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A full (unsharded) state dict for ``model`` read from a DCP folder in a single process (sampler, evaluator,
    or a sharded teacher run loaded by one process)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    state = {"model": {k: v.detach().clone() for k, v in model.state_dict().items()}}
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state, checkpoint_id=str(path), planner=DefaultLoadPlanner(allow_partial_load=True), no_dist=True)
    return state["model"]
