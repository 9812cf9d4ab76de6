"""Static reading of ground-truth tests: the scope-aware free-name analysis, the classification of
function-style tests the trusted evaluator can or cannot run (with its reasons), what a test expects, and
which tests are the statement's own examples; positive and negative cases for each rule."""

from __future__ import annotations

import pytest

from pettingllms.envs.code.analysis import (
    classify_function_test,
    equality_test_parts,
    expected_output_key,
    free_names,
    function_test_shown,
    module_bindings,
    reason_template,
    stdio_test_shown,
    whitespace_tokens,
)

# ---- free names ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "free"),
    [
        ("assert f(1) == 2", {"f"}),
        ("xs = [1, 2]\nassert f(xs) == 3", {"f"}),
        ("assert f([i for i in range(3)]) == 3", {"f", "range"}),  # a comprehension target stays inside
        ("assert f([i for i in range(3)]) == i", {"f", "range", "i"}),  # ... so `i` outside it is free
        ("def check(candidate):\n    assert candidate(1) == 2\ncheck(f)", {"f"}),  # a parameter is bound
        ("def helper():\n    y = 1\nassert f(y) == 1", {"f", "y"}),  # a function's local is not global
        ("def outer():\n    z = 2\n    def inner():\n        return f(z)\n    return inner()\nassert outer()",
         {"f"}),  # a nested function's free variable resolves to the enclosing function
        ("class T:\n    k = 2\n    def run(self):\n        return f(k)\nassert T().run() == 4",
         {"f", "k"}),  # a class body's names are not visible in its methods
        ("def init():\n    global base\n    base = 3\ninit()\nassert f(base) == 4", {"f"}),  # `global` binds
        ("import math\nfrom os import path as p\nassert f(math.pi, p) == 1", {"f"}),
        ("for n in range(2):\n    assert f(n)\nwith open('x') as h:\n    pass\ntry:\n    f(h)\nexcept E as e:\n    g(e)",
         {"f", "range", "open", "E", "g"}),
        ("assert (y := f(1)) and y == 1", {"f"}),
        ("assert candidate(1) == 2", {"candidate"}),  # not a parameter here
    ],
)
def test_free_names_follow_python_scoping(source, free):
    assert free_names(source) == free


def test_module_bindings():
    setup = "from typing import List\nimport math\n\ndef poly(xs: list, x: float):\n    return 0\nclass P: pass\nK = 1\n"
    assert module_bindings(setup) == {"List", "math", "poly", "P", "K"}
    assert module_bindings("def (:") == frozenset()  # does not parse: binds nothing
    with pytest.raises(SyntaxError):
        free_names("assert f(1 ==")


# ---- classification ------------------------------------------------------------------------------------

PAIR_SOLUTION = ("class Pair(object):\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
                 "def max_chain_length(arr, n):\n    return n\n")
POLY_SETUP = "import math\n\ndef poly(xs: list, x: float):\n    return sum(c * x ** i for i, c in enumerate(xs))\n\n" \
             "def find_zero(xs: list):\n    \"\"\"stub\"\"\"\n"


