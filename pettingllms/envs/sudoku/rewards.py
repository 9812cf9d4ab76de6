"""Sudoku task reward (global part; the local parts are the shared game rewards in ``envs/game.py``).

Solved: every cell filled and no row, column or box holding a value twice (the givens cannot change, so
this is a solution of the puzzle; its unique one for generated and packaged puzzles). Checked from the
rules, never against the stored solution, so when the episode ends (it ends once solved) tells the agents
nothing they could not check themselves.

Over the cells that were empty in the puzzle: ``correct`` hold the solution's value, ``wrong`` hold
another value. ``progress = (correct - wrong) / empty`` clipped to [0, 1]; ``task_reward = 1.0`` when
solved, else ``0.5 * progress``. A level, not an increment; each wrong value cancels a right one, so
guessing does not pay once there is progress to lose.

Observable reward (:func:`observable_task_reward`): the same shape computed from the rules alone, which
the tool agent's proposal is chosen by (the plan agent is shown the proposal, so it must not reveal the
hidden solution): ``ok`` filled open cells that clash with no other cell, ``clashing`` those that do;
``progress = (ok - clashing) / empty`` clipped to [0, 1]; 1.0 when solved, else ``0.5 * progress``.
"""

from __future__ import annotations

from pettingllms.envs.game import level_reward
from pettingllms.envs.sudoku.state import SudokuState, clashing_cells, is_complete_and_valid


def is_solved(state: SudokuState) -> bool:
    puzzle = state.puzzle
    return is_complete_and_valid(state.grid, puzzle.box_rows, puzzle.box_cols)


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
    return level_reward(is_solved(state), progress(state))


def observable_progress(state: SudokuState) -> float:
    """``(ok - clashing) / empty`` over the open cells, from the rules alone (see the module docstring)."""
    puzzle = state.puzzle
    clashing = clashing_cells(state.grid, puzzle.box_rows, puzzle.box_cols)
    ok = bad = empty = 0
    for r, row in enumerate(puzzle.givens):
        for c, given in enumerate(row):
            if given:
                continue
            empty += 1
            if state.grid[r][c]:
                if (r, c) in clashing:
                    bad += 1
                else:
                    ok += 1
    if empty == 0:
        return 1.0
    return min(1.0, max(0.0, (ok - bad) / empty))


def observable_task_reward(state: SudokuState) -> float:
    return level_reward(is_solved(state), observable_progress(state))
