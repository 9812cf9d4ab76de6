"""Plan-Path oracle: breadth-first search."""

from __future__ import annotations

from collections import deque

from pettingllms.envs.plan_path.state import DELTAS, FREE, Cell, PlanPathLevel


def bfs_distances(grid: tuple[str, ...], goal: Cell) -> tuple[tuple[int, ...], ...]:
    """Distance (in moves) from every cell to ``goal``; ``-1`` for walls and unreachable cells."""
    rows, cols = len(grid), len(grid[0])
    dist = [[-1] * cols for _ in range(rows)]
    if grid[goal[0]][goal[1]] != FREE:
        raise ValueError(f"`goal` {goal} is a wall")
    dist[goal[0]][goal[1]] = 0
    queue = deque([goal])
    while queue:
        r, c = queue.popleft()
        for dr, dc in DELTAS.values():
            nr, nc = r + dr, c + dc
            if 0 <= nr < rows and 0 <= nc < cols and grid[nr][nc] == FREE and dist[nr][nc] < 0:
                dist[nr][nc] = dist[r][c] + 1
                queue.append((nr, nc))
    return tuple(tuple(row) for row in dist)


def shortest_path(level: PlanPathLevel, pos: Cell) -> tuple[str, ...] | None:
    """A shortest move list from ``pos`` to the goal (moves tried in U, D, L, R order); None if none."""
    if not level.is_free(pos):
        raise ValueError(f"`pos` {pos} is not a free cell")
    parent: dict[Cell, tuple[Cell, str] | None] = {pos: None}
    queue = deque([pos])
    while queue:
        cell = queue.popleft()
        if cell == level.goal:
            moves: list[str] = []
            while parent[cell] is not None:
                cell, move = parent[cell]
                moves.append(move)
            return tuple(reversed(moves))
        for move, (dr, dc) in DELTAS.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if nxt not in parent and level.is_free(nxt):
                parent[nxt] = (cell, move)
                queue.append(nxt)
    return None
