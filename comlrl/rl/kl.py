"""KL estimators between the policy π and a frozen reference π_ref, from the sampled tokens' log-probs.

Tokens are sampled from π. With ``δ = log π_ref(y) − log π(y)`` per token (Schulman, "Approximating KL
divergence", 2020), each estimator's expectation under π relates to KL(π ‖ π_ref):

======  ==========================  ===========================================================
``k1``  ``−δ = log π − log π_ref``  unbiased, high variance, can be negative
``k2``  ``δ² / 2``                  biased (low for close policies), always ``>= 0``
``k3``  ``exp(δ) − δ − 1``          unbiased, always ``>= 0`` (TRL's GRPO ``beta`` term)
======  ==========================  ===========================================================

CoMLRL's reference-KL shaping (MARLHF, issue 5) sums the per-token estimate over each completion and
subtracts it, times a coefficient, from that completion's reward: see :func:`kl_penalized_rewards`.
"""

from __future__ import annotations

import torch

from comlrl.rl.masking import as_bool_mask, masked_sum
from comlrl.rl.names import KL_ESTIMATORS

__all__ = ["KL_ESTIMATORS", "kl_penalized_rewards", "per_token_kl", "sequence_kl"]


def per_token_kl(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    estimator: str = "k3",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL(π ‖ π_ref) estimate, same shape as ``logprobs`` (see the module table).

    With ``mask``, padded positions give exactly 0 with zero gradient, whatever they hold.
    """
    if ref_logprobs.shape != logprobs.shape:
        raise ValueError(
            f"`ref_logprobs` must have shape {tuple(logprobs.shape)}, got {tuple(ref_logprobs.shape)}"
        )
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"`estimator` must be one of {KL_ESTIMATORS}, got {estimator!r}")
    if mask is not None:
        mask = as_bool_mask(mask, logprobs)
        zeros = torch.zeros_like(logprobs)
        logprobs = torch.where(mask, logprobs, zeros)
        ref_logprobs = torch.where(mask, ref_logprobs, zeros.to(ref_logprobs.dtype))
    delta = ref_logprobs - logprobs
    if estimator == "k1":
        return -delta
    if estimator == "k2":
        return 0.5 * delta**2
    # expm1 keeps k3 accurate (and >= 0) for tiny δ, where exp(δ) − 1 would cancel catastrophically.
    return torch.expm1(delta) - delta


def sequence_kl(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    estimator: str = "k3",
) -> torch.Tensor:
    """Per-completion KL estimate ``Σ_t m_t · k(δ_t)``, shape ``(B,)`` for ``(B, T)`` inputs."""
    if logprobs.ndim != 2:
        raise ValueError(f"`logprobs` must be 2-D (batch, tokens), got shape {tuple(logprobs.shape)}")
    return masked_sum(per_token_kl(logprobs, ref_logprobs, estimator, mask=mask), mask, dim=-1)


def kl_penalized_rewards(
    rewards: torch.Tensor,
    per_sequence_kl: torch.Tensor,
    coef: float,
) -> torch.Tensor:
    """Reference-KL reward shaping: ``r̃_b = r_b − coef · KL_b`` with ``KL_b`` from :func:`sequence_kl`.

    Both inputs are ``(B,)``; the KL is detached (the shaped reward is a constant for the policy loss).
    ``coef`` must be finite and ``>= 0``.
    """
    coef = float(coef)
    if not (coef >= 0 and coef != float("inf")):
        raise ValueError(f"`coef` must be a finite number >= 0, got {coef}")
    rewards = torch.as_tensor(rewards)
    per_sequence_kl = torch.as_tensor(per_sequence_kl, device=rewards.device)
    if per_sequence_kl.shape != rewards.shape:
        raise ValueError(
            f"`per_sequence_kl` must have the shape of `rewards` {tuple(rewards.shape)}, "
            f"got {tuple(per_sequence_kl.shape)}"
        )
    dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
    return rewards.to(dtype) - coef * per_sequence_kl.detach().to(dtype)
