"""Seeded Eight Queens puzzles, solvable by the solver's word.

1. The randomised solver (column order shuffled by the seed's generator) finds a full placement.
2. ``givens`` of its rows, drawn at random, become the fixed queens.
3. The deterministic solver must complete the fixed queens (it always can: they come from a solution);
   a puzzle it cannot complete is an error, never returned.

Same arguments, same puzzle. Different seeds mostly give different puzzles, but the space is finite: the 92
solutions of 8x8 hold 64 distinct puzzles with 1 given, 1,052 with 2, 4,032 with 3 and 6,040 with 4
(10x10 with 3: 39,840), so with few givens held-out seeds repeat training puzzles; ``givens = 0`` is the
empty board for every seed.
"""

from __future__ import annotations

import random

from pettingllms.envs.eight_queens.solver import random_solution, solve
from pettingllms.envs.eight_queens.state import QueensPuzzle

MIN_SIZE, MAX_SIZE = 4, 16


def check_size(size: int, givens: int) -> None:
    if isinstance(size, bool) or not isinstance(size, int) or not MIN_SIZE <= size <= MAX_SIZE:
        raise ValueError(f"`size` must be an integer in [{MIN_SIZE}, {MAX_SIZE}] (2 and 3 have no solution), got {size!r}")
    if isinstance(givens, bool) or not isinstance(givens, int) or not 0 <= givens < size:
        raise ValueError(f"`givens` must be an integer in [0, {size - 1}] (the start must not be solved), got {givens!r}")


def generate_puzzle(seed: int, size: int = 8, givens: int = 3) -> QueensPuzzle:
    """The puzzle for (``seed``, ``size``, ``givens``): ``givens`` fixed queens that a solution completes."""
    check_size(size, givens)
    rng = random.Random(f"eight_queens:{size}:{seed}")
    solution = random_solution(size, rng)
    if solution is None:  # cannot happen for sizes >= 4
        raise ValueError(f"no {size}-queens solution exists")
    rows = sorted(rng.sample(range(size), givens))
    fixed = frozenset((r, solution[r]) for r in rows)
    if solve(size, fixed) is None:
        raise ValueError(f"eight_queens seed {seed}: the solver cannot complete the fixed queens {sorted(fixed)}")
    return QueensPuzzle(size, fixed)
