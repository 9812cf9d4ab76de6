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
    "check_credit",
    "check_credit_sampling",
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
    credit_depth: int = help_field(
        "tree sampling: continue every candidate this many agent steps and add the discounted global-reward "
        "increments to its reward (0: off; pettingllms.execution.continuation)",
        0,
    )
    credit_discount: float = help_field("gamma of the continuation increments, in [0, 1]", 1.0)

    def __post_init__(self) -> None:
        check_float("temperature", self.temperature, gt=0.0, spell_out=True)
        check_float("top_p", self.top_p, gt=0.0, le=1.0, spell_out=True)
        check_int("max_completion_length", self.max_completion_length, 1, spell_out=True)
        check_num_generations(self.num_generations)
        if not isinstance(self.greedy_branch, bool):
            raise ValueError(f"`greedy_branch` must be true or false, got {self.greedy_branch!r}")
        check_transcripts_rate(self.transcripts_rate)
        check_state_max_chars(self.transcript_state_max_chars)
        check_credit(self.credit_depth, self.credit_discount)

    @classmethod
    def from_section(cls, rollout: Mapping[str, Any]) -> RolloutConfig:
        """The generation settings of a ``rollout`` section (its backend keys left to the backend)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in rollout.items() if k in names})


def check_num_generations(value: Any) -> None:
    """K (``num_generations``) is an integer >= 1: the one check of it, for :class:`RolloutConfig` and for an
    :class:`~pettingllms.execution.EngineConfig` built directly."""
    check_int("num_generations", value, 1, spell_out=True)


def check_credit(
    depth: Any,
    discount: Any,
    sampling_mode: str | None = None,
    *,
    prefix: str = "",
    mode_field: str = "sampling_mode",
) -> None:
    """Credit across turns (:mod:`pettingllms.execution.continuation`): ``credit_depth`` an integer >= 0,
    ``credit_discount`` in [0, 1], and, where ``sampling_mode`` is given, a depth above 0 only with ``tree``
    (continuations score tree candidates; an independent trajectory's return already spans its episode).
    The messages name ``prefix`` + the field (``rollout.credit_depth``) and ``mode_field``."""
    check_int(f"{prefix}credit_depth", depth, 0, spell_out=True)
    check_float(f"{prefix}credit_discount", discount, ge=0.0, le=1.0, spell_out=True)
    if sampling_mode is not None and depth > 0 and sampling_mode != "tree":
        raise ValueError(
            f"`{prefix}credit_depth` is {depth}, but `{mode_field}` is {sampling_mode!r}: credit across turns "
            f"continues tree candidates and needs tree sampling; set `{prefix}credit_depth` 0"
        )


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
    known format (:func:`check_pipeline_generation` refuses an API under a training stage); and
    ``rollout.credit_depth`` against the pipeline's sampling (:func:`check_credit_sampling`)."""
    rollout = config["rollout"]
    check_credit_sampling(config)
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


def check_credit_sampling(config: Mapping[str, Any]) -> None:
    """``rollout.credit_depth > 0`` continues tree candidates: no RL stage of the pipeline may sample
    independently (``grpo``, or ``at_grpo.sampling_mode`` independent)."""
    depth = config["rollout"].get("credit_depth", 0)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth <= 0:
        return  # off (a bad value is RolloutConfig's error, naming the key)
    for stage in config["pipeline"]:
        if stage == "grpo":
            where = "stage `grpo` samples independently"
        elif stage == "at_grpo" and (config.get("at_grpo") or {}).get("sampling_mode") == "independent":
            where = "`at_grpo.sampling_mode` is 'independent'"
        else:
            continue
        raise ConfigError(
            f"`rollout.credit_depth` is {depth}, but {where}: credit across turns continues tree candidates and "
            "needs tree sampling (`at_grpo.sampling_mode` tree); set `rollout.credit_depth` 0"
        )


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
