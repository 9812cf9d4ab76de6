"""Blocksworld prompt text and rendering (the goal, then the current stacks)."""

from __future__ import annotations

from pettingllms.envs.blocksworld.state import BlocksState, clear_blocks, format_stacks, misplaced
from pettingllms.envs.game import GamePrompts

PROMPTS = GamePrompts(
    task=(
        "Blocksworld: restack the lettered blocks into the goal stacks. Stacks are written bottom to top, "
        "'|' between stacks. Only a clear block (the top of a stack) can move, onto another clear block "
        "or onto the table."
    ),
    tool_help="simulate: <moves> plays the moves on a copy of the current stacks and reports the result.",
    python_help="python: a ```python block; stdin holds the stacks as shown; print `#### <moves>`.",
    answer_help=(
        "The answer is a list of moves played in order, `move X Y` puts block X onto block Y and "
        "`move X table` onto the table, e.g. move C table, move B C."
    ),
    answer_example="move C table, move B C",
)


def render(state: BlocksState) -> str:
    goal = state.problem.goal
    out = misplaced(state.stacks, goal)
    return "\n".join([
        f"Goal: {format_stacks(goal)}",
        f"Now: {format_stacks(state.stacks)}",
        f"Clear blocks: {' '.join(clear_blocks(state.stacks))}; {out} of {len(state.problem.blocks)} blocks out of place.",
    ])
