"""Blocksworld: restack lettered blocks into a goal configuration (tool agent + plan agent, or one agent)."""

from pettingllms.envs.blocksworld.agents import (
    BlocksworldPlanAgent,
    BlocksworldSingleAgent,
    BlocksworldToolAgent,
)
from pettingllms.envs.blocksworld.env import BlocksworldConfig, BlocksworldEnv
from pettingllms.envs.blocksworld.state import BlocksProblem, BlocksState

__all__ = [
    "BlocksProblem",
    "BlocksState",
    "BlocksworldConfig",
    "BlocksworldEnv",
    "BlocksworldPlanAgent",
    "BlocksworldSingleAgent",
    "BlocksworldToolAgent",
]
