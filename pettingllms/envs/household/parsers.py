"""The household answer formats: the actor's command and the planner's sub-goal.

Both are the text after the last ``####`` up to the end of its line (:func:`~pettingllms.envs.game_parsers.
extract_final_answer`):

* **command** (actor, single agent): a game command (``#### take apple from counter``) or the number of a
  command in the list the prompt shows (``#### 3``); the actor may also answer ``#### subgoal`` to play the
  planner's current sub-goal as it is. Case, surrounding quotes / backticks, a trailing full stop, repeated
  spaces and the articles ``the`` / ``a`` / ``an`` do not matter when the command is matched against the
  admissible ones. A well-formed command the game does not accept now is *not* a parse error: it parses
  (``admissible=False``) and the environment answers that nothing happened.
* **sub-goal** (planner): one command of the game, written out or as a number from the list; it need not
  be admissible yet (``insert apple into fridge`` while the apple is still on the counter).

Malformed text (no ``####`` line, nothing after it, a number outside the list, more than
:data:`MAX_COMMAND_CHARS` characters or :data:`MAX_COMMAND_WORDS` words, no letter) raises
:class:`~pettingllms.agents.failures.ParseError` and nothing else. The parsers run in linear time and never
evaluate model text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pettingllms.agents.failures import ParseError
from pettingllms.envs.game_parsers import extract_final_answer

__all__ = [
    "MAX_COMMAND_CHARS",
    "MAX_COMMAND_WORDS",
    "SUBGOAL_ANSWER",
    "Command",
    "command_key",
    "format_command",
    "normalize_command",
    "parse_command",
    "parse_subgoal",
]

MAX_COMMAND_CHARS = 120
MAX_COMMAND_WORDS = 16
#: The actor's answer that plays the planner's current sub-goal.
SUBGOAL_ANSWER = "subgoal"
_ARTICLES = frozenset({"the", "a", "an"})
_EDGE = "\"'`*[](){}<>"
_NUMBER = re.compile(r"(\d{1,6})(?:\s*[.):-].*)?")


@dataclass(frozen=True)
class Command:
    """A parsed command: its text (the admissible command's own spelling when it matched one), and
    whether the game accepts it now."""

    text: str
    admissible: bool


def normalize_command(text: str) -> str:
    """``text`` as one lower-case command: outer quotes / brackets / a leading ``>`` and trailing
    punctuation dropped, whitespace collapsed."""
    text = text.strip().lstrip(">").strip().strip(_EDGE).strip().rstrip(".!?;:,").strip(_EDGE).strip()
    return " ".join(text.lower().split())


def command_key(text: str) -> str:
    """What two spellings of one command share: normalised, without articles."""
    return " ".join(word for word in normalize_command(text).split() if word not in _ARTICLES)


def _check_shape(text: str, what: str) -> None:
    if not text:
        raise ParseError(f"empty {what} after `####`")
    if len(text) > MAX_COMMAND_CHARS:
        raise ParseError(f"{what} too long ({len(text)} characters, at most {MAX_COMMAND_CHARS})")
    if len(text.split()) > MAX_COMMAND_WORDS:
        raise ParseError(f"{what} too long (more than {MAX_COMMAND_WORDS} words)")
    if not any(ch.isalpha() for ch in text):
        raise ParseError(f"{what} {text[:24]!r} holds no word")


def _numbered(text: str, listed: Sequence[str]) -> str | None:
    match = _NUMBER.fullmatch(text)
    if match is None:
        return None
    number = int(match.group(1))
    if not 1 <= number <= len(listed):
        raise ParseError(f"no command number {number}: the list holds {len(listed)} command(s)")
    return listed[number - 1]


def _match(text: str, admissible: Sequence[str]) -> Command:
    key = command_key(text)
    for candidate in admissible:
        if command_key(candidate) == key:
            return Command(candidate, True)
    return Command(text, False)


def parse_command(
    response: str, admissible: Sequence[str], subgoal: str | None = None, allow_subgoal: bool = False
) -> Command:
    """The command of an actor / single-agent ``response`` (see the module docstring); ``admissible``: the
    commands the prompt listed, in order; ``subgoal``: the planner's current sub-goal, which
    ``#### subgoal`` plays when ``allow_subgoal``."""
    text = normalize_command(extract_final_answer(response))
    if allow_subgoal and text == SUBGOAL_ANSWER:
        if subgoal is None:
            raise ParseError("`#### subgoal` but the planner has set no sub-goal")
        text = normalize_command(subgoal)
    numbered = _numbered(text, admissible)
    if numbered is not None:
        return Command(numbered, True)
    _check_shape(text, "command")
    return _match(text, admissible)


def parse_subgoal(response: str, admissible: Sequence[str]) -> str:
    """The planner's sub-goal in ``response``: a command, written out or numbered from ``admissible``."""
    text = normalize_command(extract_final_answer(response))
    numbered = _numbered(text, admissible)
    if numbered is not None:
        return numbered
    _check_shape(text, "sub-goal")
    return _match(text, admissible).text


def format_command(command: str) -> str:
    """A response the parsers read back as ``command``."""
    return f"#### {command}"
