"""Configuration of the preference trainers: MADPO, MARLHF and their iterative variants.

The four classes accept the public CoMLRL 1.4.3 field names, defaults and value aliases, so a script
written for that library keeps its configuration. They are standalone dataclasses in TRL's style, not
:class:`transformers.TrainingArguments` subclasses: ``num_train_epochs``, ``train_batch_size``,
``logging_steps`` and ``num_iterations`` keep CoMLRL's meanings (epochs over the pair set, pairs per
update, environment steps between logs, data-collection rounds), which differ from TrainingArguments'.
Every field carries ``metadata={"help": ...}``, so :class:`transformers.HfArgumentParser` turns a class
into a command line.

``__post_init__`` runs three steps, each cooperative along the class tree:

1. ``_normalize``: canonical values (strings lower-cased and stripped, aliases resolved, JSON strings from
   a command line parsed into dicts, comma-separated lists split);
2. ``_resolve``: the defaults the public library fills in place (``train_batch_size``, ``advantage_mode``
   from ``rl_algorithm``, centralized comparator generation under centralized collaboration);
3. ``_validate``: every rule, with a message naming the field and the value.

Values derived from fields (directories under ``output_dir``, the comparator's candidate count, ...) are
read-only properties, listed under "Derived values" in each class. All steps are idempotent, so
``MADPOConfig(**cfg.to_dict())`` gives back an equal config (what checkpoints rely on).
"""

from __future__ import annotations

import json
import math
import os
import sys
import urllib.parse
import warnings
from dataclasses import dataclass, field, fields
from numbers import Integral, Real
from typing import Any, TypeVar

from comlrl.rl import CRITIC_TYPES, ESTIMATORS, KL_ESTIMATORS, LOSS_TYPES, RL_ALGORITHM_ESTIMATORS
from comlrl.rollout.api import KNOWN_FORMATS
from comlrl.trainers.preference.pairs import validate_pair_selection
from comlrl.trainers.preference.replay import normalize_replay_mode, validate_replay_options

__all__ = [
    "API_FORMAT_ALIASES",
    "COLLABORATION_MODES",
    "COMPARATOR_POLICIES",
    "COMPARATOR_POLICY_ALIASES",
    "GENERATION_MODE_ALIASES",
    "REPORT_TO_CHOICES",
    "RL_ALGORITHMS",
    "RL_ALGORITHM_ALIASES",
    "SCORING_REWARDS",
    "SCORING_REWARD_ALIASES",
    "MADPOConfig",
    "MADPOIterConfig",
    "MARLHFConfig",
    "MARLHFIterConfig",
    "canonical_choice",
]

# --------------------------------------------------------------------------------------------------
# Value aliases (the public library's table; keys are lower-cased and stripped before lookup)
# --------------------------------------------------------------------------------------------------

COLLABORATION_MODES = ("decentralized", "centralized")
GENERATION_MODE_ALIASES = {
    "decentralised": "decentralized",
    "multi_agent": "decentralized",
    "multi-agent": "decentralized",
    "centralised": "centralized",
    "single_agent": "centralized",
    "single-agent": "centralized",
}
PARALLEL_TRAINING_MODES = ("none", "mp")
PARALLEL_TRAINING_ALIASES = {"null": "none"}
JOINT_MODES = ("aligned",)
JOINT_MODE_ALIASES = {"align": "aligned"}

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
SCORING_REWARDS = ("task", "reward_model")
SCORING_REWARD_ALIASES = {
    "oracle": "task",
    "environment": "task",
    "env": "task",
    "model": "reward_model",
    "learned": "reward_model",
}
API_FORMAT_ALIASES = {
    "openai_chat": "openai",
    "chat": "openai",
    "anthropic_messages": "anthropic",
    "messages": "anthropic",
    "responses": "openai_responses",
    "codex": "openai_responses",
}
RL_ALGORITHMS = ("magrpo", "mareinforce", "maremax", "marloo", "maac", "iac")
RL_ALGORITHM_ALIASES = {"mareforce": "mareinforce"}
REPORT_TO_CHOICES = ("tensorboard", "wandb")

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
_SECRET_FIELDS = ("comparator_api_key",)
_SINGLE_TURN_NOTE = (
    "MADPO, MADPOIter, MARLHF and MARLHFIter currently require num_turns=1 and joint_mode='aligned'"
)


def canonical_choice(
    name: str, value: Any, choices: tuple[str, ...], aliases: dict[str, str] | None = None
) -> str:
    """``value`` lower-cased, stripped and de-aliased; a ValueError naming ``name`` unless in ``choices``."""
    aliases = aliases or {}
    key = value.strip().lower() if isinstance(value, str) else None
    key = aliases.get(key, key)
    if key not in choices:
        hint = f" (aliases: {', '.join(f'{a} -> {t}' for a, t in aliases.items())})" if aliases else ""
        raise ValueError(f"`{name}` must be one of: {', '.join(choices)}{hint}, got {value!r}")
    return key


# --------------------------------------------------------------------------------------------------
# Checks (module-private; each raises ValueError naming the field)
# --------------------------------------------------------------------------------------------------


def _check_int(name: str, value: Any, minimum: int | None = None, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, Integral):
        kind = "an integer or None" if optional else "an integer"
        raise ValueError(f"`{name}` must be {kind}, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}{' or None' if optional else ''}, got {value}")


def _check_float(
    name: str,
    value: Any,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    optional: bool = False,
) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        kind = "a finite number or None" if optional else "a finite number"
        raise ValueError(f"`{name}` must be {kind}, got {value!r}")
    low_ok = (gt is None or value > gt) and (ge is None or value >= ge)
    high_ok = (lt is None or value < lt) and (le is None or value <= le)
    if low_ok and high_ok:
        return
    has_low, has_high = gt is not None or ge is not None, lt is not None or le is not None
    if has_low and has_high:
        low = f"({gt}" if gt is not None else f"[{ge}"
        high = f"{lt})" if lt is not None else f"{le}]"
        raise ValueError(f"`{name}` must be in {low}, {high}, got {value}")
    op, bound = (
        (">", gt)
        if gt is not None
        else (">=", ge)
        if ge is not None
        else ("<", lt)
        if lt is not None
        else ("<=", le)
    )
    raise ValueError(f"`{name}` must be {op} {bound}{' or None' if optional else ''}, got {value}")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False, got {value!r}")


