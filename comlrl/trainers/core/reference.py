"""The frozen reference model of every trainer, in both packages, and the KL reward shaping against it.

:class:`ReferencePolicy` takes the team's reference once, before any update: a frozen copy of each distinct
model (policies that share a model share its copy), on ``reference_devices`` (None: each agent's own
device; one device: all; a list: one per actor model), in eval mode with gradients off. A LoRA policy's
reference is, with ``adapters="copy"`` (comlrl's trainers), the copy with its adapter as it is now; with
``adapters="disabled"`` (AT-GRPO), the live base model with every adapter disabled, so nothing is copied
(the base never trains). :meth:`ReferencePolicy.model` hands out the reference module of a policy for a
forward, so a trainer scores it with the same scorer as its policy.

:meth:`ReferencePolicy.sequence_kl` scores the sampled completion tokens under the reference in one padded
no-grad forward per agent and returns ``Σ_t k(δ_t)`` per completion (:func:`comlrl.rl.sequence_kl`, k3 by
default) from the policy's log-probs of the same tokens (the ones the policy-gradient loss uses, detached).
:func:`shaped_rewards` is the reward shaping ``r − coef · KL`` (:func:`comlrl.rl.kl_penalized_rewards`).

Resume: the copy is taken when the trainer is built, from the same sources as the agents; comlrl's trainers
also save it once (``<output_dir>/reference_policy``) when a fresh run starts and reload that snapshot on
resume, so the reference stays the *initial* policy even if the actor objects changed in between.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from comlrl.policy import MultiAgentPolicy
from comlrl.rl import kl_penalized_rewards, sequence_kl
from comlrl.scoring import completion_logprobs
from comlrl.trainers.core.models import scoring_mode

__all__ = ["ADAPTER_REFERENCES", "ReferencePolicy", "reference_devices", "shaped_rewards"]

# What a LoRA policy's reference is: a frozen copy with the adapter, or the live base with adapters off.
ADAPTER_REFERENCES = ("copy", "disabled")


def reference_devices(spec: str | Sequence[str] | None, agent_devices: Sequence[str]) -> list[str]:
    """One device per agent: ``spec`` None -> the agents' devices; one entry -> all; else one per agent."""
    if spec is None:
        return [str(d) for d in agent_devices]
    if isinstance(spec, str):
        return [spec] * len(agent_devices)
    spec = list(spec)
    if len(spec) == 1:
        return spec * len(agent_devices)
    if len(spec) != len(agent_devices):
        raise ValueError(f"`reference_devices` must have 1 or {len(agent_devices)} entries, got {len(spec)}")
    return [str(d) for d in spec]


def shaped_rewards(rewards: torch.Tensor, per_sequence_kl: torch.Tensor, coef: float) -> torch.Tensor:
    """``rewards − coef · KL`` per completion (the KL detached); both ``(N,)``."""
    return kl_penalized_rewards(rewards, per_sequence_kl, coef)


def _freeze(model: nn.Module) -> None:
    model.eval()
    for param in model.parameters():
        param.requires_grad_(False)


class ReferencePolicy:
    """The frozen reference of a :class:`~comlrl.policy.MultiAgentPolicy` (its agents as they are now).

    Args:
        policy: the live team; its reference is taken now, so build this before the first update.
        devices: ``reference_devices`` for the copies (see :func:`reference_devices`).
        adapters: a LoRA policy's reference: ``"copy"`` (default), a frozen copy of the model with its
            adapter; ``"disabled"``, the live model with every adapter disabled (no copy).

    ``policy`` is the reference team (a frozen deep copy; with ``adapters="disabled"`` it shares the live
    LoRA models instead of copying them).
    """

    def __init__(
        self, policy: MultiAgentPolicy, devices: str | Sequence[str] | None = None, *, adapters: str = "copy"
    ) -> None:
        if adapters not in ADAPTER_REFERENCES:
            raise ValueError(f"`adapters` must be one of {ADAPTER_REFERENCES}, got {adapters!r}")
        self.adapters = adapters
        lora = {id(h.model): h.model for h in policy.handles.values() if h.adapter is not None}
        # Models used in place, not copied: the deep copy's memo maps each to itself.
        self._live = lora if adapters == "disabled" else {}
        agent_devices = [str(policy.device(a)) for a in policy.agents]
        targets = reference_devices(devices, agent_devices)
        self.policy = copy.deepcopy(policy, dict(self._live))
        for agent, device in zip(self.policy.agents, targets):
            model = self.policy.handle(agent).model
            if id(model) not in self._live:
                model.to(device)
        self._freeze_copies()

    def _freeze_copies(self) -> None:
        for model in self.policy.models():
            if id(model) not in self._live:
                _freeze(model)

    @contextmanager
    def model(self, agent_or_policy: int | str) -> Iterator[nn.Module]:
        """The reference module of an agent's (or a policy's) policy, for forwards inside the block: its
        frozen copy with the policy's adapter active, or a live LoRA model in eval mode with its adapters
        disabled. Run the forwards under ``torch.no_grad()``."""
        with self.policy.activate(agent_or_policy) as handle:
            model = handle.model
            if id(model) not in self._live:
                yield model
                return
            with scoring_mode(model, disable_dropout=True), model.disable_adapter():
                yield model

    @torch.no_grad()
    def token_logprobs(
        self,
        agent: int | str,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        *,
        pad_token_id: int,
        exclude_last_token: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The reference's per-token log-probs of the completions (one padded forward) and their mask."""
        with self.model(agent) as model:
            return completion_logprobs(
                model,
                prompt_ids,
                completion_ids,
                pad_token_id=pad_token_id,
                exclude_last_token=exclude_last_token,
            )

    def sequence_kl(
        self,
        agent: int | str,
        logprobs: torch.Tensor,
        mask: torch.Tensor,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        *,
        pad_token_id: int,
        estimator: str = "k3",
        exclude_last_token: bool = False,
    ) -> torch.Tensor:
        """``Σ_t k(log π_ref − log π)`` per completion, ``(B,)`` on ``logprobs``' device, no gradient.

        ``logprobs`` / ``mask`` are the policy's ``[B, T]`` log-probs of the same completion tokens.
        """
        ref, ref_mask = self.token_logprobs(
            agent,
            prompt_ids,
            completion_ids,
            pad_token_id=pad_token_id,
            exclude_last_token=exclude_last_token,
        )
        ref, ref_mask = ref.to(logprobs.device), ref_mask.to(logprobs.device)
        if not torch.equal(ref_mask, mask):
            raise RuntimeError("the reference and policy masks differ: they must score the same tokens")
        return sequence_kl(logprobs.detach(), ref, mask, estimator)

    # ------------------------------------------------------------------------------------ snapshot
    def save(self, directory: str | os.PathLike) -> Path:
        """Write the reference weights (one folder per policy, as ``MultiAgentPolicy.save``)."""
        self._check_owns_its_models("save")
        return self.policy.save(directory)

    def load_weights_(self, directory: str | os.PathLike) -> None:
        """Load a snapshot written by :meth:`save` (or by ``MultiAgentPolicy.save`` of the initial team)."""
        self._check_owns_its_models("load_weights_")
        self.policy.load_weights_(directory)
        self._freeze_copies()

    def _check_owns_its_models(self, action: str) -> None:
        # A shared live LoRA model would write (or overwrite) the training adapters, not a reference.
        if self._live:
            raise ValueError(
                f"cannot {action} a reference with adapters='disabled': it is the live LoRA base, not a copy"
            )
