"""The ``model`` comparator source: frozen models from ``comparator_model_name`` or ``comparator_agents``.

``comparator_model_name`` is one model for every agent; ``comparator_agents`` one source per agent (one
under centralized generation). A source is a preset name, a local folder or a hub id (loaded with its own
tokenizer), a model object (tokenizer from the folder it was loaded from, else the agent's tokenizer) or a
``(model, tokenizer)`` pair. Each distinct source is loaded once, when the comparator is built, on the
agent's comparator device (``comparator_devices``, else the actor's device), and frozen. A comparator
tokenizer whose vocabulary differs from its agent's gives ``same_tokenizer=False``, so the trainer
tokenizes the comparator's text with the agent's tokenizer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from comlrl.models import load_model, load_tokenizer, resolve_model_path
from comlrl.rollout.hf import HFBackend, PolicyHandle
from comlrl.trainers.preference.comparators.base import ComparatorContext
from comlrl.trainers.preference.comparators.copy import resolve_comparator_devices
from comlrl.trainers.preference.comparators.current import (
    BackendComparator,
    agent_tokenizer,
    tokenizers_match,
)

__all__ = ["ModelComparator", "comparator_sources"]


def comparator_sources(args: Any) -> list[Any]:
    """One model source per agent slot (``args.num_agents`` slots) from the config."""
    num = int(args.num_agents)
    if args.comparator_model_name is not None:
        return [args.comparator_model_name] * num
    agents = args.comparator_agents
    if agents is None:
        raise ValueError(
            "`comparator_model_name` or `comparator_agents` is required when comparator_policy='model'"
        )
    if args.comparator_generation_mode == "centralized":
        if len(agents) != 1:
            raise ValueError(
                f"`comparator_agents` must have 1 entry under centralized generation, got {len(agents)}"
            )
        # Only the centralized slot generates; every slot names the one model.
        return [agents[0]] * num
    if len(agents) != num:
        raise ValueError(f"`comparator_agents` must have {num} entries (one per agent), got {len(agents)}")
    return list(agents)


def _source_key(source: Any) -> tuple:
    if isinstance(source, (str, os.PathLike)):
        return ("name", str(source))
    if isinstance(source, tuple):
        return ("object", id(source[0]))
    return ("object", id(source))


def _describe(source: Any) -> str:
    return str(source) if isinstance(source, (str, os.PathLike)) else type(source).__name__


class ModelComparator(BackendComparator):
    """``comparator_policy="model"`` (see the module docstring)."""

    name = "model"

    def __init__(self, context: ComparatorContext) -> None:
        super().__init__(context)
        sources = comparator_sources(self.args)
        slots = self.slots
        actor_devices = [self._actor_device(slot) for slot in range(len(sources))]
        devices = resolve_comparator_devices(self.args.comparator_devices, actor_devices)
        explicit = self.args.comparator_devices is not None
        handles: dict[str, PolicyHandle] = {}
        by_key: dict[tuple, str] = {}
        self.slot_policy: dict[int, str] = {}
        self.loads = 0  # models loaded by name (each distinct source once)
        for slot in slots:
            source, device = sources[slot], devices[slot]
            key = (*_source_key(source), str(device))
            if key not in by_key:
                model, tokenizer = self._materialise(source, device, slot, explicit)
                name = f"comparator_{len(handles)}"
                handles[name] = PolicyHandle(name, model, tokenizer)
                by_key[key] = name
            self.slot_policy[slot] = by_key[key]
        self.handles = handles
        self.backend = HFBackend(handles)
        self._same = {
            slot: tokenizers_match(handles[self.slot_policy[slot]].tokenizer, agent_tokenizer(context, slot))
            for slot in slots
        }

    def _actor_device(self, slot: int) -> torch.device:
        policy = self.context.policy
        if policy is None:
            return torch.device("cpu")
        index = min(slot, policy.num_agents - 1)  # a centralized actor has one slot
        return policy.device(index)

    def _materialise(self, source: Any, device: torch.device, slot: int, explicit_device: bool):
        if isinstance(source, (str, os.PathLike)):
            folder = resolve_model_path(source, seed=self.seed)
            model = load_model(folder, seed=self.seed, device=str(device))
            tokenizer = load_tokenizer(folder, seed=self.seed)
            self.loads += 1
        elif isinstance(source, tuple) and len(source) == 2 and isinstance(source[0], nn.Module):
            model, tokenizer = source
            if explicit_device:
                model = model.to(device)
        elif isinstance(source, nn.Module):
            model = source.to(device) if explicit_device else source
            folder = getattr(model, "name_or_path", "") or ""
            if folder and Path(folder).is_dir():
                tokenizer = load_tokenizer(folder, seed=self.seed)
            else:
                tokenizer = agent_tokenizer(self.context, slot)
        else:
            raise TypeError(
                f"comparator model source for agent {slot} must be a model name or path, a model, or a "
                f"(model, tokenizer) pair, got {_describe(source)}"
            )
        model.eval()
        model.requires_grad_(False)
        return model, tokenizer

    def policy_for(self, slot: int) -> str:
        return self.slot_policy[slot]

    def same_tokenizer_for(self, slot: int) -> bool:
        return self._same[slot]

    def close(self) -> None:
        self.handles.clear()
        self.backend = None
