"""Name -> environment, agent and env-worker registries.

Entries are registered under a name, either as the object itself or lazily as an import path
``"package.module:Attribute"``; a lazy entry is imported the first time it is used, so an environment
whose optional dependency is missing does not break the others. Using it raises the real
``ImportError`` (same type, original as ``__cause__``) with the entry's install hint. An unknown name
is a :class:`RegistryError` that lists the known names.

Agent names are ``"<env>.<role>"`` (``"sokoban.plan"``); :func:`make_agents` resolves the roles of a
``turn_order`` against the environment's name, so configs name roles only.

Registering your own environment and agent (in your own code; this example runs as written)::

    import asyncio
    from dataclasses import dataclass

    from pettingllms.agents import Agent, ParseError, build_prompt
    from pettingllms.envs.base import BaseEnv, EnvState
    from pettingllms.registry import make_agents, make_env, register_agent, register_env

    @dataclass(kw_only=True)
    class GuessState(EnvState):
        secret: int
        last_guess: int | None = None

    @register_env("guess")
    class GuessEnv(BaseEnv[GuessState]):
        # Guess a digit; the global (task) reward is 1.0 once it is guessed.
        name = "guess"
        roles = ("guesser",)

        def initial_state(self, seed):
            return GuessState(seed=seed, secret=seed % 10)

        def task_reward_of(self, state):
            return float(state.last_guess == state.secret)

        def is_success(self, state):
            return state.last_guess == state.secret

    @register_agent("guess.guesser")
    class Guesser(Agent):
        default_role = "guesser"

        def update_from_env(self, turn_idx, env_data):
            user = f"Last guess: {env_data.state.last_guess}. Reply with one digit."
            self.prompt = build_prompt("Guess the secret digit.", user, self.prompt_style)
            return self.prompt

        def parse(self, response):
            text = response.strip()
            if len(text) != 1 or not text.isdigit():
                raise ParseError(f"expected one digit, got {text[:20]!r}")
            return int(text)

        async def step(self, env_data, env_worker=None):
            if self.action is None:
                self.local_reward = -1.0  # the documented parse-error penalty
                return
            env_data.state.last_guess = self.action
            self.local_reward = 0.0

    env = make_env("guess", {"turn_order": ["guesser"], "max_turns": 3})
    (agent,) = make_agents("guess", env.config.turn_order)
    asyncio.run(env.reset(seed=7))
    agent.update_from_env(0, env)
    agent.update_from_model("7")
    result = asyncio.run(env.step_agent(agent))
    assert result.success and result.reward == 1.0  # alpha * global + local = 1.0 * 1.0 + 0.0

An entry whose module needs an optional dependency is registered by import path, so it is imported
only when used and a missing dependency names its install hint::

    register_env("web", "my_pkg.web_env:WebEnv", install_hint="pip install my-pkg[browser]")

An installed distribution registers its environments with no config line through the ``pettingllms.envs``
entry-point group (in its ``pyproject.toml``)::

    [project.entry-points."pettingllms.envs"]
    relay = "my_team.relay"              # a module: importing it registers what it registers
    # relay = "my_team.relay:RelayEnv"   # or an environment class, registered under the entry point's name

The group is read once per process, the first time a name is not found or the names are listed; an entry
point that fails to load is a :class:`RegistryError` naming it and its distribution.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AGENTS",
    "ENTRY_POINT_GROUP",
    "ENVS",
    "WORKERS",
    "Registry",
    "RegistryError",
    "get_agent_class",
    "get_env_class",
    "get_worker_class",
    "list_agents",
    "list_envs",
    "list_workers",
    "make_agent",
    "make_agents",
    "make_env",
    "make_worker",
    "register_agent",
    "register_env",
    "register_worker",
]


class RegistryError(LookupError):
    """An unknown name, or a name registered twice."""

    def __str__(self) -> str:  # LookupError would repr-quote the message
        return str(self.args[0]) if self.args else ""


@dataclass
class _Entry:
    target: Any  # the object, or an import path "module:attr"
    install_hint: str | None = None
    resolved: Any = None

    @property
    def lazy(self) -> bool:
        return isinstance(self.target, str)


def _split_path(path: str) -> tuple[str, str]:
    module, sep, attr = path.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"import path must look like 'package.module:Attribute', got {path!r}")
    return module, attr


#: Installed distributions register environments (a module, or ``"module:EnvClass"``) under this group.
ENTRY_POINT_GROUP = "pettingllms.envs"
_entry_points_loaded = False


def load_entry_points() -> None:
    """Load every ``pettingllms.envs`` entry point once per process: a module is imported (it registers
    its own names), a class is registered as an environment under the entry point's name. A failure is a
    RegistryError naming the entry point and its distribution."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True  # first: an entry point's own lookups must not load the group again
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        owner = f"{point.dist.name} {point.dist.version}" if point.dist is not None else "an unknown distribution"
        try:
            loaded = point.load()
        except Exception as error:  # an installed package's code: name it, in one line
            _entry_points_loaded = False  # the next lookup says so again rather than go on without it
            detail = " ".join(str(error).split())
            raise RegistryError(
                f"entry point {point.name!r} = {point.value!r} (group {ENTRY_POINT_GROUP}, {owner}) failed to load: "
                f"{type(error).__name__}: {detail}"
            ) from error
        if isinstance(loaded, type) and point.name not in ENVS:
            ENVS.register(point.name, loaded)


