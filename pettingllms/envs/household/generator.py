"""The ``textworld`` source's game generator: seeded household games built with TextWorld's ``GameMaker``.

A game (:class:`HouseholdSpec`, pure Python, made by :func:`make_spec`) is a few rooms joined into a tree
(north / south / east / west exits, no doors), each with ``furniture`` pieces from its own household set
(containers such as a fridge, a wardrobe or a drawer, which start closed; supporters such as a counter, a
sofa or a bed), and ``objects`` portable things lying in or on them. The task is to move ``quest_length``
of the objects to a named receptacle each ("put the apple in the fridge, put the mug on the sofa"). Every
name of a game is one distinct word, so TextWorld's commands never need disambiguation.

:func:`build_game` turns the spec into a ``textworld.Game``: one TextWorld quest per object (its winning
event is "the object is in / on its target", the actions recorded from the commands that do it from the
start), so the game's score counts the objects placed and the game is won when all are. The spec's
walkthrough (one object after the other) is checked against TextWorld's own game logic before the game is
compiled. :func:`compiled_game` compiles a game once per (seed, settings) with TextWorld's Inform 7
toolchain into a cache folder under a deterministic name and returns the cached file ever after.

Costs (measured on a shared 2-core machine): building the spec is well under a millisecond; the first
``GameMaker`` build of a process loads TextWorld's grammar (~2 s), every later one ~0.5 s; compiling a
game with Inform 7 takes 2-4 s. A cached game costs one ``stat`` and a small JSON read.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import tempfile
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FURNITURE",
    "GENERATOR_VERSION",
    "OBJECTS",
    "ROOMS",
    "HouseholdSettings",
    "HouseholdSpec",
    "Placement",
    "build_game",
    "compiled_game",
    "default_cache_dir",
    "game_path",
    "make_spec",
    "read_game_metadata",
]

#: Bumped whenever a change to this module changes the games a (seed, settings) pair makes; it is part of
#: the cache folder's name, so a changed generator never serves a stale game.
GENERATOR_VERSION = 1

# Room -> its furniture as (name, kind): "c" a container (opens, starts closed), "s" a supporter. Every name is
# one word used nowhere else, so no command is ever ambiguous.
ROOMS: dict[str, tuple[tuple[str, str], ...]] = {
    "kitchen": (("fridge", "c"), ("counter", "s"), ("cupboard", "c"), ("stove", "s")),
    "living room": (("sofa", "s"), ("cabinet", "c"), ("armchair", "s"), ("bookcase", "s")),
    "bedroom": (("wardrobe", "c"), ("bed", "s"), ("nightstand", "s"), ("dresser", "c")),
    "bathroom": (("vanity", "c"), ("bathtub", "s"), ("sink", "s"), ("hamper", "c")),
    "study": (("desk", "s"), ("drawer", "c"), ("bookshelf", "s"), ("chest", "c")),
    "pantry": (("shelf", "s"), ("crate", "c"), ("rack", "s"), ("bin", "c")),
    "dining room": (("table", "s"), ("sideboard", "c"), ("buffet", "s"), ("hutch", "c")),
    "laundry room": (("washer", "c"), ("basket", "c"), ("dryer", "c"), ("ledge", "s")),
    "garage": (("workbench", "s"), ("toolbox", "c"), ("locker", "c"), ("trolley", "s")),
    "hallway": (("closet", "c"), ("bench", "s"), ("console", "s"), ("trunk", "c")),
}
FURNITURE: dict[str, str] = {name: kind for pieces in ROOMS.values() for name, kind in pieces}
OBJECTS: tuple[str, ...] = (
    "apple", "mug", "book", "towel", "plate", "spoon", "candle", "remote", "pillow", "soap", "bowl", "sock",
    "hat", "pen", "banana", "bottle", "phone", "watch", "scarf", "fork",
)
_DIRECTIONS = {"north": (0, -1, "south"), "south": (0, 1, "north"), "east": (1, 0, "west"), "west": (-1, 0, "east")}


@dataclass(frozen=True)
class HouseholdSettings:
    """How hard a generated game is.

    - ``rooms``: rooms in the house (1 .. 10), joined into a tree.
    - ``objects``: portable objects lying in or on the furniture (at least ``quest_length``).
    - ``quest_length``: objects the task asks to move (each to its own receptacle): the game's maximum score.
    - ``furniture``: receptacles per room (1 .. 4).
    """

    rooms: int = 2
    objects: int = 3
    quest_length: int = 1
    furniture: int = 2

    def __post_init__(self) -> None:
        for name, low, high in (("rooms", 1, len(ROOMS)), ("objects", 1, len(OBJECTS)), ("quest_length", 1, len(OBJECTS)),
                                ("furniture", 1, 4)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"`{name}` must be an integer in [{low}, {high}], got {value!r}")
        if self.quest_length > self.objects:
            raise ValueError(f"`quest_length` ({self.quest_length}) must be <= `objects` ({self.objects})")
        if self.rooms * self.furniture < 2:
            raise ValueError("`rooms` x `furniture` must be >= 2: an object needs somewhere else to go")

    @property
    def name(self) -> str:
        """The settings' part of a cached game's name, e.g. ``r2-o3-q1-f2``."""
        return f"r{self.rooms}-o{self.objects}-q{self.quest_length}-f{self.furniture}"

    def max_walkthrough(self) -> int:
        """An upper bound on a game's walkthrough length: per object, a walk there and on (each at most
        ``rooms - 1`` moves), two openings, a take and a put."""
        return self.quest_length * (2 * (self.rooms - 1) + 4)


@dataclass(frozen=True)
class Placement:
    """One object of the task and where it must end up."""

    obj: str
    target: str

    @property
    def command(self) -> str:
        """The TextWorld command that places it (``insert X into C`` / ``put X on S``)."""
        return f"insert {self.obj} into {self.target}" if FURNITURE[self.target] == "c" else f"put {self.obj} on {self.target}"

    @property
    def phrase(self) -> str:
        return f"put the {self.obj} {'in' if FURNITURE[self.target] == 'c' else 'on'} the {self.target}"


@dataclass(frozen=True)
class HouseholdSpec:
    """One generated game, as plain data.

    ``rooms``: room names; ``cells``: each room's grid cell; ``exits``: ``(room, direction, room)`` for every
    connection (both ways); ``furniture``: room -> its receptacles; ``objects``: object -> the receptacle it
    starts in / on; ``start``: the player's room; ``task``: the placements to make, in walkthrough order.
    """

    seed: int
    settings: HouseholdSettings
    rooms: tuple[str, ...]
    exits: tuple[tuple[str, str, str], ...]
    furniture: tuple[tuple[str, tuple[str, ...]], ...]
    objects: tuple[tuple[str, str], ...]
    start: str
    task: tuple[Placement, ...]

    @property
    def objective(self) -> str:
        phrases = [p.phrase for p in self.task]
        listed = phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]
        return f"Your task is to: {listed}."

    def room_of(self, receptacle: str) -> str:
        return next(room for room, pieces in self.furniture if receptacle in pieces)

    def path(self, src: str, dst: str) -> list[str]:
        """The ``go <direction>`` commands from room ``src`` to room ``dst`` (the rooms form a tree)."""
        links: dict[str, list[tuple[str, str]]] = {}
        for a, direction, b in self.exits:
            links.setdefault(a, []).append((direction, b))
        back: dict[str, tuple[str, str] | None] = {src: None}
        queue = deque([src])
        while queue:
            room = queue.popleft()
            for direction, nxt in links.get(room, ()):
                if nxt not in back:
                    back[nxt] = (room, direction)
                    queue.append(nxt)
        steps: list[str] = []
        room = dst
        while back[room] is not None:
            prev, direction = back[room]  # type: ignore[misc]
            steps.append(f"go {direction}")
            room = prev
        return steps[::-1]

    def commands_for(self, placements: Sequence[Placement]) -> list[str]:
        """Commands that make ``placements`` one after the other from the start (walking, opening closed
        containers, taking, putting)."""
        room, opened, where = self.start, set(), dict(self.objects)
        commands: list[str] = []

        def visit(receptacle: str) -> None:
            nonlocal room
            target_room = self.room_of(receptacle)
            commands.extend(self.path(room, target_room))
            room = target_room
            if FURNITURE[receptacle] == "c" and receptacle not in opened:
                commands.append(f"open {receptacle}")
                opened.add(receptacle)

        for placement in placements:
            holder = where[placement.obj]
            visit(holder)
            commands.append(f"take {placement.obj} from {holder}")
            visit(placement.target)
            commands.append(placement.command)
            where[placement.obj] = placement.target
        return commands

    @property
    def walkthrough(self) -> tuple[str, ...]:
        return tuple(self.commands_for(self.task))


def make_spec(seed: int, settings: HouseholdSettings) -> HouseholdSpec:
    """The game of ``seed`` under ``settings`` (same pair, same game), drawn from one seeded generator."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"`seed` must be an integer >= 0, got {seed!r}")
    rng = random.Random(f"household-v{GENERATOR_VERSION}:{seed}:{settings.name}")
    rooms = rng.sample(sorted(ROOMS), settings.rooms)
    cells = {rooms[0]: (0, 0)}
    taken = {(0, 0): rooms[0]}
    exits: list[tuple[str, str, str]] = []
    for room in rooms[1:]:
        options = [(placed, direction) for placed in cells for direction in _DIRECTIONS
                   if (cells[placed][0] + _DIRECTIONS[direction][0], cells[placed][1] + _DIRECTIONS[direction][1]) not in taken]
        placed, direction = rng.choice(sorted(options))
        dx, dy, opposite = _DIRECTIONS[direction]
        cell = (cells[placed][0] + dx, cells[placed][1] + dy)
        cells[room], taken[cell] = cell, room
        exits += [(placed, direction, room), (room, opposite, placed)]
    furniture = tuple((room, tuple(name for name, _ in rng.sample(ROOMS[room], settings.furniture))) for room in rooms)
    receptacles = [piece for _, pieces in furniture for piece in pieces]
    names = rng.sample(OBJECTS, settings.objects)
    objects = tuple((obj, rng.choice(receptacles)) for obj in names)
    start = rng.choice(rooms)
    task = tuple(Placement(obj, rng.choice([r for r in receptacles if r != holder]))
                 for obj, holder in objects[: settings.quest_length])
    return HouseholdSpec(seed, settings, tuple(rooms), tuple(exits), furniture, objects, start, task)


