"""The non-finite checks every trainer shares, as pure functions.

A NaN or ±inf never becomes a made-up number. A trainer asks :func:`nonfinite_names` which of a step's
named quantities (log-probs, advantages, the loss, ...) hold one, skips the step when any does and names
them in its warning; and it drops every group that holds a non-finite reward with
:func:`finite_group_mask` (a group's baseline is meaningless once one member's reward is). Counting the
skips and stopping past ``max_nonfinite_losses_in_a_row`` is
:class:`comlrl.trainers.core.nonfinite.NonFiniteGuard`'s job.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from comlrl.rl.masking import as_bool_mask

__all__ = ["finite_group_mask", "is_finite", "nonfinite_names"]


def is_finite(value: Any, mask: torch.Tensor | None = None) -> bool:
    """Whether ``value`` (a number or a tensor; with ``mask``, only the tensor's positions where it is set)
    holds no NaN and no ±inf."""
    if isinstance(value, torch.Tensor):
        finite = torch.isfinite(value.detach())
        if mask is not None:
            finite = finite | ~as_bool_mask(mask.to(value.device), value)
        return bool(finite.all())
    return math.isfinite(float(value))


def nonfinite_names(values: Mapping[str, Any], masks: Mapping[str, torch.Tensor] | None = None) -> list[str]:
    """The names in ``values`` whose value holds a NaN or ±inf, in the mapping's order.

    A value is a number or a tensor (None is skipped: a quantity the step did not have). A name found in
    ``masks`` is checked only where its mask is set, so padding may hold anything.
    """
    masks = masks or {}
    return [name for name, value in values.items() if value is not None and not is_finite(value, masks.get(name))]


def finite_group_mask(
    rewards: torch.Tensor | Sequence[float], group_ids: torch.Tensor | Sequence[int]
) -> tuple[torch.Tensor, list[int]]:
    """Which entries to keep when every group holding a non-finite reward is dropped.

    ``rewards`` and ``group_ids`` are 1-D and aligned (one reward per sample, its group's integer id).
    Returns ``(keep, dropped)``: ``keep[i]`` is False exactly when some member of sample i's group has a
    NaN or ±inf reward, and ``dropped`` lists those groups' ids, sorted.
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float64)
    group_ids = torch.as_tensor(group_ids)
    if rewards.ndim != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            f"`rewards` and `group_ids` must be 1-D of one length, got shapes {tuple(rewards.shape)} and "
            f"{tuple(group_ids.shape)}"
        )
    if group_ids.dtype.is_floating_point or group_ids.dtype == torch.bool:
        raise TypeError(f"`group_ids` must hold integers, got dtype {group_ids.dtype}")
    bad = torch.unique(group_ids[~torch.isfinite(rewards)])
    keep = ~torch.isin(group_ids, bad)
    return keep, [int(g) for g in bad.tolist()]
