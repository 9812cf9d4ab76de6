"""Rendering a request's prompt to token ids, once, with the serving policy's tokenizer.

* text: ``tokenizer(text)["input_ids"]`` (the tokenizer's own special-token rule, as ``tokenizer(text)``
  and vLLM do);
* token ids: used as given (checked against the vocabulary);
* chat messages: the tokenizer's chat template with the generation prompt appended.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from comlrl.rollout.types import GenerationRequest, Prompt
from comlrl.seeding import derive_seed


def render_prompt(prompt: Prompt, tokenizer, vocab_size: int | None = None) -> list[int]:
    """Token ids of ``prompt`` (text, token ids or chat messages) under ``tokenizer``."""
    kind = GenerationRequest(prompt=prompt).kind
    if kind == "token_ids":
        ids = list(prompt)
        limit = vocab_size if vocab_size is not None else len(tokenizer)
        bad = [t for t in ids if not 0 <= t < limit]
        if bad:
            raise ValueError(f"`prompt` token ids must be in [0, {limit}), got {bad[:5]}")
    elif kind == "text":
        ids = list(tokenizer(prompt)["input_ids"])
    else:
        for index, message in enumerate(prompt):
            if "role" not in message or "content" not in message:
                raise ValueError(f"chat `prompt` message {index} needs 'role' and 'content', got {sorted(message)}")
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("chat `prompt` needs a tokenizer with a chat template; this tokenizer has none")
        ids = list(
            tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
        )
    if not ids:
        raise ValueError(f"`prompt` renders to no tokens ({kind} prompt {prompt!r})")
    return [int(t) for t in ids]


def prompt_fingerprint(prompt_ids: Sequence[int]) -> str:
    """A short stable hash of a token-id sequence."""
    data = b"".join(int(t).to_bytes(8, "little", signed=True) for t in prompt_ids)
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def request_seed(request: GenerationRequest, base_seed: int | None, prompt_ids: Sequence[int]) -> int:
    """The request's sampling seed: its own, else ``derive_seed(base_seed or 0, "request", hash(prompt ids))``.

    The fallback depends on the prompt alone (never on the request's position in a call), so a completion
    stays independent of its batch partners; identical unseeded prompts therefore get identical samples,
    and callers that want them to differ give each request its own seed.
    """
    if request.seed is not None:
        return int(request.seed)
    return derive_seed(base_seed or 0, "request", prompt_fingerprint(prompt_ids))
