"""Household rewards as small pure functions (a step's training reward is ``alpha * global + local``).

* **global** (:func:`global_reward`): the game's own score as a level: 1.0 when the game is won, else
  ``0.5 * score / max_score`` (the objects placed so far; ALFWorld scores only the win).
* **actor / single agent, local** (:func:`actor_local_reward`), by the command's outcome
  (:data:`ACTOR_OUTCOMES`): ``changed_reward`` (+0.2) when the command was admissible and changed the world
  (its facts differ afterwards), 0 when it was admissible but changed nothing (``look``, ``examine``), the
  ``inadmissible_reward`` (-0.5) when the game does not accept it (it is not played), the
  ``parse_error_reward`` (-1) when no command parsed; plus ``subgoal_reward`` (+0.5) when the command
  reached the planner's sub-goal (it *is* the sub-goal, played within ``subgoal_horizon`` turns of being set).
* **planner, local** (:func:`planner_local_reward`): ``on_path_reward`` (+1) when its sub-goal is one of the
  next ``subgoal_horizon`` commands of the game's own winning policy from the current state (TextWorld's
  ``policy_commands``, ALFWorld's expert plan), i.e. an actor that plays well reaches it within the next
  ``subgoal_horizon`` actor turns; 0 for any other sub-goal; ``parse_error_reward`` when none parsed.

Why the planner is scored on the policy and not on what the actor later does: the engine scores each step
right after it, and AT-GRPO compares the K candidates of one (problem, turn, agent) group. A reward paid
turns later could only be credited to a later planner step, where it is the same for every candidate of the
group and moves nothing; the realised reaching pays the actor that reaches it (``subgoal_reward``), and the
state counts it (``subgoals_set`` / ``subgoals_reached``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pettingllms.envs.household.parsers import command_key

__all__ = ["ACTOR_OUTCOMES", "actor_local_reward", "actor_outcome", "global_reward", "planner_local_reward",
           "subgoal_on_path"]

#: The actor's (and single agent's) command outcomes, best first.
ACTOR_OUTCOMES: tuple[str, ...] = ("changed", "no_change", "inadmissible", "parse_error")


def global_reward(won: bool, score: int, max_score: int) -> float:
    """1.0 when won, else ``0.5 * score / max_score`` clipped to [0, 0.5] (0 without a positive max score)."""
    if won:
        return 1.0
    if max_score <= 0:
        return 0.0
    return 0.5 * min(1.0, max(0.0, score / max_score))


def actor_outcome(*, parsed: bool, admissible: bool, changed: bool) -> str:
    """The outcome label of one command (see :data:`ACTOR_OUTCOMES`)."""
    if not parsed:
        return "parse_error"
    if not admissible:
        return "inadmissible"
    return "changed" if changed else "no_change"


def actor_local_reward(
    outcome: str, reached_subgoal: bool, *, parse_error_reward: float, inadmissible_reward: float,
    changed_reward: float, subgoal_reward: float,
) -> float:
    """The actor's local reward for ``outcome``, plus ``subgoal_reward`` when it reached the sub-goal."""
    base = {"changed": changed_reward, "no_change": 0.0, "inadmissible": inadmissible_reward,
            "parse_error": parse_error_reward}
    if outcome not in base:
        raise ValueError(f"unknown actor outcome {outcome!r}; expected one of {ACTOR_OUTCOMES}")
    if reached_subgoal and outcome in ("inadmissible", "parse_error"):
        raise ValueError(f"a command with outcome {outcome!r} cannot reach a sub-goal")
    reward = base[outcome] + (subgoal_reward if reached_subgoal else 0.0)
    if not math.isfinite(reward):
        raise ValueError(f"actor reward is not finite: {reward}")
    return reward


def subgoal_on_path(subgoal: str, policy: Sequence[str], horizon: int) -> bool:
    """Whether ``subgoal`` is one of the first ``horizon`` commands of ``policy`` (spelling-insensitive)."""
    if horizon < 1:
        raise ValueError(f"`horizon` must be >= 1, got {horizon}")
    key = command_key(subgoal)
    return any(command_key(step) == key for step in list(policy)[:horizon])


def planner_local_reward(on_path: bool | None, *, parse_error_reward: float, on_path_reward: float) -> float:
    """The planner's local reward: ``on_path_reward`` on the path, 0 off it, ``parse_error_reward`` when no
    sub-goal parsed (``on_path`` None)."""
    if on_path is None:
        return parse_error_reward
    return on_path_reward if on_path else 0.0