def _check_str(name: str, value: Any, *, optional: bool = False, allow_empty: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        kind = "a string" if allow_empty else "a non-empty string"
        raise ValueError(f"`{name}` must be {kind}{' or None' if optional else ''}, got {value!r}")


def _normalize_devices(name: str, value: Any) -> str | list[str] | None:
    """None / "auto" / one device / a list; a comma-separated string (from a command line) becomes a list."""
    if value is None:
        return None
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
        return parts[0] if len(parts) == 1 else parts
    if isinstance(value, (list, tuple)):
        return [v.strip() if isinstance(v, str) else v for v in value]
    raise ValueError(
        f"`{name}` must be None, 'auto', a device string or a list of device strings, got {value!r}"
    )


def _check_devices(name: str, value: str | list[str] | None) -> None:
    if value is None:
        return
    entries = [value] if isinstance(value, str) else value
    if not entries:
        raise ValueError(f"`{name}` must not be an empty list")
    import torch  # only to parse device strings; torch is a core dependency

    for entry in entries:
        if entry == "auto" and isinstance(value, str):
            continue
        try:
            torch.device(entry)
        except (RuntimeError, TypeError, ValueError) as exc:
            raise ValueError(f"`{name}` holds an invalid device {entry!r} ({exc})") from None


def _check_device_count(name: str, value: str | list[str] | None, num_models: int) -> None:
    """A device list has one entry (shared) or one per model."""
    if not isinstance(value, list) or len(value) in (1, num_models):
        return
    if num_models == 1:
        raise ValueError(f"`{name}` must have 1 entry (one actor model), got {len(value)}")
    raise ValueError(
        f"`{name}` must have 1 or {num_models} entries (one device, or one per agent), got {len(value)}"
    )


def _normalize_mapping(name: str, value: Any) -> dict[str, Any] | None:
    """A dict, None, or a JSON object string (the form a command line can give)."""
    if value is None or isinstance(value, dict):
        return None if value is None else dict(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"`{name}` must be a dict or a JSON object string, got {value!r} ({exc})"
            ) from None
        if isinstance(parsed, dict):
            return parsed
    raise ValueError(f"`{name}` must be a dict or a JSON object string, got {value!r}")


def _warn(message: str) -> None:
    """A UserWarning attributed to the first caller outside this module (and the generated ``__init__``)."""
    level, frame = 2, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in (__file__, "<string>"):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level)


def _help(text: str, default: Any, **kwargs: Any) -> Any:
    return field(default=default, metadata={"help": text}, **kwargs)


def _override(owner: type, name: str, default: Any, note: str) -> Any:
    """Redeclare ``owner``'s field ``name`` with another default, keeping its help and adding ``note``."""
    base = owner.__dataclass_fields__[name]
    return field(default=default, metadata={"help": f"{base.metadata['help']} {note}"}, repr=base.repr)


# --------------------------------------------------------------------------------------------------
# What every trainer config shares: these four, and the online RL configs of
# comlrl.trainers.reinforce.config and comlrl.trainers.actor_critic.config
# --------------------------------------------------------------------------------------------------


