"""Blocksworld task reward (global part; the local parts are the shared game rewards in ``envs/game.py``).

``h(stacks)`` is the number of misplaced blocks (a block is in place when it and everything below it
stand as in the goal; :func:`~pettingllms.envs.blocksworld.state.misplaced`), a lower bound on the
moves left. ``progress = 1 - h(now) / h(start)`` clipped to [0, 1]; ``task_reward = 1.0`` when the
configuration is the goal, else ``0.5 * progress``. A level, not an increment.
"""

from __future__ import annotations

from pettingllms.envs.blocksworld.state import BlocksState, is_solved, misplaced
from pettingllms.envs.game import level_reward


def progress(state: BlocksState) -> float:
    problem = state.problem
    start = misplaced(problem.start, problem.goal)
    if start == 0:
        return 1.0
    return min(1.0, max(0.0, 1.0 - misplaced(state.stacks, problem.goal) / start))


def task_reward(state: BlocksState) -> float:
    return level_reward(is_solved(state.stacks, state.problem.goal), progress(state))
