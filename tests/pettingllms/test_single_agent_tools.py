"""The games' single agent with the team's tools (the fair L0 baseline, ``envs/game.py``): tool turns and action
turns on a hand-built Plan-Path level with hand-computed rewards, what it may not do, the oracle's
demonstrations for it in every puzzle, and that calling tools forever earns nothing."""

from __future__ import annotations

import asyncio

import pytest

from pettingllms.envs.plan_path import PlanPathSingleAgent
from pettingllms.execution.samples import trajectory_return
from pettingllms.registry import make_agents, make_env
from pettingllms.scripted import OraclePolicy, play_episode
from tests.pettingllms.test_envs_plan_path import hand_env

# The hand-built level of test_envs_plan_path: start (0, 0), goal (2, 3), BFS distance 5 from the start.
# task_reward = 1.0 at the goal, else 0.5 * (1 - d / 5): 0.0 at the start, 0.2 at (2, 0) (d = 3).


def _single(**options) -> tuple:
    env = hand_env(turn_order=["single"], max_turns=6)
    return env, PlanPathSingleAgent(tools=["simulate"], **options)


def _turn(env, agent, response: str, turn: int = 0):
    agent.update_from_env(turn, env)
    agent.update_from_model(response)
    return asyncio.run(env.step_agent(agent))


def test_a_tool_turn_changes_nothing_earns_zero_and_shows_its_report_next_turn():
    env, agent = _single()
    first = agent.update_from_env(0, env)
    assert "simulate: <moves>" in first[0]["content"] and "`#### proposal`" in first[0]["content"]
    assert "Tool report: none yet." in first[-1]["content"]
    _turn(env, agent, "simulate: D D\nsimulate: R R R D D")
    assert env.state.pos == (0, 0) and env.state.actions_taken == 0  # simulated on copies only
    assert agent.local_reward == 0.0 and agent.failure is None
    assert env.state.proposal == "R R R D D"  # the better of 0.2 (D D) and 1.0 (the goal)
    shown = agent.update_from_env(1, env)[-1]["content"]
    assert "- simulate: D D -> ends at row 2, col 0" in shown and shown.endswith("Tool proposal: R R R D D")


def test_an_action_turn_is_the_plan_agent_s_and_clears_the_proposal():
    env, agent = _single()
    _turn(env, agent, "simulate: R R R D D")
    result = _turn(env, agent, "#### proposal", turn=1)
    assert result.success and agent.local_reward == 1.0  # 1.0 - 0.0, no blocked move
    assert env.state.proposal is None and env.state.tool_reports == []
    env, agent = _single()
    _turn(env, agent, "simulate: R R R D D")
    _turn(env, agent, "#### D D", turn=1)  # its own action instead: (2, 0), 0.2 - 0.0
    assert env.state.pos == (2, 0) and agent.local_reward == pytest.approx(0.2)
    agent.update_from_env(2, env)
    agent.update_from_model("#### proposal")  # the proposal was for the state before the action
    assert agent.action is None and "made no proposal" in agent.parse_error


def test_a_response_with_calls_and_an_answer_plays_the_answer_and_says_the_calls_were_not_run():
    env, agent = _single()
    _turn(env, agent, "simulate: R R R D D\n#### D D")
    assert env.state.pos == (2, 0) and agent.local_reward == pytest.approx(0.2)
    assert env.state.last_report.endswith("(1 tool call(s) in the same response were not run)")
    assert env.state.tool_reports == [] and env.state.proposal is None


def test_failed_and_unparsed_turns_cost_what_the_team_s_do():
    env, agent = _single()
    _turn(env, agent, "simulate: X")
    assert agent.failure == "tool_error" and agent.local_reward == env.config.tool_failure_reward == -0.5
    env, agent = _single()
    _turn(env, agent, "I would move down.")
    assert agent.action is None and agent.local_reward == env.config.parse_error_reward
    assert "no tool call and no `#### <answer>` line" in agent.parse_error
    with pytest.raises(ValueError, match="`tools` entry 'python3'"):
        PlanPathSingleAgent(tools=["python3"])
    with pytest.raises(ValueError, match="`max_tool_calls` must be an integer >= 1"):
        PlanPathSingleAgent(tools=["simulate"], max_tool_calls=0)
    assert not PlanPathSingleAgent().uses_tools and PlanPathSingleAgent().max_tool_calls is None


