"""The code workflow's response parsers: documented formats, variations, failures, and fuzzing.

The fuzz tests run a few thousand cases each (explicit ``max_examples``; the rest comes from the
``dev`` / ``ci`` profile of ``tests/conftest.py``) and assert that a parser returns a well-formed result
or raises ParseError, nothing else.
"""

from __future__ import annotations

import ast
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pettingllms.agents import ParseError
from pettingllms.envs.code.parsing import (
    CallTest,
    CallTests,
    StdioTestCase,
    StdioTests,
    call_test,
    format_program,
    format_stdio_tests,
    is_solution_class,
    parse_call_test,
    parse_call_tests,
    parse_program,
    parse_stdio_tests,
)

# ---- programs ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "program"),
    [
        ("```python\nprint(1)\n```", "print(1)\n"),
        ("Here it is:\n```py\nx = 1\nprint(x)\n```\nIt prints 1.", "x = 1\nprint(x)\n"),
        ("```\nprint(2)\n```", "print(2)\n"),  # untagged
        ("```Python3\nprint(3)\n```", "print(3)\n"),
        # The last python block wins; a later block in another language is ignored.
        ("```python\nold()\n```\nBetter:\n```python\nnew()\n```\n```text\n7\n```", "new()\n"),
        # An unterminated final fence runs to the end.
        ("Draft:\n```python\nold()\n```\nFinal:\n```python\ndef f():\n    return 1\n", "def f():\n    return 1\n"),
        # CRLF and lone CR line ends.
        ("```python\r\nif x:\r\n    y()\r\n```\r\n", "if x:\n    y()\n"),
        ("```python\rprint(1)\r```", "print(1)\n"),
        # Backticks inside a line are code, not a fence.
        ('```python\ns = "```"\nprint(s)\n```', 's = "```"\nprint(s)\n'),
        # A longer fence may hold a line of three backticks.
        ('````python\ndoc = """\n```\n"""\n````', 'doc = """\n```\n"""\n'),
        # A fence indented inside a list: the indentation is removed.
        ("1. Code:\n   ```python\n   def f():\n       return 2\n   ```", "def f():\n    return 2\n"),
        # A trailing empty block does not hide the program.
        ("```python\nprint(1)\n```\n```\n\n```", "print(1)\n"),
        # Blank lines around the code are dropped.
        ("```python\n\n\nprint(1)\n\n```", "print(1)\n"),
    ],
)
def test_program_from_fenced_blocks(text, program):
    assert parse_program(text) == program


def test_bare_code_without_a_fence_is_the_program_when_it_is_python():
    assert parse_program("import sys\r\nprint(sum(map(int, sys.stdin.read().split())))\r\n") == (
        "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n"
    )
    assert parse_program("  x = 1\n  print(x)") == "x = 1\nprint(x)\n"  # dedented


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty response"),
        ("   \n\t\n", "empty response"),
        ("I think the answer is to loop over the list.", "not valid Python"),
        ("```python\n\n```", "no non-empty python code block"),
        ("```python", "no non-empty python code block"),  # an opener and nothing else
        ("```cpp\nint main() {}\n```", "tagged \\['cpp'\\]"),
    ],
)
def test_program_failures_are_parse_errors_saying_what_was_expected(text, message):
    with pytest.raises(ParseError, match=message) as info:
        parse_program(text)
    assert "```python" in str(info.value)


_CODE_LINE = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=30)


@given(st.lists(_CODE_LINE, min_size=1, max_size=8))
def test_format_program_round_trips(lines):
    lines = [line if line.strip() else "" for line in lines]  # blank lines are normalised to empty
    if not lines[0][:1].strip() or not lines[-1].strip():
        return  # a normal program starts at column 0 and ends in a non-blank line
    program = "\n".join(lines).rstrip() + "\n"
    assert parse_program(format_program(program)) == program
    assert parse_program("Some prose.\n" + format_program(program) + "More prose.") == program


# ---- stdio tests ----------------------------------------------------------------------------------------------

CANONICAL = """I will test small and edge cases.
**Test Input:**
```input
3 4
```
**Test Output:**
```output
7
```
**Test Input:**
```
1
2 3
```
**Test Output:**
```
5
6
```
"""


def test_stdio_tests_in_the_documented_format():
    parsed = parse_stdio_tests(CANONICAL)
    assert parsed == StdioTests((StdioTestCase("3 4\n", "7"), StdioTestCase("1\n2 3\n", "5\n6")), dropped=0)


