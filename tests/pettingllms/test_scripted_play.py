"""Scripted policies play every environment end to end through the agent protocol (no model)."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import sys
import time

import pytest

from pettingllms.agents import ExecutionResult
from pettingllms.registry import make_agents, make_env
from pettingllms.scripted import OraclePolicy, RandomPolicy, RolePolicy, play_episode

CONFIGS = {
    "plan_path": {"rows": 5, "cols": 5, "wall_density": 0.2},
    "sokoban": {"rows": 6, "cols": 6, "num_boxes": 1},
    "sudoku": {"size": 4},
}
ORDERS = [("tool", "plan"), ("single",)]


def _play_many(env_name, order, policy, seeds, **extra):
    env = make_env(env_name, {**CONFIGS[env_name], "turn_order": list(order), **extra})
    agents = make_agents(env_name, order)

    async def run_all():
        return [await play_episode(env, agents, policy, seed) for seed in seeds]

    return asyncio.run(run_all())


@pytest.mark.parametrize("order", ORDERS, ids=["tool+plan", "single"])
@pytest.mark.parametrize("env_name", sorted(CONFIGS))
def test_oracle_solves_all_200_seeded_instances_and_random_far_less(env_name, order):
    oracle = _play_many(env_name, order, OraclePolicy(), range(200))
    assert all(r.success and r.done for r in oracle)
    assert all(r.turns <= 1 for r in oracle)  # the oracle finishes in the first turn
    random_results = _play_many(env_name, order, RandomPolicy(seed=7), range(200))
    rate = sum(r.success for r in random_results) / 200
    assert rate <= 0.4, f"random policy solved {rate:.0%} of {env_name}"
    assert all(r.done for r in random_results)


def test_oracle_solves_bank_9x9_sudoku():
    results = _play_many("sudoku", ("tool", "plan"), OraclePolicy(), range(20), size=9, source="bank")
    assert all(r.success for r in results)


def test_same_seeds_same_episodes():
    first = _play_many("sokoban", ("tool", "plan"), RandomPolicy(seed=3, malformed_prob=0.2), range(10))
    second = _play_many("sokoban", ("tool", "plan"), RandomPolicy(seed=3, malformed_prob=0.2), range(10))
    assert first == second


def _invalid_count(state) -> int:
    return state.invalid_fills if env_is_sudoku(state) else state.invalid_moves


def env_is_sudoku(state) -> bool:
    return hasattr(state, "invalid_fills")


@pytest.mark.parametrize("env_name", sorted(CONFIGS))
def test_rewards_follow_the_documented_definitions_in_played_episodes(env_name):
    """Recompute every step's reward parts from the states before and after it."""
    alpha = 0.7
    env = make_env(env_name, {**CONFIGS[env_name], "turn_order": ["tool", "plan"], "alpha": alpha, "max_turns": 4})
    agents = make_agents(env_name, ["tool", "plan"])
    policy = RolePolicy({"tool": RandomPolicy(seed=1, malformed_prob=0.2), "plan": RandomPolicy(seed=2, malformed_prob=0.2)})
    cfg = env.config
    checked = {"tool": 0, "plan": 0, "parse_error": 0}
    for seed in range(25):
        asyncio.run(env.reset(seed))
        while not env.done:
            agent = agents[env.state.position]
            before = env.snapshot()
            agent.update_from_env(env.state.turn, env)
            agent.update_from_model(policy.respond(agent, env))
            result = asyncio.run(env.step_agent(agent))
            after = env.state
            assert result.global_reward == env.task_reward_of(after)  # the state right after this step
            assert result.reward == pytest.approx(alpha * result.global_reward + result.local_reward)
            if agent.parse_error is not None:
                checked["parse_error"] += 1
                assert result.local_reward == cfg.parse_error_reward and result.failure == "parse_error"
            elif agent.role == "plan":
                checked["plan"] += 1
                invalid = _invalid_count(after) - _invalid_count(before)
                increment = env.task_reward_of(after) - env.task_reward_of(before)
                assert result.local_reward == pytest.approx(increment - cfg.invalid_action_penalty * invalid)
            else:
                checked["tool"] += 1
                assert env.task_reward_of(after) == env.task_reward_of(before)  # the real state did not move
                if after.proposal is None:
                    assert result.local_reward == cfg.tool_failure_reward
                else:
                    proposed, outcome = env.apply_answer(before, env.parse_answer(after.proposal))
                    expected = (env.task_reward_of(proposed) - env.task_reward_of(before)
                                - cfg.invalid_action_penalty * outcome.invalid)
                    assert result.local_reward == pytest.approx(expected)
    assert min(checked.values()) > 5, checked


