"""Which model (and LoRA adapter) acts for each agent.

Arrangements (pettingllms' specialization levels):

- ``single`` (L0): one agent, one model.
- ``shared`` (L1): several agents, one model served as policy ``"shared"``; roles differ by prompt.
- ``lora`` (L2): one frozen base model with one named LoRA adapter per agent (peft); each adapter is a policy.
- ``per_agent`` (L3): one model per agent; each is a policy.
- any other agent -> policy mapping through :meth:`MultiAgentPolicy.from_mapping` (e.g. 3 agents, 2 models).

A policy is what a completion is sampled from: a :class:`~comlrl.rollout.hf.PolicyHandle` (model,
tokenizer, adapter name, weights version), which the rollout backends take as a ``{policy name: handle}``
mapping (:attr:`MultiAgentPolicy.handles`, a live view: bumped versions show there at once).

Saved layout (:meth:`MultiAgentPolicy.save`)::

    dir/policy_layout.json            agents, agent -> policy, arrangement, versions, devices, dtypes
    dir/<policy>/                     a model policy: save_pretrained model + tokenizer
    dir/lora/base/                    LoRA arrangement: the base model + tokenizer, saved once
    dir/lora/adapters/<policy>/       ... and each adapter in peft's format
    dir/lora/lora_group.json          ... and which adapter serves which agents

Saving writes every folder into a hidden scratch folder first and only then renames them into place, the
layout file last: a write that fails (a full disk) raises :class:`~comlrl.atomic_io.WriteError` naming the
folder and leaves the policies saved there before unchanged. Loading checks the layout's format and
version and every weights file (present, not truncated) before any weight is copied, and raises
:class:`PolicyFileError` naming the file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch
from torch import nn

from comlrl.atomic_io import atomic_replace_dir, atomic_write_json, scratch_dir, write_error
from comlrl.models.lora import (
    adapter_parameters,
    load_adapter_weights_,
    load_lora_model,
    make_lora_model,
    save_adapter,
    save_base,
)
from comlrl.rollout.hf import PolicyHandle  # the backend's handle type: one definition for both layers
from comlrl.seeding import derive_seed

LAYOUT_FILE = "policy_layout.json"
LORA_GROUP = "lora"
LORA_GROUP_FILE = "lora_group.json"
LAYOUT_FORMAT = "comlrl.policy"
LAYOUT_VERSION = 1
SHARED_POLICY = "shared"
ARRANGEMENTS = ("single", "shared", "per_agent", "lora", "mapping")

# Policy names become folder names and peft adapter names (module-dict keys: no dots).
_POLICY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")

ModelSpec = nn.Module | str | os.PathLike
AgentRef = int | str


class PolicyFileError(ValueError):
    """A saved policy folder is damaged, incomplete or of another format version (the message names the
    file)."""


@dataclass(eq=False)
class _Group:
    """One set of weights in memory: a plain model serving one policy, or a LoRA model serving one policy
    per adapter. ``key`` is its folder name when saved."""

    key: str
    kind: str  # "model" | "lora"
    model: nn.Module
    tokenizer: Any
    policies: list[str]


def _check_policy_name(name: Any, what: str = "policy name") -> str:
    if not isinstance(name, str) or not _POLICY_NAME.match(name):
        raise ValueError(
            f"{what} must be letters, digits, '_' or '-' (starting with a letter or digit), got {name!r}"
        )
    return name


def _agent_list(agent_names: Sequence[str] | int, field: str = "agent_names") -> list[str]:
    if isinstance(agent_names, int) and not isinstance(agent_names, bool):
        if agent_names < 1:
            raise ValueError(f"`{field}` must be >= 1 when given as a count, got {agent_names}")
        return [f"agent_{i}" for i in range(agent_names)]
    if isinstance(agent_names, str):
        raise TypeError(f"`{field}` must be a list of names or a count, got the string {agent_names!r}")
    names = list(agent_names)
    if not names:
        raise ValueError(f"`{field}` must name at least one agent")
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"`{field}` must hold non-empty strings, got {name!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"`{field}` must be distinct, got {names}")
    return names


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _model_dtype(model: nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


def _is_peft(model: nn.Module) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def _check_device(device: str, where: str) -> str:
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"{where} asks for device {device!r} but CUDA is not available; pass device='cpu'")
    return str(device)


class MultiAgentPolicy:
    """Agents (by index or role name) -> policies -> weights. Build with :meth:`single`, :meth:`shared`,
    :meth:`per_agent`, :meth:`lora` or :meth:`from_mapping`; restore with :meth:`load`."""

    def __init__(
        self,
        agent_to_policy: Mapping[str, str],
        handles: Mapping[str, PolicyHandle],
        groups: Sequence[_Group],
        arrangement: str,
    ) -> None:
        if arrangement not in ARRANGEMENTS:
            raise ValueError(f"`arrangement` must be one of {ARRANGEMENTS}, got {arrangement!r}")
        self._agents = _agent_list(list(agent_to_policy), "agent_to_policy")
        self._agent_to_policy = dict(agent_to_policy)
        self._handles = dict(handles)
        self._groups = list(groups)
        self.arrangement = arrangement
        used = set(self._agent_to_policy.values())
        for agent, policy in self._agent_to_policy.items():
            if policy not in self._handles:
                raise ValueError(
                    f"agent {agent!r} maps to unknown policy {policy!r}; policies: {list(self._handles)}"
                )
        for policy in self._handles:
            _check_policy_name(policy)
            if policy not in used:
                raise ValueError(
                    f"policy {policy!r} serves no agent; agent_to_policy: {self._agent_to_policy}"
                )
        for name in set(self._agents) & set(self._handles):
            if self._agent_to_policy[name] != name:
                raise ValueError(
                    f"agent {name!r} maps to policy {self._agent_to_policy[name]!r} while a policy is also "
                    f"named {name!r}: rename one so that names resolve unambiguously"
                )

    # ----------------------------------------------------------------------------------- construction
    @classmethod
    def single(cls, model: ModelSpec, agent_names: Sequence[str] = ("agent",), **kwargs) -> MultiAgentPolicy:
        """One agent served by one model (L0). The policy is named after the agent."""
        names = _agent_list(agent_names)
        if len(names) != 1:
            raise ValueError(f"`agent_names` must hold exactly one name for a single agent, got {names}")
        return cls.from_mapping({names[0]: names[0]}, {names[0]: model}, arrangement="single", **kwargs)

    @classmethod
    def shared(
        cls, model: ModelSpec, agent_names: Sequence[str] | int, policy_name: str = SHARED_POLICY, **kwargs
    ) -> MultiAgentPolicy:
        """Every agent served by one model, policy ``"shared"`` (L1)."""
        names = _agent_list(agent_names)
        return cls.from_mapping(
            {a: policy_name for a in names}, {policy_name: model}, arrangement="shared", **kwargs
        )

    @classmethod
    def per_agent(
        cls,
        models: Mapping[str, ModelSpec] | Sequence[ModelSpec],
        agent_names: Sequence[str] | None = None,
        **kwargs,
    ) -> MultiAgentPolicy:
        """One model per agent (L3), each its own policy named after the agent. ``models`` is
        ``{agent: model}`` or a list (agents ``agent_names`` or ``agent_0``, ``agent_1``, ...)."""
        if isinstance(models, Mapping):
            if agent_names is not None:
                raise ValueError(
                    "`agent_names` must be None when `models` is a mapping (its keys name the agents)"
                )
            spec = dict(models)
        else:
            models = list(models)
            names = _agent_list(agent_names if agent_names is not None else len(models))
            if len(names) != len(models):
                raise ValueError(f"`agent_names` has {len(names)} names for {len(models)} models")
            spec = dict(zip(names, models))
        return cls.from_mapping({a: a for a in spec}, spec, arrangement="per_agent", **kwargs)

    @classmethod
    def lora(
        cls, base_model: ModelSpec, agent_names: Sequence[str] | int, lora_config, **kwargs
    ) -> MultiAgentPolicy:
        """One base model with one LoRA adapter per agent (L2); each adapter is a policy named after its
        agent. The base is frozen; ``trainable_parameters(agent)`` is that agent's adapter."""
        names = _agent_list(agent_names)
        return cls.from_mapping(
            {a: a for a in names},
            base_model=base_model,
            lora_config=lora_config,
            arrangement="lora",
            **kwargs,
        )

    @classmethod
    def from_mapping(
        cls,
        agent_to_policy: Mapping[str, str],
        policies: Mapping[str, ModelSpec] | None = None,
        *,
        base_model: ModelSpec | None = None,
        lora_config=None,
        tokenizer=None,
        device: str | torch.device | Mapping[str, str] | None = None,
        dtype: torch.dtype | None = None,
        seed: int = 0,
        arrangement: str | None = None,
    ) -> MultiAgentPolicy:
        """Any agent -> policy mapping, agents in the mapping's order.

        Either ``policies`` maps each policy name to a model (object, local path or preset name), or
        ``base_model`` and ``lora_config`` make every policy a LoRA adapter on that one base. ``tokenizer``
        is one tokenizer (object or path) or ``{policy: tokenizer}``; by default it is loaded from the
        model's folder. ``device`` is one device or ``{policy or agent: device}``; models given as objects
        stay where they are unless a device is named. ``dtype`` defaults to bf16 where supported, else
        float32 (models loaded by name) and to the object's own dtype (models given as objects).
        """
        if not isinstance(agent_to_policy, Mapping) or not agent_to_policy:
            raise ValueError("`agent_to_policy` must be a non-empty mapping of agent name -> policy name")
        mapping = dict(agent_to_policy)
        _agent_list(list(mapping), "agent_to_policy")
        policy_names = list(dict.fromkeys(mapping.values()))
        for name in policy_names:
            _check_policy_name(name, "policy name in `agent_to_policy`")
        devices = _normalise_devices(device, mapping, policy_names)

        if (base_model is None) != (lora_config is None):
            raise ValueError("`base_model` and `lora_config` must be given together (LoRA arrangement)")
        groups: list[_Group] = []
        handles: dict[str, PolicyHandle] = {}
        if base_model is not None:
            if policies is not None:
                raise ValueError(
                    "give either `policies` (one model per policy) or `base_model` + `lora_config`"
                )
            group_devices = {devices.get(p) for p in policy_names}
            if len(group_devices) > 1:
                raise ValueError(
                    f"LoRA adapters share one base model, so one device; `device` names {group_devices}"
                )
            base, source = _materialise(base_model, group_devices.pop(), dtype, seed, "base_model")
            if _is_peft(base):
                raise ValueError("`base_model` must be a plain model; it is already a peft model")
            tok = _tokenizer_for(tokenizer, LORA_GROUP, base, source, seed)
            peft_model = make_lora_model(base, policy_names, lora_config, seed=derive_seed(seed, "lora"))
            groups.append(_Group(LORA_GROUP, "lora", peft_model, tok, policy_names))
            for name in policy_names:
                handles[name] = PolicyHandle(name, peft_model, tok, adapter=name)
        else:
            if policies is None:
                raise ValueError("`policies` must map each policy name to a model (or give `base_model`)")
            missing = [p for p in policy_names if p not in policies]
            if missing:
                raise ValueError(f"`policies` lacks a model for {missing}; it names {list(policies)}")
            extra = [p for p in policies if p not in policy_names]
            if extra:
                raise ValueError(f"`policies` names {extra}, which serve no agent in `agent_to_policy`")
            seen: dict[int, str] = {}
            for name in policy_names:
                spec = policies[name]
                if isinstance(spec, nn.Module):
                    if id(spec) in seen:
                        raise ValueError(
                            f"policies {seen[id(spec)]!r} and {name!r} were given the same model object; map "
                            f"both agents to one policy instead (e.g. MultiAgentPolicy.shared)"
                        )
                    seen[id(spec)] = name
                    if _is_peft(spec):
                        raise ValueError(
                            f"policy {name!r}: a peft model is not a plain model policy; use "
                            f"MultiAgentPolicy.lora / from_mapping(base_model=..., lora_config=...)"
                        )
                model, source = _materialise(spec, devices.get(name), dtype, seed, f"policies[{name!r}]")
                tok = _tokenizer_for(tokenizer, name, model, source, seed)
                groups.append(_Group(name, "model", model, tok, [name]))
                handles[name] = PolicyHandle(name, model, tok)
        if arrangement is None:
            arrangement = _infer_arrangement(mapping, groups)
        return cls(mapping, handles, groups, arrangement)

    # ----------------------------------------------------------------------------------- addressing
    @property
    def agents(self) -> list[str]:
        """Agent names in index order."""
        return list(self._agents)

    @property
    def num_agents(self) -> int:
        return len(self._agents)

    @property
    def policies(self) -> list[str]:
        return list(self._handles)

    @property
    def handles(self) -> Mapping[str, PolicyHandle]:
        """Live ``{policy: handle}`` view for the rollout backends (versions update in place)."""
        return MappingProxyType(self._handles)

    def agent_name(self, agent: AgentRef) -> str:
        """Agent name from an index or a name."""
        if isinstance(agent, bool) or not isinstance(agent, (int, str)):
            raise TypeError(f"`agent` must be an index or a name, got {agent!r}")
        if isinstance(agent, int):
            if not -len(self._agents) <= agent < len(self._agents):
                raise IndexError(f"agent index {agent} out of range for {len(self._agents)} agents")
            return self._agents[agent]
        if agent not in self._agent_to_policy:
            raise KeyError(f"unknown agent {agent!r}; agents: {self._agents}")
        return agent

    def policy_name(self, agent: AgentRef) -> str:
        """The policy that acts for ``agent`` (index or name)."""
        return self._agent_to_policy[self.agent_name(agent)]

    def agents_of(self, policy: str) -> list[str]:
        """Agents served by ``policy``, in index order."""
        self.handle(policy)
        return [a for a in self._agents if self._agent_to_policy[a] == policy]

    def handle(self, agent_or_policy: AgentRef) -> PolicyHandle:
        """The handle of a policy name, or of the policy serving an agent (index or name)."""
        if isinstance(agent_or_policy, str) and agent_or_policy in self._handles:
            return self._handles[agent_or_policy]
        if isinstance(agent_or_policy, str) and agent_or_policy not in self._agent_to_policy:
            known = f"agents {self._agents}, policies {list(self._handles)}"
            raise KeyError(f"{agent_or_policy!r} is neither an agent nor a policy; {known}")
        return self._handles[self.policy_name(agent_or_policy)]

    def device(self, agent_or_policy: AgentRef) -> torch.device:
        return _model_device(self.handle(agent_or_policy).model)

    def dtype(self, agent_or_policy: AgentRef) -> torch.dtype:
        return _model_dtype(self.handle(agent_or_policy).model)

    def models(self) -> list[nn.Module]:
        """Each distinct model once (a LoRA arrangement has one)."""
        return [g.model for g in self._groups]

    # ----------------------------------------------------------------------------------- training
    def named_trainable_parameters(self, agent_or_policy: AgentRef) -> list[tuple[str, nn.Parameter]]:
        """What an optimizer for this agent's policy should hold: a LoRA policy's adapter weights (active
        or not), else the model's parameters that require grad. Agents sharing a policy share these."""
        handle = self.handle(agent_or_policy)
        if handle.adapter is not None:
            return adapter_parameters(handle.model, handle.adapter)
        return [(n, p) for n, p in handle.model.named_parameters() if p.requires_grad]

    def trainable_parameters(self, agent_or_policy: AgentRef) -> list[nn.Parameter]:
        return [p for _, p in self.named_trainable_parameters(agent_or_policy)]

    @contextmanager
    def activate(self, agent_or_policy: AgentRef) -> Iterator[PolicyHandle]:
        """Within the block, forward passes of the handle's model use this agent's adapter, and only that
        adapter takes gradients (peft's ``set_adapter`` freezes the others). The previously active adapter
        is restored on exit. A no-op for plain models."""
        handle = self.handle(agent_or_policy)
        if handle.adapter is None:
            yield handle
            return
        model = handle.model
        previous = model.active_adapter
        if previous != handle.adapter:
            model.set_adapter(handle.adapter)
        try:
            yield handle
        finally:
            if previous != handle.adapter:
                model.set_adapter(previous)

    def bump_version(self, agent_or_policy: AgentRef) -> int:
        """Count one more optimizer step on this policy's weights; returns the new version."""
        handle = self.handle(agent_or_policy)
        handle.version += 1
        return handle.version

    def version(self, agent_or_policy: AgentRef) -> int:
        return self.handle(agent_or_policy).version

    # ----------------------------------------------------------------------------------- save / load
    def layout(self) -> dict:
        """The JSON description written as ``policy_layout.json``."""
        groups = {}
        for group in self._groups:
            groups[group.key] = {
                "kind": group.kind,
                "path": group.key,
                "policies": list(group.policies),
                "device": str(_model_device(group.model)),
                "dtype": _dtype_name(_model_dtype(group.model)),
            }
        policies = {
            name: {
                "group": g.key,
                "adapter": self._handles[name].adapter,
                "version": self._handles[name].version,
            }
            for g in self._groups
            for name in g.policies
        }
        return {
            "format": LAYOUT_FORMAT,
            "format_version": LAYOUT_VERSION,
            "arrangement": self.arrangement,
            "agents": list(self._agents),
            "agent_to_policy": dict(self._agent_to_policy),
            "policies": policies,
            "groups": groups,
        }

    def save(self, directory: str | os.PathLike) -> Path:
        """Write one folder per policy (a LoRA arrangement: base once, one folder per adapter) and
        ``policy_layout.json``. Each folder is replaced atomically; the layout file is written last."""
        directory = Path(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(directory, exc) from exc
        # Every folder is written before any is replaced, so a failed write changes nothing there.
        scratches: list[tuple[Path, Path]] = []
        try:
            for group in self._groups:
                scratch = scratch_dir(directory, group.key)
                scratches.append((scratch, directory / group.key))
                if group.kind == "model":
                    group.model.save_pretrained(scratch)
                    group.tokenizer.save_pretrained(scratch)
                else:
                    save_base(group.model, scratch / "base")
                    group.tokenizer.save_pretrained(scratch / "base")
                    for policy in group.policies:
                        save_adapter(
                            group.model, self._handles[policy].adapter, scratch / "adapters" / policy
                        )
                    atomic_write_json(
                        scratch / LORA_GROUP_FILE,
                        {
                            "base": "base",
                            "adapters": {p: f"adapters/{p}" for p in group.policies},
                            "agents": {p: self.agents_of(p) for p in group.policies},
                        },
                    )
            for scratch, final in scratches:
                atomic_replace_dir(scratch, final)
            atomic_write_json(directory / LAYOUT_FILE, self.layout())
        except BaseException as exc:
            for scratch, _ in scratches:
                shutil.rmtree(scratch, ignore_errors=True)
            wrapped = write_error(directory, exc, note="the policies saved there before are unchanged")
            if wrapped is None:
                raise
            raise wrapped from exc
        return directory

    @classmethod
    def load(
        cls,
        directory: str | os.PathLike,
        device: str | torch.device | Mapping[str, str] | None = None,
        dtype: torch.dtype | None = None,
    ) -> MultiAgentPolicy:
        """Rebuild a saved policy arrangement. ``device`` (one, or ``{policy or agent: device}``) and
        ``dtype`` default to what was saved."""
        from comlrl.models import load_model, load_tokenizer

        directory = Path(directory)
        layout = read_layout(directory)
        check_weight_files(directory, layout)
        mapping = layout["agent_to_policy"]
        devices = _normalise_devices(device, mapping, list(layout["policies"]))
        groups: list[_Group] = []
        handles: dict[str, PolicyHandle] = {}
        for key, info in layout["groups"].items():
            wanted = {devices.get(p) for p in info["policies"]} - {None}
            if len(wanted) > 1:
                raise ValueError(f"policies {info['policies']} share one model but `device` names {wanted}")
            dev = _check_device(wanted.pop() if wanted else info["device"], f"policy folder {key!r}")
            dt = dtype or getattr(torch, info["dtype"])
            path = directory / info["path"]
            if info["kind"] == "model":
                model = load_model(path, device=dev, dtype=dt)
                tok = load_tokenizer(path)
            elif info["kind"] == "lora":
                base = load_model(path / "base", device=dev, dtype=dt)
                tok = load_tokenizer(path / "base")
                adapters = {p: path / "adapters" / layout["policies"][p]["adapter"] for p in info["policies"]}
                model = load_lora_model(base, adapters)
            else:
                raise ValueError(
                    f"{directory / LAYOUT_FILE}: group {key!r} has unknown kind {info['kind']!r}"
                )
            groups.append(_Group(key, info["kind"], model, tok, list(info["policies"])))
            for p in info["policies"]:
                entry = layout["policies"][p]
                handles[p] = PolicyHandle(
                    p, model, tok, adapter=entry["adapter"], version=int(entry["version"])
                )
        return cls(mapping, handles, groups, layout["arrangement"])

    def load_weights_(self, directory: str | os.PathLike) -> None:
        """Copy saved weights and versions into this (same-arrangement) policy in place, so optimizers
        built on ``trainable_parameters`` keep valid references. A LoRA base is frozen and not reloaded."""
        from comlrl.models import load_model

        directory = Path(directory)
        layout = read_layout(directory)
        mine = self.layout()
        for field in ("agents", "agent_to_policy"):
            if layout[field] != mine[field]:
                raise ValueError(f"saved `{field}` {layout[field]} differs from this policy's {mine[field]}")
        for key, info in mine["groups"].items():
            saved = layout["groups"].get(key)
            if saved is None or saved["kind"] != info["kind"] or saved["policies"] != info["policies"]:
                raise ValueError(
                    f"saved policy folder {key!r} ({saved}) does not match this policy's ({info})"
                )
        check_weight_files(directory, layout)  # before the first weight is copied: no partial load
        for group in self._groups:
            path = directory / layout["groups"][group.key]["path"]
            if group.kind == "model":
                fresh = load_model(path, device="cpu", dtype=_model_dtype(group.model))
                group.model.load_state_dict(fresh.state_dict())
                del fresh
            else:
                for policy in group.policies:
                    adapter = self._handles[policy].adapter
                    load_adapter_weights_(
                        group.model, adapter, path / "adapters" / layout["policies"][policy]["adapter"]
                    )
        for policy, entry in layout["policies"].items():
            self._handles[policy].version = int(entry["version"])

    def __repr__(self) -> str:
        mapping = ", ".join(f"{a}->{p}" for a, p in self._agent_to_policy.items())
        return f"MultiAgentPolicy(arrangement={self.arrangement!r}, {mapping})"


def read_layout(directory: str | os.PathLike) -> dict:
    """The ``policy_layout.json`` of a saved policy folder, checked for format, version and fields."""
    path = Path(directory) / LAYOUT_FILE
    if not path.exists():
        raise FileNotFoundError(f"no {LAYOUT_FILE} in {directory}: not a saved MultiAgentPolicy folder")
    try:
        layout = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PolicyFileError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(layout, dict) or layout.get("format") != LAYOUT_FORMAT:
        found = layout.get("format") if isinstance(layout, dict) else type(layout).__name__
        raise PolicyFileError(f"{path}: `format` is {found!r}, expected {LAYOUT_FORMAT!r}")
    if layout.get("format_version") != LAYOUT_VERSION:
        raise PolicyFileError(
            f"{path}: `format_version` is {layout.get('format_version')!r}, this version of comlrl reads "
            f"{LAYOUT_VERSION}"
        )
    for key, kind in (("arrangement", str), ("agents", list), ("agent_to_policy", dict), ("policies", dict),
                      ("groups", dict)):
        if not isinstance(layout.get(key), kind):
            raise PolicyFileError(f"{path}: field {key!r} must be a {kind.__name__}, got {layout.get(key)!r}")
    return layout


def _check_safetensors(path: Path) -> None:
    """A safetensors file whose header parses and whose tensors all lie inside the file."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as handle:
            (header_len,) = struct.unpack("<Q", handle.read(8))
            if 8 + header_len > size:
                raise ValueError(f"its header needs {8 + header_len} bytes")
            header = json.loads(handle.read(header_len))
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (struct.error, ValueError, KeyError, TypeError, IndexError) as exc:
        raise PolicyFileError(f"{path}: not a whole safetensors file ({size} bytes; {exc})") from None
    if 8 + header_len + end > size:
        raise PolicyFileError(
            f"{path}: truncated safetensors file ({size} bytes, its header describes {8 + header_len + end})"
        )


def _check_model_folder(path: Path, weights: Sequence[str]) -> None:
    if not path.is_dir():
        raise PolicyFileError(f"{path}: saved policy folder is missing")
    if not any((path / name).is_file() for name in weights):
        raise PolicyFileError(f"{path}: no weights file ({' or '.join(weights)}) in the saved policy folder")
    for file in sorted(path.glob("*.safetensors")):
        _check_safetensors(file)


def check_weight_files(directory: str | os.PathLike, layout: Mapping) -> None:
    """Every folder and weights file a layout names is there and whole (safetensors headers and sizes);
    raises :class:`PolicyFileError` naming the first that is not."""
    directory = Path(directory)
    model_weights = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
    for info in layout["groups"].values():
        path = directory / info["path"]
        if info["kind"] == "model":
            _check_model_folder(path, model_weights)
            if not (path / "config.json").is_file():
                raise PolicyFileError(f"{path / 'config.json'}: file is missing from the saved policy folder")
        elif info["kind"] == "lora":
            _check_model_folder(path / "base", model_weights)
            for policy in info["policies"]:
                adapter = path / "adapters" / layout["policies"][policy]["adapter"]
                _check_model_folder(adapter, ("adapter_model.safetensors", "adapter_model.bin"))


def _normalise_devices(device, mapping: Mapping[str, str], policy_names: Sequence[str]) -> dict[str, str]:
    """``{policy: device}`` from one device, or a mapping keyed by policy or agent names."""
    if device is None:
        return {}
    if isinstance(device, Mapping):
        out: dict[str, str] = {}
        for key, value in device.items():
            policy = key if key in policy_names else mapping.get(key)
            if policy is None:
                raise ValueError(f"`device` names {key!r}, which is neither a policy nor an agent")
            if policy in out and out[policy] != str(value):
                raise ValueError(
                    f"`device` gives policy {policy!r} two devices: {out[policy]!r} and {value!r}"
                )
            out[policy] = _check_device(str(value), f"`device[{key!r}]`")
        return out
    dev = _check_device(str(device), "`device`")
    return {p: dev for p in policy_names}


def _materialise(
    spec: ModelSpec, device: str | None, dtype, seed: int, field: str
) -> tuple[nn.Module, str | None]:
    """(model, folder it came from or None) from an object, a local path or a preset name."""
    from comlrl.models import load_model, resolve_model_path

    if isinstance(spec, nn.Module):
        if device is not None:
            spec = spec.to(device)
        if dtype is not None:
            spec = spec.to(dtype)
        return spec, None
    if isinstance(spec, (str, os.PathLike)):
        source = str(resolve_model_path(spec, seed=seed))
        return load_model(source, device=device or "cpu", dtype=dtype), source
    raise TypeError(f"`{field}` must be a model, a local path or a preset name, got {type(spec).__name__}")


def _tokenizer_for(tokenizer, policy: str, model: nn.Module, source: str | None, seed: int):
    from comlrl.models import load_tokenizer

    if isinstance(tokenizer, Mapping):
        tokenizer = tokenizer.get(policy)
    if isinstance(tokenizer, (str, os.PathLike)):
        return load_tokenizer(tokenizer, seed=seed)
    if tokenizer is not None:
        return tokenizer
    if source is None:
        name = getattr(model, "name_or_path", "") or ""
        if name and Path(name).is_dir():
            source = name
    if source is None:
        raise ValueError(
            f"policy {policy!r}: no tokenizer; pass `tokenizer=` when a model is given as an object that "
            f"was not loaded from a local folder"
        )
    return load_tokenizer(source, seed=seed)


def _infer_arrangement(mapping: Mapping[str, str], groups: Sequence[_Group]) -> str:
    if any(g.kind == "lora" for g in groups):
        return "lora"
    if len(mapping) == 1:
        return "single"
    if len(groups) == 1:
        return "shared"
    if len(set(mapping.values())) == len(mapping):
        return "per_agent"
    return "mapping"
