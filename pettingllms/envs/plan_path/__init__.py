"""Plan-Path: reach the goal on a grid with walls (tool agent + plan agent, or one agent)."""

from pettingllms.envs.plan_path.agents import PlanPathPlanAgent, PlanPathSingleAgent, PlanPathToolAgent
from pettingllms.envs.plan_path.env import PlanPathConfig, PlanPathEnv
from pettingllms.envs.plan_path.state import PlanPathLevel, PlanPathState

__all__ = [
    "PlanPathConfig",
    "PlanPathEnv",
    "PlanPathLevel",
    "PlanPathPlanAgent",
    "PlanPathSingleAgent",
    "PlanPathState",
    "PlanPathToolAgent",
]
