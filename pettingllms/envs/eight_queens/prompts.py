"""Eight Queens prompt text and board rendering (the current board, never a solution)."""

from __future__ import annotations

from pettingllms.envs.eight_queens.parsers import format_answer
from pettingllms.envs.eight_queens.state import QueensState, attacking_pairs, cell_name
from pettingllms.envs.game import GamePrompts

PROMPTS = GamePrompts(
    task=(
        "N-Queens: put one queen in every row of the board so that no two queens share a row, column or "
        "diagonal. Q is a fixed queen (it cannot be removed), q a queen placed since, '.' an empty cell. "
        "Rows and columns count from 1."
    ),
    tool_help="check: <answer> applies it to a copy of the current board and reports attacks.",
    python_help="python: a ```python block; stdin holds the board as shown; print `#### <answer>`.",
    answer_help=(
        "The answer is the column of the queen in every row, top row first, e.g. 2413 on a 4x4 board "
        "('.' for a row without a queen), or items such as R2C4 (place a queen in row 2, column 4) and "
        "-R3C1 (remove the queen in row 3, column 1)."
    ),
    answer_example="R2C4 R3C1",
)


def render(state: QueensState) -> str:
    puzzle = state.puzzle
    size = puzzle.size
    rows = []
    for r in range(size):
        line = []
        for c in range(size):
            cell = (r, c)
            line.append("Q" if cell in puzzle.fixed else "q" if cell in state.queens else ".")
        rows.append("".join(line))
    per_row = [[c for (qr, c) in state.queens if qr == r] for r in range(size)]
    if all(len(cols) <= 1 for cols in per_row):
        one_line = format_answer(tuple(("=", r, cols[0] if cols else -1) for r, cols in enumerate(per_row)))
        rows.append(f"As one line: {one_line}")
    pairs = attacking_pairs(state.queens)
    status = f"Size {size}x{size}; {len(state.queens)} of {size} queens ({len(puzzle.fixed)} fixed); "
    if pairs:
        shown = ", ".join(f"{cell_name(a)}-{cell_name(b)}" for a, b in pairs[:3])
        status += f"attacks: {shown}" + (" ..." if len(pairs) > 3 else "") + "."
    else:
        status += "no attacks."
    return "\n".join(rows + [status])
