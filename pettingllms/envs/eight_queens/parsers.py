"""Eight Queens answers: the queen of every row, or place / remove items.

* rows: the column of the queen in each row, top row first, ``size`` entries; an entry is a column
  ``1..size`` or ``.``, ``_``, ``0`` for a row without a queen. Up to size 9 the entries may be run
  together (``2413``) or separated by spaces or commas (``2 4 1 3``); above 9 they must be separated
  (``10 2 . 16 ...``). It sets every row: each row then holds exactly the queen given (fixed queens
  must be kept);
* items: ``R<row>C<col>`` (or ``+R<row>C<col>``) places a queen, ``-R<row>C<col>`` removes one (1-based,
  any case), separated by spaces, commas or semicolons, e.g. ``R1C3 -R2C5``. At most ``size * size``.

Rows parse to ``("=", row, col)`` for every row (col ``-1``: empty), items to ``("+", row, col)`` /
``("-", row, col)``, rows and columns 0-based. Anything else is a
:class:`~pettingllms.agents.failures.ParseError`. The parser runs in linear time on any input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pettingllms.agents.failures import ParseError
from pettingllms.envs.eight_queens.state import Action

_ITEM = re.compile(r"([+-]?)[Rr](\d{1,3})[ \t]*[Cc](\d{1,3})")
_EMPTY = {".", "_", "0"}
_SEPARATORS = str.maketrans({",": " ", ";": " "})


@dataclass(frozen=True)
class BoardSpec:
    """Parser parameters: the board's side length."""

    size: int


def _shorten(text: str, limit: int = 24) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _parse_items(text: str, size: int) -> tuple[Action, ...]:
    actions: list[Action] = []
    for match in _ITEM.finditer(text):
        sign, r, c = match.group(1), int(match.group(2)), int(match.group(3))
        if not (1 <= r <= size and 1 <= c <= size):
            raise ParseError(f"item {match.group(0)!r} is outside the {size}x{size} board")
        actions.append(("-" if sign == "-" else "+", r - 1, c - 1))
        if len(actions) > size * size:
            raise ParseError(f"too many items (more than {size * size})")
    leftover = _ITEM.sub(" ", text).translate(_SEPARATORS).strip()
    if leftover:
        raise ParseError(f"unexpected text {_shorten(leftover)} between items")
    return tuple(actions)


def _column(token: str, size: int) -> int:
    if token in _EMPTY:
        return -1
    if token.isascii() and token.isdigit() and len(token) <= 3 and 1 <= int(token) <= size:
        return int(token) - 1
    raise ParseError(f"entry {_shorten(token)} is not a column 1..{size} or '.'")


def _parse_rows(text: str, size: int) -> tuple[Action, ...]:
    tokens = text.translate(_SEPARATORS).split()
    entries = list("".join(tokens)) if size <= 9 else tokens
    if len(entries) != size:
        raise ParseError(f"a full answer needs {size} entries (one per row), got {len(entries)}")
    return tuple(("=", r, _column(token, size)) for r, token in enumerate(entries))


def parse_answer(text: str, spec: BoardSpec) -> tuple[Action, ...]:
    """Actions from an answer's text (rows or ``R1C3`` / ``-R1C3`` items); ParseError when malformed."""
    text = text.strip()
    if not text:
        raise ParseError("empty Eight Queens answer")
    if _ITEM.search(text):
        return _parse_items(text, spec.size)
    return _parse_rows(text, spec.size)


def is_rows_answer(actions: tuple[Action, ...] | list[Action]) -> bool:
    """Whether ``actions`` is a rows answer: ``("=", r, c)`` for every row r in order."""
    return bool(actions) and all(op == "=" and r == i for i, (op, r, _) in enumerate(actions))


def format_answer(actions: tuple[Action, ...] | list[Action]) -> str:
    """Inverse of :func:`parse_answer`: rows for a rows answer, else items."""
    if is_rows_answer(actions):
        sep = "" if len(actions) <= 9 else " "
        return sep.join(str(c + 1) if c >= 0 else "." for _, _, c in actions)
    if any(op == "=" for op, _, _ in actions):
        raise ValueError(f"row actions must cover every row in order to be written as an answer, got {list(actions)}")
    return " ".join(f"{'-' if op == '-' else ''}R{r + 1}C{c + 1}" for op, r, c in actions)
