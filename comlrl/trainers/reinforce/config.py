"""Configuration of the online multi-agent RL trainers: :class:`MAGRPOConfig` here, and the fields it shares
with the actor-critic configs (:class:`OnlineRLConfig`).

Field names and defaults follow the public CoMLRL 1.4.3 ``MAGRPOConfig`` (``agent_learning_rate``,
``num_generations``, ``rollout_buffer_size``, ``train_batch_size``, ``advantage_mode``,
``advantage_normalization``, ``parallel_training``, ``agent_devices``, ...). As the preference configs, they
are standalone dataclasses in TRL's style with ``metadata={"help": ...}``, validated in ``__post_init__`` with
messages that name the field, and they add ``output_dir``, ``seed``, ``report_to`` and the other run fields.

Single turn only: ``num_turns`` must be 1 here (the public default is 2, with an ``external_transition``
driving later turns; multi-turn is out of scope, see ``docs/compatibility.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

from comlrl.rl import ESTIMATORS, KL_ESTIMATORS, LOSS_TYPES
from comlrl.trainers.preference.config import (
    _check_bool,
    _check_float,
    _check_int,
    _help,
    _override,
    _TrainerConfigBase,
    canonical_choice,
)

__all__ = ["MAGRPOConfig", "OnlineRLConfig", "SINGLE_TURN_NOTE"]

SINGLE_TURN_NOTE = (
    "the MAGRPO, IAC and MAAC trainers here are single-turn (num_turns=1); multi-turn episodes with an "
    "external_transition are out of scope"
)
# The algorithm names of the MAGRPO family by advantage_mode (the inverse of comlrl.rl's table).
ALGORITHM_BY_ESTIMATOR = {"mean": "magrpo", "raw": "mareinforce", "rloo": "marloo", "max": "maremax"}


@dataclass
class OnlineRLConfig(_TrainerConfigBase):
    r"""
    Fields shared by [`MAGRPOConfig`], [`IACConfig`] and [`MAACConfig`] (the online RL trainers); not used on
    its own.

    Parameters:
        > Parameters that control the model

        num_agents (`int`, *optional*, defaults to `2`):
            Number of agents.
        agent_devices (`str` or `list[str]`, *optional*):
            Devices of the agents: `None`/`"auto"`, one device, or one per agent.
        parallel_training (`str`, *optional*, defaults to `"none"`):
            `"none"` (every agent on the first device) or `"mp"` (one device per agent; needs
            `agent_devices`). Alias `null`.
        disable_dropout (`bool`, *optional*, defaults to `True`):
            Switch dropout off in the agents (deterministic scoring of the sampled tokens).

        > Parameters that control generation

        max_new_tokens (`int`, *optional*, defaults to `256`), temperature (`float`, defaults to `0.6`),
        top_p (`float`, defaults to `0.6`), top_k (`int`, defaults to `50`; `0` off, `None` the model's):
            Sampling of the agents' responses (always sampled; temperature > 0).

        > Parameters that control the episode

        num_turns (`int`, *optional*, defaults to `1`):
            Must be 1 (the public default is 2 with an `external_transition`; multi-turn is out of scope).
        discount (`float`, *optional*, defaults to `0.9`), joint_mode (`str`, defaults to `"aligned"`),
        early_termination_threshold (`float`, defaults to `-0.2`), external_prompt_passthrough (`bool`):
            Multi-turn fields of the public library, accepted; no effect with one turn.

        > Parameters that control training

        num_train_epochs (`int`, *optional*, defaults to `20`):
            Epochs over the training dataset.
        agent_learning_rate (`float`, *optional*, defaults to `5e-6`):
            AdamW learning rate of every agent.
        num_generations (`int`):
            Joint responses sampled per item (candidate k of every agent forms joint response k).
        rollout_buffer_size (`int`, *optional*, defaults to `2`):
            Items sampled (in one generate call) before the updates on them.
        train_batch_size (`int`, *optional*):
            Items per optimizer step within a buffer; `None` takes `rollout_buffer_size`.
        advantage_normalization (`bool`, *optional*, defaults to `True`):
            Whiten advantages (within each item's group for the MAGRPO family, over the update batch for the
            actor-critic trainers). With it on, the four MAGRPO-family baselines give the same advantages.
        loss_type (`str`, *optional*, defaults to `"sequence_sum"`):
            Token-loss aggregation: TRL's `grpo`, `bnpo`, `token`, `dr_grpo`, `dapo`, or `sequence_sum`
            (the public library's `−A·Σ_t log π`, averaged over sequences). Padding never counts.
        exclude_last_completion_token (`bool`, *optional*, defaults to `False`):
            Leave each completion's last token out of the loss (the public library's scorer, for parity);
            by default every sampled token counts, EOS included.
        reference_kl_enabled (`bool`, *optional*, defaults to `False`), reference_kl_coef (`float`,
        defaults to `0.1`), reference_kl_estimator (`str`, defaults to `"k3"`), reference_devices:
            Subtract `coef · Σ_t KL_t` (per-token estimate against a frozen copy of the initial agents, on
            `reference_devices`) from each agent's reward.
        max_nonfinite_losses_in_a_row (`int`, *optional*, defaults to `10`):
            A non-finite loss skips its update (counted and logged); this many in a row stop the run.
        use_environment_step (`bool`, *optional*, defaults to `True`):
            Log against `env_step` (`num_generations` per trained item), else the update count.

        > Parameters that control evaluation and outputs

        eval_interval (`int`, defaults to `16`), eval_num_samples (`int`, defaults to `4`), eval_batch_size
        (`int`, defaults to `1`), output_dir, seed (`int`, defaults to `42`), report_to (defaults to
        `"none"`), run_name, logging_steps (`int`, defaults to `50`), logging_dir, disable_tqdm,
        save_total_limit:
            As in [`MADPOConfig`].
    """

    # Parameters that control the model
    num_agents: int = _help("Number of agents.", 2)
    agent_devices: None | str | list[str] = _help(
        "Agent devices: None/'auto', one device, or one per agent.", None
    )
    parallel_training: str = _help("'none' or 'mp' (one device per agent; needs agent_devices).", "none")
    disable_dropout: bool = _help("Switch dropout off in the agents.", True)

    # Parameters that control generation
    max_new_tokens: int = _help("Maximum new tokens per agent response.", 256)
    temperature: float = _help("Sampling temperature (> 0).", 0.6)
    top_p: float = _help("Nucleus-sampling mass, in (0, 1].", 0.6)
    top_k: int | None = _help(
        "Top-k truncation; 0 disables it, None means the model's generation config.", 50
    )

    # Parameters that control the episode (multi-turn fields are accepted; one turn is supported)
    num_turns: int = _help("Turns per episode; must be 1 (multi-turn is out of scope).", 1)
    discount: float = _help("Multi-turn discount (no effect with one turn).", 0.9)
    joint_mode: str = _help("Joint-response mode; must be 'aligned'.", "aligned")
    early_termination_threshold: float | None = _help(
        "Multi-turn early stop (no effect with one turn).", -0.2
    )
    external_prompt_passthrough: bool = _help(
        "Multi-turn prompt passthrough (no effect with one turn).", False
    )

    # Parameters that control training
    num_train_epochs: int = _help("Epochs over the training dataset.", 20)
    agent_learning_rate: float = _help("AdamW learning rate of every agent.", 5e-6)
    num_generations: int = _help("Joint responses sampled per item.", 4)
    rollout_buffer_size: int = _help("Items sampled before the updates on them.", 2)
    train_batch_size: int | None = _help("Items per optimizer step; None takes rollout_buffer_size.", None)
    advantage_normalization: bool = _help("Whiten advantages (then the four baselines coincide).", True)
    loss_type: str = _help(
        "Token-loss aggregation: grpo, bnpo, token, dr_grpo, dapo or sequence_sum.", "sequence_sum"
    )
    exclude_last_completion_token: bool = _help("Leave each completion's last token out of the loss.", False)
    reference_kl_enabled: bool = _help("KL penalty to a frozen copy of the initial agents.", False)
    reference_kl_coef: float = _help("Coefficient of the reference KL penalty (>= 0).", 0.1)
    reference_kl_estimator: str = _help("Per-token KL estimator: k1, k2 or k3.", "k3")
    reference_devices: None | str | list[str] = _help(
        "Reference-model devices (one or one per agent); None uses the agents' devices.", None
    )
    max_nonfinite_losses_in_a_row: int = _help("This many non-finite losses in a row stop the run.", 10)
    use_environment_step: bool = _help("Log against env_step (else the update count).", True)

    # Parameters that control evaluation
    eval_interval: int = _help("Evaluate before every eval_interval-th update; 0 disables.", 16)
    eval_num_samples: int = _help("Evaluation items per evaluation.", 4)
    eval_batch_size: int = _help("Evaluation items per generation batch.", 1)

    # Parameters that control logging and outputs
    output_dir: str = _help("Folder for everything the run writes.", "outputs/online_rl")
    seed: int = _help("Seed of every random stream of the run.", 42)
    report_to: None | str | list[str] = _help(
        "Logging sinks: 'none', 'tensorboard', 'wandb' or a list.", "none"
    )
    run_name: str | None = _help("Run name for the logging sinks.", None)
    logging_steps: int = _help("Log training metrics every this many env steps.", 50)
    logging_dir: str | None = _help("TensorBoard folder; None means <output_dir>/logs.", None)
    disable_tqdm: bool = _help("Hide progress bars.", False)
    save_total_limit: int | None = _help("Keep at most this many checkpoints; None keeps all.", None)

    # The smallest num_generations the trainer can learn from (a group baseline needs two).
    _min_generations = 1

    def _normalize(self) -> None:
        self._normalize_parallel_training()
        self.joint_mode = canonical_choice("joint_mode", self.joint_mode, ("aligned",), {"align": "aligned"})
        self.loss_type = canonical_choice("loss_type", self.loss_type, LOSS_TYPES)
        self.reference_kl_estimator = canonical_choice(
            "reference_kl_estimator", self.reference_kl_estimator, KL_ESTIMATORS
        )
        self._normalize_devices_and_outputs()

    def _validate(self) -> None:
        self._validate_agents_and_sampling(self.num_agents)
        _check_int("num_turns", self.num_turns, 1)
        if self.num_turns != 1:
            raise ValueError(f"`num_turns` must be 1: {SINGLE_TURN_NOTE}; got {self.num_turns}")
        _check_float("discount", self.discount, ge=0, le=1)
        _check_float("early_termination_threshold", self.early_termination_threshold, optional=True)
        _check_bool("external_prompt_passthrough", self.external_prompt_passthrough)
        _check_int("num_train_epochs", self.num_train_epochs, 1)
        _check_float("agent_learning_rate", self.agent_learning_rate, ge=0)
        _check_int("num_generations", self.num_generations)
        if self.num_generations < self._min_generations:
            raise ValueError(
                f"`num_generations` must be >= {self._min_generations} for {type(self).__name__}, "
                f"got {self.num_generations}"
            )
        _check_int("rollout_buffer_size", self.rollout_buffer_size, 1)
        _check_int("train_batch_size", self.train_batch_size, 1)
        _check_bool("advantage_normalization", self.advantage_normalization)
        _check_bool("exclude_last_completion_token", self.exclude_last_completion_token)
        _check_bool("reference_kl_enabled", self.reference_kl_enabled)
        _check_float("reference_kl_coef", self.reference_kl_coef, ge=0)
        _check_int("max_nonfinite_losses_in_a_row", self.max_nonfinite_losses_in_a_row, 1)
        _check_bool("use_environment_step", self.use_environment_step)
        self._validate_eval_and_outputs()

    # -- derived values (and resolved_logging_dir, resolved_top_k, to_dict, from_dict) ------------------
    @property
    def uses_critic(self) -> bool:
        return False


@dataclass
class MAGRPOConfig(OnlineRLConfig):
    r"""
    Configuration class for [`MAGRPOTrainer`]: the MAGRPO family of multi-agent REINFORCE trainers.

    Every agent samples `num_generations` responses per item; candidate k of each agent forms joint response
    k, the task reward scores it, and agent i is updated with `−A_k · Σ_t log π_i(a_{i,k,t} | x_i)` where
    `A_k` is the joint return minus a group baseline ([GRPO](https://huggingface.co/papers/2402.03300)
    extended to teams as in CoMLRL's MAGRPO). Takes every [`OnlineRLConfig`] field plus:

    Parameters:
        advantage_mode (`str`, *optional*, defaults to `"mean"`):
            Baseline over the item's group: `mean` (MAGRPO), `raw` (no baseline, MAREINFORCE), `rloo`
            (leave-one-out, MARLOO) or `max` (group maximum, MAReMax). All four are affine in the return, so
            with `advantage_normalization=True` (the default) they give the same advantages; set it to
            `False` for the baseline to matter.
        num_generations (`int`, *optional*, defaults to `4`):
            Joint responses per item; >= 2 (a group baseline needs two).
    """

    advantage_mode: str = _help("Baseline: mean (MAGRPO), raw, rloo or max.", "mean")
    output_dir: str = _override(OnlineRLConfig, "output_dir", "outputs/magrpo", "(MAGRPO: outputs/magrpo)")

    _min_generations = 2

    def _normalize(self) -> None:
        super()._normalize()
        self.advantage_mode = canonical_choice("advantage_mode", self.advantage_mode, ESTIMATORS)

    @property
    def rl_algorithm(self) -> str:
        """The public algorithm name of ``advantage_mode`` (magrpo, mareinforce, marloo, maremax)."""
        return ALGORITHM_BY_ESTIMATOR[self.advantage_mode]
