"""What each stage and command needs from an environment and its agents, in one place, and its check.

Every stage needs the protocol itself: the environment's ``initial_state(seed)``, ``task_reward_of(state)``
and ``is_success(state)`` (:class:`~pettingllms.envs.base.BaseEnv`), every agent's ``update_from_env``,
``parse`` and ``step`` (:class:`~pettingllms.agents.Agent`). Past that, :data:`NEEDS` says what a stage or
command asks for:

- ``sft``: the ``oracle`` scripted policy's demonstrations (an environment's own oracle with
  ``check_instances(env, seeds)`` is asked about the ``sft`` seeds); with ``sft.late_turn_fraction`` > 0 also
  the ``random`` policy (the detours), and with ``sft.tool_candidates`` > 1 the environment's ``random_answer``;
- ``eval --policy NAME``: the scripted policy ``NAME``;
- ``plan``: the ``random`` policy, to play episodes whose prompts it measures (without one declared it
  measures the first prompt of every role instead);
- ``show`` (the viewer): nothing required; it shows what an agent's ``step`` leaves in ``feedback`` and the
  environment's ``render(state)`` where it has one.

A scripted policy ``NAME`` is an entry of the environment's ``scripted_policies``, ``{NAME:
"package.module:Factory"}``: ``Factory()`` builds an object whose ``respond(agent, env) -> str`` answers the
agent's current prompt as a model would (:mod:`pettingllms.scripted`). The generic policies need more
(:data:`GENERIC_NEEDS`): ``pettingllms.scripted:OraclePolicy`` the environment's ``oracle_answer(state)``,
``pettingllms.scripted:RandomPolicy`` its ``random_answer(state, rng)``, both every agent's
``format_response(answer) -> str``. ``sft`` plays the generic oracle where the environment declares none of
its own.

:func:`check_contract` runs for the pipeline's stages in :func:`~pettingllms.config.validate_config`, for
``eval --policy`` and ``plan`` in their commands: all before anything is written. A missing piece is a
ConfigError of one line naming the class, the method and the stage or command that needs it.

The contract is part of the config check, so it lives with the config (below the engine, the trainers and the
stages).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pettingllms.config.errors import ConfigError

__all__ = [
    "GENERIC_NEEDS",
    "NEEDS",
    "ORACLE_POLICY",
    "PROTOCOL",
    "RANDOM_POLICY",
    "Need",
    "check_classes",
    "check_command",
    "check_contract",
    "scripted_policy_needs",
]

ORACLE_POLICY = "pettingllms.scripted:OraclePolicy"
RANDOM_POLICY = "pettingllms.scripted:RandomPolicy"


@dataclass(frozen=True)
class Need:
    """One piece of the contract: ``method`` of the environment (``owner`` ``"env"``) or of every agent
    (``"agent"``), with the signature the docs show and what it is for."""

    owner: str
    method: str
    signature: str
    purpose: str


#: What the generic scripted policies (:mod:`pettingllms.scripted`) call.
GENERIC_NEEDS: dict[str, tuple[Need, ...]] = {
    ORACLE_POLICY: (
        Need("env", "oracle_answer", "oracle_answer(state)", "an answer that solves the state"),
        Need("agent", "format_response", "format_response(answer) -> str", "the answer as the agent's response text"),
    ),
    RANDOM_POLICY: (
        Need("env", "random_answer", "random_answer(state, rng)", "a well-formed random answer"),
        Need("agent", "format_response", "format_response(answer) -> str", "the answer as the agent's response text"),
    ),
}
#: Every stage: the protocol (abstract methods of BaseEnv and Agent).
PROTOCOL: tuple[Need, ...] = (
    Need("env", "initial_state", "initial_state(seed)", "the seeded start state"),
    Need("env", "task_reward_of", "task_reward_of(state)", "the global (task) reward"),
    Need("env", "is_success", "is_success(state)", "whether the state solves the task"),
    Need("agent", "update_from_env", "update_from_env(turn, env)", "the prompt built from the shared state"),
    Need("agent", "parse", "parse(response)", "the action, or ParseError"),
    Need("agent", "step", "async step(env, env_worker)", "the action applied, local_reward (and feedback) set"),
)
#: The scripted policies each stage or command plays (beyond :data:`PROTOCOL`); see the module docstring.
NEEDS: dict[str, str] = {
    "sft": "oracle (own, which may refuse the sft seeds, or generic); random with sft.late_turn_fraction > 0; "
           "random_answer with sft.tool_candidates > 1",
    "eval --policy NAME": "the scripted policy NAME, declared in scripted_policies",
    "plan": "random where declared (played to measure prompt lengths)",
    "show": "nothing required: an agent's feedback and the environment's render(state) where present",
}


def _class_name(obj: Any) -> str:
    return obj.__name__ if isinstance(obj, type) else type(obj).__name__


def _missing(need: Need, env: Any, agents: Sequence[Any], needed_by: str, how: str = "") -> str | None:
    """The one-line complaint when ``need`` is not met, else None."""
    owners = [env] if need.owner == "env" else list(agents)
    for owner in owners:
        if not callable(getattr(owner, need.method, None)):
            return (
                f"{_class_name(owner)} has no `{need.signature}` ({need.purpose}), which {needed_by} needs{how}"
            )
    return None


def check_classes(env_name: str, roles: Sequence[str] = ()) -> None:
    """The protocol's abstract methods of environment ``env_name`` and of its agents for ``roles``, before
    anything is built: one line naming the class and the method. A role without a registered agent is left
    to ``registry.make_agents``, whose error names it."""
    from pettingllms.registry import AGENTS, get_agent_class, get_env_class

    classes = [(get_env_class(env_name), "env")]
    for role in roles:
        agent = next((n for n in (f"{env_name}.{role}", role) if n in AGENTS), None)
        if agent is not None:
            classes.append((get_agent_class(agent), "agent"))
    for cls, owner in classes:
        abstract = sorted(getattr(cls, "__abstractmethods__", ()))
        if abstract:
            need = next((n for n in PROTOCOL if n.owner == owner and n.method == abstract[0]), None)
            signature = need.signature if need else abstract[0]
            raise ConfigError(f"{cls.__name__} has no `{signature}` (an abstract method), which every stage needs")


def _factory(env: Any, name: str, path: str, needed_by: str) -> Any:
    module, _, attribute = path.partition(":")
    where = f"{_class_name(env)}.scripted_policies[{name!r}] = {path!r}"
    try:
        return getattr(importlib.import_module(module), attribute)
    except Exception as error:  # the user's module: name it in one line
        raise ConfigError(f"{where} (which {needed_by} plays) does not load: {type(error).__name__}: {error}") from None


def scripted_policy_needs(env: Any, agents: Sequence[Any], name: str, needed_by: str, *, generic: str | None = None) -> None:
    """Check that scripted policy ``name`` can play ``env`` with ``agents`` for ``needed_by``. ``generic``:
    the :mod:`pettingllms.scripted` policy played where the environment declares none (``sft``); without
    it an undeclared name is an error listing the declared ones, with the closest."""
    from comlrl.validation import closest_name

    declared = dict(getattr(env, "scripted_policies", {}) or {})
    path = declared.get(name, generic)
    if path is None:
        close = closest_name(name, declared)
        guess = f"did you mean {close!r}? " if close else ""
        raise ConfigError(
            f"{_class_name(env)} declares no scripted policy {name!r} in `scripted_policies`, which {needed_by} "
            f"needs; {guess}it declares: {sorted(declared) or 'none'} (a policy is {{name: 'module:Factory'}}, "
            "Factory() answering respond(agent, env) -> str)"
        )
    how = "" if name in declared else f" (it plays the generic {name} policy: declare your own `scripted_policies[{name!r}]` instead)"
    if path in GENERIC_NEEDS:
        for need in GENERIC_NEEDS[path]:
            problem = _missing(need, env, agents, needed_by, how or f" (its scripted policy {name!r} is {path})")
            if problem:
                raise ConfigError(problem)
        return
    factory = _factory(env, name, path, needed_by)
    if not callable(factory) or (isinstance(factory, type) and not callable(getattr(factory, "respond", None))):
        raise ConfigError(
            f"{_class_name(env)}.scripted_policies[{name!r}] = {path!r}: {getattr(factory, '__name__', factory)} has no "
            f"`respond(agent, env) -> str`, which {needed_by} needs"
        )


def check_contract(config: Mapping[str, Any], env: Any, agents: Sequence[Any], stages: Sequence[str]) -> None:
    """What ``stages`` (pipeline stages and ``plan``) need from ``env`` and its ``agents`` (see the module
    docstring); a missing piece is a ConfigError of one line."""
    for stage in dict.fromkeys(stages):
        if stage == "sft":
            section = config.get("sft") or {}
            scripted_policy_needs(env, agents, "oracle", "the `sft` stage", generic=ORACLE_POLICY)
            _oracle_plays_sft_instances(config, env)
            if float(section.get("late_turn_fraction") or 0) > 0:
                scripted_policy_needs(
                    env, agents, "random", "the `sft` stage (sft.late_turn_fraction > 0)", generic=RANDOM_POLICY
                )
            own_oracle = dict(getattr(env, "scripted_policies", {}) or {}).get("oracle", ORACLE_POLICY) != ORACLE_POLICY
            calls = any(getattr(agent, "max_tool_calls", None) for agent in agents)
            if int(section.get("tool_candidates") or 1) > 1 and calls and not own_oracle:
                problem = _missing(GENERIC_NEEDS[RANDOM_POLICY][0], env, agents, "the `sft` stage (sft.tool_candidates > 1)")
                if problem:
                    raise ConfigError(problem)
        elif stage == "plan" and "random" in (getattr(env, "scripted_policies", {}) or {}):
            scripted_policy_needs(env, agents, "random", "`pettingllms plan` (it plays the random policy)")


def _oracle_plays_sft_instances(config: Mapping[str, Any], env: Any) -> None:
    """An environment's own oracle with ``check_instances(env, seeds)`` (the code oracle: problems without a
    reference solution) is asked about the ``sft`` seeds of the train split, so a refusal comes now."""
    from pettingllms.config.instances import played_seeds, stage_env
    from pettingllms.scripted import make_scripted_policy

    path = dict(getattr(env, "scripted_policies", {}) or {}).get("oracle")
    if path is None or path in GENERIC_NEEDS:
        return
    check = getattr(make_scripted_policy(env, "oracle"), "check_instances", None)
    if check is None:
        return
    train = stage_env(config, "train")
    counter = getattr(train, "num_instances", None)
    try:
        check(train, played_seeds(config, "sft", counter() if counter else None))
    except ValueError as error:
        raise ConfigError(
            f"the `sft` stage plays {_class_name(env)}'s oracle on its instances (`sft.seed_start`, "
            f"`sft.num_problems`, the train split), which it cannot: {error}"
        ) from None


def check_command(config: Mapping[str, Any], command: str, policy: str | None = None, typed: str | None = None) -> None:
    """What ``command`` needs from the environment and agents of ``config``'s workflow: ``eval`` the scripted
    policy ``policy`` (``typed``: as ``--policy`` gave it), ``plan`` a working ``random`` policy where one is
    declared. Run after :func:`~pettingllms.config.validate_config`, so the environment and its agents build."""
    from pettingllms.config.env_section import env_arguments
    from pettingllms.config.levels import level_turn_order
    from pettingllms.registry import make_agents, make_env

    workflow = level_turn_order(config["policy"]["level"], config["env"]["turn_order"])
    trains = any(stage != "eval" for stage in config["pipeline"])  # plan measures training's prompts, if any
    purpose = "train" if command == "plan" and trains else "eval"
    name, fields, options = env_arguments(config, list(workflow), purpose)
    try:
        env = make_env(name, fields)
        agents = make_agents(name, list(env.config.turn_order), options)
    except (ValueError, TypeError, OSError, LookupError) as error:
        raise ConfigError(f"section `env` ({purpose}): {error}") from error
    if command == "eval" and policy is not None:
        scripted_policy_needs(env, agents, policy, f"`pettingllms eval --policy {typed or policy}`")
    elif command == "plan":
        check_contract(config, env, agents, ["plan"])
