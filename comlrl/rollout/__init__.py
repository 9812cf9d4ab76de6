"""The shared rollout engine: request and completion types and the generation backends.

>>> from comlrl.rollout import GenerationRequest, HFBackend, SamplingParams
>>> backend = HFBackend.from_model(model, tokenizer)
>>> [[completion]] = backend.generate([GenerationRequest("Hello", seed=1)], SamplingParams(max_new_tokens=8))

``HFBackend`` (with torch and transformers), ``APIBackend`` (remote models) and ``VLLMBackend`` / ``VLLMSettings``
(vLLM engines, the ``vllm`` extra) are loaded on first access, so a problem in those modules never breaks
``import comlrl.rollout``, and the request types import without torch.
"""

from __future__ import annotations

from comlrl.lazy_exports import lazy_getattr
from comlrl.rollout.types import (
    FINISH_LENGTH,
    FINISH_STOP,
    ChatMessages,
    Completion,
    GenerationRequest,
    Prompt,
    RolloutBackend,
    SamplingParams,
)

_LAZY = {
    # torch and transformers load with the HF backend, not with the types (a config reads without them).
    "DEFAULT_TOKEN_BUDGET": "comlrl.rollout.hf",
    "HFBackend": "comlrl.rollout.hf",
    "PolicyHandle": "comlrl.rollout.hf",
    "SeededSampler": "comlrl.rollout.sampling",
    "sample_step": "comlrl.rollout.sampling",
    "APIBackend": "comlrl.rollout.api",
    "APIError": "comlrl.rollout.api",
    "APIRequestError": "comlrl.rollout.api",
    "APIResponseError": "comlrl.rollout.api",
    # vLLM itself is imported only when a backend is made (a one-line ImportError naming the install without it).
    "VLLMBackend": "comlrl.rollout.vllm.backend",
    "VLLMSettings": "comlrl.rollout.vllm.settings",
}

__all__ = [
    "DEFAULT_TOKEN_BUDGET",
    "FINISH_LENGTH",
    "FINISH_STOP",
    "ChatMessages",
    "Completion",
    "GenerationRequest",
    "HFBackend",
    "PolicyHandle",
    "Prompt",
    "RolloutBackend",
    "SamplingParams",
    "SeededSampler",
    "sample_step",
    *_LAZY,
]


__getattr__ = lazy_getattr(__name__, _LAZY)
