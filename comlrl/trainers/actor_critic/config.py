"""Configuration of the single-turn actor-critic trainers: :class:`IACConfig` and :class:`MAACConfig`.

Field names and defaults follow the public CoMLRL 1.4.3 configs (``critic_learning_rate``,
``value_loss_coef``, ``value_clip_range``, ``critic_type``, ``use_separate_critic``,
``critic_value_head_hidden_dim``, ``value_head_hidden_dim``, ``critic_devices``, ...); the shared fields are
those of :class:`~comlrl.trainers.reinforce.config.OnlineRLConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass

from comlrl.rl import CRITIC_TYPES
from comlrl.trainers.preference.config import (
    _check_bool,
    _check_device_count,
    _check_devices,
    _check_float,
    _check_int,
    _check_str,
    _help,
    _normalize_devices,
    _override,
    canonical_choice,
)
from comlrl.trainers.reinforce.config import OnlineRLConfig

__all__ = ["ActorCriticConfig", "IACConfig", "MAACConfig"]

_AC_DOC = r"""
        > Parameters that control the critic

        critic_model_name (`str`, *optional*):
            Critic backbone (preset, local path or hub id) when the trainer gets no `critic_model`/`critics`;
            `None` uses the agents' model name (actor objects without a name need one of them).
        critic_learning_rate (`float`, *optional*, defaults to `5e-6`):
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


@dataclass
class ActorCriticConfig(OnlineRLConfig):
    """Fields shared by :class:`IACConfig` and :class:`MAACConfig` (not used on its own)."""

    num_train_epochs: int = _override(OnlineRLConfig, "num_train_epochs", 40, "(actor-critic: 40)")
    num_generations: int = _override(OnlineRLConfig, "num_generations", 1, "(actor-critic: 1)")
    rollout_buffer_size: int = _override(OnlineRLConfig, "rollout_buffer_size", 8, "(actor-critic: 8)")
    top_k: int | None = _override(OnlineRLConfig, "top_k", None, "(actor-critic: None)")
    logging_steps: int = _override(OnlineRLConfig, "logging_steps", 1, "(actor-critic: 1)")

    critic_model_name: str | None = _help("Critic backbone; None uses the agents' model name.", None)
    critic_learning_rate: float | None = _help("Critic learning rate; None uses agent_learning_rate.", 5e-6)
    critic_devices: None | str | list[str] = _help("Critic devices; None uses the agents' devices.", None)
    critic_type: str = _help("'v' (state value) or 'q' (state-action value).", "v")
    value_loss_coef: float = _help("Weight of the value loss (> 0).", 0.6)
    value_clip_range: float | None = _help("Value clipping range; None disables it.", 0.2)
    critic_value_head_hidden_dim: int | None = _help(
        "Hidden width of the critic value head; None: linear.", None
    )

    def _normalize(self) -> None:
        super()._normalize()
        self.critic_type = canonical_choice("critic_type", self.critic_type, CRITIC_TYPES)
        self.critic_devices = _normalize_devices("critic_devices", self.critic_devices)

    def _validate(self) -> None:
        super()._validate()
        _check_str("critic_model_name", self.critic_model_name, optional=True)
        _check_float("critic_learning_rate", self.critic_learning_rate, gt=0, optional=True)
        _check_devices("critic_devices", self.critic_devices)
        _check_device_count("critic_devices", self.critic_devices, self.num_agents)
        _check_float("value_loss_coef", self.value_loss_coef, gt=0)
        _check_float("value_clip_range", self.value_clip_range, gt=0, optional=True)
        _check_int("critic_value_head_hidden_dim", self.critic_value_head_hidden_dim, 1, optional=True)
        if self.critic_type == "q" and self.num_generations < 2:
            raise ValueError(
                "`num_generations` must be >= 2 with critic_type='q': the advantage Q(h, a) - mean Q over the"
                f" item's responses is 0 with one response; got {self.num_generations}"
            )

    @property
    def uses_critic(self) -> bool:
        return True

    @property
    def resolved_critic_learning_rate(self) -> float:
        return (
            self.critic_learning_rate if self.critic_learning_rate is not None else self.agent_learning_rate
        )


@dataclass
class IACConfig(ActorCriticConfig):
    r"""
    Configuration class for [`IACTrainer`]: Independent Actor-Critic.

    Each agent has its own critic (a separate model with a value head, or a value head on the agent's own
    model with `use_separate_critic=False`) that reads only that agent's prompt (and response, for Q). Agent i
    is updated with `−Â_i · Σ_t log π_i` plus `value_loss_coef` times its critic's value loss. Takes every
    [`OnlineRLConfig`] field (with `num_train_epochs=40`, `num_generations=1`, `rollout_buffer_size=8`,
    `top_k=None`, `logging_steps=1`) plus:

    Parameters:
        use_separate_critic (`bool`, *optional*, defaults to `True`):
            A separate critic model per agent; `False` puts a value head on each agent's model (the value
            loss then also trains the agent's backbone).
        value_head_hidden_dim (`int`, *optional*):
            Hidden width of the agents' value heads (`use_separate_critic=False`); `None` means linear.
    """

    use_separate_critic: bool = _help("A separate critic per agent (else a value head on each actor).", True)
    value_head_hidden_dim: int | None = _help("Hidden width of the actors' value heads; None: linear.", None)
    output_dir: str = _override(OnlineRLConfig, "output_dir", "outputs/iac", "(IAC: outputs/iac)")

    def _validate(self) -> None:
        super()._validate()
        _check_bool("use_separate_critic", self.use_separate_critic)
        _check_int("value_head_hidden_dim", self.value_head_hidden_dim, 1, optional=True)
        if self.parallel_training == "mp" and self.use_separate_critic and self.critic_devices is None:
            raise ValueError(
                "`critic_devices` is required when `parallel_training='mp'` and use_separate_critic=True"
            )

    @property
    def rl_algorithm(self) -> str:
        return "iac"


@dataclass
class MAACConfig(ActorCriticConfig):
    r"""
    Configuration class for [`MAACTrainer`]: Multi-Agent Actor-Critic with one centralized critic.

    One critic reads the joint text (every agent's prompt, and for Q every agent's response) and its
    advantage updates every agent: `−Â · Σ_t log π_i` for each agent i, plus `value_loss_coef` times the
    critic's value loss. Takes every [`OnlineRLConfig`] field (with the actor-critic defaults of
    [`IACConfig`]) plus the critic fields.
    """

    output_dir: str = _override(OnlineRLConfig, "output_dir", "outputs/maac", "(MAAC: outputs/maac)")

    def _validate(self) -> None:
        super()._validate()
        if self.parallel_training == "mp" and self.critic_devices is None:
            raise ValueError("`critic_devices` is required when `parallel_training='mp'`")

    @property
    def rl_algorithm(self) -> str:
        return "maac"

    # MAAC has no value heads on the actors; the shared critic code reads these names.
    use_separate_critic = True
    value_head_hidden_dim = None


ActorCriticConfig.__doc__ = (ActorCriticConfig.__doc__ or "") + _AC_DOC
IACConfig.__doc__ = (IACConfig.__doc__ or "") + _AC_DOC
MAACConfig.__doc__ = (MAACConfig.__doc__ or "") + _AC_DOC
