"""IAC: Independent Actor-Critic on the task reward (and the constructor shared with MAAC).

The update is :class:`~comlrl.trainers.online_rl.policy_learning.PolicyLearner`'s: per item every agent samples
``num_generations`` responses; agent i's critic (a separate model with a value head, or a value head on
agent i's own model with ``use_separate_critic=False``) reads agent i's prompt (and response, for
``critic_type="q"``); the advantage ``R − V(h_i)`` (or ``Q − mean Q``) weights agent i's log-probs, and the
critic is fit to ``R``. Critics and their optimizers live as long as the trainer and are checkpointed.
Multi-turn (``num_turns > 1`` with an ``external_transition``, ``num_generations == 1``): one trajectory per
item; ``R`` becomes the one-step target ``r_t + discount · V(h_{t+1})`` (values at collection) and the
advantage ``target − V(h_t)`` (:mod:`comlrl.trainers.online_rl.multi_turn`).

Non-finite numbers (both actor-critic trainers): an item with a NaN / inf reward is dropped
(``nonfinite_rewards_dropped``); a non-finite loss, log-prob, critic value or value loss skips the update of
every agent and critic (``nonfinite_losses_skipped``); ``max_nonfinite_losses_in_a_row`` in a row stop the
run (:mod:`comlrl.trainers.core.nonfinite`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from comlrl.trainers.actor_critic.config import IACConfig
from comlrl.trainers.online_rl.critics import check_critic_sources
from comlrl.trainers.online_rl.trainer import OnlineRLTrainer

__all__ = ["ActorCriticTrainer", "IACTrainer"]


class ActorCriticTrainer(OnlineRLTrainer):
    """The public actor-critic constructor (keywords in the public order): ``agent_model``,
    ``critic_model``, ``tokenizer``, ``reward_func``, ``reward_processor``, ``formatters``, ``args``,
    ``train_dataset``, ``eval_dataset``, ``model_config``, ``wandb_config``, ``metrics_callback``,
    ``external_transition``, ``agents``, ``critics``. The agent count is ``args.num_agents`` (or
    ``len(agents)``). Ours: ``eval_logger``, ``eval_aggregator``, ``policy``, ``lora_config``.

    Critic sources: ``critics`` (one per critic), else ``critic_model`` for every critic, else
    ``args.critic_model_name``, else the agents' model name (an error asks for one of them when the agents
    are unnamed model objects). With ``report_to`` holding ``"wandb"`` (a ``wandb_config`` adds it) the W&B
    run opens in the constructor, as in the public library; the other trainers open it at the first log.
    """

    def __init__(
        self,
        agent_model: Any = None,
        critic_model: Any = None,
        tokenizer: Any = None,
        reward_func: Callable[..., Any] | None = None,
        reward_processor: Callable[[float], Any] | None = None,
        formatters: Any = None,
        args: Any = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        model_config: Mapping[str, Any] | None = None,
        wandb_config: Mapping[str, Any] | None = None,
        metrics_callback: Callable[..., Any] | None = None,
        external_transition: Any = None,
        agents: Sequence[Any] | None = None,
        critics: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        args = args if args is not None else self.config_class()
        num_agents = getattr(args, "num_agents", 2)
        # The critic keywords are checked before the agents load (the public library's order).
        check_critic_sources(args, critic_model, critics, num_agents)
        super().__init__(
            agent_model=agent_model,
            agents=agents,
            num_agents=num_agents,
            tokenizer=tokenizer,
            model_config=model_config,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            reward_func=reward_func,
            reward_processor=reward_processor,
            formatters=formatters,
            external_transition=external_transition,
            wandb_config=wandb_config,
            args=args,
            critic_model=critic_model,
            critics=critics,
            metrics_callback=metrics_callback,
            **kwargs,
        )
        if "wandb" in self.args.report_to:
            self.metrics_logger  # noqa: B018 - opens the W&B run now, as the public actor-critic constructors do


class IACTrainer(ActorCriticTrainer):
    """Independent Actor-Critic: one critic per agent (see the module docstring). Takes the public
    keywords of :class:`ActorCriticTrainer` and an :class:`IACConfig`.

    >>> trainer = IACTrainer(agent_model="test-tiny", reward_func=reward, train_dataset=items,
    ...                      args=IACConfig(num_agents=2, critic_model_name="test-tiny"))
    >>> trainer.train()
    """

    config_class = IACConfig