@pytest.mark.parametrize(
    "text",
    [
        "**Test Input**:\n```\n3 4\n```\n**Test Output**:\n```\n7\n```",  # colon outside the bold marks
        "### Test Input\n```\n3 4\n```\n### Expected Output\n```\n7\n```",  # headings, no colon
        "Test Case 1 Input: `3 4`\nExpected Output: 7",  # inline values
        "input:\n```\n3 4\n```\noutput:\n```\n7  \n```",  # lower case, trailing spaces in the output
        "**Sample Input 1:** ```3 4```\n**Sample Output 1:** ```7```",  # one-line fences on the header line
        "**Test Input:** ```\n3 4\n```\n**Test Output:**```text\n7\n```",  # a fence opened on the header line
        "**Test Input:**\r\n```\r\n3 4\r\n```\r\n**Test Output:**\r\n```\r\n7\r\n```\r\n",  # CRLF
        "__Test Input:__\n\n```\n\n3 4\n\n```\n\nSome words.\n\n__Test Output:__\n```\n7\n",  # unterminated
        "- **Test Input:**\n  ```\n  3 4\n  ```\n- **Test Output:**\n  ```\n  7\n  ```",  # in a list
    ],
)
def test_stdio_test_variations(text):
    assert parse_stdio_tests(text) == StdioTests((StdioTestCase("3 4\n", "7"),), dropped=0)


def test_unpaired_sections_are_dropped_and_counted():
    text = (
        "**Test Output:**\n```\n0\n```\n"  # an output with no input: dropped
        "**Test Input:**\n```\n1\n```\n"  # an input replaced by the next input: dropped
        "**Test Input:**\n```\n2\n```\n**Test Output:**\n```\n4\n```\n"
        "**Test Input:**\n**Test Output:**\n```\n9\n```\n"  # an input with no value, then an orphan output
        "**Test Input:**\n```\n3\n```\n"  # an input with no output at the end
    )
    assert parse_stdio_tests(text) == StdioTests((StdioTestCase("2\n", "4"),), dropped=5)


def test_prose_that_starts_with_a_header_word_is_not_a_header():
    text = "Output the sum of the numbers.\nInput numbers are small.\n**Test Input:**\n```\n1 1\n```\n**Test Output:**\n```\n2\n```"
    assert parse_stdio_tests(text) == StdioTests((StdioTestCase("1 1\n", "2"),), dropped=0)


def test_max_tests_keeps_the_first_tests():
    parsed = parse_stdio_tests(CANONICAL, max_tests=1)
    assert parsed.cases == (StdioTestCase("3 4\n", "7"),) and parsed.dropped == 2
    with pytest.raises(ValueError, match="max_tests"):
        parse_stdio_tests(CANONICAL, max_tests=0)


@pytest.mark.parametrize(
    "text", ["", "The program looks right to me.", "```\n3 4\n```\n```\n7\n```", "**Test Input:**\n```\n1\n```"]
)
def test_no_stdio_test_is_a_parse_error_naming_the_format(text):
    with pytest.raises(ParseError, match=r"\*\*Test Input:\*\*"):
        parse_stdio_tests(text)


_VALUE_LINE = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), min_size=1, max_size=20)
_VALUE = st.lists(_VALUE_LINE.filter(str.strip), min_size=1, max_size=4).map("\n".join)


@given(st.lists(st.tuples(_VALUE, _VALUE), min_size=1, max_size=5))
def test_format_stdio_tests_round_trips(pairs):
    cases = [StdioTestCase(inp + "\n", out.rstrip()) for inp, out in pairs]
    assert parse_stdio_tests(format_stdio_tests(cases)) == StdioTests(tuple(cases), dropped=0)


def test_format_stdio_tests_keeps_blank_lines_inside_and_backtick_lines():
    cases = [StdioTestCase("2\n\n```\nInput: ```x```\n", "a\n\nb")]
    assert parse_stdio_tests(format_stdio_tests(cases)).cases == tuple(cases)


# ---- call tests ------------------------------------------------------------------------------------------------


def texts(found: CallTests) -> list[str]:
    return [test.assertion for test in found.tests]


