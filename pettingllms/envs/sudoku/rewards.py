"""Sudoku task reward (global part; the local parts are the shared game rewards in ``envs/game.py``).

Over the cells that were empty in the puzzle: ``correct`` hold the solution's value, ``wrong`` hold
another value. ``progress = (correct - wrong) / empty`` clipped to [0, 1]; ``task_reward = 1.0`` when the
grid equals the (unique) solution, else ``0.5 * progress``. A level, not an increment; each wrong
value cancels a right one, so guessing does not pay once there is progress to lose.
"""

from __future__ import annotations

from pettingllms.envs.game import level_reward
from pettingllms.envs.sudoku.state import SudokuState


def progress(state: SudokuState) -> float:
    puzzle = state.puzzle
    correct = wrong = empty = 0
    for grow, srow, crow in zip(puzzle.givens, puzzle.solution, state.grid):
        for given, solved, current in zip(grow, srow, crow):
            if given:
                continue
            empty += 1
            if current == solved:
                correct += 1
            elif current:
                wrong += 1
    if empty == 0:
        return 1.0
    return min(1.0, max(0.0, (correct - wrong) / empty))


def task_reward(state: SudokuState) -> float:
    return level_reward(state.grid == state.puzzle.solution, progress(state))
