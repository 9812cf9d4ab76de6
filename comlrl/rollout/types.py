"""The rollout engine's data types: what callers ask for and what backends return.

Every backend (HF, API, and later vLLM or a Ray pool) takes a batch of :class:`GenerationRequest`
and returns, per request, ``n`` :class:`Completion` objects in candidate order. Completions carry the
sampled token ids and their log-probs (token in, token out), so trainers score exactly what was sampled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

ChatMessages = list[dict[str, str]]
Prompt = str | list[int] | ChatMessages

FINISH_STOP = "stop"
FINISH_LENGTH = "length"


@dataclass(frozen=True)
class SamplingParams:
    """How to sample completions.

    ``temperature == 0`` means greedy decoding. ``top_k == 0`` and ``top_p == 1.0`` switch those
    truncations off. ``seed`` is the base seed of a request when the request has none of its own.
    Log-probs are always ``log_softmax(logits / temperature)`` of the sampled token, taken before top-k /
    top-p truncation (TRL's convention); at temperature 0 they are taken at temperature 1.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"`n` must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"`temperature` must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"`top_p` must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"`top_k` must be >= 0 (0 disables it), got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"`max_new_tokens` must be >= 1, got {self.max_new_tokens}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def with_(self, **changes: Any) -> SamplingParams:
        return replace(self, **changes)


@dataclass
class GenerationRequest:
    """One prompt to complete ``params.n`` times.

    ``prompt`` is text, token ids, or chat messages (rendered with the policy tokenizer's chat template
    and a generation prompt). ``policy`` names the policy that serves it. ``seed`` is the request's
    sampling seed, normally from :func:`comlrl.seeding.derive_seed` over (run seed, stream, step, item,
    agent); candidate ``j`` samples with ``derive_seed(seed, j)``, so a completion does not depend on
    which other requests share its batch. ``params`` overrides the backend call's sampling parameters.
    """

    prompt: Prompt
    policy: str = "default"
    seed: int | None = None
    params: SamplingParams | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        if isinstance(self.prompt, str):
            return "text"
        if isinstance(self.prompt, list) and all(isinstance(t, int) for t in self.prompt):
            return "token_ids"
        if isinstance(self.prompt, list) and all(isinstance(m, dict) for m in self.prompt):
            return "chat"
        raise TypeError(
            "`GenerationRequest.prompt` must be a string, a list of token ids or a list of chat "
            f"messages (dicts with 'role' and 'content'), got {type(self.prompt).__name__}"
        )


@dataclass
class Completion:
    """One sampled completion.

    ``token_ids`` are the sampled ids with padding removed and EOS kept when it was sampled;
    ``logprobs[i]`` is the log-prob of ``token_ids[i]`` (see :class:`SamplingParams`). Backends that
    cannot see token ids (remote APIs) return empty ``prompt_token_ids`` / ``token_ids`` / ``logprobs``
    and callers tokenize ``text`` once.
    """

    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    policy: str = "default"
    policy_version: int = 0
    seed: int | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@runtime_checkable
class RolloutBackend(Protocol):
    """What every generation backend provides.

    ``generate`` returns one list per request, holding that request's ``n`` completions in candidate
    order. A backend may serve several policies (``request.policy``); it raises ``KeyError`` naming an
    unknown policy. Backends that hold weights expose ``sync_weights(policy)`` so trainers can push
    updated weights after each optimizer step (a no-op for in-process HF models, which share tensors).
    """

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams | None = None
    ) -> list[list[Completion]]: ...
