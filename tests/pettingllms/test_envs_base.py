"""Base environment contract: config validation, turn order, reward mixing, step timeout, copies, failures."""

from __future__ import annotations

import asyncio
import copy
import math
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pettingllms.agents import (
    Agent,
    CodeRunner,
    ExecutionResult,
    FailureBudget,
    InfrastructureFailureRateExceeded,
    NotCopyableError,
    ParseError,
    StepTimeoutError,
    build_prompt,
    failure_rate,
)
from pettingllms.envs.base import BaseEnv, EnvConfig, EnvState, mix_reward
from pettingllms.envs.game import GameConfig, action_local_reward, level_reward

# ---- a minimal counting environment, written only against the base classes ---------------------------


@dataclass(kw_only=True)
class CounterState(EnvState):
    value: int = 0
    history: list[int] | None = None


class CounterEnv(BaseEnv[CounterState]):
    """Reach ``value == 3``; task reward ``value / 3``."""

    name = "counter"
    roles = ("adder", "doubler")

    def initial_state(self, seed: int) -> CounterState:
        return CounterState(seed=seed, history=[])

    def task_reward_of(self, state: CounterState) -> float:
        return state.value / 3

    def is_success(self, state: CounterState) -> bool:
        return state.value == 3

    def is_failed(self, state: CounterState) -> bool:
        return state.value > 3


class AddAgent(Agent):
    default_role = "adder"

    def __init__(self, *, role=None, delay: float = 0.0, local: float = 0.25) -> None:
        super().__init__(role=role)
        self.delay = delay
        self.local = local

    def update_from_env(self, turn_idx, env_data):
        self.prompt = build_prompt("add", f"value {env_data.state.value}", self.prompt_style)
        return self.prompt

    def parse(self, response: str) -> int:
        if not response.strip().isdigit():
            raise ParseError(f"not a number: {response!r}")
        return int(response)

    async def step(self, env_data, env_worker=None) -> None:
        env_data.state.history.append(self.action or 0)
        if self.delay:
            await asyncio.sleep(self.delay)
        env_data.state.value += self.action or 0
        self.local_reward = self.local


def test_env_config_validation_names_the_field():
    with pytest.raises(ValueError, match="`max_turns`"):
        EnvConfig(max_turns=0)
    with pytest.raises(ValueError, match="`turn_order`"):
        EnvConfig(turn_order=())
    with pytest.raises(ValueError, match="`turn_order`"):
        EnvConfig(turn_order="tool")
    with pytest.raises(ValueError, match="`step_timeout`"):
        EnvConfig(step_timeout=0)
    with pytest.raises(ValueError, match="`alpha`"):
        EnvConfig(alpha=float("nan"))
    with pytest.raises(ValueError, match=r"unknown EnvConfig field\(s\) \['max_turn'\]"):
        EnvConfig.from_dict({"max_turn": 3})
    cfg = EnvConfig.from_dict({"turn_order": ["a", "b"], "max_turns": 2})
    assert cfg.turn_order == ("a", "b") and cfg.max_turns == 2


@given(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6), st.floats(0, 10))
def test_mix_reward_is_alpha_global_plus_local(g, loc, alpha):
    assert mix_reward(g, loc, alpha) == alpha * g + loc


def test_mix_reward_rejects_non_finite_parts():
    with pytest.raises(ValueError, match="`local_reward`"):
        mix_reward(0.0, math.inf, 1.0)
    with pytest.raises(ValueError, match="`global_reward`"):
        mix_reward(math.nan, 0.0, 1.0)


def test_state_before_reset_is_an_error():
    with pytest.raises(RuntimeError, match="reset"):
        CounterEnv().state  # noqa: B018


def test_reset_rejects_bad_seed():
    with pytest.raises(ValueError, match="`seed`"):
        asyncio.run(CounterEnv().reset(-1))