# ---- TextWorld -----------------------------------------------------------------------------------------

def _record_actions(game, commands: Sequence[str]) -> list:
    """The TextWorld actions of ``commands`` played from the start of ``game`` (its own game logic: every
    command must be admissible where it is played)."""
    from textworld.generator.game import GameProgression
    from textworld.generator.inform7 import Inform7Game

    progression = GameProgression(game, track_quests=False)
    inform7 = Inform7Game(game)
    actions = []
    for number, command in enumerate(commands):
        admissible = inform7.gen_commands_from_actions(progression.valid_actions)
        if command not in admissible:
            raise RuntimeError(f"generator bug: command {number} {command!r} is not admissible; admissible: {admissible}")
        action = progression.valid_actions[admissible.index(command)]
        progression.update(action)
        actions.append(action)
    return actions


def build_game(spec: HouseholdSpec):
    """The ``textworld.Game`` of ``spec`` (see the module docstring); its metadata holds the spec's summary
    under ``household``."""
    import textworld
    from textworld.generator import KnowledgeBase
    from textworld.generator.game import Event, GameProgression, Quest

    options = textworld.GameOptions()
    options.kb = KnowledgeBase.default()  # else every GameOptions parses TextWorld's logic files again (~0.5 s)
    options.seeds = spec.seed % (2**31)
    maker = textworld.GameMaker(options)
    rooms = {name: maker.new_room(name) for name in spec.rooms}
    for a, direction, b in spec.exits:
        if a < b:
            continue  # each connection once: one call makes both exits
        maker.connect(getattr(rooms[a], direction), getattr(rooms[b], _DIRECTIONS[direction][2]))
    entities = {}
    for room, pieces in spec.furniture:
        for piece in pieces:
            entity = maker.new(type=FURNITURE[piece], name=piece)
            if FURNITURE[piece] == "c":
                entity.add_property("closed")
            rooms[room].add(entity)
            entities[piece] = entity
    for obj, holder in spec.objects:
        entity = maker.new(type="o", name=obj)
        entities[holder].add(entity)
        entities[obj] = entity
    maker.set_player(rooms[spec.start])
    game = maker.build()
    quests = []
    for placement in spec.task:
        commands = spec.commands_for([placement])
        relation = "in" if FURNITURE[placement.target] == "c" else "on"
        goal = maker.new_fact(relation, entities[placement.obj], entities[placement.target])
        event = Event(actions=_record_actions(game, commands), conditions=[goal], commands=commands)
        quests.append(Quest(win_events=[event], commands=commands, desc=placement.phrase))
    maker.quests = quests
    game = maker.build()
    game.objective = spec.objective
    walkthrough = spec.walkthrough
    progression = GameProgression(game)
    for action in _record_actions(game, walkthrough):
        progression.update(action)
    if not progression.completed:
        raise RuntimeError(f"generator bug: the walkthrough of seed {spec.seed} ({spec.settings.name}) does not win")
    game.metadata["household"] = {
        "generator_version": GENERATOR_VERSION,
        "seed": spec.seed,
        "settings": spec.settings.name,
        "objective": spec.objective,
        "walkthrough": list(walkthrough),
        "max_score": len(spec.task),
        "rooms": list(spec.rooms),
        "task": [[p.obj, p.target] for p in spec.task],
    }
    return game


