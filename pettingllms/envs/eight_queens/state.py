"""Eight Queens state, attack checks and the effect of actions (pure functions).

An ``size x size`` board (rows and columns 0-based here, 1-based in prompts and answers). The puzzle's
*fixed* queens are pre-placed and cannot be removed; the agents place and remove the others. Queens may
attack each other on the board (the rules only decide success): the puzzle is solved when the board holds
``size`` queens and no two share a row, a column or a diagonal.

Actions (what an answer parses to, :mod:`pettingllms.envs.eight_queens.parsers`):

* ``("+", r, c)``: place a queen on (r, c); rejected when a queen stands there;
* ``("-", r, c)``: remove the queen on (r, c); rejected when the cell is empty or the queen is fixed;
* ``("=", r, c)``: row r holds exactly one queen, at column c (``c = -1``: no queen), the other queens
  of the row are removed; rejected (the row unchanged) when a fixed queen of the row would go.

A rejected action changes nothing and is counted as invalid; the others are applied in order.
"""

from __future__ import annotations

from dataclasses import dataclass

from pettingllms.envs.game import GameState

Cell = tuple[int, int]
Action = tuple[str, int, int]  # (op, row, col): op "+" place, "-" remove, "=" set the row (col -1: empty)
OPS: tuple[str, ...] = ("+", "-", "=")


@dataclass(frozen=True)
class QueensPuzzle:
    """One immutable instance: board size and the fixed (pre-placed, non-attacking) queens."""

    size: int
    fixed: frozenset[Cell]

    @property
    def open_rows(self) -> int:
        """Queens still to place in a solution (``size`` minus the fixed ones)."""
        return self.size - len(self.fixed)

    def __deepcopy__(self, memo: dict) -> QueensPuzzle:
        return self


@dataclass(kw_only=True)
class QueensState(GameState):
    """Eight Queens blackboard: the puzzle, the queens on the board now, rejected actions.

    - ``puzzle``: size and fixed queens (immutable).
    - ``queens``: every queen on the board (the fixed ones included), what prompts show.
    - ``invalid_actions``: actions rejected so far (real actions only, not tool calls).
    """

    puzzle: QueensPuzzle
    queens: frozenset[Cell]
    invalid_actions: int = 0


def attacks(a: Cell, b: Cell) -> bool:
    """Whether two distinct queens share a row, a column or a diagonal."""
    return a != b and (a[0] == b[0] or a[1] == b[1] or abs(a[0] - b[0]) == abs(a[1] - b[1]))


def attacking_pairs(queens: frozenset[Cell] | set[Cell]) -> list[tuple[Cell, Cell]]:
    """Every attacking pair, each once, sorted."""
    ordered = sorted(queens)
    return [(a, b) for i, a in enumerate(ordered) for b in ordered[i + 1:] if attacks(a, b)]


def attacked_queens(queens: frozenset[Cell] | set[Cell]) -> frozenset[Cell]:
    """Queens that attack (and so are attacked by) at least one other queen."""
    return frozenset(q for pair in attacking_pairs(queens) for q in pair)


def is_solved(size: int, queens: frozenset[Cell] | set[Cell]) -> bool:
    """``size`` queens on the board, no two attacking (one per row and column, then)."""
    return len(queens) == size and not attacking_pairs(queens)


def cell_name(cell: Cell) -> str:
    """``(0, 2)`` -> ``"R1C3"`` (1-based, the answer format's notation)."""
    return f"R{cell[0] + 1}C{cell[1] + 1}"


@dataclass(frozen=True)
class ActionResult:
    """Effect of a list of actions: the new queens, queens added or removed, actions rejected."""

    queens: frozenset[Cell]
    changed: int
    invalid: int


def apply_actions(puzzle: QueensPuzzle, queens: frozenset[Cell], actions: tuple[Action, ...] | list[Action]) -> ActionResult:
    """Apply ``actions`` in order (semantics in the module docstring); rejected ones are counted."""
    board = set(queens)
    changed = invalid = 0
    for op, r, c in actions:
        if not (0 <= r < puzzle.size and -1 <= c < puzzle.size) or (op != "=" and c < 0):
            raise ValueError(f"action {(op, r, c)} lies outside the {puzzle.size}x{puzzle.size} board")
        if op == "+":
            if (r, c) in board:
                invalid += 1
            else:
                board.add((r, c))
                changed += 1
        elif op == "-":
            if (r, c) not in board or (r, c) in puzzle.fixed:
                invalid += 1
            else:
                board.remove((r, c))
                changed += 1
        elif op == "=":
            row = {q for q in board if q[0] == r}
            target = {(r, c)} if c >= 0 else set()
            if any(q not in target for q in row & puzzle.fixed):
                invalid += 1
                continue
            changed += len(row - target) + len(target - row)
            board = (board - row) | target
        else:
            raise ValueError(f"unknown action {op!r}; expected one of {list(OPS)}")
    return ActionResult(frozenset(board), changed, invalid)
