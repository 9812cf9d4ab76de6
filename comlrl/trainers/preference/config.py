"""Configuration of the preference trainers: MADPO, MARLHF and their iterative variants.

The four classes accept the public CoMLRL 1.4.3 field names, defaults and value aliases, so a script
written for that library keeps its configuration. The fields every trainer shares, the ``__post_init__``
steps (``_normalize``, ``_resolve``, ``_validate``, ``_warn_ineffective``), ``to_dict`` and ``from_dict`` are
:class:`~comlrl.trainers.core.config.TrainerConfig`'s; MARLHF's RL-stage and critic fields are the core's
field groups; the iteration, comparator and replay fields are
:class:`~comlrl.trainers.preference.iterative_config._IterativePreferenceConfig`'s. This module holds the
fields and rules of MADPO and MARLHF themselves, and re-exports the value tables of the public surface.

Values derived from fields (directories under ``output_dir``, the comparator's candidate count, ...) are
read-only properties. All steps are idempotent, so ``MADPOConfig(**cfg.to_dict())`` gives back an equal
config (what checkpoints rely on).
"""

from __future__ import annotations

from dataclasses import dataclass

from comlrl.reporting import REPORT_TO_CHOICES
from comlrl.rl import CRITIC_TYPES, ESTIMATORS, RL_ALGORITHM_ESTIMATORS
from comlrl.trainers.core.config import (
    COLLABORATION_MODES,
    GENERATION_MODE_ALIASES,
    JOINT_MODE_ALIASES,
    JOINT_MODES,
    PARALLEL_TRAINING_ALIASES,
    PARALLEL_TRAINING_MODES,
    CriticFields,
    RLStageFields,
    TrainerConfig,
    ValueHeadFields,
)
from comlrl.trainers.core.vllm_fields import VLLMFields
from comlrl.trainers.preference.iterative_config import (
    API_FORMAT_ALIASES,
    COMPARATOR_POLICIES,
    COMPARATOR_POLICY_ALIASES,
    _IterativePreferenceConfig,
)
from comlrl.trainers.preference.pairs import validate_pair_selection
from comlrl.validation import (
    canonical_choice,
    check_bool,
    check_devices,
    check_float,
    check_int,
    check_str,
    help_field,
    override_field,
    public_wording,
    warn,
)

