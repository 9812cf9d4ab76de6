"""Plan-Path: generator, BFS oracle, dynamics, rewards on hand-built states, prompts, tool agent."""

from __future__ import annotations

import asyncio
from collections import deque

import pytest

from pettingllms.agents import ExecutionResult, InfrastructureError, ToolConfigurationError
from pettingllms.envs.plan_path import (
    PlanPathConfig,
    PlanPathEnv,
    PlanPathLevel,
    PlanPathPlanAgent,
    PlanPathSingleAgent,
    PlanPathState,
    PlanPathToolAgent,
)
from pettingllms.envs.plan_path.generator import generate_level
from pettingllms.envs.plan_path.rewards import progress, task_reward
from pettingllms.envs.plan_path.solver import bfs_distances, shortest_path
from pettingllms.envs.plan_path.state import apply_moves

# Hand-built level: start top-left, goal bottom-right, a wall block in the middle.
#   S...
#   .##.
#   ...G
GRID = ("....", ".##.", "....")
LEVEL = PlanPathLevel(grid=GRID, start=(0, 0), goal=(2, 3), distance=bfs_distances(GRID, (2, 3)))


def hand_env(**overrides) -> PlanPathEnv:
    cfg = {"rows": 3, "cols": 4, "turn_order": ["tool", "plan"], "max_turns": 3, **overrides}
    env = PlanPathEnv(cfg)
    env.state = PlanPathState(seed=0, level=LEVEL, pos=LEVEL.start)
    return env


def _reachable(grid, start, goal) -> bool:
    seen, queue = {start}, deque([start])
    while queue:
        r, c = queue.popleft()
        if (r, c) == goal:
            return True
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nr < len(grid) and 0 <= nc < len(grid[0]) and grid[nr][nc] == "." and (nr, nc) not in seen:
                seen.add((nr, nc))
                queue.append((nr, nc))
    return False


def test_hand_built_distances():
    assert LEVEL.distance == ((5, 4, 3, 2), (4, -1, -1, 1), (3, 2, 1, 0))


@pytest.mark.parametrize("rows,cols,density", [(4, 4, 0.2), (6, 8, 0.3), (10, 10, 0.22)])
def test_generator_is_seeded_reachable_and_has_the_configured_density(rows, cols, density):
    levels = [generate_level(seed, rows, cols, density) for seed in range(60)]
    for seed, level in enumerate(levels):
        assert level == generate_level(seed, rows, cols, density)
        assert level.rows == rows and level.cols == cols
        assert sum(row.count("#") for row in level.grid) == round(density * rows * cols)
        assert level.start != level.goal
        assert _reachable(level.grid, level.start, level.goal)
        path = shortest_path(level, level.start)
        assert len(path) == level.dist(level.start) > 0
        assert apply_moves(level, level.start, path).reached
    assert len({lv.grid for lv in levels}) > 50  # seeds give different instances


def test_generator_errors_name_the_field():
    with pytest.raises(ValueError, match="`wall_density`"):
        generate_level(0, 3, 3, 1.0)
    with pytest.raises(ValueError, match="`wall_density`"):
        generate_level(0, 2, 2, 0.9)
    with pytest.raises(ValueError, match="`wall_density`"):
        PlanPathConfig(wall_density=-0.1)
    with pytest.raises(ValueError, match="`rows`"):
        PlanPathConfig(rows=0)


def test_moves_into_walls_are_rejected_and_a_list_must_end_on_the_goal():
    result = apply_moves(LEVEL, (0, 0), ("U", "L", "D", "R"))
    assert (result.pos, result.applied, result.invalid) == ((1, 0), 4, 3)
    result = apply_moves(LEVEL, (1, 3), ("D", "U", "U"))  # passes over the goal and walks on: no success
    assert (result.pos, result.applied, result.invalid, result.reached) == ((0, 3), 3, 0, False)
    result = apply_moves(LEVEL, (1, 3), ("U", "D", "D"))  # a detour that ends on the goal
    assert (result.pos, result.applied, result.invalid, result.reached) == ((2, 3), 3, 0, True)


def test_a_sweeping_move_list_no_longer_solves():
    env = hand_env(turn_order=["single"])
    (agent,) = [PlanPathSingleAgent()]
    agent.update_from_env(0, env)
    agent.update_from_model("#### R R R D D L L L")  # visits the goal at (2, 3), ends at (2, 0)
    result = asyncio.run(env.step_agent(agent))
    assert not result.success and env.state.pos == (2, 0)


