"""Plan-Path prompt text and board rendering (always the current position)."""

from __future__ import annotations

from pettingllms.envs.game import GamePrompts
from pettingllms.envs.plan_path.state import PlanPathState

PROMPTS = GamePrompts(
    task=(
        "Plan-Path: move the player P to the goal G on a grid. '#' is a wall, '.' is free. "
        "Moves: U (up), D (down), L (left), R (right); a move into a wall or off the grid does nothing."
    ),
    tool_help="simulate: <moves> plays the moves on a copy of the current state and reports where they end.",
    python_help="python: a ```python block; stdin holds the grid as shown; print `#### <moves>`.",
    answer_help="The answer is a list of moves, played from the current position.",
    answer_example="U R R D",
)


def render(state: PlanPathState) -> str:
    """The grid with the player's current cell (P) and the goal (G), plus both coordinates."""
    level = state.level
    rows = []
    for r, line in enumerate(level.grid):
        cells = list(line)
        if r == level.goal[0]:
            cells[level.goal[1]] = "G"
        if r == state.pos[0]:
            cells[state.pos[1]] = "P"
        rows.append("".join(cells))
    where = f"P at row {state.pos[0]}, col {state.pos[1]}; G at row {level.goal[0]}, col {level.goal[1]}."
    return "\n".join(rows + [where])
