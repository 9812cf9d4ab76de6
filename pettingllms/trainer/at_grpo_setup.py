"""What the AT-GRPO trainer builds from its separate settings: the policy, the environment's config at the
policy level's turn order, and the engine's config. Each setting has one source (the trainer's ``config``,
``rollout``, ``model`` / ``policy`` and ``env_config``), so nothing is copied and checked for agreement;
:func:`split_flat_settings` is the one path from the flat mapping older scripts built ``ATGRPOConfig`` from."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pettingllms.config.rollout_section import RolloutConfig
from pettingllms.execution import EngineConfig, PolicyConfig, level_turn_order

if TYPE_CHECKING:
    from pettingllms.trainer.at_grpo_config import ATGRPOConfig

__all__ = ["FLAT_NAMES", "engine_config_for", "env_config_for", "policy_config_for", "split_flat_settings",
           "workflow_order"]

# The flat names older scripts gave ATGRPOConfig, and where each lives now: (argument, its field or key).
FLAT_NAMES: dict[str, tuple[str, str]] = {
    "policy_level": ("model", "policy_level"),
    "agent_policies": ("model", "agent_policies"),
    "turn_order": ("env_config", "turn_order"),
    "max_turns": ("env_config", "max_turns"),
    "alpha": ("env_config", "alpha"),
    "num_generations": ("rollout", "num_generations"),
    "greedy_selection": ("rollout", "greedy_branch"),
    "temperature": ("rollout", "temperature"),
    "top_p": ("rollout", "top_p"),
    "max_completion_length": ("rollout", "max_completion_length"),
    "transcript_rate": ("rollout", "transcripts_rate"),
    "transcript_state_max_chars": ("rollout", "transcript_state_max_chars"),
    "credit_depth": ("rollout", "credit_depth"),
    "credit_discount": ("rollout", "credit_discount"),
}


def _env_value(env_config: Any, name: str) -> Any:
    if env_config is None:
        return None
    if isinstance(env_config, Mapping):
        return env_config.get(name)
    return getattr(env_config, name, None)


def policy_config_for(model: str | PolicyConfig, seed: int) -> PolicyConfig:
    """The :class:`~pettingllms.execution.PolicyConfig` of ``model``: itself, or for a model name / path the
    default policy level (L1) seeded with ``seed``."""
    if isinstance(model, PolicyConfig):
        return model
    if not isinstance(model, str) or not model:
        raise TypeError(f"`model` must be a model name/path or a PolicyConfig, got {model!r}")
    return PolicyConfig(model=model, seed=seed)


def workflow_order(env_name: str, env_config: Any) -> list[str]:
    """The workflow's roles before the policy level applies (``env_config``'s, else the env's)."""
    given = _env_value(env_config, "turn_order")
    if given is not None:
        return list(given)
    from pettingllms.registry import make_env

    return list(make_env(env_name, env_config).config.turn_order)


def env_config_for(policy_level: str, env_name: str, env_config: Any) -> Any:
    """``env_config`` with the turn order the policy level plays (L0: the environment's ``single`` role)."""
    order = list(level_turn_order(policy_level, workflow_order(env_name, env_config)))
    if env_config is None:
        return {"turn_order": order}
    if dataclasses.is_dataclass(env_config):
        return dataclasses.replace(env_config, turn_order=order)
    if not isinstance(env_config, Mapping):
        raise TypeError(f"`env_config` must be a mapping or a dataclass, got {type(env_config).__name__}")
    return {**dict(env_config), "turn_order": order}


def engine_config_for(config: ATGRPOConfig, rollout: RolloutConfig) -> EngineConfig:
    """The rollout engine's settings: the sampling structure, ``top_k``, seed and output folder of the
    trainer's ``config``, the generation settings of its ``rollout``."""
    return EngineConfig(
        num_generations=rollout.num_generations,
        sampling_mode=config.sampling_mode,
        greedy_selection=rollout.greedy_branch,
        trajectory_return=config.trajectory_return,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        top_k=config.top_k,
        max_completion_length=rollout.max_completion_length,
        seed=config.seed,
        transcript_rate=rollout.transcripts_rate,
        transcript_state_max_chars=rollout.transcript_state_max_chars,
        output_dir=config.output_dir,
        credit_depth=rollout.credit_depth,
        credit_discount=rollout.credit_discount,
    )


def split_flat_settings(values: Mapping[str, Any], model: str | PolicyConfig = "small", env_config: Any = None):
    """``(config, rollout, model, env_config)`` of a flat mapping of the names older scripts passed to
    ``ATGRPOConfig`` (:data:`FLAT_NAMES` plus the ATGRPOConfig fields): each value goes to the one object
    that declares it. ``model`` may be a PolicyConfig only when ``values`` sets no policy field; a workflow
    field set in both ``values`` and ``env_config`` is an error."""
    from pettingllms.trainer.at_grpo_config import ATGRPOConfig

    parts: dict[str, dict[str, Any]] = {"model": {}, "env_config": {}, "rollout": {}}
    own = {}
    for name, value in values.items():
        if name in FLAT_NAMES:
            where, key = FLAT_NAMES[name]
            parts[where][key] = value
        else:
            own[name] = value
    config = ATGRPOConfig(**own)
    rollout = RolloutConfig(**parts["rollout"])
    if parts["model"]:
        if isinstance(model, PolicyConfig):
            raise ValueError(f"{sorted(parts['model'])} given with a PolicyConfig `model`: set them on the PolicyConfig")
        model = PolicyConfig(model=model, seed=config.seed, **parts["model"])
    workflow = {k: v for k, v in parts["env_config"].items() if v is not None}
    if workflow:
        for name, value in workflow.items():
            given = _env_value(env_config, name)
            if given is not None and given != value:
                raise ValueError(f"`{name}` is {value!r} in the settings but {given!r} in `env_config`; set it once")
        if dataclasses.is_dataclass(env_config):
            env_config = dataclasses.replace(env_config, **workflow)
        else:
            env_config = {**dict(env_config or {}), **workflow}
    return config, rollout, model, env_config