@pytest.mark.parametrize("env_name", sorted(CONFIGS))
def test_stepped_copies_are_independent_and_scored_on_themselves(env_name):
    """What tree sampling needs: K copies of one state, each stepped with its own candidate."""
    env = make_env(env_name, {**CONFIGS[env_name], "turn_order": ["tool", "plan"]})
    asyncio.run(env.reset(3))
    tool, plan = make_agents(env_name, ["tool", "plan"])
    tool.update_from_env(0, env)
    tool.update_from_model(RandomPolicy(0).respond(tool, env))
    asyncio.run(env.step_agent(tool))
    original = env.snapshot()
    copies = [env.clone() for _ in range(4)]
    assert _mutable_ids(copies[0]) & _mutable_ids(copies[1]) == set()
    assert _mutable_ids(copies[0]) & _mutable_ids(env) == set()
    rng = random.Random(0)
    rewards = []
    for i, copy_env in enumerate(copies):
        plan.update_from_env(0, copy_env)
        answer = copy_env.oracle_answer(copy_env.state) if i == 0 else copy_env.random_answer(copy_env.state, rng)
        plan.update_from_model(plan.format_response(answer))
        result = asyncio.run(copy_env.step_agent(plan))
        assert result.global_reward == copy_env.task_reward
        rewards.append(result.reward)
    assert env.state == original  # the source state never moved
    assert copies[0].success and rewards[0] == max(rewards) and len(set(rewards)) > 1


def _mutable_ids(obj, seen=None) -> set[int]:
    """Ids of every mutable container / non-frozen dataclass reachable from ``obj``."""
    seen = set() if seen is None else seen
    found: set[int] = set()
    stack = [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, (list, dict, set)):
            found.add(id(item))
            stack.extend(item.values() if isinstance(item, dict) else item)
        elif isinstance(item, tuple | frozenset):
            stack.extend(item)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            if not item.__dataclass_params__.frozen:
                found.add(id(item))
            stack.extend(getattr(item, f.name) for f in dataclasses.fields(item))
        elif hasattr(item, "__dict__") and not isinstance(item, type):
            found.add(id(item))
            stack.extend(vars(item).values())
    return found


class SubprocessRunner:
    """A plain subprocess runner for trusted test programs (the real sandbox lives in pettingllms.sandbox)."""

    async def run(self, code: str, stdin: str = "", timeout: float | None = None) -> ExecutionResult:
        start = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-c", code,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), timeout or 20)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            return ExecutionResult("timeout", duration=time.monotonic() - start)
        status = "ok" if proc.returncode == 0 else "error"
        return ExecutionResult(status, out.decode(), err.decode(), time.monotonic() - start)


