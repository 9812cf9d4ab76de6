"""Parsers of the code workflow's responses: the coder's program and the tester's generated tests.

Formats (the code prompts document the same):

* **Fences.** A fenced block opens with a line of three or more backticks plus an optional language tag
  (indentation before the backticks is allowed) and closes with a line holding only backticks, at least
  as many as the opener; an unclosed block runs to the end of the response. ``\\r\\n`` and ``\\r`` count
  as line ends. Backticks inside a line never open or close a block, so code may contain them.
* **Program** (:func:`parse_program`): the body of the **last** fenced block tagged ``python``, ``py``,
  ``python3``, ``py3`` or untagged (any case) that is not blank; prose and other blocks around it are
  ignored. A response with no fence at all is taken as bare code when the whole response is valid Python
  (``ast.parse``); otherwise it is a ParseError, as is an empty program. The program is dedented, its
  leading and trailing blank lines dropped, and it ends with one newline.
* **Stdio tests** (:func:`parse_stdio_tests`): pairs of sections, each a header line followed by a
  fenced block (any tag)::

      **Test Input:**
      ```
      3 4
      ```
      **Test Output:**
      ```
      7
      ```

  Accepted header variations: any case; ``**``, ``__``, ``#``, ``>`` or ``-`` decoration; ``Input`` /
  ``Output`` / ``Expected Output`` alone or after ``Test``, ``Sample`` or ``Example`` (and ``Case``, and a
  number: ``Test Case 2 Input:``); the colon inside or outside the bold marks. A header ends with a
  colon or is alone on its line. The value may instead follow the colon on the header line (``Input:
  3 4``, optionally in single backticks), or a fence may open there. Leading and trailing blank lines
  of a value are dropped; an input ends with one newline, an output has no trailing whitespace. An
  input is paired with the next output; a section that ends up in no pair is dropped and counted.
* **Call tests** (:func:`parse_call_tests`): for function-call problems, top-level ``assert`` statements
  (one or several lines each) from every ``python``/untagged block, or from the whole response when it has
  no fence, of exactly one form::

      assert <entry_point>(<arguments>) == <expected>            # a plain function
      assert Solution().<entry_point>(<arguments>) == <expected> # problems whose starter code defines Solution

  Every argument and the expected value is a Python literal (``ast.literal_eval`` of its node: numbers,
  strings, bytes, ``True`` / ``False`` / ``None``, and lists, tuples, dicts and sets of those, ``set()``
  included); no keyword or starred argument, no name, other call, attribute, operator (``-1`` and complex
  literals aside), comprehension or f-string. An
  ``assert`` message is allowed when it is a literal, and ignored. On a ``Solution`` problem the plain
  form is accepted too and read as the method's call: it names the one function the tests can mean, and
  rejecting it would teach the layout of a call, not testing. Any other statement or assert is dropped
  and counted. A kept test becomes a :class:`CallTest` (plain values, never code), stored and shown as
  its canonical text (:attr:`CallTest.assertion`, re-rendered from the values with ``repr``; a test whose
  values do not survive that round trip, e.g. ``1e999``, is dropped), and judged as a call test of the
  sandbox (:meth:`CallTest.test_case`): the candidate's function is called once with the arguments and
  the returned value compared ``==`` with the expected value on the trusted side.

Parsers never execute model text (``ast.literal_eval`` reads literals, nothing else). Every malformed response raises
:class:`~pettingllms.agents.failures.ParseError` saying what was expected, never another exception; all
run in time linear in the response (plus ``ast.parse``).
"""

from __future__ import annotations

import ast
import re
import textwrap
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pettingllms.agents.failures import ParseError
from pettingllms.envs.code.analysis import SOLUTION_CLASS
from pettingllms.sandbox import plain_data
from pettingllms.sandbox.judge import TestCase

