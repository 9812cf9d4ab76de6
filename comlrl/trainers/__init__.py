"""comlrl trainers: preference learning (MADPO, MARLHF), the MAGRPO family and actor-critic.

As in the public library, the preference trainers (``MADPOConfig``, ``MADPOTrainer``, ``MARLHFConfig``,
``MARLHFTrainer``, ``JointRewardModel``), the MAGRPO family (MAGRPO, MAREINFORCE, MAReMax, MARLOO) and the
actor-critic trainers (IAC, MAAC, ``ActorCriticTrainerBase``) are re-exported here; they load on first
access, so ``import comlrl.trainers`` stays light.
"""

from comlrl.lazy_exports import lazy_getattr

_LAZY = {
    "MADPOConfig": "comlrl.trainers.preference",
    "MADPOTrainer": "comlrl.trainers.preference",
    "MARLHFConfig": "comlrl.trainers.preference",
    "MARLHFTrainer": "comlrl.trainers.preference",
    "JointRewardModel": "comlrl.trainers.preference",
    "MAGRPOConfig": "comlrl.trainers.reinforce",
    "MAGRPOTrainer": "comlrl.trainers.reinforce",
    "MAREINFORCEConfig": "comlrl.trainers.reinforce",
    "MAREINFORCETrainer": "comlrl.trainers.reinforce",
    "MAReMaxConfig": "comlrl.trainers.reinforce",
    "MAReMaxTrainer": "comlrl.trainers.reinforce",
    "MARLOOConfig": "comlrl.trainers.reinforce",
    "MARLOOTrainer": "comlrl.trainers.reinforce",
    "ActorCriticTrainerBase": "comlrl.trainers.actor_critic",
    "IACConfig": "comlrl.trainers.actor_critic",
    "IACTrainer": "comlrl.trainers.actor_critic",
    "MAACConfig": "comlrl.trainers.actor_critic",
    "MAACTrainer": "comlrl.trainers.actor_critic",
}

__all__ = list(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY)
