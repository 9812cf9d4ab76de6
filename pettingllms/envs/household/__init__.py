"""Household: a planner and an actor finish a household task in a TextWorld text adventure.

Two sources: ``textworld`` (games generated and compiled locally with TextWorld's ``GameMaker``, cached per
seed and settings; the offline default) and ``alfworld`` (ALFWorld's games, an optional extra). The
environment (:class:`HouseholdEnv`), its agents (:class:`PlannerAgent`, :class:`ActorAgent`,
:class:`HouseholdSingleAgent`), the scripted policies, the parsers, the rewards, the game generator and the
pool of live games behind the plain-data states. TextWorld is imported only when a game is built or played.
"""

from pettingllms.envs.household.agents import ActorAgent, HouseholdSingleAgent, PlannerAgent
from pettingllms.envs.household.alfworld import HouseholdSetupError
from pettingllms.envs.household.engine import POOL, GamePool, GameView
from pettingllms.envs.household.env import HouseholdConfig, HouseholdEnv
from pettingllms.envs.household.generator import HouseholdSettings, HouseholdSpec, compiled_game, make_spec
from pettingllms.envs.household.parsers import Command, parse_command, parse_subgoal
from pettingllms.envs.household.scripted import (
    HouseholdOraclePolicy,
    RandomHouseholdPolicy,
    WrongHouseholdPolicy,
)
from pettingllms.envs.household.state import GameInfo, HouseholdState, LoggedCommand

__all__ = [
    "POOL",
    "ActorAgent",
    "Command",
    "GameInfo",
    "GamePool",
    "GameView",
    "HouseholdConfig",
    "HouseholdEnv",
    "HouseholdOraclePolicy",
    "HouseholdSettings",
    "HouseholdSetupError",
    "HouseholdSingleAgent",
    "HouseholdSpec",
    "HouseholdState",
    "LoggedCommand",
    "PlannerAgent",
    "RandomHouseholdPolicy",
    "WrongHouseholdPolicy",
    "compiled_game",
    "make_spec",
    "parse_command",
    "parse_subgoal",
]
