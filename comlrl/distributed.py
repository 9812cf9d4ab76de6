"""Data parallelism under ``accelerate launch`` / ``torchrun``: the collectives comlrl's trainers and
pettingllms' AT-GRPO, GRPO, SFT and pipeline share (the one facade of both packages; the update engine's
hooks are :mod:`comlrl.trainers.core.data_parallel`'s, the rank-0 checkpoint and ``save_model`` path is
:class:`~comlrl.trainers.core.trainer_core.TrainerCore`'s).

Launch a script that builds a trainer with::

    accelerate launch --multi_gpu --num_processes N --num_machines 1 --mixed_precision no \\
        --dynamo_backend no SCRIPT        # or: torchrun --standalone --nproc_per_node N SCRIPT

(on a machine without GPUs this gives N CPU processes over gloo; accelerate's ``--cpu`` silently runs one
process). :func:`init_distributed` joins the process group the launcher's environment describes; with one
process every function here is a no-op or the identity. The rules the trainers follow: each rank takes a
contiguous :func:`shard` of a batch's rows; the gradients and the row counts are summed over ranks before
an optimizer step (:func:`all_reduce_gradients`, :func:`all_reduce_sum`), so the step is the one-process
step over the same global rows; rank 0 alone writes files (ranks > 0 log into a :class:`RankMetricsLogger`)
while the others wait at a :func:`barrier`; a checkpoint records the world size (:func:`check_world_size`).

The public CoMLRL library's one-process helpers live here too: :class:`DistributedContext`,
:func:`local_context` and :func:`unwrap_model`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

__all__ = [
    "DistributedContext",
    "RankMetricsLogger",
    "all_reduce_gradients",
    "all_reduce_max",
    "all_reduce_sum",
    "barrier",
    "check_world_size",
    "gather_objects",
    "init_distributed",
    "is_main_process",
    "local_context",
    "rank",
    "shard",
    "unwrap_model",
    "world_size",
]

T = TypeVar("T")


def init_distributed() -> int:
    """Join the process group a launcher describes (``WORLD_SIZE`` > 1 in the environment) unless one is
    already initialised; returns the world size (1 outside a launcher).

    The group is torch's own (``env://``; gloo without CUDA, else NCCL with the device ``LOCAL_RANK``):
    ``accelerate.PartialState()`` on a machine without GPUs reports ``DistributedType.NO`` and one process
    under ``--multi_gpu`` while leaving a group with an undefined backend, so it cannot be asked.
    """
    import torch.distributed as dist

    if dist.is_available() and not dist.is_initialized() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group("nccl")
        else:
            dist.init_process_group("gloo")
    return world_size()


@dataclass(frozen=True)
class DistributedContext:
    """Where a process runs (the public library's record): whether it is the main process, and its device."""

    is_main: bool
    device: torch.device


def local_context(device: torch.device | None = None) -> DistributedContext:
    """The context of a single process: the main one, on ``device`` (default: CUDA when available, else
    the CPU)."""
    if device is None:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return DistributedContext(is_main=True, device=device)


def unwrap_model(model: Any) -> Any:
    """The model inside a data-parallel wrapper (its ``.module``), else ``model`` itself."""
    return getattr(model, "module", model)


def world_size() -> int:
    """The number of ranks (1 when no process group is initialised)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's rank (0 when no process group is initialised)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def is_main_process() -> bool:
    """Whether this process writes files (rank 0, or the only process)."""
    return rank() == 0


def barrier() -> None:
    """Wait for every rank (no-op with one process)."""
    if world_size() > 1:
        import torch.distributed as dist

        dist.barrier()


def _comm_device() -> torch.device:
    import torch.distributed as dist

    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def all_reduce_sum(values: Sequence[float]) -> list[float]:
    """Element-wise sums over ranks (float64; the input itself with one process)."""
    if world_size() == 1:
        return [float(v) for v in values]
    import torch.distributed as dist

    tensor = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_comm_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def all_reduce_max(value: int) -> int:
    """The largest ``value`` over ranks (e.g. the optimizer-step count every rank must make)."""
    if world_size() == 1:
        return int(value)
    import torch.distributed as dist

    tensor = torch.tensor([int(value)], dtype=torch.int64, device=_comm_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def gather_objects(obj: T) -> list[T]:
    """Every rank's ``obj`` (picklable), in rank order, on every rank (``[obj]`` with one process)."""
    if world_size() == 1:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def all_reduce_gradients(params: Iterable[torch.nn.Parameter]) -> None:
    """Sum the gradients of ``params`` over ranks, in place.

    A parameter without a gradient on a rank (no rows, or not reached) contributes zeros; one without a
    gradient on every rank keeps ``grad=None``, so AdamW leaves it alone as one process would.
    """
    if world_size() == 1:
        return
    import torch.distributed as dist

    params = list(params)
    device = _comm_device()
    present = torch.tensor([p.grad is not None for p in params], dtype=torch.int32, device=device)
    dist.all_reduce(present, op=dist.ReduceOp.MAX)
    used = [p for p, flag in zip(params, present.tolist()) if flag]
    if not used:
        return
    for p in used:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.detach().reshape(-1).to(device) for p in used])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for p in used:
        size = p.grad.numel()
        p.grad.copy_(flat[offset : offset + size].view_as(p.grad))
        offset += size


def shard(
    items: Sequence[T], index: int | None = None, size: int | None = None, *, leading: bool = False
) -> list[T]:
    """Rank ``index``'s contiguous slice of ``items`` (default: this rank's of the current world); the
    slices of ranks 0..size-1, concatenated, are ``items`` in order, and their lengths differ by at most 1
    (``leading``: the first ranks hold the longer slices, so rank 0's is empty only when ``items`` is)."""
    index = rank() if index is None else index
    size = world_size() if size is None else size
    if not 0 <= index < size:
        raise ValueError(f"rank {index} is outside a world of size {size}")
    n = len(items)
    if leading:
        return list(items[-(-index * n // size) : -(-(index + 1) * n // size)])
    return list(items[index * n // size : (index + 1) * n // size])


def check_world_size(saved: Mapping[str, Any], path: Any, current: int | None = None) -> None:
    """A checkpoint's recorded ``world_size`` (absent: 1) must be the current one (default: this world's)."""
    recorded = int(saved.get("world_size", 1))
    current = world_size() if current is None else current
    if recorded != current:
        raise ValueError(
            f"checkpoint {path} was written by a run of world size {recorded}; this run has world size "
            f"{current}: resume on the same number of processes"
        )


class RankMetricsLogger:
    """The metrics logger of a rank > 0: it keeps the history (so checkpoints and returned histories are
    the same on every rank) and writes nothing; rank 0's :class:`~comlrl.reporting.MetricsLogger` writes."""

    def __init__(self) -> None:
        self.history: list[dict[str, Any]] = []

    def log(self, metrics: Mapping[str, Any], step: int) -> dict[str, float]:
        scalars = {}
        for key, value in metrics.items():
            value = value.item() if hasattr(value, "item") else value
            if isinstance(value, bool | int | float) and math.isfinite(float(value)):
                scalars[key] = float(value)
        self.history.append({"step": int(step), **scalars})
        return scalars

    def rewrite(self, records: Iterable[Mapping[str, Any]]) -> None:
        self.history = [dict(r) for r in records]

    def truncate_after(self, step: int) -> None:
        self.history = [r for r in self.history if r.get("step", 0) <= step]

    def close(self) -> None:
        """Nothing to close."""
