"""AT-GRPO's groups and advantages, as pure functions over the rollout's samples.

A sample's group is :func:`at_grpo_group_key`; each group *member* (one tree candidate, or one independent
trajectory with all its steps) counts once (:func:`member_table`), and :func:`sample_advantages` gives every
sample its member's group-relative reward (:func:`comlrl.rl.compute_advantages`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from comlrl.rl import compute_advantages, group_ids_from_keys
from pettingllms.execution import GroupKey, Sample, member_rewards

__all__ = ["MemberTable", "at_grpo_group_key", "member_table", "sample_advantages"]


def at_grpo_group_key(sample: Sample) -> GroupKey:
    """The group a sample's advantage is normalised in.

    Tree sampling: ``(problem_id, turn, agent_index)``, the K candidates one agent drew from one state
    (the anchor divides the problem index by K here, merging K problems; we do not). Independent
    sampling: ``(problem_id, None, None)``, the K trajectories of one problem.
    """
    if sample.mode == "tree":
        return GroupKey(sample.problem_id, sample.turn, sample.agent_index)
    if sample.mode == "independent":
        return GroupKey(sample.problem_id, None, None)
    raise ValueError(f"sample `mode` must be 'tree' or 'independent', got {sample.mode!r}")


@dataclass(frozen=True)
class MemberTable:
    """One row per group member: ``members[i] = (group key, candidate)`` with reward ``rewards[i]`` and
    integer ``group_ids[i]`` (``group_keys[group_ids[i]]`` is its key)."""

    members: list[tuple[GroupKey, int]]
    rewards: torch.Tensor
    group_ids: torch.Tensor
    group_keys: list[Hashable]


def member_table(samples: Sequence[Sample]) -> MemberTable:
    """Group members and their rewards, one per tree candidate or independent trajectory.

    Every sample's ``group_key`` must equal :func:`at_grpo_group_key` (an error names the first that does
    not); a trajectory's samples must agree on their reward (:func:`~pettingllms.execution.member_rewards`),
    so a long trajectory counts once, like a short one.
    """
    if not samples:
        raise ValueError("`samples` must not be empty")
    for s in samples:
        expected = at_grpo_group_key(s)
        if s.group_key != expected:
            raise ValueError(
                f"sample (problem {s.problem_id}, turn {s.turn}, agent {s.agent_index}, candidate "
                f"{s.candidate}) has `group_key` {tuple(s.group_key)}, expected {tuple(expected)} for "
                f"{s.mode} sampling"
            )
    table = member_rewards(samples)
    members = [(key, candidate) for key, rewards in table.items() for candidate in rewards]
    rewards = torch.tensor([table[k][c] for k, c in members], dtype=torch.float64)
    group_ids, group_keys = group_ids_from_keys([k for k, _ in members])
    return MemberTable(members, rewards, group_ids, group_keys)


def sample_advantages(
    samples: Sequence[Sample], scale_rewards: str | bool = "group", eps: float = 1e-4
) -> torch.Tensor:
    """Advantage of each sample (float64, aligned with ``samples``): its member's group-relative reward.

    ``A = r - mean_g(r)`` over the group's members, divided by ``std_g + eps`` for ``"group"`` (GRPO),
    by the batch std for ``"batch"``, not at all for ``"none"`` (Dr. GRPO). Every sample of a member (all
    steps of an independent trajectory) gets that member's advantage.
    """
    table = member_table(samples)
    advantages = compute_advantages(table.rewards, table.group_ids, "mean", scale_rewards, eps)
    by_member = {member: float(a) for member, a in zip(table.members, advantages)}
    return torch.tensor([by_member[(s.group_key, s.candidate)] for s in samples], dtype=torch.float64)