def test_call_tests_from_a_python_block():
    text = (
        "Tests:\n```python\nfrom solution import add\n# edge cases\nassert add(1, 2) == 3\n\n"
        "assert add(\n    -1,\n    1,\n) == 0\ndef helper():\n    pass\nassert True\nprint('done')\n```"
    )
    parsed = parse_call_tests(text, "add")
    # The import, the def, `assert True` and the print are dropped; the multi-line assert is re-rendered.
    assert texts(parsed) == ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"] and parsed.dropped == 4
    assert parsed.tests[1] == CallTest("add", (-1, 1), 0, False)
    # Non-ASCII text before and inside a multi-line assert (ast columns count UTF-8 bytes).
    accented = "```python\nx = '\u00e9'; assert f('\u00e9',\n    '\u00e9\u00e9') == 1\n```"
    assert texts(parse_call_tests(accented, "f")) == ["assert f('\u00e9', '\u00e9\u00e9') == 1"]
    assert parse_call_tests(accented, "f").dropped == 1


@pytest.mark.parametrize(
    "line",
    [
        "assert f(1) == f(1)",  # a tautology: the expected value is a call
        "assert f(1) == 3 or True",
        "assert isinstance(f(1), object)",
        "assert f(1) is None or f(1) is not None",
        "assert f(1) == 3 and 'float' not in open('solution.py').read()",  # fingerprints the program
        "assert f(1) == 3 and 'x' not in f.__code__.co_names",
        "assert f(x) == 1",  # names
        "assert f(1) == y",
        "assert f(len([1])) == 1",  # calls
        "assert f(10**3) == 1",  # operators
        "assert f(a=1) == 1",  # keyword and starred arguments
        "assert f(*[1]) == 1",
        "assert f([i for i in range(3)]) == [0]",  # comprehension
        "assert f(f'{1}') == '1'",  # f-string
        "assert f(1).real == 1",
        "assert obj.f(1) == 1",
        "assert Solution().f(1) == 1",  # not a Solution problem
        "assert f(1) != 2",
        "assert f(1) < 2",
        "assert 2 == f(1)",  # the one form: the call on the left
        "assert f(1) == 2 == 2",
        "assert f(1) == 2, message",  # a message that is not a literal
        "assert g(1) == 2",  # another function
        "assert f(1e999) == 1",  # no literal writes float('inf') back
    ],
)
def test_only_a_call_with_literal_values_is_a_test(line):
    text = f"```python\n{line}\nassert f(2) == 4\n```"
    assert parse_call_tests(text, "f") == CallTests((CallTest("f", (2,), 4),), dropped=1)
    with pytest.raises(ParseError, match=r"`assert f\(\.\.\.\) == expected`.*literals"):
        parse_call_tests(f"```python\n{line}\n```", "f")


@pytest.mark.parametrize(
    ("line", "canonical", "values"),
    [
        ("assert f(-1) == -1.5", "assert f(-1) == -1.5", ((-1,), -1.5)),
        ("assert f((1,), [2, (3, 'a')]) == (1,)", "assert f((1,), [2, (3, 'a')]) == (1,)", (((1,), [2, (3, "a")]), (1,))),
        ("assert f({1: 'a'}, {2, 3}) == {}", "assert f({1: 'a'}, {2, 3}) == {}", (({1: "a"}, {2, 3}), {})),
        ("assert f(set(), b'x', None) == 1j", "assert f(set(), b'x', None) == 1j", ((set(), b"x", None), 1j)),
        ("assert f(0x10, 1_000) == True, 'a message'", "assert f(16, 1000) == True", ((16, 1000), True)),
        ('assert f("tab\\there") == ""', "assert f('tab\\there') == ''", (("tab\there",), "")),
        ("assert f() == None", "assert f() == None", ((), None)),
    ],
)
def test_accepted_tests_are_stored_as_their_canonical_text(line, canonical, values):
    (test,) = parse_call_tests(f"```python\n{line}\n```", "f").tests
    assert test.assertion == canonical and (test.args, test.expected) == values
    assert parse_call_test(canonical, "f") == test
    case = test.test_case()
    assert (case.kind, case.args, case.expected, case.entry_point, case.solution_class) == ("call", *values, "f", False)


