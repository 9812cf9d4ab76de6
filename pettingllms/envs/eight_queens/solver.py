"""Eight Queens oracle: backtracking over bitmasks (columns and both diagonals), most-constrained row first."""

from __future__ import annotations

import random
from collections.abc import Iterable

from pettingllms.envs.eight_queens.state import Cell

Solution = tuple[int, ...]  # the column of the queen in each row


def _search(size: int, fixed: Iterable[Cell], limit: int, rng: random.Random | None) -> list[Solution]:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"`size` must be an integer >= 1, got {size!r}")
    cols = [-1] * size
    used_cols = used_diag = used_anti = 0  # diag: r + c, anti: r - c + size - 1
    for r, c in fixed:
        if not (0 <= r < size and 0 <= c < size):
            raise ValueError(f"fixed queen {(r, c)} lies outside the {size}x{size} board")
        d, a = 1 << (r + c), 1 << (r - c + size - 1)
        if cols[r] >= 0 or used_cols >> c & 1 or used_diag & d or used_anti & a:
            return []  # the fixed queens already attack each other
        cols[r] = c
        used_cols |= 1 << c
        used_diag |= d
        used_anti |= a
    free_rows = [r for r in range(size) if cols[r] < 0]
    solutions: list[Solution] = []

    def options(r: int) -> list[int]:
        return [c for c in range(size) if not (used_cols >> c & 1 or used_diag >> (r + c) & 1
                                               or used_anti >> (r - c + size - 1) & 1)]

    def recurse() -> bool:
        nonlocal used_cols, used_diag, used_anti
        best, best_options = -1, None
        for r in free_rows:
            if cols[r] >= 0:
                continue
            row_options = options(r)
            if best_options is None or len(row_options) < len(best_options):
                best, best_options = r, row_options
                if len(row_options) <= 1:
                    break
        if best_options is None:
            solutions.append(tuple(cols))
            return len(solutions) >= limit
        if rng is not None:
            rng.shuffle(best_options)
        r = best
        for c in best_options:
            d, a = 1 << (r + c), 1 << (r - c + size - 1)
            cols[r] = c
            used_cols |= 1 << c
            used_diag |= d
            used_anti |= a
            if recurse():
                return True
            cols[r] = -1
            used_cols &= ~(1 << c)
            used_diag &= ~d
            used_anti &= ~a
        return False

    recurse()
    return solutions


def solve(size: int, fixed: Iterable[Cell] = ()) -> Solution | None:
    """A completion of the ``fixed`` queens to ``size`` non-attacking queens, or None when none exists."""
    found = _search(size, fixed, limit=1, rng=None)
    return found[0] if found else None


def count_solutions(size: int, fixed: Iterable[Cell] = (), limit: int = 1_000_000) -> int:
    """Number of completions of ``fixed``; counting stops at ``limit``."""
    if limit < 1:
        raise ValueError(f"`limit` must be >= 1, got {limit}")
    return len(_search(size, fixed, limit=limit, rng=None))


def random_solution(size: int, rng: random.Random, fixed: Iterable[Cell] = ()) -> Solution | None:
    """A random completion of ``fixed``: backtracking with the column order shuffled by ``rng``."""
    found = _search(size, fixed, limit=1, rng=rng)
    return found[0] if found else None
