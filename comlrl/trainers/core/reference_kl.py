"""The public CoMLRL library's reference-KL helpers, with its meanings: the config reads
(:func:`reference_kl_enabled`, :func:`reference_kl_coef`, :func:`validate_reference_kl_config`,
:func:`resolve_reference_devices`), frozen reference copies (:func:`clone_reference_models`,
:func:`load_reference_models_from_sources`) and the sampled KL of one batch of sequences
(:func:`reference_kl_for_sequence`: Schulman's k3 estimator summed over the response tokens).

comlrl's trainers do this work in :class:`comlrl.trainers.core.reference.ReferencePolicy` (one padded
forward per agent over a whole batch, any of the k1 / k2 / k3 estimators of :mod:`comlrl.rl`); these
functions are for users' scripts and share its math (:func:`comlrl.rl.sequence_kl`,
:func:`comlrl.scoring.gather_token_logprobs`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from comlrl.distributed import unwrap_model
from comlrl.rl import sequence_kl
from comlrl.scoring import gather_token_logprobs
from comlrl.trainers.core.device_scheduler import DeviceScheduler, DeviceSpec
from comlrl.trainers.core.reference import _freeze

__all__ = [
    "clone_reference_models",
    "load_reference_models_from_sources",
    "reference_kl_coef",
    "reference_kl_enabled",
    "reference_kl_for_sequence",
    "resolve_reference_devices",
    "validate_reference_kl_config",
]


def reference_kl_enabled(args: Any) -> bool:
    """``args.reference_kl_enabled`` (False when the config has no such field)."""
    return bool(getattr(args, "reference_kl_enabled", False))


def reference_kl_coef(args: Any) -> float:
    """``args.reference_kl_coef`` (0.1, the public default, when the config has no such field)."""
    return float(getattr(args, "reference_kl_coef", 0.1))


def validate_reference_kl_config(args: Any, expected_count: int) -> None:
    """A ValueError for a negative coefficient, or (KL enabled) ``reference_devices`` that do not give
    ``expected_count`` devices."""
    if reference_kl_coef(args) < 0:
        raise ValueError("reference_kl_coef must be >= 0.")
    devices = getattr(args, "reference_devices", None)
    if reference_kl_enabled(args) and devices is not None:
        DeviceScheduler.resolve_devices(devices, expected_count, kind="reference_devices")


def resolve_reference_devices(
    args: Any, fallback_devices: Sequence[torch.device], expected_count: int
) -> list[torch.device]:
    """``args.reference_devices`` as ``expected_count`` devices, else the ``fallback_devices`` (the
    policies' own)."""
    devices: DeviceSpec | None = getattr(args, "reference_devices", None)
    if devices is None:
        return list(fallback_devices)
    return DeviceScheduler.resolve_devices(devices, expected_count, kind="reference_devices")


def clone_reference_models(
    policy_models: Sequence[nn.Module], *, devices: Sequence[torch.device]
) -> list[nn.Module]:
    """A frozen deep copy of each policy model (eval mode, no gradients) on its device."""
    return [_frozen(copy.deepcopy(model).to(device)) for model, device in zip(policy_models, devices)]


def load_reference_models_from_sources(
    model_sources: Sequence[str],
    *,
    devices: Sequence[torch.device],
    model_kwargs: Mapping[str, Any] | None = None,
) -> list[nn.Module]:
    """Each named model loaded (``from_pretrained`` with ``model_kwargs``) frozen on its device; names
    resolve through :func:`comlrl.models.resolve_model_path` (presets, folders, allowed hub ids)."""
    from transformers import AutoModelForCausalLM

    from comlrl.models import resolve_model_path

    kwargs = dict(model_kwargs or {})
    return [
        _frozen(AutoModelForCausalLM.from_pretrained(resolve_model_path(source), **kwargs).to(device))
        for source, device in zip(model_sources, devices)
    ]


def reference_kl_for_sequence(
    policy_model: nn.Module,
    reference_model: nn.Module,
    sequences: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_len: int,
    response_len: int,
) -> torch.Tensor:
    """Per sequence, ``Σ_t exp(δ_t) − δ_t − 1`` with ``δ_t = log π_ref(y_t) − log π(y_t)`` over the
    ``response_len`` tokens after the first ``prompt_len`` of ``sequences`` (``(B, L)``): a non-negative
    sampled estimate of KL(π ‖ π_ref), shape ``(B,)`` on the CPU.

    Both models score in eval mode without gradients, each on its own device; their train/eval modes are
    restored afterwards.
    """
    policy_logps = _response_logprobs(policy_model, sequences, attention_mask, prompt_len, response_len)
    reference_logps = _response_logprobs(reference_model, sequences, attention_mask, prompt_len, response_len)
    policy_logps = policy_logps.to(reference_logps.device)
    mask = torch.ones_like(reference_logps, dtype=torch.bool)
    return sequence_kl(policy_logps, reference_logps, mask, "k3").detach().cpu()


def _response_logprobs(
    model: nn.Module,
    sequences: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_len: int,
    response_len: int,
) -> torch.Tensor:
    """``(B, response_len)`` log-probs of the response tokens under ``model`` (its data-parallel wrapper
    unwrapped), scored on the model's device in eval mode."""
    module = unwrap_model(model)
    device = next(module.parameters()).device
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            ids = sequences.to(device)
            logits = module(input_ids=ids, attention_mask=attention_mask.to(device)).logits
            token_logps = gather_token_logprobs(logits[:, :-1, :], ids[:, 1:])
    finally:
        module.train(was_training)
    start = max(int(prompt_len) - 1, 0)
    return token_logps[:, start : start + int(response_len)]


def _frozen(model: nn.Module) -> nn.Module:
    _freeze(model)  # the trainers' reference copies are frozen the same way
    return model
