"""Checks every tool-and-plan puzzle passes the same way (EightQueens, Blocksworld): a tree rollout replays
candidate by candidate, and one AT-GRPO step moves the shared policy."""

from __future__ import annotations

import asyncio
import copy
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from pettingllms.execution import EngineConfig, MixturePolicy, RolloutEngine, Router, ScriptedBackend
from pettingllms.registry import make_agents, make_env
from pettingllms.scripted import OraclePolicy, RandomPolicy

ORDER = ("tool", "plan")


def check_tree_rollout_replays(env_name: str, env_config: Mapping[str, Any]) -> None:
    """A tree rollout of scripted tool / plan agents: each candidate, replayed on a copy of the state its group
    shares, earns the reward the engine recorded and leaves the state untouched; the selected candidate is the
    best of its group, and playing the selected ones alone reproduces each episode's outcome."""
    policies = {"tool": RandomPolicy(seed=1),
                "plan": MixturePolicy([OraclePolicy(), RandomPolicy(seed=2)], [0.3, 0.7])}
    env_config = {**env_config, "turn_order": list(ORDER), "max_turns": 3}
    router = Router({role: role for role in ORDER}, ScriptedBackend(policies))
    engine = RolloutEngine.from_registry(
        env_name, env_config, router, EngineConfig(num_generations=3, greedy_selection=True, seed=0)
    )
    batch = engine.rollout([0, 1, 2, 3], step=0)
    assert batch.mode == "tree" and batch.dropped_samples == 0
    groups = batch.groups()
    for pid in sorted({key.problem_id for key in groups}):
        env = make_env(env_name, env_config)
        agents = make_agents(env_name, ORDER)
        asyncio.run(env.reset(pid))
        for key in sorted((k for k in groups if k.problem_id == pid), key=lambda k: (k.turn, k.agent_index)):
            group = groups[key]
            assert all(s.prompt == group[0].prompt for s in group)
            before = env.snapshot()
            for sample in group:
                twin, agent = env.clone(), copy.deepcopy(agents[key.agent_index])
                agent.update_from_env(key.turn, twin)
                agent.update_from_model(sample.response)
                assert asyncio.run(twin.step_agent(agent)).reward == sample.reward
            assert env.snapshot() == before
            (chosen,) = [s for s in group if s.selected]
            assert chosen.reward == max(s.reward for s in group)
            agent = copy.deepcopy(agents[key.agent_index])
            agent.update_from_env(key.turn, env)
            agent.update_from_model(chosen.response)
            asyncio.run(env.step_agent(agent))
        outcome = next(o for o in batch.outcomes if o.problem_id == pid)
        assert env.done and outcome.success == env.success and outcome.task_reward == env.task_reward


def check_at_grpo_step_moves_the_shared_policy(env_name: str, env_config: Mapping[str, Any], model: str,
                                                output_dir: str) -> None:
    """One AT-GRPO step (L1) changes every shared parameter, with every group at a non-zero reward spread, and
    logs per-agent, per-turn metrics."""
    from pettingllms.config.rollout_section import RolloutConfig
    from pettingllms.trainer.at_grpo_config import ATGRPOConfig
    from tests.helpers.bonus_trainer import BonusTrainer

    config = ATGRPOConfig(problems_per_step=2, max_steps=1, learning_rate=1e-2, per_device_train_batch_size=8,
                          output_dir=output_dir, disable_tqdm=True, seed=1)
    rollout = RolloutConfig(num_generations=2, max_completion_length=8, transcripts_rate=0.0)
    trainer = BonusTrainer(config, rollout=rollout, model=model, env_name=env_name,  # L1: one shared policy
                           env_config={**env_config, "max_turns": 1})
    before = [p.detach().clone() for p in trainer.policy.trainable_parameters("shared")]
    (metrics,) = trainer.train()
    after = trainer.policy.trainable_parameters("shared")
    assert metrics["frac_reward_zero_std"] == 0.0 and metrics["policy/shared/optimizer_steps"] >= 1
    assert all(not torch.equal(a, b) for a, b in zip(before, after))
    assert {"agent/tool/turn_0/reward_mean", "agent/plan/turn_0/reward_mean"} <= set(metrics)


def check_any_text_is_rewarded_finitely(reset_env: Any, agent_cls: type, text: str, tool_cls: type,
                                        board: Callable[[Any], Any]) -> None:
    """``text`` as ``agent_cls``'s answer on a copy of ``reset_env``: an action or a parse error, never both;
    a finite local reward (the config's parse-error reward on a parse error), a task reward in [0, 1]; the tool
    agent leaves ``board(env)`` as it was."""
    env = reset_env.clone()
    agent = agent_cls()
    agent.update_from_env(0, env)
    agent.update_from_model(text)
    assert (agent.action is None) == (agent.parse_error is not None)
    asyncio.run(agent.step(env))
    assert math.isfinite(agent.local_reward) and 0.0 <= env.task_reward <= 1.0
    if agent.parse_error is not None:
        assert agent.local_reward == env.config.parse_error_reward and agent.failure == "parse_error"
    if agent_cls is tool_cls:
        assert board(env) == board(reset_env)
