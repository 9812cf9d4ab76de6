"""Sokoban prompt text and board rendering (always the current positions)."""

from __future__ import annotations

from pettingllms.envs.game import GamePrompts
from pettingllms.envs.sokoban.state import SokobanState

PROMPTS = GamePrompts(
    task=(
        "Sokoban: push every box onto a goal. Symbols: # wall, _ floor, . goal, $ box, * box on goal, "
        "@ you, + you on a goal. Moves: U (up), D (down), L (left), R (right). You push a box by walking "
        "into it; you cannot pull. A box stuck in a corner off a goal loses the game."
    ),
    tool_help="simulate: <moves> plays the moves on a copy of the current state and reports the result.",
    python_help="python: a ```python block; stdin holds the board as shown; print `#### <moves>`.",
    answer_help="The answer is a list of moves, played from the current position.",
    answer_example="L U R",
)


def render(state: SokobanState) -> str:
    level = state.level
    rows = []
    for r in range(level.rows):
        line = []
        for c in range(level.cols):
            cell = (r, c)
            goal = cell in level.goals
            if cell in level.walls:
                line.append("#")
            elif cell == state.player:
                line.append("+" if goal else "@")
            elif cell in state.boxes:
                line.append("*" if goal else "$")
            else:
                line.append("." if goal else "_")
        rows.append("".join(line))
    on_goal = len(state.boxes & level.goals)
    return "\n".join(rows + [f"{on_goal} of {len(level.goals)} boxes on goals."])
