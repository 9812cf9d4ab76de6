"""The math workflow's parsers: boxed / #### answers, fenced blocks, calculator blocks, printed output.

The fuzz tests run a few thousand cases each and assert that a parser returns a well-formed result
(never raises), plus the round trip ``last_boxed("\\boxed{" + s + "}") == s`` for balanced ``s``.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pettingllms.envs.math.answers import (
    calculator_expression,
    code_blocks,
    extract_answer,
    hash_answer,
    last_boxed,
    last_code_block,
    printed_answer,
)


def balanced(s: str) -> bool:
    """Independent check of the documented rule: a backslash escapes the next character, braces nest."""
    depth = 0
    escaped = False
    for char in s:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0 and not escaped


# ---- last_boxed ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is $\\boxed{42}$.", "42"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("first \\boxed{1}, then \\boxed{2}", "2"),  # the last box wins
        ("\\fbox{7}", "7"),
        ("\\boxed{1} and \\fbox{x^{2}}", "x^{2}"),
        ("so $\\boxed 5$", "5"),  # brace-less form stops at $
        ("\\boxed 12 apples", "12"),
        ("\\boxed {3}", "3"),  # blank between command and group
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),  # escaped braces are not groups
        ("\\boxed{\\left\\{ x \\right.}", "\\left\\{ x \\right."),
        ("\\boxed{\\boxed{5}}", "\\boxed{5}"),  # a box in a box belongs to the outer one
        ("\\boxed{}", ""),
        ("no box here", None),
        ("\\boxed{1} then \\boxed{2", None),  # the last box never closes: cut off
        ("\\boxed{", None),
        ("\\boxeds{3}", None),  # another command
        ("\\boxed", None),
        ("\\boxed{a}}", "a"),  # a stray closing brace after the box does not matter
        ("x \\\\{\\boxed{9}", "9"),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


_latexish = st.lists(st.sampled_from(list("{}\\ab1 $#\n") + ["\\boxed", "\\fbox", "####"]), max_size=40).map(
    "".join
)


@settings(max_examples=1000)
@given(st.one_of(_latexish, st.text(max_size=80)))
def test_last_boxed_fuzz_never_raises(text):
    result = last_boxed(text)
    assert result is None or (isinstance(result, str) and result in text)


# Balanced by construction: plain text, escaped characters (``\\{``, ``\\\\``) and nested ``{...}`` groups.
_plain = st.text(alphabet=st.characters(blacklist_characters="{}\\"), max_size=6) | st.sampled_from(
    ["\\boxed", "\\fbox", "\\boxed ", "$", "####", "\\frac"]
)
_escaped = st.characters().map(lambda char: "\\" + char)
_balanced = st.recursive(
    st.one_of(_plain, _escaped),
    lambda inner: st.one_of(inner.map(lambda s: "{" + s + "}"), st.lists(inner, max_size=4).map("".join)),
    max_leaves=12,
)


@settings(max_examples=1500)
@given(st.one_of(_balanced, _latexish.filter(balanced)))
def test_last_boxed_round_trip(s):
    assert balanced(s)
    assert last_boxed(f"\\boxed{{{s}}}") == s
    assert last_boxed(f"Thus \\boxed{{0}} is wrong; $\\boxed{{{s}}}$.") == s


def test_last_boxed_is_linear_on_adversarial_input():
    text = "\\boxed{" * 20_000 + "}" * 20_000
    start = time.perf_counter()
    assert last_boxed(text) == "\\boxed{" * 19_999 + "}" * 19_999
    assert last_boxed("\\boxed 1 " * 20_000) == "1"
    assert time.perf_counter() - start < 5.0  # quadratic work on 20k braces would take far longer


# ---- hash_answer / extract_answer ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("She pays 3 + 4 = 7.\n#### 7", "7"),
        ("#### 1,000  \nmore text", "1,000"),
        ("#### 1\n#### 2\r\nend", "2"),
        ("####", None),
        ("####   \n5", None),  # the rest of *that* line is empty
        ("no marker", None),
    ],
)
def test_hash_answer(text, expected):
    assert hash_answer(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{ 12 }\n#### 9", "12"),  # the box wins, stripped
        ("\\boxed{  }\n#### 9", "9"),  # an empty box falls back to ####
        ("#### 9", "9"),
        ("nothing", None),
        ("\\boxed{ }", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@settings(max_examples=1000)
@given(st.one_of(_latexish, st.text(max_size=80)))
def test_extract_answer_fuzz(text):
    result = extract_answer(text)
    assert result is None or (result and result == result.strip())
    result = hash_answer(text)
    assert result is None or (result and result == result.strip() and "\n" not in result)


# ---- fenced blocks ----------------------------------------------------------------------------------------


def test_code_blocks_tags_and_order():
    text = (
        "Plan.\n```python\nprint(1)\n```\n```text\nignored\n```\n```PY\nprint(2)\n```\n"
        "```\nprint(3)\n```\n```python3\nprint(4)\n```\n"
    )
    assert code_blocks(text) == ["print(1)", "print(2)", "print(3)"]  # python3 is not in the default tags
    assert code_blocks(text, ("python3",)) == ["print(4)"]
    assert code_blocks(text, ("text",)) == ["ignored"]
    assert last_code_block(text) == "print(3)"


def test_code_blocks_only_closed_ones_count():
    assert code_blocks("```python\nprint(1)\n") == []
    assert last_code_block("```python\nprint(1)\n```\n```python\nprint(2)\n") == "print(1)"
    assert last_code_block("```python\nprint(1)\n") is None


def test_code_blocks_fence_details():
    # Longer fences hold shorter backtick runs; indentation of the opener is removed from the body.
    text = "  ````python\n  s = '```'\n    print(s)\n  ````"
    assert code_blocks(text) == ["s = '```'\n  print(s)"]
    assert code_blocks("```python\r\na = 1\r\n```") == ["a = 1"]  # \r\n line ends
    assert code_blocks("```python```") == []  # one-line inline code is not a block
    assert code_blocks("```python {.numberLines}\nx\n```") == ["x"]  # the tag is the first word
    assert last_code_block("```python\nx\n```\n```python\n   \n```") == "x"  # blank blocks are skipped
    with pytest.raises(TypeError, match="languages"):
        code_blocks("```\nx\n```", "python")


def test_calculator_expression():
    text = "```calc\n1 + 1\n```\nBetter:\n```Calculator\n  (3 + 4) * 2 \n```\n```python\nprint(9)\n```"
    assert calculator_expression(text) == "(3 + 4) * 2"
    assert calculator_expression("```calc\n1+1\n```") == "1+1"
    assert calculator_expression("```python\n1+1\n```") is None
    assert calculator_expression("```calc\n1+1\n") is None  # not closed
    assert calculator_expression("no block") is None


_fency = st.lists(
    st.sampled_from(["```", "````", "python", "calc", "py", "\n", " ", "x", "`", "\r"]), max_size=40
).map("".join)


@settings(max_examples=1000)
@given(st.one_of(_fency, st.text(max_size=80)))
def test_block_parsers_fuzz(text):
    blocks = code_blocks(text)
    assert all(isinstance(block, str) for block in blocks)
    last = last_code_block(text)
    assert last is None or (last in blocks and last.strip())
    expression = calculator_expression(text)
    assert expression is None or (expression and expression == expression.strip())


@settings(max_examples=1000)
@given(st.text(alphabet=st.characters(blacklist_characters="`\r"), max_size=60))
def test_code_block_round_trip(body):
    assert code_blocks(f"text\n```python\n{body}\n```\nmore") == [body]


# ---- printed_answer -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        ("42\n", "42"),
        ("step 1\nstep 2\n  7/3  \n\n\n", "7/3"),
        ("The answer is \\boxed{12}\n", "12"),
        ("\\boxed{}\n", "\\boxed{}"),  # an empty box is not an answer to unwrap
        ("", None),
        ("  \n\t\n", None),
        ("a\r\nb\r\n", "b"),
    ],
)
def test_printed_answer(stdout, expected):
    assert printed_answer(stdout) == expected


@settings(max_examples=1000)
@given(st.one_of(_latexish, st.text(max_size=80)))
def test_printed_answer_fuzz(stdout):
    result = printed_answer(stdout)
    assert result is None or (result and result == result.strip())
