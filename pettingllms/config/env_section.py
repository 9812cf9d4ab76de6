"""The ``env`` section of a run config turned into what the registry builds: :func:`env_arguments`.

Kept apart from :mod:`pettingllms.config.loader` so that the stages' instance checks
(:mod:`pettingllms.stages.instances`), which the loader's ``validate_config`` runs, need not import the loader.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ENV_KEYS", "STAGE_SET_ENV_FIELDS", "env_arguments"]

# Keys of the env section that are not fields of the environment's config.
ENV_KEYS: tuple[str, ...] = ("name", "tools", "agent_options")
# Environment fields the stages set, never a config file: ``purpose`` (train / eval) follows the stage.
STAGE_SET_ENV_FIELDS: tuple[str, ...] = ("purpose",)


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
    ``env.turn_order`` (e.g. the L0 workflow); the options then keep only those roles'.
    """
    env = config["env"]
    fields = {k: v for k, v in env.items() if k not in ENV_KEYS}
    if _has_purpose(env["name"]):
        fields["purpose"] = purpose
    options = {role: dict(opts or {}) for role, opts in (env.get("agent_options") or {}).items()}
    if turn_order is not None:
        fields["turn_order"] = list(turn_order)
        options = {role: opts for role, opts in options.items() if role in fields["turn_order"]}
    roles = list(fields.get("turn_order") or ())
    if env.get("tools") is not None and "tool" in roles:
        options.setdefault("tool", {}).setdefault("tools", list(env["tools"]))
    return env["name"], fields, options
