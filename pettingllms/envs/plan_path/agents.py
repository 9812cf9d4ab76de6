"""Plan-Path agents: tool agent (``simulate`` and optionally ``python``), plan agent, single agent."""

from __future__ import annotations

from typing import ClassVar

from pettingllms.envs.game import GameSpec, PlanAgent, SingleAgent, ToolAgent
from pettingllms.envs.plan_path.env import SPEC


class PlanPathToolAgent(ToolAgent):
    spec: ClassVar[GameSpec] = SPEC


class PlanPathPlanAgent(PlanAgent):
    spec: ClassVar[GameSpec] = SPEC


class PlanPathSingleAgent(SingleAgent):
    spec: ClassVar[GameSpec] = SPEC
