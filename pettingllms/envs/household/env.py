"""The household environment: a planner and an actor finish a household task in a text adventure.

Sources (``env.source``):

- ``textworld`` (default, offline): games generated locally with TextWorld's ``GameMaker``
  (:mod:`pettingllms.envs.household.generator`): a few rooms with containers and supporters, objects lying in
  or on them, and a task to put ``quest_length`` of them somewhere. A seed and the settings (``rooms``,
  ``objects``, ``quest_length``, ``furniture``) make one game, compiled once into ``cache_dir`` and reused.
- ``alfworld``: ALFWorld's games (:mod:`pettingllms.envs.household.alfworld`), when the ``alfworld`` package
  and its data are installed; the seeds index a split's games (``alfworld_train_split`` for training,
  ``alfworld_split`` for evaluation).

Each turn the roles of ``turn_order`` act in order: the **planner** writes the next sub-goal (a command of the
game, possibly several commands away), the **actor** plays one command, chosen from the admissible ones. At
L0 the **single** agent plays alone. One turn is one command in the game; the episode ends when the game is
won or lost, or after ``max_turns``.

State copies (tree sampling's ``snapshot`` / ``restore`` / ``clone``) are deep copies of plain data: the game
state is its file plus the commands played, and :data:`~pettingllms.envs.household.engine.POOL` replays them on
a live game when a copy plays on (see :mod:`pettingllms.envs.household.engine` for the costs).

Rewards: :mod:`pettingllms.envs.household.rewards`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pettingllms.envs.base import BaseEnv, EnvConfig
from pettingllms.envs.household import rewards
from pettingllms.envs.household.alfworld import ALFWORLD_SPLITS, EXPERTS, TASK_TYPES
from pettingllms.envs.household.engine import POOL, GamePool, GameView, LiveGame, view_from_state
from pettingllms.envs.household.generator import HouseholdSettings
from pettingllms.envs.household.state import GameInfo, HouseholdState

__all__ = ["PLANNER_ROLE", "ACTOR_ROLE", "SINGLE_ROLE", "SOURCES", "HouseholdConfig", "HouseholdEnv", "TEXTWORLD_INFOS"]

PLANNER_ROLE, ACTOR_ROLE, SINGLE_ROLE = "planner", "actor", "single"
SOURCES: tuple[str, ...] = ("textworld", "alfworld")
#: What a generated game is asked for at every step (``textworld.EnvInfos`` keywords).
TEXTWORLD_INFOS: dict[str, Any] = dict(
    admissible_commands=True, policy_commands=True, score=True, max_score=True, won=True, lost=True, facts=True,
    description=True, inventory=True, feedback=True,
)


@dataclass(frozen=True)
class HouseholdConfig(EnvConfig):
    """Household settings (see :class:`~pettingllms.envs.base.EnvConfig` for the shared ones).

    > Games

    - ``source``: ``textworld`` (generated offline) or ``alfworld`` (ALFWorld's games; an optional extra).
    - ``rooms`` / ``objects`` / ``quest_length`` / ``furniture``: the generated games' difficulty
      (:class:`~pettingllms.envs.household.generator.HouseholdSettings`): rooms in the house, portable objects,
      objects the task asks to place (the maximum score), receptacles per room.
    - ``cache_dir``: where compiled games are kept (null: ``$PETTINGLLMS_DATA/household/games``).
    - ``alfworld_data``: the folder holding ALFWorld's ``json_2.1.1`` (null: ``$ALFWORLD_DATA``).
    - ``alfworld_split`` / ``alfworld_train_split``: the splits evaluation / training play (``train``,
      ``valid_seen``, ``valid_unseen``).
    - ``alfworld_task_types``: ALFWorld task-type ids to play (1 pick & place ... 6 pick two & place).
    - ``alfworld_expert``: ALFWorld's expert behind the oracle and the planner's reward: ``handcoded``
      (its next command) or ``planner`` (a whole plan; slow, needs fast-downward).

    > Rewards (:mod:`~pettingllms.envs.household.rewards`)

    - ``parse_error_reward``: local reward of a response that does not parse.
    - ``inadmissible_reward``: the actor's local reward for a command the game does not accept.
    - ``changed_reward``: the actor's local reward for an admissible command that changed the world.
    - ``subgoal_reward``: added to the actor's reward when its command reaches the planner's sub-goal.
    - ``on_path_reward``: the planner's local reward for a sub-goal on the game's winning path.
    - ``subgoal_horizon``: how many next commands of the winning policy count as "on the path", and within
      how many turns the actor must reach a sub-goal.

    > Prompts

    - ``history_shown``: recent commands (and what they did) shown in every prompt.
    """

    turn_order: tuple[str, ...] = (PLANNER_ROLE, ACTOR_ROLE)
    max_turns: int = 10
    source: str = "textworld"
    rooms: int = 2
    objects: int = 3
    quest_length: int = 1
    furniture: int = 2
    cache_dir: str | None = None
    alfworld_data: str | None = None
    alfworld_split: str = "valid_seen"
    alfworld_train_split: str = "train"
    alfworld_task_types: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
    alfworld_expert: str = "handcoded"
    parse_error_reward: float = -1.0
    inadmissible_reward: float = -0.5
    changed_reward: float = 0.2
    subgoal_reward: float = 0.5
    on_path_reward: float = 1.0
    subgoal_horizon: int = 3
    history_shown: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.source not in SOURCES:
            raise ValueError(f"`source` must be one of {list(SOURCES)}, got {self.source!r}")
        self.settings  # noqa: B018 - validates rooms / objects / quest_length / furniture
        for name in ("cache_dir", "alfworld_data"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"`{name}` must be a folder path or null, got {value!r}")
        for name in ("alfworld_split", "alfworld_train_split"):
            if getattr(self, name) not in ALFWORLD_SPLITS:
                raise ValueError(f"`{name}` must be one of {list(ALFWORLD_SPLITS)}, got {getattr(self, name)!r}")
        types = self.alfworld_task_types
        if isinstance(types, (str, int)) or not types or any(t not in TASK_TYPES or isinstance(t, bool) for t in types):
            raise ValueError(f"`alfworld_task_types` must be a non-empty list of ids from {sorted(TASK_TYPES)}, got {types!r}")
        object.__setattr__(self, "alfworld_task_types", tuple(types))
        if self.alfworld_expert not in EXPERTS:
            raise ValueError(f"`alfworld_expert` must be one of {list(EXPERTS)}, got {self.alfworld_expert!r}")
        for name in ("parse_error_reward", "inadmissible_reward", "changed_reward", "subgoal_reward", "on_path_reward"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"`{name}` must be a finite number, got {value!r}")
        for name in ("subgoal_horizon", "history_shown"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}")

    @property
    def settings(self) -> HouseholdSettings:
        """The generated games' difficulty settings."""
        return HouseholdSettings(self.rooms, self.objects, self.quest_length, self.furniture)

    @property
    def alfworld_played_split(self) -> str:
        """The ALFWorld split this environment plays: the training split when a training stage built it."""
        return self.alfworld_train_split if self.purpose == "train" else self.alfworld_split


def _textworld_starter(path: str):
    def start() -> LiveGame:
        import warnings

        import jericho
        import textworld

        with warnings.catch_warnings():  # "not fully supported" by Jericho: TextWorld tracks score and moves itself
            warnings.simplefilter("ignore", jericho.UnsupportedGameWarning)
            env = textworld.start(path, request_infos=textworld.EnvInfos(**TEXTWORLD_INFOS))
        return LiveGame(env, view_from_state)
    return start


def _alfworld_view(state: Any, first: bool = False) -> GameView:
    # ALFWorld's introduction holds the room and the task: it stays the first view's feedback (the env reads the
    # task from it, and the room); ALFWorld's expert plan stands for TextWorld's winning policy.
    return view_from_state(state, policy_key="extra.expert_plan")


def _alfworld_starter(path: str, expert: str):
    def start() -> LiveGame:
        from pettingllms.envs.household.alfworld import start_game

        return LiveGame(start_game(path, expert), _alfworld_view)
    return start


def split_intro(text: str) -> tuple[str, str]:
    """ALFWorld's first text as ``(room description, task)``: the task is its ``Your task is to: ...`` line."""
    marker = "Your task is to:"
    head, found, task = text.partition(marker)
    if not found:
        return text.strip(), ""
    room = head.replace("-= Welcome to TextWorld, ALFRED! =-", "").strip()
    return room, (marker + task).strip()


class HouseholdEnv(BaseEnv[HouseholdState]):
    """Household tasks in TextWorld games (see the module docstring). Success: the game is won; failure
    (ends the episode): the game is lost."""

    name: ClassVar[str] = "household"
    config_class: ClassVar[type[EnvConfig]] = HouseholdConfig
    roles: ClassVar[tuple[str, ...]] = (PLANNER_ROLE, ACTOR_ROLE, SINGLE_ROLE)
    scripted_policies = {
        "oracle": "pettingllms.envs.household.scripted:HouseholdOraclePolicy",
        "random": "pettingllms.envs.household.scripted:RandomHouseholdPolicy",
        "wrong": "pettingllms.envs.household.scripted:WrongHouseholdPolicy",
    }
    config: HouseholdConfig
    #: The pool games are played through (the process-wide one; tests may give an environment its own).
    pool: GamePool = POOL

    # ---- instances -----------------------------------------------------------------------------------
    def alfworld_games(self) -> tuple[str, ...]:
        """The ALFWorld game files the seeds index (see :func:`~pettingllms.envs.household.alfworld.game_files`)."""
        from pettingllms.envs.household.alfworld import game_files

        cfg = self.config
        return game_files(cfg.alfworld_data, cfg.alfworld_played_split, cfg.alfworld_task_types)

    def num_instances(self) -> int | None:
        return None if self.config.source == "textworld" else len(self.alfworld_games())

    def instance_id(self, seed: int) -> Any:
        if self.config.source == "textworld":
            return seed
        return str(Path(self._alfworld_path(seed)).parent)

    def _alfworld_path(self, seed: int) -> str:
        games = self.alfworld_games()
        if seed >= len(games):
            raise ValueError(
                f"`seed` {seed} is past the {len(games)} ALFWorld games of split {self.config.alfworld_played_split!r}: "
                f"seeds index them, 0 .. {len(games) - 1}"
            )
        return games[seed]

    def starter(self, game: GameInfo):
        """What starts a live game of ``game`` (for the pool)."""
        if game.source == "textworld":
            return _textworld_starter(game.path)
        return _alfworld_starter(game.path, self.config.alfworld_expert)

    def game_info(self, seed: int) -> GameInfo:
        """The game of ``seed``: generated and compiled on first use (``textworld``), or the split's
        ``seed``-th game (``alfworld``)."""
        cfg = self.config
        if cfg.source == "textworld":
            from pettingllms.envs.household.generator import compiled_game, read_game_metadata

            path = compiled_game(seed, cfg.settings, cfg.cache_dir)
            meta = read_game_metadata(path)
            return GameInfo("textworld", str(path), f"{meta['settings']}/seed{seed}", meta["objective"],
                            int(meta["max_score"]), tuple(meta["walkthrough"]))
        path = self._alfworld_path(seed)
        provisional = GameInfo("alfworld", path, Path(path).parent.parent.name, "", 1)
        intro = self.view_of(provisional, ()).feedback
        _, task = split_intro(intro)
        return GameInfo("alfworld", path, provisional.name, task or "finish the task the game states", 1)

    # ---- the game --------------------------------------------------------------------------------------
    def view_of(self, game: GameInfo, history: list[str] | tuple[str, ...]) -> GameView:
        """The view after playing ``history`` in ``game`` from its start (cached or replayed)."""
        return self.pool.view(game.path, tuple(history), self.starter(game))

    def initial_state(self, seed: int) -> HouseholdState:
        game = self.game_info(seed)
        view = self.view_of(game, ())
        if game.source == "alfworld":  # its introduction is the room (and the task, shown on its own)
            room, _ = split_intro(view.feedback)
            view = GameView("", view.description or room, view.inventory, view.admissible, view.score, view.won,
                            view.lost, view.policy, view.world)
        return HouseholdState(seed=seed, game=game, view=view)

    def play(self, state: HouseholdState, command: str) -> GameView:
        """Play admissible ``command`` in ``state``'s game: the history grows by it and the view is the game's
        answer. Returns the new view."""
        view = self.view_of(state.game, [*state.history, command])
        state.history.append(command)
        state.view = view
        return view

    def oracle_command(self, state: HouseholdState) -> str:
        """The next command of the game's own winning policy (TextWorld's ``policy_commands`` / ALFWorld's expert
        plan); the walkthrough's next command, or ``look``, where the game gives none."""
        if state.view.policy:
            return state.view.policy[0]
        played = len(state.history)
        walkthrough = state.game.walkthrough
        if walkthrough and list(walkthrough[:played]) == state.history and played < len(walkthrough):
            return walkthrough[played]
        return "look"

    def oracle_subgoal(self, state: HouseholdState) -> str:
        """The oracle planner's sub-goal: the next *milestone* of the winning policy, i.e. its first command
        among the next ``subgoal_horizon`` that is not a move (``go ...``), else its next command. The actor then
        finds the moves that lead there (what a planner leaves to an actor)."""
        upcoming = state.view.policy[: self.config.subgoal_horizon]
        milestone = next((c for c in upcoming if not c.startswith("go ")), None)
        return milestone if milestone is not None else self.oracle_command(state)

    # ---- status and the global reward -------------------------------------------------------------------
    def task_reward_of(self, state: HouseholdState) -> float:
        return rewards.global_reward(state.view.won, state.view.score, state.game.max_score)

    def is_success(self, state: HouseholdState) -> bool:
        return state.view.won

    def is_failed(self, state: HouseholdState) -> bool:
        return state.view.lost and not state.view.won
