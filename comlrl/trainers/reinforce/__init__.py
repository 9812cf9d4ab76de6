"""The MAGRPO family (MAGRPO, MAREINFORCE, MARLOO, MAReMax): multi-agent REINFORCE on the task reward, and
MARLHF's RL stage. The trainer loads on first access, so importing the config stays light."""

import importlib
from typing import Any

from comlrl.trainers.reinforce.config import MAGRPOConfig, OnlineRLConfig

__all__ = ["MAGRPOConfig", "MAGRPOTrainer", "OnlineRLConfig"]


def __getattr__(name: str) -> Any:
    if name == "MAGRPOTrainer":
        return importlib.import_module("comlrl.trainers.reinforce.magrpo").MAGRPOTrainer
    raise AttributeError(f"module 'comlrl.trainers.reinforce' has no attribute {name!r}")
