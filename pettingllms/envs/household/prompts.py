"""Household prompt text, built from the state (short: small models read it).

Every prompt puts the instruction first and what the answer depends on last: the planner and the actor see
the task, the score, the latest commands and what they did, the inventory and the room, and last the
commands the game accepts now, numbered (an answer may give the number). The actor sees the planner's
sub-goal right before that list. The game's winning policy is never shown.
"""

from __future__ import annotations

from pettingllms.envs.household.state import HouseholdState

__all__ = ["ACTOR_SYSTEM", "PLANNER_SYSTEM", "SINGLE_SYSTEM", "actor_lines", "planner_lines", "single_lines"]

_GAME = ("Household game: a text adventure in a house. Commands move you (go east), open containers (open "
         "fridge), take things (take apple from counter) and put them in or on something (insert apple into "
         "fridge, put mug on sofa).")
PLANNER_SYSTEM = (
    f"{_GAME}\nYou are the planner of a team: you write the next sub-goal, one command of the game the actor "
    "should get done next (it may first need other commands, such as walking there or opening a container); "
    "the actor then plays one command a turn. Answer with one line `#### <command>`, e.g. "
    "`#### take apple from counter` (a number picks a command from the list)."
)
ACTOR_SYSTEM = (
    f"{_GAME}\nYou are the actor of a team: you carry out the planner's sub-goal, one command a turn, chosen "
    "from the commands the game accepts now. Answer with one line `#### <command>` or `#### <number>` from "
    "the list; `#### subgoal` plays the sub-goal itself."
)
SINGLE_SYSTEM = (
    f"{_GAME}\nYou play alone: give one command a turn, chosen from the commands the game accepts now. Answer "
    "with one line `#### <command>` or `#### <number>` from the list."
)
_SHOWN_CHARS = 400


def _clip(text: str, limit: int = _SHOWN_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _head(state: HouseholdState, max_turns: int, instruction: str) -> list[str]:
    return [
        f"Turn {state.turn + 1} of {max_turns}. {instruction}",
        f"Task: {state.game.objective}",
        f"Score: {state.view.score} of {state.game.max_score}.",
    ]


def _recent(state: HouseholdState, shown: int) -> list[str]:
    if not state.log:
        return ["Recent commands: none yet."]
    lines = ["Recent commands:"]
    for entry in state.log[-shown:]:
        lines.append(f"- {_clip(entry.command, 80)} -> {_clip(entry.feedback, 160) or '(no answer)'}")
    return lines


def _scene(state: HouseholdState) -> list[str]:
    view = state.view
    lines = []
    if view.inventory:
        lines.append(f"Inventory: {_clip(view.inventory, 200)}")
    if view.description:
        lines.append(f"Room: {_clip(view.description)}")
    return lines


def _commands(state: HouseholdState) -> list[str]:
    return ["Commands now:"] + [f"{i}. {command}" for i, command in enumerate(state.view.admissible, 1)]


def _subgoal(state: HouseholdState) -> str:
    if state.subgoal is None:
        return "none yet"
    status = "reached" if state.subgoal_reached else "not reached yet"
    return f"{state.subgoal} (set in turn {state.subgoal_turn + 1}; {status})"


def planner_lines(state: HouseholdState, max_turns: int, shown: int) -> list[str]:
    return [
        *_head(state, max_turns, "Give the next sub-goal: `#### <command>`."),
        *_recent(state, shown),
        f"Current sub-goal: {_subgoal(state)}",
        *_scene(state),
        *_commands(state),
    ]


def actor_lines(state: HouseholdState, max_turns: int, shown: int) -> list[str]:
    return [
        *_head(state, max_turns, "Give one command: `#### <command>`."),
        *_recent(state, shown),
        *_scene(state),
        f"Planner's sub-goal: {state.subgoal if state.subgoal is not None else 'none yet'}",
        *_commands(state),
    ]


def single_lines(state: HouseholdState, max_turns: int, shown: int) -> list[str]:
    return [
        *_head(state, max_turns, "Give one command: `#### <command>`."),
        *_recent(state, shown),
        *_scene(state),
        *_commands(state),
    ]
