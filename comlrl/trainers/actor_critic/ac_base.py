"""The public library's import path ``comlrl.trainers.actor_critic.ac_base``: ``ActorCriticTrainerBase``,
the base of IAC and MAAC with the public constructor (ours:
:class:`comlrl.trainers.actor_critic.iac.ActorCriticTrainer`). For users' scripts only: no comlrl module
imports from here.
"""

from comlrl.trainers.actor_critic.iac import ActorCriticTrainer as ActorCriticTrainerBase

__all__ = ["ActorCriticTrainerBase"]