PYTHON_TAGS: tuple[str, ...] = ("python", "py", "python3", "py3", "")
_FENCE = "```"
_TAG_END = re.compile(r"[\s:{,]")
# Header words after the decoration is stripped; the classes that meet are disjoint, so matching is linear.
_HEADER = re.compile(
    r"(?:(?:test|sample|example)(?:\s+case)?(?:\s+#?\d+)?\s+)?(expected\s+output|input|output)(?:\s+#?\d+)?"
)
_DECORATION = " \t#>*_"


@dataclass(frozen=True)
class _Block:
    """One fenced block: its language tag (lower case, first word) and body (lines joined by newlines)."""

    tag: str
    body: str


def _lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _fence_opener(line: str) -> tuple[int, int, str] | None:
    """``(indent, backtick count, info string)`` when ``line`` opens a fence."""
    stripped = line.lstrip(" \t")
    if not stripped.startswith(_FENCE):
        return None
    ticks = len(stripped) - len(stripped.lstrip("`"))
    return len(line) - len(stripped), ticks, stripped[ticks:]


def _closes(line: str, ticks: int) -> bool:
    stripped = line.strip()
    return len(stripped) >= ticks and stripped == "`" * len(stripped)


def _tag_of(info: str) -> str:
    info = info.strip().lower()
    return _TAG_END.split(info, 1)[0] if info else ""


def _unindent(line: str, indent: int) -> str:
    """``line`` less up to ``indent`` leading spaces or tabs (those of an indented fence)."""
    cut = len(line) - len(line.lstrip(" \t"))
    return line[min(cut, indent):]


def _scan(
    lines: list[str], split_at_fence: Callable[[str], int | None] | None = None
) -> list[tuple[str, str] | _Block]:
    """Response lines as ``("line", prose line)`` items and :class:`_Block` items, in order.

    ``split_at_fence(line)``, for prose lines, may return the index of a fence that opens inside the
    line; the text from there is then read as a line of its own.
    """
    items: list[tuple[str, str] | _Block] = []
    lines = list(lines)
    i = 0
    while i < len(lines):
        opener = _fence_opener(lines[i])
        if opener is None:
            cut = split_at_fence(lines[i]) if split_at_fence is not None else None
            if cut is not None:
                items.append(("line", lines[i][:cut]))
                lines[i] = lines[i][cut:]
                continue
            items.append(("line", lines[i]))
            i += 1
            continue
        indent, ticks, info = opener
        if _FENCE in info:  # a one-line block: ```1 2```
            inner = info.rstrip().rstrip("`")
            items.append(_Block("", inner.strip()))
            i += 1
            continue
        body: list[str] = []
        i += 1
        while i < len(lines) and not _closes(lines[i], ticks):
            body.append(_unindent(lines[i], indent))
            i += 1
        i += 1  # past the closing fence (or the end)
        items.append(_Block(_tag_of(info), "\n".join(body)))
    return items


def _parses(source: str) -> ast.Module | None:
    """The module ``source`` parses to, or None. CPython's parser raises MemoryError or RecursionError (not
    SyntaxError) on deeply nested text, and warns on odd escapes; both are a "no" here."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _trim_blank_lines(text: str) -> str:
    """``text`` without its leading and trailing whitespace-only lines."""
    lines = text.split("\n")
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return "\n".join(lines[start:end])


# ---- programs ---------------------------------------------------------------------------------------


def parse_program(text: str) -> str:
    """The program in a coder's response (see the module docstring); ParseError when there is none."""
    blocks = [item for item in _scan(_lines(text)) if isinstance(item, _Block)]
    python = [b for b in blocks if b.tag in PYTHON_TAGS and b.body.strip()]
    if python:
        code = python[-1].body
    elif blocks:
        tags = sorted({b.tag for b in blocks})
        raise ParseError(
            f"no non-empty python code block (found blocks tagged {tags}): put the program in ```python ... ```"
        )
    else:
        code = textwrap.dedent("\n".join(_lines(text)))
        if not code.strip():
            raise ParseError("empty response: expected a program in a ```python ... ``` block")
        if _parses(code) is None:
            raise ParseError("no code block, and the response is not valid Python: put the program in ```python ... ```")
    program = _trim_blank_lines(textwrap.dedent(code))
    return program + "\n"


