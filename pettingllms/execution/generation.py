"""Which backend generates for a run: ``rollout.backend``.

- ``hf`` (the default): :class:`~comlrl.rollout.HFBackend` on the run's live policy, made by
  :func:`~pettingllms.execution.build_router` wherever a router is needed.
- ``vllm``: one :class:`~comlrl.rollout.VLLMBackend` for the whole run (:func:`make_generation_backend`,
  made once by the pipeline and shared by its stages, so an engine starts once), with the ``rollout.vllm_*``
  settings under TRL's names; weights are synced into the engines after every update. Under ``run.backend:
  ray`` each policy's RolloutWorkers hold their own.
- ``api``: a hosted model behind an HTTP API (:class:`~comlrl.rollout.APIBackend`, ``rollout.api_*``) plays
  every role (:func:`api_router`), for evaluation (``pettingllms eval CONFIG --policy api``, or an ``eval``
  stage): its completions carry text only, no token ids or log-probs, so a pipeline with a stage that trains
  on them refuses it (:func:`check_pipeline_generation`).

:func:`check_generation_config` checks the keys before a run starts (no engine, no import of vLLM).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pettingllms.config.errors import ConfigError

__all__ = [
    "API_KEYS",
    "GENERATION_BACKENDS",
    "api_router",
    "check_generation_config",
    "check_pipeline_generation",
    "make_generation_backend",
    "vllm_settings",
]

GENERATION_BACKENDS = ("hf", "vllm", "api")
# rollout key -> APIBackend argument.
API_KEYS = {
    "api_format": "format",
    "api_url": "url",
    "api_model": "model",
    "api_key_env": "api_key_env",
    "api_timeout": "timeout",
    "api_max_retries": "max_retries",
}
# Stages that train on the sampled token ids (an API returns text only).
_TOKEN_STAGES = ("at_grpo", "grpo", "madpo", "marlhf")
# rollout.vllm_* keys whose default is null: their type is checked here (the loader takes any value).
_NULLABLE_TYPES = {"vllm_max_model_length": int, "vllm_kv_cache_gib": (int, float), "vllm_server_base_url": str,
                   "vllm_sync_dir": str}


def vllm_settings(rollout: Mapping[str, Any]):
    """The :class:`~comlrl.rollout.VLLMSettings` of a ``rollout`` section (a ConfigError names a bad key)."""
    from comlrl.rollout.vllm.settings import VLLMSettings

    for key, kind in _NULLABLE_TYPES.items():
        value = rollout.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
            raise ConfigError(f"`rollout.{key}` must be {getattr(kind, '__name__', 'a number')} or null, got {value!r}")
    names = {f.name for f in dataclasses.fields(VLLMSettings)}
    try:
        return VLLMSettings(**{k: v for k, v in rollout.items() if k in names})
    except ValueError as error:
        raise ConfigError(str(error).replace("`vllm_", "`rollout.vllm_")) from error  # name the config key


def check_generation_config(config: Mapping[str, Any]) -> None:
    """``rollout.backend`` and its keys: a known backend, valid vLLM settings, an API with a URL and a
    known format (:func:`check_pipeline_generation` refuses an API under a training stage)."""
    rollout = config["rollout"]
    backend = rollout.get("backend", "hf")
    if backend not in GENERATION_BACKENDS:
        raise ConfigError(f"`rollout.backend` must be one of {list(GENERATION_BACKENDS)}, got {backend!r}")
    vllm_settings(rollout)  # checked whatever the backend, so a typo never waits for the switch
    if backend != "api":
        return
    from comlrl.rollout.api import normalize_format

    try:
        normalize_format(rollout["api_format"])
    except ValueError as error:
        raise ConfigError(f"`rollout.api_format`: {error}") from error
    if not isinstance(rollout.get("api_url"), str) or not rollout["api_url"]:
        raise ConfigError("`rollout.backend` is 'api' but `rollout.api_url` is not set (the endpoint URL)")


def check_pipeline_generation(config: Mapping[str, Any]) -> None:
    """A pipeline on ``rollout.backend: api`` holds no stage that trains on token ids (an API returns text)."""
    if config["rollout"].get("backend", "hf") != "api":
        return
    training = [stage for stage in config["pipeline"] if stage in _TOKEN_STAGES]
    if training:
        raise ConfigError(
            f"`rollout.backend` is 'api', which returns text without token ids or log-probs, so stages {training} "
            "cannot train on it; evaluate a hosted model with `pettingllms eval CONFIG --policy api rollout.api_url=...`"
        )


def make_generation_backend(config: Mapping[str, Any], policy: Any) -> Any:
    """The run's shared generation backend: a :class:`~comlrl.rollout.VLLMBackend` over ``policy`` for
    ``rollout.backend: vllm``, else None (the routers then make an HFBackend on the live policy; the API
    backend has its own router, :func:`api_router`). The caller closes it."""
    if config["rollout"].get("backend", "hf") != "vllm":
        return None
    from comlrl.rollout.vllm.backend import VLLMBackend

    return VLLMBackend(policy, vllm_settings(config["rollout"]), scratch_dir=None)


def api_router(config: Mapping[str, Any]):
    """A :class:`~pettingllms.execution.Router` playing every role of the config's workflow through one
    :class:`~comlrl.rollout.APIBackend` (``rollout.api_*``), no model loaded; completions are text (the
    engine parses text, so every environment plays)."""
    from comlrl.rollout.api import APIBackend
    from pettingllms.execution.policies import level_turn_order
    from pettingllms.execution.router import Router

    rollout = config["rollout"]
    arguments = {argument: rollout[key] for key, argument in API_KEYS.items()}
    try:
        backend = APIBackend(seed=int(config["run"]["seed"]), **arguments)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"section `rollout` (api_*): {error}") from error
    label = f"api:{rollout['api_model'] or 'model'}"
    roles = level_turn_order(config["policy"]["level"], config["env"]["turn_order"])  # the run's workflow
    return Router({role: label for role in roles}, {label: backend})