def test_step_agent_scores_each_agent_on_the_state_after_its_own_step():
    env = CounterEnv({"turn_order": ["adder", "doubler"], "max_turns": 3, "alpha": 0.5})
    asyncio.run(env.reset(0))
    first, second = AddAgent(local=0.25), AddAgent(role="doubler", local=-0.5)
    first.update_from_env(0, env)
    first.update_from_model("1")
    r1 = asyncio.run(env.step_agent(first))
    # global part = task reward right after the first agent's step (value 1 -> 1/3)
    assert (r1.turn, r1.position, r1.global_reward, r1.local_reward) == (0, 0, 1 / 3, 0.25)
    assert r1.reward == pytest.approx(0.5 * (1 / 3) + 0.25) and not r1.done
    second.update_from_env(0, env)
    second.update_from_model("1")
    r2 = asyncio.run(env.step_agent(second))
    assert (r2.turn, r2.position, r2.global_reward) == (0, 1, 2 / 3)
    assert r2.reward == pytest.approx(0.5 * (2 / 3) - 0.5)
    assert env.state.turn == 1 and env.state.position == 0


def test_step_agent_rejects_the_agent_that_is_not_due():
    env = CounterEnv({"turn_order": ["adder", "doubler"]})
    asyncio.run(env.reset(0))
    agent = AddAgent(role="doubler")
    agent.update_from_model("1")
    with pytest.raises(ValueError, match="'doubler' is not due.*expects 'adder'"):
        asyncio.run(env.step_agent(agent))


def test_turn_budget_ends_the_episode_and_further_steps_are_errors():
    env = CounterEnv({"turn_order": ["adder"], "max_turns": 2})
    asyncio.run(env.reset(0))
    agent = AddAgent()
    for _ in range(2):
        agent.update_from_model("0")
        result = asyncio.run(env.step_agent(agent))
    assert result.done and not result.success and env.state.out_of_turns
    with pytest.raises(RuntimeError, match="episode is over"):
        asyncio.run(env.step_agent(agent))


def test_success_and_failure_end_the_episode():
    env = CounterEnv({"turn_order": ["adder"], "max_turns": 10})
    asyncio.run(env.reset(0))
    agent = AddAgent()
    agent.update_from_model("3")
    result = asyncio.run(env.step_agent(agent))
    assert result.done and result.success and agent.done and agent.success
    asyncio.run(env.reset(0))
    agent.update_from_model("5")
    result = asyncio.run(env.step_agent(agent))
    assert result.done and not result.success


def test_parse_error_is_recorded_never_raised():
    agent = AddAgent()
    assert agent.update_from_model("three") is None
    assert agent.action is None and "not a number" in agent.parse_error
    agent.update_from_model("2")
    assert agent.action == 2 and agent.parse_error is None
    with pytest.raises(TypeError, match="`response`"):
        agent.update_from_model(None)


def test_step_timeout_rolls_back_and_raises_an_infrastructure_error():
    env = CounterEnv({"turn_order": ["adder"], "step_timeout": 0.05})
    asyncio.run(env.reset(0))
    agent = AddAgent(delay=1.0)
    agent.update_from_model("2")
    with pytest.raises(StepTimeoutError, match="step_timeout=0.05"):
        asyncio.run(env.step_agent(agent))
    # the half-done step (history appended before the sleep) was rolled back
    assert env.state.history == [] and env.state.value == 0 and env.state.position == 0


def test_snapshot_restore_and_clone_share_no_mutable_state():
    env = CounterEnv({"turn_order": ["adder"], "max_turns": 5})
    asyncio.run(env.reset(4))
    snap = env.snapshot()
    clone = env.clone()
    assert clone.state is not env.state and clone.state.history is not env.state.history
    agent = AddAgent()
    agent.update_from_model("1")
    asyncio.run(clone.step_agent(agent))
    assert env.state.value == 0 and env.state.history == [] and clone.state.history == [1]
    asyncio.run(env.step_agent(agent))
    env.restore(snap)
    env.restore(snap)  # a snapshot can be restored any number of times
    assert env.state.value == 0 and env.state.history == [] and env.state is not snap
    assert env.state.history is not snap.history


