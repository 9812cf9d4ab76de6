"""Parsers shared by the game environments: final-answer lines, tool calls, move lists.

Formats (documented in every game prompt):

* final answer: the text after the **last** ``####`` up to the end of that line (``#### U R R``);
* tool calls: one per line, ``<tool>: <argument>`` or ``<tool>(<argument>)``, for the enabled
  environment tools (also inside untagged or non-python fences); a fenced code block tagged ``python``
  (or ``py``) is one call of the ``python`` tool when that tool is enabled. Anything else is free text
  and ignored;
* moves: ``U`` / ``D`` / ``L`` / ``R`` (or ``up``/``down``/``left``/``right``), separated by spaces or
  commas, optionally quoted and bracketed (``["U", "R"]``), or run together (``URRD``).

Parsers never evaluate model text; malformed text raises :class:`~pettingllms.agents.failures.ParseError`
with the reason, which the agent records as its parse error. They run in linear time on any input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pettingllms.agents.failures import ParseError

ANSWER_MARKER = "####"
PYTHON_TOOL = "python"
MOVES: tuple[str, ...] = ("U", "D", "L", "R")
_MOVE_WORDS = {"U": "U", "UP": "U", "D": "D", "DOWN": "D", "L": "L", "LEFT": "L", "R": "R", "RIGHT": "R"}
_MOVE_PUNCT = str.maketrans({c: " " for c in "[](){}\"',;`"})
_PYTHON_TAGS = ("python", "py", "python3")
# Character classes are disjoint where they meet, so matching stays linear on adversarial lines.
_CALL_LINE = re.compile(r"[ \t]*[*_`]*([A-Za-z][A-Za-z0-9_]*)[*`]*[ \t]*([:(])(.*)")


def _shorten(text: str, limit: int = 24) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def extract_final_answer(text: str) -> str:
    """The text after the last ``####`` to the end of its line, stripped; ParseError when absent/empty."""
    idx = text.rfind(ANSWER_MARKER)
    if idx < 0:
        raise ParseError(f"no final answer line: end with `{ANSWER_MARKER} <answer>`")
    rest = text[idx + len(ANSWER_MARKER):]
    answer = rest.split("\n", 1)[0].strip()
    if not answer:
        raise ParseError(f"empty final answer after `{ANSWER_MARKER}`")
    return answer


@dataclass(frozen=True)
class ToolCall:
    """One tool call: the tool's name and its raw argument text (code for ``python``)."""

    name: str
    argument: str


def _split_fences(text: str) -> list[tuple[str, str | None]]:
    """``text`` as (segment, fence tag) pieces; prose has tag ``None``; an unclosed fence runs to the end."""
    pieces: list[tuple[str, str | None]] = []
    pos = 0
    while True:
        start = text.find("```", pos)
        if start < 0:
            pieces.append((text[pos:], None))
            return pieces
        pieces.append((text[pos:start], None))
        newline = text.find("\n", start + 3)
        if newline < 0:  # a fence opener with nothing after it
            return pieces
        tag = text[start + 3:newline].strip().lower()
        end = text.find("```", newline + 1)
        if end < 0:
            pieces.append((text[newline + 1:], tag))
            return pieces
        pieces.append((text[newline + 1:end], tag))
        pos = end + 3


def parse_tool_calls(text: str, tools: tuple[str, ...] | list[str], max_calls: int) -> tuple[ToolCall, ...]:
    """Tool calls of the enabled ``tools`` in order of appearance, at most ``max_calls`` (extras ignored)."""
    enabled = {t.lower() for t in tools}
    calls: list[ToolCall] = []
    for segment, tag in _split_fences(text):
        if tag in _PYTHON_TAGS:  # code is never scanned for call lines
            if PYTHON_TOOL in enabled and segment.strip():
                calls.append(ToolCall(PYTHON_TOOL, segment))
            continue
        for line in segment.split("\n"):
            match = _CALL_LINE.match(line)
            if match is None:
                continue
            name = match.group(1).lower()
            if name not in enabled or name == PYTHON_TOOL:
                continue
            argument = match.group(3).strip()
            if match.group(2) == "(" and argument.endswith(")"):
                argument = argument[:-1].strip()
            calls.append(ToolCall(name, argument))
    if not calls:
        example = next((t for t in tools if t != PYTHON_TOOL), PYTHON_TOOL)
        raise ParseError(f"no tool call found; call one of {sorted(enabled)}, e.g. `{example}: ...`")
    return tuple(calls[:max_calls])


def parse_moves(text: str, max_moves: int) -> tuple[str, ...]:
    """A move list (``U``/``D``/``L``/``R``) from ``text``; ParseError when empty, unknown or too long."""
    tokens = text.translate(_MOVE_PUNCT).replace("\u2192", " ").split()
    if not tokens:
        raise ParseError("empty move list: give moves such as `U R R D`")
    moves: list[str] = []
    for token in tokens:
        upper = token.upper()
        if upper in _MOVE_WORDS:
            moves.append(_MOVE_WORDS[upper])
        elif upper.isascii() and upper.isalpha() and all(ch in "UDLR" for ch in upper):
            moves.extend(upper)
        else:
            raise ParseError(f"unknown move {_shorten(token)}; use U, D, L or R")
        if len(moves) > max_moves:
            raise ParseError(f"too many moves (more than max {max_moves})")
    return tuple(moves)


@dataclass(frozen=True)
class MoveSpec:
    """Move-answer parser limits: at most ``max_moves`` moves per answer."""

    max_moves: int


def parse_move_answer(text: str, spec: MoveSpec) -> tuple[str, ...]:
    """Moves from an answer's text; ParseError when empty, unknown or longer than ``spec.max_moves``."""
    return parse_moves(text, spec.max_moves)


def format_moves(moves: tuple[str, ...] | list[str]) -> str:
    """Inverse of :func:`parse_moves`: ``("U", "R")`` -> ``"U R"``."""
    return " ".join(moves)
