"""Seeded Plan-Path levels: exact wall count from the density, random start and goal, BFS-reachable."""

from __future__ import annotations

import random

from pettingllms.envs.plan_path.solver import bfs_distances
from pettingllms.envs.plan_path.state import FREE, WALL, PlanPathLevel


def generate_level(
    seed: int, rows: int = 10, cols: int = 10, wall_density: float = 0.22, max_attempts: int = 1000
) -> PlanPathLevel:
    """The level for ``seed``: ``round(wall_density * rows * cols)`` walls, start != goal, goal reachable.

    Draws come from a generator owned by this call and seeded by ``seed`` only, so the same arguments
    always give the same level. Raises ``ValueError`` when no reachable layout is found.
    """
    if rows < 1 or cols < 1 or rows * cols < 2:
        raise ValueError(f"`rows` x `cols` must hold at least 2 cells, got {rows} x {cols}")
    if not 0.0 <= wall_density < 1.0:
        raise ValueError(f"`wall_density` must be in [0, 1), got {wall_density}")
    cells = [(r, c) for r in range(rows) for c in range(cols)]
    n_walls = round(wall_density * rows * cols)
    if rows * cols - n_walls < 2:
        raise ValueError(f"`wall_density` {wall_density} leaves fewer than 2 free cells on {rows} x {cols}")
    rng = random.Random(f"plan_path:{seed}")
    for _ in range(max_attempts):
        walls = set(rng.sample(cells, n_walls))
        grid = tuple("".join(WALL if (r, c) in walls else FREE for c in range(cols)) for r in range(rows))
        free = [cell for cell in cells if cell not in walls]
        start, goal = rng.sample(free, 2)
        distance = bfs_distances(grid, goal)
        if distance[start[0]][start[1]] > 0:
            return PlanPathLevel(grid=grid, start=start, goal=goal, distance=distance)
    raise ValueError(
        f"no level with a reachable goal in {max_attempts} attempts for seed {seed}; lower `wall_density` "
        f"(got {wall_density})"
    )
