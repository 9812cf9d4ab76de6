"""The MAGRPO family on the task reward: MAGRPO and the public library's variants MAREINFORCE (no
baseline), MARLOO (leave-one-out), MAReMax (group maximum) and CentralizedMAGRPO (one actor writes every
role); also MARLHF's RL stage.

``MAGRPOConfig`` imports at once; the trainers, and the variants' configs (each module holds its config and
trainer), load on first access.
"""

from comlrl.lazy_exports import lazy_getattr
from comlrl.trainers.reinforce.config import MAGRPOConfig, OnlineRLConfig

_LAZY = {
    "MAGRPOTrainer": "comlrl.trainers.reinforce.magrpo",
    "CentralizedMAGRPOConfig": "comlrl.trainers.reinforce.centralized_magrpo",
    "CentralizedMAGRPOTrainer": "comlrl.trainers.reinforce.centralized_magrpo",
    "MAREINFORCEConfig": "comlrl.trainers.reinforce.mareinforce",
    "MAREINFORCETrainer": "comlrl.trainers.reinforce.mareinforce",
    "MAReMaxConfig": "comlrl.trainers.reinforce.maremax",
    "MAReMaxTrainer": "comlrl.trainers.reinforce.maremax",
    "MARLOOConfig": "comlrl.trainers.reinforce.marloo",
    "MARLOOTrainer": "comlrl.trainers.reinforce.marloo",
}

__all__ = [
    "MAGRPOConfig",
    "MAGRPOTrainer",
    "CentralizedMAGRPOConfig",
    "CentralizedMAGRPOTrainer",
    "MAREINFORCEConfig",
    "MAREINFORCETrainer",
    "MAReMaxConfig",
    "MAReMaxTrainer",
    "MARLOOConfig",
    "MARLOOTrainer",
    "OnlineRLConfig",
]


__getattr__ = lazy_getattr(__name__, _LAZY)
