"""The config base of the online multi-agent RL trainers (:class:`OnlineRLConfig`): MAGRPO
(``comlrl.trainers.reinforce``) and the actor-critic trainers (``comlrl.trainers.actor_critic``).

Field names and defaults follow the public CoMLRL 1.4.3 ``MAGRPOConfig`` (``agent_learning_rate``,
``num_generations``, ``rollout_buffer_size``, ``train_batch_size``, ``advantage_mode``,
``advantage_normalization``, ``parallel_training``, ``agent_devices``, ...), the multi-turn ones included:
``num_turns=2`` (so a trainer needs an ``external_transition``, or ``num_turns=1``), ``discount=1.0``,
``early_termination_threshold=-0.2``, ``joint_mode="aligned"`` (or ``"cross"``), ``external_prompt_passthrough``
(see :mod:`comlrl.trainers.online_rl.multi_turn`).
"""

from __future__ import annotations

from dataclasses import dataclass

from comlrl.trainers.core.config import RLStageFields, TrainerConfig
from comlrl.trainers.core.vllm_fields import VLLMFields
from comlrl.validation import canonical_choice, check_int, override_field

__all__ = ["MULTI_TURN_JOINT_MODES", "SINGLE_TURN_NOTE", "OnlineRLConfig"]

# joint_mode of a multi-turn decision: candidate k of every agent, or every combination (public names).
MULTI_TURN_JOINT_MODES = ("aligned", "cross")
MULTI_TURN_JOINT_ALIASES = {"align": "aligned", "crossed": "cross"}
# Kept for the error messages of callers that still name single-turn rules.
SINGLE_TURN_NOTE = "the online RL trainers take num_turns >= 1 with an external_transition past the first turn"


@dataclass
class OnlineRLConfig(RLStageFields, VLLMFields, TrainerConfig):
    r"""
    Fields shared by [`MAGRPOConfig`], [`IACConfig`] and [`MAACConfig`] (the online RL trainers); not used on
    its own. It takes every [`TrainerConfig`] and [`RLStageFields`] parameter, with the public multi-turn
    defaults `num_turns=2`, `discount=1.0`, `early_termination_threshold=-0.2` and
    `output_dir="outputs/online_rl"`. Here `num_train_epochs` counts epochs over the training dataset,
    `rollout_buffer_size` items sampled (and their episodes played) together, `train_batch_size` items (a
    multi-turn MAGRPO run: tree nodes; an actor-critic run: turns) per optimizer step, and `env_step`
    advances by the joint actions scored.

    Multi-turn (`num_turns > 1`, docs/compatibility.md): the trainer calls its `external_transition` after
    every turn for the next prompts; the MAGRPO family expands a rollout tree (`joint_mode` `aligned`: K
    children per node, `cross`: K^N), the actor-critic trainers play one trajectory per item (their
    `num_generations` must then be 1, as in the public library); a node or trajectory whose mean reward
    exceeds `early_termination_threshold` stops there; `discount` weighs the returns of later turns.
    """

    num_turns: int = override_field(TrainerConfig, "num_turns", 2, "(online RL: 2)")
    discount: float = override_field(TrainerConfig, "discount", 1.0, "(online RL: 1.0)")
    early_termination_threshold: float | None = override_field(
        TrainerConfig, "early_termination_threshold", -0.2, "(online RL: -0.2)"
    )
    output_dir: str = override_field(
        TrainerConfig, "output_dir", "outputs/online_rl", "(online RL: outputs/online_rl)"
    )

    # The smallest num_generations the trainer can learn from (a group baseline needs two).
    _min_generations = 1
    _single_turn_note = SINGLE_TURN_NOTE

    def _normalize_choices(self) -> None:
        super()._normalize_choices()
        self._normalize_rl_stage()

    def _normalize_joint_mode(self) -> None:
        self.joint_mode = canonical_choice(
            "joint_mode", self.joint_mode, MULTI_TURN_JOINT_MODES, MULTI_TURN_JOINT_ALIASES
        )

    def _validate_episode(self) -> None:
        check_int("num_turns", self.num_turns, minimum=1, public=True)
        self._check_fields("discount", "early_termination_threshold", "external_prompt_passthrough")
        if self.num_turns > 1 and self.uses_critic and self.num_generations != 1:
            raise ValueError(
                f"Multi-turn {self.rl_algorithm.upper()} currently supports num_generations == 1: "
                f"`num_generations` is {self.num_generations} with `num_turns` {self.num_turns}"
            )

    def _validate_training(self) -> None:
        self._check_fields("num_train_epochs", "agent_learning_rate")
        self._validate_num_generations()
        self._check_fields(
            "rollout_buffer_size",
            "train_batch_size",
            "advantage_normalization",
            "exclude_last_completion_token",
            "reference_kl_enabled",
            "reference_kl_coef",
            "max_nonfinite_losses_in_a_row",
            "use_environment_step",
        )

    def _num_generations_floor(self) -> tuple[int, str]:
        return self._min_generations, type(self).__name__

    # -- derived values (and resolved_logging_dir, resolved_top_k, to_dict, from_dict) ------------------
    @property
    def uses_critic(self) -> bool:
        return False
