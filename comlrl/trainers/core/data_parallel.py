"""Data-parallel training of comlrl's trainers under ``accelerate launch --multi_gpu --num_processes N`` or
``torchrun`` (gloo on CPU, NCCL on GPUs), with the collectives of :mod:`comlrl.distributed` (the one facade
both packages use: pettingllms' AT-GRPO, GRPO and SFT call its functions and :func:`attach_engine`).

What a run on N processes does, and why it equals one process over the same batches:

- the batch sizes are global: every rank walks the same batches in the same order (MADPO: the epoch's
  shuffled pair batches; MAGRPO / IAC / MAAC and MARLHF's RL stage: the rollout buffers and their update
  batches; the reward-model fit: its shuffled pair batches) and takes its contiguous
  :func:`~comlrl.distributed.shard` of each batch's rows (the first ranks the larger parts); the samples are
  the one-process samples, since a request's seed depends on its item, not on its batch;
- pair collection (MADPO, MARLHF, and each round of the iterative trainers, the comparator's answers
  included) samples and scores each rank's shard of the items, then every rank takes every rank's pairs
  and counts in rank order (the one-process list);
- multi-turn episodes: each rank plays the rollout trees (trajectories) of its shard of a buffer's items;
  the rows of a turn, every rank's in rank order, are the one-process rows, cut into the same global update
  batches, and each rank trains on the rows of a batch it holds (:meth:`DataParallel.row_offsets`);
- per optimizer step the gradients and what the step divides by are summed over ranks before the division
  (:class:`~comlrl.trainers.core.optimization.GradientSteps`, weights from
  :func:`~comlrl.trainers.core.optimization.micro_batch_weights`): the rows trained on for the row-mean
  losses (``grpo``, ``bnpo`` / ``token``, ``dr_grpo``, ``sequence_sum``, DPO, Bradley–Terry, value losses),
  the completion tokens for ``dapo``; so the step is the gradient of the mean over the global rows (``dapo``:
  the per-token losses summed over the global rows, divided by the step's tokens over every rank),
  accumulation included; a rank with no row of a batch still joins (zero gradient, nothing counted); a
  micro-batch that is non-finite on one rank is dropped on all;
- the iterative rounds: every rank holds the same replay buffer (same index, same seeded generator, so the
  same draw); rank 0 writes the round files, the others read what a draw needs after a barrier; the
  comparator runs on every rank on its shard (the frozen copies and history snapshots are equal on every
  rank, since the weights are; an ``api`` comparator gets each rank's requests);
- ``env_step`` counts every rank's joint responses; the logged update metrics are rank 0's rows', and rank 0
  alone evaluates, logs to files, writes checkpoints, round files, reward distributions, policy snapshots
  and ``save_model`` (the others wait); a checkpoint records the world size, and resuming on another is an
  error naming both.

FSDP (``ACCELERATE_USE_FSDP``, :mod:`comlrl.trainers.core.sharded_training`): the policies' gradients are summed
by FSDP's reduce-scatter, so :meth:`DataParallel.attach` sums only the rows and the gradients of what is not
sharded (critics), and every rank makes the same forward and backward calls (filler micro-batches).

With ``advantage_normalization`` the actor-critic trainers whiten each agent's advantages over the global
batch (:meth:`DataParallel.whiten`: the mean and variance of every rank's rows); the MAGRPO family's groups are
per item, so theirs need no collective.

Differences from one process: a batch whose every item has a non-finite reward on every rank counts as an
empty micro-batch of its accumulation group (one process skips it); a comparator that fails on too many items stops the run after the round's collection, not at
the first item past the limit. Refused under a launcher before any model loads: ``use_vllm``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from comlrl import distributed as dist
from comlrl.rl.masking import masked_whiten

__all__ = ["DataParallel", "attach_engine", "skips_on_ranks"]

T = TypeVar("T")


class DataParallel:
    """A trainer's place in a launch: ``size`` ranks, this one ``rank`` (1 and 0 outside a launcher).

    Built first in the trainer's constructor (it joins the launcher's process group); ``refusal``, when the
    trainer cannot run data-parallel with its config, is the reason a launch of more than one process is
    refused."""

    def __init__(self, owner: str, refusal: str | None = None) -> None:
        self.size = dist.init_distributed()
        self.rank = dist.rank()
        self.sharded = False  # FSDP: the policies' gradients are summed by the reduce-scatter
        self._whitened = 0  # whitenings (:meth:`whiten`) of the current micro-batch on this rank
        if self.size > 1 and refusal:
            raise ValueError(
                f"{owner} has no data-parallel mode yet ({refusal}), and this run has world size {self.size} "
                "(accelerate launch / torchrun): run it in one process, without the launcher"
            )

    @property
    def main(self) -> bool:
        """Whether this rank writes files (rank 0)."""
        return self.rank == 0

    def attach(self, steps: Any, *, whitenings: int = 0) -> None:
        """Make ``steps`` (:class:`~comlrl.trainers.core.optimization.GradientSteps`) sum gradients and rows over
        the ranks and drop a micro-batch any rank skipped. ``whitenings``: the :meth:`whiten` calls each of its
        micro-batches makes (one per agent with actor-critic ``advantage_normalization``); a rank that made
        fewer (no rows, or a non-finite agent that ended its micro-batch early) joins the missing ones with
        nothing, so every rank makes the same collectives. Under FSDP (:attr:`sharded`) the gradients of
        sharded parameters are left to the reduce-scatter."""
        if self.size == 1:
            return

        def all_reduce(params: list, rows: float) -> float:
            whole = [p for p in params if not _is_shard(p)] if self.sharded else params
            if whole:  # the same parameters on every rank
                dist.all_reduce_gradients(whole)
            return dist.all_reduce_sum([rows])[0]

        def any_rank(skipped: bool) -> bool:
            if whitenings:
                for _ in range(whitenings - self._whitened):
                    dist.all_reduce_sum([0.0, 0.0, 0.0])
                self._whitened = 0
            return dist.all_reduce_max(int(skipped)) > 0

        steps.all_reduce = all_reduce
        steps.any_rank = any_rank

    def whiten(self, values: torch.Tensor) -> torch.Tensor:
        """:func:`~comlrl.rl.masked_whiten` of a batch's ``values`` over every rank's rows together (their mean
        and unbiased variance, one collective); fewer than two rows in all are kept raw (nothing to whiten
        against), as one process keeps one row."""
        if self.size == 1:
            return masked_whiten(values) if values.numel() > 1 else values
        self._whitened += 1
        flat = values.detach().double().reshape(-1)
        count, total, squares = dist.all_reduce_sum([flat.numel(), float(flat.sum()), float((flat * flat).sum())])
        if count <= 1:
            return values
        mean = total / count
        variance = max(squares - count * mean * mean, 0.0) / (count - 1)
        return (values - mean) * (variance + 1e-8) ** -0.5

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

    def totals(self, values: Sequence[float]) -> list[float]:
        """Each of ``values`` summed over the ranks (one collective)."""
        return dist.all_reduce_sum(values) if self.size > 1 else list(values)

    def gather(self, obj: T) -> list[T]:
        """Every rank's ``obj``, in rank order."""
        return dist.gather_objects(obj) if self.size > 1 else [obj]

    def barrier(self) -> None:
        """Wait for every rank (e.g. until rank 0 has written a file the others read)."""
        dist.barrier()

    def row_offsets(self, counts: Sequence[int]) -> list[tuple[int, int]]:
        """Per level (a multi-turn episode's turn), ``(rows of every rank, where this rank's start)`` from this
        rank's row ``counts`` per level: the rows of ranks 0..N-1, concatenated in rank order, are the level's
        rows (a rank whose episodes ended earlier has none at the later levels)."""
        if self.size == 1:
            return [(int(c), 0) for c in counts]
        parts = self.gather([int(c) for c in counts])
        levels = max(len(part) for part in parts)
        table = [[part[t] if t < len(part) else 0 for part in parts] for t in range(levels)]
        return [(sum(row), sum(row[: self.rank])) for row in table]

    def rank_zero_writes(self, write: Callable[[], T], result: T) -> T:
        """Rank 0 runs ``write`` (and returns its result); the others wait for it and return ``result``."""
        out = write() if self.main else result
        dist.barrier()
        return out


