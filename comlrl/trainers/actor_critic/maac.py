"""MAAC: Multi-Agent Actor-Critic with one centralized critic, on the task reward (single- or multi-turn, as
IAC: :mod:`comlrl.trainers.actor_critic.iac`).

The update is :class:`~comlrl.trainers.online_rl.policy_learning.PolicyLearner`'s: one critic reads the joint text
(``[Agent i] prompt`` blocks; for ``critic_type="q"`` also the ``[Joint Action]``) and its advantage
``R − V(h)`` (or ``Q − mean Q``) weights every agent's log-probs; the critic is fit to the joint reward
``R``. The critic and its optimizer live as long as the trainer and are checkpointed.
"""

from __future__ import annotations

from typing import Any

from comlrl.trainers.actor_critic.config import MAACConfig
from comlrl.trainers.actor_critic.iac import ActorCriticTrainer

__all__ = ["MAACTrainer"]


class MAACTrainer(ActorCriticTrainer):
    """Multi-Agent Actor-Critic with a shared critic. Takes the public keywords of
    :class:`~comlrl.trainers.actor_critic.iac.ActorCriticTrainer` (``model=`` is accepted as an alias of
    ``agent_model``, as older public versions named it; ``critics`` holds one source) and a
    :class:`MAACConfig`."""

    config_class = MAACConfig

    def __init__(self, *args: Any, model: Any = None, **kwargs: Any) -> None:
        if model is not None:
            if kwargs.get("agent_model") is not None or (args and args[0] is not None):
                raise ValueError("give either `model` or `agent_model` (the same keyword), not both")
            kwargs["agent_model"] = model
        super().__init__(*args, **kwargs)
