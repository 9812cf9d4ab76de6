"""WebShop's action grammar, parsed strictly: ``search[query]`` and ``click[label]``, one action per line.

A response is 1 to ``max_actions`` lines, each exactly ``search[...]`` or ``click[...]`` (lower-case verb,
no space before ``[``, nothing after ``]``; spaces around the line and blank lines are allowed). The text
inside the brackets is 1 to :data:`MAX_ARGUMENT_CHARS` printable characters without ``[``, ``]`` or a line
break, surrounding spaces stripped. Anything else (prose, a fence, an unknown verb, an empty or overlong
argument, more lines than allowed, a verb the agent may not use) raises
:class:`~pettingllms.agents.failures.ParseError` and nothing else. Whether a click names something on the
page is the environment's business (an *invalid* action), not the parser's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pettingllms.agents.failures import ParseError

__all__ = ["MAX_ARGUMENT_CHARS", "VERBS", "Action", "format_actions", "parse_action", "parse_actions"]

VERBS: tuple[str, ...] = ("search", "click")
MAX_ARGUMENT_CHARS = 100
_SHOWN = 40


@dataclass(frozen=True)
class Action:
    """One parsed action: ``verb`` (``search`` / ``click``) and its argument."""

    verb: str
    argument: str

    def __str__(self) -> str:
        return f"{self.verb}[{self.argument}]"


def _short(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


def parse_action(line: str, verbs: Iterable[str] = VERBS) -> Action:
    """The action of one line (see the module docstring); ParseError naming what is wrong."""
    allowed = tuple(verbs)
    text = line.strip()
    head, bracket, rest = text.partition("[")
    if not bracket or head not in VERBS:
        raise ParseError(f"expected search[...] or click[...], got {_short(text)}")
    if head not in allowed:
        raise ParseError(f"{head}[...] is not an action of this role (allowed: {', '.join(v + '[...]' for v in allowed)})")
    if not rest.endswith("]"):
        raise ParseError(f"{head}[...] must end with ] and nothing after it, got {_short(text)}")
    argument = rest[:-1]
    if "[" in argument or "]" in argument:
        raise ParseError(f"the argument of {head}[...] may not hold [ or ], got {_short(argument)}")
    if not argument.isprintable():
        raise ParseError(f"the argument of {head}[...] holds a control or unprintable character")
    argument = argument.strip()
    if not argument:
        raise ParseError(f"{head}[...] needs a non-empty argument")
    if len(argument) > MAX_ARGUMENT_CHARS:
        raise ParseError(f"the argument of {head}[...] is longer than {MAX_ARGUMENT_CHARS} characters")
    return Action(head, argument)


def parse_actions(response: str, verbs: Sequence[str] = VERBS, max_actions: int = 1) -> tuple[Action, ...]:
    """The actions of a response: 1 to ``max_actions`` lines, each an action with a verb in ``verbs``."""
    if not isinstance(response, str):
        raise ParseError(f"a response must be text, got {type(response).__name__}")
    lines = [line for line in response.splitlines() if line.strip()]
    if not lines:
        raise ParseError("empty response: expected " + " or ".join(f"{v}[...]" for v in verbs))
    if len(lines) > max_actions:
        raise ParseError(f"{len(lines)} action lines, at most {max_actions} allowed")
    return tuple(parse_action(line, verbs) for line in lines)


def format_actions(actions: Iterable[Action]) -> str:
    """The response that :func:`parse_actions` reads back as ``actions`` (one per line)."""
    out = [str(a) for a in actions]
    if not out:
        raise ValueError("`actions` must hold at least one action")
    return "\n".join(out)
