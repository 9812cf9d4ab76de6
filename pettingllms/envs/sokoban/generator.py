"""Seeded Sokoban levels, solvable by construction.

1. Carve a room: a random walk inside the border walls makes the floor.
2. Put ``num_boxes`` boxes on as many goal cells and the player on another floor cell (a solved state).
3. Play backwards: the player walks randomly and, when a box is behind it, pulls it along (the reverse
   of a push). Every reverse step can be undone by a forward move, so every visited state is solvable.
4. Keep the visited state whose boxes are farthest (summed Manhattan distance) from where they started,
   provided it is not already solved, then walk the player randomly without pulling (plain moves are
   reversible too), so it does not start right behind the box it last pulled.
"""

from __future__ import annotations

import random

from pettingllms.envs.sokoban.state import DELTAS, Cell, SokobanLevel


def _carve(rng: random.Random, rows: int, cols: int) -> set[Cell]:
    interior = (rows - 2) * (cols - 2)
    pos = (rng.randint(1, rows - 2), rng.randint(1, cols - 2))
    floor = {pos}
    direction = rng.choice(list(DELTAS.values()))
    for _ in range(3 * interior):
        if rng.random() < 0.35:
            direction = rng.choice(list(DELTAS.values()))
        nxt = (pos[0] + direction[0], pos[1] + direction[1])
        if 1 <= nxt[0] <= rows - 2 and 1 <= nxt[1] <= cols - 2:
            pos = nxt
            floor.add(pos)
    return floor


def _reverse_play(
    rng: random.Random, floor: set[Cell], goals: list[Cell], player: Cell, steps: int, pull_prob: float
) -> tuple[Cell, tuple[Cell, ...], int]:
    boxes = list(goals)  # box i starts on goal i
    best: tuple[int, Cell, tuple[Cell, ...]] = (0, player, tuple(boxes))
    moves = list(DELTAS.values())
    for _ in range(steps):
        dr, dc = rng.choice(moves)
        target = (player[0] + dr, player[1] + dc)
        if target not in floor or target in boxes:
            continue
        behind = (player[0] - dr, player[1] - dc)
        if behind in boxes and rng.random() < pull_prob:
            boxes[boxes.index(behind)] = player
        player = target
        score = sum(abs(b[0] - g[0]) + abs(b[1] - g[1]) for b, g in zip(boxes, goals))
        if score > best[0] and set(boxes) != set(goals):
            best = (score, player, tuple(boxes))
    return best[1], best[2], best[0]


def _wander(rng: random.Random, floor: set[Cell], boxes: set[Cell], player: Cell, steps: int) -> Cell:
    moves = list(DELTAS.values())
    for _ in range(steps):
        dr, dc = rng.choice(moves)
        target = (player[0] + dr, player[1] + dc)
        if target in floor and target not in boxes:
            player = target
    return player


def generate_level(
    seed: int,
    rows: int = 6,
    cols: int = 6,
    num_boxes: int = 1,
    *,
    reverse_steps: int = 300,
    min_box_distance: int = 2,
    max_attempts: int = 200,
) -> SokobanLevel:
    """The level for ``seed``; its boxes start at least ``min_box_distance`` (summed) from their goals.

    Same arguments, same level. Raises ``ValueError`` when no level is found in ``max_attempts``.
    """
    if rows < 4 or cols < 4:
        raise ValueError(f"`rows` and `cols` must be >= 4 (border walls included), got {rows} x {cols}")
    if num_boxes < 1:
        raise ValueError(f"`num_boxes` must be >= 1, got {num_boxes}")
    if num_boxes + 1 > (rows - 2) * (cols - 2):
        raise ValueError(f"`num_boxes` {num_boxes} does not fit in a {rows} x {cols} room")
    rng = random.Random(f"sokoban:{seed}")
    border = {(r, c) for r in range(rows) for c in range(cols) if r in (0, rows - 1) or c in (0, cols - 1)}
    for _ in range(max_attempts):
        floor = _carve(rng, rows, cols)
        if len(floor) < num_boxes + 2:
            continue
        cells = sorted(floor)
        goals = rng.sample(cells, num_boxes)
        player = rng.choice([c for c in cells if c not in goals])
        player, boxes, score = _reverse_play(rng, floor, goals, player, reverse_steps, pull_prob=0.8)
        if score < min_box_distance:
            continue
        player = _wander(rng, floor, set(boxes), player, steps=len(floor))
        walls = frozenset({(r, c) for r in range(rows) for c in range(cols)} - floor) | frozenset(border)
        return SokobanLevel(rows, cols, walls, frozenset(goals), player, frozenset(boxes))
    raise ValueError(
        f"no Sokoban level found in {max_attempts} attempts for seed {seed} ({rows} x {cols}, {num_boxes} boxes)"
    )