def test_task_reward_on_hand_built_states():
    def state(pos):
        return PlanPathState(seed=0, level=LEVEL, pos=pos)

    # progress = 1 - d(pos) / d(start), d(start) = 5; reward = 0.5 * progress, 1.0 at the goal
    assert task_reward(state((0, 0))) == 0.0
    assert progress(state((0, 3))) == pytest.approx(0.6) and task_reward(state((0, 3))) == pytest.approx(0.3)
    assert task_reward(state((2, 2))) == pytest.approx(0.5 * 0.8)
    assert task_reward(state((2, 3))) == 1.0


def test_plan_agent_local_and_global_rewards_on_a_hand_built_state():
    env = hand_env(alpha=0.5, turn_order=["plan"])
    plan = PlanPathPlanAgent()
    plan.update_from_env(0, env)
    plan.update_from_model("I go right.\n#### U R R R")  # U is blocked
    result = asyncio.run(env.step_agent(plan))
    # local = (0.3 - 0.0) - 0.1 * 1 invalid; global = 0.3 (the new state); reward = 0.5 * 0.3 + 0.2
    assert result.local_reward == pytest.approx(0.2)
    assert result.global_reward == pytest.approx(0.3)
    assert result.reward == pytest.approx(0.35)
    assert env.state.pos == (0, 3) and env.state.moves_made == 4 and env.state.invalid_moves == 1


def test_parse_error_gets_the_documented_penalty_and_changes_nothing():
    env = hand_env(turn_order=["plan"], parse_error_reward=-0.7)
    plan = PlanPathPlanAgent()
    plan.update_from_env(0, env)
    plan.update_from_model("go up please")
    result = asyncio.run(env.step_agent(plan))
    assert result.local_reward == -0.7 and result.failure == "parse_error"
    assert "no final answer" in result.parse_error and env.state.pos == (0, 0)
    assert "not understood" in env.state.last_report


def test_tool_agent_is_scored_on_its_proposal_and_leaves_the_real_state_alone():
    env = hand_env()
    tool = PlanPathToolAgent()
    tool.update_from_env(0, env)
    tool.update_from_model("let me try\nsimulate: D D\nsimulate: R R R D D\nsimulate: R")
    result = asyncio.run(env.step_agent(tool))
    # proposal = the call with the best simulated result (the goal, not the later `R`): local = 1.0 - 0.0
    assert result.local_reward == pytest.approx(1.0)
    # not last in the turn: global is the task reward of the (unchanged) state after its step
    assert result.global_reward == 0.0 and env.state.pos == (0, 0)
    assert env.state.proposal == "R R R D D" and len(env.state.tool_reports) == 3
    assert "goal reached" in env.state.tool_reports[1].output


def test_tool_proposal_is_the_earliest_of_equally_good_calls_and_counts_blocked_moves():
    env = hand_env()
    tool = PlanPathToolAgent()
    tool.update_from_env(0, env)
    before = env.task_reward_of(env.state)
    # `U` is blocked (off the grid): worth -0.1; `R` and `D` make the same progress; `R` comes first
    tool.update_from_model("simulate: U\nsimulate: R\nsimulate: D")
    result = asyncio.run(env.step_agent(tool))
    assert env.state.proposal == "R"
    after_r, _ = env.apply_answer(env.state, ("R",))
    assert result.local_reward == pytest.approx(env.task_reward_of(after_r) - before)
    env = hand_env()
    tool.update_from_env(0, env)
    tool.update_from_model("simulate: U")
    assert asyncio.run(env.step_agent(tool)).local_reward == pytest.approx(-0.1)


def test_tool_agent_failures():
    env = hand_env()
    tool = PlanPathToolAgent()
    tool.update_from_env(0, env)
    tool.update_from_model("simulate: north")
    result = asyncio.run(env.step_agent(tool))
    assert result.local_reward == -0.5 and result.failure == "tool_error" and env.state.proposal is None
    env = hand_env()
    tool.update_from_env(0, env)
    tool.update_from_model("I think we should go right")
    result = asyncio.run(env.step_agent(tool))
    assert result.local_reward == -1.0 and result.failure == "parse_error"


