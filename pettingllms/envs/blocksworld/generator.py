"""Seeded Blocksworld problems: a random start and a random goal configuration, with a known optimal
plan length in a configured range.

A random configuration shuffles the blocks and cuts the sequence into stacks (each gap a cut with
probability 1/2). The goal is drawn the same way until it differs from the start; the A* planner then
measures the shortest plan, and the pair is kept when its length lies in
``[min_plan_length, max_plan_length]`` (a pair the planner cannot measure within ``max_states`` is
drawn again). Every configuration can reach every other, so every problem is solvable; the planner's
length makes the difficulty explicit (``BlocksProblem.optimal_moves``).
"""

from __future__ import annotations

import random

from pettingllms.envs.blocksworld.solver import astar_plan
from pettingllms.envs.blocksworld.state import BlocksProblem, Stacks, block_names, canonical


def random_stacks(rng: random.Random, blocks: tuple[str, ...]) -> Stacks:
    order = list(blocks)
    rng.shuffle(order)
    stacks: list[list[str]] = [[order[0]]]
    for block in order[1:]:
        if rng.random() < 0.5:
            stacks.append([block])
        else:
            stacks[-1].append(block)
    return canonical(stacks)


def generate_problem(
    seed: int,
    num_blocks: int = 4,
    min_plan_length: int = 2,
    max_plan_length: int | None = None,
    *,
    max_states: int = 200_000,
    max_attempts: int = 500,
) -> BlocksProblem:
    """The problem for ``seed``: start != goal, optimal plan length in the range. Same arguments, same
    problem; raises ``ValueError`` when none is found in ``max_attempts``."""
    blocks = block_names(num_blocks)
    if min_plan_length < 1 or (max_plan_length is not None and max_plan_length < min_plan_length):
        raise ValueError(
            f"need 1 <= `min_plan_length` <= `max_plan_length`, got {min_plan_length} and {max_plan_length}"
        )
    rng = random.Random(f"blocksworld:{num_blocks}:{seed}")
    for _ in range(max_attempts):
        start = random_stacks(rng, blocks)
        goal = random_stacks(rng, blocks)
        if goal == start:
            continue
        moves = astar_plan(start, goal, max_states)
        if moves is None:
            continue
        if len(moves) < min_plan_length or (max_plan_length is not None and len(moves) > max_plan_length):
            continue
        return BlocksProblem(blocks, start, goal, len(moves))
    raise ValueError(
        f"no Blocksworld problem found in {max_attempts} attempts for seed {seed} ({num_blocks} blocks, "
        f"plan length {min_plan_length}..{max_plan_length}); widen the range"
    )
