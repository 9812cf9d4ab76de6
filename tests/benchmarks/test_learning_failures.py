"""The learning benchmark's failure breakdown, on hand-built evaluation samples."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks import learning_failures as failures
from pettingllms.envs.game_parsers import ToolCall


def tool(pid, env, turn, calls, reached):
    """A tool sample: ``calls`` simulate arguments, ``reached[i]``: call i's report says goal reached."""
    lines = [f"simulate: ends at row 0, col 0; 0 blocked move(s){'; goal reached' if r else ''}" for r in reached]
    return SimpleNamespace(problem_id=pid, env_index=env, turn=turn, role="tool", success=False,
                           action=tuple(ToolCall("simulate", c) for c in calls), response="", feedback="\n".join(lines))


def plan(pid, env, turn, response, success, ends=None):
    """A plan sample; ``ends``: the cell its report says the player ended on (None: no report)."""
    feedback = f"plan played R: ends at row {ends[0]}, col {ends[1]}; 0 blocked move(s)" if ends else ""
    return SimpleNamespace(problem_id=pid, env_index=env, turn=turn, role="plan", success=success,
                           action=None, response=response, feedback=feedback)


def test_episode_breakdown_counts_each_outcome():
    samples = [
        # Episode A: turn 1 finds the goal with its second call and the plan plays it.
        tool(1, 0, 0, ["R R", "D D"], [False, True]), plan(1, 0, 0, "#### proposal", True),
        # Episode B: turn 1 finds it, the plan answers its own moves, misses and stays where it was;
        # turn 2 repeats "U" from that cell (wasted), then the plan solves alone.
        tool(1, 1, 0, ["U", "L"], [False, True]), plan(1, 1, 0, "#### R", False, ends=(0, 0)),
        tool(1, 1, 1, ["U", "u"], [False, False]), plan(1, 1, 1, "#### D", True),
        # Episode C: nothing found in three turns. Turn 3 repeats turn 1's "R" from the start cell (the
        # player went there and back); turn 2's "R" came from another cell, so it is new.
        tool(2, 0, 0, ["R"], [False]), plan(2, 0, 0, "#### L", False, ends=(2, 1)),
        tool(2, 0, 1, ["D", "R"], [False, False]), plan(2, 0, 1, "#### L", False, ends=(2, 2)),
        tool(2, 0, 2, ["r", "U"], [False, False]), plan(2, 0, 2, "#### proposal", False),
    ]
    b = failures.episode_breakdown(reversed(samples), {1: (0, 0), 2: (2, 2)})  # order does not matter
    assert b["episodes"] == 3
    assert b["success"] == pytest.approx(2 / 3)
    assert b["solved_at_turn"] == {0: pytest.approx(1 / 3), 1: pytest.approx(1 / 3)}
    assert b["tool_found"] == pytest.approx(2 / 3)
    assert b["plan_dropped"] == pytest.approx(1 / 3)  # only episode B threw a solving proposal away
    assert b["plan_alone"] == pytest.approx(1 / 3)
    assert b["tool_responses"] == 6
    assert b["calls_per_response"] == pytest.approx(11 / 6)
    # "U" and "u" normalise to one call: B's turn 2 has 1 distinct, C's turn 3 has 2.
    assert b["distinct_per_response"] == pytest.approx((2 + 2 + 1 + 1 + 2 + 2) / 6)
    assert b["hit_rate_per_call"] == pytest.approx(2 / 11)
    # Repeats from the same cell: B's "U" (turn 2), C's "R" (turn 3): 2 of 10 distinct calls.
    assert b["repeat_rate_per_distinct_call"] == pytest.approx(2 / 10)


def test_a_single_agent_with_the_tool_is_broken_down_by_its_turns():
    """Tool turns (calls) count as tool responses, action turns (an answer, here a tuple of moves) as the plan's;
    the single agent plays two turns for the team's one, so the table lists its six turns."""
    def single_tool(pid, env, turn, calls, reached):
        return SimpleNamespace(**{**vars(tool(pid, env, turn, calls, reached)), "role": "single"})

    def single_act(pid, env, turn, response, success, ends=None):
        sample = SimpleNamespace(**{**vars(plan(pid, env, turn, response, success, ends)), "role": "single"})
        sample.action = ("R", "D")  # a parsed answer, not calls
        return sample

    samples = [
        # A: the tool turn finds the goal and the action turn plays it (solved at the second turn).
        single_tool(1, 0, 0, ["R D"], [True]), single_act(1, 0, 1, "#### proposal", True),
        # B: found, dropped for its own moves (it moved to (1, 1)), two tool turns without a hit, a miss, then
        # solved alone at the sixth turn (index 5).
        single_tool(1, 1, 0, ["R D"], [True]), single_act(1, 1, 1, "#### R", False, ends=(1, 1)),
        single_tool(1, 1, 2, ["U", "L"], [False, False]), single_tool(1, 1, 3, ["U"], [False]),
        single_act(1, 1, 4, "#### D", False, ends=(1, 1)), single_act(1, 1, 5, "#### D", True),
    ]
    b = failures.episode_breakdown(samples, {1: (0, 0)})
    assert b["episodes"] == 2 and b["success"] == 1.0
    assert b["solved_at_turn"] == {1: 0.5, 5: 0.5}
    assert b["tool_found"] == 1.0 and b["plan_dropped"] == 0.5 and b["plan_alone"] == 0.5
    assert b["tool_responses"] == 4 and b["calls_per_response"] == pytest.approx(5 / 4)
    assert b["hit_rate_per_call"] == pytest.approx(2 / 5)
    # "U" at turn 3 repeats turn 2's "U" from the same cell (1, 1): 1 of 5 distinct calls (1 + 1 + 2 + 1).
    assert b["repeat_rate_per_distinct_call"] == pytest.approx(1 / 5)
    b["success_by_distance"] = failures.success_by_distance({1: [True, True]}, {1: 2})
    header = failures.build_table({"single": b}).splitlines()[0]
    assert "solved at turn 1 / 2 / 3 / 4 / 5 / 6 (%)" in header
    assert "| single | 100.0% | 0 / 50 / 0 / 0 / 0 / 50 |" in failures.build_table({"single": b})


