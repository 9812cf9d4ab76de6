"""Configuration of the single-turn actor-critic trainers: :class:`IACConfig` and :class:`MAACConfig`.

Field names and defaults follow the public CoMLRL 1.4.3 configs. The shared fields are those of
:class:`~comlrl.trainers.online_rl.config.OnlineRLConfig`, the critic fields those of
:class:`~comlrl.trainers.core.config.CriticFields` (and, for IAC,
:class:`~comlrl.trainers.core.config.ValueHeadFields`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from comlrl.rl import CRITIC_TYPES
from comlrl.trainers.core.config import CriticFields, TrainerConfig, ValueHeadFields
from comlrl.trainers.online_rl.config import OnlineRLConfig
from comlrl.validation import (
    canonical_choice,
    check_device_count,
    override_field,
    public_wording,
)

__all__ = ["ActorCriticConfig", "IACConfig", "MAACConfig"]


@dataclass
class ActorCriticConfig(CriticFields, OnlineRLConfig):
    r"""
    Fields shared by [`IACConfig`] and [`MAACConfig`] (not used on its own): every [`OnlineRLConfig`]
    parameter with the actor-critic defaults `num_train_epochs=40`, `num_generations=1`,
    `rollout_buffer_size=8`, `top_k=None` and `logging_steps=1`, and the [`CriticFields`] parameters with
    `critic_learning_rate=5e-6`. `critic_type="q"` works with any `num_generations`, as in the public
    library: with one response per item the advantage is `R − Q(h, a)` (the public meaning, Q in place of
    V), with two or more it is `Q(h, a) − mean Q` over the item's responses.
    """

    num_train_epochs: int = override_field(TrainerConfig, "num_train_epochs", 40, "(actor-critic: 40)")
    num_generations: int = override_field(OnlineRLConfig, "num_generations", 1, "(actor-critic: 1)")
    rollout_buffer_size: int = override_field(TrainerConfig, "rollout_buffer_size", 8, "(actor-critic: 8)")
    top_k: int | None = override_field(TrainerConfig, "top_k", None, "(actor-critic: None)")
    logging_steps: int = override_field(TrainerConfig, "logging_steps", 1, "(actor-critic: 1)")
    critic_learning_rate: float | None = override_field(
        CriticFields, "critic_learning_rate", 5e-6, "(actor-critic: 5e-6)"
    )

    # The public IAC / MAAC constructor rules, read by the team and critic builders (core.team,
    # online_rl.critics): `agents` must hold `num_agents` models and come with a tokenizer, and the critic
    # sources follow the public actor-critic wording.
    actor_critic_constructor_rules: ClassVar[bool] = True

    def _normalize(self) -> None:
        super()._normalize()
        self._normalize_critic()

    def _normalize_critic(self) -> None:
        self.critic_type = canonical_choice(
            "critic_type", self.critic_type, CRITIC_TYPES, public="critic_type must be one of: 'v', 'q'."
        )
        super()._normalize_critic()

    def _validate_num_generations(self) -> None:
        try:
            super()._validate_num_generations()
        except ValueError as error:
            raise ValueError(public_wording(str(error), "num_generations must be >= 1.")) from None

    def _validate(self) -> None:
        super()._validate()
        self._check_fields("critic_model_name", "critic_learning_rate", "critic_devices")
        check_device_count("critic_devices", self.critic_devices, self.num_agents)
        self._check_fields("value_loss_coef", "value_clip_range", "critic_value_head_hidden_dim")

    @property
    def uses_critic(self) -> bool:
        return True


@dataclass
class IACConfig(ValueHeadFields, ActorCriticConfig):
    r"""
    Configuration class for [`IACTrainer`]: Independent Actor-Critic.

    Each agent has its own critic (a separate model with a value head, or a value head on the agent's own
    model with `use_separate_critic=False`) that reads only that agent's prompt (and response, for Q). Agent i
    is updated with `−Â_i · Σ_t log π_i` plus `value_loss_coef` times its critic's value loss. Takes every
    [`ActorCriticConfig`] parameter (with `output_dir="outputs/iac"`) plus the [`ValueHeadFields`] ones.
    """

    output_dir: str = override_field(TrainerConfig, "output_dir", "outputs/iac", "(IAC: outputs/iac)")

    def _validate(self) -> None:
        super()._validate()
        self._check_fields("use_separate_critic", "value_head_hidden_dim")
        if self.parallel_training == "mp" and self.use_separate_critic and self.critic_devices is None:
            message = (
                "`critic_devices` is required when `parallel_training='mp'` and use_separate_critic=True"
            )
            public = "parallel_training='mp' requires explicit critic_devices when use_separate_critic=True."
            raise ValueError(public_wording(message, public))

    @property
    def rl_algorithm(self) -> str:
        return "iac"


@dataclass
class MAACConfig(ActorCriticConfig):
    r"""
    Configuration class for [`MAACTrainer`]: Multi-Agent Actor-Critic with one centralized critic.

    One critic reads the joint text (every agent's prompt, and for Q every agent's response) and its
    advantage updates every agent: `−Â · Σ_t log π_i` for each agent i, plus `value_loss_coef` times the
    critic's value loss. Takes every [`ActorCriticConfig`] parameter (with `output_dir="outputs/maac"`).
    """

    output_dir: str = override_field(TrainerConfig, "output_dir", "outputs/maac", "(MAAC: outputs/maac)")

    def _validate(self) -> None:
        super()._validate()
        if self.parallel_training == "mp" and self.critic_devices is None:
            message = "`critic_devices` is required when `parallel_training='mp'`"
            raise ValueError(
                public_wording(message, "parallel_training='mp' requires explicit critic_devices.")
            )

    @property
    def rl_algorithm(self) -> str:
        return "maac"

    # MAAC has no value heads on the actors; the shared critic code reads these names.
    use_separate_critic = True
    value_head_hidden_dim = None
