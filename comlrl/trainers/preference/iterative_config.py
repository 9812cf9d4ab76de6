"""The fields and rules of the iterative preference configs (iterations, comparator, replay buffer): the
mixin :class:`_IterativePreferenceConfig` of :class:`~comlrl.trainers.preference.config.MADPOIterConfig` and
:class:`~comlrl.trainers.preference.config.MARLHFIterConfig`, and the comparator's value tables."""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass
from typing import Any

from comlrl.rollout.api import KNOWN_FORMATS
from comlrl.trainers.core.config import COLLABORATION_MODES, GENERATION_MODE_ALIASES
from comlrl.trainers.preference.replay import normalize_replay_mode, validate_replay_options
from comlrl.validation import (
    canonical_choice,
    check_bool,
    check_device_count,
    check_devices,
    check_float,
    check_int,
    check_str,
    help_field,
    normalize_devices,
    normalize_mapping,
    public_wording,
    warn,
)

__all__ = ["API_FORMAT_ALIASES", "COMPARATOR_POLICIES", "COMPARATOR_POLICY_ALIASES"]

# The public library's tables; keys are lower-cased and stripped before lookup.
COMPARATOR_POLICIES = ("current", "current_copy", "model", "history", "api")
COMPARATOR_POLICY_ALIASES = {
    "self": "current",
    "online": "current",
    "copy": "current_copy",
    "online_copy": "current_copy",
    "current-offload": "current_copy",
    "current_offload": "current_copy",
    "external": "model",
    "comparator": "model",
    "reference": "model",
    "ref": "model",
    "checkpoint": "history",
    "previous": "history",
    "previous_iteration": "history",
    "http": "api",
    "endpoint": "api",
}
API_FORMAT_ALIASES = {
    "openai_chat": "openai",
    "chat": "openai",
    "anthropic_messages": "anthropic",
    "messages": "anthropic",
    "responses": "openai_responses",
    "codex": "openai_responses",
}

# The comparator fields that only mean something for comparator_policy="api" and default to None, so
# that setting one of them under another policy can be detected (and warned about).
_API_ONLY_FIELDS = (
    "comparator_api_url",
    "comparator_api_model",
    "comparator_api_key",
    "comparator_api_key_env",
    "comparator_api_headers",
    "comparator_api_extra_body",
    "comparator_api_max_n_per_request",
)


