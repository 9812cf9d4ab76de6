"""The ``current_copy`` comparator source, and :class:`PolicyShadow`, the frozen copy it and ``history`` use.

A shadow holds one frozen deep copy of each actor model that must live elsewhere (on
``comparator_devices``), made once; refreshing it copies weights into those persistent copies in place
(``load_state_dict`` / ``copy_``), never rebuilding a model. Models whose comparator device equals the
actor's are served from the actor itself unless a copy is asked for.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from comlrl.rollout.hf import HFBackend, PolicyHandle
from comlrl.trainers.preference.comparators.base import ComparatorContext
from comlrl.trainers.preference.comparators.current import BackendComparator, check_policy_agents

__all__ = ["CurrentCopyComparator", "PolicyShadow", "comparator_model_devices", "resolve_comparator_devices"]


def resolve_comparator_devices(value: Any, actor_devices: Sequence[torch.device]) -> list[torch.device]:
    """One device per actor slot from ``comparator_devices``: None or ``"auto"`` keep the actors' devices,
    one device (or a one-entry list) serves every slot, a list gives one per slot."""
    actor_devices = [torch.device(d) for d in actor_devices]
    if value is None or value == "auto":
        return actor_devices
    entries = [value] if isinstance(value, (str, torch.device)) else list(value)
    if len(entries) == 1:
        return [torch.device(entries[0])] * len(actor_devices)
    if len(entries) != len(actor_devices):
        raise ValueError(
            f"`comparator_devices` must have 1 or {len(actor_devices)} entries, got {len(entries)}"
        )
    return [torch.device(actor if entry == "auto" else entry) for entry, actor in zip(entries, actor_devices)]


def _same_device(a: torch.device, b: torch.device) -> bool:
    # "cuda" and "cuda:0" name the same device when 0 is current.
    if a.type != b.type:
        return False
    if a.type == "cuda":
        current = torch.cuda.current_device() if torch.cuda.is_available() else 0
        return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)
    return a.index == b.index


def comparator_model_devices(policy: Any, comparator_devices: Any) -> dict[int, torch.device]:
    """``{id(model): device}`` for each distinct actor model.

    ``comparator_devices`` entries are per actor slot (agent); a model serving several agents must get one
    device from all of them.
    """
    slots = policy.agents
    actor_devices = [policy.device(agent) for agent in slots]
    wanted = resolve_comparator_devices(comparator_devices, actor_devices)
    out: dict[int, torch.device] = {}
    for agent, device in zip(slots, wanted):
        model = policy.handle(agent).model
        if id(model) in out and not _same_device(out[id(model)], device):
            raise ValueError(
                f"`comparator_devices` puts agents sharing one model on {out[id(model)]} and {device}; give "
                "those agents one device"
            )
        out.setdefault(id(model), device)
    return out


def _frozen_copy(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    clone = copy.deepcopy(model).to(device)
    clone.eval()
    clone.requires_grad_(False)
    return clone


class PolicyShadow:
    """Frozen copies of a :class:`~comlrl.policy.MultiAgentPolicy`'s models, served under the same policy
    names (``handles``, for an :class:`HFBackend`).

    ``devices`` maps ``id(model)`` to the comparator device of each actor model; a model is copied when its
    device differs from the actor's, or always with ``copy_all``. The others are served live.
    """

    def __init__(self, policy: Any, devices: Mapping[int, torch.device], *, copy_all: bool = False) -> None:
        self.policy = policy
        self.copies: dict[int, torch.nn.Module] = {}  # id(actor model) -> its frozen copy
        for model in policy.models():
            target = torch.device(devices.get(id(model), next(model.parameters()).device))
            if copy_all or not _same_device(target, next(model.parameters()).device):
                self.copies[id(model)] = _frozen_copy(model, target)
        self.handles: dict[str, PolicyHandle] = {}
        for name in policy.policies:
            live = policy.handle(name)
            clone = self.copies.get(id(live.model))
            # A model served live keeps the actor's own handle, so its version stays current.
            self.handles[name] = (
                live
                if clone is None
                else PolicyHandle(name, clone, live.tokenizer, adapter=live.adapter, version=live.version)
            )

    @property
    def copies_anything(self) -> bool:
        return bool(self.copies)

    @torch.no_grad()
    def refresh_from_policy(self) -> None:
        """Copy the actors' current weights into the copies (in place) and take their versions."""
        for model in self.policy.models():
            clone = self.copies.get(id(model))
            if clone is not None:
                clone.load_state_dict(model.state_dict())
        for name, handle in self.handles.items():
            handle.version = self.policy.version(name)

    @torch.no_grad()
    def load_parameters(
        self, weights: Mapping[str, Mapping[str, torch.Tensor]], versions: Mapping[str, int]
    ) -> None:
        """Copy ``weights[policy][parameter name]`` (names as in the model's ``named_parameters``, duplicates
        kept) into the copies. Every model must be copied (``copy_all``)."""
        for name, tensors in weights.items():
            handle = self.handles[name]
            live = self.policy.handle(name).model
            if id(live) not in self.copies:
                raise RuntimeError(f"policy {name!r} is served live; build the shadow with copy_all=True")
            params = dict(handle.model.named_parameters(remove_duplicate=False))
            for key, tensor in tensors.items():
                if key not in params:
                    raise KeyError(
                        f"snapshot of policy {name!r} names parameter {key!r}, which the model lacks"
                    )
                params[key].copy_(tensor)
            handle.version = int(versions.get(name, handle.version))

    def close(self) -> None:
        self.copies.clear()
        self.handles.clear()


class CurrentCopyComparator(BackendComparator):
    """``comparator_policy="current_copy"``: a frozen copy of the actors on ``comparator_devices``, refreshed
    once per round in :meth:`begin_round`.

    Where every comparator device equals the actor's, it samples the actors through the trainer's backend
    like ``current`` (same separate seed stream) unless ``copy_on_same_device`` asks for a copy anyway (a
    copy frozen for the whole round, e.g. when the actors change during it).
    """

    name = "current_copy"

    def __init__(self, context: ComparatorContext, *, copy_on_same_device: bool = False) -> None:
        super().__init__(context)
        check_policy_agents(context, max(self.slots) + 1)
        devices = comparator_model_devices(context.policy, self.args.comparator_devices)
        self.shadow = PolicyShadow(context.policy, devices, copy_all=copy_on_same_device)
        if self.shadow.copies_anything:
            self.backend = HFBackend(self.shadow.handles)
        else:
            if context.backend is None:
                raise ValueError(
                    "comparator_policy='current_copy' on the actors' devices needs `context.backend`"
                )
            self.backend = context.backend
        self.refreshed_round: int | None = None
        self.refresh_count = 0

    def policy_for(self, slot: int) -> str:
        return self.context.policy.policy_name(slot)

    def begin_round(self, round_index: int) -> None:
        if self.shadow.copies_anything and self.refreshed_round != round_index:
            self.shadow.refresh_from_policy()
            self.refresh_count += 1
        self.refreshed_round = round_index

    def close(self) -> None:
        self.shadow.close()
        self.backend = None
