"""Sudoku state, cell encoding and rule checks (pure functions).

A ``size x size`` grid (size 4, 6, 8, 9, 12, 16, ...) split into ``box_rows x box_cols`` boxes; values
``1..size``, ``0`` for an empty cell. Givens cannot be changed: an answer that changes one has that
part rejected (counted as invalid); every other cell may be set, overwritten or cleared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pettingllms.envs.game import GameState

Grid = tuple[tuple[int, ...], ...]
Cell = tuple[int, int]  # (row, col), 0-based
Fill = tuple[int, int, int]  # (row, col, value), 0-based row/col, value 0 clears
_SYMBOLS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def box_shape(size: int) -> tuple[int, int]:
    """Box rows and columns for a ``size`` grid: the most square factorisation (4 -> 2x2, 6 -> 2x3)."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 4 or size >= len(_SYMBOLS):
        raise ValueError(f"`size` must be an integer in [4, {len(_SYMBOLS) - 1}], got {size!r}")
    box_rows = max(d for d in range(1, math.isqrt(size) + 1) if size % d == 0)
    if box_rows == 1:
        raise ValueError(f"`size` must not be prime (boxes need two sides > 1), got {size}")
    return box_rows, size // box_rows


def encode_grid(grid: Grid) -> str:
    """Row-major one-character cells, ``.`` for empty (``1.34/...`` without the slashes)."""
    return "".join(_SYMBOLS[v] if v else "." for row in grid for v in row)


def decode_grid(text: str, size: int) -> Grid:
    if len(text) != size * size:
        raise ValueError(f"a {size}x{size} grid needs {size * size} cells, got {len(text)}")
    values = [0 if ch == "." else _SYMBOLS.index(ch.upper()) for ch in text]
    if any(v > size for v in values):
        raise ValueError(f"grid holds a value above {size}")
    return tuple(tuple(values[r * size:(r + 1) * size]) for r in range(size))


@dataclass(frozen=True)
class SudokuPuzzle:
    """One immutable puzzle: box shape, givens (0 = empty) and its unique solution."""

    box_rows: int
    box_cols: int
    givens: Grid
    solution: Grid

    @property
    def size(self) -> int:
        return self.box_rows * self.box_cols

    @property
    def empty_cells(self) -> int:
        return sum(v == 0 for row in self.givens for v in row)

    def __deepcopy__(self, memo: dict) -> SudokuPuzzle:
        return self


@dataclass(kw_only=True)
class SudokuState(GameState):
    """Sudoku blackboard: the puzzle, the current grid, and rejected fills.

    - ``puzzle``: givens and solution (immutable; prompts never show the solution).
    - ``grid``: the current grid (givens plus the plan agent's fills).
    - ``invalid_fills``: fills rejected because they changed a given.
    """

    puzzle: SudokuPuzzle
    grid: Grid
    invalid_fills: int = 0


def units(box_rows: int, box_cols: int) -> list[tuple[str, tuple[Cell, ...]]]:
    """Every row, column and box as ``(name, cells)``, names 1-based (``"row 1"``, ``"box 4"``)."""
    size = box_rows * box_cols
    found: list[tuple[str, tuple[Cell, ...]]] = []
    for i in range(size):
        found.append((f"row {i + 1}", tuple((i, c) for c in range(size))))
    for i in range(size):
        found.append((f"column {i + 1}", tuple((r, i) for r in range(size))))
    for b in range(size):
        r0, c0 = (b // (size // box_cols)) * box_rows, (b % (size // box_cols)) * box_cols
        cells = tuple((r, c) for r in range(r0, r0 + box_rows) for c in range(c0, c0 + box_cols))
        found.append((f"box {b + 1}", cells))
    return found


def conflicts(grid: Grid, box_rows: int, box_cols: int) -> list[str]:
    """Rule violations of the filled cells, e.g. ``"row 2 has two 3s"`` (1-based, empties ignored)."""
    found: list[str] = []
    for name, cells in units(box_rows, box_cols):
        values = [grid[r][c] for r, c in cells]
        for v in sorted({v for v in values if v}):
            if values.count(v) > 1:
                found.append(f"{name} has {values.count(v)} {v}s")
    return found


def clashing_cells(grid: Grid, box_rows: int, box_cols: int) -> frozenset[Cell]:
    """The filled cells that share their value with another cell of a row, column or box."""
    found: set[Cell] = set()
    for _, cells in units(box_rows, box_cols):
        by_value: dict[int, list[Cell]] = {}
        for r, c in cells:
            if grid[r][c]:
                by_value.setdefault(grid[r][c], []).append((r, c))
        for same in by_value.values():
            if len(same) > 1:
                found.update(same)
    return frozenset(found)


def is_complete_and_valid(grid: Grid, box_rows: int, box_cols: int) -> bool:
    """Every cell filled and no rule broken: with the givens kept, a solution of the puzzle (its solution,
    when it has only one), as the agents can check from the rules."""
    return all(v for row in grid for v in row) and not conflicts(grid, box_rows, box_cols)


@dataclass(frozen=True)
class FillResult:
    """Effect of a list of fills: the new grid, how many cells changed, how many fills were rejected."""

    grid: Grid
    changed: int
    invalid: int


def apply_fills(puzzle: SudokuPuzzle, grid: Grid, fills: tuple[Fill, ...] | list[Fill]) -> FillResult:
    """Set each (row, col, value); a fill that would change a given is rejected and counted."""
    cells = [list(row) for row in grid]
    changed = invalid = 0
    for r, c, v in fills:
        given = puzzle.givens[r][c]
        if given:
            invalid += v != given
            continue
        if cells[r][c] != v:
            cells[r][c] = v
            changed += 1
    return FillResult(tuple(tuple(row) for row in cells), changed, invalid)
