"""Eight Queens task reward (global part; the local parts are the shared game rewards in ``envs/game.py``).

Over the queens the agents placed (not the fixed ones): ``safe`` attack no other queen, ``attacked``
attack at least one (fixed queens included). ``progress = (safe - attacked) / open_rows`` clipped to
[0, 1], with ``open_rows = size - fixed`` the queens a solution adds; ``task_reward = 1.0`` when the board
holds ``size`` non-attacking queens, else ``0.5 * progress``. A level, not an increment; each attacked
queen cancels a safe one, so crowding the board does not pay.
"""

from __future__ import annotations

from pettingllms.envs.eight_queens.state import QueensState, attacked_queens, is_solved
from pettingllms.envs.game import level_reward


def progress(state: QueensState) -> float:
    puzzle = state.puzzle
    placed = state.queens - puzzle.fixed
    attacked = len(placed & attacked_queens(state.queens))
    safe = len(placed) - attacked
    if puzzle.open_rows == 0:
        return 1.0
    return min(1.0, max(0.0, (safe - attacked) / puzzle.open_rows))


def task_reward(state: QueensState) -> float:
    return level_reward(is_solved(state.puzzle.size, state.queens), progress(state))
