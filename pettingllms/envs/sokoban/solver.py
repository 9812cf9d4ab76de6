"""Sokoban oracle: breadth-first search over (player, boxes), pruning corner deadlocks."""

from __future__ import annotations

from collections import deque

from pettingllms.envs.sokoban.state import (
    DELTAS,
    Cell,
    SokobanLevel,
    is_corner_deadlocked,
    is_solved,
    step_move,
)


def solve(level: SokobanLevel, player: Cell, boxes: frozenset[Cell], max_states: int = 200_000) -> tuple[str, ...] | None:
    """A shortest move list that solves the position, ``()`` if already solved, None if none was found.

    Explores at most ``max_states`` positions; None then means "not found within the limit".
    """
    if is_solved(level, boxes):
        return ()
    start = (player, boxes)
    parent: dict[tuple[Cell, frozenset[Cell]], tuple[tuple[Cell, frozenset[Cell]], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for move in DELTAS:
            new_player, new_boxes, valid, pushed = step_move(level, node[0], node[1], move)
            nxt = (new_player, new_boxes)
            if not valid or nxt in parent:
                continue
            if pushed and is_corner_deadlocked(level, new_boxes):
                continue
            parent[nxt] = (node, move)
            if pushed and is_solved(level, new_boxes):
                moves: list[str] = []
                cur = nxt
                while parent[cur] is not None:
                    cur, step = parent[cur]
                    moves.append(step)
                return tuple(reversed(moves))
            if len(parent) > max_states:
                return None
            queue.append(nxt)
    return None
