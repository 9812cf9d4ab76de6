"""Blocksworld answers: a plan, a list of ``move X Y`` items.

``move X Y`` puts block X onto block Y; ``move X table`` puts it on the table. Items are separated by
spaces, commas or semicolons, e.g. ``move C table, move B C``; ``move`` and ``table`` are any case,
blocks are the instance's letters (any case). At most ``max_moves`` items. Anything else (a missing
``move``, an unknown block, an item cut short) is a :class:`~pettingllms.agents.failures.ParseError`.
Parses to a tuple of ``(block, destination)`` with blocks upper case and the table as ``"table"``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pettingllms.agents.failures import ParseError
from pettingllms.envs.blocksworld.state import TABLE, Move

_SEPARATORS = str.maketrans({",": " ", ";": " "})
MOVE_WORD = "move"


@dataclass(frozen=True)
class PlanSpec:
    """Parser parameters: the instance's blocks and the most moves an answer may hold."""

    blocks: tuple[str, ...]
    max_moves: int


def _shorten(text: str, limit: int = 24) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _block(token: str, blocks: tuple[str, ...], table_ok: bool) -> str:
    if table_ok and token.lower() == TABLE:
        return TABLE
    name = token.upper() if len(token) == 1 and token.isascii() else token
    if name in blocks:
        return name
    where = f"a block {blocks[0]}..{blocks[-1]}" + (" or `table`" if table_ok else "")
    raise ParseError(f"{_shorten(token)} is not {where}")


def parse_answer(text: str, spec: PlanSpec) -> tuple[Move, ...]:
    """Moves from an answer's text; ParseError when malformed or longer than ``spec.max_moves``."""
    tokens = text.translate(_SEPARATORS).split()
    if not tokens:
        raise ParseError("empty plan: give moves such as `move C table, move B C`")
    moves: list[Move] = []
    for i in range(0, len(tokens), 3):
        if tokens[i].lower() != MOVE_WORD:
            raise ParseError(f"expected `move`, got {_shorten(tokens[i])}; write `move X Y` or `move X table`")
        if i + 2 >= len(tokens):
            raise ParseError("the last move is cut short: write `move X Y` or `move X table`")
        moves.append((_block(tokens[i + 1], spec.blocks, False), _block(tokens[i + 2], spec.blocks, True)))
        if len(moves) > spec.max_moves:
            raise ParseError(f"too many moves (more than max {spec.max_moves})")
    return tuple(moves)


def format_answer(moves: tuple[Move, ...] | list[Move]) -> str:
    """Inverse of :func:`parse_answer`: ``(("C", "table"), ("B", "C"))`` -> ``"move C table, move B C"``."""
    return ", ".join(f"{MOVE_WORD} {block} {dest}" for block, dest in moves)
