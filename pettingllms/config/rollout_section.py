"""The ``rollout`` section: its generation settings (:class:`RolloutConfig`, the dataclass of the section's
sampling keys, which the ``at_grpo`` / ``grpo`` trainer takes as its own argument), which backend generates
(``rollout.backend``: ``hf``, ``vllm`` or ``api``) with its keys, and the transcripts' state limit.

Declared with the config, below the engine that uses them (:mod:`pettingllms.execution.generation` makes the
backends, :mod:`pettingllms.execution.transcripts` writes the transcripts, both import these back), so that
:func:`~pettingllms.config.validate_config` checks a config without the engine, vLLM or torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from comlrl.validation import StrictFromDict, check_float, check_int, help_field
from pettingllms.config.errors import ConfigError

__all__ = [
    "API_KEYS",
    "RolloutConfig",
    "GENERATION_BACKENDS",
    "MIN_STATE_MAX_CHARS",
    "TOKEN_STAGES",
    "check_generation_config",
    "check_num_generations",
    "check_pipeline_generation",
    "check_transcripts_rate",
    "check_state_max_chars",
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
TOKEN_STAGES = ("at_grpo", "grpo", "madpo", "marlhf")
# rollout.vllm_* keys whose default is null: their type is checked here (the loader takes any value).
_NULLABLE_TYPES = {"vllm_max_model_length": int, "vllm_kv_cache_gib": (int, float), "vllm_server_base_url": str,
                   "vllm_sync_dir": str}
#: The smallest ``state_max_chars`` of a transcript (a smaller limit leaves nothing readable of a state).
MIN_STATE_MAX_CHARS = 100


@dataclass
class RolloutConfig(StrictFromDict):
    """The generation settings of the ``rollout`` section (its keys and defaults, checked here once): what the
    AT-GRPO / GRPO trainer samples with (:class:`~pettingllms.trainer.ATGRPOTrainer`'s ``rollout``).

    The section's other keys belong to the generation backend (``backend``, the ``vllm_*`` fields of
    :class:`~comlrl.rollout.VLLMSettings`, the ``api_*`` keys of :data:`API_KEYS`; :func:`check_generation_config`).
    """

    temperature: float = help_field("sampling temperature; training scores at the same one (> 0)", 1.0)
    top_p: float = help_field("nucleus sampling mass", 1.0)
    max_completion_length: int = help_field("new tokens per agent response", 32)
    num_generations: int = help_field("K: tree width (candidates per decision) or trajectories per problem", 4)
    greedy_branch: bool = help_field("continue each tree from its best candidate (False: a random one)", True)
    transcripts_rate: float = help_field("fraction of episodes written to <stage>/rollouts.jsonl", 0.05)
    transcript_state_max_chars: int | None = help_field(
        "characters kept of each transcribed state snapshot (>= 100; None: the whole state)", None
    )

    def __post_init__(self) -> None:
        check_float("temperature", self.temperature, gt=0.0, spell_out=True)
        check_float("top_p", self.top_p, gt=0.0, le=1.0, spell_out=True)
        check_int("max_completion_length", self.max_completion_length, 1, spell_out=True)
        check_num_generations(self.num_generations)
        if not isinstance(self.greedy_branch, bool):
            raise ValueError(f"`greedy_branch` must be true or false, got {self.greedy_branch!r}")
        check_transcripts_rate(self.transcripts_rate)
        check_state_max_chars(self.transcript_state_max_chars)

    @classmethod
    def from_section(cls, rollout: Mapping[str, Any]) -> RolloutConfig:
        """The generation settings of a ``rollout`` section (its backend keys left to the backend)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in rollout.items() if k in names})


def check_num_generations(value: Any) -> None:
    """K (``num_generations``) is an integer >= 1: the one check of it, for :class:`RolloutConfig` and for an
    :class:`~pettingllms.execution.EngineConfig` built directly."""
    check_int("num_generations", value, 1, spell_out=True)


def check_transcripts_rate(value: Any, name: str = "transcripts_rate") -> None:
    """The fraction of episodes transcribed is in [0, 1] (``name``: the engine calls it ``transcript_rate``)."""
    check_float(name, value, ge=0.0, le=1.0, spell_out=True)


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
    training = [stage for stage in config["pipeline"] if stage in TOKEN_STAGES]
    if training:
        raise ConfigError(
            f"`rollout.backend` is 'api', which returns text without token ids or log-probs, so stages {training} "
            "cannot train on it; evaluate a hosted model with `pettingllms eval CONFIG --policy api rollout.api_url=...`"
        )


def check_state_max_chars(value: Any, name: str = "transcript_state_max_chars") -> int | None:
    """``value`` if it is None (no limit) or an integer >= 100, else a ValueError naming ``name``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_STATE_MAX_CHARS:
        raise ValueError(
            f"`{name}` must be null (no limit) or an integer >= {MIN_STATE_MAX_CHARS}, got {value!r}"
        )
    return value
