"""Independent sampling (GRPO baseline), the non-copyable fallback, evaluation, failures and transcripts."""

from __future__ import annotations

import ast
import asyncio
import copy
import json
import logging
import re
import time

import pytest

from pettingllms.agents import ExecutionResult, InfrastructureFailureRateExceeded
from pettingllms.envs.plan_path.env import PlanPathEnv
from pettingllms.execution import (
    TRANSCRIPT_FILE,
    EngineConfig,
    MixturePolicy,
    RolloutEngine,
    Router,
    ScriptedBackend,
    episode_sampled,
    member_rewards,
)
from pettingllms.registry import make_agents, make_env
from pettingllms.scripted import OraclePolicy, RandomPolicy

ORDER = ("tool", "plan")
PLAN_PATH = {"rows": 5, "cols": 5, "wall_density": 0.2, "turn_order": list(ORDER), "max_turns": 3}


def policies():
    return {
        "tool": RandomPolicy(seed=1),
        "plan": MixturePolicy([OraclePolicy(), RandomPolicy(seed=2)], [0.2, 0.8]),
    }


def engine_for(config: EngineConfig, env_name="plan_path", env_config=PLAN_PATH, scripted=None, **kwargs):
    router = Router({"tool": "tool", "plan": "plan"}, ScriptedBackend(scripted or policies()))
    return RolloutEngine.from_registry(env_name, env_config, router, config, **kwargs)


def replay_trajectory(samples, env_config=PLAN_PATH):
    """Replay one trajectory's responses sequentially; returns the final env."""
    env = make_env("plan_path", env_config)
    agents = make_agents("plan_path", ORDER)
    asyncio.run(env.reset(samples[0].problem_id))
    for sample in sorted(samples, key=lambda s: (s.turn, s.agent_index)):
        agent = agents[sample.agent_index]
        assert agent.update_from_env(sample.turn, env) == sample.prompt
        agent.update_from_model(sample.response)
        result = asyncio.run(env.step_agent(agent))
        assert (result.reward, result.done, result.success) == (sample.reward, sample.done, sample.success)
    assert env.done
    return env


@pytest.mark.parametrize("mode", ["final", "sum"])
def test_independent_trajectories_are_grouped_per_problem_with_their_return(mode):
    k = 4
    engine = engine_for(EngineConfig(num_generations=k, sampling_mode="independent", trajectory_return=mode))
    batch = engine.rollout([3, 8, 13], step=1)
    assert batch.mode == "independent" and batch.dropped_samples == 0
    groups = batch.groups()
    assert [tuple(key) for key in groups] == [(3, None, None), (8, None, None), (13, None, None)]
    rewards = member_rewards(batch.samples)
    for key, group in groups.items():
        assert sorted(rewards[key]) == list(range(k))  # K trajectories, one return each
        assert all(s.selected for s in group)
        for trajectory in range(k):
            samples = [s for s in group if s.candidate == trajectory]
            final = replay_trajectory(samples)
            expected = final.task_reward if mode == "final" else sum(s.reward for s in samples)
            assert rewards[key][trajectory] == pytest.approx(expected)
            assert all(s.trajectory_return == s.group_reward == rewards[key][trajectory] for s in samples)
    # Trajectories of one problem differ (independent seeds), and the outcomes count each of them.
    assert len({tuple(s.response for s in group if s.candidate == t) for t in range(k)}) > 1
    assert len(batch.outcomes) == 3 * k


class UncopyablePlanPath(PlanPathEnv):
    copyable = False


def test_uncopyable_environment_falls_back_to_independent_sampling_with_a_notice(caplog):
    config = UncopyablePlanPath.config_class.from_dict(PLAN_PATH)
    router = Router({"tool": "tool", "plan": "plan"}, ScriptedBackend(policies()))
    engine = RolloutEngine(
        lambda: UncopyablePlanPath(config),
        make_agents("plan_path", ORDER),
        router,
        EngineConfig(num_generations=3, sampling_mode="tree"),
    )
    with caplog.at_level(logging.WARNING, logger="pettingllms.execution"):
        batch = engine.rollout([0, 1], step=0)
    assert batch.mode == "independent"
    assert batch.notices and "cannot be copied" in batch.notices[0]
    assert any("falls back to independent sampling" in r.getMessage() for r in caplog.records)
    assert {tuple(k) for k in batch.groups()} == {(0, None, None), (1, None, None)}


