"""One agent's part of an RL update (:mod:`comlrl.trainers.online_rl.policy_learning`): its loss record
(:class:`AgentLoss`), what of it is non-finite (:func:`nonfinite_parts`), and under FSDP the calls of a rank
without rows in an update batch (:func:`fill_policy_gradient`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from comlrl.rl import nonfinite_names
from comlrl.scoring import completion_logprobs
from comlrl.trainers.core.models import pad_token_id, scoring_mode

__all__ = ["AgentLoss", "fill_policy_gradient", "nonfinite_parts"]


@dataclass
class AgentLoss:
    """One agent's part of an update: ``loss`` (policy gradient), ``total`` (plus the weighted value loss of
    its own critic, iac), the scored log-probs and mask ``[N, T]``, per-completion ``kl`` and
    ``advantages`` ``[N]``, the critic's ``values`` and ``value_loss`` (None without a critic)."""

    loss: torch.Tensor
    total: torch.Tensor
    logprobs: torch.Tensor
    mask: torch.Tensor
    kl: torch.Tensor
    advantages: torch.Tensor
    values: torch.Tensor | None
    value_loss: torch.Tensor | None


def nonfinite_parts(out: AgentLoss) -> list[str]:
    """What of one agent's loss is non-finite, most specific first (log-probs explain a NaN loss)."""
    parts = {
        "log-probs": out.logprobs,
        "reference KL": out.kl,
        "critic values": out.values,
        "advantages": out.advantages,
        "value loss": out.value_loss,
        "loss": out.total,
    }
    return nonfinite_names(parts, {"log-probs": out.mask})


def fill_policy_gradient(learner: Any) -> None:
    """FSDP: the calls :meth:`~comlrl.trainers.online_rl.policy_learning.PolicyLearner.training_step` makes, for a
    rank without rows in the update batch: per agent, one forward of a one-token filler row on its sharded
    module, the whitening collective where actor-critic advantages are whitened over the batch, and a backward
    with weight zero through the engine (with the divisor the agents' losses use). Critics and the reference
    are not sharded: they need no call."""
    host, args = learner.host, learner.args
    steps = host.gradient_steps
    whitened = bool(learner.critics) and args.advantage_normalization
    for a, agent in enumerate(host.agent_names):
        handle = host.policy.handle(agent)
        pad = pad_token_id(handle.tokenizer)
        with host.policy.activate(agent), scoring_mode(handle.model, args.disable_dropout):
            with steps.autocast():
                logprobs, _ = completion_logprobs(handle.model, [[pad]], [[pad]], pad_token_id=pad, requires_grad=True)
            if whitened:
                host.data_parallel.whiten(logprobs.new_zeros(0))
            loss = logprobs.sum() * 0.0
            steps.backward_policy(loss, 0, loss_type=args.loss_type, policy_loss=loss, tokens=0.0, agent=a)
