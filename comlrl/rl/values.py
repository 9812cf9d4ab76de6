"""Critic math for the single-turn actor-critic trainers (MAAC, IAC).

Single turn means each completion is one step that ends the episode, so the return is the reward,
``R = r``, and the one-step TD error with a terminal next state is ``r + γ·V(s')·0 − V(s) = R − V(s)``.

Advantages (:func:`critic_advantages`):

- ``critic_type="v"``: the critic reads the prompt (history ``h``) and predicts ``V(h)``;
  ``A = R − V(h)``. This is CoMLRL 1.4.3's definition too.
- ``critic_type="q"``: the critic reads prompt and response and predicts ``Q(h, a)``. CoMLRL 1.4.3 uses
  ``A = R − Q(h, a)`` here as well, but that is only the critic's error on the action taken: its expectation
  given ``(h, a)`` is 0 for every action once the critic fits, so it carries no signal about which action is
  better. We use ``A = Q(h, a) − mean_g Q``, the Q of the action minus the mean Q over the group of
  completions sampled for the same prompt (an estimate of ``V(h) = E_a Q(h, a)``). That needs at least two
  completions per prompt: when every group has one (``num_generations=1``, the public default), the
  public meaning ``A = R − Q(h, a)`` is used instead.

The critic is fit by :func:`value_loss` to ``R`` in both cases.
"""

from __future__ import annotations

import torch

from comlrl.rl.advantages import group_mean_baseline
from comlrl.rl.masking import as_bool_mask, masked_mean, masked_var
from comlrl.rl.names import CRITIC_TYPES

__all__ = ["CRITIC_TYPES", "critic_advantages", "explained_variance", "value_loss"]


def value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor | None = None,
    old_values: torch.Tensor | None = None,
    clip_range: float | None = None,
) -> torch.Tensor:
    """Mean squared error ``mean (V − R)²`` over the unmasked entries (no ½ factor; scale it with
    ``value_loss_coef``).

    With ``clip_range = c`` (PPO's value clipping, needs ``old_values``):
    ``V_clip = V_old + clip(V − V_old, −c, c)`` and the loss is ``mean max((V − R)², (V_clip − R)²)``, so the
    critic gains nothing from moving more than ``c`` away from its rollout-time prediction. ``returns`` and
    ``old_values`` are treated as constants. All tensors share one shape, ``(B,)`` or ``(B, T)``.
    """
    if returns.shape != values.shape:
        raise ValueError(f"`returns` must have shape {tuple(values.shape)}, got {tuple(returns.shape)}")
    mask = torch.ones_like(values, dtype=torch.bool) if mask is None else as_bool_mask(mask, values)
    returns = returns.detach().to(values.dtype)
    # Masked positions take the target's value: zero loss, and zero gradient even if they hold nan.
    values = torch.where(mask, values, returns)
    loss = (values - returns) ** 2
    if clip_range is not None:
        if not clip_range > 0:
            raise ValueError(f"`clip_range` must be > 0 (or None), got {clip_range}")
        if old_values is None:
            raise ValueError("`old_values` is required when `clip_range` is set")
        if old_values.shape != values.shape:
            raise ValueError(
                f"`old_values` must have shape {tuple(values.shape)}, got {tuple(old_values.shape)}"
            )
        old_values = torch.where(mask, old_values.detach().to(values.dtype), returns)
        clipped = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
        loss = torch.maximum(loss, (clipped - returns) ** 2)
    return masked_mean(loss, mask)


def critic_advantages(
    returns: torch.Tensor,
    values: torch.Tensor,
    critic_type: str = "v",
    group_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Single-turn actor-critic advantages, shape ``(N,)`` (see the module docstring).

    ``"v"``: ``A = R − V(h)`` (``values`` are ``V(h)``). ``"q"``: ``A = Q(h, a) − mean_g Q`` (``values`` are
    ``Q(h, a)``; ``group_ids`` marks completions of the same prompt and is required); when every group has
    one completion, ``"q"`` gives the public ``A = R − Q(h, a)``. The result is detached.
    """
    returns = torch.as_tensor(returns)
    values = torch.as_tensor(values, device=returns.device).detach()
    if values.ndim != 1:
        raise ValueError(f"`values` must be 1-D (one per completion), got shape {tuple(values.shape)}")
    if returns.shape != values.shape:
        raise ValueError(f"`returns` must have shape {tuple(values.shape)}, got {tuple(returns.shape)}")
    if critic_type == "v":
        return returns.detach().to(values.dtype) - values
    if critic_type == "q":
        if group_ids is None:
            raise ValueError("`group_ids` (completions of the same prompt) is required for critic_type='q'")
        group_ids = torch.as_tensor(group_ids, device=values.device)
        if torch.unique(group_ids).numel() == values.numel():  # one completion per prompt: R - Q(h, a)
            return returns.detach().to(values.dtype) - values
        return group_mean_baseline(values, group_ids)
    raise ValueError(f"`critic_type` must be one of {CRITIC_TYPES}, got {critic_type!r}")


def explained_variance(
    values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``1 − Var(R − V) / Var(R)`` over the unmasked entries: 1 is a perfect critic, 0 is no better than
    predicting the mean, negative is worse. ``nan`` when ``Var(R) = 0`` (undefined). Detached."""
    values = values.detach()
    returns = returns.detach().to(values.dtype)
    if returns.shape != values.shape:
        raise ValueError(f"`returns` must have shape {tuple(values.shape)}, got {tuple(returns.shape)}")
    mask = torch.ones_like(values, dtype=torch.bool) if mask is None else as_bool_mask(mask, values)
    var_returns = masked_var(returns, mask)
    if not bool(var_returns > 0):
        return torch.tensor(float("nan"), dtype=values.dtype, device=values.device)
    return 1 - masked_var(returns - values, mask) / var_returns
