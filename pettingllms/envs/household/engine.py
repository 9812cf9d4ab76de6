"""Live TextWorld games behind plain-data states: the views, the replay and the per-process pool.

A household state never holds a running game. What the agents see after a command is a :class:`GameView`
(immutable plain data), and the game's state is a function of its file and the commands played so far
(the *history*). So copying a state is copying a list of strings, and :class:`GamePool` turns
``(game, history)`` into the view after that history:

1. a view cache (LRU, keyed by game and history) answers at once when this history was seen (the K
   candidates of a tree-sampling group often give the same command);
2. else a live TextWorld environment of that game is brought to the history: the one whose history is
   the longest prefix of it plays only the missing commands, otherwise one is reset and replays the
   whole history; every view on the way is cached.

Measured on the generated games (shared 2-core machine): starting a game (``textworld.start``) ~0.5 s,
once per game and process; a reset ~10-20 ms; a command ~5 ms. Replaying a 10-command history therefore
costs ~60 ms, while TextWorld's own state copy (``env.copy()``, which forks the Jericho interpreter by
loading a fresh copy of its library) took 1.4 s; snapshots are therefore replays, not copies.

Games are played through TextWorld's public API only: ``textworld.start(path, request_infos=EnvInfos(...))``
with admissible commands, the game's winning policy (``policy_commands``), score, win / loss, facts (to tell
whether a command changed the world), and for Inform 7 games the room description and the inventory.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["POOL", "GamePool", "GameView", "LiveGame", "PoolStats", "clean_text", "view_from_state"]


@dataclass(frozen=True)
class GameView:
    """What the game shows after the latest command (immutable; copies share it).

    - ``feedback``: the game's response to the latest command (empty right after the reset).
    - ``description``: the current room's description (empty where the source has none).
    - ``inventory``: what the player carries, as the game says it (empty where the source has none).
    - ``admissible``: the commands the game accepts now (sorted).
    - ``score`` / ``won`` / ``lost``: the game's score and outcome.
    - ``policy``: the game's own winning policy from here (TextWorld's ``policy_commands``; ALFWorld's
      expert plan), for the oracle and the planner's reward; never shown in a prompt.
    - ``world``: a fingerprint of the world's facts, to tell whether a command changed the world.
    """

    feedback: str
    description: str
    inventory: str
    admissible: tuple[str, ...]
    score: int
    won: bool
    lost: bool
    policy: tuple[str, ...]
    world: str

    def __deepcopy__(self, memo: dict) -> GameView:
        return self


_PROMPT_LINE = re.compile(r"^\s*>")
_BLANKS = re.compile(r"\n{3,}")
_ENDING = "Would you like to RESTART"


def clean_text(text: str | None) -> str:
    """A game's text without the interpreter's prompt / status lines (``>   -= Kitchen =-0/3``), the
    replay question after the end, and runs of blank lines."""
    if not text:
        return ""
    text = text.split(_ENDING, 1)[0]
    lines = [line.rstrip() for line in text.splitlines() if not _PROMPT_LINE.match(line)]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def _fingerprint(facts: Any) -> str:
    if not facts:
        return ""
    text = "\n".join(sorted(str(fact) for fact in facts))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def view_from_state(state: Any, *, first: bool = False, policy_key: str = "policy_commands") -> GameView:
    """A :class:`GameView` from a TextWorld ``GameState`` (``first``: the reset state, whose feedback is the
    game's introduction and is not repeated)."""
    get = state.get if hasattr(state, "get") else (lambda key, default=None: default)
    policy = get(policy_key) or ()
    won = bool(get("won"))
    score = get("score")
    return GameView(
        feedback="" if first else clean_text(get("feedback")),
        description=clean_text(get("description")),
        inventory=clean_text(get("inventory")),
        admissible=tuple(get("admissible_commands") or ()),
        score=int(score) if isinstance(score, int) else int(won),
        won=won,
        lost=bool(get("lost")),
        policy=tuple(str(c) for c in policy),
        world=_fingerprint(get("facts")),
    )


class LiveGame:
    """One running TextWorld environment of one game, and the history it stands at (None: not reset)."""

    def __init__(self, env: Any, view_of: Callable[..., GameView]) -> None:
        self.env = env
        self.view_of = view_of
        self.history: tuple[str, ...] | None = None

    def reset(self) -> GameView:
        view = self.view_of(self.env.reset(), first=True)
        self.history = ()
        return view

    def step(self, command: str) -> GameView:
        if self.history is None:
            raise RuntimeError("LiveGame.step before reset")
        state, _, _ = self.env.step(command)
        self.history = self.history + (command,)
        return self.view_of(state)

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if close is not None:
            close()


@dataclass
class PoolStats:
    """What the pool did: views served from the cache, games started, resets, commands played."""

    cache_hits: int = 0
    starts: int = 0
    resets: int = 0
    commands: int = 0


#: ``(key, starter)``: ``key`` names a game (its file), ``starter()`` starts a live game of it.
Starter = Callable[[], LiveGame]


class GamePool:
    """Views of ``(game, history)`` pairs, from a cache or from live games replayed to the history (see the
    module docstring). ``per_game`` live environments at most per game, ``max_games`` games live at once
    (least recently used closed first), ``max_views`` views cached. Thread-safe (one lock)."""

    def __init__(self, per_game: int = 1, max_games: int = 16, max_views: int = 8192) -> None:
        self.per_game = per_game
        self.max_games = max_games
        self.max_views = max_views
        self._views: OrderedDict[tuple[str, tuple[str, ...]], GameView] = OrderedDict()
        self._live: OrderedDict[str, list[LiveGame]] = OrderedDict()
        self._lock = threading.RLock()
        self.stats = PoolStats()

    def __deepcopy__(self, memo: dict) -> GamePool:
        return self  # shared, never copied (an environment that holds one is copied with it)

    def view(self, key: str, history: Sequence[str], starter: Starter) -> GameView:
        """The view after playing ``history`` in game ``key`` from its start."""
        history = tuple(history)
        with self._lock:
            cached = self._views.get((key, history))
            if cached is not None:
                self._views.move_to_end((key, history))
                self.stats.cache_hits += 1
                return cached
            live = self._live_for(key, history, starter)
            if live.history is None or live.history != history[: len(live.history)]:
                view = live.reset()
                self.stats.resets += 1
                self._remember(key, (), view)
            else:
                view = self._views.get((key, live.history))
            assert live.history is not None
            for command in history[len(live.history):]:
                view = live.step(command)
                self.stats.commands += 1
                self._remember(key, live.history, view)
            if view is None:  # the live game stood at exactly this history and its view was evicted
                live.history = None
                return self.view(key, history, starter)
            return view

    def _live_for(self, key: str, history: tuple[str, ...], starter: Starter) -> LiveGame:
        games = self._live.get(key)
        if games is None:
            games = self._live[key] = []
            while len(self._live) > self.max_games:
                _, evicted = self._live.popitem(last=False)
                for live in evicted:
                    live.close()
        self._live.move_to_end(key)
        best, best_len = None, -1
        for live in games:
            if live.history is not None and live.history == history[: len(live.history)] and len(live.history) > best_len:
                best, best_len = live, len(live.history)
        if best is not None:
            games.remove(best)
            games.append(best)  # most recently used last
            return best
        if len(games) < self.per_game:
            live = starter()
            self.stats.starts += 1
            games.append(live)
            return live
        live = games.pop(0)  # the least recently used one is reset
        games.append(live)
        return live

    def _remember(self, key: str, history: tuple[str, ...], view: GameView) -> None:
        self._views[(key, history)] = view
        self._views.move_to_end((key, history))
        while len(self._views) > self.max_views:
            self._views.popitem(last=False)

    def clear(self) -> None:
        """Close every live game and forget every view (the stats too)."""
        with self._lock:
            for games in self._live.values():
                for live in games:
                    live.close()
            self._live.clear()
            self._views.clear()
            self.stats = PoolStats()


#: The process-wide pool every household environment plays through.
POOL = GamePool()