def test_prompts_show_the_current_position_not_the_start():
    env = hand_env()
    tool, plan = PlanPathToolAgent(), PlanPathPlanAgent()
    tool.update_from_env(0, env)
    tool.update_from_model("simulate: R R R")
    asyncio.run(env.step_agent(tool))
    plan.update_from_env(0, env)
    plan.update_from_model("#### R R R")
    asyncio.run(env.step_agent(plan))
    prompt = tool.update_from_env(1, env)
    user = prompt[1]["content"]
    assert "Turn 2 of 3." in user
    assert "...P\n.##.\n...G" in user and "P at row 0, col 3" in user
    assert "plan played R R R" in user
    plan_prompt = plan.update_from_env(1, env)[1]["content"]
    assert "Tool proposal: R R R" in plan_prompt and "#### <answer>" in plan_prompt
    # deterministic: the same state gives the same prompt
    assert plan.update_from_env(1, env) == plan.update_from_env(1, env)


def test_single_agent_prompt_has_no_tool_report_and_text_style():
    env = hand_env(turn_order=["single"])
    agent = PlanPathSingleAgent(prompt_style="text")
    prompt = agent.update_from_env(0, env)
    assert isinstance(prompt, str) and "Tool report" not in prompt and "alone" in prompt


def test_tool_configuration_is_validated():
    with pytest.raises(ValueError, match="`tools` entry 'check'"):
        PlanPathToolAgent(tools=["check"])
    with pytest.raises(ValueError, match="`tools` must be a list"):
        PlanPathToolAgent(tools="simulate")
    with pytest.raises(ValueError, match="`tools` must be a list"):
        PlanPathToolAgent(tools=[])
    with pytest.raises(ValueError, match="`tools` must not repeat"):
        PlanPathToolAgent(tools=["simulate", "simulate"])
    with pytest.raises(ValueError, match="`max_tool_calls`"):
        PlanPathToolAgent(max_tool_calls=0)
    with pytest.raises(TypeError, match="plays 'plan_path'"):
        PlanPathToolAgent().update_from_env(0, object())


class CannedRunner:
    """An env worker that returns fixed results and records what it was asked to run."""

    def __init__(self, result: ExecutionResult | Exception) -> None:
        self.result = result
        self.calls: list[tuple[str, str, float | None]] = []

    async def run(self, code: str, stdin: str = "", timeout: float | None = None) -> ExecutionResult:
        self.calls.append((code, stdin, timeout))
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def _python_step(runner, response="```python\nprint('#### R R R D D')\n```", tools=("python",)):
    env = hand_env()
    tool = PlanPathToolAgent(tools=list(tools), code_timeout=2.0)
    tool.update_from_env(0, env)
    tool.update_from_model(response)
    return env, asyncio.run(env.step_agent(tool, runner))


def test_python_tool_reads_the_state_on_stdin_and_is_scored_on_its_printed_answer():
    runner = CannedRunner(ExecutionResult("ok", stdout="thinking\n#### R R R D D\n"))
    env, result = _python_step(runner)
    code, stdin, timeout = runner.calls[0]
    assert code == "print('#### R R R D D')\n" and timeout == 2.0
    assert stdin.startswith("P...\n.##.\n...G")
    assert result.local_reward == pytest.approx(1.0) and env.state.proposal == "R R R D D"


@pytest.mark.parametrize(
    "status,failure", [("error", "tool_error"), ("timeout", "tool_timeout"), ("killed", "tool_killed")]
)
def test_python_tool_program_failures_are_model_failures(status, failure):
    env, result = _python_step(CannedRunner(ExecutionResult(status, stderr="Traceback: boom")))
    assert result.failure == failure and result.local_reward == -0.5
    assert "boom" in env.state.tool_reports[0].output and not env.state.tool_reports[0].ok


def test_python_tool_without_an_answer_line_is_no_proposal():
    env, result = _python_step(CannedRunner(ExecutionResult("ok", stdout="R R R D D")))
    assert result.failure == "no_proposal" and result.local_reward == -0.5


