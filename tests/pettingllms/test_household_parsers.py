"""Household answer formats and rewards as pure functions (no game needed), fuzzed with hypothesis."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pettingllms.agents import ParseError
from pettingllms.envs.household import rewards
from pettingllms.envs.household.parsers import (
    MAX_COMMAND_CHARS,
    Command,
    command_key,
    format_command,
    normalize_command,
    parse_command,
    parse_subgoal,
)

ADMISSIBLE = ("examine fridge", "go east", "insert apple into fridge", "inventory", "look", "open fridge",
              "take apple from counter")


def test_commands_parse_by_text_or_number_and_tolerate_spelling():
    assert parse_command("I will open it.\n#### open fridge", ADMISSIBLE) == Command("open fridge", True)
    assert parse_command("#### 2", ADMISSIBLE) == Command("go east", True)
    assert parse_command("#### 2. go east", ADMISSIBLE) == Command("go east", True)
    assert parse_command("#### `Take the apple from the counter.`", ADMISSIBLE) == Command("take apple from counter", True)
    assert parse_command("#### > LOOK", ADMISSIBLE) == Command("look", True)


def test_a_well_formed_command_the_game_refuses_parses_as_inadmissible():
    assert parse_command("#### dance with the fridge", ADMISSIBLE) == Command("dance with the fridge", False)
    assert parse_command("#### go west", ADMISSIBLE) == Command("go west", False)


@pytest.mark.parametrize(
    ("response", "message"),
    [
        ("open fridge", "no final answer"),
        ("####   ", "empty final answer"),
        ("#### 9", "no command number 9: the list holds 7"),
        ("#### 0", "no command number 0"),
        ("#### ...", "empty command"),
        ("#### 12 34", "holds no word"),
        ("#### " + "x" * (MAX_COMMAND_CHARS + 1), "too long"),
        ("#### " + " ".join(["go"] * 17), "more than 16 words"),
        ("#### subgoal", "no sub-goal"),
    ],
)
def test_malformed_commands_are_parse_errors_naming_why(response, message):
    with pytest.raises(ParseError, match=message):
        parse_command(response, ADMISSIBLE, None, allow_subgoal=True)


def test_subgoal_answer_plays_the_planners_subgoal_only_for_the_actor():
    assert parse_command("#### subgoal", ADMISSIBLE, "open fridge", allow_subgoal=True) == Command("open fridge", True)
    assert parse_command("#### Subgoal.", ADMISSIBLE, "insert mug into fridge", allow_subgoal=True) == \
        Command("insert mug into fridge", False)
    assert parse_command("#### subgoal", ADMISSIBLE, "open fridge") == Command("subgoal", False)


def test_subgoals_may_lie_beyond_the_admissible_commands():
    assert parse_subgoal("#### insert apple into the fridge", ADMISSIBLE) == "insert apple into fridge"
    assert parse_subgoal("#### put mug on sofa", ADMISSIBLE) == "put mug on sofa"
    assert parse_subgoal("#### 6", ADMISSIBLE) == "open fridge"
    with pytest.raises(ParseError):
        parse_subgoal("no marker", ADMISSIBLE)


def test_format_round_trips():
    for command in ADMISSIBLE:
        assert parse_command(format_command(command), ADMISSIBLE) == Command(command, True)
        assert parse_subgoal(format_command(command), ADMISSIBLE) == command
    assert normalize_command('  "Go  East." ') == "go east" and command_key("take the apple") == "take apple"


def test_rewards():
    assert rewards.global_reward(True, 0, 2) == 1.0
    assert rewards.global_reward(False, 1, 2) == 0.25 and rewards.global_reward(False, 0, 0) == 0.0
    parts = dict(parse_error_reward=-1.0, inadmissible_reward=-0.5, changed_reward=0.2, subgoal_reward=0.5)
    assert rewards.actor_local_reward("changed", True, **parts) == pytest.approx(0.7)
    assert rewards.actor_local_reward("no_change", True, **parts) == 0.5
    assert rewards.actor_local_reward("no_change", False, **parts) == 0.0
    assert rewards.actor_local_reward("inadmissible", False, **parts) == -0.5
    assert rewards.actor_local_reward("parse_error", False, **parts) == -1.0
    with pytest.raises(ValueError, match="cannot reach"):
        rewards.actor_local_reward("inadmissible", True, **parts)
    with pytest.raises(ValueError, match="unknown actor outcome"):
        rewards.actor_local_reward("won", False, **parts)
    assert rewards.actor_outcome(parsed=True, admissible=True, changed=False) == "no_change"
    policy = ("go east", "take apple from sofa", "go west", "open fridge")
    assert rewards.subgoal_on_path("Take the apple from sofa", policy, 3)
    assert not rewards.subgoal_on_path("open fridge", policy, 3) and rewards.subgoal_on_path("open fridge", policy, 4)
    assert rewards.planner_local_reward(True, parse_error_reward=-1, on_path_reward=1) == 1
    assert rewards.planner_local_reward(False, parse_error_reward=-1, on_path_reward=1) == 0
    assert rewards.planner_local_reward(None, parse_error_reward=-1, on_path_reward=1) == -1


# ---- fuzzing --------------------------------------------------------------------------------------------

_PIECES = ["####", "#### ", "\n", " ", "go", "east", "open", "fridge", "take", "apple", "from", "counter", "the",
           "subgoal", "1", "2", "9", "0", ".", ")", "`", '"', ">", "!", "insert", "into", "\u00e9", "\x00", "\t"]
TEXT = st.one_of(st.text(max_size=200), st.lists(st.sampled_from(_PIECES), max_size=40).map("".join))
LISTS = st.lists(st.sampled_from(ADMISSIBLE + ("put mug on sofa", "close fridge")), max_size=8, unique=True)


def _check(text, listed, subgoal):
    for allow in (False, True):
        try:
            command = parse_command(text, listed, subgoal, allow_subgoal=allow)
        except ParseError as exc:
            assert str(exc)
        else:
            assert command.text and "\n" not in command.text and len(command.text) <= MAX_COMMAND_CHARS
            assert command.admissible == (command.text in listed)
    try:
        goal = parse_subgoal(text, listed)
    except ParseError as exc:
        assert str(exc)
    else:
        assert goal and "\n" not in goal and len(goal) <= MAX_COMMAND_CHARS


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(TEXT, LISTS, st.one_of(st.none(), st.sampled_from(ADMISSIBLE), st.text(max_size=30)))
def test_parsers_raise_nothing_but_parse_error(text, listed, subgoal):
    _check(text, listed, subgoal)


@pytest.mark.slow
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(TEXT, LISTS, st.one_of(st.none(), st.sampled_from(ADMISSIBLE)))
def test_parsers_raise_nothing_but_parse_error_many(text, listed, subgoal):
    _check(text, listed, subgoal)


@given(st.sampled_from(rewards.ACTOR_OUTCOMES), st.booleans(),
       st.floats(-5, 5), st.floats(-5, 5), st.floats(-5, 5), st.floats(-5, 5))
def test_actor_rewards_are_finite_or_refused(outcome, reached, a, b, c, d):
    try:
        value = rewards.actor_local_reward(outcome, reached, parse_error_reward=a, inadmissible_reward=b,
                                           changed_reward=c, subgoal_reward=d)
    except ValueError:
        assert reached and outcome in ("inadmissible", "parse_error")
    else:
        assert math.isfinite(value)
