"""Several named LoRA adapters on one base model (peft): build, per-adapter parameters, save and load.

Each adapter is one agent's policy. peft's ``set_adapter`` makes the active adapter the only trainable one;
:func:`adapter_parameters` names an adapter's parameters whether it is active or not, so a trainer's
optimizer for agent ``i`` holds exactly agent ``i``'s adapter.

This module sits below both the rollout layer (:mod:`comlrl.rollout.vllm` ships a LoRA policy's base and
adapter to its engine) and the policy layer (:mod:`comlrl.policy`), so neither imports the other for it;
:mod:`comlrl.policy.lora` re-exports its names from where they were first published.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn


def make_lora_model(
    base_model: nn.Module, adapter_names: Sequence[str], lora_config, seed: int = 0
) -> nn.Module:
    """Wrap ``base_model`` (modified in place) in a ``PeftModel`` with one adapter per name.

    All adapters start from ``lora_config`` (peft initialises each one independently, B = 0 by default).
    peft draws the initial adapter weights from torch's global stream; they are drawn here from ``seed``
    in a forked stream, so the same seed builds the same adapters and the caller's stream is untouched.
    The base weights are frozen; the first adapter is active.
    """
    from peft import get_peft_model

    if not adapter_names:
        raise ValueError("`adapter_names` must name at least one adapter")
    if len(set(adapter_names)) != len(adapter_names):
        raise ValueError(f"`adapter_names` must be distinct, got {list(adapter_names)}")
    names = list(adapter_names)
    prefix = getattr(lora_config, "prefix", None) or "lora_"
    for name in names:
        # peft finds an adapter's weights by name inside keys that contain its tuner prefix; a name that is
        # part of that prefix ("a", "lo", ...) can load another tensor in its place.
        if name in prefix:
            raise ValueError(
                f"adapter name {name!r} is part of peft's key prefix {prefix!r}; use a longer name"
            )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        peft_model = get_peft_model(base_model, lora_config, adapter_name=names[0])
        for name in names[1:]:
            peft_model.add_adapter(name, lora_config)
    peft_model.set_adapter(names[0])
    return peft_model


def adapter_parameters(peft_model: nn.Module, adapter: str) -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) of every weight of ``adapter``, in module order, whatever adapter is active."""
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.other import ModulesToSaveWrapper

    if adapter not in getattr(peft_model, "peft_config", {}):
        raise KeyError(f"adapter {adapter!r} is not on this model; adapters: {list(peft_model.peft_config)}")
    names = {id(p): n for n, p in peft_model.named_parameters(remove_duplicate=False)}
    found: list[tuple[str, nn.Parameter]] = []
    seen: set[int] = set()
    for module in peft_model.modules():
        holders = []
        if isinstance(module, BaseTunerLayer):
            holders = [getattr(module, layer_name) for layer_name in module.adapter_layer_names]
        elif isinstance(module, ModulesToSaveWrapper):
            holders = [module.modules_to_save]
        for holder in holders:
            if adapter not in holder:
                continue
            entry = holder[adapter]
            params = [entry] if isinstance(entry, nn.Parameter) else list(entry.parameters())
            for param in params:
                if id(param) not in seen:
                    seen.add(id(param))
                    found.append((names[id(param)], param))
    return found


def base_state_dict(peft_model: nn.Module) -> dict[str, torch.Tensor]:
    """The base model's own state dict, LoRA layers unwrapped (``q_proj.base_layer.weight`` ->
    ``q_proj.weight``) and adapter weights left out: what a plain model of the base's class loads."""
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.other import ModulesToSaveWrapper

    base = peft_model.get_base_model()
    wrapped = {
        name: ("base_layer." if isinstance(module, BaseTunerLayer) else "original_module.")
        for name, module in base.named_modules()
        if isinstance(module, (BaseTunerLayer, ModulesToSaveWrapper))
    }
    clean: dict[str, torch.Tensor] = {}
    for key, value in base.state_dict().items():
        owner = _longest_owner(key, wrapped)
        if owner is None:
            clean[key] = value
            continue
        rest = key[len(owner) + 1 :]
        inner = wrapped[owner]
        if rest.startswith(inner):
            clean[f"{owner}.{rest[len(inner) :]}"] = value
        # anything else under a wrapper is an adapter's weight: not part of the base
    return clean


def _longest_owner(key: str, owners: dict[str, str]) -> str | None:
    """The deepest wrapper module whose path prefixes ``key`` (wrappers can nest)."""
    parts = key.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in owners:
            return prefix
    return None


def save_base(peft_model: nn.Module, directory: str | os.PathLike) -> Path:
    """Write the base weights and config (no adapters) as a standard checkpoint folder."""
    directory = Path(directory)
    peft_model.get_base_model().save_pretrained(directory, state_dict=base_state_dict(peft_model))
    return directory


def save_adapter(peft_model: nn.Module, adapter: str, directory: str | os.PathLike) -> Path:
    """Write one adapter in peft's format (``adapter_config.json`` + ``adapter_model.safetensors``)
    directly into ``directory``."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".tmp-adapter-{adapter}-", dir=directory.parent))
    try:
        peft_model.save_pretrained(scratch, selected_adapters=[adapter])
        # peft writes the adapter named "default" at the root and any other one in a subfolder.
        written = scratch if adapter == "default" else scratch / adapter
        if not (written / "adapter_config.json").exists():
            raise RuntimeError(f"peft did not write adapter {adapter!r} where expected ({written})")
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir()
        for name in ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin"):
            if (written / name).exists():
                os.replace(written / name, directory / name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return directory


def load_lora_model(base_model: nn.Module, adapter_dirs: dict[str, Path]) -> nn.Module:
    """A ``PeftModel`` on ``base_model`` with each saved adapter loaded under its name, trainable."""
    from peft import PeftModel

    items = list(adapter_dirs.items())
    if not items:
        raise ValueError("`adapter_dirs` must name at least one adapter")
    first_name, first_dir = items[0]
    peft_model = PeftModel.from_pretrained(base_model, first_dir, adapter_name=first_name, is_trainable=True)
    for name, directory in items[1:]:
        peft_model.load_adapter(directory, adapter_name=name, is_trainable=True)
    peft_model.set_adapter(first_name)
    return peft_model


def load_adapter_weights_(peft_model: nn.Module, adapter: str, directory: str | os.PathLike) -> None:
    """Copy a saved adapter's weights into the existing ``adapter`` in place (optimizers keep their
    parameter references)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    directory = Path(directory)
    weights = directory / "adapter_model.safetensors"
    if not weights.exists():
        raise FileNotFoundError(f"adapter {adapter!r}: no adapter_model.safetensors in {directory}")
    params = adapter_parameters(peft_model, adapter)
    before = {name: p.detach().clone() for name, p in params}
    state = load_file(str(weights), device=str(params[0][1].device))
    result = set_peft_model_state_dict(peft_model, state, adapter_name=adapter)
    missing = set(before) & set(result.missing_keys)
    if result.unexpected_keys or missing:
        with torch.no_grad():  # leave the model as it was
            for name, p in params:
                p.copy_(before[name])
        raise ValueError(
            f"adapter {adapter!r} in {directory} does not fit this model: "
            f"unexpected {list(result.unexpected_keys)[:5]}, missing {sorted(missing)[:5]}"
        )
