"""Blocksworld state and dynamics (pure functions).

Blocks ``A``, ``B``, ... stand in stacks on a table of unlimited size. A configuration is the set of
stacks, each listed bottom to top; its canonical form sorts the stacks by their bottom block (where on
the table a stack stands does not matter). A move ``(X, Y)`` puts block X onto block Y, or onto the
table when Y is :data:`TABLE`. It is valid when X is clear (no block on it), Y is a clear block other
than X or the table, and X is not already there (on Y, or on the table); an invalid move changes
nothing and is counted. Every move of a list is played: an answer succeeds when the configuration
*after its last move* equals the goal (a list that passes through the goal and moves on does not).
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from pettingllms.envs.game import GameState

Stacks = tuple[tuple[str, ...], ...]  # canonical: stacks bottom to top, sorted by their bottom block
Move = tuple[str, str]  # (block, destination block or TABLE)
TABLE = "table"
MAX_BLOCKS = len(string.ascii_uppercase)


def block_names(num_blocks: int) -> tuple[str, ...]:
    """``A``, ``B``, ... for ``num_blocks`` blocks (2 to 26)."""
    if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or not 2 <= num_blocks <= MAX_BLOCKS:
        raise ValueError(f"`num_blocks` must be an integer in [2, {MAX_BLOCKS}], got {num_blocks!r}")
    return tuple(string.ascii_uppercase[:num_blocks])


def canonical(stacks) -> Stacks:
    """The canonical form of any iterable of stacks (empty stacks dropped)."""
    return tuple(sorted(tuple(stack) for stack in stacks if stack))


def format_stacks(stacks: Stacks) -> str:
    """``(("A", "C"), ("B",))`` -> ``"A C | B"`` (stacks bottom to top, ``|`` between stacks)."""
    return " | ".join(" ".join(stack) for stack in stacks)


@dataclass(frozen=True)
class BlocksProblem:
    """One immutable instance: the blocks, the start and goal configurations, the optimal plan length.

    ``optimal_moves`` is the length of a shortest plan from ``start`` to ``goal`` (the planner's).
    Immutable, so deep copies share it.
    """

    blocks: tuple[str, ...]
    start: Stacks
    goal: Stacks
    optimal_moves: int

    def __deepcopy__(self, memo: dict) -> BlocksProblem:
        return self


@dataclass(kw_only=True)
class BlocksState(GameState):
    """Blocksworld blackboard: the problem, the current configuration, move counters.

    - ``problem``: blocks, start, goal (immutable).
    - ``stacks``: the current configuration (canonical), what prompts show.
    - ``moves_made``: moves applied to the real state (rejected ones included).
    - ``invalid_moves``: rejected moves.
    """

    problem: BlocksProblem
    stacks: Stacks
    moves_made: int = 0
    invalid_moves: int = 0


def clear_blocks(stacks: Stacks) -> tuple[str, ...]:
    """The blocks with nothing on them (the top of every stack), sorted."""
    return tuple(sorted(stack[-1] for stack in stacks))


def step_move(stacks: Stacks, move: Move) -> tuple[Stacks, bool]:
    """One move: (new configuration, valid). An invalid move returns ``stacks`` unchanged."""
    block, dest = move
    source = next((i for i, stack in enumerate(stacks) if stack[-1] == block), None)
    if source is None or block == dest:  # not clear (or not a block), or onto itself
        return stacks, False
    rest = [list(stack) for stack in stacks]
    if dest == TABLE:
        if len(rest[source]) == 1:  # already on the table
            return stacks, False
        rest[source].pop()
        rest.append([block])
        return canonical(rest), True
    target = next((i for i, stack in enumerate(stacks) if stack[-1] == dest), None)
    if target is None:  # the destination is not clear (or not a block)
        return stacks, False
    rest[source].pop()
    rest[target].append(block)
    return canonical(rest), True


def successors(stacks: Stacks) -> list[tuple[Move, Stacks]]:
    """Every valid move from ``stacks`` with its result, in a fixed order (block, then destination)."""
    result = []
    tops = clear_blocks(stacks)
    for block in tops:
        for dest in (TABLE, *tops):
            new, valid = step_move(stacks, (block, dest))
            if valid:
                result.append(((block, dest), new))
    return result


def misplaced(stacks: Stacks, goal: Stacks) -> int:
    """Blocks not in their goal position: a block is in place when it and every block under it stand as
    in the goal (same block below, down to the table). Each misplaced block must move at least once, so
    this is a lower bound on the moves left, and one move changes it by at most 1 (a consistent heuristic).
    """
    goal_by_bottom = {stack[0]: stack for stack in goal}
    placed = 0
    for stack in stacks:
        target = goal_by_bottom.get(stack[0], ())
        for have, want in zip(stack, target):
            if have != want:
                break
            placed += 1
    return sum(len(stack) for stack in stacks) - placed


def is_solved(stacks: Stacks, goal: Stacks) -> bool:
    return stacks == goal


@dataclass(frozen=True)
class MoveResult:
    """Effect of a move list: final configuration, moves consumed, moves rejected, goal reached."""

    stacks: Stacks
    applied: int
    invalid: int
    solved: bool


def apply_moves(stacks: Stacks, goal: Stacks, moves: tuple[Move, ...] | list[Move]) -> MoveResult:
    """Play every move of ``moves``; ``solved``: the configuration after the last move is the goal."""
    invalid = 0
    for move in moves:
        stacks, valid = step_move(stacks, move)
        invalid += not valid
    return MoveResult(stacks, len(moves), invalid, is_solved(stacks, goal))