def format_program(program: str) -> str:
    """A program as a response :func:`parse_program` reads back (a fence longer than any backtick run)."""
    return f"{_fence_for(program)}python\n{program.rstrip()}\n{_fence_for(program)}\n"


def _fence_for(content: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", content)), default=0)
    return "`" * max(3, longest + 1)


# ---- stdio tests --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StdioTestCase:
    """One generated stdin/stdout test: ``input`` ends with a newline, ``output`` has no trailing space."""

    input: str
    output: str


@dataclass(frozen=True)
class StdioTests:
    """The parsed tests and how many sections were dropped (unpaired, past ``max_tests``)."""

    cases: tuple[StdioTestCase, ...]
    dropped: int


def _header(line: str) -> tuple[str, str | None] | None:
    """``(kind, inline value or None)`` when ``line`` is a test header; kind is ``input`` or ``output``."""
    lead = line.lstrip(_DECORATION + "-")
    if not lead[:1].isalpha():
        return None
    match = _HEADER.match(lead.lower())
    if match is None:
        return None
    rest = lead[match.end():]
    decoration = rest[: len(rest) - len(rest.lstrip(_DECORATION + ":"))]
    value = rest[len(decoration):]
    if ":" not in decoration and value.strip():
        return None  # prose that starts with the word, e.g. "Output the sum"
    kind = "input" if match.group(1) == "input" else "output"
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == "`" and not value.startswith(_FENCE):
        value = value[1:-1]
    return kind, (value or None)


def _header_fence(line: str) -> int | None:
    """Where a fence opens on a header line (``**Test Input:** ```...``), else None."""
    if _FENCE not in line:
        return None
    header = _header(line)
    if header is None or header[1] is None or not header[1].startswith(_FENCE):
        return None
    return line.index(_FENCE)


def _value(kind: str, raw: str) -> str:
    value = _trim_blank_lines(raw)
    if kind == "input":
        return value + "\n" if value else ""
    return value.rstrip()


def parse_stdio_tests(text: str, max_tests: int | None = None) -> StdioTests:
    """Input/output pairs from a tester's response (format in the module docstring); ParseError when none."""
    if max_tests is not None and (isinstance(max_tests, bool) or not isinstance(max_tests, int) or max_tests < 1):
        raise ValueError(f"`max_tests` must be an integer >= 1 or None, got {max_tests!r}")
    sections: list[tuple[str, str | None]] = []  # (kind, raw value or None while awaiting its block)
    for item in _scan(_lines(text), _header_fence):
        if isinstance(item, _Block):
            if sections and sections[-1][1] is None:
                sections[-1] = (sections[-1][0], item.body)
            continue
        header = _header(item[1])
        if header is not None:
            sections.append(header)
    cases: list[StdioTestCase] = []
    dropped = 0
    pending: str | None = None
    for kind, raw in sections:
        if raw is None:
            dropped += 1
        elif kind == "input":
            dropped += pending is not None
            pending = _value("input", raw)
        elif pending is None:
            dropped += 1
        else:
            cases.append(StdioTestCase(pending, _value("output", raw)))
            pending = None
    dropped += pending is not None
    if not cases:
        raise ParseError(
            "no test case found: write each test as a `**Test Input:**` line and a fenced block with the "
            "input, then a `**Test Output:**` line and a fenced block with the expected output"
        )
    if max_tests is not None and len(cases) > max_tests:
        dropped += 2 * (len(cases) - max_tests)
        cases = cases[:max_tests]
    return StdioTests(tuple(cases), dropped)


def format_stdio_tests(cases: list[StdioTestCase] | tuple[StdioTestCase, ...]) -> str:
    """Tests in the format :func:`parse_stdio_tests` reads (for prompts and scripted testers)."""
    parts = []
    for case in cases:
        for title, value in (("Test Input", case.input), ("Test Output", case.output)):
            fence = _fence_for(value)
            parts.append(f"**{title}:**\n{fence}\n{value.rstrip(chr(10))}\n{fence}")
    return "\n".join(parts) + "\n"


# ---- call tests ---------------------------------------------------------------------------------------

_LITERAL_ERRORS = (ValueError, TypeError, SyntaxError, MemoryError, RecursionError)


def is_solution_class(starter_code: str) -> bool:
    """Whether a problem's tests call ``Solution().<entry_point>(...)``: its starter code defines ``class
    Solution`` (the loaders' rule, ``data._call``)."""
    return f"class {SOLUTION_CLASS}" in (starter_code or "")


@dataclass(frozen=True)
class CallTest:
    """One generated function test: ``<entry_point>(*args) == expected`` (through ``Solution()`` when
    ``solution_class``), plain values only. Make one with :func:`call_test`, which checks the round trip."""

    entry_point: str
    args: tuple
    expected: Any
    solution_class: bool = False

    @property
    def assertion(self) -> str:
        """The canonical text: ``assert f(1, [2]) == 3``, each value its ``repr`` (one line)."""
        target = f"{SOLUTION_CLASS}().{self.entry_point}" if self.solution_class else self.entry_point
        return f"assert {target}({', '.join(repr(a) for a in self.args)}) == {self.expected!r}"

    def test_case(self) -> TestCase:
        """The sandbox's call test: nothing of it is executed as code."""
        return TestCase(args=self.args, expected=self.expected, entry_point=self.entry_point,
                        solution_class=self.solution_class)


@dataclass(frozen=True)
class CallTests:
    """The parsed call tests and how many statements or lines were dropped."""

    tests: tuple[CallTest, ...]
    dropped: int


def _same_values(left: Any, right: Any) -> bool:
    """Equal as plain data with exact types (``1 != True != 1.0`` here, unlike ``==``)."""
    return plain_data.encode(left) == plain_data.encode(right)


def call_test(entry_point: str, args: tuple, expected: Any, solution_class: bool = False) -> CallTest | None:
    """A :class:`CallTest` of these values, or None when they are not plain data or its canonical text does
    not read back as the same values (``float('inf')`` has no literal; ``repr`` writes ``inf``)."""
    try:
        made = CallTest(entry_point, tuple(args), expected, bool(solution_class))
        again = _call_of(_single_assert(made.assertion), entry_point, solution_class)
        if again is None or not _same_values((made.args, made.expected), (again.args, again.expected)):
            return None
    except (plain_data.NotPlainData, *_LITERAL_ERRORS):
        return None
    return made


def _is_target(func: ast.expr, entry_point: str, solution_class: bool) -> bool:
    """``entry_point`` itself, or ``Solution().entry_point`` on a Solution problem."""
    if isinstance(func, ast.Name):
        return func.id == entry_point
    return (solution_class and isinstance(func, ast.Attribute) and func.attr == entry_point
            and isinstance(func.value, ast.Call) and isinstance(func.value.func, ast.Name)
            and func.value.func.id == SOLUTION_CLASS and not func.value.args and not func.value.keywords)


def _call_of(node: ast.Assert | None, entry_point: str, solution_class: bool) -> CallTest | None:
    """The values of ``assert <target>(<literals>) == <literal>`` (a literal message allowed), else None."""
    if node is None:
        return None
    test = node.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return None
    call = test.left
    if not (isinstance(call, ast.Call) and not call.keywords and _is_target(call.func, entry_point, solution_class)):
        return None
    if any(isinstance(arg, ast.Starred) for arg in call.args):
        return None
    try:
        if node.msg is not None:
            ast.literal_eval(node.msg)
        args = tuple(ast.literal_eval(arg) for arg in call.args)
        expected = ast.literal_eval(test.comparators[0])
    except _LITERAL_ERRORS:
        return None
    return CallTest(entry_point, args, expected, solution_class)


def _single_assert(source: str) -> ast.Assert | None:
    module = _parses(source)
    if module is None or len(module.body) != 1 or not isinstance(module.body[0], ast.Assert):
        return None
    return module.body[0]


def _segment(lines: list[str], node: ast.stmt) -> str:
    """The source of ``node`` (offsets are UTF-8 byte columns). ``ast.get_source_segment`` splits the whole
    source on every call, which is quadratic over a block of thousands of asserts."""
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
    start, end = node.col_offset, node.end_col_offset
    if first == last:
        return lines[first].encode()[start:end].decode()
    head = lines[first].encode()[start:].decode()
    tail = lines[last].encode()[:end].decode()
    return "\n".join([head, *lines[first + 1:last], tail])


def _asserts_of(code: str) -> tuple[list[ast.Assert], int]:
    """Each top-level assert in ``code``, and the count of other statements or lines."""
    code = textwrap.dedent(code)
    module = _parses(code)
    if module is not None:
        found, dropped = [], 0
        lines = code.split("\n")
        for stmt in module.body:
            # Re-parsed alone, so that `assert a; import os` keeps the assert and drops the import.
            node = _single_assert(_segment(lines, stmt)) if isinstance(stmt, ast.Assert) else None
            if node is None:
                dropped += 1
            else:
                found.append(node)
        return found, dropped
    # Not valid Python as a whole (prose, a broken line): judge line by line.
    found, dropped = [], 0
    for line in code.split("\n"):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        node = _single_assert(stripped) if stripped.startswith("assert") else None
        if node is None:
            dropped += 1
        else:
            found.append(node)
    return found, dropped


def _example(entry_point: str, solution_class: bool) -> str:
    return f"assert {SOLUTION_CLASS + '().' if solution_class else ''}{entry_point}(...) == expected"


def parse_call_tests(
    text: str, entry_point: str, solution_class: bool = False, max_tests: int | None = None
) -> CallTests:
    """Call tests of ``entry_point`` from a tester's response (format in the module docstring); the first
    ``max_tests`` are kept, the rest dropped and counted. ParseError when none is found."""
    if not (isinstance(entry_point, str) and entry_point.isidentifier()):
        raise ValueError(f"`entry_point` must be a Python identifier, got {entry_point!r}")
    if max_tests is not None and (isinstance(max_tests, bool) or not isinstance(max_tests, int) or max_tests < 1):
        raise ValueError(f"`max_tests` must be an integer >= 1 or None, got {max_tests!r}")
    blocks = [item for item in _scan(_lines(text)) if isinstance(item, _Block)]
    sources = [b.body for b in blocks if b.tag in PYTHON_TAGS] if blocks else ["\n".join(_lines(text))]
    tests: list[CallTest] = []
    dropped = 0
    for source in sources:
        found, skipped = _asserts_of(source)
        dropped += skipped
        for node in found:
            parsed = _call_of(node, entry_point, solution_class)
            checked = None if parsed is None else call_test(entry_point, parsed.args, parsed.expected, solution_class)
            if checked is None:
                dropped += 1
            else:
                tests.append(checked)
    if not tests:
        raise ParseError(f"no test found: write one `{_example(entry_point, solution_class)}` per line in a ```python "
                         "block, the arguments and the expected value written as literals")
    if max_tests is not None and len(tests) > max_tests:
        dropped += len(tests) - max_tests
        tests = tests[:max_tests]
    return CallTests(tuple(tests), dropped)


def parse_call_test(assertion: str, entry_point: str, solution_class: bool = False) -> CallTest:
    """The :class:`CallTest` of one canonical test text (as stored in the state); a ValueError naming the
    text when it is not exactly one accepted assert."""
    parsed = _call_of(_single_assert(assertion), entry_point, solution_class)
    if parsed is None:
        raise ValueError(f"not a call test of `{entry_point}`: {assertion!r:.120}")
    return parsed


__all__ = [
    "PYTHON_TAGS",
    "SOLUTION_CLASS",
    "CallTest",
    "CallTests",
    "StdioTestCase",
    "StdioTests",
    "call_test",
    "format_program",
    "format_stdio_tests",
    "is_solution_class",
    "parse_call_test",
    "parse_call_tests",
    "parse_program",
    "parse_stdio_tests",
]
