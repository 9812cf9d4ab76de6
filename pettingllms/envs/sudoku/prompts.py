"""Sudoku prompt text and grid rendering (the current grid, never the solution)."""

from __future__ import annotations

from pettingllms.envs.game import GamePrompts
from pettingllms.envs.sudoku.parsers import format_answer
from pettingllms.envs.sudoku.state import SudokuState

#: Version of what the prompts show (cached benchmark results are keyed on it). 2: the tool proposal a plan
#: agent is shown is chosen by the rules-only score, no longer by closeness to the hidden solution.
PROMPT_VERSION = 2

PROMPTS = GamePrompts(
    task=(
        "Sudoku: fill the grid so every row, column and box holds each value once. '.' is an empty "
        "cell; givens cannot change."
    ),
    tool_help="check: <grid or fills> applies it to a copy of the current grid and reports rule conflicts.",
    python_help="python: a ```python block; stdin holds the grid as shown; print `#### <grid>`.",
    answer_help=(
        "The answer is the full grid, rows separated by '/', e.g. 12.4/34.2/..., or fills such as "
        "R1C3=4 R2C3=1 (row, column from 1)."
    ),
    answer_example="R1C3=4 R2C3=1",
)


def render(state: SudokuState) -> str:
    puzzle = state.puzzle
    size = puzzle.size
    sep = "" if size <= 9 else " "
    rows = [sep.join(str(v) if v else "." for v in row) for row in state.grid]
    one_line = format_answer(tuple((r, c, v) for r, row in enumerate(state.grid) for c, v in enumerate(row)))
    empty = sum(v == 0 for row in state.grid for v in row)
    return "\n".join(
        rows + [f"As one line: {one_line}", f"Size {size}x{size}, boxes {puzzle.box_rows}x{puzzle.box_cols}; {empty} empty."]
    )