def test_solution_problems_take_the_method_call_and_the_plain_form():
    assert is_solution_class("class Solution:\n    def twoSum(self, nums, target):\n        ")
    assert not is_solution_class("def twoSum(nums, target):\n    ") and not is_solution_class("")
    text = "```python\nassert Solution().twoSum([2, 7], 9) == [0, 1]\nassert twoSum([3, 3], 6) == [0, 1]\n```"
    parsed = parse_call_tests(text, "twoSum", solution_class=True)
    assert texts(parsed) == ["assert Solution().twoSum([2, 7], 9) == [0, 1]", "assert Solution().twoSum([3, 3], 6) == [0, 1]"]
    assert all(t.solution_class and t.test_case().solution_class for t in parsed.tests)
    # Solution(...) with arguments, or another method, is not the accepted form.
    odd = "```python\nassert Solution(1).twoSum([1], 1) == 0\nassert Solution().other([1], 1) == 0\n```"
    with pytest.raises(ParseError, match=r"`assert Solution\(\)\.twoSum\(\.\.\.\) == expected`"):
        parse_call_tests(odd, "twoSum", solution_class=True)


def test_a_stored_text_parses_back_or_is_an_error_naming_it():
    assert parse_call_test("assert Solution().f(1) == 2", "f", True) == CallTest("f", (1,), 2, True)
    for bad in ("assert f(x) == 1", "assert f(1) == 1\nassert f(2) == 2", "f(1) == 1", "assert g(1) == 1"):
        with pytest.raises(ValueError, match="not a call test of `f`"):
            parse_call_test(bad, "f")
    assert call_test("f", (float("inf"),), 1) is None and call_test("f", (object(),), 1) is None
    assert call_test("f", (1,), [2.5, -0.0]).assertion == "assert f(1) == [2.5, -0.0]"


_LITERALS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5)
    | st.binary(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(st.text(max_size=3) | st.integers(), inner, max_size=3),
    max_leaves=8,
)


@given(st.lists(_LITERALS, max_size=3).map(tuple), _LITERALS, st.booleans())
def test_canonical_text_round_trips_the_exact_values(args, expected, solution_class):
    made = call_test("f", args, expected, solution_class)
    assert made is not None
    again = parse_call_test(made.assertion, "f", solution_class)
    assert again.assertion == made.assertion and "\n" not in made.assertion
    assert repr((again.args, again.expected)) == repr((args, expected))  # exact types: True stays True, 1.0 a float
    assert parse_call_tests(format_program(made.assertion), "f", solution_class).tests == (again,)


def test_call_tests_across_blocks_without_a_fence_and_line_by_line():
    two_blocks = "```python\nassert f(1) == 1\n```\nand\n```\nassert f(2) == 4\n```\n```text\nassert f(3) == 9\n```"
    assert parse_call_tests(two_blocks, "f") == CallTests((CallTest("f", (1,), 1), CallTest("f", (2,), 4)), 0)
    bare = "My tests:\r\nassert f(1) == 1\r\nassert that f works\r\n  assert f(2) == 4\r\n"
    assert texts(parse_call_tests(bare, "f")) == ["assert f(1) == 1", "assert f(2) == 4"]
    broken = "```python\nassert f(1) == 1\nassert f(2) == (\nassert f(3) == 9; import os\nassert f(4) == 16\n```"
    assert parse_call_tests(broken, "f") == CallTests((CallTest("f", (1,), 1), CallTest("f", (4,), 16)), dropped=2)
    # In a block that parses, the second statement on a line is dropped and the assert kept.
    assert parse_call_tests("```python\nassert f(3) == 9; import os\n```", "f") == CallTests((CallTest("f", (3,), 9),), 1)


def test_call_tests_limits_and_failures():
    text = "```python\n" + "".join(f"assert f({i}) == {i}\n" for i in range(5)) + "```"
    assert texts(parse_call_tests(text, "f", max_tests=2)) == ["assert f(0) == 0", "assert f(1) == 1"]
    assert parse_call_tests(text, "f", max_tests=2).dropped == 3
    with pytest.raises(ParseError, match=r"assert solve\(\.\.\.\) == expected"):
        parse_call_tests("```python\nassert True\n```", "solve")
    with pytest.raises(ParseError, match="assert"):
        parse_call_tests("no tests here", "f")
    with pytest.raises(ValueError, match="entry_point"):
        parse_call_tests(text, "not an identifier")
    with pytest.raises(ValueError, match="max_tests"):
        parse_call_tests(text, "f", max_tests=True)


# ---- fuzzing ---------------------------------------------------------------------------------------------------

