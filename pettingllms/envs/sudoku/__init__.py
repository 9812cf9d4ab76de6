"""Sudoku: complete a grid with a unique solution (tool agent + plan agent, or one agent)."""

from pettingllms.envs.sudoku.agents import SudokuPlanAgent, SudokuSingleAgent, SudokuToolAgent
from pettingllms.envs.sudoku.env import SudokuConfig, SudokuEnv
from pettingllms.envs.sudoku.state import SudokuPuzzle, SudokuState

__all__ = [
    "SudokuConfig",
    "SudokuEnv",
    "SudokuPlanAgent",
    "SudokuPuzzle",
    "SudokuSingleAgent",
    "SudokuState",
    "SudokuToolAgent",
]
