"""The public library's import path ``comlrl.utils.reference_kl``: its reference-KL helpers, defined in
:mod:`comlrl.trainers.core.reference_kl` with the public meanings (docs/compatibility.md, section 8). For
users' scripts only: no comlrl module imports from here.
"""

from comlrl.trainers.core.reference_kl import (
    clone_reference_models,
    load_reference_models_from_sources,
    reference_kl_coef,
    reference_kl_enabled,
    reference_kl_for_sequence,
    resolve_reference_devices,
    validate_reference_kl_config,
)

__all__ = [
    "reference_kl_enabled",
    "reference_kl_coef",
    "validate_reference_kl_config",
    "resolve_reference_devices",
    "clone_reference_models",
    "load_reference_models_from_sources",
    "reference_kl_for_sequence",
]
