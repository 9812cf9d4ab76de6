"""The ``env`` section of a run config turned into what the registry builds: :func:`env_arguments`, for the
run's workflow :func:`workflow_env`, and the env worker the environment needs (:func:`make_env_worker`).

Kept apart from :mod:`pettingllms.config.loader` so that the instance checks (:mod:`pettingllms.config.instances`),
which the loader's ``validate_config`` runs, need not import the loader; the stages and the Ray workers take these
from here (:mod:`pettingllms.stages.context` re-exports them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from pettingllms.config.errors import ConfigError
from pettingllms.config.levels import run_workflow

__all__ = ["ENV_KEYS", "STAGE_SET_ENV_FIELDS", "env_arguments", "make_env_worker", "workflow_env"]

# Keys of the env section that are not fields of the environment's config.
ENV_KEYS: tuple[str, ...] = ("name", "tools", "agent_options")
# Environment fields the stages set, never a config file: ``purpose`` (train / eval) follows the stage.
STAGE_SET_ENV_FIELDS: tuple[str, ...] = ("purpose",)


def _declared_roles(env_name: str) -> tuple[str, ...]:
    """The roles environment ``env_name`` declares (``BaseEnv.roles``; empty where it declares none)."""
    from pettingllms.registry import RegistryError, get_env_class

    try:
        return tuple(getattr(get_env_class(env_name), "roles", ()) or ())
    except RegistryError:
        return ()


def _has_purpose(env_name: str) -> bool:
    """Whether environment ``env_name``'s config has the stage-set ``purpose`` field (every
    :class:`~pettingllms.envs.base.EnvConfig` does; a registered stand-in need not)."""
    from pettingllms.registry import RegistryError, get_env_class

    try:
        config_class = get_env_class(env_name).config_class
    except (RegistryError, AttributeError):
        return False
    return dataclasses.is_dataclass(config_class) and "purpose" in {f.name for f in dataclasses.fields(config_class)}


def env_arguments(
    config: Mapping[str, Any], turn_order: Sequence[str] | None = None, purpose: str = "eval"
) -> tuple[str, dict[str, Any], dict[str, dict[str, Any]]]:
    """``(env name, env config mapping, agent_options)`` for ``registry.make_env`` / ``make_agents``,
    building the environment for ``purpose`` (``train`` in training stages, ``eval`` otherwise; see
    :attr:`~pettingllms.envs.base.EnvConfig.purpose`).

    ``env.tools`` becomes the ``tools`` option of the ``tool`` role when that role is in the turn order
    (``env.agent_options.tool.tools``, if given, wins). ``turn_order`` plays other roles than
    ``env.turn_order`` (e.g. the L0 workflow). The options keep only the played roles': ``agent_options`` may
    set a role the environment declares but this workflow does not play (e.g. ``single.tools`` in a team run
    whose ``sft.workflows`` also demonstrate the single agent); a role it does not declare is an error.
    """
    env = config["env"]
    fields = {k: v for k, v in env.items() if k not in ENV_KEYS}
    if _has_purpose(env["name"]):
        fields["purpose"] = purpose
    options = {role: dict(opts or {}) for role, opts in (env.get("agent_options") or {}).items()}
    declared = _declared_roles(env["name"])
    stray = sorted(set(options) - set(declared)) if declared else []
    if stray:
        raise ConfigError(f"`env.agent_options` names role(s) {stray} that {env['name']} does not have; its roles: "
                          f"{list(declared)}")
    if turn_order is not None:
        fields["turn_order"] = list(turn_order)
    if turn_order is not None or declared:
        options = {role: opts for role, opts in options.items() if role in (fields.get("turn_order") or ())}
    roles = list(fields.get("turn_order") or ())
    if env.get("tools") is not None and "tool" in roles:
        options.setdefault("tool", {}).setdefault("tools", list(env["tools"]))
    return env["name"], fields, options


def workflow_env(
    config: Mapping[str, Any], turn_order: Sequence[str] | None = None, purpose: str = "eval"
) -> tuple[str, dict[str, Any], dict[str, dict[str, Any]]]:
    """``(env name, env fields, agent options)`` playing ``turn_order`` (default:
    :func:`~pettingllms.config.levels.run_workflow`), the environment built for ``purpose``: ``train`` in the
    training stages, ``eval`` otherwise (a dataset environment's seeds then index its train or its test split)."""
    return env_arguments(config, run_workflow(config) if turn_order is None else turn_order, purpose)


def make_env_worker(config: Mapping[str, Any]):
    """A :class:`~pettingllms.sandbox.SandboxPool` when the environment needs one for this config
    (``sandbox_needed``: ``code`` judges code, ``math`` runs its tool agent's programs) or an agent of the
    config uses the ``python`` tool, else None (the environments' own tools run in-process)."""
    from pettingllms.registry import get_env_class, make_agents, make_worker

    name, fields, options = workflow_env(config)
    env_class = get_env_class(name)
    if hasattr(env_class, "sandbox_needed"):
        needed = env_class.sandbox_needed(env_class.config_class.from_dict(fields))
    else:  # envs need not subclass BaseEnv
        needed = getattr(env_class, "needs_sandbox", False)
    if needed:
        return make_worker("sandbox")
    agents = make_agents(name, fields["turn_order"], options)
    if any("python" in tuple(getattr(agent, "tools", ()) or ()) for agent in agents):
        return make_worker("sandbox")
    return None
