"""Plan-Path task reward (global part; the local parts are the shared game rewards in ``envs/game.py``).

``progress = 1 - d(pos) / d(start)`` clipped to [0, 1], with ``d`` the BFS distance to the goal;
``task_reward = 1.0`` at the goal, else ``0.5 * progress``. It is a level (a function of the state),
not an increment.
"""

from __future__ import annotations

from pettingllms.envs.game import level_reward
from pettingllms.envs.plan_path.state import PlanPathState


def progress(state: PlanPathState) -> float:
    level = state.level
    start_distance = level.dist(level.start)
    here = level.dist(state.pos)
    if here < 0:  # cannot happen for reachable levels; an unreachable cell makes no progress
        return 0.0
    return min(1.0, max(0.0, 1.0 - here / start_distance))


def task_reward(state: PlanPathState) -> float:
    return level_reward(state.pos == state.level.goal, progress(state))
