"""Sokoban agents: tool agent (``simulate`` and optionally ``python``), plan agent, single agent."""

from __future__ import annotations

from typing import ClassVar

from pettingllms.envs.game import GameSpec, PlanAgent, SingleAgent, ToolAgent
from pettingllms.envs.sokoban.env import SPEC


class SokobanToolAgent(ToolAgent):
    spec: ClassVar[GameSpec] = SPEC


class SokobanPlanAgent(PlanAgent):
    spec: ClassVar[GameSpec] = SPEC


class SokobanSingleAgent(SingleAgent):
    spec: ClassVar[GameSpec] = SPEC