def test_evaluation_averages_success_over_k_samples_per_problem():
    oracle = engine_for(EngineConfig(), scripted={"tool": OraclePolicy(), "plan": OraclePolicy()})
    result = oracle.evaluate(list(range(100, 106)), num_samples=3, temperature=0.0)
    assert result.success_rate == 1.0 and result.num_trajectories == 18 and result.dropped == 0
    assert result.per_problem == {p: 1.0 for p in range(100, 106)}

    mixed = engine_for(EngineConfig(), scripted={"tool": RandomPolicy(seed=0), "plan": RandomPolicy(seed=0)})
    result = mixed.evaluate(list(range(100, 110)), num_samples=4, temperature=1.0)
    successes = {p: [o.success for o in result.outcomes if o.problem_id == p] for p in range(100, 110)}
    assert result.per_problem == {p: sum(v) / 4 for p, v in successes.items()}
    assert result.success_rate == pytest.approx(sum(map(sum, successes.values())) / 40)
    assert result.success_rate < 1.0
    again = engine_for(EngineConfig(), scripted={"tool": RandomPolicy(seed=0), "plan": RandomPolicy(seed=0)})
    assert (
        again.evaluate(list(range(100, 110)), num_samples=4, temperature=1.0).per_problem
        == result.per_problem
    )
    with pytest.raises(ValueError, match="`num_samples` must be an integer >= 1"):
        mixed.evaluate([1], num_samples=0)


# ---- infrastructure failures -------------------------------------------------------------------


class FlakyWorker:
    """An env worker whose "process" crashes when the code says so; otherwise prints the literal."""

    async def run(self, code, stdin="", timeout=None):
        if "crash" in code:
            raise ConnectionError("worker process died")
        match = re.search(r"print\((.*)\)", code)
        return ExecutionResult("ok", stdout=ast.literal_eval(match.group(1)) + "\n")


class CrashPolicy:
    def respond(self, agent, env):
        return "```python\nprint('crash')\n```"


def python_tool_engine(config, crash_weight):
    tool = MixturePolicy([OraclePolicy(), CrashPolicy()], [1 - crash_weight, crash_weight])
    return engine_for(
        config,
        scripted={"tool": tool, "plan": RandomPolicy(seed=3)},
        agent_options={"tool": {"tools": ["python"]}},
        env_worker=FlakyWorker(),
    )


class SlowWorker(FlakyWorker):
    """Takes 50 ms per run and records how many runs overlap and when each started and ended."""

    def __init__(self):
        self.running = 0
        self.peak = 0
        self.intervals = []

    async def run(self, code, stdin="", timeout=None):
        self.running += 1
        self.peak = max(self.peak, self.running)
        start = time.perf_counter()
        try:
            await asyncio.sleep(0.05)
            return await super().run(code, stdin, timeout)
        finally:
            self.running -= 1
            self.intervals.append((start, time.perf_counter()))


def test_environment_steps_of_a_decision_point_run_concurrently():
    worker = SlowWorker()
    scripted = {"tool": OraclePolicy(), "plan": OraclePolicy()}
    engine = engine_for(
        EngineConfig(num_generations=4),
        scripted=scripted,
        agent_options={"tool": {"tools": ["python"]}},
        env_worker=worker,
    )
    batch = engine.rollout(list(range(3)), step=0)
    assert worker.peak == 12  # 3 problems x 4 copies of the tool step at once
    # Every run started before any ended: one shared wait, not twelve in a row. (Ordering, not wall time:
    # a loaded CI machine can stall the event loop, but it cannot reorder these.)
    assert len(worker.intervals) == 12
    assert max(start for start, _ in worker.intervals) < min(end for _, end in worker.intervals)
    assert batch.timings["env_s"] >= 0.05  # the engine's env clock covers the shared wait
    assert all(s.success for s in batch.samples if s.role == "plan")


def test_tree_drops_crashed_candidates_counts_them_and_keeps_the_rest(caplog):
    engine = python_tool_engine(EngineConfig(num_generations=4, max_infra_failure_rate=0.5), crash_weight=0.3)
    with caplog.at_level(logging.WARNING, logger="pettingllms.execution"):
        batch = engine.rollout(list(range(6)), step=0)
    tool_groups = [g for key, g in batch.groups().items() if key.agent_index == 0]
    missing = sum(4 - len(g) for g in tool_groups)
    assert missing > 0 and batch.dropped_samples == missing == batch.failures["infrastructure"]
    assert sum("infrastructure failure" in r.getMessage() for r in caplog.records) == missing
    for group in tool_groups:  # survivors are oracle calls: a proposal, no failure label
        assert all(s.failure is None and "crash" not in s.response for s in group)
    assert engine.budget.infra_failed == missing
    assert engine.budget.attempted == len(batch.samples) + missing
    restored = python_tool_engine(EngineConfig(num_generations=4), crash_weight=0.3)
    restored.load_state_dict(engine.state_dict())
    assert restored.state_dict() == engine.state_dict()
    assert (restored.budget.attempted, restored.budget.infra_failed) == (engine.budget.attempted, missing)


