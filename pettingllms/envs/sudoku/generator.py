"""Seeded Sudoku puzzles with a unique solution, and the pre-generated bank.

A puzzle starts from a random full grid; cells are then emptied in a random order, each removal kept
only if the grid still has exactly one solution (backtracking count up to 2). Removal stops at
``givens`` cells when given, else when no further cell can go.

Bank file (JSON): ``{"format": BANK_FORMAT, "size": 9, "box_rows": 3, "box_cols": 3,
"puzzles": [{"seed": 0, "givens": "53..7....", "solution": "534678912..."}, ...]}``, cells row-major,
``.`` for empty. Regenerate with ``python -m pettingllms.envs.sudoku --size 9 --count 200``.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
from pathlib import Path

from pettingllms.envs.sudoku.solver import count_solutions, random_solution
from pettingllms.envs.sudoku.state import SudokuPuzzle, box_shape, decode_grid, encode_grid

BANK_FORMAT = "pettingllms-sudoku-bank/1"
DATA_DIR = Path(__file__).resolve().parent / "data"


def default_bank_path(size: int) -> Path:
    return DATA_DIR / f"sudoku_{size}x{size}.json"


def generate_puzzle(seed: int, size: int = 4, givens: int | None = None) -> SudokuPuzzle:
    """The puzzle for (``seed``, ``size``): unique solution, at least ``givens`` given cells."""
    box_rows, box_cols = box_shape(size)
    if givens is not None and not 0 <= givens <= size * size:
        raise ValueError(f"`givens` must be in [0, {size * size}], got {givens}")
    rng = random.Random(f"sudoku:{size}:{seed}")
    solution = random_solution(box_rows, box_cols, rng)
    cells = [list(row) for row in solution]
    order = [(r, c) for r in range(size) for c in range(size)]
    rng.shuffle(order)
    remaining = size * size
    target = givens if givens is not None else 0
    for r, c in order:
        if remaining <= target:
            break
        value, cells[r][c] = cells[r][c], 0
        if count_solutions(tuple(tuple(row) for row in cells), box_rows, box_cols, limit=2) == 1:
            remaining -= 1
        else:
            cells[r][c] = value
    return SudokuPuzzle(box_rows, box_cols, tuple(tuple(row) for row in cells), solution)


def build_bank(size: int, count: int, first_seed: int = 0, givens: int | None = None) -> dict:
    """A bank of ``count`` puzzles for seeds ``first_seed ...`` as a JSON-ready dict."""
    box_rows, box_cols = box_shape(size)
    puzzles = []
    for seed in range(first_seed, first_seed + count):
        puzzle = generate_puzzle(seed, size, givens)
        puzzles.append({"seed": seed, "givens": encode_grid(puzzle.givens), "solution": encode_grid(puzzle.solution)})
    return {"format": BANK_FORMAT, "size": size, "box_rows": box_rows, "box_cols": box_cols, "puzzles": puzzles}


@functools.lru_cache(maxsize=8)
def load_bank(path: str, size: int) -> tuple[SudokuPuzzle, ...]:
    """Puzzles of the bank at ``path``; a missing file or a bank of another size is an error."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(
            f"Sudoku bank not found at {file} (`bank_path`); create it with "
            f"`python -m pettingllms.envs.sudoku --size {size} --out {file}` or use source='generate'"
        )
    data = json.loads(file.read_text(encoding="utf-8"))
    if data.get("format") != BANK_FORMAT:
        raise ValueError(f"{file}: `format` must be {BANK_FORMAT!r}, got {data.get('format')!r}")
    if data.get("size") != size:
        raise ValueError(f"{file}: bank `size` is {data.get('size')!r} but the config asks for `size` {size}")
    box_rows, box_cols = box_shape(size)
    puzzles = []
    for i, item in enumerate(data.get("puzzles") or []):
        givens, solution = decode_grid(item["givens"], size), decode_grid(item["solution"], size)
        if any(g and g != s for grow, srow in zip(givens, solution) for g, s in zip(grow, srow)):
            raise ValueError(f"{file}: puzzle {i} has a given that disagrees with its solution")
        puzzles.append(SudokuPuzzle(box_rows, box_cols, givens, solution))
    if not puzzles:
        raise ValueError(f"{file}: the bank holds no `puzzles`")
    return tuple(puzzles)


def bank_to_text(bank: dict) -> str:
    """The bank as JSON with one puzzle per line (readable diffs)."""
    head = {k: v for k, v in bank.items() if k != "puzzles"}
    lines = ",\n".join("  " + json.dumps(p) for p in bank["puzzles"])
    return json.dumps(head)[:-1] + ', "puzzles": [\n' + lines + "\n]}\n"


def main(argv: list[str] | None = None) -> None:
    from comlrl.atomic_io import atomic_write_text

    parser = argparse.ArgumentParser(description="Pre-generate a Sudoku bank (unique-solution puzzles).")
    parser.add_argument("--size", type=int, default=9)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--givens", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    out = args.out or default_bank_path(args.size)
    atomic_write_text(out, bank_to_text(build_bank(args.size, args.count, args.first_seed, args.givens)))
    out.chmod(0o644)  # package data: readable by every user
    print(f"wrote {args.count} puzzles to {out}")
