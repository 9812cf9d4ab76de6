"""Data-parallel training of comlrl's trainers under ``accelerate launch --multi_gpu --num_processes N`` or
``torchrun`` (gloo on CPU, NCCL on GPUs), with the collectives of :mod:`comlrl.distributed`.

What a run on N processes does, and why it equals one process over the same batches:

- the batch sizes are global: every rank walks the same batches in the same order (MADPO: the epoch's
  shuffled pair batches; MAGRPO / IAC / MAAC: the rollout buffers and their update batches) and takes its
  contiguous :func:`~comlrl.distributed.shard` of each batch's rows (the first ranks the larger parts); the
  samples are the one-process samples, since a request's seed depends on its item, not on its batch;
- MADPO's pair collection samples and scores each rank's shard of the items, then every rank takes every
  rank's pairs in rank order (the one-process list);
- per optimizer step the gradients and the rows trained on are summed over ranks before the division by
  the rows (:class:`~comlrl.trainers.core.optimization.GradientSteps`), so the step is the gradient of the
  mean over the global rows, accumulation included; a rank with no row of a batch still joins (zero
  gradient, zero rows); a micro-batch that is non-finite on one rank is dropped on all;
- ``env_step`` counts every rank's joint responses; the logged update metrics are rank 0's rows', and rank 0
  alone evaluates, logs to files, writes checkpoints and ``save_model`` (the others wait); a checkpoint
  records the world size, and resuming on another is an error naming both.

Differences from one process: with ``advantage_normalization`` the actor-critic trainers whiten each rank's
part of a batch (the MAGRPO family's groups are per item, so theirs do not change). Without a data-parallel
mode yet (refused under a launcher before any model loads): the iterative trainers, MARLHF, multi-turn
episodes, ``use_vllm``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from comlrl import distributed as dist

__all__ = ["DataParallel"]

T = TypeVar("T")


class DataParallel:
    """A trainer's place in a launch: ``size`` ranks, this one ``rank`` (1 and 0 outside a launcher).

    Built first in the trainer's constructor (it joins the launcher's process group); ``refusal``, when the
    trainer cannot run data-parallel with its config, is the reason a launch of more than one process is
    refused."""

    def __init__(self, owner: str, refusal: str | None = None) -> None:
        self.size = dist.init_distributed()
        self.rank = dist.rank()
        if self.size > 1 and refusal:
            raise ValueError(
                f"{owner} has no data-parallel mode yet ({refusal}), and this run has world size {self.size} "
                "(accelerate launch / torchrun): run it in one process, without the launcher"
            )

    @property
    def main(self) -> bool:
        """Whether this rank writes files (rank 0)."""
        return self.rank == 0

    def attach(self, steps: Any) -> None:
        """Make ``steps`` (:class:`~comlrl.trainers.core.optimization.GradientSteps`) sum gradients and rows over
        the ranks and drop a micro-batch any rank skipped."""
        if self.size == 1:
            return

        def all_reduce(params: list, rows: float) -> float:
            dist.all_reduce_gradients(params)
            return dist.all_reduce_sum([rows])[0]

        steps.all_reduce = all_reduce
        steps.any_rank = lambda skipped: dist.all_reduce_max(int(skipped)) > 0

    def shard(self, rows: Sequence[T]) -> list[T]:
        """This rank's contiguous part of a batch's ``rows`` (rank 0's is empty only when ``rows`` is)."""
        return dist.shard(rows, self.rank, self.size, leading=True) if self.size > 1 else list(rows)

    def bounds(self, count: int) -> tuple[int, int]:
        """This rank's ``[start, stop)`` of ``count`` rows (as :meth:`shard` cuts them)."""
        part = self.shard(range(count))
        return (part[0], part[-1] + 1) if part else (count, count)

    def total(self, value: float) -> float:
        """``value`` summed over the ranks."""
        return dist.all_reduce_sum([value])[0] if self.size > 1 else value

    def gather(self, obj: T) -> list[T]:
        """Every rank's ``obj``, in rank order."""
        return dist.gather_objects(obj) if self.size > 1 else [obj]

    def rank_zero_writes(self, write: Callable[[], T], result: T) -> T:
        """Rank 0 runs ``write`` (and returns its result); the others wait for it and return ``result``."""
        out = write() if self.main else result
        dist.barrier()
        return out

    def rank_zero_first(self, read: Callable[[], T]) -> T:
        """Rank 0 runs ``read`` first (it may tidy files), then the other ranks."""
        out = read() if self.main else None
        dist.barrier()
        return out if self.main else read()
