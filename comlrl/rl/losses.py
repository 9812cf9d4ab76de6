"""Token-level policy losses over padded completions.

Shapes: ``logprobs``, ``old_logprobs``, ``ref_logprobs`` and ``mask`` are ``(B, T)`` (one row per sampled
completion, right- or left-padded, ``mask`` marking completion tokens); ``advantages`` is ``(B,)`` (one per
completion, broadcast to its tokens) or ``(B, T)``. Advantages and old / reference log-probs are treated as
constants (detached). Padded positions never reach the loss and get exactly zero gradient.

A per-token loss ``ℓ_{b,t}`` is reduced by :func:`aggregate_token_loss`, with TRL's ``loss_type`` names
(``m`` = mask, ``L_b = Σ_t m_{b,t}``):

=================  ============================================================================
``grpo``           ``(1/B) Σ_b (Σ_t m·ℓ) / L_b``  (per-sequence mean, then batch mean)
``bnpo``/``token`` ``Σ_{b,t} m·ℓ / Σ_{b,t} m``  (mean over the tokens of this batch)
``dr_grpo``        ``Σ_{b,t} m·ℓ / (B · max_completion_length)``
``dapo``           ``Σ_{b,t} m·ℓ / num_items_in_batch`` (tokens of the whole accumulated global batch)
``sequence_sum``   ``(1/B) Σ_b Σ_t m·ℓ``  (CoMLRL 1.4.3's MAGRPO loss: ``−A·Σ_t log π`` averaged over
                   the sequences)
=================  ============================================================================

Gradient accumulation over ``k`` micro-batches weighs these losses in the update engine, one rule per loss
type, the same in comlrl and pettingllms (:func:`comlrl.trainers.core.optimization.micro_batch_weights`, whose
module docstring has the table): ``dapo`` always ends as ``Σ m·ℓ`` over the whole step divided by the step's
tokens (micro-batches and ranks), with ``num_items_in_batch`` the step's tokens (pettingllms) or each
micro-batch's own tokens re-weighted by the engine (comlrl); the other types weigh each micro-batch by its
rows and divide by the step's rows (micro-batches and ranks).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from comlrl.rl.kl import per_token_kl
from comlrl.rl.masking import as_bool_mask, masked_mean
from comlrl.rl.names import LOSS_TYPES

__all__ = [
    "LOSS_TYPES",
    "PPOLossOutput",
    "aggregate_token_loss",
    "masked_entropy",
    "policy_gradient_loss",
    "ppo_clip_loss",
]


def aggregate_token_loss(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str,
    max_completion_length: int | None = None,
    num_items_in_batch: int | float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a ``(B, T)`` per-token loss to a scalar according to ``loss_type`` (see the module docstring).

    ``max_completion_length`` is required for ``dr_grpo`` and must be at least ``T``;
    ``num_items_in_batch`` (the unmasked-token count of the global batch, > 0) is required for ``dapo``.
    """
    if per_token_loss.ndim != 2:
        raise ValueError(
            f"`per_token_loss` must be 2-D (batch, tokens), got shape {tuple(per_token_loss.shape)}"
        )
    mask = as_bool_mask(mask, per_token_loss)
    selected = torch.where(mask, per_token_loss, torch.zeros_like(per_token_loss))
    batch, width = per_token_loss.shape
    if loss_type == "grpo":
        lengths = mask.sum(-1).clamp(min=1).to(selected.dtype)
        return (selected.sum(-1) / lengths).mean()
    if loss_type in ("bnpo", "token"):
        return selected.sum() / mask.sum().clamp(min=1).to(selected.dtype)
    if loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("`max_completion_length` is required for loss_type='dr_grpo'")
        if max_completion_length < max(width, 1):
            raise ValueError(
                f"`max_completion_length` ({max_completion_length}) must be >= the completion width {width}"
            )
        return selected.sum() / (batch * max_completion_length)
    if loss_type == "dapo":
        if num_items_in_batch is None:
            raise ValueError(
                "`num_items_in_batch` (unmasked tokens in the global batch) is required for loss_type='dapo'"
            )
        normalizer = torch.as_tensor(num_items_in_batch, dtype=selected.dtype, device=selected.device)
        if not bool(normalizer > 0):
            raise ValueError(f"`num_items_in_batch` must be > 0, got {float(normalizer)}")
        return selected.sum() / normalizer
    if loss_type == "sequence_sum":
        return selected.sum(-1).mean()
    raise ValueError(f"`loss_type` must be one of {LOSS_TYPES}, got {loss_type!r}")


