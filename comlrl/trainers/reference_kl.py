"""Reference KL for the RL stages: a frozen copy of the initial agents and each completion's summed KL.

:class:`ReferencePolicy` deep-copies the team once, before any update, onto ``reference_devices`` (None:
each agent's own device; one device: all; a list: one per actor model), in eval mode with gradients off.
:meth:`ReferencePolicy.sequence_kl` scores the sampled completion tokens under the reference in one padded
no-grad forward per agent and returns ``Σ_t k(δ_t)`` per completion (:func:`comlrl.rl.sequence_kl`, k3 by
default) from the policy's log-probs of the same tokens (the ones the policy-gradient loss uses, detached).
:func:`shaped_rewards` is the reward shaping ``r − coef · KL`` (:func:`comlrl.rl.kl_penalized_rewards`).

Resume: the copy is taken when the trainer is built, from the same sources as the agents; a trainer also
saves it once (``<output_dir>/reference_policy``) when a fresh run starts and reloads that snapshot on
resume, so the reference stays the *initial* policy even if the actor objects changed in between.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path

import torch

from comlrl.policy import MultiAgentPolicy
from comlrl.rl import kl_penalized_rewards, sequence_kl
from comlrl.scoring import completion_logprobs

__all__ = ["ReferencePolicy", "reference_devices", "shaped_rewards"]


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


class ReferencePolicy:
    """A frozen deep copy of a :class:`~comlrl.policy.MultiAgentPolicy` (the initial agents).

    Args:
        policy: the live team; copied now, so build this before the first update.
        devices: ``reference_devices`` (see :func:`reference_devices`).
    """

    def __init__(self, policy: MultiAgentPolicy, devices: str | Sequence[str] | None = None) -> None:
        agent_devices = [str(policy.device(a)) for a in policy.agents]
        targets = reference_devices(devices, agent_devices)
        self.policy = copy.deepcopy(policy)
        for agent, device in zip(self.policy.agents, targets):
            self.policy.handle(agent).model.to(device)
        for model in self.policy.models():
            model.eval()
            for param in model.parameters():
                param.requires_grad_(False)

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
        with self.policy.activate(agent) as handle:
            return completion_logprobs(
                handle.model,
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
        return self.policy.save(directory)

    def load_weights_(self, directory: str | os.PathLike) -> None:
        """Load a snapshot written by :meth:`save` (or by ``MultiAgentPolicy.save`` of the initial team)."""
        self.policy.load_weights_(directory)
        for model in self.policy.models():
            model.eval()
            for param in model.parameters():
                param.requires_grad_(False)
