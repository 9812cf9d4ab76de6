"""Single-turn actor-critic trainers on the task reward: IAC (a critic per agent) and MAAC (one centralized
critic); also MARLHF's ``rl_algorithm="iac"`` / ``"maac"`` backends. Trainers load on first access."""

import importlib
from typing import Any

from comlrl.trainers.actor_critic.config import ActorCriticConfig, IACConfig, MAACConfig

_LAZY = {
    "IACTrainer": "comlrl.trainers.actor_critic.iac",
    "MAACTrainer": "comlrl.trainers.actor_critic.maac",
    "ValueModel": "comlrl.trainers.core.critics",
}

__all__ = ["ActorCriticConfig", "IACConfig", "IACTrainer", "MAACConfig", "MAACTrainer", "ValueModel"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'comlrl.trainers.actor_critic' has no attribute {name!r}")