def _normalize_report_to(value: Any) -> list[str]:
    """``report_to`` as a list of sink names (``[]`` for none); a comma-separated string is split."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) for v in items):
        raise ValueError(f"`report_to` must be a string or a list of strings, got {value!r}")
    names = [v.strip().lower() for v in items if v.strip()]
    if names == ["none"] or not names:
        return []
    for name in names:
        if name not in REPORT_TO_CHOICES:
            raise ValueError(
                f"`report_to` must be 'none' or any of: {', '.join(REPORT_TO_CHOICES)}, got {value!r}"
            )
    return list(dict.fromkeys(names))


_Config = TypeVar("_Config", bound="_TrainerConfigBase")


class _TrainerConfigBase:
    """Steps and derived values common to every trainer config (a base without fields).

    Each config declares the shared fields (``num_agents``, devices, sampling, evaluation, logging and
    outputs) itself, with its own order, defaults and help, and calls the shared steps below where its own
    ``_normalize`` and ``_validate`` need them, so the first error reported stays the same field.
    """

    # Fields that ``to_dict(redact_secrets=True)`` sets to None.
    _secret_fields = ()

    def __post_init__(self) -> None:
        self._normalize()
        self._resolve()
        self._validate()
        self._warn_ineffective()

    def _warn_ineffective(self) -> None:
        pass

    def _normalize_parallel_training(self) -> None:
        parallel = "none" if self.parallel_training is None else self.parallel_training
        self.parallel_training = canonical_choice(
            "parallel_training", parallel, PARALLEL_TRAINING_MODES, PARALLEL_TRAINING_ALIASES
        )

    def _normalize_devices_and_outputs(self) -> None:
        self.agent_devices = _normalize_devices("agent_devices", self.agent_devices)
        self.reference_devices = _normalize_devices("reference_devices", self.reference_devices)
        self.report_to = _normalize_report_to(self.report_to)
        if isinstance(self.output_dir, os.PathLike):
            self.output_dir = os.fspath(self.output_dir)

    def _resolve(self) -> None:
        if self.train_batch_size is None:
            self.train_batch_size = self.rollout_buffer_size

    def _validate_agents_and_sampling(self, num_models: int) -> None:
        """The agent, device and sampling fields; device lists hold one entry or ``num_models``."""
        _check_int("num_agents", self.num_agents, 1)
        if self.parallel_training == "mp" and self.agent_devices is None:
            raise ValueError(
                "`agent_devices` is required when `parallel_training='mp'` (one device per agent)"
            )
        _check_devices("agent_devices", self.agent_devices)
        _check_devices("reference_devices", self.reference_devices)
        _check_device_count("agent_devices", self.agent_devices, num_models)
        _check_device_count("reference_devices", self.reference_devices, num_models)
        _check_bool("disable_dropout", self.disable_dropout)

        _check_int("max_new_tokens", self.max_new_tokens, 1)
        _check_float("temperature", self.temperature, gt=0)
        _check_float("top_p", self.top_p, gt=0, le=1)
        _check_int("top_k", self.top_k, 0, optional=True)

    def _validate_eval_and_outputs(self) -> None:
        _check_int("eval_interval", self.eval_interval, 0)
        _check_int("eval_num_samples", self.eval_num_samples, 0)
        _check_int("eval_batch_size", self.eval_batch_size, 1)

        _check_str("output_dir", self.output_dir)
        _check_int("seed", self.seed)
        _check_str("run_name", self.run_name, optional=True)
        _check_int("logging_steps", self.logging_steps, 1)
        _check_str("logging_dir", self.logging_dir, optional=True)
        _check_bool("disable_tqdm", self.disable_tqdm)
        _check_int("save_total_limit", self.save_total_limit, 1, optional=True)

    # -- derived values -----------------------------------------------------------------------------
    @property
    def resolved_logging_dir(self) -> str:
        """``logging_dir``, or ``<output_dir>/logs``."""
        return self.logging_dir if self.logging_dir is not None else os.path.join(self.output_dir, "logs")

    def resolved_top_k(self, model_default: int | None = None) -> int:
        """Top-k to sample with (0 = off): ``top_k``, else the model's generation config, else 50
        (transformers' default)."""
        if self.top_k is not None:
            return self.top_k
        return model_default if model_default is not None else 50

    # -- dict round trip (checkpoints) --------------------------------------------------------------
    def to_dict(self, *, redact_secrets: bool = True) -> dict[str, Any]:
        """Every field by name. Lists and dicts are copied, objects (models) are not; with ``redact_secrets``
        the secret fields (a literal ``comparator_api_key``) are left out (set to None), so they never reach
        a checkpoint."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, list):
                value = list(value)
            elif isinstance(value, dict):
                value = dict(value)
            if redact_secrets and f.name in self._secret_fields:
                value = None
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls: type[_Config], values: dict[str, Any]) -> _Config:
        """Inverse of :meth:`to_dict`; an unknown key is an error naming it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown field(s) for {cls.__name__}: {', '.join(unknown)}")
        return cls(**values)


# --------------------------------------------------------------------------------------------------
# MADPO
# --------------------------------------------------------------------------------------------------


@dataclass
class MADPOConfig(_TrainerConfigBase):
    r"""
    Configuration class for [`MADPOTrainer`]: Multi-Agent Direct Preference Optimization.

    MADPO trains a team of agents directly on preferences between joint responses. Agent i's margin on a
    pair is `log π_i(w_i | x_i) − log π_i(l_i | x_i)`; the joint margin sums them over the agents and the
    loss is `−log σ(dpo_beta · joint margin)`, reference-free. It is DPO
    ([Rafailov et al., 2023](https://huggingface.co/papers/2305.18290)) on the team's joint margin, as in
    CoMLRL ([LLM Collaboration With Multi-Agent Reinforcement Learning, Liu et al., 2025]). Field names,
    defaults and aliases are those of the public CoMLRL 1.4.3 `MADPOConfig`; the differences are listed in
    `docs/compatibility.md`. All four preference trainers currently require `num_turns=1` and
    `joint_mode="aligned"`.

    Using [`~transformers.HfArgumentParser`] this class becomes a command line.

    Parameters:
        > Parameters that control the model

        num_agents (`int`, *optional*, defaults to `2`):
            Number of agents; in centralized collaboration the number of roles one actor model writes.
        collaboration_mode (`str`, *optional*, defaults to `"decentralized"`):
            `"decentralized"`: one policy per agent. `"centralized"`: one actor model writes every role's
            response in one joint completion, split into roles by the trainer's
            `centralized_comparator_adapter`. Aliases: `decentralised`, `multi_agent`, `centralised`,
            `single_agent`.
        agent_devices (`str` or `list[str]`, *optional*):
            Devices of the agents: `None` or `"auto"` (every agent on `cuda:i` when there are enough GPUs,
            `cuda:0` with fewer, else CPU), one device for all, or a list of one or `num_agents` devices.
        parallel_training (`str`, *optional*, defaults to `"none"`):
            `"none"`: every agent on the first device. `"mp"`: one device per agent from `agent_devices`,
            which is then required. Alias: `null` for `none`.
        disable_dropout (`bool`, *optional*, defaults to `True`):
            Whether dropout is switched off in the agents, so that scoring a completion is deterministic
            (the public library keeps dropout on while scoring preference log-probs).

        > Parameters that control generation

        max_new_tokens (`int`, *optional*, defaults to `256`):
            Maximum number of tokens each agent generates per response.
        temperature (`float`, *optional*, defaults to `0.6`):
            Sampling temperature; candidates are always sampled, so it must be > 0.
        top_p (`float`, *optional*, defaults to `0.6`):
            Nucleus-sampling probability mass, in (0, 1].
        top_k (`int` or `None`, *optional*, defaults to `50`):
            Top-k truncation; `0` disables it and `None` means the model's generation config (transformers'
            default is 50).

        > Parameters that control the preference data

        preference_num_candidates (`int`, *optional*, defaults to `80`):
            Responses each agent samples per item; responses with the same index form one joint response.
        preference_pairs_per_sample (`int` or `None`, *optional*, defaults to `16`):
            Pairs kept per item after ordering by `pair_selection`; `None` keeps all and is required with
            `pair_selection="all"`.
        pair_selection (`str`, *optional*, defaults to `"reward_gap"`):
            Order of an item's non-tied pairs: `"reward_gap"` (largest score gap first), `"all"`
            (enumeration order) or `"random"` (seeded). The iterative configs add `"comparator_reward"`.
        num_turns (`int`, *optional*, defaults to `1`):
            Turns per episode; must be 1 (a round of the iterative trainers is not a turn).
        joint_mode (`str`, *optional*, defaults to `"aligned"`):
            How candidates combine into joint responses; must be `"aligned"` (alias `align`).
        discount (`float`, *optional*, defaults to `1.0`):
            Multi-turn discount kept from MAGRPO; no effect with one turn.
        early_termination_threshold (`float`, *optional*):
            Multi-turn early stop kept from MAGRPO; no effect with one turn.
        external_prompt_passthrough (`bool`, *optional*, defaults to `False`):
            Multi-turn prompt passthrough kept from MAGRPO; no effect with one turn.

        > Parameters that control training

        num_train_epochs (`int`, *optional*, defaults to `20`):
            Epochs over the collected pair set (MADPO); over the training dataset for MARLHF's RL stage.
        agent_learning_rate (`float`, *optional*, defaults to `5e-6`):
            AdamW learning rate of every agent.
        dpo_beta (`float`, *optional*, defaults to `0.1`):
            β of the MADPO loss `−log σ(β · joint margin)`; must be > 0.
        rollout_buffer_size (`int`, *optional*, defaults to `2`):
            MAGRPO's buffer size; here only the default of `train_batch_size` (and MARLHF's RL buffer).
        train_batch_size (`int`, *optional*):
            Preference pairs per update; `None` takes `rollout_buffer_size`.
        exclude_last_completion_token (`bool`, *optional*, defaults to `False`):
            Leave each completion's last token out of its log-prob. By default every sampled token counts,
            EOS included (the decision to stop is part of the response); `True` reproduces the public
            library's decentralized scorer, for parity runs.
        max_nonfinite_losses_in_a_row (`int`, *optional*, defaults to `10`):
            A non-finite loss skips its update (counted and logged); this many in a row stop the run.
        use_environment_step (`bool`, *optional*, defaults to `True`):
            Whether the logging x-axis is CoMLRL's `env_step` (else the update count).
        environment_steps_per_pair (`int`, *optional*, defaults to `2`):
            `env_step` advance per trained pair.
        advantage_normalization (`bool`, *optional*, defaults to `True`):
            MARLHF RL stage: whiten advantages within each item's group. With it on, magrpo, mareinforce,
            marloo and maremax give the same advantages (each baseline is affine in the return).
        advantage_mode (`str`, *optional*, defaults to `"mean"`):
            MARLHF RL stage baseline: `mean`, `raw`, `rloo` or `max`; `rl_algorithm` sets it.
        reference_kl_enabled (`bool`, *optional*, defaults to `False`):
            MARLHF RL stage: subtract a KL penalty to a frozen copy of the initial agents from each agent's
            reward. MADPO's loss is reference-free, so it has no effect there.
        reference_kl_coef (`float`, *optional*, defaults to `0.1`):
            Coefficient of that KL penalty; must be >= 0.
        reference_devices (`str` or `list[str]`, *optional*):
            Devices of the reference models (one, or one per agent); `None` uses the agents' devices.

        > Parameters that control evaluation

        eval_interval (`int`, *optional*, defaults to `16`):
            Evaluate before every `eval_interval`-th update (counting from the first); `0` disables it.
        eval_num_samples (`int`, *optional*, defaults to `4`):
            Evaluation items per evaluation.
        eval_batch_size (`int`, *optional*, defaults to `1`):
            Evaluation items per generation batch.

        > Parameters that control logging and outputs

        output_dir (`str`, *optional*, defaults to `"outputs/madpo"`):
            Where the run writes everything: checkpoints as `checkpoint-{step}/`, replay rounds, policy
            snapshots, logs. A fixed relative default, resolved against the working directory.
        seed (`int`, *optional*, defaults to `42`):
            Seed of every random stream of the run (sampling, pair shuffles, replay draws, comparators).
        report_to (`str` or `list[str]`, *optional*, defaults to `"none"`):
            Logging sinks: `"none"`, `"tensorboard"`, `"wandb"`, or a list (comma-separated on a command
            line). Normalised to a list (`[]` for none). wandb is imported only when asked for.
        run_name (`str`, *optional*):
            Run name for the logging sinks.
        logging_steps (`int`, *optional*, defaults to `50`):
            Log training metrics when the x-axis (`env_step`) has advanced this much since the last log.
        logging_dir (`str`, *optional*):
            TensorBoard folder; `None` means `<output_dir>/logs`.
        disable_tqdm (`bool`, *optional*, defaults to `False`):
            Whether to hide progress bars.
        save_total_limit (`int`, *optional*):
            Keep at most this many checkpoints (oldest removed first); `None` keeps all.
    """

    # Parameters that control the model
    num_agents: int = _help("Number of agents (roles, with collaboration_mode='centralized').", 2)
    collaboration_mode: str = _help(
        "'decentralized' (one policy per agent) or 'centralized' (one actor model writes every role).",
        "decentralized",
    )
    agent_devices: None | str | list[str] = _help(
        "Agent devices: None/'auto', one device, or one per agent (comma-separated on a command line).", None
    )
    parallel_training: str = _help("'none' or 'mp' (one device per agent; needs agent_devices).", "none")
    disable_dropout: bool = _help("Switch dropout off in the agents so that scoring is deterministic.", True)

    # Parameters that control generation
    max_new_tokens: int = _help("Maximum new tokens per agent response.", 256)
    temperature: float = _help("Sampling temperature (> 0; candidates are always sampled).", 0.6)
    top_p: float = _help("Nucleus-sampling mass, in (0, 1].", 0.6)
    top_k: int | None = _help(
        "Top-k truncation; 0 disables it, None means the model's generation config.", 50
    )

    # Parameters that control the preference data
    preference_num_candidates: int = _help("Responses each agent samples per item (>= 2).", 80)
    preference_pairs_per_sample: int | None = _help(
        "Pairs kept per item (>= 1); None keeps all and is required with pair_selection='all'.", 16
    )
    pair_selection: str = _help("Pair order per item: 'reward_gap', 'all' or 'random'.", "reward_gap")
    num_turns: int = _help("Turns per episode; the preference trainers currently require 1.", 1)
    joint_mode: str = _help(
        "Joint-response mode; the preference trainers currently require 'aligned'.", "aligned"
    )
    discount: float = _help("Multi-turn discount kept from MAGRPO (no effect with one turn).", 1.0)
    early_termination_threshold: float | None = _help(
        "Multi-turn early stop kept from MAGRPO (no effect with one turn).", None
    )
    external_prompt_passthrough: bool = _help(
        "Multi-turn prompt passthrough kept from MAGRPO (no effect with one turn).", False
    )

    # Parameters that control training
    num_train_epochs: int = _help("Epochs over the collected pairs (MARLHF: RL epochs over the dataset).", 20)
    agent_learning_rate: float = _help("AdamW learning rate of every agent.", 5e-6)
    dpo_beta: float = _help("Beta of the MADPO loss -log sigmoid(beta * joint margin) (> 0).", 0.1)
    rollout_buffer_size: int = _help("MAGRPO buffer size; the default of train_batch_size.", 2)
    train_batch_size: int | None = _help("Preference pairs per update; None takes rollout_buffer_size.", None)
    exclude_last_completion_token: bool = _help(
        "Leave each completion's last token out of its log-prob (the public library's decentralized scorer).",
        False,
    )
    max_nonfinite_losses_in_a_row: int = _help(
        "Non-finite losses are skipped and counted; this many in a row stop the run.", 10
    )
    use_environment_step: bool = _help("Log against CoMLRL's env_step (else the update count).", True)
    environment_steps_per_pair: int = _help("env_step advance per trained pair.", 2)
    advantage_normalization: bool = _help(
        "MARLHF RL: whiten advantages per group (then all four baselines give the same advantages).", True
    )
    advantage_mode: str = _help("MARLHF RL baseline: mean, raw, rloo or max (set by rl_algorithm).", "mean")
    reference_kl_enabled: bool = _help(
        "MARLHF RL: KL penalty to the frozen initial agents (no effect on MADPO's reference-free loss).",
        False,
    )
    reference_kl_coef: float = _help("Coefficient of the reference KL penalty (>= 0).", 0.1)
    reference_devices: None | str | list[str] = _help(
        "Reference-model devices (one or one per agent); None uses the agents' devices.", None
    )

    # Parameters that control evaluation
    eval_interval: int = _help("Evaluate before every eval_interval-th update; 0 disables.", 16)
    eval_num_samples: int = _help("Evaluation items per evaluation.", 4)
    eval_batch_size: int = _help("Evaluation items per generation batch.", 1)

    # Parameters that control logging and outputs
    output_dir: str = _help(
        "Folder for everything the run writes (checkpoints, replay, snapshots, logs).", "outputs/madpo"
    )
    seed: int = _help("Seed of every random stream of the run.", 42)
    report_to: None | str | list[str] = _help(
        "Logging sinks: 'none', 'tensorboard', 'wandb' or a list (comma-separated on a command line).", "none"
    )
    run_name: str | None = _help("Run name for the logging sinks.", None)
    logging_steps: int = _help("Log training metrics every this many env steps.", 50)
    logging_dir: str | None = _help("TensorBoard folder; None means <output_dir>/logs.", None)
    disable_tqdm: bool = _help("Hide progress bars.", False)
    save_total_limit: int | None = _help("Keep at most this many checkpoints; None keeps all.", None)

    # Class-level switches for the subclasses (not fields).
    _iterative = False
    _uses_reference_kl = False
    _secret_fields = _SECRET_FIELDS

    # -- step 1: canonical values -------------------------------------------------------------------
    def _normalize(self) -> None:
        self.collaboration_mode = canonical_choice(
            "collaboration_mode", self.collaboration_mode, COLLABORATION_MODES, GENERATION_MODE_ALIASES
        )
        self._normalize_parallel_training()
        if not isinstance(self.joint_mode, str) or self.joint_mode.strip().lower() not in (
            *JOINT_MODES,
            *JOINT_MODE_ALIASES,
        ):
            raise ValueError(
                f"`joint_mode` must be 'aligned' (alias 'align'): {_SINGLE_TURN_NOTE}; "
                f"got {self.joint_mode!r}"
            )
        self.joint_mode = JOINT_MODE_ALIASES.get(
            self.joint_mode.strip().lower(), self.joint_mode.strip().lower()
        )
        self.pair_selection = validate_pair_selection(
            self.pair_selection, self.preference_pairs_per_sample, iterative=self._iterative
        )
        self.advantage_mode = canonical_choice("advantage_mode", self.advantage_mode, ESTIMATORS)
        self._normalize_devices_and_outputs()
        if isinstance(self.logging_dir, os.PathLike):
            self.logging_dir = os.fspath(self.logging_dir)

    # -- step 2 (defaults the public library fills in place) is _TrainerConfigBase._resolve ---------

    # -- step 3: rules ------------------------------------------------------------------------------
    def _validate(self) -> None:
        self._validate_agents_and_sampling(self.num_actor_models)

        _check_int("preference_num_candidates", self.preference_num_candidates, 2)
        _check_int("num_turns", self.num_turns)
        if self.num_turns != 1:
            raise ValueError(f"`num_turns` must be 1: {_SINGLE_TURN_NOTE}; got {self.num_turns}")
        _check_float("discount", self.discount, ge=0, le=1)
        _check_float("early_termination_threshold", self.early_termination_threshold, optional=True)
        _check_bool("external_prompt_passthrough", self.external_prompt_passthrough)

        _check_int("num_train_epochs", self.num_train_epochs, 1)
        _check_float("agent_learning_rate", self.agent_learning_rate, ge=0)
        _check_float("dpo_beta", self.dpo_beta, gt=0)
        _check_int("rollout_buffer_size", self.rollout_buffer_size, 1)
        _check_int("train_batch_size", self.train_batch_size, 1)
        _check_bool("exclude_last_completion_token", self.exclude_last_completion_token)
        _check_int("max_nonfinite_losses_in_a_row", self.max_nonfinite_losses_in_a_row, 1)
        _check_bool("use_environment_step", self.use_environment_step)
        _check_int("environment_steps_per_pair", self.environment_steps_per_pair, 1)
        _check_bool("advantage_normalization", self.advantage_normalization)
        _check_bool("reference_kl_enabled", self.reference_kl_enabled)
        _check_float("reference_kl_coef", self.reference_kl_coef, ge=0)

        self._validate_eval_and_outputs()

    def _warn_ineffective(self) -> None:
        if self.reference_kl_enabled and not self._uses_reference_kl:
            _warn(
                "`reference_kl_enabled=True` has no effect on MADPO: its loss is reference-free, so no "
                "reference model is loaded"
            )

    # -- derived values (and resolved_logging_dir, resolved_top_k, to_dict, from_dict) ------------------
    @property
    def is_centralized(self) -> bool:
        """One actor model writes every role (``collaboration_mode='centralized'``)."""
        return self.collaboration_mode == "centralized"

    @property
    def num_actor_models(self) -> int:
        """Actor models the trainer holds: one under centralized collaboration, else ``num_agents``."""
        return 1 if self.is_centralized else self.num_agents


# --------------------------------------------------------------------------------------------------
# MARLHF
# --------------------------------------------------------------------------------------------------


@dataclass
class MARLHFConfig(MADPOConfig):
    r"""
    Configuration class for [`MARLHFTrainer`]: Multi-Agent RL from Human Feedback.

    MARLHF fits a joint reward model to the preference pairs with the Bradley–Terry loss
    `−log σ(r(w) − r(l))` (Bradley & Terry, 1952; as in
    [Ouyang et al., 2022](https://huggingface.co/papers/2203.02155)), then trains the agents with a
    multi-agent RL backend against the frozen reward model (Multi-Agent Reinforcement Learning from Human
    Feedback, Zhang et al., 2024). It takes every [`MADPOConfig`] parameter (`num_train_epochs` counts RL
    epochs over the training dataset here, `train_batch_size` counts items per RL update and
    `rollout_buffer_size` items per generate call; `dpo_beta` is unused) plus:

    Parameters:
        > Parameters that control the reward model

        reward_model_name (`str`, *optional*):
            Backbone of the joint reward model: a local path, a preset or a hub id. `None` uses the agents'
            model name when they were given by name; actor objects without a name need it set.
        reward_model_device (`str`, *optional*):
            Device of the reward model; `None` means the first agent's device (the public library's
            `"cuda:0"` default fails on CPU-only machines).
        reward_learning_rate (`float`, *optional*, defaults to `1e-5`):
            AdamW learning rate of the reward model.
        reward_num_train_epochs (`int`, *optional*, defaults to `1`):
            Epochs of Bradley–Terry fitting over the training pairs.
        reward_train_batch_size (`int`, *optional*, defaults to `1`):
            Pairs per reward-model update (winners and losers scored in one forward).
        reward_max_length (`int`, *optional*):
            Token budget of the joint text, shared out per agent so that no agent's response is cut
            silently; `None` means no limit.
        reward_freeze_backbone (`bool`, *optional*, defaults to `False`):
            Train only the scalar head.
        reward_eval_fraction (`float`, *optional*, defaults to `0.1`):
            Share of the pairs held out to report the reward model's loss and pairwise accuracy; in [0, 1).

        > Parameters that control policy learning

        rl_algorithm (`str`, *optional*, defaults to `"magrpo"`):
            RL backend: `magrpo` (group-mean baseline, [GRPO](https://huggingface.co/papers/2402.03300)),
            `mareinforce` (raw returns; alias `mareforce`), `marloo` (leave-one-out,
            [RLOO](https://huggingface.co/papers/2402.14740)), `maremax` (group-max,
            [ReMax](https://huggingface.co/papers/2310.10505)), `maac` (centralized critic) or `iac`
            (per-agent critics). The first four set `advantage_mode`; with `advantage_normalization` on they
            give the same advantages.
        num_generations (`int`, *optional*, defaults to `4`):
            Joint responses sampled per item in the RL stage (>= 2 for the MAGRPO family, >= 1 for
            maac/iac).
        loss_type (`str`, *optional*, defaults to `"sequence_sum"`):
            Token-loss aggregation, TRL's names plus `sequence_sum` (the public library's `−A·Σ_t log π`
            averaged over sequences): `grpo`, `bnpo`, `token`, `dr_grpo`
            ([Dr. GRPO](https://huggingface.co/papers/2503.20783)), `dapo`
            ([DAPO](https://huggingface.co/papers/2503.14476)), `sequence_sum`.
        reference_kl_estimator (`str`, *optional*, defaults to `"k3"`):
            Estimator of the per-token reference KL: `k1`, `k2` or `k3` (Schulman, "Approximating KL
            Divergence", 2020); the public library uses k3.
        critic_model_name (`str`, *optional*):
            Critic backbone for maac/iac; `None` uses the agents' model name.
        critic_learning_rate (`float`, *optional*):
            Critic learning rate; `None` uses `agent_learning_rate`.
        critic_devices (`str` or `list[str]`, *optional*):
            Critic devices; `None` uses the agents' devices.
        use_separate_critic (`bool`, *optional*, defaults to `True`):
            iac: a separate critic model per agent (else a value head on each actor).
        critic_type (`str`, *optional*, defaults to `"v"`):
            `"v"`: V(h) at the last prompt token; `"q"`: Q(h, a) at the last response token.
        value_loss_coef (`float`, *optional*, defaults to `0.6`):
            Weight of the value loss; must be > 0.
        value_clip_range (`float`, *optional*, defaults to `0.2`):
            PPO-style value clipping (iac with a shared value head); `None` disables it.
        critic_value_head_hidden_dim (`int`, *optional*):
            Hidden width of the critic's value-head MLP; `None` means a linear head.
        value_head_hidden_dim (`int`, *optional*):
            Hidden width of the actors' value-head MLP (iac without separate critics).
    """

    # Parameters that control the reward model
    reward_model_name: str | None = _help(
        "Reward-model backbone (path, preset or hub id); None uses the agents' model name.", None
    )
    reward_model_device: str | None = _help("Reward-model device; None means the first agent's device.", None)
    reward_learning_rate: float = _help("AdamW learning rate of the reward model (> 0).", 1e-5)
    reward_num_train_epochs: int = _help("Bradley-Terry epochs over the training pairs.", 1)
    reward_train_batch_size: int = _help("Pairs per reward-model update.", 1)
    reward_max_length: int | None = _help(
        "Token budget of the joint reward text, shared out per agent.", None
    )
    reward_freeze_backbone: bool = _help("Train only the reward model's scalar head.", False)
    reward_eval_fraction: float = _help(
        "Share of pairs held out for reward-model loss and accuracy, in [0, 1).", 0.1
    )

    # Parameters that control policy learning
    rl_algorithm: str = _help("RL backend: magrpo, mareinforce, maremax, marloo, maac or iac.", "magrpo")
    num_generations: int = _help("Joint responses per item in the RL stage.", 4)
    loss_type: str = _help(
        "Token-loss aggregation: grpo, bnpo, token, dr_grpo, dapo or sequence_sum.", "sequence_sum"
    )
    reference_kl_estimator: str = _help("Reference KL estimator: k1, k2 or k3.", "k3")
    critic_model_name: str | None = _help(
        "Critic backbone for maac/iac; None uses the agents' model name.", None
    )
    critic_learning_rate: float | None = _help("Critic learning rate; None uses agent_learning_rate.", None)
    critic_devices: None | str | list[str] = _help("Critic devices; None uses the agents' devices.", None)
    use_separate_critic: bool = _help(
        "iac: a separate critic per agent (else a value head on each actor).", True
    )
    critic_type: str = _help("'v' (state value) or 'q' (state-action value).", "v")
    value_loss_coef: float = _help("Weight of the value loss (> 0).", 0.6)
    value_clip_range: float | None = _help("Value clipping range (iac shared head); None disables.", 0.2)
    critic_value_head_hidden_dim: int | None = _help(
        "Hidden width of the critic value head; None: linear.", None
    )
    value_head_hidden_dim: int | None = _help("Hidden width of the actors' value heads; None: linear.", None)

    output_dir: str = _override(
        MADPOConfig, "output_dir", "outputs/marlhf", "(MARLHF default: outputs/marlhf)"
    )

    _uses_reference_kl = True

    def _normalize(self) -> None:
        super()._normalize()
        self.rl_algorithm = canonical_choice(
            "rl_algorithm", self.rl_algorithm, RL_ALGORITHMS, RL_ALGORITHM_ALIASES
        )
        self.loss_type = canonical_choice("loss_type", self.loss_type, LOSS_TYPES)
        self.reference_kl_estimator = canonical_choice(
            "reference_kl_estimator", self.reference_kl_estimator, KL_ESTIMATORS
        )
        self.critic_type = canonical_choice("critic_type", self.critic_type, CRITIC_TYPES)
        self.critic_devices = _normalize_devices("critic_devices", self.critic_devices)
        if isinstance(self.reward_model_device, str):
            self.reward_model_device = self.reward_model_device.strip()

    def _resolve(self) -> None:
        super()._resolve()
        estimator = RL_ALGORITHM_ESTIMATORS.get(self.rl_algorithm)
        if estimator is not None and self.advantage_mode != estimator:
            # The public library overwrites advantage_mode silently; we only fill in the default and refuse
            # an explicit contradiction.
            if self.advantage_mode != MADPOConfig.advantage_mode:
                raise ValueError(
                    f"`advantage_mode` {self.advantage_mode!r} contradicts "
                    f"`rl_algorithm={self.rl_algorithm!r}`, "
                    f"whose baseline is {estimator!r}; choose the rl_algorithm of that baseline instead"
                )
            self.advantage_mode = estimator

    def _validate(self) -> None:
        super()._validate()
        _check_str("reward_model_name", self.reward_model_name, optional=True)
        if self.reward_model_device is not None:
            _check_str("reward_model_device", self.reward_model_device)
            _check_devices("reward_model_device", self.reward_model_device)
        _check_float("reward_learning_rate", self.reward_learning_rate, gt=0)
        _check_int("reward_num_train_epochs", self.reward_num_train_epochs, 1)
        _check_int("reward_train_batch_size", self.reward_train_batch_size, 1)
        _check_int("reward_max_length", self.reward_max_length, 1, optional=True)
        _check_bool("reward_freeze_backbone", self.reward_freeze_backbone)
        _check_float("reward_eval_fraction", self.reward_eval_fraction, ge=0, lt=1)

        _check_int("num_generations", self.num_generations)
        minimum = 1 if self.uses_critic else 2
        if self.num_generations < minimum:
            why = "maac/iac" if self.uses_critic else f"rl_algorithm={self.rl_algorithm!r} (a group baseline)"
            raise ValueError(f"`num_generations` must be >= {minimum} for {why}, got {self.num_generations}")
        _check_str("critic_model_name", self.critic_model_name, optional=True)
        _check_float("critic_learning_rate", self.critic_learning_rate, gt=0, optional=True)
        _check_devices("critic_devices", self.critic_devices)
        _check_bool("use_separate_critic", self.use_separate_critic)
        _check_float("value_loss_coef", self.value_loss_coef, gt=0)
        _check_float("value_clip_range", self.value_clip_range, gt=0, optional=True)
        _check_int("critic_value_head_hidden_dim", self.critic_value_head_hidden_dim, 1, optional=True)
        _check_int("value_head_hidden_dim", self.value_head_hidden_dim, 1, optional=True)

    def _warn_ineffective(self) -> None:
        super()._warn_ineffective()
        if not self.uses_critic:
            given = [
                n
                for n in ("critic_model_name", "critic_learning_rate", "critic_devices")
                if getattr(self, n) is not None
            ]
            if given:
                _warn(
                    f"{', '.join(f'`{n}`' for n in given)} {'has' if len(given) == 1 else 'have'} no effect "
                    f"with rl_algorithm={self.rl_algorithm!r} (only maac and iac have critics)"
                )

    # -- derived values -----------------------------------------------------------------------------
    @property
    def uses_critic(self) -> bool:
        """The RL backend is actor-critic (maac, iac)."""
        return self.rl_algorithm in ("maac", "iac")

    @property
    def scale_rewards(self) -> str:
        """``advantage_normalization`` in :func:`comlrl.rl.compute_advantages`' terms ("group" or "none")."""
        return "group" if self.advantage_normalization else "none"

    @property
    def resolved_critic_learning_rate(self) -> float:
        return (
            self.critic_learning_rate if self.critic_learning_rate is not None else self.agent_learning_rate
        )


# --------------------------------------------------------------------------------------------------
# Iterative fields: one mixin shared by MADPOIterConfig and MARLHFIterConfig
# --------------------------------------------------------------------------------------------------

_ITERATIVE_DOC = r"""
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


@dataclass
class _IterativePreferenceConfig:
    """Fields and rules shared by :class:`MADPOIterConfig` and :class:`MARLHFIterConfig` (a mixin placed
    before their base config in the class tree; see ``_ITERATIVE_DOC`` for the fields)."""

    # Parameters that control the iterations
    num_iterations: int = _help("Rounds of comparison, storage and training.", 6)
    preference_num_candidates: int = _override(
        MADPOConfig, "preference_num_candidates", 20, "(iterative: 20)"
    )
    preference_pairs_per_sample: int | None = _override(
        MADPOConfig, "preference_pairs_per_sample", 4, "(iterative: 4)"
    )
    pair_selection: str = _override(
        MADPOConfig,
        "pair_selection",
        "comparator_reward",
        "Iterative configs add 'comparator_reward' (default).",
    )

    # Parameters that control the comparator
    comparator_policy: str = _help(
        "Comparator source: current, current_copy, model, history or api.", "current"
    )
    comparator_generation_mode: str = _help(
        "'decentralized' (one response per role) or 'centralized' (one model writes every role).",
        "decentralized",
    )
    comparator_centralized_agent_index: int = _help(
        "Agent slot that writes centralized comparator responses.", 0
    )
    comparator_model_name: str | None = _help(
        "comparator_policy='model': one comparator model for all agents.", None
    )
    comparator_agents: list[str] | None = _help(
        "comparator_policy='model': one comparator source per agent.", None
    )
    comparator_devices: None | str | list[str] = _help(
        "Comparator devices; None uses the agents' devices.", None
    )
    comparator_num_candidates: int | None = _help(
        "Comparator candidates per item; None means preference_num_candidates.", None
    )
    comparator_history_k: int | None = _help("comparator_policy='history': rounds back (None means 1).", None)
    comparator_api_url: str | None = _help("comparator_policy='api': endpoint URL (required).", None)
    comparator_api_format: str = _help(
        "API format: generic, openai, anthropic or openai_responses.", "generic"
    )
    comparator_api_model: str | None = _help(
        "Model name sent to the API (required except for generic).", None
    )
    comparator_api_max_n_per_request: int | None = _help("Most completions per API request; None: all.", None)
    comparator_api_timeout: float = _help("Seconds per API request.", 120.0)
    comparator_api_headers: dict[str, Any] | str | None = _help(
        "Extra API headers (JSON object on a CLI).", None
    )
    comparator_api_key: str | None = _help(
        "Literal API key (never checkpointed; prefer comparator_api_key_env).", None, repr=False
    )
    comparator_api_key_env: str | None = _help("Environment variable holding the API key.", None)
    comparator_api_key_header: str = _help("Header carrying the API key.", "Authorization")
    comparator_api_key_prefix: str = _help("Prefix before the API key in its header.", "Bearer")
    comparator_api_response_field: str = _help(
        "generic format: dotted path of the completions.", "completions"
    )
    comparator_api_extra_body: dict[str, Any] | str | None = _help(
        "Merged into every API request body (JSON object on a CLI).", None
    )
    comparator_api_max_retries: int = _help(
        "Retries of a failed API request (429, 5xx, timeout, bad JSON).", 3
    )
    comparator_api_max_failure_rate: float = _help(
        "Stop when more than this share of a round's items fail at the API, in [0, 1].", 0.5
    )

    # Parameters that control the replay buffer
    preference_replay_mode: str = _help(
        "Replay mode: current, nearest_k, all_history or lambda_decay.", "current"
    )
    preference_replay_k: int | None = _help("nearest_k: number of newest non-empty rounds.", None)
    preference_replay_lambda: float | None = _help("lambda_decay: decay in [0, 1].", None)
    preference_replay_sample_size: int | None = _help("Pairs drawn per round by the historical modes.", None)
    preference_replay_dir: str | None = _help(
        "Round-file folder; None means <output_dir>/preference_replay.", None
    )

    # Parameters that control logging and outputs
    log_reward_distribution: bool = _help(
        "Log per-round reward histograms (needs reward_func.reward_range).", False
    )
    policy_checkpoint_dir: str | None = _help(
        "Save per-round policy snapshots there; None writes none (history keeps its own in memory).", None
    )

    _iterative = True

    def _normalize(self) -> None:
        super()._normalize()  # type: ignore[misc]
        self.comparator_policy = canonical_choice(
            "comparator_policy", self.comparator_policy, COMPARATOR_POLICIES, COMPARATOR_POLICY_ALIASES
        )
        self.comparator_generation_mode = canonical_choice(
            "comparator_generation_mode",
            self.comparator_generation_mode,
            COLLABORATION_MODES,
            GENERATION_MODE_ALIASES,
        )
        self.comparator_api_format = canonical_choice(
            "comparator_api_format", self.comparator_api_format, KNOWN_FORMATS, API_FORMAT_ALIASES
        )
        self.preference_replay_mode = normalize_replay_mode(self.preference_replay_mode)
        self.comparator_devices = _normalize_devices("comparator_devices", self.comparator_devices)
        self.comparator_api_headers = _normalize_mapping(
            "comparator_api_headers", self.comparator_api_headers
        )
        self.comparator_api_extra_body = _normalize_mapping(
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
        _check_int("num_iterations", self.num_iterations, 1)
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
        _check_str("preference_replay_dir", self.preference_replay_dir, optional=True)
        _check_bool("log_reward_distribution", self.log_reward_distribution)
        _check_str("policy_checkpoint_dir", self.policy_checkpoint_dir, optional=True)

    def _validate_comparator(self) -> None:
        policy = self.comparator_policy
        index = self.comparator_centralized_agent_index
        _check_int("comparator_centralized_agent_index", index, 0)
        if self.collaboration_mode == "centralized" and index != 0:
            raise ValueError(
                "`comparator_centralized_agent_index` must be 0 with collaboration_mode='centralized' "
                f"(there is only one actor model), got {index}"
            )
        if self.comparator_generation_mode == "centralized" and index >= self.num_agents:
            raise ValueError(
                f"`comparator_centralized_agent_index` must be < num_agents ({self.num_agents}), got {index}"
            )

        has_name = self.comparator_model_name is not None
        has_agents = self.comparator_agents is not None
        if policy == "model":
            if not has_name and not has_agents:
                raise ValueError(
                    "`comparator_model_name` or `comparator_agents` is required when "
                    "comparator_policy='model'"
                )
            if has_name and has_agents:
                raise ValueError(
                    "give one of `comparator_model_name` (one model for all agents) and `comparator_agents` "
                    "(one per agent), not both"
                )
        elif has_name or has_agents:
            name = "comparator_model_name" if has_name else "comparator_agents"
            raise ValueError(
                f"`{name}` is only valid when comparator_policy='model', got comparator_policy={policy!r}"
            )
        _check_str("comparator_model_name", self.comparator_model_name, optional=True)
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
        _check_devices("comparator_devices", self.comparator_devices)
        _check_device_count("comparator_devices", self.comparator_devices, self.num_actor_models)
        _check_int("comparator_num_candidates", self.comparator_num_candidates, 1, optional=True)
        if self.comparator_history_k is not None and policy != "history":
            raise ValueError(
                "`comparator_history_k` is only valid when comparator_policy='history', "
                f"got comparator_policy={policy!r}"
            )
        _check_int("comparator_history_k", self.comparator_history_k, 1, optional=True)

    def _validate_api(self) -> None:
        if self.comparator_policy == "api":
            if self.comparator_api_url is None:
                raise ValueError("`comparator_api_url` is required when comparator_policy='api'")
            url = self.comparator_api_url
            if not isinstance(url, str) or urllib.parse.urlsplit(url.strip()).scheme not in ("http", "https"):
                raise ValueError(f"`comparator_api_url` must be an http(s) URL, got {url!r}")
            if self.comparator_api_format != "generic" and not self.comparator_api_model:
                raise ValueError(
                    "`comparator_api_model` is required with "
                    f"comparator_api_format={self.comparator_api_format!r}"
                )
        _check_str("comparator_api_model", self.comparator_api_model, optional=True)
        _check_int(
            "comparator_api_max_n_per_request", self.comparator_api_max_n_per_request, 1, optional=True
        )
        _check_float("comparator_api_timeout", self.comparator_api_timeout, gt=0)
        headers = self.comparator_api_headers or {}
        for key, value in headers.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(
                    f"`comparator_api_headers` must map strings to strings, got {key!r}: {value!r}"
                )
        _check_str("comparator_api_key", self.comparator_api_key, optional=True)
        _check_str("comparator_api_key_env", self.comparator_api_key_env, optional=True)
        _check_str("comparator_api_key_header", self.comparator_api_key_header)
        _check_str("comparator_api_key_prefix", self.comparator_api_key_prefix, allow_empty=True)
        _check_str("comparator_api_response_field", self.comparator_api_response_field)
        _check_int("comparator_api_max_retries", self.comparator_api_max_retries, 0)
        _check_float("comparator_api_max_failure_rate", self.comparator_api_max_failure_rate, ge=0, le=1)

    def _warn_ineffective(self) -> None:
        super()._warn_ineffective()  # type: ignore[misc]
        if self.comparator_policy != "api":
            given = [n for n in _API_ONLY_FIELDS if getattr(self, n) is not None]
            if given:
                _warn(
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


@dataclass
class MADPOIterConfig(_IterativePreferenceConfig, MADPOConfig):
    r"""
    Configuration class for [`MADPOIterTrainer`]: iterative MADPO.

    Each of `num_iterations` rounds compares the current agents with a comparator on every item, stores
    the round's pairs, draws a replay sample from this and earlier rounds and trains `num_train_epochs`
    MADPO epochs on it (online / iterative preference optimization, cf. iterative DPO,
    [Xiong et al., 2023](https://huggingface.co/papers/2312.11456)). It takes every [`MADPOConfig`]
    parameter (with `num_train_epochs=1`, epochs per round, and `output_dir="outputs/madpo_iter"`) plus:

    Parameters:
    """

    num_train_epochs: int = _override(MADPOConfig, "num_train_epochs", 1, "(MADPOIter: 1, epochs per round)")
    output_dir: str = _override(
        MADPOConfig, "output_dir", "outputs/madpo_iter", "(MADPOIter: outputs/madpo_iter)"
    )


MADPOIterConfig.__doc__ = (MADPOIterConfig.__doc__ or "") + _ITERATIVE_DOC


@dataclass
class MARLHFIterConfig(_IterativePreferenceConfig, MARLHFConfig):
    r"""
    Configuration class for [`MARLHFIterTrainer`]: iterative MARLHF.

    Each round compares the current agents with a comparator, stores the round's pairs, fits a reward
    model on a replay sample (fresh each round unless `reward_warm_start`) and runs the RL stage for
    `num_train_epochs` epochs over the dataset. It takes every [`MARLHFConfig`] parameter (with
    `num_train_epochs=2`, `reward_num_train_epochs=2` and `output_dir="outputs/marlhf_iter"`) plus:

    Parameters:
        > Parameters that control the reward model

        preference_scoring_reward (`str`, *optional*, defaults to `"task"`):
            Oracle of new comparisons: `task` (the task reward; aliases `oracle`, `environment`, `env`) or
            `reward_model` (the last fitted reward model, the task reward until one exists; `model`,
            `learned`). Evaluation always uses the task reward.
        reward_warm_start (`bool`, *optional*, defaults to `False`):
            Start each round's reward model from the previous round's instead of a fresh head and backbone.
    """

    num_train_epochs: int = _override(
        MADPOConfig, "num_train_epochs", 2, "(MARLHFIter: 2, RL epochs per round)"
    )
    reward_num_train_epochs: int = _override(MARLHFConfig, "reward_num_train_epochs", 2, "(MARLHFIter: 2)")
    preference_scoring_reward: str = _help(
        "Oracle of new comparisons: 'task' or 'reward_model' (task reward until one is fitted).", "task"
    )
    reward_warm_start: bool = _help("Start each round's reward model from the previous round's.", False)
    output_dir: str = _override(
        MADPOConfig, "output_dir", "outputs/marlhf_iter", "(MARLHFIter: outputs/marlhf_iter)"
    )

    def _normalize(self) -> None:
        super()._normalize()
        self.preference_scoring_reward = canonical_choice(
            "preference_scoring_reward",
            self.preference_scoring_reward,
            SCORING_REWARDS,
            SCORING_REWARD_ALIASES,
        )

    def _validate(self) -> None:
        super()._validate()
        _check_bool("reward_warm_start", self.reward_warm_start)


MARLHFIterConfig.__doc__ = (MARLHFIterConfig.__doc__ or "") + _ITERATIVE_DOC
