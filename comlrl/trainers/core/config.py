"""The config base of every comlrl trainer: the fields all of them share, declared once, and the steps of
``__post_init__``; plus the field groups of an RL stage and of critics, shared by MARLHF and the online RL
configs.

The configs are standalone dataclasses in TRL's style, not :class:`transformers.TrainingArguments`
subclasses: ``num_train_epochs``, ``train_batch_size`` and ``logging_steps`` keep CoMLRL's meanings. Every
field carries ``metadata={"help": ...}``, so :class:`transformers.HfArgumentParser` turns a config into a
command line. ``__post_init__`` runs four steps, each cooperative along the class tree:

1. ``_normalize``: canonical values (strings lower-cased and stripped, aliases resolved, JSON strings from
   a command line parsed into dicts, comma-separated lists split);
2. ``_resolve``: the defaults the public library fills in place (``train_batch_size``, ...);
3. ``_validate``: every rule, with a message naming the field and the value;
4. ``_warn_ineffective``: a warning for settings that have no effect.

The rule of each field declared here is in :data:`FIELD_RULES`; each family runs the rules in its own
order (``_check_fields``), so the first error reported for a config stays the field it always was. All
steps are idempotent, so ``Config(**cfg.to_dict())`` gives back an equal config (what checkpoints rely on).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial
from typing import Any, ClassVar

from comlrl.reporting import normalize_report_to
from comlrl.rl import CRITIC_TYPES, KL_ESTIMATORS, LOSS_TYPES
from comlrl.trainers.core.training_knobs import TrainingKnobFields
from comlrl.validation import (
    StrictFromDict,
    canonical_choice,
    check_bool,
    check_device_count,
    check_devices,
    check_float,
    check_int,
    check_str,
    help_field,
    normalize_devices,
    public_wording,
)

__all__ = [
    "COLLABORATION_MODES",
    "FIELD_RULES",
    "GENERATION_MODE_ALIASES",
    "JOINT_MODES",
    "JOINT_MODE_ALIASES",
    "PARALLEL_TRAINING_ALIASES",
    "PARALLEL_TRAINING_MODES",
    "CriticFields",
    "RLStageFields",
    "TrainerConfig",
    "ValueHeadFields",
]

# Centralized collaboration: one actor model writes every role (preference configs' collaboration_mode,
# the iterative configs' comparator_generation_mode).
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

_int = partial(check_int, minimum=1)
_count = partial(check_int, minimum=0)
_positive = partial(check_float, gt=0)
_optional_str = partial(check_str, optional=True)
# Rules the public library checks too: its sentence ("x must be >= 1.") follows ours.
_public_int = partial(check_int, minimum=1, public=True)
_public_count = partial(check_int, minimum=0, public=True)

# The rule of every field this module declares, by name (fields with a rule of several fields are checked
# in the steps themselves).
FIELD_RULES: dict[str, Callable[[str, Any], None]] = {
    "num_agents": _public_int,
    "agent_devices": check_devices,
    "reference_devices": check_devices,
    "disable_dropout": check_bool,
    "use_vllm": check_bool,  # the vllm_* fields: comlrl.rollout.VLLMSettings (VLLMFields._validate_vllm)
    "max_new_tokens": _int,
    "temperature": _positive,
    "top_p": partial(check_float, gt=0, le=1),
    "top_k": partial(check_int, minimum=0, optional=True),
    "discount": partial(check_float, ge=0, le=1),
    "early_termination_threshold": partial(check_float, optional=True),
    "external_prompt_passthrough": check_bool,
    "num_train_epochs": _public_int,
    "agent_learning_rate": partial(check_float, ge=0),
    "rollout_buffer_size": _public_int,
    "train_batch_size": _public_int,
    "exclude_last_completion_token": check_bool,
    "max_nonfinite_losses_in_a_row": _int,
    "use_environment_step": check_bool,
    "advantage_normalization": check_bool,
    "reference_kl_enabled": check_bool,
    "reference_kl_coef": partial(check_float, ge=0, public=True),
    "eval_interval": _public_count,
    "eval_num_samples": _public_count,
    "eval_batch_size": _public_int,
    "output_dir": check_str,
    "seed": check_int,
    "run_name": _optional_str,
    "logging_steps": _public_int,
    "logging_dir": _optional_str,
    "disable_tqdm": check_bool,
    "save_total_limit": partial(check_int, minimum=1, optional=True),
    # CriticFields and ValueHeadFields
    "critic_model_name": _optional_str,
    "critic_learning_rate": partial(check_float, gt=0, optional=True, public=True),
    "critic_devices": check_devices,
    "value_loss_coef": partial(check_float, gt=0, public=True),
    "value_clip_range": partial(check_float, gt=0, optional=True, public=True),
    "critic_value_head_hidden_dim": partial(check_int, minimum=1, optional=True),
    "use_separate_critic": check_bool,
    "value_head_hidden_dim": partial(check_int, minimum=1, optional=True),
}


@dataclass
class TrainerConfig(TrainingKnobFields, StrictFromDict):
    r"""
    The fields every comlrl trainer config shares ([`MADPOConfig`], [`MARLHFConfig`], their iterative
    variants, [`MAGRPOConfig`], [`IACConfig`], [`MAACConfig`]); not used on its own. Names and defaults are
    those of the public CoMLRL 1.4.3 configs; a config states where its defaults differ. The optimisation
    knobs (gradient accumulation, LR schedule, clipping, bf16 / fp16, `save_steps`) are those of
    [`TrainingKnobFields`].

    Parameters:
        > Parameters that control the model

        num_agents (`int`, *optional*, defaults to `2`):
            Number of agents; in centralized collaboration the number of roles one actor model writes.
        agent_devices (`str` or `list[str]`, *optional*):
            Devices of the agents: `None` or `"auto"` (every agent on `cuda:i` when there are enough GPUs,
            `cuda:0` with fewer, else CPU), one device for all, or a list of one device or one per actor
            model (comma-separated on a command line).
        parallel_training (`str`, *optional*, defaults to `"none"`):
            `"none"`: every agent on the first device. `"mp"`: one device per agent from `agent_devices`,
            which is then required. Alias: `null` for `none`.
        disable_dropout (`bool`, *optional*, defaults to `True`):
            Whether dropout is switched off in the agents, so that scoring a completion is deterministic
            (the public library keeps dropout on while scoring).

        > Parameters that control generation

        max_new_tokens (`int`, *optional*, defaults to `256`):
            Maximum number of tokens each agent generates per response.
        temperature (`float`, *optional*, defaults to `0.6`):
            Sampling temperature; responses are always sampled, so it must be > 0.
        top_p (`float`, *optional*, defaults to `0.6`):
            Nucleus-sampling probability mass, in (0, 1].
        top_k (`int` or `None`, *optional*, defaults to `50`):
            Top-k truncation; `0` disables it and `None` means the model's generation config (transformers'
            default is 50).

        > Parameters that control the episode

        num_turns (`int`, *optional*, defaults to `1`):
            Turns per episode; the preference trainers take only 1, the online RL trainers (default 2, as
            the public MAGRPO) any count >= 1, with an `external_transition` driving the later turns.
        joint_mode (`str`, *optional*, defaults to `"aligned"`):
            How candidates combine into joint responses; must be `"aligned"` (alias `align`): candidate k of
            every agent forms joint response k.
        discount (`float`, *optional*, defaults to `1.0`):
            Multi-turn discount of the public library; no effect with one turn.
        early_termination_threshold (`float`, *optional*):
            Multi-turn early stop of the public library; no effect with one turn.
        external_prompt_passthrough (`bool`, *optional*, defaults to `False`):
            Multi-turn prompt passthrough of the public library; no effect with one turn.

        > Parameters that control training

        num_train_epochs (`int`, *optional*, defaults to `20`):
            Epochs over the training data (over the collected pairs for MADPO).
        agent_learning_rate (`float`, *optional*, defaults to `5e-6`):
            AdamW learning rate of every agent.
        rollout_buffer_size (`int`, *optional*, defaults to `2`):
            Items sampled (in one generate call) before the updates on them; the default of
            `train_batch_size`.
        train_batch_size (`int`, *optional*):
            Items per optimizer step (preference pairs for MADPO); `None` takes `rollout_buffer_size`.
        exclude_last_completion_token (`bool`, *optional*, defaults to `False`):
            Leave each completion's last token out of its log-prob. By default every sampled token counts,
            EOS included (the decision to stop is part of the response); `True` reproduces the public
            library's decentralized scorer, for parity runs.
        max_nonfinite_losses_in_a_row (`int`, *optional*, defaults to `10`):
            A NaN / inf loss or log-prob skips its update (no parameter changes; counted in
            `nonfinite_losses_skipped`, logged); an item with a non-finite reward is dropped (counted in
            `nonfinite_rewards_dropped`), and an update left with no item is a skipped one. This many skipped
            updates in a row stop the run. Same name, meaning and default in every trainer family (the MARLHF
            reward-model fit and pettingllms' AT-GRPO included).
        use_environment_step (`bool`, *optional*, defaults to `True`):
            Whether the logging x-axis is CoMLRL's `env_step` (else the update count).
        advantage_normalization (`bool`, *optional*, defaults to `True`):
            Whiten advantages (within each item's group for the MAGRPO family, over the update batch for
            the actor-critic trainers). With it on, magrpo, mareinforce, marloo and maremax give the same
            advantages (each baseline is affine in the return).
        reference_kl_enabled (`bool`, *optional*, defaults to `False`):
            Subtract `reference_kl_coef · Σ_t KL_t` (a per-token estimate against a frozen copy of the
            initial agents) from each agent's reward.
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

        output_dir (`str`, *optional*):
            Where the run writes everything: checkpoints as `checkpoint-{step}/`, logs, and the trainer's own
            files. A fixed relative default per config (e.g. `"outputs/madpo"`), resolved against the
            working directory.
        seed (`int`, *optional*, defaults to `42`):
            Seed of every random stream of the run.
        report_to (`str` or `list[str]`, *optional*, defaults to `"none"`):
            Logging sinks: `"none"`, `"tensorboard"`, `"wandb"`, `"all"` (every installed one, as in TRL)
            or a list (comma-separated on a command line). Normalised to a list (`[]` for none). wandb is
            imported only when asked for.
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
    num_agents: int = help_field("Number of agents (roles, with collaboration_mode='centralized').", 2)
    agent_devices: None | str | list[str] = help_field(
        "Agent devices: None/'auto', one device, or one per agent (comma-separated on a command line).", None
    )
    parallel_training: str = help_field("'none' or 'mp' (one device per agent; needs agent_devices).", "none")
    disable_dropout: bool = help_field(
        "Switch dropout off in the agents so that scoring is deterministic.", True
    )

    # Parameters that control generation
    max_new_tokens: int = help_field("Maximum new tokens per agent response.", 256)
    temperature: float = help_field("Sampling temperature (> 0; responses are always sampled).", 0.6)
    top_p: float = help_field("Nucleus-sampling mass, in (0, 1].", 0.6)
    top_k: int | None = help_field(
        "Top-k truncation; 0 disables it, None means the model's generation config.", 50
    )

    # Parameters that control the episode (multi-turn fields are accepted; one turn is supported)
    num_turns: int = help_field(
        "Turns per episode (preference trainers: 1; online RL: >= 1 with an external_transition).", 1
    )
    joint_mode: str = help_field("Joint-response mode; must be 'aligned'.", "aligned")
    discount: float = help_field("Multi-turn discount (no effect with one turn).", 1.0)
    early_termination_threshold: float | None = help_field(
        "Multi-turn early stop (no effect with one turn).", None
    )
    external_prompt_passthrough: bool = help_field(
        "Multi-turn prompt passthrough (no effect with one turn).", False
    )

    # Parameters that control training
    num_train_epochs: int = help_field("Epochs over the training data (MADPO: over the collected pairs).", 20)
    agent_learning_rate: float = help_field("AdamW learning rate of every agent.", 5e-6)
    rollout_buffer_size: int = help_field(
        "Items sampled before the updates on them; the default of train_batch_size.", 2
    )
    train_batch_size: int | None = help_field(
        "Items (MADPO: preference pairs) per update; None takes rollout_buffer_size.", None
    )
    exclude_last_completion_token: bool = help_field(
        "Leave each completion's last token out of its log-prob (the public library's decentralized scorer).",
        False,
    )
    max_nonfinite_losses_in_a_row: int = help_field(
        "Updates with a NaN / inf loss or log-prob (or no item with finite rewards) are skipped, counted and "
        "logged; this many in a row stop the run.",
        10,
    )
    use_environment_step: bool = help_field("Log against CoMLRL's env_step (else the update count).", True)
    advantage_normalization: bool = help_field(
        "Whiten advantages (then the four MAGRPO-family baselines give the same advantages).", True
    )
    reference_kl_enabled: bool = help_field("KL penalty to a frozen copy of the initial agents.", False)
    reference_kl_coef: float = help_field("Coefficient of the reference KL penalty (>= 0).", 0.1)
    reference_devices: None | str | list[str] = help_field(
        "Reference-model devices (one or one per agent); None uses the agents' devices.", None
    )

    # Parameters that control evaluation
    eval_interval: int = help_field("Evaluate before every eval_interval-th update; 0 disables.", 16)
    eval_num_samples: int = help_field("Evaluation items per evaluation.", 4)
    eval_batch_size: int = help_field("Evaluation items per generation batch.", 1)

    # Parameters that control logging and outputs
    output_dir: str = help_field("Folder for everything the run writes (checkpoints, logs, ...).", "outputs")
    seed: int = help_field("Seed of every random stream of the run.", 42)
    report_to: None | str | list[str] = help_field(
        "Logging sinks: 'none', 'tensorboard', 'wandb', 'all' or a list (comma-separated on a command line).",
        "none",
    )
    run_name: str | None = help_field("Run name for the logging sinks.", None)
    logging_steps: int = help_field("Log training metrics every this many env steps.", 50)
    logging_dir: str | None = help_field("TensorBoard folder; None means <output_dir>/logs.", None)
    disable_tqdm: bool = help_field("Hide progress bars.", False)
    save_total_limit: int | None = help_field("Keep at most this many checkpoints; None keeps all.", None)

    # Fields that ``to_dict(redact_secrets=True)`` sets to None.
    _secret_fields: ClassVar[tuple[str, ...]] = ()
    # Why num_turns and joint_mode are fixed, in their error messages.
    _single_turn_note: ClassVar[str] = "the trainers here are single-turn"
    _unknown_fields_message = "unknown field(s) for {cls}: {unknown_names}; known fields: {known_names}"

    def __post_init__(self) -> None:
        self._normalize()
        self._resolve()
        self._validate()
        self._warn_ineffective()

    # -- step 1: canonical values -------------------------------------------------------------------
    def _normalize(self) -> None:
        self._normalize_choices()
        self.agent_devices = normalize_devices("agent_devices", self.agent_devices)
        self.reference_devices = normalize_devices("reference_devices", self.reference_devices)
        self.report_to = normalize_report_to(self.report_to)
        self._normalize_training_knobs()
        for name in ("output_dir", "logging_dir"):
            if isinstance(getattr(self, name), os.PathLike):
                setattr(self, name, os.fspath(getattr(self, name)))

    def _normalize_choices(self) -> None:
        """The choice fields, before the devices and ``report_to`` (a family adds its own around them)."""
        parallel = "none" if self.parallel_training is None else self.parallel_training
        self.parallel_training = canonical_choice(
            "parallel_training",
            parallel,
            PARALLEL_TRAINING_MODES,
            PARALLEL_TRAINING_ALIASES,
            public="parallel_training only supports: none, mp.",
        )
        self._normalize_joint_mode()

    def _normalize_joint_mode(self) -> None:
        """``joint_mode``: ``aligned`` (alias ``align``) here; the online RL configs also take ``cross``."""
        key = self.joint_mode.strip().lower() if isinstance(self.joint_mode, str) else None
        if key not in (*JOINT_MODES, *JOINT_MODE_ALIASES):
            raise ValueError(
                f"`joint_mode` must be 'aligned' (alias 'align'): {self._single_turn_note}; "
                f"got {self.joint_mode!r}"
            )
        self.joint_mode = JOINT_MODE_ALIASES.get(key, key)

    # -- step 2: defaults the public library fills in place -----------------------------------------
    def _resolve(self) -> None:
        if self.train_batch_size is None:
            self.train_batch_size = self.rollout_buffer_size

    # -- step 3: rules ------------------------------------------------------------------------------
    def _validate(self) -> None:
        self._validate_agents_and_sampling()
        self._validate_episode()
        self._validate_training()
        self._validate_eval_and_outputs()
        self._validate_training_knobs()

    def _check_fields(self, *names: str) -> None:
        """The :data:`FIELD_RULES` of ``names``, in that order."""
        for name in names:
            FIELD_RULES[name](name, getattr(self, name))

    def _validate_agents_and_sampling(self) -> None:
        """The agent, device and sampling fields; device lists hold one entry or one per actor model."""
        self._check_fields("num_agents")
        if self.parallel_training == "mp" and self.agent_devices is None:
            message = "`agent_devices` is required when `parallel_training='mp'` (one device per agent)"
            raise ValueError(public_wording(message, "parallel_training='mp' requires explicit agent_devices."))
        self._check_fields("agent_devices", "reference_devices")
        check_device_count("agent_devices", self.agent_devices, self.num_actor_models)
        check_device_count("reference_devices", self.reference_devices, self.num_actor_models)
        self._check_fields("disable_dropout", "max_new_tokens", "temperature", "top_p", "top_k")

    def _validate_episode(self) -> None:
        check_int("num_turns", self.num_turns)
        if self.num_turns != 1:
            raise ValueError(f"`num_turns` must be 1: {self._single_turn_note}; got {self.num_turns}")
        self._check_fields("discount", "early_termination_threshold", "external_prompt_passthrough")

    def _validate_training(self) -> None:
        """Each family checks the training fields (the shared ones through ``_check_fields``) in its own
        order, interleaved with its own."""
        raise NotImplementedError(f"{type(self).__name__} does not validate its training fields")

    def _validate_eval_and_outputs(self) -> None:
        self._check_fields(
            "eval_interval",
            "eval_num_samples",
            "eval_batch_size",
            "output_dir",
            "seed",
            "run_name",
            "logging_steps",
            "logging_dir",
            "disable_tqdm",
            "save_total_limit",
        )

    # -- step 4: warnings ---------------------------------------------------------------------------
    def _warn_ineffective(self) -> None:
        self._warn_ineffective_training_knobs()

    # -- derived values -----------------------------------------------------------------------------
    @property
    def num_actor_models(self) -> int:
        """Actor models the trainer holds (one per agent unless a config says otherwise)."""
        return self.num_agents

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
        a checkpoint. :meth:`from_dict` is the inverse; an unknown key there is an error naming it."""
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


# --------------------------------------------------------------------------------------------------
# Field groups of an RL stage and of critics (MARLHF's RL stage, MAGRPO, IAC, MAAC)
# --------------------------------------------------------------------------------------------------


@dataclass
class RLStageFields:
    r"""
    The policy-gradient fields shared by [`MARLHFConfig`] (its RL stage) and the online RL configs; a
    mixin placed before the config base in the class tree.

    Parameters:
        > Parameters that control policy learning

        num_generations (`int`, *optional*, defaults to `4`):
            Joint responses sampled per item (candidate k of every agent forms joint response k); >= 2 for
            a group baseline (the MAGRPO family), >= 1 with a critic.
        loss_type (`str`, *optional*, defaults to `"sequence_sum"`):
            Token-loss aggregation, TRL's names plus `sequence_sum` (the public library's `−A·Σ_t log π`
            averaged over sequences): `grpo`, `bnpo`, `token`, `dr_grpo`
            ([Dr. GRPO](https://huggingface.co/papers/2503.20783)), `dapo`
            ([DAPO](https://huggingface.co/papers/2503.14476)), `sequence_sum`. Padding never counts.
        reference_kl_estimator (`str`, *optional*, defaults to `"k3"`):
            Estimator of the per-token reference KL: `k1`, `k2` or `k3` (Schulman, "Approximating KL
            Divergence", 2020); the public library uses k3.
    """

    num_generations: int = help_field("Joint responses sampled per item.", 4)
    loss_type: str = help_field(
        "Token-loss aggregation: grpo, bnpo, token, dr_grpo, dapo or sequence_sum.", "sequence_sum"
    )
    reference_kl_estimator: str = help_field("Per-token reference KL estimator: k1, k2 or k3.", "k3")

    def _normalize_rl_stage(self) -> None:
        self.loss_type = canonical_choice("loss_type", self.loss_type, LOSS_TYPES)
        self.reference_kl_estimator = canonical_choice(
            "reference_kl_estimator", self.reference_kl_estimator, KL_ESTIMATORS
        )

    def _validate_num_generations(self) -> None:
        check_int("num_generations", self.num_generations)
        minimum, why = self._num_generations_floor()
        if self.num_generations < minimum:
            raise ValueError(f"`num_generations` must be >= {minimum} for {why}, got {self.num_generations}")

    def _num_generations_floor(self) -> tuple[int, str]:
        """The smallest ``num_generations`` the trainer learns from, and why (for the message)."""
        raise NotImplementedError


@dataclass
class CriticFields:
    r"""
    The critic fields shared by [`MARLHFConfig`] (`rl_algorithm` maac or iac) and the actor-critic configs;
    a mixin placed before the config base in the class tree.

    Parameters:
        > Parameters that control the critic

        critic_model_name (`str`, *optional*):
            Critic backbone (preset, local path or hub id) when the trainer gets no critic models; `None`
            uses the agents' model name (actor objects without a name need one of them).
        critic_learning_rate (`float`, *optional*):
            AdamW learning rate of the critics (value heads); `None` uses `agent_learning_rate`.
        critic_devices (`str` or `list[str]`, *optional*):
            Critic devices (one, or one per critic); `None` uses the agents' devices.
        critic_type (`str`, *optional*, defaults to `"v"`):
            `"v"`: the critic reads the prompt and predicts V(h), advantage `R − V(h)`. `"q"`: it reads
            prompt and response and predicts Q(h, a), advantage `Q(h, a) − mean_group Q` (needs
            `num_generations >= 2`; see `comlrl.rl.values`).
        value_loss_coef (`float`, *optional*, defaults to `0.6`):
            Weight of the value loss `mean (V − R)²`; > 0.
        value_clip_range (`float`, *optional*, defaults to `0.2`):
            PPO value clipping around the rollout-time values; `None` disables it. With one update per
            rollout batch (as here) the rollout-time values are the current ones, so the clip is inactive.
        critic_value_head_hidden_dim (`int`, *optional*):
            Hidden width of the critic's value-head MLP; `None` means a linear head.
    """

    critic_model_name: str | None = help_field("Critic backbone; None uses the agents' model name.", None)
    critic_learning_rate: float | None = help_field(
        "Critic learning rate; None uses agent_learning_rate.", None
    )
    critic_devices: None | str | list[str] = help_field("Critic devices; None uses the agents' devices.", None)
    critic_type: str = help_field("'v' (state value) or 'q' (state-action value).", "v")
    value_loss_coef: float = help_field("Weight of the value loss (> 0).", 0.6)
    value_clip_range: float | None = help_field("Value clipping range; None disables it.", 0.2)
    critic_value_head_hidden_dim: int | None = help_field(
        "Hidden width of the critic value head; None: linear.", None
    )

    def _normalize_critic(self) -> None:
        self.critic_type = canonical_choice("critic_type", self.critic_type, CRITIC_TYPES)
        self.critic_devices = normalize_devices("critic_devices", self.critic_devices)

    @property
    def resolved_critic_learning_rate(self) -> float:
        return (
            self.critic_learning_rate if self.critic_learning_rate is not None else self.agent_learning_rate
        )


@dataclass
class ValueHeadFields:
    r"""
    Per-agent critics: separate models or value heads on the agents' own models ([`MARLHFConfig`] with
    `rl_algorithm="iac"`, [`IACConfig`]).

    Parameters:
        > Parameters that control the critic

        use_separate_critic (`bool`, *optional*, defaults to `True`):
            A separate critic model per agent; `False` puts a value head on each agent's model (the value
            loss then also trains the agent's backbone).
        value_head_hidden_dim (`int`, *optional*):
            Hidden width of the agents' value heads (`use_separate_critic=False`); `None` means linear.
    """

    use_separate_critic: bool = help_field("A separate critic per agent (else a value head on each actor).", True)
    value_head_hidden_dim: int | None = help_field("Hidden width of the actors' value heads; None: linear.", None)