def test_non_copyable_env_says_so():
    class Remote(CounterEnv):
        copyable = False

    env = Remote()
    asyncio.run(env.reset(0))
    for call in (env.snapshot, env.clone, lambda: env.restore(None)):
        with pytest.raises(NotCopyableError, match="independently"):
            call()


def test_execution_result_validates_status_and_runner_protocol():
    assert ExecutionResult("ok", "out").ok
    with pytest.raises(ValueError, match="`status`"):
        ExecutionResult("crashed")
    with pytest.raises(ValueError, match="`duration`"):
        ExecutionResult("ok", duration=-1.0)

    class Runner:
        async def run(self, code, stdin="", timeout=None):
            return ExecutionResult("ok")

    assert isinstance(Runner(), CodeRunner) and not isinstance(object(), CodeRunner)


def test_failure_budget_stops_past_the_rate():
    assert failure_rate(0, 0) == 0.0 and failure_rate(1, 4) == 0.25
    with pytest.raises(ValueError, match="failed <= total"):
        failure_rate(3, 2)
    budget = FailureBudget(max_rate=0.2, min_samples=5)
    for _ in range(4):
        budget.record(infra_failed=True)  # below min_samples: no stop yet
    with pytest.raises(InfrastructureFailureRateExceeded, match="5 of 5"):
        budget.record(infra_failed=True)
    ok = FailureBudget(max_rate=0.5, min_samples=2)
    for i in range(10):
        ok.record(infra_failed=i % 3 == 0, model_failure="parse_error" if i % 2 else None)
    assert ok.rate == pytest.approx(0.4) and ok.model_failures == {"parse_error": 5}
    with pytest.raises(ValueError, match="`model_failure`"):
        ok.record(model_failure="oops")
    with pytest.raises(ValueError, match="`max_rate`"):
        FailureBudget(max_rate=1.5)


def test_prompt_styles():
    assert build_prompt("s", "u", "chat") == [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert build_prompt("s", "u", "text") == "s\n\nu\n"
    with pytest.raises(ValueError, match="`prompt_style`"):
        Agent.__init__(AddAgent.__new__(AddAgent), prompt_style="html")
    with pytest.raises(ValueError, match="`role`"):
        Agent.__init__(AddAgent.__new__(AddAgent), role="")


def test_agents_deep_copy():
    agent = AddAgent()
    agent.update_from_model("2")
    twin = copy.deepcopy(agent)
    twin.update_from_model("x")
    assert agent.action == 2 and twin.action is None


FINITE = st.floats(-1e6, 1e6)


@given(st.booleans(), st.floats(allow_nan=False))
def test_level_reward_is_one_when_solved_else_half_the_clipped_progress(solved, prog):
    value = level_reward(solved, prog)
    assert value == (1.0 if solved else 0.5 * min(1.0, max(0.0, prog)))
    assert 0.0 <= value <= 1.0 and (solved or value <= 0.5)


@given(FINITE, FINITE, st.integers(0, 1000), st.floats(0, 10))
def test_action_local_reward_is_the_increment_minus_the_penalty(before, after, invalid, penalty):
    assert action_local_reward(before, after, invalid, penalty) == (after - before) - penalty * invalid


def test_action_local_reward_and_game_config_reject_bad_input():
    with pytest.raises(ValueError, match="`invalid`"):
        action_local_reward(0.0, 1.0, -1, 0.1)
    with pytest.raises(ValueError, match="`parse_error_reward`"):
        GameConfig(parse_error_reward=float("-inf"))
    with pytest.raises(ValueError, match="`invalid_action_penalty`"):
        GameConfig(invalid_action_penalty=-0.1)