@pytest.mark.parametrize(
    ("assertion", "entry", "setup", "solution", "reason"),
    [
        # supported
        ("assert add(1, 2) == 3", "add", "", "", None),
        ("import math\nassert math.isclose(average([1, 2]), 1.5)", "average", "", "", None),
        ("assert average([1, 2]) == statistics.mean([1, 2])", "average", "", "", None),  # stdlib on demand
        ("def check(candidate):\n    assert candidate(1) == 2\n\ncheck(f)\n", "f", "", "", None),
        ("_got = Solution().fib(10)\n_want = 55\nassert _got == _want, (_got, _want)", "fib", "", "", None),
        ("s = Solution()\nassert s.fib(1) == 1", "fib", "", "", None),
        ("assert find_zero([1, 2]) is not None and abs(poly([1, 2], find_zero([1, 2]))) < 1e-4", "find_zero",
         POLY_SETUP, "", None),  # `poly` comes from the trusted setup
        ("assert sorted([3, 1], key=lambda v: -v) == f([1, 3])", "f", "", "", None),  # lambda not passed to f
        # (a) a name the trusted side cannot provide
        ("assert max_chain_length([Pair(5, 24), Pair(15, 25)], 2) == 3", "max_chain_length", "", PAIR_SOLUTION,
         "uses `Pair`, which the solution defines"),
        ("assert abs(poly([1, 2], find_zero([1, 2]))) < 1e-4", "find_zero", "", POLY_SETUP,
         "uses `poly`, which the solution defines"),
        ("assert f(x) == 1", "f", "", "", "uses `x`, which no builtin, standard-library module, setup or the test "
                                          "defines"),
        ("assert f(numpy.ones(2)) == 1", "f", "", "", "uses `numpy`, which no builtin, standard-library module, "
                                                      "setup or the test defines"),
        ("assert helper(1) == f(1)", "f", "", "def helper(x): return x\ndef f(x): return x\n",
         "uses `helper`, which the solution defines"),
        ("assert candidate(1) == 2", "f", "", "", "uses `candidate`, which no builtin, standard-library module, "
                                                  "setup or the test defines"),
        # (b) a lambda or generator passed to the candidate
        ("assert f(lambda x: x, 3) == 3", "f", "", "", "passes a lambda to `f`"),
        ("assert f([1, (2, lambda: 0)]) == 1", "f", "", "", "passes a lambda to `f`"),
        ("assert f(xs=[1], key=lambda v: v) == 1", "f", "", "", "passes a lambda to `f`"),
        ("assert f(x for x in range(3)) == 3", "f", "", "", "passes a generator expression to `f`"),
        ("assert Solution().g(lambda: 1) == 1", "g", "", "", "passes a lambda to `Solution().g`"),
        ("def check(candidate):\n    assert candidate(*[lambda: 1]) == 1\ncheck(f)", "f", "", "",
         "passes a lambda to `candidate`"),
        # (c) never calls the candidate
        ("assert 1 + 1 == 2", "f", "", "", "never calls `f`"),
        ("assert f.__name__ == 'f'", "f", "", "", "never calls `f`"),
        ("assert f(1 ==", "f", "", "", "does not parse (SyntaxError)"),
    ],
)
def test_classify_function_test(assertion, entry, setup, solution, reason):
    assert classify_function_test(assertion, entry, setup, solution) == reason


def test_several_missing_names_are_all_named():
    reason = classify_function_test("assert f(Node(1), Tree()) == 1", "f", "", "class Node: pass\n")
    assert reason == "uses `Node`, `Tree`, which no builtin, standard-library module, setup or the test defines"
    both = classify_function_test("assert f(Node(1), Tree()) == 1", "f", "", "class Node: pass\nclass Tree: pass\n")
    assert both == "uses `Node`, `Tree`, which the solution defines"


def test_reason_template_blanks_the_names():
    assert reason_template("uses `Pair`, which the solution defines") == "uses `...`, which the solution defines"
    assert reason_template("uses `Node`, `Tree`, which the solution defines") == "uses `...`, which the solution defines"
    assert reason_template("passes a lambda to `Solution().g`") == "passes a lambda to `...`"
    assert reason_template("does not parse (SyntaxError)") == "does not parse (SyntaxError)"


# ---- what a test expects -------------------------------------------------------------------------------


def key(assertion: str, entry: str = "f"):
    return expected_output_key({"assertion": assertion}, entry)


def test_expected_output_keys_of_function_tests():
    assert key("assert f(1, 2) == 3") == key("assert 3 == f(5)") == key("assert f(0) == 3.0")
    assert key("assert f(1) == True") == key("assert f(2) == 1") == key("assert f(3)")  # one constant passes all
    assert key("assert not f(1)") == key("assert f(2) == False") != key("assert f(3)")
    assert key("assert f(1) == [1, 2]") == key("assert f(2) == (1, 2)")  # a tuple result is judged as a list
    assert key("assert f(1) == 'a'") != key("assert f(1) == 'b'")
    assert key("assert f(1) == {'a': 1}") == key("assert f(9) == {'a': True}")
    assert key("_got = Solution().f([1])\n_want = [1, 3]\nassert _got == _want", "f") == key("assert f(0) == [1, 3]")
    assert key("import math\nassert f(1) is None") is None  # not an equality: unreadable
    assert key("assert f(1) == None") == key("assert f(2) == None") is not None
    for unreadable in ("assert math.isclose(f(1), 1.5)", "assert f(1) == g(2)", "assert g(1) == 2",
                       "def check(candidate):\n    assert candidate(1) == 2\ncheck(f)", "assert f(1 =="):
        assert key(unreadable) is None, unreadable


def test_expected_output_keys_of_stdio_tests_are_the_tokens():
    one = expected_output_key({"stdin": "1\n", "expected_stdout": "YES\n"}, None)
    assert one == expected_output_key({"stdin": "2\n", "expected_stdout": "  YES  "}, None)
    assert one != expected_output_key({"stdin": "2\n", "expected_stdout": "NO\n"}, None)
    assert expected_output_key({"stdin": "", "expected_stdout": "1 2\n3"}, None) == ("stdout", "1 2 3")


