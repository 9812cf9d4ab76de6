"""The pure parts of the tester's evidence (``pettingllms/envs/code/evidence.py``): argument shapes and how they
compare, the signatures read from each dataset's own test layout, the per-test valid / catches verdicts, the
known-wrong programs, and the scripted oracle's tests (built from the literal equalities of the dataset's
tests). Hand-computed cases and properties; no sandbox."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pettingllms.envs.code import CodeProblem
from pettingllms.envs.code.data import load_humaneval
from pettingllms.envs.code.evidence import (
    Signatures,
    call_signatures,
    evidence_per_test,
    known_wrong_programs,
    literal_calls,
    literal_equalities,
    shape_accepts,
    shape_name,
    value_shape,
)
from pettingllms.envs.code.parsing import parse_call_test
from pettingllms.envs.code.scripted import oracle_tests, wrong_tests

T, F = True, False

# ---- shapes ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (1, "int"), (True, "bool"), (1.5, "float"), (None, "None"), ("a", "str"), (b"a", "bytes"), (1j, "complex"),
        ([1, 2], "list[int]"), ([], "list[]"), ([1, "a"], "list[int | str]"), ([[1.0], []], "list[list[] | list[float]]"),
        ((1, "a"), "tuple[int | str]"), ({1, 2}, "set[int]"), ({"a": [1]}, "dict[str, list[int]]"), ({}, "dict[, ]"),
    ],
)
def test_the_shape_of_a_literal(value, name):
    assert shape_name(value_shape(value)) == name


@pytest.mark.parametrize(
    ("allowed", "given", "accepted"),
    [
        (1, 2, T), (1.5, 2, T),  # a whole number where the dataset passes a real number
        (1, 2.0, F),  # a real number where it passes an integer
        (1, True, F), (True, 1, F),  # bool and int are different shapes
        (None, None, T), (1, None, F), (None, 1, F),
        ("a", b"a", F), ([1], (1,), F),  # lists and tuples are different kinds
        ([1], [], T), ([[1]], [[]], T),  # an empty container holds nothing of a wrong type
        ([], [1], F),  # the dataset only ever passes an empty list: its element type is unknown
        ([1, "a"], ["b", 2, 3], T), ([1], [1, "a"], F),  # each element must be accepted
        ([1.5], [1, 2.5], T), ([[1]], [[1.0]], F),
        ({"a": 1}, {"b": 2, "c": 3}, T), ({"a": 1}, {1: 2}, F), ({"a": 1}, {"a": "x"}, F),
        ([1], 1, F), (1, [1], F),
    ],
)
def test_which_shapes_a_position_accepts(allowed, given, accepted):
    assert shape_accepts(value_shape(allowed), value_shape(given)) is accepted


_PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(st.text(max_size=2), inner, max_size=2),
    max_leaves=6,
)


@given(_PLAIN, _PLAIN, _PLAIN)
def test_acceptance_is_reflexive_and_transitive(first, second, third):
    a, b, c = value_shape(first), value_shape(second), value_shape(third)
    assert shape_accepts(a, a)
    if shape_accepts(a, b) and shape_accepts(b, c):
        assert shape_accepts(a, c)


def test_acceptance_is_transitive_through_the_int_to_float_rule():
    assert shape_accepts(value_shape([1.5]), value_shape([2])) and shape_accepts(value_shape([2]), value_shape([]))
    assert shape_accepts(value_shape([1.5]), value_shape([]))


def test_a_value_a_literal_cannot_be_is_an_error_naming_its_type():
    with pytest.raises(ValueError, match="`value` must be a literal .*got object"):
        value_shape(object())


# ---- signatures from each dataset's tests ----------------------------------------------------------------------


def test_signatures_from_humaneval_check_programs():
    problem = load_humaneval()[0]  # has_close_elements(numbers: list[float], threshold: float)
    signatures = call_signatures([t["assertion"] for t in problem.tests], problem.entry_point)
    assert signatures.describe() == ["(list[float], float)"] and signatures.calls == 7 and signatures.skipped == 0
    assert signatures.accepts(([1.0, 2.0], 0.5)) and signatures.accepts(([1, 2], 1))  # ints stand for reals
    assert signatures.accepts(([], 0.5))
    assert not signatures.accepts(([True, False], 2))  # bools are not numbers here
    assert not signatures.accepts(("ab", 0.5)) and not signatures.accepts(([1.0],))  # wrong type, wrong arity


def test_a_problem_whose_calls_take_no_literal_has_no_signature():
    problem = load_humaneval()[32]  # find_zero: `candidate(copy.deepcopy(coeffs))` inside a loop
    signatures = call_signatures([t["assertion"] for t in problem.tests], problem.entry_point)
    assert not signatures and signatures.calls == 0 and signatures.skipped == 1
    assert not signatures.accepts(([1, 2],))


def test_signatures_from_the_loaders_forms_pool_positions_per_arity():
    tests = [
        "import math\nassert math.isclose(mean([1, 2]), 1.5)",  # MBPP, with setup and another check
        "assert mean([1.5], 2) == 1",
        "_got = Solution().mean([])\n_want = 0\nassert (list(_got) if isinstance(_got, tuple) else _got) == _want",
        "assert mean(xs) == 1",  # a name: skipped
        "assert mean(*[1]) == 1 and mean(xs=[1]) == 1",  # starred, keyword: skipped
        "assert other([True]) == 1",  # another function
        "this is not python",
    ]
    signatures = call_signatures(tests, "mean")
    assert signatures.describe() == ["(list[] | list[int])", "(list[float], int)"]
    assert (signatures.calls, signatures.skipped) == (3, 3)
    assert signatures.accepts(([3, 4],)) and not signatures.accepts(([3.5],))  # arity 1 saw only ints
    assert signatures.accepts(([3],  7)) and not signatures.accepts(([3], 7.5))
    assert literal_calls("assert mean([1]) == mean([2]) + candidate(x)", "mean") == ([([1],), ([2],)], 1)
    assert Signatures() == Signatures({}, 0, 0) and not Signatures()


def test_literal_equalities_of_each_layout():
    assert literal_equalities("assert f(1, 'a') == [2]", "f") == [((1, "a"), [2])]
    assert literal_equalities("assert [2] == f(1)", "f") == [((1,), [2])]
    check = "def check(candidate):\n    assert candidate([1]) == True\n    assert abs(candidate([2]) - 1) < 1e-6\n"
    assert literal_equalities(check + "\ncheck(f)\n", "f") == [(([1],), True)]
    got_want = "_got = Solution().f([1, 2])\n_want = [3]\nassert _got == _want or _got == _want[0]"
    assert literal_equalities(got_want, "f") == [(([1, 2],), [3])]
    assert literal_equalities("assert f(x) == 1\nassert f(1) == y\nassert f(1) != 2", "f") == []
    assert literal_equalities("not python (", "f") == []


# ---- per-test evidence -----------------------------------------------------------------------------------------


def test_valid_and_catches_hand_computed():
    # Four tests: ill-typed; one reference of two fails it; both pass and one wrong program fails it; both
    # pass and no wrong program fails it.
    valid, catches = evidence_per_test([F, T, T, T], [[T, T, T, T], [T, F, T, T]], [[T, F, F, F], [F, T, T, F]])
    assert valid == (F, F, T, T) and catches == (T, T, T, F)
    assert evidence_per_test([T, T], [[T, F]], None) == ((T, F), None)  # no program yet
    assert evidence_per_test([T], [[T]], []) == ((T,), (F,))  # a program, but none known wrong


def test_evidence_arguments_are_checked():
    with pytest.raises(ValueError, match="at least one good reference"):
        evidence_per_test([T], [], None)
    with pytest.raises(ValueError, match=r"`references_passed\[0\]` must hold one bool per generated test \(2\)"):
        evidence_per_test([T, T], [[T]], None)
    with pytest.raises(ValueError, match=r"`wrong_failed\[1\]` must hold one bool"):
        evidence_per_test([T], [[T]], [[F], [1]])
    with pytest.raises(ValueError, match="`well_typed` must be bools"):
        evidence_per_test([1], [[T]], None)


def test_known_wrong_programs_are_the_failing_ones_then_the_mutants_each_once():
    programs = ["p0", "p1", "p0", "p2"]
    assert known_wrong_programs(programs, [T, F, T, T], ["m0", "p2", "m1"]) == ["p0", "p2", "m0", "m1"]
    assert known_wrong_programs([], [], []) == []
    with pytest.raises(ValueError, match=r"`failed_ground_truth` must hold one bool per program \(2\), got 1"):
        known_wrong_programs(["a", "b"], [T], [])


# ---- the scripted tester -----------------------------------------------------------------------------------------


def function_problem(tests, *, dataset="mbpp", starter="", public=()) -> CodeProblem:
    return CodeProblem(problem_id=f"{dataset}/1", dataset=dataset, split="test", style="function", prompt="p",
                       starter_code=starter, entry_point="f", tests=[{"assertion": t} for t in tests],
                       public_tests=[{"assertion": t} for t in public], solutions=["def f(*a):\n    return 1\n"])


def test_the_oracle_tester_copies_literal_equalities_in_the_accepted_form():
    problem = function_problem(["assert f(1) == 2", "import math\nassert math.isclose(f(2), 0.5)", "assert f(3) == 4",
                                "assert f(4) == 5", "assert f(5) == 6"], public=["assert f(0) == 1"])
    assert oracle_tests(problem) == [{"call": "assert f(0) == 1"}, {"call": "assert f(1) == 2"},
                                     {"call": "assert f(3) == 4"}]
    # APPS wraps a return value in a one-element list; its judge accepts the element, so the oracle writes it.
    apps = function_problem(["_got = Solution().f([1, 2])\n_want = [[3]]\nassert _got == _want"], dataset="apps",
                            starter="class Solution:\n    def f(self, xs):\n        ")
    assert oracle_tests(apps) == [{"call": "assert Solution().f([1, 2]) == [3]"}]
    assert oracle_tests(function_problem(["assert f(x) == 1"])) == []
    for problem in (apps, function_problem(["assert f(1) == 2"])):
        (test,) = wrong_tests(problem)
        assert parse_call_test(test["call"], "f", problem is apps).args == ()  # no argument: ill-typed


def test_the_oracle_tester_writes_humaneval_tests_for_most_problems():
    problems = load_humaneval()
    missing = [p.problem_id for p in problems if not oracle_tests(p)]
    # These check only through loops, tolerances or helpers: no equality with literals to copy.
    assert missing == ["humaneval/4", "humaneval/32", "humaneval/33", "humaneval/37", "humaneval/38",
                       "humaneval/50", "humaneval/52", "humaneval/56", "humaneval/61", "humaneval/72"]
    assert oracle_tests(problems[2]) == [{"call": "assert truncate_number(3.5) == 0.5"}]  # the others use abs(...)
