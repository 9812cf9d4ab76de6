"""Sokoban state and dynamics (pure functions).

The player moves U / D / L / R. Walking into a wall, or pushing a box into a wall or another box, is
rejected (nothing moves) and counted as invalid. A box can only be pushed, never pulled. A box that is
not on a goal and sits in a corner (walls on two perpendicular sides) can never move again: the state
is deadlocked (unwinnable). A move list stops at the first solved or deadlocked state.
"""

from __future__ import annotations

from dataclasses import dataclass

from pettingllms.envs.game import GameState

Cell = tuple[int, int]
DELTAS: dict[str, Cell] = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


@dataclass(frozen=True)
class SokobanLevel:
    """One immutable Sokoban instance: size, walls, goals, and the start positions.

    Cells outside the grid count as walls. Immutable, so deep copies share it.
    """

    rows: int
    cols: int
    walls: frozenset[Cell]
    goals: frozenset[Cell]
    start_player: Cell
    start_boxes: frozenset[Cell]

    def is_wall(self, cell: Cell) -> bool:
        r, c = cell
        return not (0 <= r < self.rows and 0 <= c < self.cols) or cell in self.walls

    def __deepcopy__(self, memo: dict) -> SokobanLevel:
        return self


@dataclass(kw_only=True)
class SokobanState(GameState):
    """Sokoban blackboard: the level, the current player and box positions, counters.

    - ``level``: walls, goals and the start (immutable).
    - ``player`` / ``boxes``: current positions (what prompts show).
    - ``moves_made``: moves applied to the real state (rejected ones included).
    - ``pushes``: moves that pushed a box.
    - ``invalid_moves``: rejected moves.
    """

    level: SokobanLevel
    player: Cell
    boxes: frozenset[Cell]
    moves_made: int = 0
    pushes: int = 0
    invalid_moves: int = 0


def is_solved(level: SokobanLevel, boxes: frozenset[Cell]) -> bool:
    return boxes == level.goals


def is_corner_deadlocked(level: SokobanLevel, boxes: frozenset[Cell]) -> bool:
    """Some box off the goals has walls on two perpendicular sides (it can never move again)."""
    for r, c in boxes:
        if (r, c) in level.goals:
            continue
        vertical = level.is_wall((r - 1, c)) or level.is_wall((r + 1, c))
        horizontal = level.is_wall((r, c - 1)) or level.is_wall((r, c + 1))
        if vertical and horizontal:
            return True
    return False


def step_move(level: SokobanLevel, player: Cell, boxes: frozenset[Cell], move: str) -> tuple[Cell, frozenset[Cell], bool, bool]:
    """One move: (player, boxes, valid, pushed)."""
    dr, dc = DELTAS[move]
    target = (player[0] + dr, player[1] + dc)
    if level.is_wall(target):
        return player, boxes, False, False
    if target in boxes:
        beyond = (target[0] + dr, target[1] + dc)
        if level.is_wall(beyond) or beyond in boxes:
            return player, boxes, False, False
        return target, (boxes - {target}) | {beyond}, True, True
    return target, boxes, True, False


@dataclass(frozen=True)
class MoveResult:
    """Effect of a move list: final positions, moves consumed, pushes, rejected moves, status."""

    player: Cell
    boxes: frozenset[Cell]
    applied: int
    pushes: int
    invalid: int
    solved: bool
    deadlocked: bool


def apply_moves(level: SokobanLevel, player: Cell, boxes: frozenset[Cell], moves: tuple[str, ...] | list[str]) -> MoveResult:
    """Play ``moves``; stop consuming them once solved or deadlocked."""
    applied = pushes = invalid = 0
    solved, deadlocked = is_solved(level, boxes), is_corner_deadlocked(level, boxes)
    for move in moves:
        if solved or deadlocked:
            break
        player, boxes, valid, pushed = step_move(level, player, boxes, move)
        applied += 1
        invalid += not valid
        pushes += pushed
        if pushed:
            solved, deadlocked = is_solved(level, boxes), is_corner_deadlocked(level, boxes)
    return MoveResult(player, boxes, applied, pushes, invalid, solved, deadlocked)