class Registry:
    """Names of one kind (``"env"``, ``"agent"``, ``"worker"``) mapped to objects or import paths.

    A name not found, and the list of names, first load the installed entry points
    (:func:`load_entry_points`)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, _Entry] = {}

    def register(
        self, name: str, target: Any = None, *, install_hint: str | None = None, overwrite: bool = False
    ) -> Any:
        """Register ``target`` (object or ``"module:attr"``) as ``name``; without a target, a decorator.

        Registering a taken name is an error unless ``overwrite`` (re-registering the same target is
        allowed).
        """
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")
        if target is None:
            def decorator(obj: Any) -> Any:
                self.register(name, obj, install_hint=install_hint, overwrite=overwrite)
                return obj
            return decorator
        if isinstance(target, str):
            _split_path(target)
        old = self._entries.get(name)
        if old is not None and not overwrite and old.target is not target and old.target != target:
            raise RegistryError(
                f"{self.kind} {name!r} is already registered (to {old.target!r}); pass overwrite=True to replace it"
            )
        self._entries[name] = _Entry(target, install_hint)
        return target

    def unregister(self, name: str) -> None:
        if name not in self._entries:
            raise self._unknown(name)
        del self._entries[name]

    def names(self) -> list[str]:
        load_entry_points()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        if name not in self._entries:
            load_entry_points()
        return name in self._entries

    def _unknown(self, name: str) -> RegistryError:
        return RegistryError(f"unknown {self.kind} {name!r}; known {self.kind}s: {self.names()}")

    def get(self, name: str) -> Any:
        """The registered object, importing a lazy entry on first use."""
        entry = self._entries.get(name)
        if entry is None:
            load_entry_points()
            entry = self._entries.get(name)
        if entry is None:
            raise self._unknown(name)
        if not entry.lazy:
            return entry.target
        if entry.resolved is None:
            module_name, attr = _split_path(entry.target)
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                hint = f" Install hint: {entry.install_hint}" if entry.install_hint else ""
                message = f"{self.kind} {name!r} could not be imported from {module_name!r}: {exc}.{hint}"
                try:
                    error = type(exc)(message, name=exc.name, path=exc.path)
                except TypeError:  # an ImportError subclass with its own signature
                    error = ImportError(message, name=exc.name, path=exc.path)
                raise error from exc
            try:
                entry.resolved = getattr(module, attr)
            except AttributeError as exc:
                raise ImportError(
                    f"{self.kind} {name!r}: module {module_name!r} has no attribute {attr!r}", name=module_name
                ) from exc
        return entry.resolved


ENVS = Registry("env")
AGENTS = Registry("agent")
WORKERS = Registry("worker")


def register_env(name: str, target: Any = None, *, install_hint: str | None = None, overwrite: bool = False) -> Any:
    """Register an environment class (or ``"module:Class"``); without ``target``, a class decorator."""
    return ENVS.register(name, target, install_hint=install_hint, overwrite=overwrite)


def register_agent(name: str, target: Any = None, *, install_hint: str | None = None, overwrite: bool = False) -> Any:
    """Register an agent class as ``"<env>.<role>"`` (or ``"module:Class"``); without ``target``, a decorator."""
    return AGENTS.register(name, target, install_hint=install_hint, overwrite=overwrite)


def register_worker(name: str, target: Any = None, *, install_hint: str | None = None, overwrite: bool = False) -> Any:
    """Register an env-worker factory (a class or callable returning a CodeRunner, or ``"module:attr"``)."""
    return WORKERS.register(name, target, install_hint=install_hint, overwrite=overwrite)


def list_envs() -> list[str]:
    return ENVS.names()


def list_agents(env: str | None = None) -> list[str]:
    """Agent names, all or those of one environment (``"<env>.*"``)."""
    names = AGENTS.names()
    return names if env is None else [n for n in names if n.startswith(f"{env}.")]


def list_workers() -> list[str]:
    return WORKERS.names()


def get_env_class(name: str) -> Any:
    return ENVS.get(name)


def get_agent_class(name: str) -> Any:
    return AGENTS.get(name)


def get_worker_class(name: str) -> Any:
    return WORKERS.get(name)


def make_env(name: str, config: Any = None) -> Any:
    """An instance of environment ``name`` with ``config`` (its config dataclass, a mapping, or None)."""
    return ENVS.get(name)(config)


def make_agent(name: str, **options: Any) -> Any:
    """An instance of agent ``name`` (``"<env>.<role>"``) built with ``options``."""
    return AGENTS.get(name)(**options)


def make_worker(name: str, **options: Any) -> Any:
    factory: Callable[..., Any] = WORKERS.get(name)
    return factory(**options)


def resolve_agent_name(env: str, role: str) -> str:
    """The registered agent for ``role`` in ``env``: ``"<env>.<role>"``, or ``role`` if it is a full name."""
    for candidate in (f"{env}.{role}", role):
        if candidate in AGENTS:
            return candidate
    raise RegistryError(
        f"no agent for role {role!r} of env {env!r}; known agents for {env!r}: {list_agents(env)} "
        f"(register one as {env + '.' + role!r})"
    )


def make_agents(
    env: str, turn_order: list[str] | tuple[str, ...], agent_options: Mapping[str, Mapping[str, Any]] | None = None
) -> list[Any]:
    """One agent per ``turn_order`` entry (role = the entry), with per-role ``agent_options``."""
    options = dict(agent_options or {})
    stray = sorted(set(options) - set(turn_order))
    if stray:
        raise ValueError(f"`agent_options` names role(s) {stray} that are not in turn_order {list(turn_order)}")
    return [make_agent(resolve_agent_name(env, role), role=role, **dict(options.get(role, {}))) for role in turn_order]


# ---- built-ins (lazy: nothing is imported until used) -------------------------------------------------
_BUILTIN_ENVS = {
    "plan_path": ("pettingllms.envs.plan_path.env:PlanPathEnv", "PlanPath"),
    "sokoban": ("pettingllms.envs.sokoban.env:SokobanEnv", "Sokoban"),
    "sudoku": ("pettingllms.envs.sudoku.env:SudokuEnv", "Sudoku"),
}
for _env, (_path, _prefix) in _BUILTIN_ENVS.items():
    register_env(_env, _path)
    _module = _path.split(":")[0].rsplit(".", 1)[0] + ".agents"
    for _role, _suffix in (("tool", "ToolAgent"), ("plan", "PlanAgent"), ("single", "SingleAgent")):
        register_agent(f"{_env}.{_role}", f"{_module}:{_prefix}{_suffix}")
del _env, _path, _prefix, _module, _role, _suffix
register_env("code", "pettingllms.envs.code.env:CodeEnv")
for _role, _class in (("code_generator", "CodeGenerationAgent"), ("test_generator", "UnitTestGenerationAgent"),
                      ("single", "CodeSingleAgent")):
    register_agent(f"code.{_role}", f"pettingllms.envs.code.agents:{_class}")
del _role, _class
register_env("math", "pettingllms.envs.math.env:MathEnv")
for _role, _class in (("tool_generator", "ToolGenerationAgent"), ("reasoning_generator", "ReasoningAgent"),
                      ("single", "MathSingleAgent")):
    register_agent(f"math.{_role}", f"pettingllms.envs.math.agents:{_class}")
del _role, _class
# Environments added one block each (search, household, webshop, the two puzzles); keep the markers.
register_env("search", "pettingllms.envs.search.env:SearchEnv")
for _role, _class in (("web_search_agent", "WebSearchAgent"), ("search_reasoning_agent", "SearchReasoningAgent"),
                      ("single", "SearchSingleAgent")):
    register_agent(f"search.{_role}", f"pettingllms.envs.search.agents:{_class}")
del _role, _class
register_env("household", "pettingllms.envs.household.env:HouseholdEnv")
for _role, _class in (("planner", "PlannerAgent"), ("actor", "ActorAgent"), ("single", "HouseholdSingleAgent")):
    register_agent(f"household.{_role}", f"pettingllms.envs.household.agents:{_class}")
del _role, _class
register_env("webshop", "pettingllms.envs.webshop.env:WebShopEnv")
for _role, _class in (("searcher", "SearcherAgent"), ("buyer", "BuyerAgent"), ("single", "WebShopSingleAgent")):
    register_agent(f"webshop.{_role}", f"pettingllms.envs.webshop.agents:{_class}")
del _role, _class
for _env, _prefix in (("eight_queens", "EightQueens"), ("blocksworld", "Blocksworld")):
    register_env(_env, f"pettingllms.envs.{_env}.env:{_prefix}Env")
    for _role, _suffix in (("tool", "ToolAgent"), ("plan", "PlanAgent"), ("single", "SingleAgent")):
        register_agent(f"{_env}.{_role}", f"pettingllms.envs.{_env}.agents:{_prefix}{_suffix}")
del _env, _prefix, _role, _suffix
register_worker("sandbox", "pettingllms.sandbox.pool:SandboxPool")