# A BFS written the way a model would write it: reads the grid from stdin, prints the answer line.
BFS_PROGRAM = """
import sys
from collections import deque
lines = [l for l in sys.stdin.read().splitlines() if l and set(l) <= set('#.PG')]
find = lambda ch: next((r, row.index(ch)) for r, row in enumerate(lines) if ch in row)
start, goal = find('P'), find('G')
prev = {start: None}
queue = deque([start])
while queue:
    cell = queue.popleft()
    for move, (dr, dc) in {'U': (-1, 0), 'D': (1, 0), 'L': (0, -1), 'R': (0, 1)}.items():
        nxt = (cell[0] + dr, cell[1] + dc)
        if 0 <= nxt[0] < len(lines) and 0 <= nxt[1] < len(lines[0]) and lines[nxt[0]][nxt[1]] != '#' and nxt not in prev:
            prev[nxt] = (cell, move)
            queue.append(nxt)
path, cell = [], goal
while prev[cell] is not None:
    cell, move = prev[cell]
    path.append(move)
print('#### ' + ' '.join(reversed(path)))
"""


def test_python_tool_through_a_real_env_worker():
    env = make_env("plan_path", {**CONFIGS["plan_path"], "turn_order": ["tool", "plan"]})
    tool, plan = make_agents("plan_path", ["tool", "plan"], {"tool": {"tools": ["python"], "code_timeout": 20}})
    runner = SubprocessRunner()

    class ToolWritesBfs:
        def respond(self, agent, env):
            if agent.role == "tool":
                return f"I will search.\n```python\n{BFS_PROGRAM}\n```"
            return f"#### {env.state.proposal}"  # the plan agent trusts the tool's proposal

    async def run_all():
        return [await play_episode(env, [tool, plan], ToolWritesBfs(), seed, env_worker=runner) for seed in range(4)]

    results = asyncio.run(run_all())
    assert all(r.success for r in results)
    assert all(r.steps[0].failure is None and r.steps[0].local_reward == pytest.approx(1.0) for r in results)


@pytest.mark.parametrize("env_name", sorted(CONFIGS))
def test_oracle_python_tool_response_round_trips(env_name):
    env = make_env(env_name, {**CONFIGS[env_name], "turn_order": ["tool", "plan"]})
    agents = make_agents(env_name, ["tool", "plan"], {"tool": {"tools": ["python"]}})

    async def run():
        return await play_episode(env, agents, OraclePolicy(), 2, env_worker=SubprocessRunner())

    result = asyncio.run(run())
    assert result.success and result.steps[0].failure is None


def test_play_episode_checks_roles():
    env = make_env("sudoku", {"turn_order": ["tool", "plan"]})
    agents = make_agents("sudoku", ["plan", "tool"])
    with pytest.raises(ValueError, match="must match turn_order"):
        asyncio.run(play_episode(env, agents, OraclePolicy(), 0))


def test_role_policy_and_random_policy_validation():
    with pytest.raises(ValueError, match="`malformed_prob`"):
        RandomPolicy(malformed_prob=2.0)
    env = make_env("sudoku", {"turn_order": ["tool", "plan"]})
    asyncio.run(env.reset(0))
    (tool,) = make_agents("sudoku", ["tool"])
    with pytest.raises(KeyError, match="no policy for role 'tool'"):
        RolePolicy({"plan": OraclePolicy()}).respond(tool, env)


def test_oracle_accepts_a_solving_proposal_and_spells_out_the_answer_otherwise():
    from pettingllms.scripted import _proposal_solves

    env = make_env("plan_path", {**CONFIGS["plan_path"], "turn_order": ["tool", "plan"], "max_turns": 1})
    tool, plan = make_agents("plan_path", ("tool", "plan"))
    oracle, random_tool = OraclePolicy(accept_proposals=True), RandomPolicy(seed=3)
    seen = set()
    for seed in range(40):
        asyncio.run(env.reset(seed))
        tool.update_from_env(0, env)
        tool.update_from_model(oracle.respond(tool, env) if seed % 2 else random_tool.respond(tool, env))
        asyncio.run(env.step_agent(tool))
        plan.update_from_env(0, env)
        response = oracle.respond(plan, env)
        solves = _proposal_solves(env)
        seen.add(solves)
        assert (response == "#### proposal") == solves
        plan.update_from_model(response)
        assert asyncio.run(env.step_agent(plan)).success  # either way the oracle's plan agent solves
    assert seen == {True, False}
