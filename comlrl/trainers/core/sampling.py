"""What sampling candidates needs besides the backend: the sampled item (:class:`ItemSample`), prompts as
text, the model's default ``top_k``, and ``train()``'s generation keywords as overrides."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from torch import nn

from comlrl.rollout import Completion, SamplingParams

__all__ = ["ItemSample", "generation_overrides", "model_top_k", "prompt_text"]

GENERATION_KEYWORDS = ("temperature", "top_p", "top_k", "max_new_tokens", "stop")


@dataclasses.dataclass
class ItemSample:
    """One task item's sampled joint candidates: every agent's prompt (as sent and as text) and, per
    agent, its candidates in candidate order."""

    item: Any
    item_index: int
    prompts: list[Any]
    prompt_texts: list[str]
    candidates: list[list[Completion]]


def prompt_text(prompt: Any, completion: Completion | None, tokenizer: Any) -> str:
    """A prompt as text for the pair records: text as given; chat messages and ids as rendered."""
    if isinstance(prompt, str):
        return prompt
    if prompt and all(isinstance(m, Mapping) for m in prompt):
        return tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    ids = completion.prompt_token_ids if completion is not None else prompt
    return tokenizer.decode(ids)


def model_top_k(model: nn.Module) -> int | None:
    config = getattr(model, "generation_config", None)
    value = getattr(config, "top_k", None)
    return int(value) if isinstance(value, int) else None


def generation_overrides(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``train()``'s generation keywords as sampling-parameter overrides (``do_sample`` is accepted and
    ignored: candidates are always sampled); any other keyword is an error."""
    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key == "do_sample":
            if value is False:
                raise ValueError("`do_sample=False` is not supported: candidates are always sampled")
            continue
        if key not in GENERATION_KEYWORDS:
            raise TypeError(
                f"train() got an unexpected keyword argument {key!r}; generation keywords are "
                f"{', '.join(GENERATION_KEYWORDS)} (and do_sample)"
            )
        if key == "top_k" and value is None:
            continue
        out[key] = tuple(value) if key == "stop" and not isinstance(value, str) else value
    try:
        SamplingParams(**out)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid generation keyword for train(): {exc}") from None
    if out.get("temperature", 1.0) <= 0:
        raise ValueError(f"`temperature` must be > 0 (candidates are sampled), got {out['temperature']}")
    return out
