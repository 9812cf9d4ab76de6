"""Tree-structured sampling (AT-GRPO's rollout), the pieces the engine composes.

For each problem, at each turn, each agent in turn order:

1. :func:`fresh_copies` makes K deep copies of the selected state (and K copies of the agent), so no
   two candidates share a mutable object; the agent's policy draws K candidates for them in one request;
2. every copy is stepped with its own candidate and scored on that copy;
3. the K candidates form one group keyed by ``(problem, turn, agent slot)``;
4. :func:`select_branch` picks the branch to continue from this group's own rewards (best reward, ties
   broken by a seeded draw; or a uniformly random branch when greedy selection is off);
5. the next agent's K copies are fresh deep copies of the selected copy.

The anchor implementation stepped stale objects, selected on the first agent's reward only and merged K
problems into one group key; the tests of this package pin the opposite of each.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from typing import Any

from comlrl.seeding import derive_seed

__all__ = ["fresh_copies", "select_branch", "selection_rng"]


def selection_rng(run_seed: int, step: int, problem_id: int, turn: int, agent_index: int) -> random.Random:
    """The generator of one group's branch draw.

    Seeded with ``derive_seed(run_seed, "select", step, problem, turn, agent)``.
    """
    return random.Random(derive_seed(run_seed, "select", step, problem_id, turn, agent_index))


def select_branch(rewards: Sequence[float | None], greedy: bool, rng: random.Random) -> int:
    """Index of the branch to continue.

    ``rewards[k]`` is candidate ``k``'s reward, ``None`` for a candidate that was dropped (it can never be
    selected). Greedy: a uniformly drawn index among the best rewards; otherwise a uniformly drawn index
    among the surviving candidates. Exactly one draw from ``rng`` either way.
    """
    alive = [k for k, r in enumerate(rewards) if r is not None]
    if not alive:
        raise ValueError("`rewards` has no surviving candidate to select")
    if greedy:
        best = max(rewards[k] for k in alive)  # type: ignore[type-var]
        alive = [k for k in alive if rewards[k] == best]
    return alive[rng.randrange(len(alive))]


def fresh_copies(env: Any, agent: Any, k: int) -> tuple[list[Any], list[Any]]:
    """``k`` deep copies of ``env`` (via ``env.clone()``) and ``k`` deep copies of ``agent``.

    The originals are left untouched and shared with no copy.
    """
    if k < 1:
        raise ValueError(f"`k` must be >= 1, got {k}")
    return [env.clone() for _ in range(k)], [copy.deepcopy(agent) for _ in range(k)]
