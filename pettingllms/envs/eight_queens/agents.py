"""Eight Queens agents: tool agent (``check`` and optionally ``python``), plan agent, single agent."""

from __future__ import annotations

from typing import ClassVar

from pettingllms.envs.eight_queens.env import SPEC
from pettingllms.envs.game import GameSpec, PlanAgent, SingleAgent, ToolAgent


class EightQueensToolAgent(ToolAgent):
    spec: ClassVar[GameSpec] = SPEC


class EightQueensPlanAgent(PlanAgent):
    spec: ClassVar[GameSpec] = SPEC


class EightQueensSingleAgent(SingleAgent):
    spec: ClassVar[GameSpec] = SPEC
