"""Single-turn actor-critic trainers on the task reward: IAC (a critic per agent) and MAAC (one centralized
critic); also MARLHF's ``rl_algorithm="iac"`` / ``"maac"`` backends. Trainers load on first access.

``ActorCriticTrainerBase`` is the public library's name of the base both trainers share (ours:
:class:`~comlrl.trainers.actor_critic.iac.ActorCriticTrainer`, the public constructor).
"""

import importlib
from typing import Any

from comlrl.trainers.actor_critic.config import ActorCriticConfig, IACConfig, MAACConfig

# name -> (module, the object's name there)
_LAZY = {
    "ActorCriticTrainerBase": ("comlrl.trainers.actor_critic.iac", "ActorCriticTrainer"),
    "IACTrainer": ("comlrl.trainers.actor_critic.iac", "IACTrainer"),
    "MAACTrainer": ("comlrl.trainers.actor_critic.maac", "MAACTrainer"),
    "ValueModel": ("comlrl.trainers.online_rl.critics", "ValueModel"),
}

__all__ = [
    "ActorCriticConfig",
    "ActorCriticTrainerBase",
    "IACConfig",
    "IACTrainer",
    "MAACConfig",
    "MAACTrainer",
    "ValueModel",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'comlrl.trainers.actor_critic' has no attribute {name!r}")
