"""The household blackboard: which game, the commands played, what the game shows now, the planner's sub-goal.

Everything here is plain data. The running game lives outside the state (:mod:`pettingllms.envs.household.engine`):
the game's state is a function of its file and ``history``, so a deep copy of the state (two short lists and
references to immutable records) is a faithful, cheap copy of the episode.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pettingllms.envs.base import EnvState
from pettingllms.envs.household.engine import GameView

__all__ = ["GameInfo", "HouseholdState", "LoggedCommand"]


@dataclass(frozen=True)
class GameInfo:
    """One game, immutable (copies share it).

    - ``source``: ``textworld`` (a generated game) or ``alfworld``.
    - ``path``: the game file played (a compiled ``.z8`` / ALFWorld's ``game.tw-pddl``).
    - ``name``: a short id for transcripts.
    - ``objective``: the task as the game states it.
    - ``max_score``: the game's maximum score (objects to place; 1 for ALFWorld, which scores the win).
    - ``walkthrough``: a winning command sequence from the start (generated games; empty for ALFWorld).
    """

    source: str
    path: str
    name: str
    objective: str
    max_score: int
    walkthrough: tuple[str, ...] = ()

    def __deepcopy__(self, memo: dict) -> GameInfo:
        return self


@dataclass(frozen=True)
class LoggedCommand:
    """One command an actor (or single agent) gave: the turn, the command, whether the game accepted it
    (only admissible commands are played), and what the game answered (or why nothing happened)."""

    turn: int
    command: str
    admissible: bool
    feedback: str


@dataclass(kw_only=True)
class HouseholdState(EnvState):
    """The blackboard of one household episode.

    - ``game``: the game (:class:`GameInfo`).
    - ``view``: what the game shows after the latest command (:class:`~pettingllms.envs.household.engine.GameView`).
    - ``history``: the commands played in the game, in order (admissible ones only).
    - ``log``: every command the actor / single agent gave, admissible or not (:class:`LoggedCommand`).
    - ``subgoal``: the planner's current sub-goal (a command of the game), ``None`` before the first;
      ``subgoal_turn``: the turn it was set; ``subgoal_reached``: the actor has played it since.
    - ``subgoals_set`` / ``subgoals_reached``: counters over the episode.
    - ``inadmissible``: commands given that the game did not accept.
    - ``last_report``: what the latest step did, one line.
    """

    game: GameInfo
    view: GameView
    history: list[str] = field(default_factory=list)
    log: list[LoggedCommand] = field(default_factory=list)
    subgoal: str | None = None
    subgoal_turn: int = -1
    subgoal_reached: bool = False
    subgoals_set: int = 0
    subgoals_reached: int = 0
    inadmissible: int = 0
    last_report: str = ""
