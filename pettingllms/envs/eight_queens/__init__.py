"""Eight Queens (N-Queens): complete a placement of non-attacking queens (tool agent + plan agent, or one agent)."""

from pettingllms.envs.eight_queens.agents import (
    EightQueensPlanAgent,
    EightQueensSingleAgent,
    EightQueensToolAgent,
)
from pettingllms.envs.eight_queens.env import EightQueensConfig, EightQueensEnv
from pettingllms.envs.eight_queens.state import QueensPuzzle, QueensState

__all__ = [
    "EightQueensConfig",
    "EightQueensEnv",
    "EightQueensPlanAgent",
    "EightQueensSingleAgent",
    "EightQueensToolAgent",
    "QueensPuzzle",
    "QueensState",
]
