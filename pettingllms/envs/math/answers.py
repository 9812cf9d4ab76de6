"""Parsers of the math workflow's responses: final answers, programs, calculator expressions, printed output.

Formats (the math prompts document the same):

* **Boxed answer** (:func:`last_boxed`): the content of the **last** top-level ``\\boxed{...}`` (or
  ``\\fbox{...}``) of the response. Braces nest; a backslash escapes the next character, so ``\\{`` and
  ``\\}`` (LaTeX set braces) never open or close a group. Whitespace may separate the command from its
  ``{``. The brace-less form ``\\boxed 5`` takes the next run of non-blank characters up to a ``$``.
  A box inside a box belongs to the outer one (``\\boxed{\\boxed{5}}`` gives ``\\boxed{5}``), so for every
  balanced ``s``, ``last_boxed("\\boxed{" + s + "}") == s``. A box that never closes makes the response
  unparseable (``None``): it was cut off, and an earlier box is not what the model meant to answer.
* **GSM8K answer** (:func:`hash_answer`): the rest of the line after the last ``####``.
* **Final answer** (:func:`extract_answer`): the boxed answer, else the ``####`` answer; stripped, and
  ``None`` when empty.
* **Fences** (:func:`code_blocks`): a fenced block opens with a line of three or more backticks plus an
  optional language tag (indentation allowed; the tag is the first word of the info string, any case)
  and closes with a line holding only backticks, at least as many as the opener. Only **closed** blocks
  count: a block still open at the end of the response was cut off. A one-line ```` ```x``` ```` is not a
  block. ``\\r\\n`` and ``\\r`` count as line ends. The body keeps its lines, less the opener's indentation.
* **Calculator expression** (:func:`calculator_expression`): the body of the last closed block tagged
  ``calc`` or ``calculator``, stripped.
* **Printed answer** (:func:`printed_answer`): a tool program's answer is the last non-blank line of its
  stdout, stripped; when that line holds a ``\\boxed{...}``, its content.

Parsers never evaluate model text, never raise on any string, and run in time linear in the text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["CALCULATOR_LANGUAGES", "PYTHON_LANGUAGES", "calculator_expression", "code_blocks", "extract_answer", "hash_answer", "last_boxed", "last_code_block", "printed_answer"]

PYTHON_LANGUAGES: tuple[str, ...] = ("python", "py", "")
CALCULATOR_LANGUAGES: tuple[str, ...] = ("calc", "calculator")

# A box command not followed by a letter (``\boxeds`` is another command).
_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_FENCE = "```"
_TAG_END = re.compile(r"[\s:{,]")


# ---- final answers -----------------------------------------------------------------------------------


def _group_end(text: str, start: int) -> int | None:
    """Index just past the ``}`` closing the group whose ``{`` is at ``start``; None when it never closes."""
    depth = 0
    i = start
    n = len(text)
    while i < n:
        char = text[i]
        if char == "\\":
            i += 2  # an escaped character (``\{``, ``\}``, ``\\``) is never a group brace
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last top-level ``\\boxed{...}`` / ``\\fbox{...}`` (see the module docstring), or None."""
    found: str | None = None
    pos = 0
    while True:
        match = _BOX.search(text, pos)
        if match is None:
            return found
        i = match.end()
        j = i
        while j < len(text) and text[j] in " \t\r\n":
            j += 1
        if j < len(text) and text[j] == "{":
            end = _group_end(text, j)
            if end is None:
                return None  # the box never closes: the response was cut off
            found = text[j + 1 : end - 1]
            pos = end
        elif j > i:  # ``\boxed 5``: the next run of non-blank characters, up to a ``$``
            k = j
            while k < len(text) and not text[k].isspace() and text[k] != "$":
                k += 1
            if k > j:
                found = text[j:k]
            pos = k if k > j else j
        else:  # ``\boxed`` glued to something that is neither a group nor a blank: not a box
            pos = i


def hash_answer(text: str) -> str | None:
    """The rest of the line after the last ``####`` (GSM8K's answer marker), stripped; None if absent or empty."""
    cut = text.rfind("####")
    if cut < 0:
        return None
    rest = text[cut + 4 :]
    line = re.split(r"\r\n|\r|\n", rest, maxsplit=1)[0].strip()
    return line or None


def extract_answer(text: str) -> str | None:
    """The response's final answer: its last boxed answer, else its ``####`` answer; None when neither."""
    boxed = last_boxed(text)
    if boxed is not None and boxed.strip():
        return boxed.strip()
    return hash_answer(text)


# ---- fenced blocks ------------------------------------------------------------------------------------


def _lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _tag_of(info: str) -> str:
    info = info.strip().lower()
    return _TAG_END.split(info, 1)[0] if info else ""


def _closed_blocks(text: str) -> list[tuple[str, str]]:
    """``(tag, body)`` of every closed fenced block, in order."""
    lines = _lines(text)
    blocks: list[tuple[str, str]] = []
    i = 0
    while i < len(lines):
        stripped = lines[i].lstrip(" \t")
        if not stripped.startswith(_FENCE):
            i += 1
            continue
        indent = len(lines[i]) - len(stripped)
        ticks = len(stripped) - len(stripped.lstrip("`"))
        info = stripped[ticks:]
        if _FENCE in info:  # a one-line ```x``` is inline code, not a block
            i += 1
            continue
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closer = lines[j].strip()
            if len(closer) >= ticks and closer == "`" * len(closer):
                break
            line = lines[j]
            cut = len(line) - len(line.lstrip(" \t"))
            body.append(line[min(cut, indent) :])
            j += 1
        if j == len(lines):
            break  # never closed: the rest of the response is inside it, so no later block exists
        blocks.append((_tag_of(info), "\n".join(body)))
        i = j + 1
    return blocks


def _wanted(languages: Sequence[str]) -> frozenset[str]:
    if isinstance(languages, str):
        raise TypeError(
            f"`languages` must be a sequence of tags such as ('python', ''), got the string {languages!r}"
        )
    return frozenset(tag.lower() for tag in languages)


def code_blocks(text: str, languages: Sequence[str] = PYTHON_LANGUAGES) -> list[str]:
    """Bodies of the closed fenced blocks tagged with one of ``languages`` (``""``: untagged), in order."""
    wanted = _wanted(languages)
    return [body for tag, body in _closed_blocks(text) if tag in wanted]


def last_code_block(text: str, languages: Sequence[str] = PYTHON_LANGUAGES) -> str | None:
    """Body of the last non-blank closed block tagged with one of ``languages``; None when there is none."""
    for body in reversed(code_blocks(text, languages)):
        if body.strip():
            return body
    return None


def calculator_expression(text: str) -> str | None:
    """The stripped body of the last non-blank closed ```` ```calc ```` / ```` ```calculator ```` block, or None."""
    body = last_code_block(text, CALCULATOR_LANGUAGES)
    return body.strip() if body is not None else None


# ---- tool output ----------------------------------------------------------------------------------------


def printed_answer(stdout: str) -> str | None:
    """A tool program's answer: its last non-blank output line, stripped (a ``\\boxed{}`` there unwrapped)."""
    for line in reversed(_lines(stdout)):
        line = line.strip()
        if not line:
            continue
        boxed = last_boxed(line)
        if boxed is not None and boxed.strip():
            return boxed.strip()
        return line
    return None
