"""comlrl trainers: preference learning (MADPO, MARLHF), the MAGRPO family and actor-critic.

As in the public library, ``MADPOConfig`` and ``MADPOTrainer`` are re-exported here; they load on first
access, so ``import comlrl.trainers`` stays light.
"""

import importlib
from typing import Any

_LAZY = {
    "MADPOConfig": "comlrl.trainers.preference",
    "MADPOTrainer": "comlrl.trainers.preference",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'comlrl.trainers' has no attribute {name!r}")
