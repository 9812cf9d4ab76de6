"""What sampling candidates needs besides the backend: the sampled item (:class:`ItemSample`), one generate call
over items with their prompts (:func:`sample_prompted`), prompts as text, the model's default ``top_k``, and
``train()``'s generation keywords as overrides."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from comlrl.rollout import Completion, GenerationRequest, SamplingParams
from comlrl.seeding import derive_seed

__all__ = ["ItemSample", "PromptedItem", "generation_overrides", "model_top_k", "prompt_text", "sample_prompted"]

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


@dataclasses.dataclass
class PromptedItem:
    """An item to sample for: its every agent's prompt and the seed key that names this sampling of it (empty:
    the item's first turn; a later turn of a multi-turn episode adds its turn and branch)."""

    item: Any
    item_index: int
    prompts: list[Any]
    seed_key: tuple[int | str, ...] = ()


def sample_prompted(trainer: Any, entries: Sequence[PromptedItem], *, n: int, stream: str, step: int) -> list[ItemSample]:
    """``n`` candidates of every agent for every entry, in ONE ``trainer.backend.generate`` call. Agent a of an
    entry samples with the seed ``derive_seed(seed, stream, step, item_index, a, *seed_key)``, so a
    completion never depends on which other entries share the call."""
    requests = [
        GenerationRequest(
            prompt=entry.prompts[a],
            policy=trainer.policy.policy_name(a),
            seed=derive_seed(trainer.args.seed, stream, step, int(entry.item_index), a, *entry.seed_key),
        )
        for entry in entries
        for a in range(trainer.num_agents)
    ]
    results = trainer.backend.generate(requests, trainer.sampling_params(n)) if requests else []
    out = []
    num = trainer.num_agents
    for i, entry in enumerate(entries):
        row = results[i * num : (i + 1) * num]
        texts = [prompt_text(p, row[a][0] if row[a] else None, trainer.tokenizers[a]) for a, p in enumerate(entry.prompts)]
        out.append(ItemSample(entry.item, int(entry.item_index), list(entry.prompts), texts, [list(c) for c in row]))
    return out


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
