"""How the AT-GRPO update walks one policy's rows: a seeded shuffle cut into micro-batches and optimizer
steps (:func:`micro_batch_groups`), and the tensors of one micro-batch (:func:`policy_rows`)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import torch

from pettingllms.execution import PolicyTensors

__all__ = ["micro_batch_groups", "policy_rows"]


def micro_batch_groups(
    num_rows: int,
    batch_size: int,
    accumulation_steps: int,
    seed: int,
    row_keys: Sequence[Hashable] | None = None,
) -> list[list[torch.Tensor]]:
    """Row indices in a seeded shuffle, cut into micro-batches of ``batch_size`` and grouped into
    optimizer steps of ``accumulation_steps`` micro-batches (the last step may hold fewer).

    With ``row_keys`` (one per row), rows with equal keys stay adjacent: keys come in the order the
    shuffle first meets them, each key's rows in shuffled order. Keyed by prompt, a micro-batch then
    holds few distinct prompts, which the shared-prompt forward encodes once each.
    """
    if num_rows < 1 or batch_size < 1 or accumulation_steps < 1:
        raise ValueError(
            f"`num_rows`, `batch_size`, `accumulation_steps` must be >= 1, got {num_rows}, {batch_size}, "
            f"{accumulation_steps}"
        )
    if row_keys is not None and len(row_keys) != num_rows:
        raise ValueError(f"`row_keys` must hold one key per row ({num_rows}), got {len(row_keys)}")
    order = torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed))
    if row_keys is not None:
        rank: dict[Hashable, int] = {}
        for index in order.tolist():
            rank.setdefault(row_keys[index], len(rank))
        order = torch.tensor(sorted(order.tolist(), key=lambda index: rank[row_keys[index]]), dtype=torch.long)
    micro = list(order.split(batch_size))
    return [micro[i : i + accumulation_steps] for i in range(0, len(micro), accumulation_steps)]


def policy_rows(
    tensors: PolicyTensors,
    index: torch.Tensor,
    extra: Mapping[str, torch.Tensor] | None = None,
    min_width: int = 1,
) -> dict[str, torch.Tensor]:
    """Rows ``index`` of a policy's tensors, trimmed to their own longest prompt and completion, in the
    layout :func:`comlrl.scoring.per_token_logps` reads; ``extra`` ``[B, C]`` tensors are sliced alike.

    ``min_width``: completions at least this many positions wide, padded with masked-out zeros (under FSDP
    the shared-prompt forward then always makes its two forward calls, :mod:`pettingllms.trainer.fsdp`)."""
    prompt_mask, completion_mask = tensors.prompt_mask[index], tensors.completion_mask[index]
    p = int(prompt_mask.sum(dim=1).max())
    c = max(1, min_width, int(completion_mask.sum(dim=1).max()))
    start = prompt_mask.shape[1] - p
    out = {
        "prompt_ids": tensors.prompt_ids[index, start:],
        "prompt_mask": prompt_mask[:, start:],
        "completion_ids": _width(tensors.completion_ids[index, :c], c),
        "completion_mask": _width(completion_mask[:, :c], c),
        "old_per_token_logps": _width(tensors.old_per_token_logps[index, :c], c),
        "advantages": tensors.advantages[index],
    }
    for name, value in (extra or {}).items():
        out[name] = _width(value[index, :c], c)
    return out


def _width(columns: torch.Tensor, width: int) -> torch.Tensor:
    """``columns`` ``[B, C']`` right-padded with zeros to ``width`` columns."""
    short = width - columns.shape[1]
    return torch.nn.functional.pad(columns, (0, short)) if short > 0 else columns