def test_episode_breakdown_rejects_no_samples():
    with pytest.raises(ValueError, match="`samples` is empty"):
        failures.episode_breakdown([], {})


def test_success_by_distance_groups_episodes():
    table = failures.success_by_distance({7: [True, False], 8: [True], 9: [False, False]}, {7: 3, 8: 3, 9: 5})
    assert table == {3: {"episodes": 3, "success": pytest.approx(2 / 3)}, 5: {"episodes": 2, "success": 0.0}}


def test_build_table_reads_breakdowns_back_from_json():
    import json

    samples = [tool(1, 0, 0, ["R"], [True]), plan(1, 0, 0, "#### proposal", True),
               tool(2, 0, 0, ["U"], [False]), plan(2, 0, 0, "#### L", False)]
    b = failures.episode_breakdown(samples, {1: (0, 0), 2: (0, 0)})
    b["success_by_distance"] = failures.success_by_distance({1: [True], 2: [False]}, {1: 1, 2: 4})
    fresh = failures.build_table({"p": b})
    assert failures.build_table(json.loads(json.dumps({"p": b}))) == fresh  # int keys came back as strings
    assert "| p | 50.0% | 50 / 0 / 0 | 50.0% | 0.0% | 0.0% | 1.00 | 1.00 | 50.0% | 0.0% |" in fresh
    assert "| p | 100% (1) | — |" not in fresh and "| p | 100% (1) | 0% (1) |" in fresh


def _math(pid, env, turn, role, feedback, success=False, action="x"):
    return SimpleNamespace(problem_id=pid, env_index=env, turn=turn, role=role, success=success, action=action,
                           response="", feedback=feedback)


def test_math_breakdown_splits_copies_overrides_and_drops():
    tool, reasoner = "tool_generator", "reasoning_generator"
    samples = [
        # A: right tool answer, copied: solved at turn 0.
        _math(1, 0, 0, tool, f"{tool} ran the calculator: gave 12 (correct)"),
        _math(1, 0, 0, reasoner, f"{reasoner} answered 12 (correct)", success=True),
        # B: wrong tool answer, the reasoner overrides it with the right one; then the tool fails, the reasoner
        # keeps its answer (no tool answer to compare with).
        _math(2, 0, 0, tool, f"{tool} ran the calculator: gave 10 (wrong)"),
        _math(2, 0, 0, reasoner, f"{reasoner} answered 11 (correct)", success=True),
        _math(2, 0, 1, tool, f"{tool} ran the calculator: failed (division by zero)", success=True),
        _math(2, 0, 1, reasoner, f"{reasoner} answered 11 (correct)", success=True),
        # C: unparseable tool response, then a right tool answer the reasoner drops.
        _math(3, 0, 0, tool, "not understood", action=None),
        _math(3, 0, 0, reasoner, "not understood", action=None),
        _math(3, 0, 1, tool, f"{tool} ran the calculator: gave 7 (correct)"),
        _math(3, 0, 1, reasoner, f"{reasoner} answered 8 (wrong)"),
    ]
    b = failures.math_episode_breakdown(samples)
    assert b["episodes"] == 3 and b["success"] == pytest.approx(2 / 3)
    assert b["solved_at_turn"] == {0: pytest.approx(2 / 3)}
    assert b["tool_responses"] == 5 and b["tool_correct"] == pytest.approx(2 / 5)
    assert b["tool_wrong"] == b["tool_failed"] == b["tool_unparseable"] == pytest.approx(1 / 5)
    assert b["answers"] == 4 and b["answer_unparseable"] == 1 and b["answer_correct"] == pytest.approx(3 / 4)
    assert b["copies_tool"] == b["overrides_wrong_tool"] == b["drops_right_tool"] == pytest.approx(1 / 4)
    assert b["without_tool_answer"] == pytest.approx(1 / 4) and b["correct_without_tool_answer"] == 1
    assert b["tool_right_in_episode"] == pytest.approx(2 / 3)
    assert "| p | 66.7% |" in failures.build_math_table({"p": b})
