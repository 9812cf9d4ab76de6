"""Sokoban task reward (global part; the local parts are the shared game rewards in ``envs/game.py``).

``D(boxes)`` is the summed Manhattan distance from each box to its nearest goal;
``progress = 1 - D(now) / D(start)`` clipped to [0, 1]; ``task_reward = 1.0`` when every box is on a
goal, ``0.0`` when the state is deadlocked, else ``0.5 * progress``. A level, not an increment.
"""

from __future__ import annotations

from pettingllms.envs.game import level_reward
from pettingllms.envs.sokoban.state import Cell, SokobanLevel, SokobanState, is_corner_deadlocked, is_solved


def box_distance(level: SokobanLevel, boxes: frozenset[Cell]) -> int:
    return sum(min(abs(b[0] - g[0]) + abs(b[1] - g[1]) for g in level.goals) for b in boxes)


def progress(state: SokobanState) -> float:
    start = box_distance(state.level, state.level.start_boxes)
    if start == 0:
        return 1.0
    return min(1.0, max(0.0, 1.0 - box_distance(state.level, state.boxes) / start))


def task_reward(state: SokobanState) -> float:
    if is_solved(state.level, state.boxes):
        return 1.0
    if is_corner_deadlocked(state.level, state.boxes):
        return 0.0
    return level_reward(False, progress(state))
