"""How an :class:`~pettingllms.trainer.at_grpo_config.ATGRPOConfig` meets what the trainer is given: the
policy to build, the environment's workflow knobs, and a prebuilt engine's sampling settings. Settings
given twice must agree; each check names the field."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pettingllms.execution import PolicyConfig, RolloutEngine, level_turn_order
from pettingllms.trainer.at_grpo_config import ENGINE_FIELDS

if TYPE_CHECKING:
    from pettingllms.trainer.at_grpo_config import ATGRPOConfig

__all__ = ["check_engine", "env_config_for", "policy_config_for", "workflow_order"]


def _env_value(env_config: Any, name: str) -> Any:
    if env_config is None:
        return None
    if isinstance(env_config, Mapping):
        return env_config.get(name)
    return getattr(env_config, name, None)


def policy_config_for(config: ATGRPOConfig, model: str | PolicyConfig) -> PolicyConfig:
    """The :class:`~pettingllms.execution.PolicyConfig` of ``model`` (a name or path: the config's policy
    level, agent policies and seed; a PolicyConfig: checked against the config)."""
    if isinstance(model, PolicyConfig):
        for name, mine in (("policy_level", config.policy_level), ("agent_policies", config.agent_policies)):
            if getattr(model, name) != mine:
                raise ValueError(
                    f"`model.{name}` ({getattr(model, name)!r}) differs from the config's `{name}` ({mine!r})"
                )
        return model
    if not isinstance(model, str) or not model:
        raise TypeError(f"`model` must be a model name/path or a PolicyConfig, got {model!r}")
    return PolicyConfig(
        policy_level=config.policy_level, agent_policies=config.agent_policies, model=model, seed=config.seed
    )


def workflow_order(config: ATGRPOConfig, env_name: str, env_config: Any) -> list[str]:
    """The workflow's roles before the policy level applies (config, env_config, else the env's)."""
    if config.turn_order is not None:
        return list(config.turn_order)
    given = _env_value(env_config, "turn_order")
    if given is not None:
        return list(given)
    from pettingllms.registry import make_env

    return list(make_env(env_name, env_config).config.turn_order)


def env_config_for(config: ATGRPOConfig, env_name: str, env_config: Any) -> Any:
    """``env_config`` with the config's workflow knobs applied (a conflicting value is an error)."""
    mine = {"turn_order": config.turn_order, "max_turns": config.max_turns, "alpha": config.alpha}
    for name, value in mine.items():
        given = _env_value(env_config, name)
        if name == "turn_order" and given is not None:
            given = list(given)
        if value is not None and given is not None and given != value:
            raise ValueError(f"`{name}` is {value!r} in the config but {given!r} in `env_config`; set it once")
    overrides = {name: value for name, value in mine.items() if value is not None}
    overrides["turn_order"] = list(level_turn_order(config.policy_level, workflow_order(config, env_name, env_config)))
    if env_config is None:
        return overrides
    if dataclasses.is_dataclass(env_config):
        return dataclasses.replace(env_config, **overrides)
    if not isinstance(env_config, Mapping):
        raise TypeError(f"`env_config` must be a mapping or a dataclass, got {type(env_config).__name__}")
    return {**dict(env_config), **overrides}


def check_engine(config: ATGRPOConfig, engine: RolloutEngine) -> None:
    """A prebuilt engine's sampling settings must be the config's."""
    for name in ENGINE_FIELDS:
        theirs, mine = getattr(engine.config, name), getattr(config, name)
        if theirs != mine:
            raise ValueError(f"`engine.config.{name}` ({theirs!r}) differs from the config's `{name}` ({mine!r})")
