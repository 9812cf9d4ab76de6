"""Several named LoRA adapters on one base model: the names now live in :mod:`comlrl.models.lora` (below both
the rollout and the policy layers); this module keeps them importable from where they were first published."""

from comlrl.models.lora import (
    adapter_parameters,
    base_state_dict,
    load_adapter_weights_,
    load_lora_model,
    make_lora_model,
    save_adapter,
    save_base,
)

__all__ = [
    "adapter_parameters",
    "base_state_dict",
    "load_adapter_weights_",
    "load_lora_model",
    "make_lora_model",
    "save_adapter",
    "save_base",
]