__all__ = [
    "API_FORMAT_ALIASES",
    "COLLABORATION_MODES",
    "COMPARATOR_POLICIES",
    "COMPARATOR_POLICY_ALIASES",
    "GENERATION_MODE_ALIASES",
    "JOINT_MODES",
    "JOINT_MODE_ALIASES",
    "PARALLEL_TRAINING_ALIASES",
    "PARALLEL_TRAINING_MODES",
    "PREFERENCE_REFERENCES",
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

# Value aliases (the public library's table; keys are lower-cased and stripped before lookup)
SCORING_REWARDS = ("task", "reward_model")
SCORING_REWARD_ALIASES = {
    "oracle": "task",
    "environment": "task",
    "env": "task",
    "model": "reward_model",
    "learned": "reward_model",
}
RL_ALGORITHMS = ("magrpo", "mareinforce", "maremax", "marloo", "maac", "iac")
RL_ALGORITHM_ALIASES = {"mareforce": "mareinforce"}
PREFERENCE_REFERENCES = ("none", "initial")  # MADPO's margin: reference-free, or against the initial agents

_SINGLE_TURN_NOTE = (
    "MADPO, MADPOIter, MARLHF and MARLHFIter currently require num_turns=1 and joint_mode='aligned'"
)


# --------------------------------------------------------------------------------------------------
# MADPO
# --------------------------------------------------------------------------------------------------


@dataclass
class MADPOConfig(VLLMFields, TrainerConfig):
    r"""
    Configuration class for [`MADPOTrainer`]: Multi-Agent Direct Preference Optimization.

    MADPO trains a team of agents directly on preferences between joint responses. Agent i's margin on a
    pair is `log π_i(w_i | x_i) − log π_i(l_i | x_i)`; the joint margin sums them over the agents and the
    loss is `−log σ(dpo_beta · joint margin)`, reference-free (as the public library; `preference_reference`
    adds DPO's frozen reference). It is DPO
    ([Rafailov et al., 2023](https://huggingface.co/papers/2305.18290)) on the team's joint margin, as in
    CoMLRL ([LLM Collaboration With Multi-Agent Reinforcement Learning, Liu et al., 2025]). Field names,
    defaults and aliases are those of the public CoMLRL 1.4.3 `MADPOConfig`; the differences are listed in
    `docs/compatibility.md`. All four preference trainers currently require `num_turns=1` and
    `joint_mode="aligned"`.

    It takes every [`TrainerConfig`] parameter (with `output_dir="outputs/madpo"`). Here `num_train_epochs`
    counts epochs over the collected pair set, `train_batch_size` preference pairs per update
    (`rollout_buffer_size`, MAGRPO's buffer size, is only its default); `reference_kl_enabled` has no effect
    (MADPO's loss is reference-free) and `advantage_normalization` / `advantage_mode` act only in MARLHF's RL
    stage. Using [`~transformers.HfArgumentParser`] this class becomes a command line. Its own parameters:

    Parameters:
        > Parameters that control the model

        collaboration_mode (`str`, *optional*, defaults to `"decentralized"`):
            `"decentralized"`: one policy per agent. `"centralized"`: one actor model writes every role's
            response in one joint completion, split into roles by the trainer's
            `centralized_comparator_adapter`. Aliases: `decentralised`, `multi_agent`, `centralised`,
            `single_agent`.

        > Parameters that control the preference data

        preference_num_candidates (`int`, *optional*, defaults to `80`):
            Responses each agent samples per item; responses with the same index form one joint response.
        preference_pairs_per_sample (`int` or `None`, *optional*, defaults to `16`):
            Pairs kept per item after ordering by `pair_selection`; `None` keeps all and is required with
            `pair_selection="all"`.
        pair_selection (`str`, *optional*, defaults to `"reward_gap"`):
            Order of an item's non-tied pairs: `"reward_gap"` (largest score gap first), `"all"`
            (enumeration order) or `"random"` (seeded). The iterative configs add `"comparator_reward"`.

        > Parameters that control training

        dpo_beta (`float`, *optional*, defaults to `0.1`):
            β of the MADPO loss `−log σ(β · joint margin)`; must be > 0.
        preference_reference (`str`, *optional*, defaults to `"none"`):
            `"none"`: the public, reference-free margin. `"initial"`: DPO's margin against a frozen copy of
            the agents as they were when the trainer was built, `(log π_i(w) − log π_ref(w)) −
            (log π_i(l) − log π_ref(l))` per agent (our extension; the copy goes on `reference_devices` and is
            saved once in `output_dir/preference_reference` so a resumed run reloads it). No effect on MARLHF.
        environment_steps_per_pair (`int`, *optional*, defaults to `2`):
            `env_step` advance per trained pair.
        advantage_mode (`str`, *optional*, defaults to `"mean"`):
            MARLHF RL stage baseline: `mean`, `raw`, `rloo` or `max`; `rl_algorithm` sets it.
    """

    # Parameters that control the model
    collaboration_mode: str = help_field(
        "'decentralized' (one policy per agent) or 'centralized' (one actor model writes every role).",
        "decentralized",
    )

    # Parameters that control the preference data
    preference_num_candidates: int = help_field("Responses each agent samples per item (>= 2).", 80)
    preference_pairs_per_sample: int | None = help_field(
        "Pairs kept per item (>= 1); None keeps all and is required with pair_selection='all'.", 16
    )
    pair_selection: str = help_field("Pair order per item: 'reward_gap', 'all' or 'random'.", "reward_gap")

    # Parameters that control training
    dpo_beta: float = help_field("Beta of the MADPO loss -log sigmoid(beta * joint margin) (> 0).", 0.1)
    preference_reference: str = help_field(
        "'none' (the public reference-free margin) or 'initial' (DPO's margin against a frozen copy of the "
        "agents as the trainer got them).",
        "none",
    )
    environment_steps_per_pair: int = help_field("env_step advance per trained pair.", 2)
    advantage_mode: str = help_field(
        "MARLHF RL baseline: mean, raw, rloo or max (set by rl_algorithm).", "mean"
    )

    output_dir: str = override_field(TrainerConfig, "output_dir", "outputs/madpo", "(MADPO: outputs/madpo)")

    # Class-level switches for the subclasses (not fields).
    _iterative = False
    _uses_reference_kl = False
    _uses_preference_reference = True
    _single_turn_note = _SINGLE_TURN_NOTE

    # -- step 1: canonical values -------------------------------------------------------------------
    def _normalize_choices(self) -> None:
        self.collaboration_mode = canonical_choice(
            "collaboration_mode",
            self.collaboration_mode,
            COLLABORATION_MODES,
            GENERATION_MODE_ALIASES,
            public="collaboration_mode must be decentralized or centralized.",
        )
        super()._normalize_choices()
        self.pair_selection = validate_pair_selection(
            self.pair_selection, self.preference_pairs_per_sample, iterative=self._iterative
        )
        self.advantage_mode = canonical_choice(
            "advantage_mode",
            self.advantage_mode,
            ESTIMATORS,
            public="advantage_mode must be one of: mean, raw, max, rloo.",
        )
        self.preference_reference = canonical_choice(
            "preference_reference", self.preference_reference, PREFERENCE_REFERENCES
        )

    # -- step 3: rules ------------------------------------------------------------------------------
    def _validate_episode(self) -> None:
        check_int("preference_num_candidates", self.preference_num_candidates, 2, public=True)
        turns = self.num_turns
        if isinstance(turns, int) and not isinstance(turns, bool) and turns != 1:
            public = "num_turns must be >= 1." if turns < 1 else "MADPO currently supports num_turns=1 only."
            raise ValueError(public_wording(f"`num_turns` must be 1: {self._single_turn_note}; got {turns}", public))
        super()._validate_episode()

    def _validate_training(self) -> None:
        self._check_fields("num_train_epochs", "agent_learning_rate")
        check_float("dpo_beta", self.dpo_beta, gt=0, public=True)
        self._check_fields(
            "rollout_buffer_size",
            "train_batch_size",
            "exclude_last_completion_token",
            "max_nonfinite_losses_in_a_row",
            "use_environment_step",
        )
        check_int("environment_steps_per_pair", self.environment_steps_per_pair, 1, public=True)
        self._check_fields("advantage_normalization", "reference_kl_enabled", "reference_kl_coef")

    def _warn_ineffective(self) -> None:
        super()._warn_ineffective()
        if self.reference_kl_enabled and not self._uses_reference_kl:
            warn(
                "`reference_kl_enabled=True` has no effect on MADPO: its loss is reference-free, so no "
                "reference model is loaded (`preference_reference='initial'` adds DPO's reference)"
            )
        if self.preference_reference != "none" and not self._uses_preference_reference:
            warn(
                f"`preference_reference={self.preference_reference!r}` has no effect on MARLHF: it trains "
                "by RL against the reward model (`reference_kl_enabled` is its reference)"
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
class MARLHFConfig(RLStageFields, CriticFields, ValueHeadFields, MADPOConfig):
    r"""
    Configuration class for [`MARLHFTrainer`]: Multi-Agent RL from Human Feedback.

    MARLHF fits a joint reward model to the preference pairs with the Bradley–Terry loss
    `−log σ(r(w) − r(l))` (Bradley & Terry, 1952; as in
    [Ouyang et al., 2022](https://huggingface.co/papers/2203.02155)), then trains the agents with a
    multi-agent RL backend against the frozen reward model (Multi-Agent Reinforcement Learning from Human
    Feedback, Zhang et al., 2024). It takes every [`MADPOConfig`] parameter (`num_train_epochs` counts RL
    epochs over the training dataset here, `train_batch_size` counts items per RL update and
    `rollout_buffer_size` items per generate call; `dpo_beta` is unused; `output_dir="outputs/marlhf"`),
    the RL-stage parameters of [`RLStageFields`] and, for maac and iac, the critic parameters of
    [`CriticFields`] and [`ValueHeadFields`], plus:

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
            give the same advantages. `num_generations` must be >= 2 for the first four, >= 1 for maac/iac.
    """

    # Parameters that control the reward model
    reward_model_name: str | None = help_field(
        "Reward-model backbone (path, preset or hub id); None uses the agents' model name.", None
    )
    reward_model_device: str | None = help_field(
        "Reward-model device; None means the first agent's device.", None
    )
    reward_learning_rate: float = help_field("AdamW learning rate of the reward model (> 0).", 1e-5)
    reward_num_train_epochs: int = help_field("Bradley-Terry epochs over the training pairs.", 1)
    reward_train_batch_size: int = help_field("Pairs per reward-model update.", 1)
    reward_max_length: int | None = help_field(
        "Token budget of the joint reward text, shared out per agent.", None
    )
    reward_freeze_backbone: bool = help_field("Train only the reward model's scalar head.", False)
    reward_eval_fraction: float = help_field(
        "Share of pairs held out for reward-model loss and accuracy, in [0, 1).", 0.1
    )

    # Parameters that control policy learning
    rl_algorithm: str = help_field("RL backend: magrpo, mareinforce, maremax, marloo, maac or iac.", "magrpo")

    output_dir: str = override_field(TrainerConfig, "output_dir", "outputs/marlhf", "(MARLHF: outputs/marlhf)")

    _uses_reference_kl = True
    _uses_preference_reference = False

    def _normalize(self) -> None:
        super()._normalize()
        self.rl_algorithm = canonical_choice(
            "rl_algorithm",
            self.rl_algorithm,
            RL_ALGORITHMS,
            RL_ALGORITHM_ALIASES,
            public="rl_algorithm must be one of: magrpo, mareinforce, maremax, marloo, maac, iac.",
        )
        self._normalize_rl_stage()
        self._normalize_critic()
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
        check_str("reward_model_name", self.reward_model_name, optional=True)
        if self.reward_model_device is not None:
            check_str("reward_model_device", self.reward_model_device)
            check_devices("reward_model_device", self.reward_model_device)
        check_float("reward_learning_rate", self.reward_learning_rate, gt=0, public=True)
        check_int("reward_num_train_epochs", self.reward_num_train_epochs, 1, public=True)
        check_int("reward_train_batch_size", self.reward_train_batch_size, 1, public=True)
        check_int("reward_max_length", self.reward_max_length, 1, optional=True, public=True)
        check_bool("reward_freeze_backbone", self.reward_freeze_backbone)
        check_float("reward_eval_fraction", self.reward_eval_fraction, ge=0, lt=1)

        self._validate_num_generations()
        self._check_fields(
            "critic_model_name",
            "critic_learning_rate",
            "critic_devices",
            "use_separate_critic",
            "value_loss_coef",
            "value_clip_range",
            "critic_value_head_hidden_dim",
            "value_head_hidden_dim",
        )

    def _num_generations_floor(self) -> tuple[int, str]:
        if self.uses_critic:
            return 1, "maac/iac"
        return 2, f"rl_algorithm={self.rl_algorithm!r} (a group baseline)"

    def _validate_num_generations(self) -> None:
        public = (
            "num_generations must be >= 1."
            if self.uses_critic
            else "num_generations must be >= 2 for MAGRPO-family MARLHF backends."
        )
        try:
            super()._validate_num_generations()
        except ValueError as error:
            raise ValueError(public_wording(str(error), public)) from None

    def _normalize_critic(self) -> None:
        self.critic_type = canonical_choice(
            "critic_type", self.critic_type, CRITIC_TYPES, public="critic_type must be one of: v, q."
        )
        super()._normalize_critic()

    def _warn_ineffective(self) -> None:
        super()._warn_ineffective()
        if not self.uses_critic:
            given = [
                n
                for n in ("critic_model_name", "critic_learning_rate", "critic_devices")
                if getattr(self, n) is not None
            ]
            if given:
                warn(
                    f"{', '.join(f'`{n}`' for n in given)} {'has' if len(given) == 1 else 'have'} no effect "
                    f"with rl_algorithm={self.rl_algorithm!r} (only maac and iac have critics)"
                )

    # -- derived values (and resolved_critic_learning_rate) -----------------------------------------
    @property
    def uses_critic(self) -> bool:
        """The RL backend is actor-critic (maac, iac)."""
        return self.rl_algorithm in ("maac", "iac")

    @property
    def scale_rewards(self) -> str:
        """``advantage_normalization`` in :func:`comlrl.rl.compute_advantages`' terms ("group" or "none")."""
        return "group" if self.advantage_normalization else "none"


# --------------------------------------------------------------------------------------------------
# The iterative variants (their shared fields: iterative_config._IterativePreferenceConfig)
# --------------------------------------------------------------------------------------------------


@dataclass
class MADPOIterConfig(_IterativePreferenceConfig, MADPOConfig):
    r"""
    Configuration class for [`MADPOIterTrainer`]: iterative MADPO.

    Each of `num_iterations` rounds compares the current agents with a comparator on every item, stores
    the round's pairs, draws a replay sample from this and earlier rounds and trains `num_train_epochs`
    MADPO epochs on it (online / iterative preference optimization, cf. iterative DPO,
    [Xiong et al., 2023](https://huggingface.co/papers/2312.11456)). It takes every [`MADPOConfig`]
    parameter (with `num_train_epochs=1`, epochs per round, and `output_dir="outputs/madpo_iter"`) plus
    those of the iterative mixin (`comlrl.trainers.preference.iterative_config`), in its sections:

        > Parameters that control the iterations
        > Parameters that control the comparator
        > Parameters that control the replay buffer
    """

    num_train_epochs: int = override_field(
        TrainerConfig, "num_train_epochs", 1, "(MADPOIter: 1, epochs per round)"
    )
    output_dir: str = override_field(
        TrainerConfig, "output_dir", "outputs/madpo_iter", "(MADPOIter: outputs/madpo_iter)"
    )


@dataclass
class MARLHFIterConfig(_IterativePreferenceConfig, MARLHFConfig):
    r"""
    Configuration class for [`MARLHFIterTrainer`]: iterative MARLHF.

    Each round compares the current agents with a comparator, stores the round's pairs, fits a reward
    model on a replay sample (fresh each round unless `reward_warm_start`) and runs the RL stage for
    `num_train_epochs` epochs over the dataset. It takes every [`MARLHFConfig`] parameter (with
    `num_train_epochs=2`, `reward_num_train_epochs=2` and `output_dir="outputs/marlhf_iter"`) plus those of
    the iterative mixin (`comlrl.trainers.preference.iterative_config`), in its sections:

        > Parameters that control the iterations
        > Parameters that control the comparator
        > Parameters that control the replay buffer

    and:

    Parameters:
        > Parameters that control the reward model

        preference_scoring_reward (`str`, *optional*, defaults to `"task"`):
            Oracle of new comparisons: `task` (the task reward; aliases `oracle`, `environment`, `env`) or
            `reward_model` (the last fitted reward model, the task reward until one exists; `model`,
            `learned`). Evaluation always uses the task reward.
        reward_warm_start (`bool`, *optional*, defaults to `False`):
            Start each round's reward model from the previous round's instead of a fresh head and backbone.
    """

    num_train_epochs: int = override_field(
        TrainerConfig, "num_train_epochs", 2, "(MARLHFIter: 2, RL epochs per round)"
    )
    reward_num_train_epochs: int = override_field(
        MARLHFConfig, "reward_num_train_epochs", 2, "(MARLHFIter: 2)"
    )
    preference_scoring_reward: str = help_field(
        "Oracle of new comparisons: 'task' or 'reward_model' (task reward until one is fitted).", "task"
    )
    reward_warm_start: bool = help_field("Start each round's reward model from the previous round's.", False)
    output_dir: str = override_field(
        TrainerConfig, "output_dir", "outputs/marlhf_iter", "(MARLHFIter: outputs/marlhf_iter)"
    )

    def _normalize(self) -> None:
        super()._normalize()
        self.preference_scoring_reward = canonical_choice(
            "preference_scoring_reward",
            self.preference_scoring_reward,
            SCORING_REWARDS,
            SCORING_REWARD_ALIASES,
            public="preference_scoring_reward must be one of: task, reward_model.",
        )

    def _validate(self) -> None:
        super()._validate()
        check_bool("reward_warm_start", self.reward_warm_start)
