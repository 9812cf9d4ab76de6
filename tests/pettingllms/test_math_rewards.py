"""The math workflow's rewards: tool outcomes and their rewards, the reasoner's reward, the global reward."""

from __future__ import annotations

import itertools

import pytest

from pettingllms.envs.math.rewards import (
    TOOL_OUTCOMES,
    global_reward,
    reasoner_local_reward,
    tool_local_reward,
    tool_outcome,
)


@pytest.mark.parametrize(
    ("parsed", "error", "answer", "verified", "outcome"),
    [
        (False, False, None, False, "unparseable"),
        (False, True, None, False, "unparseable"),  # nothing ran: no program, whatever else is reported
        (True, True, None, False, "failed"),  # raised / timed out
        (True, True, "3", False, "failed"),  # an error wins over partial output
        (True, False, None, False, "failed"),  # printed nothing
        (True, False, "  \n", False, "failed"),  # printed only blanks
        (True, False, "3", False, "wrong"),
        (True, False, "3", True, "verified"),
    ],
)
def test_tool_outcome(parsed, error, answer, verified, outcome):
    assert tool_outcome(parsed=parsed, error=error, answer=answer, verified=verified) == outcome


def test_tool_outcome_covers_every_consistent_input():
    seen = set()
    for parsed, error, answer, verified in itertools.product(
        (True, False), (True, False), (None, "", "7"), (True, False)
    ):
        consistent = not verified or (parsed and not error and bool(answer))
        if consistent:
            seen.add(tool_outcome(parsed=parsed, error=error, answer=answer, verified=verified))
        else:
            with pytest.raises(
                ValueError, match="`verified=True` needs a parsed program that ran and answered"
            ):
                tool_outcome(parsed=parsed, error=error, answer=answer, verified=verified)
    assert seen == set(TOOL_OUTCOMES)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"parsed": 1, "error": False, "answer": "1", "verified": False}, "`parsed` must be a bool, got 1"),
        (
            {"parsed": True, "error": None, "answer": "1", "verified": False},
            "`error` must be a bool, got None",
        ),
        (
            {"parsed": True, "error": False, "answer": 1, "verified": False},
            "`answer` must be a string or None, got int",
        ),
        ({"parsed": True, "error": False, "answer": "1", "verified": "yes"}, "`verified` must be a bool"),
    ],
)
def test_tool_outcome_names_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tool_outcome(**kwargs)


def test_tool_local_reward():
    assert [tool_local_reward(outcome) for outcome in TOOL_OUTCOMES] == [1.0, 0.0, -0.5, -1.0]
    assert TOOL_OUTCOMES == ("verified", "wrong", "failed", "unparseable")
    for bad in ("ok", "", None, "Verified"):
        with pytest.raises(ValueError, match=f"unknown tool outcome {bad!r}"):
            tool_local_reward(bad)


def test_reasoner_local_reward():
    assert reasoner_local_reward("42", True) == 1.0
    assert reasoner_local_reward("41", False) == 0.0
    assert reasoner_local_reward(None, False) == -1.0
    assert reasoner_local_reward("  ", False) == -1.0
    with pytest.raises(ValueError, match="`verified=True` with no answer"):
        reasoner_local_reward(None, True)
    with pytest.raises(ValueError, match="`verified` must be a bool, got 1"):
        reasoner_local_reward("1", 1)
    with pytest.raises(ValueError, match="`answer` must be a string or None, got int"):
        reasoner_local_reward(42, False)


def test_global_reward():
    assert global_reward(True) == 1.0
    assert global_reward(False) == 0.0
    with pytest.raises(ValueError, match="`final_answer_verified` must be a bool, got 1.0"):
        global_reward(1.0)
