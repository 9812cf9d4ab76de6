"""Hypothesis fuzzing: no exception other than ParseError escapes a parser, none at all escapes an agent.

Pure parsers and the rewards of parsed actions run 10,000 cases each (explicit ``max_examples``, the
issue's count); the tool agent's python path through an env worker uses the profile's count.
"""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pettingllms.agents import ExecutionResult, ParseError
from pettingllms.envs.game_parsers import extract_final_answer, parse_moves, parse_tool_calls
from pettingllms.envs.plan_path import PlanPathEnv, PlanPathPlanAgent, PlanPathToolAgent
from pettingllms.envs.sokoban import SokobanEnv, SokobanPlanAgent, SokobanToolAgent
from pettingllms.envs.sudoku import SudokuEnv, SudokuPlanAgent, SudokuToolAgent
from pettingllms.envs.sudoku.parsers import GridSpec
from pettingllms.envs.sudoku.parsers import parse_answer as parse_sudoku

MANY = settings(max_examples=10_000, suppress_health_check=[HealthCheck.too_slow])

# Arbitrary text, plus text built from the formats' own pieces so the valid paths are reached too.
_PIECES = ["####", "simulate:", "check:", "simulate(", ")", "```python\n", "```", "\n", " ", "U", "D", "L",
           "R", "up", "x", "[", "]", '"', ",", "/", ".", "R1C2=3", "r9c9=9", "1", "2", "3", "4", "0", "12",
           "print('#### U')", "=", "C", "\u2192", "\u00e9", "\x00"]
TEXT = st.one_of(st.text(max_size=200), st.lists(st.sampled_from(_PIECES), max_size=40).map("".join))


def _parse_or_parse_error(fn, *args):
    try:
        return fn(*args)
    except ParseError as exc:
        assert str(exc)
        return None


@pytest.mark.slow
@MANY
@given(TEXT)
def test_pure_parsers_raise_nothing_but_parse_error(text):
    answer = _parse_or_parse_error(extract_final_answer, text)
    assert answer is None or (answer and "\n" not in answer)
    calls = _parse_or_parse_error(parse_tool_calls, text, ("simulate", "python"), 4)
    assert calls is None or 1 <= len(calls) <= 4 and all(c.name in ("simulate", "python") for c in calls)
    moves = _parse_or_parse_error(parse_moves, text, 64)
    assert moves is None or (1 <= len(moves) <= 64 and set(moves) <= set("UDLR"))
    for size in (4, 9, 16):
        fills = _parse_or_parse_error(parse_sudoku, text, GridSpec(size))
        assert fills is None or all(0 <= r < size and 0 <= c < size and 0 <= v <= size for r, c, v in fills)


def _ready(env_cls, config, seed=1):
    env = env_cls({**config, "turn_order": ["tool", "plan"]})
    asyncio.run(env.reset(seed))
    return env


_ENVS = {
    "plan_path": (_ready(PlanPathEnv, {"rows": 5, "cols": 5, "wall_density": 0.2}), PlanPathToolAgent, PlanPathPlanAgent),
    "sokoban": (_ready(SokobanEnv, {}), SokobanToolAgent, SokobanPlanAgent),
    "sudoku": (_ready(SudokuEnv, {"size": 4}), SudokuToolAgent, SudokuPlanAgent),
}


def _run_now(coro):
    """Drive a coroutine that never suspends (pure-Python steps) without an event loop."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("step suspended; it should not await anything without a python tool")


def _check_agent(env_name, text, plan):
    base, tool_cls, plan_cls = _ENVS[env_name]
    env = base.clone()
    start_reward = env.task_reward
    agent = plan_cls() if plan else tool_cls()
    agent.update_from_env(0, env)
    agent.update_from_model(text)
    assert (agent.action is None) == (agent.parse_error is not None)
    _run_now(agent.step(env))
    assert math.isfinite(agent.local_reward) and math.isfinite(env.task_reward)
    assert 0.0 <= env.task_reward <= 1.0
    if agent.parse_error is not None:
        assert agent.local_reward == env.config.parse_error_reward and agent.failure == "parse_error"
    if not plan:
        assert env.task_reward == start_reward  # the tool agent never moves the real state
        assert env.state == base.state or env.state.tool_reports or env.state.proposal is None


# Arbitrary text, or text shaped like a real response: every role's call/answer line around a body
# that is often valid (moves, Sudoku fills or grids) and sometimes noise.
_MOVES_BODY = st.lists(st.sampled_from(["U", "D", "L", "R", "up", "left", " ", ",", "RRD"]), min_size=1, max_size=30)
_FILL = st.builds("R{}C{}={}".format, st.integers(0, 5), st.integers(0, 5), st.integers(0, 5))
_GRID_ROW = st.one_of(st.text(alphabet="1234.", min_size=4, max_size=4), st.text(alphabet="1234._0 ", max_size=6))
_BODY = st.one_of(
    _MOVES_BODY.map("".join),
    st.lists(_FILL, min_size=1, max_size=12).map(" ".join),
    st.lists(_GRID_ROW, min_size=4, max_size=4).map("/".join),
    st.lists(st.sampled_from(_PIECES[8:]), max_size=30).map("".join),
)
# Sanity (measured): roughly 5-15% of these texts parse to an action for each env and role.
ANSWER_LIKE = st.one_of(
    TEXT,
    st.builds("{}\nsimulate: {b}\ncheck: {b}\n#### {b}\n{}".format, st.text(max_size=20), st.text(max_size=10), b=_BODY),
)


@pytest.mark.slow
@MANY
@given(ANSWER_LIKE, st.sampled_from(sorted(_ENVS)), st.booleans())
def test_rewards_of_parsed_actions_are_finite_for_any_text(text, env_name, plan):
    _check_agent(env_name, text, plan)


class EchoRunner:
    """Env worker stand-in: the program 'prints' the code text itself (arbitrary stdout), status drawn."""

    def __init__(self, status: str) -> None:
        self.status = status

    async def run(self, code: str, stdin: str = "", timeout: float | None = None) -> ExecutionResult:
        return ExecutionResult(self.status, stdout=code, stderr=code[::-1])


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(TEXT, st.sampled_from(sorted(_ENVS)), st.sampled_from(["ok", "error", "timeout", "killed"]))
def test_python_tool_output_of_any_text_is_rewarded_not_raised(code, env_name, status):
    base, tool_cls, _ = _ENVS[env_name]
    env = base.clone()
    agent = tool_cls(tools=["python"])
    agent.update_from_env(0, env)
    agent.update_from_model(f"```python\n{code}\n```")
    if agent.action is None:
        return
    asyncio.run(agent.step(env, EchoRunner(status)))
    assert math.isfinite(agent.local_reward)
    if status != "ok":
        assert agent.failure == {"error": "tool_error", "timeout": "tool_timeout", "killed": "tool_killed"}[status]
