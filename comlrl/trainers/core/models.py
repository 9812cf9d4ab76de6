"""Small model helpers the trainers share: dropout off, the scoring mode, the pad id, and what a head on a
backbone's hidden states needs (its width, the last real token of each row). The value heads of the critics
and the joint reward model both pool at :func:`last_token_index`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

__all__ = ["disable_dropout", "hidden_size", "last_token_index", "pad_token_id", "scoring_mode"]


def disable_dropout(model: nn.Module) -> None:
    """Dropout probabilities to zero, in the modules and the config (TRL's ``disable_dropout_in_model``,
    without importing trl's trainer stack for three lines)."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    config = getattr(model, "config", None)
    for name in ("attention_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop", "hidden_dropout"):
        if config is not None and isinstance(getattr(config, name, None), float):
            setattr(config, name, 0.0)


@contextmanager
def scoring_mode(model: nn.Module, disable_dropout: bool) -> Iterator[None]:
    """Eval mode while scoring the sampled tokens when ``disable_dropout`` (deterministic log-probs), else
    train mode; the model's mode is restored afterwards."""
    was_training = model.training
    wanted = not disable_dropout
    if was_training == wanted:  # model.train() walks every module: skip it when nothing changes
        yield
        return
    model.train(wanted)
    try:
        yield
    finally:
        model.train(was_training)


def pad_token_id(tokenizer: Any) -> int:
    """The tokenizer's pad id, else its EOS id (padding is masked out of every score)."""
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else tokenizer.eos_token_id)


def hidden_size(config: Any) -> int:
    """Width of a backbone's hidden states, from its config."""
    for name in ("hidden_size", "n_embd", "d_model"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    raise ValueError(f"cannot read the backbone's hidden size from its config ({type(config).__name__})")


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Column of each row's last real token (mask == 1), for any padding: ``[B, L]`` -> ``[B]``."""
    if attention_mask.dim() != 2:
        raise ValueError(f"`attention_mask` must be [batch, length], got shape {tuple(attention_mask.shape)}")
    columns = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    index = torch.where(attention_mask.bool(), columns, -1).amax(dim=1)
    empty = (index < 0).nonzero().flatten().tolist()
    if empty:
        raise ValueError(f"`attention_mask` rows {empty} have no real token to pool")
    return index
