"""Scripted policies of the household environment: play it without a model (``pettingllms eval --policy
oracle | random | scripted:wrong``, the ``sft`` stage's demonstrations).

* :class:`HouseholdOraclePolicy`: plays the game's own winning policy from the current state (TextWorld's
  ``policy_commands``, ALFWorld's expert plan): the planner names its next milestone (the first command of the
  next ``subgoal_horizon`` that is not a move, :meth:`~pettingllms.envs.household.env.HouseholdEnv.oracle_subgoal`),
  the actor / single agent plays its next command. It therefore wins from any state the game can still be won
  from (also after a random detour), within the policy's length.
* :class:`WrongHouseholdPolicy`: the planner's sub-goal and the actor's command are ``look``, which is
  admissible and changes nothing: never off the rules, never any progress.
* :class:`RandomHouseholdPolicy`: a uniformly drawn admissible command for every role, from a generator the
  policy owns (``rng``, seeded by ``seed``; the engine reseeds it per request).

All answer with text through the agents' formatters, so parsing, the game and the rewards run as for a model.
"""

from __future__ import annotations

import random
from typing import Any

__all__ = ["HouseholdOraclePolicy", "RandomHouseholdPolicy", "WrongHouseholdPolicy"]


class HouseholdOraclePolicy:
    """The game's winning policy: its next milestone as the planner's sub-goal, its next command for the actor
    and the single agent (see the module docstring)."""

    def respond(self, agent: Any, env: Any) -> str:
        if agent.role == "planner":
            return agent.format_response(env.oracle_subgoal(env.state))
        return agent.format_response(env.oracle_command(env.state))


class WrongHouseholdPolicy:
    """``look`` for every role: admissible, and it never changes the world."""

    def respond(self, agent: Any, env: Any) -> str:
        return agent.format_response("look")


class RandomHouseholdPolicy:
    """A uniformly drawn admissible command for every role (``look`` where the game lists none)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def respond(self, agent: Any, env: Any) -> str:
        admissible = env.state.view.admissible
        return agent.format_response(self.rng.choice(admissible) if admissible else "look")
