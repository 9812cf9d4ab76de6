"""Blocksworld oracle: A* over configurations with the misplaced-blocks heuristic (optimal), and a
simple always-valid plan as the fallback past the search limit.

The heuristic (:func:`~pettingllms.envs.blocksworld.state.misplaced`) is admissible and consistent, so
A* returns a shortest plan. Ties are broken deterministically (lower f, then deeper, then first found;
successors in block order), so the same instance always gets the same plan.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque

from pettingllms.envs.blocksworld.state import (
    TABLE,
    Move,
    Stacks,
    is_solved,
    misplaced,
    step_move,
    successors,
)


def _path(parent: dict[Stacks, tuple[Stacks, Move] | None], node: Stacks) -> tuple[Move, ...]:
    moves: list[Move] = []
    while parent[node] is not None:
        node, move = parent[node]
        moves.append(move)
    return tuple(reversed(moves))


def astar_plan(start: Stacks, goal: Stacks, max_states: int = 200_000) -> tuple[Move, ...] | None:
    """A shortest plan from ``start`` to ``goal``, ``()`` when already there, None past ``max_states``
    expanded configurations."""
    if is_solved(start, goal):
        return ()
    counter = itertools.count()
    best_g: dict[Stacks, int] = {start: 0}
    parent: dict[Stacks, tuple[Stacks, Move] | None] = {start: None}
    heap = [(misplaced(start, goal), 0, next(counter), start)]
    closed: set[Stacks] = set()
    while heap:
        _, neg_g, _, node = heapq.heappop(heap)
        if node in closed:
            continue
        if is_solved(node, goal):
            return _path(parent, node)
        closed.add(node)
        if len(closed) > max_states:
            return None
        g = -neg_g + 1
        for move, nxt in successors(node):
            if nxt in closed or best_g.get(nxt, g + 1) <= g:
                continue
            best_g[nxt] = g
            parent[nxt] = (node, move)
            heapq.heappush(heap, (g + misplaced(nxt, goal), -g, next(counter), nxt))
    return None  # cannot happen: every configuration reaches every other


def bfs_plan(start: Stacks, goal: Stacks, max_states: int = 200_000) -> tuple[Move, ...] | None:
    """A shortest plan by breadth-first search (slower than A*; the reference it is tested against)."""
    parent: dict[Stacks, tuple[Stacks, Move] | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if is_solved(node, goal):
            return _path(parent, node)
        for move, nxt in successors(node):
            if nxt not in parent:
                parent[nxt] = (node, move)
                if len(parent) > max_states:
                    return None
                queue.append(nxt)
    return None


def simple_plan(start: Stacks, goal: Stacks) -> tuple[Move, ...]:
    """A valid, not always shortest plan: every misplaced block that stands on another block goes to the
    table (each stack top down), then the goal stacks are built bottom up. At most twice the misplaced count."""
    moves: list[Move] = []
    stacks = start
    goal_by_bottom = {stack[0]: stack for stack in goal}
    in_place: set[str] = set()
    for stack in start:
        target = goal_by_bottom.get(stack[0], ())
        for have, want in zip(stack, target):
            if have != want:
                break
            in_place.add(have)
    for stack in start:
        for block in reversed(stack):
            if block in in_place or block == stack[0]:  # a misplaced bottom block already stands on the table
                break
            moves.append((block, TABLE))
    for stack in goal:
        for below, block in zip(stack, stack[1:]):
            if block not in in_place:
                moves.append((block, below))
    for move in moves:  # the construction guarantees validity; checked, never assumed
        stacks, valid = step_move(stacks, move)
        if not valid:
            raise RuntimeError(f"simple_plan made an invalid move {move} from {start} to {goal}")
    if not is_solved(stacks, goal):
        raise RuntimeError(f"simple_plan did not reach {goal} from {start}")
    return tuple(moves)


def plan(start: Stacks, goal: Stacks, max_states: int = 200_000) -> tuple[Move, ...]:
    """The oracle's plan: A* (shortest) within ``max_states``, else :func:`simple_plan`."""
    found = astar_plan(start, goal, max_states)
    return found if found is not None else simple_plan(start, goal)