def test_python_tool_infrastructure_failures_raise_and_roll_back():
    env = hand_env()
    before = env.snapshot()
    tool = PlanPathToolAgent(tools=["python"])
    tool.update_from_env(0, env)
    tool.update_from_model("```python\nprint(1)\n```")
    with pytest.raises(InfrastructureError, match="could not run"):
        asyncio.run(env.step_agent(tool, CannedRunner(OSError("pool crashed"))))
    assert env.state == before
    with pytest.raises(ToolConfigurationError, match="needs an env worker"):
        asyncio.run(env.step_agent(tool, None))


def test_python_tool_is_ignored_when_not_enabled():
    env = hand_env()
    tool = PlanPathToolAgent(tools=["simulate"])
    tool.update_from_env(0, env)
    tool.update_from_model("```python\nprint('#### R')\n```")
    assert tool.action is None and "no tool call" in tool.parse_error


def test_oracle_and_random_answers():
    import random

    env = PlanPathEnv({"rows": 5, "cols": 5, "wall_density": 0.2})
    asyncio.run(env.reset(11))
    answer = env.oracle_answer(env.state)
    assert apply_moves(env.state.level, env.state.pos, answer).reached
    rng = random.Random(0)
    for _ in range(50):
        moves = env.random_answer(env.state, rng)
        assert 1 <= len(moves) <= env.config.random_max_moves and set(moves) <= set("UDLR")


def test_tool_call_syntax():
    from pettingllms.envs.game_parsers import ToolCall, parse_tool_calls

    text = "Plan:\n```\nsimulate: U R\n```\n**simulate**(D)\nNote: fine\n```python\nprint('simulate: L')\n```"
    assert parse_tool_calls(text, ("simulate",), 4) == (ToolCall("simulate", "U R"), ToolCall("simulate", "D"))
    calls = parse_tool_calls(text, ("simulate", "python"), 2)
    assert calls == (ToolCall("simulate", "U R"), ToolCall("simulate", "D"))  # extras past max ignored
    assert parse_tool_calls("```py\nx=1\n", ("python",), 4) == (ToolCall("python", "x=1\n"),)  # unclosed fence


def test_move_and_final_answer_parsers():
    from pettingllms.agents import ParseError
    from pettingllms.envs.game_parsers import extract_final_answer, parse_moves

    assert parse_moves('["U", \'r\', up, LEFT]', 10) == ("U", "R", "U", "L")
    assert parse_moves("URRD", 10) == ("U", "R", "R", "D")
    assert parse_moves("D, D \u2192 L", 10) == ("D", "D", "L")
    with pytest.raises(ParseError, match="unknown move 'X'"):
        parse_moves("U X", 10)
    with pytest.raises(ParseError, match="too many moves"):
        parse_moves("U" * 11, 10)
    with pytest.raises(ParseError, match="empty move list"):
        parse_moves(" [ ] ", 10)
    assert extract_final_answer("#### L\nthinking\n#### U R  \nbye") == "U R"
    with pytest.raises(ParseError, match="empty final answer"):
        extract_final_answer("#### U\n####\n")
    with pytest.raises(ParseError, match="no final answer"):
        extract_final_answer("U R")


def test_plan_agent_can_play_the_tool_proposal_with_one_word():
    env = hand_env()
    tool, plan = PlanPathToolAgent(), PlanPathPlanAgent()
    plan.update_from_env(0, env)  # no proposal yet: `#### proposal` does not parse
    plan.update_from_model("#### proposal")
    assert plan.action is None and "made no proposal" in plan.parse_error
    tool.update_from_env(0, env)
    tool.update_from_model("simulate: D D\nsimulate: R R R D D")
    asyncio.run(env.step_agent(tool))
    prompt = plan.update_from_env(0, env)
    assert "`#### proposal`" in prompt[0]["content"] and prompt[-1]["content"].endswith("Tool proposal: R R R D D")
    plan.update_from_model("I agree.\n#### Proposal")
    assert plan.action == ("R", "R", "R", "D", "D")
    result = asyncio.run(env.step_agent(plan))
    assert result.success and "plan played R R R D D" in env.state.last_report


def test_single_agent_has_no_proposal_to_accept():
    env = hand_env(turn_order=["single"])
    agent = PlanPathSingleAgent()
    prompt = agent.update_from_env(0, env)
    assert "proposal" not in prompt[0]["content"]
    agent.update_from_model("#### proposal")
    assert agent.action is None and "unknown move" in agent.parse_error
