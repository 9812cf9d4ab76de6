"""MAGRPO family trainer: multi-agent REINFORCE with a group baseline, on the task reward.

The update is :class:`~comlrl.trainers.online_rl.policy_learning.PolicyLearner`'s (the same code MARLHF runs on its
learned reward): per item every agent samples ``num_generations`` responses (one generate call per rollout
buffer), the task reward scores the joint responses, advantages come from
:func:`comlrl.rl.compute_advantages` with ``advantage_mode`` (mean / raw / rloo / max), and each agent
minimises ``policy_gradient_loss`` over its own sampled tokens (padding masked). With
``advantage_normalization=True`` (the public default) the four baselines give identical advantages.

Multi-turn (``num_turns > 1``, the public default 2, with an ``external_transition``): each item's rollout tree
(:mod:`comlrl.trainers.online_rl.multi_turn`): every node is a group whose returns are its rewards plus the
discounted mean return of its children; the update goes turn by turn over the buffer's nodes.

An item with a NaN / inf reward is dropped with its group (``nonfinite_rewards_dropped``); a non-finite loss
or log-prob skips the update (``nonfinite_losses_skipped``); ``max_nonfinite_losses_in_a_row`` in a row stop
the run (:mod:`comlrl.trainers.core.nonfinite`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from comlrl.trainers.online_rl.trainer import OnlineRLTrainer
from comlrl.trainers.reinforce.config import MAGRPOConfig

__all__ = ["MAGRPOTrainer"]


class MAGRPOTrainer(OnlineRLTrainer):
    """Multi-Agent Group Relative Policy Optimization (and MAREINFORCE / MARLOO / MAReMax by
    ``advantage_mode``), single- or multi-turn.

    Takes the public CoMLRL keywords in their order (``agent_model``, ``agents``, ``num_agents``,
    ``tokenizer``, ``model_config``, ``train_dataset``, ``eval_dataset``, ``dataset_type``, ``reward_func``,
    ``reward_processor``, ``formatters``, ``external_transition``, ``wandb_config``, ``eval_logger``,
    ``eval_aggregator``, ``args``; see :class:`~comlrl.trainers.core.trainer.MultiAgentTrainerBase`) and a
    :class:`MAGRPOConfig`. ``dataset_type`` is accepted and only recorded. Ours: ``policy``, ``lora_config``,
    ``metrics_callback``.

    >>> trainer = MAGRPOTrainer(agent_model="test-tiny", num_agents=2, reward_func=reward,
    ...                         train_dataset=items, args=MAGRPOConfig(num_generations=4))
    >>> trainer.train()
    """

    config_class = MAGRPOConfig

    def __init__(
        self,
        agent_model: Any = None,
        agents: Sequence[Any] | None = None,
        num_agents: int = 2,
        tokenizer: Any = None,
        model_config: Mapping[str, Any] | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        dataset_type: str | None = None,
        reward_func: Callable[..., Any] | None = None,
        reward_processor: Callable[[float], Any] | None = None,
        formatters: Any = None,
        external_transition: Any = None,
        wandb_config: Mapping[str, Any] | None = None,
        eval_logger: Callable[..., Any] | None = None,
        eval_aggregator: Callable[..., Any] | None = None,
        args: MAGRPOConfig | None = None,
        **kwargs: Any,
    ) -> None:
        self.dataset_type = dataset_type
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
            eval_logger=eval_logger,
            eval_aggregator=eval_aggregator,
            args=args,
            **kwargs,
        )
        self.advantage_mode = self.args.advantage_mode
