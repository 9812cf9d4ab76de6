"""Blocksworld agents: tool agent (``simulate`` and optionally ``python``), plan agent, single agent."""

from __future__ import annotations

from typing import ClassVar

from pettingllms.envs.blocksworld.env import SPEC
from pettingllms.envs.game import GameSpec, PlanAgent, SingleAgent, ToolAgent


class BlocksworldToolAgent(ToolAgent):
    spec: ClassVar[GameSpec] = SPEC


class BlocksworldPlanAgent(PlanAgent):
    spec: ClassVar[GameSpec] = SPEC


class BlocksworldSingleAgent(SingleAgent):
    spec: ClassVar[GameSpec] = SPEC
