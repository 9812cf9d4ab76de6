"""Which problems (environment instance seeds) an AT-GRPO step trains on: a seeded order per epoch over
``train_seed_range``, read by a checkpointed cursor."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from comlrl.seeding import derive_seed

__all__ = ["MAX_SEED_RANGE", "draw_problem_ids", "problem_order"]

# Seeds per epoch order are materialised; a larger range is an error rather than a silent memory cost.
MAX_SEED_RANGE = 50_000_000


def problem_order(seed_range: Sequence[int], seed: int, epoch: int) -> list[int]:
    """The instance seeds of ``[start, stop)`` in the seeded order of ``epoch``."""
    start, stop = int(seed_range[0]), int(seed_range[1])
    if not 0 <= start < stop:
        raise ValueError(f"`train_seed_range` must be [start, stop) with 0 <= start < stop, got {list(seed_range)}")
    if stop - start > MAX_SEED_RANGE:
        raise ValueError(f"`train_seed_range` holds {stop - start} seeds; at most {MAX_SEED_RANGE} are supported")
    generator = torch.Generator().manual_seed(derive_seed(seed, "problems", epoch))
    return (torch.randperm(stop - start, generator=generator) + start).tolist()


def draw_problem_ids(
    cursor: Mapping[str, int], n: int, seed_range: Sequence[int], seed: int
) -> tuple[list[int], dict[str, int]]:
    """The next ``n`` distinct instance seeds after ``cursor`` (``{"epoch", "index"}``) and the new cursor.

    A step never straddles two epochs (an epoch's leftover seeds, fewer than ``n``, are skipped), so the
    ids of one step are distinct and each epoch visits a seed at most once.
    """
    size = int(seed_range[1]) - int(seed_range[0])
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= size:
        raise ValueError(f"`problems_per_step` must be an integer in [1, {size}], got {n!r}")
    epoch, index = int(cursor["epoch"]), int(cursor["index"])
    if index + n > size:
        epoch, index = epoch + 1, 0
    ids = problem_order(seed_range, seed, epoch)[index : index + n]
    return ids, {"epoch": epoch, "index": index + n}
