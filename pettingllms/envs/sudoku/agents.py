"""Sudoku agents: tool agent (``check`` and optionally ``python``), plan agent, single agent."""

from __future__ import annotations

from typing import ClassVar

from pettingllms.envs.game import GameSpec, PlanAgent, SingleAgent, ToolAgent
from pettingllms.envs.sudoku.env import SPEC


class SudokuToolAgent(ToolAgent):
    spec: ClassVar[GameSpec] = SPEC


class SudokuPlanAgent(PlanAgent):
    spec: ClassVar[GameSpec] = SPEC


class SudokuSingleAgent(SingleAgent):
    spec: ClassVar[GameSpec] = SPEC