def default_cache_dir() -> Path:
    """``$PETTINGLLMS_DATA/household/games`` (default root ``~/.cache/pettingllms/data``)."""
    root = os.environ.get("PETTINGLLMS_DATA") or Path.home() / ".cache" / "pettingllms" / "data"
    return Path(root) / "household" / "games"


def game_path(seed: int, settings: HouseholdSettings, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where the compiled game of ``(seed, settings)`` lives: ``<cache>/textworld-v<generator>-tw<major.minor>/
    <settings>/seed<seed>.z8`` (its ``.json`` next to it)."""
    from importlib.metadata import version

    textworld_version = ".".join(version("textworld").split(".")[:2])
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return folder / f"textworld-v{GENERATOR_VERSION}-tw{textworld_version}" / settings.name / f"seed{seed}.z8"


def compiled_game(seed: int, settings: HouseholdSettings, cache_dir: str | os.PathLike | None = None) -> Path:
    """The compiled game of ``(seed, settings)``: from the cache when it is there, else built and compiled
    into it (in a private folder first, then moved in, the ``.z8`` last, so a reader never sees half a game
    and two processes compiling the same game both end with the same complete files)."""
    path = game_path(seed, settings, cache_dir)
    if path.is_file() and path.with_suffix(".json").is_file():
        return path
    try:
        import textworld.generator
    except ImportError as exc:  # pragma: no cover - textworld is a dependency of the dev extra
        raise ValueError(f"the household `textworld` source needs the `textworld` package: pip install textworld ({exc})") from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.with_suffix(".lock")):  # another process compiling this game: wait for it, then serve its files
        if path.is_file() and path.with_suffix(".json").is_file():
            return path
        game = build_game(make_spec(seed, settings))
        work = Path(tempfile.mkdtemp(prefix=f".seed{seed}-", dir=path.parent))
        try:
            options = textworld.GameOptions()
            options.kb = textworld.generator.KnowledgeBase.default()
            options.path = str(work / path.name)
            options.force_recompile = True
            compiled = Path(textworld.generator.compile_game(game, options))
            os.replace(compiled.with_suffix(".json"), path.with_suffix(".json"))
            os.replace(compiled, path)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return path


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``lock_path`` (``fcntl``; where it is missing, no lock: the atomic moves
    still leave complete files)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_game_metadata(path: str | os.PathLike) -> dict:
    """The ``household`` metadata a compiled game's ``.json`` holds (objective, walkthrough, max score, ...)."""
    with Path(path).with_suffix(".json").open(encoding="utf-8") as handle:
        return json.load(handle)["metadata"]["household"]


def _compile_one(job: tuple[int, HouseholdSettings, str | None]) -> str:
    seed, settings, cache_dir = job
    return str(compiled_game(seed, settings, cache_dir))


def _seed_ranges(text: str) -> range:
    start, sep, stop = text.partition(":")
    try:
        seeds = range(int(start), int(stop)) if sep else range(int(start), int(start) + 1)
    except ValueError:
        raise ValueError(f"expected START:STOP or one seed, got {text!r}") from None
    if seeds.start < 0 or not seeds:
        raise ValueError(f"expected 0 <= START < STOP, got {text!r}")
    return seeds


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pettingllms.envs.household --seeds 0:64 --seeds 1000000:1000020 [--rooms N ...] [--jobs N]``:
    compile games into the cache ahead of a run (each new game takes 2-4 s; ``--jobs`` compiles in parallel)."""
    import argparse
    from concurrent.futures import ProcessPoolExecutor

    parser = argparse.ArgumentParser(prog="python -m pettingllms.envs.household", description=main.__doc__)
    defaults = HouseholdSettings()
    parser.add_argument("--seeds", action="append", type=_seed_ranges, metavar="START:STOP",
                        help="seeds to compile (repeatable; default: the base config's sft and eval seeds)")
    for name in ("rooms", "objects", "quest_length", "furniture"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    parser.add_argument("--cache-dir", default=None, help="default: $PETTINGLLMS_DATA/household/games")
    parser.add_argument("--jobs", type=int, default=1, help="games compiled at once (processes)")
    args = parser.parse_args(argv)
    settings = HouseholdSettings(args.rooms, args.objects, args.quest_length, args.furniture)
    ranges = args.seeds or [range(0, 64), range(1_000_000, 1_000_020)]
    jobs = [(seed, settings, args.cache_dir) for seeds in ranges for seed in seeds]
    missing = [job for job in jobs if not game_path(job[0], settings, args.cache_dir).is_file()]
    print(f"{len(jobs)} games ({settings.name}), {len(jobs) - len(missing)} already compiled", flush=True)
    if args.jobs > 1 and len(missing) > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            for done, path in enumerate(pool.map(_compile_one, missing), 1):
                print(f"[{done}/{len(missing)}] {path}", flush=True)
    else:
        for done, job in enumerate(missing, 1):
            print(f"[{done}/{len(missing)}] {_compile_one(job)}", flush=True)
    return 0
