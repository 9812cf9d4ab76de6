"""Sudoku oracle: backtracking over bitmasks, most-constrained cell first."""

from __future__ import annotations

import random

from pettingllms.envs.sudoku.state import Grid


def _search(grid: Grid, box_rows: int, box_cols: int, limit: int, rng: random.Random | None) -> list[Grid]:
    size = box_rows * box_cols
    if len(grid) != size or any(len(row) != size for row in grid):
        raise ValueError(f"`grid` must be {size}x{size} for boxes of {box_rows}x{box_cols}")
    full = (1 << size) - 1
    boxes_per_row = size // box_cols
    cells = [list(row) for row in grid]
    rows, cols, boxes = [0] * size, [0] * size, [0] * size
    empties: list[tuple[int, int, int]] = []
    for r in range(size):
        for c in range(size):
            b = (r // box_rows) * boxes_per_row + c // box_cols
            v = cells[r][c]
            if not 0 <= v <= size:
                raise ValueError(f"`grid` value {v} at row {r + 1}, col {c + 1} is outside 0..{size}")
            if v == 0:
                empties.append((r, c, b))
                continue
            bit = 1 << (v - 1)
            if (rows[r] | cols[c] | boxes[b]) & bit:
                return []  # the givens already break a rule
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit
    solutions: list[Grid] = []

    def recurse() -> bool:
        best, best_mask, best_count = None, 0, size + 1
        for cell in empties:
            r, c, b = cell
            if cells[r][c]:
                continue
            mask = full & ~(rows[r] | cols[c] | boxes[b])
            count = mask.bit_count()
            if count < best_count:
                best, best_mask, best_count = cell, mask, count
                if count <= 1:
                    break
        if best is None:
            solutions.append(tuple(tuple(row) for row in cells))
            return len(solutions) >= limit
        if best_count == 0:
            return False
        r, c, b = best
        values = [v for v in range(1, size + 1) if best_mask >> (v - 1) & 1]
        if rng is not None:
            rng.shuffle(values)
        for v in values:
            bit = 1 << (v - 1)
            cells[r][c] = v
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit
            if recurse():
                return True
            cells[r][c] = 0
            rows[r] &= ~bit
            cols[c] &= ~bit
            boxes[b] &= ~bit
        return False

    recurse()
    return solutions


def solve(grid: Grid, box_rows: int, box_cols: int) -> Grid | None:
    """A solution of ``grid`` (0 = empty), or None when it has none."""
    found = _search(grid, box_rows, box_cols, limit=1, rng=None)
    return found[0] if found else None


def count_solutions(grid: Grid, box_rows: int, box_cols: int, limit: int = 2) -> int:
    """Number of solutions, counting stops at ``limit`` (2 is enough to test uniqueness)."""
    if limit < 1:
        raise ValueError(f"`limit` must be >= 1, got {limit}")
    return len(_search(grid, box_rows, box_cols, limit=limit, rng=None))


def random_solution(box_rows: int, box_cols: int, rng: random.Random) -> Grid:
    """A random full grid: backtracking with the value order shuffled by ``rng``."""
    size = box_rows * box_cols
    empty = tuple(tuple(0 for _ in range(size)) for _ in range(size))
    return _search(empty, box_rows, box_cols, limit=1, rng=rng)[0]
