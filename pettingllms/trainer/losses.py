"""AT-GRPO's micro-batch loss: PPO-clip on token log-prob ratios (:func:`comlrl.rl.ppo_clip_loss`) with
the config's clipping, loss type and KL, and its factor under gradient accumulation (the update engine's rule,
:func:`comlrl.trainers.core.optimization.micro_batch_weights`; :class:`~pettingllms.trainer.policy_update.
PolicyUpdater` leaves that factor to the engine)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from comlrl.rl import PPOLossOutput, ppo_clip_loss
from comlrl.trainers.core.optimization import micro_batch_weights

if TYPE_CHECKING:
    from pettingllms.trainer.at_grpo_config import ATGRPOConfig

__all__ = ["accumulation_scale", "at_grpo_loss"]


def accumulation_scale(loss_type: str, num_micro_batches: int) -> float:
    """Factor on a micro-batch loss under gradient accumulation (:func:`micro_batch_weights` with the step's
    micro-batch count): ``1/k`` for the per-batch means (``grpo``, ``bnpo``/``token``, ``dr_grpo``,
    ``sequence_sum``), ``1`` for ``dapo``, whose normaliser is already the token count of all ``k``
    micro-batches."""
    return micro_batch_weights(loss_type, num_micro_batches=num_micro_batches).weight


def at_grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    config: ATGRPOConfig,
    max_completion_length: int | None = None,
    num_micro_batches: int = 1,
    num_items_in_batch: int | None = None,
    ref_logps: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PPOLossOutput]:
    """The loss to backpropagate for one micro-batch, and the PPO-clip diagnostics.

    :func:`comlrl.rl.ppo_clip_loss` with the config's ``epsilon``, ``epsilon_high``, ``dual_clip``,
    ``loss_type`` and ``beta`` (with ``ref_logps``), scaled by :func:`accumulation_scale` (1 with the default
    ``num_micro_batches``: the update engine then weighs it).
    ``num_items_in_batch`` is the completion-token count of the optimizer step (``dapo``);
    ``max_completion_length`` the rollout's (``dr_grpo``'s normaliser; its engine config's).
    """
    out = ppo_clip_loss(
        logps,
        old_logps,
        advantages,
        mask,
        epsilon=config.epsilon,
        epsilon_high=config.epsilon_high,
        loss_type=config.loss_type,
        max_completion_length=max_completion_length,
        num_items_in_batch=num_items_in_batch,
        dual_clip=config.dual_clip,
        ref_logprobs=ref_logps,
        beta=config.beta,
    )
    return out.loss * accumulation_scale(config.loss_type, num_micro_batches), out
