"""AT-GRPO's micro-batch loss: PPO-clip on token log-prob ratios (:func:`comlrl.rl.ppo_clip_loss`) with
the config's clipping, loss type and KL, scaled for gradient accumulation."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from comlrl.rl import PPOLossOutput, ppo_clip_loss

if TYPE_CHECKING:
    from pettingllms.trainer.at_grpo_config import ATGRPOConfig

__all__ = ["accumulation_scale", "at_grpo_loss"]


def accumulation_scale(loss_type: str, num_micro_batches: int) -> float:
    """Factor on a micro-batch loss under gradient accumulation: ``1/k`` for the per-batch means
    (``grpo``, ``bnpo``/``token``, ``dr_grpo``, ``sequence_sum``), ``1`` for ``dapo``, whose normaliser is
    already the token count of all ``k`` micro-batches."""
    if num_micro_batches < 1:
        raise ValueError(f"`num_micro_batches` must be >= 1, got {num_micro_batches}")
    return 1.0 if loss_type == "dapo" else 1.0 / num_micro_batches


def at_grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    config: ATGRPOConfig,
    num_micro_batches: int = 1,
    num_items_in_batch: int | None = None,
    ref_logps: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PPOLossOutput]:
    """The loss to backpropagate for one micro-batch, and the PPO-clip diagnostics.

    :func:`comlrl.rl.ppo_clip_loss` with the config's ``epsilon``, ``epsilon_high``, ``dual_clip``,
    ``loss_type`` and ``beta`` (with ``ref_logps``), scaled by :func:`accumulation_scale`.
    ``num_items_in_batch`` is the completion-token count of the optimizer step (``dapo``).
    """
    out = ppo_clip_loss(
        logps,
        old_logps,
        advantages,
        mask,
        epsilon=config.epsilon,
        epsilon_high=config.epsilon_high,
        loss_type=config.loss_type,
        max_completion_length=config.max_completion_length,
        num_items_in_batch=num_items_in_batch,
        dual_clip=config.dual_clip,
        ref_logprobs=ref_logps,
        beta=config.beta,
    )
    return out.loss * accumulation_scale(config.loss_type, num_micro_batches), out
