"""Masked reductions over padded token tensors.

A mask marks the positions that count (completion tokens) with ``True`` / 1 and padding with ``False`` / 0.
Every reduction selects with ``torch.where`` rather than multiplying by the mask, so whatever a padded
position holds (even ``inf`` or ``nan``) never reaches the result, and its gradient is exactly zero.
"""

from __future__ import annotations

import torch

__all__ = ["as_bool_mask", "masked_mean", "masked_sum", "masked_var", "masked_whiten"]


def as_bool_mask(mask: torch.Tensor, like: torch.Tensor, name: str = "mask") -> torch.Tensor:
    """Check that ``mask`` has ``like``'s shape and holds only 0/1, and return it as a bool tensor."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor, got {type(mask).__name__}")
    if mask.shape != like.shape:
        raise ValueError(f"`{name}` must have shape {tuple(like.shape)}, got {tuple(mask.shape)}")
    if mask.dtype == torch.bool:
        return mask
    # A fractional weight would be silently binarised below; refuse it instead.
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"`{name}` must hold only 0 and 1 (or be a bool tensor)")
    return mask != 0


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``Σ mask·values`` over ``dim`` (all dimensions when ``None``)."""
    mask = as_bool_mask(mask, values)
    selected = torch.where(mask, values, torch.zeros_like(values))
    return selected.sum() if dim is None else selected.sum(dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``Σ mask·values / Σ mask`` over ``dim``; a slice with no unmasked position gives 0."""
    mask = as_bool_mask(mask, values)
    total = masked_sum(values, mask, dim)
    count = mask.sum() if dim is None else mask.sum(dim)
    return total / count.clamp(min=1).to(total.dtype)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the unmasked entries (all dimensions), with Bessel's correction when ``unbiased``.

    Fewer than two unmasked entries (one, for the biased form) give 0.
    """
    mask = as_bool_mask(mask, values)
    mean = masked_mean(values, mask)
    square_dev = masked_sum((values - mean) ** 2, mask)
    count = mask.sum().to(values.dtype)
    denominator = count - 1 if unbiased else count
    return square_dev / denominator.clamp(min=1)


def masked_whiten(
    values: torch.Tensor,
    mask: torch.Tensor | None = None,
    shift_mean: bool = True,
    eps: float = 1e-8,
) -> torch.Tensor:
    """Whiten the unmasked entries: ``(x − mean) / sqrt(var + eps)`` with mean and unbiased var over the mask.

    With ``shift_mean=False`` the mean is added back (only the scale changes). Masked positions are
    returned as 0. ``mask=None`` uses every entry.
    """
    if eps <= 0:
        raise ValueError(f"`eps` must be > 0, got {eps}")
    mask = torch.ones_like(values, dtype=torch.bool) if mask is None else as_bool_mask(mask, values)
    mean = masked_mean(values, mask)
    whitened = (values - mean) * torch.rsqrt(masked_var(values, mask) + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask, whitened, torch.zeros_like(whitened))
