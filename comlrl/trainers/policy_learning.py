"""Re-export: the RL stage lives in :mod:`comlrl.trainers.core.policy_learning`, the online RL trainer base
in :mod:`comlrl.trainers.core.online_rl` and the critic sources in :mod:`comlrl.trainers.core.critics`."""

from comlrl.trainers.core.critics import resolve_critic_sources
from comlrl.trainers.core.online_rl import OnlineRLTrainer
from comlrl.trainers.core.policy_learning import (
    MAGRPO_FAMILY,
    AgentLoss,
    PolicyLearner,
    RewardFn,
    task_reward_fn,
)

__all__ = [
    "AgentLoss",
    "MAGRPO_FAMILY",
    "OnlineRLTrainer",
    "PolicyLearner",
    "RewardFn",
    "resolve_critic_sources",
    "task_reward_fn",
]
