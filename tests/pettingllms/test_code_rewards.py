"""The code workflow's rewards and stop rules: hand-computed values, edge cases, and properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pettingllms.envs.code.rewards import (
    AGREE_REWARD,
    CATCH_REWARD,
    NO_TEST_REWARD,
    TERMINATE_ON,
    WRONG_TEST_REWARD,
    check_terminate_on,
    coder_local_reward,
    episode_over,
    generated_test_score,
    generated_tests_reward,
    global_reward,
    is_success,
    pass_rate,
    passes_generated_tests,
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
    assert (CATCH_REWARD, AGREE_REWARD, WRONG_TEST_REWARD, NO_TEST_REWARD) == (1.0, 0.2, -1.0, -1.0)
    assert TERMINATE_ON[0] == "ground_truth"


@pytest.mark.parametrize("bad", [[1, 0], [T, "yes"], "TTF", 3, [None]])
def test_non_bool_verdicts_are_an_error_naming_the_argument(bad):
    with pytest.raises(ValueError, match="ground_truth_passed"):
        global_reward(bad)
    with pytest.raises(ValueError, match="turn_program_passed"):
        coder_local_reward(bad)


# ---- tester -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reference", "program", "expected"),
    [(T, F, 1.0), (T, T, 0.2), (F, T, -1.0), (F, F, -1.0)],
)
def test_one_generated_test_scores(reference, program, expected):
    assert generated_test_score(reference_passes=reference, program_passes=program) == expected


@pytest.mark.parametrize(
    ("reference", "program", "expected"),
    [
        ([T, T, F], [F, T, T], (1.0 + 0.2 - 1.0) / 3),  # catches one, agrees on one, one wrong test
        ([T, T], [F, F], 1.0),  # both tests catch the program
        ([T, T, T, T], [T, T, T, T], 0.2),  # all agree: the program already passes them
        ([F, F], [T, F], -1.0),  # all wrong tests
        ([T, F], None, 0.0),  # no program yet: it fails every test, (1 - 1) / 2
        ([], [], -1.0),  # no parseable test
        ([], None, -1.0),
    ],
)
def test_generated_tests_reward_hand_computed(reference, program, expected):
    assert generated_tests_reward(reference_passed=reference, program_passed=program) == pytest.approx(expected)


def test_tester_has_no_local_reward_without_a_reference_solution():
    assert generated_tests_reward(reference_passed=None, program_passed=[T, F]) is None
    assert generated_tests_reward(reference_passed=None, program_passed=[]) is None
    # ... so its training reward is the global part alone.
    assert training_reward(0.5, None, alpha=2.0) == 1.0


def test_tester_lists_must_match_in_length():
    with pytest.raises(ValueError, match="program_passed.*reference_passed"):
        generated_tests_reward(reference_passed=[T, T], program_passed=[T])
    with pytest.raises(ValueError, match="reference_passes"):
        generated_test_score(reference_passes=1, program_passes=True)


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


# ---- termination ---------------------------------------------------------------------------------------------


def test_ground_truth_rule_ends_on_full_pass_or_turn_budget():
    assert episode_over(terminate_on="ground_truth", ground_truth_passed=[T, T])
    assert not episode_over(terminate_on="ground_truth", ground_truth_passed=[T, F])
    assert not episode_over(terminate_on="ground_truth", ground_truth_passed=None)
    assert episode_over(terminate_on="ground_truth", ground_truth_passed=[F], out_of_turns=True)
    # Generated tests do not matter under the default rule.
    assert not episode_over(
        terminate_on="ground_truth", ground_truth_passed=[F], generated_program_passed=[T], generated_reference_passed=[T]
    )


def test_generated_tests_rule_needs_a_valid_test():
    over = lambda prog, ref: episode_over(  # noqa: E731
        terminate_on="generated_tests", ground_truth_passed=[F], generated_program_passed=prog, generated_reference_passed=ref
    )
    assert over([T, T], [T, F])  # all pass, one valid
    assert not over([T, F], [T, T])  # one fails
    assert not over([T, T], [F, F])  # every test is wrong: none valid
    assert not over([], [])  # no parseable test
    assert not over(None, [T])  # no program
    assert over([T], None)  # no reference: any parseable test is valid
    assert not over([], None)


def test_valid_generated_tests_counts():
    assert valid_generated_tests(reference_passed=[T, F, T], count=3) == 2
    assert valid_generated_tests(reference_passed=None, count=4) == 4
    with pytest.raises(ValueError, match="count"):
        valid_generated_tests(reference_passed=[T], count=2)
    with pytest.raises(ValueError, match="count"):
        valid_generated_tests(reference_passed=None, count=-1)
    assert passes_generated_tests(program_passed=[T], reference_passed=[T])


@pytest.mark.parametrize("bad", ["generated", "", "GROUND_TRUTH", None])
def test_unknown_terminate_on_is_an_error_naming_it(bad):
    with pytest.raises(ValueError, match="terminate_on"):
        check_terminate_on(bad)
    with pytest.raises(ValueError, match="terminate_on"):
        episode_over(terminate_on=bad, ground_truth_passed=[T])


def test_out_of_turns_must_be_a_bool():
    with pytest.raises(ValueError, match="out_of_turns"):
        episode_over(terminate_on="ground_truth", ground_truth_passed=[T], out_of_turns="yes")


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
    reference = [r for r, _ in pairs]
    program = None if no_program else [p for _, p in pairs]
    reward = generated_tests_reward(reference_passed=reference, program_passed=program)
    assert -1.0 <= reward <= 1.0
    if not pairs:
        assert reward == NO_TEST_REWARD
        return
    # Independent count: catches, agreements, wrong tests.
    fails = [False] * len(pairs) if program is None else program
    catches = sum(r and not p for r, p in zip(reference, fails))
    agrees = sum(r and p for r, p in zip(reference, fails))
    wrong = sum(not r for r in reference)
    assert reward == pytest.approx((catches * 1.0 + agrees * 0.2 - wrong * 1.0) / len(pairs))


@given(st.lists(st.booleans(), max_size=20), st.lists(st.booleans(), max_size=20))
def test_generated_rule_implies_some_valid_test_and_all_passing(program, reference):
    reference = reference[: len(program)] + [True] * max(0, len(program) - len(reference))
    if passes_generated_tests(program_passed=program, reference_passed=reference):
        assert all(program) and any(reference)