def test_more_calls_than_allowed_run_only_the_first_ones():
    env, agent = _single(max_tool_calls=1)
    _turn(env, agent, "simulate: D D\nsimulate: R R R D D")
    assert [r.argument for r in env.state.tool_reports] == ["D D"] and env.state.proposal == "D D"


PUZZLES = {
    "plan_path": {"rows": 5, "cols": 5},
    "sokoban": {"rows": 6, "cols": 6, "num_boxes": 1},
    "sudoku": {"size": 4},
    "eight_queens": {},
    "blocksworld": {},
}


def _episodes(name: str, order: tuple[str, ...], policy, seeds, max_turns: int, options=None) -> list:
    env = make_env(name, {**PUZZLES[name], "turn_order": list(order), "max_turns": max_turns})
    agents = make_agents(name, order, options)

    async def run():
        return [await play_episode(env, agents, policy, seed) for seed in seeds]

    return asyncio.run(run())


@pytest.mark.parametrize("name", sorted(PUZZLES))
def test_the_oracle_plays_the_single_agent_as_the_team_with_the_same_model_calls(name):
    """The oracle's single agent simulates, then plays its proposal: two model calls, as the team's tool agent
    and plan agent make in one turn (the single agent has twice the team's turns)."""
    tool = make_env(name, {**PUZZLES[name], "turn_order": ["tool", "plan"]}).spec.env_tool
    options = {"single": {"tools": [tool]}}
    for policy in (OraclePolicy(accept_proposals=True), OraclePolicy(tool_candidates=3, seed=1)):
        team = _episodes(name, ("tool", "plan"), policy, range(10), max_turns=3)
        alone = _episodes(name, ("single",), policy, range(10), max_turns=6, options=options)
        assert all(r.success for r in team + alone)
        assert [len(r.steps) for r in alone] == [len(r.steps) for r in team] == [2] * 10


class _OnlyTools:
    """A degenerate single agent: simulates the solution every turn and never acts."""

    def respond(self, agent, env):
        return agent.format_tool_response(env.oracle_answer(env.state))


def test_calling_tools_forever_earns_nothing_in_either_return_mode():
    options = {"single": {"tools": ["simulate"]}}
    farming = _episodes("plan_path", ("single",), _OnlyTools(), range(5), max_turns=6, options=options)
    honest = _episodes("plan_path", ("single",), OraclePolicy(accept_proposals=True), range(5), max_turns=6,
                       options=options)
    for cheat, good in zip(farming, honest, strict=True):
        assert not cheat.success and len(cheat.steps) == 6 and all(s.local_reward == 0.0 for s in cheat.steps)
        for mode in ("final", "sum"):
            cheat_return = trajectory_return([s.reward for s in cheat.steps], cheat.steps[-1].global_reward, mode)
            good_return = trajectory_return([s.reward for s in good.steps], good.steps[-1].global_reward, mode)
            assert cheat_return < good_return, (mode, cheat_return, good_return)


def test_agent_options_may_set_a_declared_role_the_run_does_not_play_but_no_other():
    from pettingllms.config import ConfigError, load_config
    from pettingllms.config.env_section import workflow_env
    from pettingllms.config.loader import validate_config

    config = load_config("plan_path/L1", ["env.agent_options.single.tools=[simulate]"])  # a team run
    validate_config(config)
    assert workflow_env(config)[2] == {"tool": {"tools": ["simulate"]}}  # the team's options only
    assert workflow_env(config, ["single"])[2] == {"single": {"tools": ["simulate"]}}  # e.g. sft.workflows
    with pytest.raises(ConfigError, match=r"`env.agent_options` names role\(s\) \['critic'\] that plan_path does "
                                          r"not have; its roles: \['tool', 'plan', 'single'\]"):
        validate_config(load_config("plan_path/L1", ["env.agent_options.critic.tools=[simulate]"]))


def test_on_its_last_turn_the_oracle_s_single_agent_acts_at_once():
    """After random detour turns (sft.late_turn_fraction) one turn may be left: a tool turn would leave none to
    act on its proposal."""
    options = {"single": {"tools": ["simulate"]}}
    for name in ("plan_path", "sokoban"):
        results = _episodes(name, ("single",), OraclePolicy(accept_proposals=True), range(10), max_turns=1,
                            options=options)
        assert all(r.success and len(r.steps) == 1 for r in results)
