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

:func:`check_generation_config` checks the keys before a run starts (no engine, no import of vLLM or torch); it
and the other declarations of the section live in :mod:`pettingllms.config.rollout_section`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pettingllms.config.errors import ConfigError
from pettingllms.config.rollout_section import (
    API_KEYS,
    GENERATION_BACKENDS,
    check_generation_config,
    check_pipeline_generation,
    vllm_settings,
)

__all__ = [
    "API_KEYS",
    "GENERATION_BACKENDS",
    "api_router",
    "check_generation_config",
    "check_pipeline_generation",
    "make_generation_backend",
    "vllm_settings",
]


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
