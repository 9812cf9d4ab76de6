"""The config base of the online multi-agent RL trainers (:class:`OnlineRLConfig`): MAGRPO
(``comlrl.trainers.reinforce``) and the actor-critic trainers (``comlrl.trainers.actor_critic``).

Field names and defaults follow the public CoMLRL 1.4.3 ``MAGRPOConfig`` (``agent_learning_rate``,
``num_generations``, ``rollout_buffer_size``, ``train_batch_size``, ``advantage_mode``,
``advantage_normalization``, ``parallel_training``, ``agent_devices``, ...). Single turn only: ``num_turns``
must be 1 (the public default is 2, with an ``external_transition`` driving later turns; multi-turn is out
of scope, see ``docs/compatibility.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

from comlrl.trainers.core.config import RLStageFields, TrainerConfig
from comlrl.trainers.core.validation import override_field
from comlrl.trainers.core.vllm_fields import VLLMFields

__all__ = ["SINGLE_TURN_NOTE", "OnlineRLConfig"]

SINGLE_TURN_NOTE = (
    "the MAGRPO, IAC and MAAC trainers here are single-turn (num_turns=1); multi-turn episodes with an "
    "external_transition are out of scope"
)


@dataclass
class OnlineRLConfig(RLStageFields, VLLMFields, TrainerConfig):
    r"""
    Fields shared by [`MAGRPOConfig`], [`IACConfig`] and [`MAACConfig`] (the online RL trainers); not used on
    its own. It takes every [`TrainerConfig`] and [`RLStageFields`] parameter, with the public MAGRPO
    multi-turn defaults `discount=0.9` and `early_termination_threshold=-0.2` (no effect with one turn) and
    `output_dir="outputs/online_rl"`. Here `num_train_epochs` counts epochs over the training dataset,
    `rollout_buffer_size` items sampled in one generate call, `train_batch_size` items per optimizer step
    within a buffer, and `env_step` advances by `num_generations` per trained item.
    """

    discount: float = override_field(TrainerConfig, "discount", 0.9, "(online RL: 0.9)")
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