def test_independent_mode_drops_the_whole_trajectory_of_a_crash():
    engine = python_tool_engine(
        EngineConfig(num_generations=4, sampling_mode="independent", max_infra_failure_rate=0.6),
        crash_weight=0.3,
    )
    batch = engine.rollout(list(range(6)), step=0)
    dropped = [o for o in batch.outcomes if o.dropped]
    assert dropped
    for outcome in dropped:
        assert not [
            s
            for s in batch.samples
            if (s.problem_id, s.candidate) == (outcome.problem_id, outcome.trajectory)
        ]
    assert batch.dropped_samples >= len(dropped)
    assert len(batch.outcomes) == 24


def test_failure_budget_stops_the_run_past_the_configured_rate():
    engine = python_tool_engine(
        EngineConfig(num_generations=4, max_infra_failure_rate=0.05, min_samples_for_failure_rate=8),
        crash_weight=0.5,
    )
    with pytest.raises(InfrastructureFailureRateExceeded, match="max_rate 0.05"):
        engine.rollout(list(range(6)), step=0)


def test_model_failures_are_rewarded_samples_and_counted():
    scripted = {
        "tool": RandomPolicy(seed=5, malformed_prob=0.5),
        "plan": RandomPolicy(seed=6, malformed_prob=0.5),
    }
    engine = engine_for(EngineConfig(num_generations=3), scripted=scripted)
    batch = engine.rollout(list(range(5)), step=0)
    parse_errors = [s for s in batch.samples if s.parse_error is not None]
    assert parse_errors and batch.dropped_samples == 0
    assert batch.failures["parse_error"] == len(parse_errors)
    assert all(s.failure == "parse_error" and s.local_reward == -1.0 for s in parse_errors)
    assert engine.budget.model_failures["parse_error"] == len(parse_errors)


# ---- transcripts -------------------------------------------------------------------------------


def test_transcripts_write_seeded_episodes_and_feed_the_logger_hook(tmp_path):
    received = []
    config = EngineConfig(num_generations=3, transcript_rate=0.5, output_dir=str(tmp_path), seed=9)
    engine = engine_for(config, on_transcripts=received.append)
    first = engine.rollout(list(range(10)), step=0)
    engine.rollout(list(range(10)), step=1)
    written = [json.loads(line) for line in (tmp_path / TRANSCRIPT_FILE).read_text().splitlines()]
    assert received[0] == first.transcripts and written == received[0] + received[1]
    expected = {p for p in range(10) if episode_sampled(9, 0, p, 0.5)}
    assert 0 < len(expected) < 10
    assert {r["problem_id"] for r in first.transcripts} == expected
    assert len(first.transcripts) == sum(s.problem_id in expected for s in first.samples)
    record = first.transcripts[0]
    for name in (
        "prompt",
        "response",
        "action",
        "parse_error",
        "feedback",
        "local_reward",
        "global_reward",
        "reward",
        "selected",
        "turn",
        "role",
        "candidate",
    ):
        assert name in record
    assert record["feedback"]  # the tool output / effect of the step
    # Rerun with the same seed: the same episodes, the same lines.
    other = engine_for(
        EngineConfig(num_generations=3, transcript_rate=0.5, output_dir=str(tmp_path / "b"), seed=9)
    )
    assert other.rollout(list(range(10)), step=0).transcripts == first.transcripts
    engine.transcripts.truncate_after(0)
    assert engine.transcripts.read() == first.transcripts
    with pytest.raises(ValueError, match="`output_dir` must be set"):
        EngineConfig(transcript_rate=0.1)


def test_engine_config_rejects_bad_fields_by_name():
    with pytest.raises(ValueError, match="`num_generations` must be an integer >= 1, got 0"):
        EngineConfig(num_generations=0)
    with pytest.raises(ValueError, match="`sampling_mode` must be one of"):
        EngineConfig(sampling_mode="beam")
    with pytest.raises(ValueError, match=r"unknown EngineConfig field\(s\) \['widht'\]"):
        EngineConfig.from_dict({"widht": 3})
    engine = engine_for(EngineConfig())
    with pytest.raises(ValueError, match="must be distinct"):
        engine.rollout([1, 1])
    agents = copy.deepcopy(make_agents("plan_path", ("plan", "tool")))
    wrong = RolloutEngine(
        lambda: make_env("plan_path", PLAN_PATH),
        agents,
        Router({"tool": "tool", "plan": "plan"}, ScriptedBackend(policies())),
    )
    with pytest.raises(ValueError, match="must match the environment's turn_order"):
        wrong.rollout([0])