_PIECES = [
    "```", "```python\n", "```py\n", "````\n", "```text\n", "\n", "\r\n", "\r", " ", "    ", "\t", "`", "``",
    "**Test Input:**", "**Test Output:**", "Input:", "Output: 3", "### Expected Output", "Test Case 1 ", "__",
    "assert f(1) == 2", "assert ", "f(", ")", "(", "[", "==", ";", ":", "#", "*", "def f(x):\n    return x\n",
    "import os", "print(1)", '"""', "'", "\\", "x", "1", "\x00", "\u00e9", "\u2028", "\ud800",
]
_NOISE = st.one_of(st.text(max_size=12), st.lists(st.sampled_from(_PIECES), max_size=6).map("".join))
# Sections shaped like real answers around noisy bodies, so the valid paths are reached too.
_SECTION = st.one_of(
    st.builds("**Test Input:**\n```\n{}\n```\n".format, _NOISE),
    st.builds("**Test Output:**\n```{}\n{}\n".format, st.sampled_from(["", "text", "`"]), _NOISE),
    st.builds("Input: {}\nExpected Output: {}\n".format, _NOISE, _NOISE),
    st.builds("```python\nassert f({}) == {}\n{}```\n".format, _NOISE, _NOISE, _NOISE),
    st.builds("assert f({}) == {}\n".format, _NOISE, _NOISE),
    st.builds("```py\nassert f({}) == {}\n```\n".format, st.integers(), st.integers()),
    _NOISE,
)
# Measured (2,000 derandomized cases): 43% parse as a program, 11% as stdio tests and 14% as call tests.
TEXT = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(_PIECES), max_size=60).map("".join),
    st.lists(_SECTION, max_size=8).map("".join),
)
MANY = settings(max_examples=2_000)


def _parse_or_parse_error(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except ParseError as exc:
        assert str(exc)
        return None


def _one_assert(source: str) -> bool:
    body = ast.parse(source).body
    return len(body) == 1 and isinstance(body[0], ast.Assert)


@pytest.mark.slow
@MANY
@given(TEXT)
def test_fuzz_parsers_return_a_result_or_raise_parse_error(text):
    program = _parse_or_parse_error(parse_program, text)
    assert program is None or (program.strip() and program.endswith("\n") and "\r" not in program)
    stdio = _parse_or_parse_error(parse_stdio_tests, text, max_tests=3)
    if stdio is not None:
        assert 1 <= len(stdio.cases) <= 3 and stdio.dropped >= 0
        for case in stdio.cases:
            assert case.input in ("",) or case.input.endswith("\n")
            assert case.output == case.output.rstrip() and "\r" not in case.input + case.output
    for solution_class in (False, True):
        calls = _parse_or_parse_error(parse_call_tests, text, "f", solution_class)
        if calls is not None:
            assert calls.tests and calls.dropped >= 0
            assert all(_one_assert(t.assertion) and parse_call_test(t.assertion, "f", solution_class) == t
                       for t in calls.tests)


_ADVERSARIAL = {
    "many fences": "```\n" * 20_000,
    "many python fences": "```python\nx\n" * 10_000,
    "nested backticks": "```python\n" + "s = '```' + '````'\n" * 2_000 + "```",
    "backtick run": "`" * 200_000,
    "huge line": "a" * 2_000_000,
    "huge header line": "**Test Input:** " + " " * 200_000 + "x",
    "spaced header words": "Test" + " " * 200_000 + "input",
    "many headers": "**Test Input:**\n" * 20_000,
    "many pairs": "**Test Input:**\n```\n1\n```\n**Test Output:**\n```\n1\n```\n" * 5_000,
    "deep parentheses": "(" * 100_000,
    "deep unary": "-" * 100_000 + "1",
    "long sum": "1" + "+1" * 100_000,
    "deep assert": "assert " + "f(" * 5_000 + ")" * 5_000,
    "many asserts": "```python\n" + "assert f(1) == 2\n" * 5_000 + "```",
    "carriage returns": "\r" * 200_000,
    "nul bytes": "\x00" * 10_000,
    "lone surrogate": "assert f('\ud800') == 1",
    "long tag": "```" + "python" * 20_000 + "\nprint(1)",
}


@pytest.mark.parametrize("name", sorted(_ADVERSARIAL))
def test_adversarial_texts_parse_or_raise_parse_error_quickly(name):
    text = _ADVERSARIAL[name]
    start = time.perf_counter()
    _parse_or_parse_error(parse_program, text)
    _parse_or_parse_error(parse_stdio_tests, text)
    _parse_or_parse_error(parse_call_tests, text, "f")
    assert time.perf_counter() - start < 10.0, name  # linear work; generous for a shared 2-core machine
