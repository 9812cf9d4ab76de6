"""Sudoku answers: a full grid or a list of fills.

* grid: ``size`` rows separated by ``/``; in each row a cell is a digit ``1..size`` or ``.``, ``_``,
  ``0`` for empty. Up to size 9 the cells may be run together (``12.4``) or separated by spaces or
  commas; above 9 they must be separated (``10 2 . 16``).
* fills: ``R<row>C<col>=<value>`` items (1-based), separated by spaces or commas, e.g.
  ``R1C2=3 R4C1=2``; value ``0`` clears the cell. At most ``size * size`` fills.

Both parse to a tuple of ``(row, col, value)`` with 0-based row/col; a grid gives every cell in row-major
order. Anything else is a :class:`~pettingllms.agents.failures.ParseError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pettingllms.agents.failures import ParseError
from pettingllms.envs.sudoku.state import Fill

_FILL = re.compile(r"[Rr](\d{1,3})\s*[Cc](\d{1,3})\s*=\s*(\d{1,3})")
_EMPTY = {".", "_", "0"}


@dataclass(frozen=True)
class GridSpec:
    """Parser parameters: the grid's side length."""

    size: int


def _shorten(text: str, limit: int = 24) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _cell_value(token: str, size: int) -> int:
    if token in _EMPTY:
        return 0
    if token.isascii() and token.isdigit() and len(token) <= 3 and 1 <= int(token) <= size:
        return int(token)
    raise ParseError(f"cell {_shorten(token)} is not a value 1..{size} or '.'")


def _parse_fills(text: str, size: int) -> tuple[Fill, ...]:
    fills: list[Fill] = []
    for match in _FILL.finditer(text):
        r, c, v = (int(g) for g in match.groups())
        if not (1 <= r <= size and 1 <= c <= size):
            raise ParseError(f"fill {match.group(0)!r} is outside the {size}x{size} grid")
        if v > size:
            raise ParseError(f"fill {match.group(0)!r} has a value above {size}")
        fills.append((r - 1, c - 1, v))
        if len(fills) > size * size:
            raise ParseError(f"too many fills (more than {size * size})")
    leftover = _FILL.sub(" ", text).replace(",", " ").replace(";", " ").strip()
    if leftover:
        raise ParseError(f"unexpected text {_shorten(leftover)} between fills")
    return tuple(fills)


def _parse_grid(text: str, size: int) -> tuple[Fill, ...]:
    rows = text.split("/")
    if len(rows) != size:
        raise ParseError(f"a grid needs {size} rows separated by '/', got {len(rows)}")
    fills: list[Fill] = []
    for r, row in enumerate(rows):
        tokens = row.replace(",", " ").split()
        cells = list("".join(tokens)) if size <= 9 else tokens
        if len(cells) != size:
            raise ParseError(f"row {r + 1} needs {size} cells, got {len(cells)}")
        fills.extend((r, c, _cell_value(token, size)) for c, token in enumerate(cells))
    return tuple(fills)


def parse_answer(text: str, spec: GridSpec) -> tuple[Fill, ...]:
    """Fills from an answer's text (a grid or ``R1C2=3`` items); ParseError when malformed."""
    text = text.strip()
    if not text:
        raise ParseError("empty Sudoku answer")
    if _FILL.search(text):
        return _parse_fills(text, spec.size)
    return _parse_grid(text, spec.size)


def format_answer(fills: tuple[Fill, ...] | list[Fill]) -> str:
    """Inverse of :func:`parse_answer`: a grid when ``fills`` covers every cell row-major, else fills."""
    n = len(fills)
    size = int(round(n ** 0.5))
    if size >= 4 and size * size == n and all((f[0], f[1]) == divmod(i, size) for i, f in enumerate(fills)):
        sep = "" if size <= 9 else " "
        return "/".join(
            sep.join(str(v) if v else "." for (_, _, v) in fills[r * size:(r + 1) * size]) for r in range(size)
        )
    return " ".join(f"R{r + 1}C{c + 1}={v}" for r, c, v in fills)
