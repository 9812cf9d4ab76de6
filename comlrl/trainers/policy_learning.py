"""Re-export: the RL stage lives in :mod:`comlrl.trainers.online_rl.policy_learning`, the online RL trainer base
in :mod:`comlrl.trainers.online_rl.trainer` and the critic sources in :mod:`comlrl.trainers.online_rl.critics`."""

from comlrl.trainers.online_rl.critics import resolve_critic_sources
from comlrl.trainers.online_rl.policy_learning import (
    MAGRPO_FAMILY,
    AgentLoss,
    PolicyLearner,
    RewardFn,
    task_reward_fn,
)
from comlrl.trainers.online_rl.trainer import OnlineRLTrainer

__all__ = [
    "AgentLoss",
    "MAGRPO_FAMILY",
    "OnlineRLTrainer",
    "PolicyLearner",
    "RewardFn",
    "resolve_critic_sources",
    "task_reward_fn",
]
