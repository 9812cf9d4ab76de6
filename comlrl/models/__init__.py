"""Models by name: built presets, the SmolLM2 preset, local checkpoints, or (where reachable) hub ids.

>>> from comlrl.models import resolve_model_path, load_model, load_tokenizer
>>> path = resolve_model_path("test-tiny")        # builds once into the cache, then instant
"""

from comlrl.models.builder import BUILT_PRESETS, TinyModelSpec, build_tiny, default_cache_dir
from comlrl.models.loading import (
    PRESETS,
    ModelNotFoundError,
    build_preset,
    load_model,
    load_tokenizer,
    resolve_model_path,
)
from comlrl.models.smollm2 import SMOLLM2_INSTALL_HINT, MissingOptionalModel

__all__ = [
    "BUILT_PRESETS",
    "PRESETS",
    "SMOLLM2_INSTALL_HINT",
    "MissingOptionalModel",
    "ModelNotFoundError",
    "TinyModelSpec",
    "build_preset",
    "build_tiny",
    "default_cache_dir",
    "load_model",
    "load_tokenizer",
    "resolve_model_path",
]