def test_equality_test_parts():
    call, expected = equality_test_parts("import math\nassert f(1, [2]) == 3", "f")
    assert [a.value if hasattr(a, "value") else None for a in call.args][0] == 1 and expected.value == 3
    assert equality_test_parts("assert g(1) == 3", "f") is None
    assert equality_test_parts("assert f(1) != 3", "f") is None
    assert equality_test_parts("assert f(1) == 3 == 4", "f") is None


# ---- the statement's examples -------------------------------------------------------------------------

STATEMENT = """Read n, then n numbers; print their sum.

Example
Input
3
1 2  3
Output
6
"""


@pytest.mark.parametrize(
    ("stdin", "expected", "shown"),
    [
        ("3\n1 2 3\n", "6\n", True),
        ("3 1   2 3", "6", True),  # whitespace normalised on both sides
        ("3\n1 2 3\n", "7\n", False),  # the output is not shown
        ("3\n1 2 4\n", "6\n", False),  # the input is not shown
        ("2\n1 2\n", "1\n", False),  # `1 2` and `1` occur, but `2 1 2` does not
        ("1", "6", True),  # `1` is a whole token of the example's input
        ("4", "6", False),
        ("", "", False),  # nothing shown
    ],
)
def test_stdio_test_shown(stdin, expected, shown):
    assert stdio_test_shown(stdin, expected, STATEMENT) is shown


def test_stdio_tokens_match_whole():
    assert not stdio_test_shown("12", "3", "Input: 123 Output: 3")
    assert stdio_test_shown("12", "3", "Input: 12 Output: 3")
    assert whitespace_tokens(" a\n\tb  c ") == "a b c"


DOCSTRING = '''def add(a, b):
    """Return a + b.
    >>> add(1, 2)
    3
    >>> add("x", 'y')
    'xy'
    """
'''
LEETCODE = "Example 1:\nInput: nums = [2, 7, 11, 15], target = 9\nOutput: [0,1]\n"


@pytest.mark.parametrize(
    ("assertion", "entry", "shown", "expected"),
    [
        ("assert add(1, 2) == 3", "add", DOCSTRING, True),
        ("assert add(1,   2) == 3", "add", DOCSTRING, True),
        ("assert 3 == add(1, 2)", "add", DOCSTRING, True),
        ("assert add('x', \"y\") == \"xy\"", "add", DOCSTRING, True),  # quotes differ: the repr matches
        ("assert add(1, 2) == 4", "add", DOCSTRING, False),
        ("assert add(1, 5) == 3", "add", DOCSTRING, False),
        ("assert add(1, 2)", "add", DOCSTRING, False),  # not an equality test
        ("_got = Solution().twoSum([2, 7, 11, 15], 9)\n_want = [0, 1]\nassert _got == _want", "twoSum", LEETCODE, True),
        ("_got = twoSum([2, 7, 11, 15], 9)\n_want = [[0, 1]]\nassert _got == _want", "twoSum", LEETCODE, True),
        ("_got = Solution().twoSum([2, 7, 11, 15], 3)\n_want = [0, 1]\nassert _got == _want", "twoSum", LEETCODE,
         False),  # the argument 3 is not shown
        ("assert twoSum([2, 7, 11, 15], 1) == [0, 1]", "twoSum", LEETCODE, True),  # `1` is whole in `[0,1]`
        ("assert twoSum([2, 7, 1], 9) == [0, 1]", "twoSum", LEETCODE, False),  # `[2, 7, 1]` is not shown
        ("assert f(0.5) == 1", "f", "f(1.5) is 1", False),  # `0.5` is not `1.5`, `1` is not inside `1.5`
        ("assert f(5) == 1", "f", "f(1.5) is 1", False),
        ("assert f(x=2) == 1", "f", "f(x = 2) returns 1.", True),  # keyword values count; `1.` ends a sentence
    ],
)
def test_function_test_shown(assertion, entry, shown, expected):
    assert function_test_shown(assertion, entry, shown) is expected


def test_docstring_examples_of_a_real_humaneval_statement():
    from pettingllms.envs.code.data import load_problems
    from pettingllms.envs.code.env import statement_shown

    problem = load_problems("humaneval", None)[2]  # truncate_number: `>>> truncate_number(3.5)` / `0.5`
    shown = statement_shown(problem)
    assert function_test_shown("assert truncate_number(3.5) == 0.5", "truncate_number", shown)
    assert not function_test_shown("assert truncate_number(1.5) == 0.5", "truncate_number", shown)
    assert not function_test_shown("assert truncate_number(3.5) == 0.25", "truncate_number", shown)
