"""Sokoban: push every box onto a goal (tool agent + plan agent, or one agent)."""

from pettingllms.envs.sokoban.agents import SokobanPlanAgent, SokobanSingleAgent, SokobanToolAgent
from pettingllms.envs.sokoban.env import SokobanConfig, SokobanEnv
from pettingllms.envs.sokoban.state import SokobanLevel, SokobanState

__all__ = [
    "SokobanConfig",
    "SokobanEnv",
    "SokobanLevel",
    "SokobanPlanAgent",
    "SokobanSingleAgent",
    "SokobanState",
    "SokobanToolAgent",
]