def _is_shard(param: torch.Tensor) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(param, DTensor)


def attach_engine(steps: Any, *, sharded: bool = False, skips: bool = True) -> None:
    """Make a pettingllms update engine (:class:`~comlrl.trainers.core.optimization.GradientSteps`: AT-GRPO /
    GRPO / SFT, whose micro-batches are grouped by the caller) sum its gradients over the ranks before clipping
    (not ``sharded``: FSDP's reduce-scatter has summed them) and, when it has a divisor (AT-GRPO's ``"rows"``
    of the row-mean loss types), the divisor's count too; without one (``dapo``, SFT: the losses are already
    divided by the global token count, summed before the first backward) no count is summed. With ``skips``
    a step that is non-finite on any rank is skipped on every rank, naming the ranks. Nothing in one process."""
    if dist.world_size() == 1:
        return
    counted = bool(getattr(steps, "divisors", ()))
    if not sharded or counted:

        def all_reduce(params: list, count: float) -> float:
            if not sharded:
                dist.all_reduce_gradients(params)
            return dist.all_reduce_sum([count])[0] if counted else count

        steps.all_reduce = all_reduce
    if skips:
        steps.any_rank_skips = skips_on_ranks


def skips_on_ranks(what: str | None) -> str | None:
    """Every rank's reason to skip the step (``"what (rank r)"``, joined), None when no rank has one."""
    if not dist.all_reduce_max(what is not None):
        return None
    return "; ".join(f"{reason} (rank {r})" for r, reason in enumerate(dist.gather_objects(what)) if reason)
