"""Plan-Path state and move dynamics (pure functions).

The board is a grid of ``'#'`` (wall) and ``'.'`` (free) cells; the player moves U / D / L / R one cell
at a time. A move into a wall or off the grid is rejected (the player stays) and counted as invalid.
Every move of a list is played: an answer succeeds when its *last* move ends on the goal (a list that
passes over the goal and walks on does not; otherwise long lists that sweep the grid would win).
"""

from __future__ import annotations

from dataclasses import dataclass

from pettingllms.envs.game import GameState

Cell = tuple[int, int]
DELTAS: dict[str, Cell] = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
WALL, FREE = "#", "."


@dataclass(frozen=True)
class PlanPathLevel:
    """One immutable Plan-Path instance.

    ``grid``: rows of ``'#'`` / ``'.'``; ``start`` / ``goal``: (row, col); ``distance[r][c]``: BFS
    distance from (r, c) to the goal, ``-1`` for walls and cells that cannot reach it.
    Immutable, so deep copies share it (copying a state copies only what can change).
    """

    grid: tuple[str, ...]
    start: Cell
    goal: Cell
    distance: tuple[tuple[int, ...], ...]

    @property
    def rows(self) -> int:
        return len(self.grid)

    @property
    def cols(self) -> int:
        return len(self.grid[0])

    def is_free(self, cell: Cell) -> bool:
        r, c = cell
        return 0 <= r < self.rows and 0 <= c < self.cols and self.grid[r][c] == FREE

    def dist(self, cell: Cell) -> int:
        return self.distance[cell[0]][cell[1]]

    def __deepcopy__(self, memo: dict) -> PlanPathLevel:
        return self


@dataclass(kw_only=True)
class PlanPathState(GameState):
    """Plan-Path blackboard: the level, where the player is now, and move counters.

    - ``level``: the immutable instance (grid, start, goal, distances).
    - ``pos``: the player's current cell (what prompts show, not the start).
    - ``moves_made``: moves applied to the real state (rejected ones included).
    - ``invalid_moves``: rejected moves (into walls or off the grid).
    """

    level: PlanPathLevel
    pos: Cell
    moves_made: int = 0
    invalid_moves: int = 0


@dataclass(frozen=True)
class MoveResult:
    """Where a move list ends: final cell, moves consumed, how many were rejected, goal reached."""

    pos: Cell
    applied: int
    invalid: int
    reached: bool


def apply_moves(level: PlanPathLevel, pos: Cell, moves: tuple[str, ...] | list[str]) -> MoveResult:
    """Play every move of ``moves`` from ``pos``; ``reached``: the list ends on the goal."""
    applied = invalid = 0
    for move in moves:
        dr, dc = DELTAS[move]
        nxt = (pos[0] + dr, pos[1] + dc)
        applied += 1
        if level.is_free(nxt):
            pos = nxt
        else:
            invalid += 1
    return MoveResult(pos=pos, applied=applied, invalid=invalid, reached=pos == level.goal)