@dataclass
class _IterativePreferenceConfig:
    r"""
    Fields and rules shared by [`MADPOIterConfig`] and [`MARLHFIterConfig`]: a mixin placed before their base
    config in the class tree, so that its steps run after the base config's.

    Parameters:
        > Parameters that control the iterations

        num_iterations (`int`, *optional*, defaults to `6`):
            Rounds of (compare with the comparator, store the round's pairs, train on a replay sample).
        preference_num_candidates (`int`, *optional*, defaults to `20`):
            Candidates the current agents sample per item each round.
        preference_pairs_per_sample (`int` or `None`, *optional*, defaults to `4`):
            Comparisons kept per item; must be `None` with `pair_selection="all"`.
        pair_selection (`str`, *optional*, defaults to `"comparator_reward"`):
            Adds `"comparator_reward"`: comparator's processed score, then gap, both descending (it does not
            filter on which side won).

        > Parameters that control the comparator

        comparator_policy (`str`, *optional*, defaults to `"current"`):
            The other side of each comparison: `current` (the actor weights on a separate seeded stream;
            aliases `self`, `online`), `current_copy` (a frozen copy on `comparator_devices`, refreshed once
            per round; `copy`, `online_copy`, `current_offload`, `current-offload`), `model` (frozen models
            from
            `comparator_model_name` or `comparator_agents`; `external`, `comparator`, `reference`, `ref`),
            `history` (the policy `comparator_history_k` rounds ago, the initial policy until that many
            rounds exist; `checkpoint`, `previous`, `previous_iteration`) or `api` (a remote model; `http`,
            `endpoint`).
        comparator_generation_mode (`str`, *optional*, defaults to `"decentralized"`):
            `decentralized`: one response per role; `centralized`: one comparator model writes all roles in
            one joint response, split by the trainer's centralized adapter (forced under centralized
            collaboration).
        comparator_centralized_agent_index (`int`, *optional*, defaults to `0`):
            Which agent's slot (model, device, tokenizer, stream) writes centralized comparator responses.
        comparator_model_name (`str`, *optional*):
            `model` only: one comparator model for every agent.
        comparator_agents (`list[str]`, *optional*):
            `model` only: one comparator source per agent (one under centralized generation).
        comparator_devices (`str` or `list[str]`, *optional*):
            Comparator devices; `None` uses the agents' devices.
        comparator_num_candidates (`int`, *optional*):
            Candidates the comparator samples per item; `None` means `preference_num_candidates`. Only
            indices present on both sides are compared.
        comparator_history_k (`int`, *optional*):
            `history` only: how many rounds back (`None` means 1: the policy before the last update).
        comparator_api_url (`str`, *optional*):
            `api` only, required: the endpoint (http or https).
        comparator_api_format (`str`, *optional*, defaults to `"generic"`):
            `generic`, `openai` (aliases `openai_chat`, `chat`), `anthropic` (`anthropic_messages`,
            `messages`) or `openai_responses` (`responses`, `codex`); anything else is an error.
        comparator_api_model (`str`, *optional*):
            Model name sent to the API; required by every format but `generic`.
        comparator_api_max_n_per_request (`int`, *optional*):
            Most completions asked per request (`generic`, `openai`); `None`: all at once.
        comparator_api_timeout (`float`, *optional*, defaults to `120.0`):
            Seconds per HTTP request.
        comparator_api_headers (`dict`, *optional*):
            Extra request headers (a JSON object on a command line).
        comparator_api_key (`str`, *optional*):
            Literal API key (never written to checkpoints; prefer `comparator_api_key_env`).
        comparator_api_key_env (`str`, *optional*):
            Name of the environment variable holding the API key.
        comparator_api_key_header (`str`, *optional*, defaults to `"Authorization"`):
            Header that carries the key.
        comparator_api_key_prefix (`str`, *optional*, defaults to `"Bearer"`):
            Prefix written before the key in that header.
        comparator_api_response_field (`str`, *optional*, defaults to `"completions"`):
            `generic` only: dotted path of the completions in the answer.
        comparator_api_extra_body (`dict`, *optional*):
            Merged into every request body (a JSON object on a command line).
        comparator_api_max_retries (`int`, *optional*, defaults to `3`):
            Retries (exponential backoff) of a request that hit a 429, 5xx, timeout or malformed answer.
        comparator_api_max_failure_rate (`float`, *optional*, defaults to `0.5`):
            Items whose request still fails are dropped and counted; the run stops when more than this share
            of a round's items fails. In [0, 1].

        > Parameters that control the replay buffer

        preference_replay_mode (`str`, *optional*, defaults to `"current"`):
            Which stored rounds a round trains on: `current` (this round's pairs; aliases `latest`, `new`),
            `nearest_k` (the k newest non-empty rounds; `recent_k`, `last_k`, `k`), `all_history` or
            `lambda_decay` (all rounds, weight ∝ λ^age; `lambda`, `td_lambda`, `td-lambda`).
        preference_replay_k (`int`, *optional*):
            `nearest_k` only (required there); `current` accepts only `None` or 1.
        preference_replay_lambda (`float`, *optional*):
            `lambda_decay` only (required there), in [0, 1]: 0 keeps only the newest round, 1 weights all
            rounds equally.
        preference_replay_sample_size (`int`, *optional*):
            Pairs drawn per round by the historical modes; `None` means this round's pair count (or the
            newest non-empty round's).
        preference_replay_dir (`str`, *optional*):
            Folder of the round files `iteration_0001.json`, ...; `None` means
            `<output_dir>/preference_replay`.

        > Parameters that control logging and outputs

        log_reward_distribution (`bool`, *optional*, defaults to `False`):
            Log and write per-round reward histograms (needs `reward_func.reward_range`).
        policy_checkpoint_dir (`str`, *optional*):
            Setting it saves a policy snapshot per round there (`initial/`, then `iteration_{r:04d}/`);
            `None` writes none (the history comparator keeps its snapshots in memory and in checkpoints).
    """

    # Parameters that control the iterations
    num_iterations: int = help_field("Rounds of comparison, storage and training.", 6)
    preference_num_candidates: int = help_field(
        "Candidates the current agents sample per item each round (>= 2).", 20
    )
    preference_pairs_per_sample: int | None = help_field(
        "Comparisons kept per item (>= 1); None keeps all and is required with pair_selection='all'.", 4
    )
    pair_selection: str = help_field(
        "Pair order per item: 'comparator_reward', 'reward_gap', 'all' or 'random'.", "comparator_reward"
    )

    # Parameters that control the comparator
    comparator_policy: str = help_field(
        "Comparator source: current, current_copy, model, history or api.", "current"
    )
    comparator_generation_mode: str = help_field(
        "'decentralized' (one response per role) or 'centralized' (one model writes every role).",
        "decentralized",
    )
    comparator_centralized_agent_index: int = help_field(
        "Agent slot that writes centralized comparator responses.", 0
    )
    comparator_model_name: str | None = help_field(
        "comparator_policy='model': one comparator model for all agents.", None
    )
    comparator_agents: list[str] | None = help_field(
        "comparator_policy='model': one comparator source per agent.", None
    )
    comparator_devices: None | str | list[str] = help_field(
        "Comparator devices; None uses the agents' devices.", None
    )
    comparator_num_candidates: int | None = help_field(
        "Comparator candidates per item; None means preference_num_candidates.", None
    )
    comparator_history_k: int | None = help_field("comparator_policy='history': rounds back (None means 1).", None)
    comparator_api_url: str | None = help_field("comparator_policy='api': endpoint URL (required).", None)
    comparator_api_format: str = help_field(
        "API format: generic, openai, anthropic or openai_responses.", "generic"
    )
    comparator_api_model: str | None = help_field(
        "Model name sent to the API (required except for generic).", None
    )
    comparator_api_max_n_per_request: int | None = help_field("Most completions per API request; None: all.", None)
    comparator_api_timeout: float = help_field("Seconds per API request.", 120.0)
    comparator_api_headers: dict[str, Any] | str | None = help_field(
        "Extra API headers (JSON object on a CLI).", None
    )
    comparator_api_key: str | None = help_field(
        "Literal API key (never checkpointed; prefer comparator_api_key_env).", None, repr=False
    )
    comparator_api_key_env: str | None = help_field("Environment variable holding the API key.", None)
    comparator_api_key_header: str = help_field("Header carrying the API key.", "Authorization")
    comparator_api_key_prefix: str = help_field("Prefix before the API key in its header.", "Bearer")
    comparator_api_response_field: str = help_field(
        "generic format: dotted path of the completions.", "completions"
    )
    comparator_api_extra_body: dict[str, Any] | str | None = help_field(
        "Merged into every API request body (JSON object on a CLI).", None
    )
    comparator_api_max_retries: int = help_field(
        "Retries of a failed API request (429, 5xx, timeout, bad JSON).", 3
    )
    comparator_api_max_failure_rate: float = help_field(
        "Stop when more than this share of a round's items fail at the API, in [0, 1].", 0.5
    )

    # Parameters that control the replay buffer
    preference_replay_mode: str = help_field(
        "Replay mode: current, nearest_k, all_history or lambda_decay.", "current"
    )
    preference_replay_k: int | None = help_field("nearest_k: number of newest non-empty rounds.", None)
    preference_replay_lambda: float | None = help_field("lambda_decay: decay in [0, 1].", None)
    preference_replay_sample_size: int | None = help_field("Pairs drawn per round by the historical modes.", None)
    preference_replay_dir: str | None = help_field(
        "Round-file folder; None means <output_dir>/preference_replay.", None
    )

    # Parameters that control logging and outputs
    log_reward_distribution: bool = help_field(
        "Log per-round reward histograms (needs reward_func.reward_range).", False
    )
    policy_checkpoint_dir: str | None = help_field(
        "Save per-round policy snapshots there; None writes none (history keeps its own in memory).", None
    )

    _iterative = True
    _secret_fields = ("comparator_api_key",)

    def _normalize(self) -> None:
        super()._normalize()  # type: ignore[misc]
        self.comparator_policy = canonical_choice(
            "comparator_policy",
            self.comparator_policy,
            COMPARATOR_POLICIES,
            COMPARATOR_POLICY_ALIASES,
            public="comparator_policy must be one of: current, current_copy, model, history, api.",
        )
        self.comparator_generation_mode = canonical_choice(
            "comparator_generation_mode",
            self.comparator_generation_mode,
            COLLABORATION_MODES,
            GENERATION_MODE_ALIASES,
            public="comparator_generation_mode must be one of: decentralized, centralized.",
        )
        self.comparator_api_format = canonical_choice(
            "comparator_api_format", self.comparator_api_format, KNOWN_FORMATS, API_FORMAT_ALIASES
        )
        self.preference_replay_mode = normalize_replay_mode(self.preference_replay_mode)
        self.comparator_devices = normalize_devices("comparator_devices", self.comparator_devices)
        self.comparator_api_headers = normalize_mapping(
            "comparator_api_headers", self.comparator_api_headers
        )
        self.comparator_api_extra_body = normalize_mapping(
            "comparator_api_extra_body", self.comparator_api_extra_body
        )
        if isinstance(self.comparator_agents, tuple):
            self.comparator_agents = list(self.comparator_agents)
        for name in ("preference_replay_dir", "policy_checkpoint_dir"):
            if isinstance(getattr(self, name), os.PathLike):
                setattr(self, name, os.fspath(getattr(self, name)))

    def _resolve(self) -> None:
        super()._resolve()  # type: ignore[misc]
        if self.collaboration_mode == "centralized":
            # One actor writes every role, so its comparator must answer in the same joint form.
            self.comparator_generation_mode = "centralized"

    def _validate(self) -> None:
        super()._validate()  # type: ignore[misc]
        check_int("num_iterations", self.num_iterations, 1, public=True)
        self._validate_comparator()
        self._validate_api()
        # One validator for the replay options, shared with the replay buffer (it resolves mode aliases).
        replay = validate_replay_options(
            self.preference_replay_mode,
            self.preference_replay_k,
            self.preference_replay_lambda,
            self.preference_replay_sample_size,
        )
        self.preference_replay_mode = replay.mode
        self.preference_replay_k = replay.k
        self.preference_replay_lambda = replay.lam
        self.preference_replay_sample_size = replay.sample_size
        check_str("preference_replay_dir", self.preference_replay_dir, optional=True)
        check_bool("log_reward_distribution", self.log_reward_distribution)
        check_str("policy_checkpoint_dir", self.policy_checkpoint_dir, optional=True)

    def _validate_comparator(self) -> None:
        policy = self.comparator_policy
        index = self.comparator_centralized_agent_index
        check_int("comparator_centralized_agent_index", index, 0, public=True)
        if self.collaboration_mode == "centralized" and index != 0:
            message = (
                "`comparator_centralized_agent_index` must be 0 with collaboration_mode='centralized' "
                f"(there is only one actor model), got {index}"
            )
            raise ValueError(public_wording(message, "Centralized collaboration has only actor index 0."))
        if self.comparator_generation_mode == "centralized" and index >= self.num_agents:
            message = (
                f"`comparator_centralized_agent_index` must be < num_agents ({self.num_agents}), got {index}"
            )
            public = "comparator_centralized_agent_index must be smaller than num_agents."
            raise ValueError(public_wording(message, public))

        has_name = self.comparator_model_name is not None
        has_agents = self.comparator_agents is not None
        if policy == "model":
            if not has_name and not has_agents:
                message = (
                    "`comparator_model_name` or `comparator_agents` is required when "
                    "comparator_policy='model'"
                )
                public = (
                    "comparator_model_name or comparator_agents is required when comparator_policy='model'."
                )
                raise ValueError(public_wording(message, public))
            if has_name and has_agents:
                raise ValueError(
                    "give one of `comparator_model_name` (one model for all agents) and `comparator_agents` "
                    "(one per agent), not both"
                )
        elif has_name or has_agents:
            name = "comparator_model_name" if has_name else "comparator_agents"
            message = (
                f"`{name}` is only valid when comparator_policy='model', got comparator_policy={policy!r}"
            )
            public = (
                "comparator_model_name and comparator_agents are only valid when comparator_policy='model'."
            )
            raise ValueError(public_wording(message, public))
        check_str("comparator_model_name", self.comparator_model_name, optional=True)
        if has_agents:
            if not isinstance(self.comparator_agents, list) or not self.comparator_agents:
                raise ValueError(
                    "`comparator_agents` must be a non-empty list of model sources, "
                    f"got {self.comparator_agents!r}"
                )
            central = self.comparator_generation_mode == "centralized"
            expected = 1 if central else self.num_agents
            if len(self.comparator_agents) != expected:
                why = "one comparator model under centralized generation" if central else "one per agent"
                raise ValueError(
                    f"`comparator_agents` must have {expected} entries ({why}), "
                    f"got {len(self.comparator_agents)}"
                )
        check_devices("comparator_devices", self.comparator_devices)
        check_device_count("comparator_devices", self.comparator_devices, self.num_actor_models)
        check_int("comparator_num_candidates", self.comparator_num_candidates, 1, optional=True, public=True)
        if self.comparator_history_k is not None and policy != "history":
            message = (
                "`comparator_history_k` is only valid when comparator_policy='history', "
                f"got comparator_policy={policy!r}"
            )
            public = "comparator_history_k is only valid when comparator_policy='history'."
            raise ValueError(public_wording(message, public))
        check_int(
            "comparator_history_k",
            self.comparator_history_k,
            1,
            optional=True,
            public="comparator_history_k must be >= 1.",
        )

    def _validate_api(self) -> None:
        if self.comparator_policy == "api":
            if self.comparator_api_url is None:
                raise ValueError(
                    public_wording(
                        "`comparator_api_url` is required when comparator_policy='api'",
                        "comparator_api_url is required when comparator_policy='api'.",
                    )
                )
            url = self.comparator_api_url
            if not isinstance(url, str) or urllib.parse.urlsplit(url.strip()).scheme not in ("http", "https"):
                raise ValueError(f"`comparator_api_url` must be an http(s) URL, got {url!r}")
            if self.comparator_api_format != "generic" and not self.comparator_api_model:
                raise ValueError(
                    "`comparator_api_model` is required with "
                    f"comparator_api_format={self.comparator_api_format!r}"
                )
        check_str("comparator_api_model", self.comparator_api_model, optional=True)
        check_int(
            "comparator_api_max_n_per_request",
            self.comparator_api_max_n_per_request,
            1,
            optional=True,
            public=True,
        )
        check_float("comparator_api_timeout", self.comparator_api_timeout, gt=0)
        headers = self.comparator_api_headers or {}
        for key, value in headers.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(
                    f"`comparator_api_headers` must map strings to strings, got {key!r}: {value!r}"
                )
        check_str("comparator_api_key", self.comparator_api_key, optional=True)
        check_str("comparator_api_key_env", self.comparator_api_key_env, optional=True)
        check_str("comparator_api_key_header", self.comparator_api_key_header)
        check_str("comparator_api_key_prefix", self.comparator_api_key_prefix, allow_empty=True)
        check_str("comparator_api_response_field", self.comparator_api_response_field)
        check_int("comparator_api_max_retries", self.comparator_api_max_retries, 0)
        check_float("comparator_api_max_failure_rate", self.comparator_api_max_failure_rate, ge=0, le=1)

    def _warn_ineffective(self) -> None:
        super()._warn_ineffective()  # type: ignore[misc]
        if self.comparator_policy != "api":
            given = [n for n in _API_ONLY_FIELDS if getattr(self, n) is not None]
            if given:
                warn(
                    f"{', '.join(f'`{n}`' for n in given)} only apply to comparator_policy='api' and are "
                    f"ignored with comparator_policy={self.comparator_policy!r}"
                )

    # -- derived values -----------------------------------------------------------------------------
    @property
    def resolved_comparator_num_candidates(self) -> int:
        """Candidates the comparator samples per item."""
        if self.comparator_num_candidates is not None:
            return self.comparator_num_candidates
        return self.preference_num_candidates

    @property
    def resolved_comparator_history_k(self) -> int:
        """Rounds back for ``comparator_policy='history'`` (1 when unset)."""
        return 1 if self.comparator_history_k is None else self.comparator_history_k

    @property
    def resolved_preference_replay_dir(self) -> str:
        if self.preference_replay_dir is not None:
            return self.preference_replay_dir
        return os.path.join(self.output_dir, "preference_replay")

    @property
    def resolved_policy_checkpoint_dir(self) -> str:
        if self.policy_checkpoint_dir is not None:
            return self.policy_checkpoint_dir
        return os.path.join(self.output_dir, "policy_checkpoints")

    @property
    def saves_policy_snapshots(self) -> bool:
        """Per-round policy snapshots are written to disk only when a folder was given: the history
        comparator keeps the snapshots it needs in memory and in training checkpoints."""
        return self.policy_checkpoint_dir is not None

    @property
    def reward_distribution_dir(self) -> str:
        """Where ``log_reward_distribution`` writes ``iteration_{n:04d}.json``."""
        return os.path.join(self.output_dir, "reward_distributions")
