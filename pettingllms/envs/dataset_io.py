"""Where every dataset environment's normalised files live, shared by code, math and search without any of
them importing another (nor the sandbox): ``$PETTINGLLMS_DATA/<env>/<dataset>/<split>.jsonl``, default root
``~/.cache/pettingllms/data``.

Reading and writing those files (one record per line, written atomically) is :mod:`pettingllms.envs.records`;
this module names where they are. It imports no environment and not :mod:`pettingllms.sandbox`.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DATA_ENV", "data_root", "normalised_path"]

#: The environment variable naming the root of the normalised data.
DATA_ENV = "PETTINGLLMS_DATA"


def data_root() -> Path:
    """``$PETTINGLLMS_DATA``, else ``~/.cache/pettingllms/data``."""
    return Path(os.environ.get(DATA_ENV) or Path.home() / ".cache" / "pettingllms" / "data")


def normalised_path(dataset: str, split: str, env: str = "code") -> Path:
    """Where ``pettingllms dataprocess`` writes a split: ``$PETTINGLLMS_DATA/<env>/<dataset>/<split>.jsonl``."""
    return data_root() / env / dataset / f"{split}.jsonl"
