"""Group baselines and advantages over a flat reward vector.

Rewards are one scalar per sampled completion, ``r`` of shape ``(N,)``; ``group_ids`` of shape ``(N,)`` says
which completions were sampled for the same context (MAGRPO: the same item; AT-GRPO: the same
(problem, turn, agent), see :func:`group_ids_from_keys`). Ids are any integers; they need not be contiguous
or sorted. For a group ``g`` with ``n`` members, ``mean_g``, ``max_g`` and the unbiased (Bessel) ``std_g``
are taken over its members; a group of one has ``std = 0``.

The four baselines of CoMLRL's MAGRPO family (``estimator``):

=========  ===============  =========================================================
estimator  algorithm        advantage ``A_i`` of member ``i`` of group ``g``
=========  ===============  =========================================================
``mean``   MAGRPO           ``r_i − mean_g(r)``
``raw``    MAREINFORCE      ``r_i`` (no baseline)
``rloo``   MARLOO           ``r_i − (Σ_g r − r_i)/(n − 1)`` = ``n/(n−1)·(r_i − mean_g(r))``; 0 when ``n = 1``
``max``    MAReMax          ``r_i − max_g(r)``
=========  ===============  =========================================================

Normalisation (``scale_rewards``, TRL's names): ``"none"`` returns ``A`` as above. ``"group"`` whitens
``A`` within each group, ``(A − mean_g(A)) / (std_g(A) + eps)``; ``"batch"`` centres within each group and
scales by the batch, ``(A − mean_g(A)) / (std(A − mean_g(A)) + eps)`` with the std over all ``N``.

Every estimator above is affine in the group's rewards with a positive slope (``A = c_g·r + b_g``,
``c_g = 1`` or ``n/(n−1)``), and whitening removes any such map. So with ``scale_rewards="group"`` all four
estimators give the same advantages (exactly when ``std_g ≫ eps``), and with ``"batch"`` they do whenever
every group has the same size. The choice of baseline only matters with ``scale_rewards="none"``.

For ``"mean"`` with ``"group"`` this is TRL's GRPO advantage ``(r − mean_g) / (std_g + eps)``. For
``"batch"``, TRL divides by the batch std of the raw rewards; we divide by the batch std of the
group-centred advantages, i.e. the scale of what is being scaled (TRL's also counts the spread between
group means) and the form that keeps the estimators interchangeable.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from comlrl.rl.names import ESTIMATORS, RL_ALGORITHM_ESTIMATORS, SCALE_REWARDS

__all__ = [
    "ESTIMATORS",
    "RL_ALGORITHM_ESTIMATORS",
    "SCALE_REWARDS",
    "GroupStats",
    "compute_advantages",
    "group_ids_from_keys",
    "group_max_baseline",
    "group_mean_baseline",
    "group_stats",
    "leave_one_out_baseline",
    "mix_rewards",
    "raw_returns",
]


# --------------------------------------------------------------------------------------------- grouping


def group_ids_from_keys(keys: Sequence[Hashable]) -> tuple[torch.Tensor, list[Hashable]]:
    """Map hashable group keys (e.g. ``(problem, turn, agent)`` tuples) to ids ``0..G−1``.

    Ids are given in order of first appearance. Returns ``(ids, unique_keys)`` with
    ``unique_keys[ids[i]] == keys[i]``.
    """
    index: dict[Hashable, int] = {}
    ids = [index.setdefault(key, len(index)) for key in keys]
    return torch.tensor(ids, dtype=torch.long), list(index)


@dataclass(frozen=True)
class _Groups:
    inverse: torch.Tensor  # (N,) position of each element's group in ``unique``
    unique: torch.Tensor  # (G,) sorted distinct group ids
    counts: torch.Tensor  # (G,) members per group


def _as_rewards(rewards: torch.Tensor | Sequence[float], name: str = "rewards") -> torch.Tensor:
    rewards = torch.as_tensor(rewards)
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    if rewards.ndim != 1:
        raise ValueError(
            f"`{name}` must be 1-D (one scalar per completion), got shape {tuple(rewards.shape)}"
        )
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError(f"`{name}` must be finite; drop failed samples before computing advantages")
    return rewards


def _groups(group_ids: torch.Tensor | Sequence[int], num: int, device: torch.device) -> _Groups:
    group_ids = torch.as_tensor(group_ids, device=device)
    if group_ids.dtype.is_floating_point or group_ids.dtype == torch.bool or group_ids.is_complex():
        raise TypeError(f"`group_ids` must hold integers, got dtype {group_ids.dtype}")
    if group_ids.shape != (num,):
        raise ValueError(f"`group_ids` must have shape ({num},) like `rewards`, got {tuple(group_ids.shape)}")
    unique, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    return _Groups(inverse=inverse, unique=unique, counts=counts)


def _group_sum(values: torch.Tensor, groups: _Groups) -> torch.Tensor:
    """Per-group sums, shape ``(G,)``."""
    out = torch.zeros(groups.unique.numel(), dtype=values.dtype, device=values.device)
    return out.index_add(0, groups.inverse, values)


def _group_mean(values: torch.Tensor, groups: _Groups) -> torch.Tensor:
    return _group_sum(values, groups) / groups.counts.to(values.dtype)


def _group_std(values: torch.Tensor, groups: _Groups) -> torch.Tensor:
    """Unbiased per-group std, shape ``(G,)``; 0 for a group of one."""
    mean = _group_mean(values, groups)
    square_dev = _group_sum((values - mean[groups.inverse]) ** 2, groups)
    return torch.sqrt(square_dev / (groups.counts - 1).clamp(min=1).to(values.dtype))


def _batch_std(values: torch.Tensor) -> torch.Tensor:
    """Unbiased std over all entries; 0 for a single entry."""
    return values.std() if values.numel() > 1 else torch.zeros((), dtype=values.dtype, device=values.device)


# --------------------------------------------------------------------------------------------- estimators


def group_mean_baseline(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """MAGRPO: ``A_i = r_i − mean_g(r)``."""
    rewards = _as_rewards(rewards)
    groups = _groups(group_ids, rewards.numel(), rewards.device)
    return rewards - _group_mean(rewards, groups)[groups.inverse]


def raw_returns(rewards: torch.Tensor, group_ids: torch.Tensor | None = None) -> torch.Tensor:
    """MAREINFORCE: ``A_i = r_i`` (a copy). ``group_ids`` is only checked, for a uniform signature."""
    rewards = _as_rewards(rewards)
    if group_ids is not None:
        _groups(group_ids, rewards.numel(), rewards.device)
    return rewards.clone()


def leave_one_out_baseline(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """MARLOO: ``A_i = r_i − (Σ_g r − r_i)/(n − 1)``, the mean of the *other* members as baseline.

    A group of one has no other member, so its advantage is 0 (it carries no learning signal).
    """
    rewards = _as_rewards(rewards)
    groups = _groups(group_ids, rewards.numel(), rewards.device)
    total = _group_sum(rewards, groups)[groups.inverse]
    n = groups.counts[groups.inverse].to(rewards.dtype)
    others_mean = (total - rewards) / (n - 1).clamp(min=1)
    return torch.where(n > 1, rewards - others_mean, torch.zeros_like(rewards))


def group_max_baseline(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """MAReMax: ``A_i = r_i − max_g(r)`` (never positive; the best member gets 0)."""
    rewards = _as_rewards(rewards)
    groups = _groups(group_ids, rewards.numel(), rewards.device)
    group_max = torch.full((groups.unique.numel(),), -torch.inf, dtype=rewards.dtype, device=rewards.device)
    group_max = group_max.scatter_reduce(0, groups.inverse, rewards, reduce="amax", include_self=True)
    return rewards - group_max[groups.inverse]


_ESTIMATOR_FUNCTIONS = {
    "mean": group_mean_baseline,
    "raw": raw_returns,
    "rloo": leave_one_out_baseline,
    "max": group_max_baseline,
}


def _resolve_scale(scale_rewards: str | bool) -> str:
    if scale_rewards is True:
        return "group"
    if scale_rewards is False:
        return "none"
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"`scale_rewards` must be one of {SCALE_REWARDS} or a bool, got {scale_rewards!r}")
    return scale_rewards


def compute_advantages(
    rewards: torch.Tensor | Sequence[float],
    group_ids: torch.Tensor | Sequence[int],
    estimator: str = "mean",
    scale_rewards: str | bool = "group",
    eps: float = 1e-4,
) -> torch.Tensor:
    """Advantages of shape ``(N,)`` for rewards ``(N,)`` grouped by ``group_ids`` ``(N,)``.

    ``estimator`` is one of ``ESTIMATORS`` (or a CoMLRL ``rl_algorithm`` name from
    ``RL_ALGORITHM_ESTIMATORS``); ``scale_rewards`` is ``"group"`` (or ``True``), ``"batch"`` or ``"none"``
    (or ``False``); ``eps`` is added to the std. See the module docstring for the formulas and for why all
    estimators coincide once the advantages are scaled.
    """
    name = RL_ALGORITHM_ESTIMATORS.get(estimator, estimator)
    if name not in _ESTIMATOR_FUNCTIONS:
        raise ValueError(
            f"`estimator` must be one of {ESTIMATORS} or {tuple(RL_ALGORITHM_ESTIMATORS)}, got {estimator!r}"
        )
    scale = _resolve_scale(scale_rewards)
    if not eps > 0:
        raise ValueError(f"`eps` must be > 0, got {eps}")
    rewards = _as_rewards(rewards)
    advantages = _ESTIMATOR_FUNCTIONS[name](rewards, group_ids)
    if scale == "none":
        return advantages
    groups = _groups(group_ids, rewards.numel(), rewards.device)
    centred = advantages - _group_mean(advantages, groups)[groups.inverse]
    if scale == "group":
        std = _group_std(advantages, groups)[groups.inverse]
    else:
        std = _batch_std(centred)
    return centred / (std + eps)


def mix_rewards(
    global_reward: torch.Tensor | float,
    local_reward: torch.Tensor | float,
    alpha: float,
) -> torch.Tensor:
    """AT-GRPO's per-agent reward ``alpha · global + local`` (team term scaled by ``alpha`` plus role term).

    Tensors broadcast against each other; ``alpha`` must be finite and ``>= 0``.
    """
    alpha = float(alpha)
    if not (alpha >= 0 and alpha != float("inf")):
        raise ValueError(f"`alpha` must be a finite number >= 0, got {alpha}")
    global_reward = torch.as_tensor(global_reward)
    local_reward = torch.as_tensor(local_reward)
    if not global_reward.is_floating_point():
        global_reward = global_reward.to(torch.get_default_dtype())
    return alpha * global_reward + local_reward


# --------------------------------------------------------------------------------------------- metrics


@dataclass(frozen=True)
class GroupStats:
    """Per-group reward statistics (tensors of shape ``(G,)``, groups in sorted id order)."""

    group_ids: torch.Tensor
    count: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    frac_zero_std: float

    def as_metrics(self, prefix: str = "") -> dict[str, float]:
        """TRL-style scalars: ``reward`` (mean over completions), ``reward_std`` (mean group std),
        ``frac_reward_zero_std``."""
        weights = self.count.to(self.mean.dtype)
        return {
            f"{prefix}reward": float((self.mean * weights).sum() / weights.sum()),
            f"{prefix}reward_std": float(self.std.mean()),
            f"{prefix}frac_reward_zero_std": self.frac_zero_std,
        }


def group_stats(
    rewards: torch.Tensor | Sequence[float],
    group_ids: torch.Tensor | Sequence[int],
    zero_std_atol: float = 1e-8,
) -> GroupStats:
    """Mean, unbiased std and size of every group, and the fraction of groups whose std is
    ``<= zero_std_atol`` (groups that give no learning signal once advantages are centred; a group of one
    counts as zero std)."""
    rewards = _as_rewards(rewards)
    if rewards.numel() == 0:
        raise ValueError("`rewards` must not be empty")
    groups = _groups(group_ids, rewards.numel(), rewards.device)
    std = _group_std(rewards, groups)
    return GroupStats(
        group_ids=groups.unique,
        count=groups.counts,
        mean=_group_mean(rewards, groups),
        std=std,
        frac_zero_std=float((std <= zero_std_atol).float().mean()),
    )
