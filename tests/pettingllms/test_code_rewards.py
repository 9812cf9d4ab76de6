"""The code workflow's rewards and stop rules: hand-computed values, edge cases, and properties; the
constant-output baseline (``beyond_constant``) against hand-computed cases and a brute-force count; no stop
rule reads a hidden verdict."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pettingllms.envs.code.rewards import (
    CATCH_REWARD,
    INVALID_TEST_REWARD,
    NO_TEST_REWARD,
    PARTIAL_CREDIT,
    TERMINATE_ON,
    VALID_TEST_REWARD,
    beyond_constant,
    check_partial_credit,
    check_terminate_on,
    coder_local_reward,
    constant_share,
    episode_over,
    generated_test_score,
    generated_tests_reward,
    global_reward,
    is_success,
    pass_rate,
    passes_generated_tests,
    program_score,
    training_reward,
    valid_generated_tests,
)

T, F = True, False


# ---- global and coder rewards -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [([T, T, T, T], 1.0), ([T, F, T, F], 0.5), ([F, F, F], 0.0), ([T, F, F], 1 / 3), ([T], 1.0), ([], 0.0), (None, 0.0)],
)
def test_global_and_coder_rewards_are_the_pass_rate(verdicts, expected):
    assert global_reward(verdicts) == pytest.approx(expected)
    assert coder_local_reward(verdicts) == pytest.approx(expected)
    assert pass_rate(verdicts) == pytest.approx(expected)


def test_success_needs_every_test_and_at_least_one():
    assert is_success([T, T, T])
    assert not is_success([T, F, T])
    assert not is_success([])  # a problem with no ground-truth test never succeeds
    assert not is_success(None)  # no program yet


def test_constants_are_the_issue_values():
    assert (CATCH_REWARD, VALID_TEST_REWARD, INVALID_TEST_REWARD, NO_TEST_REWARD) == (1.0, 0.0, -1.0, -1.0)
    assert TERMINATE_ON == ("generated_tests", "turns") and PARTIAL_CREDIT == ("beyond_constant", "pass_rate")


@pytest.mark.parametrize("bad", [[1, 0], [T, "yes"], "TTF", 3, [None]])
def test_non_bool_verdicts_are_an_error_naming_the_argument(bad):
    with pytest.raises(ValueError, match="ground_truth_passed"):
        global_reward(bad)
    with pytest.raises(ValueError, match="turn_program_passed"):
        coder_local_reward(bad)


# ---- tester -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("valid", "catches", "expected"),
    [(T, T, 1.0), (T, F, 0.0), (F, T, -1.0), (F, F, -1.0)],
)
def test_one_generated_test_scores(valid, catches, expected):
    assert generated_test_score(valid=valid, catches=catches) == expected


@pytest.mark.parametrize(
    ("valid", "catches", "expected"),
    [
        ([T, T, F], [T, F, T], (1.0 + 0.0 - 1.0) / 3),  # catches one, one every known program passes, one invalid
        ([T, T], [T, T], 1.0),  # both tests fail a known-wrong program
        ([T, T, T, T], [F, F, F, F], 0.0),  # valid, but no known-wrong program fails them: nothing earned
        ([F, F], [T, F], -1.0),  # invalid tests earn -1 whatever they fail
        ([T, T], None, 0.0),  # no program yet: nothing is paid for catching
        ([T, F], None, -0.5),  # ... but an invalid test still costs
        ([], [], -1.0),  # no parseable test
        ([], None, -1.0),
    ],
)
def test_generated_tests_reward_hand_computed(valid, catches, expected):
    assert generated_tests_reward(valid=valid, catches=catches) == pytest.approx(expected)


def test_tester_has_no_local_reward_without_evidence():
    assert generated_tests_reward(valid=None, catches=[T, F]) is None
    assert generated_tests_reward(valid=None, catches=None) is None
    # ... so its training reward is the global part alone.
    assert training_reward(0.5, None, alpha=2.0) == 1.0


def test_tester_lists_must_match_in_length_and_be_bools():
    with pytest.raises(ValueError, match="`catches` has 1 verdicts but `valid` has 2"):
        generated_tests_reward(valid=[T, T], catches=[T])
    with pytest.raises(ValueError, match="`valid` must be a bool, got 1"):
        generated_test_score(valid=1, catches=True)
    with pytest.raises(ValueError, match=r"`catches\[0\]` must be a bool"):
        generated_tests_reward(valid=[T], catches=[None])


# ---- mixing ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("global_part", "local_part", "alpha", "expected"),
    [(0.5, 0.2, 1.0, 0.7), (0.5, -1.0, 2.0, 0.0), (1.0, None, 0.5, 0.5), (0.25, 1.0, 0.0, 1.0)],
)
def test_training_reward_is_alpha_global_plus_local(global_part, local_part, alpha, expected):
    assert training_reward(global_part, local_part, alpha) == pytest.approx(expected)


def test_training_reward_rejects_non_finite_parts():
    with pytest.raises(ValueError, match="local_reward"):
        training_reward(0.5, math.nan, 1.0)
    with pytest.raises(ValueError, match="alpha"):
        training_reward(0.5, 0.0, math.inf)


# ---- the constant-output baseline ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [
        (["YES"] * 5 + ["NO"] * 5, 0.5),
        (["a", "b", "c", "d"], 0.25),  # no two tests share an output: a constant still matches one
        (["a", "a", "b", "c"], 0.5),
        (["a", "a", "a", "b"], 0.75),
        (["x"] * 3, 1.0),
        ([None, None, None], 1 / 3),  # unreadable outputs are each their own
        ([None, "a", "a"], 2 / 3),
        (["a"], 1.0),  # one test: all or nothing
        ([], 0.0),
    ],
)
def test_constant_share_hand_computed(outputs, expected):
    assert constant_share(outputs) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("p", "c", "expected"),
    [
        (0.5, 0.5, 0.0),  # 10 tests, 5 expect YES: a constant YES passes 5 and earns nothing
        (0.4, 0.5, 0.0),  # below the baseline: clipped at 0
        (0.75, 0.5, 0.5),  # (0.75 - 0.5) / 0.5
        (1.0, 0.5, 1.0),
        (0.3, 0.0, 0.3),  # no baseline: the pass rate
        (1.0, 1.0, 1.0),  # every test expects one output: all or nothing
        (0.9, 1.0, 0.0),
        (0.0, 0.0, 0.0),
    ],
)
def test_beyond_constant_hand_computed(p, c, expected):
    assert beyond_constant(p, c) == pytest.approx(expected)


def test_beyond_constant_checks_its_arguments():
    with pytest.raises(ValueError, match=r"`p` must be a number in \[0, 1\], got 1.5"):
        beyond_constant(1.5, 0.0)
    with pytest.raises(ValueError, match="`c` must be a number in"):
        beyond_constant(0.5, -0.1)
    with pytest.raises(ValueError, match="`expected_outputs` must be a sequence"):
        constant_share("YES")


def test_a_constant_program_earns_nothing_and_a_real_one_earns_its_share_beyond_it():
    outputs = ["YES"] * 5 + ["NO"] * 5
    constant_yes = [T] * 5 + [F] * 5
    assert global_reward(constant_yes, outputs, partial_credit="beyond_constant") == 0.0
    assert coder_local_reward(constant_yes, outputs, partial_credit="beyond_constant") == 0.0
    assert global_reward(constant_yes, outputs, partial_credit="pass_rate") == 0.5  # what the plain pass rate gave
    eight = [T] * 5 + [T, T, T, F, F]
    assert global_reward(eight, outputs, partial_credit="beyond_constant") == pytest.approx((0.8 - 0.5) / 0.5)
    assert global_reward([T] * 10, outputs, partial_credit="beyond_constant") == 1.0
    assert global_reward(None, outputs, partial_credit="beyond_constant") == 0.0  # no program
    assert global_reward([], [], partial_credit="beyond_constant") == 0.0  # no test


def test_program_score_needs_one_output_per_test_and_a_known_rule():
    with pytest.raises(ValueError, match=r"`expected_outputs` must hold one output per test \(2\)"):
        program_score([T, F], ["a"], partial_credit="beyond_constant")
    with pytest.raises(ValueError, match=r"`expected_outputs` must hold one output per test"):
        program_score([T, F], None, partial_credit="beyond_constant")
    assert program_score([T, F], None) == 0.5  # the pass rate needs no outputs
    with pytest.raises(ValueError, match=r"`partial_credit` must be one of \['beyond_constant', 'pass_rate'\], got 'x'"):
        check_partial_credit("x")


@given(st.lists(st.sampled_from("abcd"), min_size=1, max_size=12), st.data())
def test_a_constant_program_earns_nothing(outputs, data):
    # A program answering one constant passes exactly the tests that expect it (brute force over constants):
    # nothing, unless every test expects that one output (then the constant is a right program).
    for constant in "abcde":
        passed = [o == constant for o in outputs]
        score = global_reward(passed, outputs, partial_credit="beyond_constant")
        assert score == (1.0 if set(outputs) == {constant} else 0.0)
    passed = data.draw(st.lists(st.booleans(), min_size=len(outputs), max_size=len(outputs)))
    score = global_reward(passed, outputs, partial_credit="beyond_constant")
    assert 0.0 <= score <= global_reward(passed, outputs, partial_credit="pass_rate") + 1e-12
    assert (score == 1.0) == all(passed)


# ---- termination ---------------------------------------------------------------------------------------------


def test_ground_truth_termination_is_refused_saying_why_and_what_to_use():
    with pytest.raises(ValueError, match=r"`terminate_on: ground_truth` is no longer accepted: .*hidden tests.*"
                                         r"use `generated_tests` .* or `turns`") as error:
        check_terminate_on("ground_truth")
    assert "\n" not in str(error.value)


def test_generated_tests_rule_ends_when_the_program_passes_the_testers_tests():
    over = lambda prog: episode_over(terminate_on="generated_tests", generated_program_passed=prog)  # noqa: E731
    assert over([T, T])
    assert over([T])
    assert not over([T, F])  # one fails
    assert not over([])  # no parseable test
    assert not over(None)  # no program, or no tests yet
    assert episode_over(terminate_on="generated_tests", generated_program_passed=[F], out_of_turns=True)


def test_turns_rule_plays_the_whole_budget():
    assert not episode_over(terminate_on="turns", generated_program_passed=[T, T])
    assert episode_over(terminate_on="turns", generated_program_passed=None, out_of_turns=True)


def test_no_stop_rule_reads_a_hidden_verdict():
    # The rule's only inputs are the program's verdicts on the tester's tests and the turn budget: the
    # ground truth and the reference solution's verdicts are not parameters at all.
    import inspect

    assert set(inspect.signature(episode_over).parameters) == {"terminate_on", "generated_program_passed", "out_of_turns"}
    assert set(inspect.signature(passes_generated_tests).parameters) == {"program_passed"}


def test_valid_generated_tests_counts():
    assert valid_generated_tests(valid=[T, F, T], count=3) == 2
    assert valid_generated_tests(valid=None, count=4) is None  # no evidence: validity unknown
    with pytest.raises(ValueError, match="count"):
        valid_generated_tests(valid=[T], count=2)
    with pytest.raises(ValueError, match="count"):
        valid_generated_tests(valid=None, count=-1)


@pytest.mark.parametrize("bad", ["generated", "", "GENERATED_TESTS", None])
def test_unknown_terminate_on_is_an_error_naming_it(bad):
    with pytest.raises(ValueError, match="terminate_on"):
        check_terminate_on(bad)
    with pytest.raises(ValueError, match="terminate_on"):
        episode_over(terminate_on=bad, generated_program_passed=[T])


def test_out_of_turns_must_be_a_bool():
    with pytest.raises(ValueError, match="out_of_turns"):
        episode_over(terminate_on="turns", out_of_turns="yes")
    with pytest.raises(ValueError, match="program_passed"):
        passes_generated_tests([1, 1])


# ---- properties ------------------------------------------------------------------------------------------------

VERDICTS = st.lists(st.booleans(), max_size=30)


@given(VERDICTS)
def test_global_and_coder_rewards_lie_in_unit_interval(verdicts):
    assert 0.0 <= global_reward(verdicts) <= 1.0
    assert 0.0 <= coder_local_reward(verdicts) <= 1.0
    assert is_success(verdicts) == (global_reward(verdicts) == 1.0)


@given(st.lists(st.booleans(), min_size=1, max_size=30), st.data())
def test_turning_a_failure_into_a_pass_never_lowers_global(verdicts, data):
    failing = [i for i, v in enumerate(verdicts) if not v]
    if not failing:
        return
    i = data.draw(st.sampled_from(failing))
    better = [*verdicts[:i], True, *verdicts[i + 1:]]
    assert global_reward(better) > global_reward(verdicts)


@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=30), st.booleans())
def test_tester_reward_is_bounded_and_equals_the_mean_of_its_scores(pairs, no_program):
    valid = [v for v, _ in pairs]
    catches = None if no_program else [c for _, c in pairs]
    reward = generated_tests_reward(valid=valid, catches=catches)
    assert -1.0 <= reward <= 1.0
    if not pairs:
        assert reward == NO_TEST_REWARD
        return
    # Independent count: catches of valid tests (none without a program) minus invalid tests.
    caught = 0 if no_program else sum(v and c for v, c in pairs)
    invalid = sum(not v for v in valid)
    assert reward == pytest.approx((caught - invalid) / len(pairs))
    # A test every known program passes earns at most 0; before a program exists nothing is positive.
    if no_program or not any(catches):
        assert reward <= 0.0


@given(st.lists(st.booleans(), max_size=20))
def test_generated_rule_is_all_of_at_least_one(program):
    assert passes_generated_tests(program) == (bool(program) and all(program))
