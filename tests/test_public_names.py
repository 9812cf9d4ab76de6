"""Every name a package lists in ``__all__`` resolves, lazy exports and re-export modules included (a name
that moved must still import from where users found it)."""

from __future__ import annotations

import importlib

import pytest

MODULES = (
    "comlrl.rl",
    "comlrl.rollout",
    "comlrl.rollout.vllm",
    "comlrl.trainers",
    "comlrl.trainers.base",
    "comlrl.trainers.policy_learning",
    "comlrl.trainers.reference_kl",
    "comlrl.trainers.preference",
    "comlrl.trainers.preference.config",
    "comlrl.trainers.preference.iterative",
    "comlrl.trainers.preference.oracle",
    "comlrl.trainers.preference.comparators",
    "comlrl.trainers.preference.comparators.centralized",
    "comlrl.trainers.reinforce",
    "comlrl.trainers.actor_critic",
    "comlrl.trainers.actor_critic.critics",
    "pettingllms.trainer",
    "pettingllms.workers",
    "pettingllms.trainer.at_grpo",
    "pettingllms.pipeline",
    "pettingllms.config.contract",
    "pettingllms.stages.context",
    "pettingllms.config.instances",
    "pettingllms.stages.preference",
    "pettingllms.config.benchmarks",
    "pettingllms.stages.contamination",
    "pettingllms.stages.eval",
    "pettingllms.envs.contamination",
    "pettingllms.envs.sources",
    "pettingllms.cli",
    "pettingllms.envs.code",
    "pettingllms.envs.code.parsing",
    "pettingllms.envs.code.rewards",
    "pettingllms.envs.math",
    "pettingllms.envs.math.agents",
    "pettingllms.envs.math.answers",
    "pettingllms.envs.math.arith",
    "pettingllms.envs.math.calculator",
    "pettingllms.envs.math.data",
    "pettingllms.envs.math.env",
    "pettingllms.envs.math.rewards",
    "pettingllms.envs.math.scripted",
    "pettingllms.envs.math.verify",
    "pettingllms.scripts.dataprocess",
)


@pytest.mark.parametrize("module_name", MODULES)
def test_every_listed_name_resolves(module_name):
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    assert names, f"{module_name} lists no __all__"
    missing = [name for name in names if getattr(module, name, None) is None]
    assert not missing, f"{module_name}: {missing}"