def _broadcast_advantages(advantages: torch.Tensor, like: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Detached ``(B, T)`` advantages, zero on padding (so a nan there cannot reach any gradient)."""
    advantages = torch.as_tensor(advantages, device=like.device).detach()
    if advantages.shape == like.shape[:1]:
        advantages = advantages.unsqueeze(-1)
    elif advantages.shape != like.shape:
        raise ValueError(
            f"`advantages` must have shape {tuple(like.shape[:1])} or {tuple(like.shape)}, "
            f"got {tuple(advantages.shape)}"
        )
    advantages = advantages.to(like.dtype).expand_as(like)
    return torch.where(mask, advantages, torch.zeros_like(advantages))


def _check_logprobs(logprobs: torch.Tensor) -> None:
    if logprobs.ndim != 2:
        raise ValueError(f"`logprobs` must be 2-D (batch, tokens), got shape {tuple(logprobs.shape)}")


def policy_gradient_loss(
    logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str = "bnpo",
    max_completion_length: int | None = None,
    num_items_in_batch: int | float | torch.Tensor | None = None,
) -> torch.Tensor:
    """REINFORCE: per-token loss ``−A_b · log π(y_{b,t})``, aggregated by ``loss_type``.

    Its gradient with respect to ``logprobs[b, t]`` is ``−A_b`` divided by the ``loss_type`` normaliser on
    completion tokens, and exactly zero on padding.
    """
    _check_logprobs(logprobs)
    mask = as_bool_mask(mask, logprobs)
    per_token = -_broadcast_advantages(advantages, logprobs, mask) * logprobs
    return aggregate_token_loss(per_token, mask, loss_type, max_completion_length, num_items_in_batch)


@dataclass(frozen=True)
class PPOLossOutput:
    """The PPO-clip loss (with gradient) and detached token-mean diagnostics over completion tokens.

    ``clip_ratio_low``: fraction of tokens with ``ratio < 1 − ε`` and ``A < 0`` (clipped from below);
    ``clip_ratio_high``: ``ratio > 1 + ε_high`` and ``A > 0``; ``clip_ratio_region``: either. These are the
    tokens whose gradient the clip removes. ``approx_kl``: Schulman's k3 estimate of KL(π_old ‖ π),
    ``(ratio − 1) − log ratio``. ``ratio_mean``: mean of ``π/π_old``. ``kl``: mean k3 KL(π ‖ π_ref) when
    reference log-probs were given, else ``None``. ``per_token_loss``: the ``(B, T)`` loss before
    aggregation (zero on padding).
    """

    loss: torch.Tensor
    per_token_loss: torch.Tensor
    clip_ratio_low: torch.Tensor
    clip_ratio_high: torch.Tensor
    clip_ratio_region: torch.Tensor
    approx_kl: torch.Tensor
    ratio_mean: torch.Tensor
    kl: torch.Tensor | None = None

    def as_metrics(self, prefix: str = "") -> dict[str, float]:
        """Scalars under TRL's metric names (``clip_ratio/low_mean`` ...)."""
        metrics = {
            f"{prefix}loss": float(self.loss.detach()),
            f"{prefix}clip_ratio/low_mean": float(self.clip_ratio_low),
            f"{prefix}clip_ratio/high_mean": float(self.clip_ratio_high),
            f"{prefix}clip_ratio/region_mean": float(self.clip_ratio_region),
            f"{prefix}approx_kl": float(self.approx_kl),
            f"{prefix}ratio_mean": float(self.ratio_mean),
        }
        if self.kl is not None:
            metrics[f"{prefix}kl"] = float(self.kl)
        return metrics


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    loss_type: str = "bnpo",
    max_completion_length: int | None = None,
    num_items_in_batch: int | float | torch.Tensor | None = None,
    dual_clip: float | None = None,
    ref_logprobs: torch.Tensor | None = None,
    beta: float = 0.0,
) -> PPOLossOutput:
    """PPO's clipped surrogate per token, aggregated by ``loss_type``.

    With ``ρ = exp(log π − log π_old)`` and ``ε_high = epsilon_high or epsilon``:
    ``ℓ = −min(ρ·A, clip(ρ, 1 − ε, 1 + ε_high)·A)`` (DAPO's asymmetric clip when ``ε_high ≠ ε``). With
    ``dual_clip = c > 1`` (Ye et al. 2020, as in verl) tokens with ``A < 0`` are also capped at ``−c·A``, so a
    very large ratio cannot blow the loss up. With ``beta > 0`` the per-token k3 estimate of KL(π ‖ π_ref)
    (``ref_logprobs`` required) is added as ``+beta · k3`` before aggregation, as in TRL's GRPO.

    The gradient through ``ρ`` is zero exactly where the clip is active: ``A > 0`` and ``ρ > 1 + ε_high``, or
    ``A < 0`` and ``ρ < 1 − ε`` (and, with dual clip, ``A < 0`` and ``ρ > c``).
    """
    _check_logprobs(logprobs)
    if not epsilon > 0:
        raise ValueError(f"`epsilon` must be > 0, got {epsilon}")
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    if not epsilon_high > 0:
        raise ValueError(f"`epsilon_high` must be > 0, got {epsilon_high}")
    if dual_clip is not None and not dual_clip > 1:
        raise ValueError(f"`dual_clip` must be > 1 (or None), got {dual_clip}")
    if beta < 0:
        raise ValueError(f"`beta` must be >= 0, got {beta}")
    if beta > 0 and ref_logprobs is None:
        raise ValueError("`ref_logprobs` is required when `beta` > 0")
    if old_logprobs.shape != logprobs.shape:
        raise ValueError(
            f"`old_logprobs` must have shape {tuple(logprobs.shape)}, got {tuple(old_logprobs.shape)}"
        )
    mask = as_bool_mask(mask, logprobs)
    adv = _broadcast_advantages(advantages, logprobs, mask)

    # Zero log-ratio on padding keeps exp() finite there whatever the padded log-probs hold.
    log_ratio = torch.where(mask, logprobs - old_logprobs.detach(), torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    surrogate = ratio * adv
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high) * adv
    per_token = -torch.min(surrogate, clipped)
    if dual_clip is not None:
        per_token = torch.where(adv < 0, torch.minimum(per_token, -dual_clip * adv), per_token)

    kl_mean = None
    if ref_logprobs is not None:
        if ref_logprobs.shape != logprobs.shape:
            raise ValueError(
                f"`ref_logprobs` must have shape {tuple(logprobs.shape)}, got {tuple(ref_logprobs.shape)}"
            )
        token_kl = per_token_kl(logprobs, ref_logprobs.detach(), "k3", mask=mask)
        if beta > 0:
            per_token = per_token + beta * token_kl
        kl_mean = masked_mean(token_kl.detach(), mask)

    per_token = torch.where(mask, per_token, torch.zeros_like(per_token))
    loss = aggregate_token_loss(per_token, mask, loss_type, max_completion_length, num_items_in_batch)

    with torch.no_grad():
        low = (ratio < 1 - epsilon) & (adv < 0)
        high = (ratio > 1 + epsilon_high) & (adv > 0)
        return PPOLossOutput(
            loss=loss,
            per_token_loss=per_token,
            clip_ratio_low=masked_mean(low.to(ratio.dtype), mask),
            clip_ratio_high=masked_mean(high.to(ratio.dtype), mask),
            clip_ratio_region=masked_mean((low | high).to(ratio.dtype), mask),
            approx_kl=masked_mean((ratio - 1) - log_ratio, mask),
            ratio_mean=masked_mean(ratio, mask),
            kl=kl_mean,
        )


def masked_entropy(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean Shannon entropy (nats) of the next-token distributions at completion positions.

    ``logits`` is ``(B, T, V)`` aligned with ``mask`` ``(B, T)``. Uses TRL's chunked
    ``entropy_from_logits``; the result keeps gradient (for an entropy bonus).
    """
    # Imported here: trl pulls in transformers (seconds), and the rest of comlrl.rl is pure torch.
    from trl.trainer.utils import entropy_from_logits

    if logits.ndim != 3:
        raise ValueError(f"`logits` must be 3-D (batch, tokens, vocab), got shape {tuple(logits.shape)}")
    return masked_mean(entropy_from_logits(logits), as_bool_mask(mask, logits[..., 0]))
