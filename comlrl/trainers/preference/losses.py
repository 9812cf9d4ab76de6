"""Preference losses as pure tensor functions (no models, no trainers).

MADPO (reference-free, on the team's joint margin). For a pair with joint winner w and loser l, agent
i's margin is ``m_i = log pi_i(w_i | x_i) - log pi_i(l_i | x_i)`` (sums of token log-probs), the joint
margin is ``M = sum_i m_i`` and the loss is ``-log sigmoid(beta * M)``. Agent i is trained on
``L_i = -log sigmoid(beta * (m_i + sum_{j != i} stopgrad(m_j)))``: its gradient flows only through its own
margin, ``dL_i/dtheta_i = -beta * sigmoid(-beta * M) * dm_i/dtheta_i``, with a coefficient set by the team.
With a frozen reference (``preference_reference="initial"``) each ``m_i`` is DPO's margin, the policy's minus
the reference's (:func:`dpo_margins`); everything after is unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "dpo_margins",
    "joint_margin",
    "madpo_agent_losses",
    "madpo_loss",
    "pair_margins",
    "preference_accuracy",
    "sequence_logprob_sums",
]


def sequence_logprob_sums(token_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of each row's real-token log-probs: ``[B, L]`` log-probs and bool mask -> ``[B]``."""
    if token_logprobs.shape != mask.shape:
        raise ValueError(
            f"`token_logprobs` {tuple(token_logprobs.shape)} and `mask` {tuple(mask.shape)} differ in shape"
        )
    return (token_logprobs * mask.to(token_logprobs.dtype)).sum(dim=-1)


def pair_margins(sequence_logprobs: torch.Tensor, num_pairs: int) -> torch.Tensor:
    """Margins ``winner - loser`` from ``2 * num_pairs`` sequence log-probs laid out winners first."""
    if sequence_logprobs.dim() != 1 or sequence_logprobs.shape[0] != 2 * num_pairs:
        raise ValueError(
            f"expected {2 * num_pairs} sequence log-probs (winners then losers), "
            f"got shape {tuple(sequence_logprobs.shape)}"
        )
    return sequence_logprobs[:num_pairs] - sequence_logprobs[num_pairs:]


def dpo_margins(policy_margins: torch.Tensor, reference_margins: torch.Tensor) -> torch.Tensor:
    """DPO's margins: ``(log pi(w) - log pi_ref(w)) - (log pi(l) - log pi_ref(l))``, i.e. the policy's
    ``winner - loser`` margins minus the reference's (constants: no gradient flows into the reference)."""
    if policy_margins.shape != reference_margins.shape:
        raise ValueError(
            f"`policy_margins` {tuple(policy_margins.shape)} and `reference_margins` "
            f"{tuple(reference_margins.shape)} differ in shape"
        )
    return policy_margins - reference_margins.detach().to(policy_margins.device, policy_margins.dtype)


def joint_margin(margins: torch.Tensor) -> torch.Tensor:
    """The team's margin per pair: ``[num_agents, B]`` agent margins -> ``[B]``."""
    if margins.dim() != 2:
        raise ValueError(f"`margins` must be [num_agents, num_pairs], got shape {tuple(margins.shape)}")
    return margins.sum(dim=0)


def madpo_loss(margins: torch.Tensor, beta: float) -> torch.Tensor:
    """Mean over pairs of ``-log sigmoid(beta * joint margin)`` (the reported loss; full gradient)."""
    _check_beta(beta)
    return -F.logsigmoid(beta * joint_margin(margins)).mean()


def madpo_agent_losses(margins: torch.Tensor, beta: float) -> torch.Tensor:
    """Per-agent MADPO losses ``[num_agents]``: agent i's loss sees its own margin with gradient and the
    other agents' margins as constants. Every entry has the value of :func:`madpo_loss`; summing them
    and calling ``backward`` gives each agent exactly its own gradient, also when agents share weights
    (the gradients of the agents served by one model then add up)."""
    _check_beta(beta)
    if margins.dim() != 2:
        raise ValueError(f"`margins` must be [num_agents, num_pairs], got shape {tuple(margins.shape)}")
    detached = margins.detach()
    others = detached.sum(dim=0, keepdim=True) - detached  # sum over j != i, no gradient
    return -F.logsigmoid(beta * (margins + others)).mean(dim=-1)


def preference_accuracy(margins: torch.Tensor) -> torch.Tensor:
    """Fraction of pairs whose joint margin is > 0 (the team prefers the winner)."""
    return (joint_margin(margins.detach()) > 0).float().mean()


def _check_beta(beta: float) -> None:
    if not beta > 0:
        raise ValueError(f"`dpo_beta` must be > 0, got {beta}")
