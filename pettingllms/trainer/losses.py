"""AT-GRPO's micro-batch loss: PPO-clip on token log-prob ratios (:func:`comlrl.rl.ppo_clip_loss`) with
the config's clipping, loss type and KL. Its weight under gradient accumulation is the update engine's rule,
the same as comlrl's for the same loss type (:func:`comlrl.trainers.core.optimization.micro_batch_weights`,
applied by :class:`~pettingllms.trainer.policy_update.PolicyUpdater`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from comlrl.rl import PPOLossOutput, ppo_clip_loss

if TYPE_CHECKING:
    from pettingllms.trainer.at_grpo_config import ATGRPOConfig

__all__ = ["at_grpo_loss"]


def at_grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    config: ATGRPOConfig,
    max_completion_length: int | None = None,
    num_items_in_batch: int | None = None,
    ref_logps: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PPOLossOutput]:
    """The loss to backpropagate for one micro-batch, and the PPO-clip diagnostics.

    :func:`comlrl.rl.ppo_clip_loss` with the config's ``epsilon``, ``epsilon_high``, ``dual_clip``,
    ``loss_type`` and ``beta`` (with ``ref_logps``), unscaled (the update engine weighs it).
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
    return out.loss, out
