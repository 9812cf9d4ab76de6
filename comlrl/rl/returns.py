"""Multi-turn returns as small pure functions: the rollout tree of the MAGRPO family and the per-turn
trajectories of the actor-critic trainers.

- :func:`joint_indices`: the joint actions of one decision (``aligned``: candidate k of every agent;
  ``cross``: every combination of the agents' candidates, the first agent's index varying slowest).
- :func:`tree_returns`: a node's returns, ``G_j = r_j + γ · mean(G of child j)`` (a leaf: ``G_j = r_j``).
- :func:`agent_candidate_returns`: one agent's return per own candidate (``aligned``: the joint return;
  ``cross``: the sum over the joint actions the candidate is part of, as the public library does).
- :func:`td_targets`: a trajectory's one-step targets ``r_t + γ · V(h_{t+1})`` (the last turn: ``r_T``).
- :func:`rewards_to_go`: the undiscounted reward sums from each turn on (what the public library logs as
  ``expected_return``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from comlrl.rl.names import JOINT_MODES

__all__ = ["JOINT_MODES", "agent_candidate_returns", "joint_indices", "rewards_to_go", "td_targets", "tree_returns"]


def joint_indices(num_agents: int, k: int, mode: str) -> list[tuple[int, ...]]:
    """The joint actions of ``num_agents`` agents with ``k`` candidates each, as candidate-index tuples."""
    if num_agents < 1 or k < 1:
        raise ValueError(f"need num_agents >= 1 and k >= 1, got {num_agents} and {k}")
    if mode == "aligned" or num_agents == 1:
        return [(j,) * num_agents for j in range(k)]
    if mode == "cross":
        return list(itertools.product(range(k), repeat=num_agents))
    raise ValueError(f"`joint_mode` must be one of {list(JOINT_MODES)}, got {mode!r}")


def tree_returns(
    rewards: Sequence[float], child_returns: Sequence[Sequence[float] | None], discount: float
) -> list[float]:
    """``G_j = r_j + discount · mean(child_returns[j])``; ``r_j`` where joint action ``j`` has no child (the
    last turn, or a node that terminated early). A non-finite child return propagates."""
    if len(child_returns) != len(rewards):
        raise ValueError(f"one child slot per joint action: {len(rewards)} rewards, {len(child_returns)} slots")
    if not 0.0 <= discount <= 1.0:
        raise ValueError(f"`discount` must be in [0, 1], got {discount}")
    out = []
    for reward, child in zip(rewards, child_returns):
        if not child:
            out.append(float(reward))
        else:
            out.append(float(reward) + discount * math.fsum(child) / len(child))
    return out


def agent_candidate_returns(
    joint_returns: Sequence[float], joints: Sequence[tuple[int, ...]], agent: int, k: int
) -> list[float]:
    """Agent ``agent``'s return for each of its ``k`` candidates: the sum of the joint returns over the joint
    actions that use that candidate (aligned joints use each candidate once: the joint return itself)."""
    if len(joint_returns) != len(joints):
        raise ValueError(f"{len(joint_returns)} joint returns for {len(joints)} joint actions")
    sums = [0.0] * k
    for value, joint in zip(joint_returns, joints):
        sums[joint[agent]] += float(value)
    return sums


def td_targets(rewards: Sequence[float], next_values: Sequence[float], discount: float) -> list[float]:
    """One-step targets of a trajectory: ``r_t + discount · next_values[t]`` for every turn but the last,
    ``r_T`` for the last (``next_values[t]`` is the critic's value of turn ``t + 1``; its last entry unused)."""
    if len(next_values) != len(rewards):
        raise ValueError(f"{len(rewards)} rewards and {len(next_values)} next values")
    last = len(rewards) - 1
    return [float(r) + (discount * float(next_values[t]) if t < last else 0.0) for t, r in enumerate(rewards)]


def rewards_to_go(rewards: Sequence[float]) -> list[float]:
    """``sum(rewards[t:])`` for every ``t`` (undiscounted)."""
    out, total = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        total += float(rewards[t])
        out[t] = total
    return out
