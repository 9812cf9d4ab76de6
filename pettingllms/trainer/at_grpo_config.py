"""Configuration of the AT-GRPO trainer (:class:`pettingllms.trainer.at_grpo.ATGRPOTrainer`).

The ``at_grpo`` section's dataclass (``grpo``'s too: the same fields with ``sampling_mode`` independent): the
algorithm and optimisation knobs, in TRL's style (every field documented through ``metadata={"help": ...}``, so
:class:`transformers.HfArgumentParser` turns it into a command line), not a ``TrainingArguments`` subclass: the
trainer holds one optimizer per policy, which ``transformers.Trainer`` does not. Fields take TRL's
``GRPOConfig`` / ``TrainingArguments`` names wherever the meaning is the same; the optimizer-step knobs
(accumulation, LR schedule, clipping) are inherited from comlrl's
:class:`~comlrl.trainers.core.training_knobs.OptimizerStepFields`, which declares and checks them for every
trainer.

The trainer's other settings are their own objects, each declared and checked once: the generation settings
are the ``rollout`` section's :class:`~pettingllms.config.rollout_section.RolloutConfig`, the policy level and
agent map a :class:`~pettingllms.execution.PolicyConfig` (the ``policy`` section), the workflow's turn order,
turn budget and ``alpha`` the environment's config (the ``env`` section).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from numbers import Integral
from typing import Any

from comlrl.reporting import normalize_report_to
from comlrl.rl import LOSS_TYPES, SCALE_REWARDS
from comlrl.trainers.core.training_knobs import (
    LR_SCHEDULER_TYPES,
    OptimizerStepFields,
    check_schedule_keywords,
    warmup_steps_for,
)
from comlrl.validation import StrictFromDict, check_choice, check_float, check_int, help_field
from pettingllms.execution import SAMPLING_MODES, TRAJECTORY_RETURNS

__all__ = ["LR_SCHEDULER_TYPES", "ATGRPOConfig"]


@dataclass
class ATGRPOConfig(OptimizerStepFields, StrictFromDict):
    r"""Configuration of :class:`~pettingllms.trainer.at_grpo.ATGRPOTrainer`.

    AT-GRPO (agent- and turn-wise GRPO, Zhao et al. 2025, "Stronger Together: On-Policy Reinforcement
    Learning for Collaborative LLMs") samples K candidates per (problem, turn, agent) from one state
    (tree sampling), normalises each candidate's reward ``alpha * global + local`` within that group, and
    updates every policy with PPO-clip on its own agents' samples.

    The generation settings (temperature, top_p, K, completion length, transcripts) are the trainer's
    ``rollout`` argument (:class:`~pettingllms.config.rollout_section.RolloutConfig`), the policy level and
    agent map its ``model`` (:class:`~pettingllms.execution.PolicyConfig`), the turn order, turn budget and
    ``alpha`` its ``env_config``.

    > Parameters that control the policies' forward passes

    disable_dropout (`bool`, defaults to `True`):
        Score training forwards with dropout off (TRL's default is `False`). The ratio against the
        rollout's log-probs is then exactly 1 on-policy, so the clip statistics measure policy change.
    share_prompts (`bool`, defaults to `True`):
        In the update, encode each distinct prompt of a micro-batch once and run its rows' completions
        on its keys and values (micro-batches keep rows with one prompt together). The K candidates of
        a tree group share their prompt, so the prompt work drops about K-fold; losses and gradients
        equal the plain forward's up to float rounding. Off: one forward over each prompt + completion.

    > Parameters that control the data

    problems_per_step (`int`, defaults to `4`):
        Problem instances rolled out per training step.
    train_seed_range (`list[int]`, defaults to `[0, 100000]`):
        Half-open range `[start, stop)` of training instance seeds. Each epoch visits it in a seeded
        order; keep it disjoint from the evaluation seeds.

    > Parameters that control the sampling structure

    sampling_mode (`str`, defaults to `"tree"`):
        `tree` (AT-GRPO) or `independent` (the GRPO baseline: K whole trajectories per problem, one group
        per problem, one return per trajectory).
    trajectory_return (`str`, defaults to `"final"`):
        Independent sampling's return: `final` (task reward of the final state) or `sum` of step rewards.
    top_k (`int`, defaults to `0`):
        Top-k truncation of sampling (`0`: off).

    > Parameters that control training

    learning_rate (`float`, defaults to `1e-6`), weight_decay (`0.0`), adam_beta1 / adam_beta2 /
    adam_epsilon (`0.9` / `0.999` / `1e-8`):
        AdamW, one optimizer per policy.
    gradient_accumulation_steps, lr_scheduler_type, lr_scheduler_kwargs, warmup_steps, warmup_ratio,
    max_grad_norm:
        comlrl's :class:`~comlrl.trainers.core.training_knobs.OptimizerStepFields` (declared and checked
        there), but `max_grad_norm` defaults to `1.0` here (`0` / `None` disables clipping; the norm is still
        logged). The schedule (`transformers.get_scheduler`) runs over `max_steps` training steps and advances
        once per training step (one rollout), because the number of optimizer steps a rollout yields varies
        with how long its episodes ran.
    per_device_train_batch_size (`int`, defaults to `8`):
        Rows (completions) per forward pass of a policy.
    num_iterations (`int`, defaults to `1`):
        PPO epochs over each rollout batch (TRL's μ).
    max_steps (`int`, defaults to `100`):
        Training steps (rollouts).
    beta (`float`, defaults to `0.0`):
        Coefficient of the k3 KL to a frozen reference; `0` builds no reference model (as in the anchor
        and Dr. GRPO). The reference is a frozen copy of each model at trainer creation; for LoRA
        policies it is the base model with adapters disabled (TRL's convention).
    epsilon (`float`, defaults to `0.2`), epsilon_high (`float` or `None`):
        PPO clip range; `epsilon_high` is DAPO's separate upper bound (`None`: `epsilon`).
    dual_clip (`float` or `None`):
        Dual-clip constant c > 1 for negative advantages (Ye et al. 2020; the anchor's verl uses 3).
    loss_type (`str`, defaults to `"dapo"`):
        Token aggregation, TRL's names: `grpo`, `bnpo`, `dr_grpo`, `dapo` (`token`, `sequence_sum` too).
    scale_rewards (`str`, defaults to `"group"`):
        `group`: (r - mean) / std within each group (GRPO); `batch`: by the batch std; `none`: no
        scaling, as Dr. GRPO recommends (Liu et al. 2025).
    max_nonfinite_losses_in_a_row (`int`, defaults to `10`):
        An optimizer step with a NaN / inf loss, log-prob or gradient norm is skipped (no parameter
        changes; counted in `nonfinite_losses_skipped` and the policy's `skipped_steps`, logged); a group
        holding a non-finite reward is dropped (counted in `nonfinite_rewards_dropped`), and a policy left
        with no group in a step has a skipped step. This many skipped steps of one policy in a row stop the
        run. The same setting, meaning and default as comlrl's trainers.

    > Parameters that control logging and checkpoints

    output_dir (`str`, defaults to `"runs/at_grpo"`), seed (`int`, defaults to `0`), report_to
    (`str` or `list[str]`, defaults to `"none"`), logging_steps (`int`, defaults to `1`), save_steps
    (`int`, defaults to `0`: no periodic checkpoints), save_total_limit (`int` or `None`),
    resume_from_checkpoint (`str` or `None`: a checkpoint folder; `True` also works and means the latest
    one in `output_dir`), disable_tqdm (`bool`, defaults to `False`: progress bar and per-step table).
    """

    # Policies' forward passes
    disable_dropout: bool = help_field("score training forwards without dropout", True)
    share_prompts: bool = help_field(
        "encode each distinct prompt once per micro-batch in the update", True
    )
    # Data
    problems_per_step: int = help_field("problem instances per training step", 4)
    train_seed_range: list[int] = help_field(
        "[start, stop) of training instance seeds", default_factory=lambda: [0, 100_000]
    )
    # Sampling structure
    sampling_mode: str = help_field("tree (AT-GRPO) | independent (GRPO)", "tree")
    trajectory_return: str = help_field("independent mode: final | sum", "final")
    top_k: int = help_field("top-k truncation (0: off)", 0)
    # Training (the optimizer-step knobs are OptimizerStepFields'; only the defaults that differ here)
    learning_rate: float = help_field("AdamW learning rate", 1e-6)
    weight_decay: float = help_field("AdamW weight decay", 0.0)
    adam_beta1: float = help_field("AdamW beta1", 0.9)
    adam_beta2: float = help_field("AdamW beta2", 0.999)
    adam_epsilon: float = help_field("AdamW epsilon", 1e-8)
    max_grad_norm: float | None = help_field("gradient clipping norm (0 or None: off)", 1.0)
    per_device_train_batch_size: int = help_field("rows per forward pass", 8)
    num_iterations: int = help_field("PPO epochs per rollout batch", 1)
    max_steps: int = help_field("training steps (rollouts)", 100)
    beta: float = help_field("KL coefficient to a frozen reference (0: none)", 0.0)
    epsilon: float = help_field("PPO clip range", 0.2)
    epsilon_high: float | None = help_field("upper clip range (None: epsilon)", None)
    dual_clip: float | None = help_field("dual-clip constant > 1 (None: off)", None)
    loss_type: str = help_field("grpo | bnpo | dr_grpo | dapo | ...", "dapo")
    scale_rewards: str = help_field("group | batch | none (Dr. GRPO)", "group")
    max_nonfinite_losses_in_a_row: int = help_field(
        "non-finite (NaN / inf) steps are skipped, counted and logged; this many in a row stop the run", 10
    )
    # Logging and checkpoints
    output_dir: str = help_field("everything the run writes", "runs/at_grpo")
    seed: int = help_field("drives every random stream", 0)
    report_to: str | list[str] = help_field("none | tensorboard | wandb | all", "none")
    logging_steps: int = help_field("log metrics every this many steps", 1)
    save_steps: int = help_field("checkpoint every this many training steps (0: never)", 0)
    save_total_limit: int | None = help_field("checkpoints kept (None: all)", None)
    resume_from_checkpoint: str | None = help_field(
        "checkpoint folder, or True for the latest in output_dir", None
    )
    disable_tqdm: bool = help_field("no progress bar or per-step table", False)

    def __post_init__(self) -> None:
        if isinstance(self.scale_rewards, bool):  # TRL accepts booleans
            self.scale_rewards = "group" if self.scale_rewards else "none"
        if isinstance(self.train_seed_range, (list, tuple)):
            self.train_seed_range = list(self.train_seed_range)
        self._normalize_training_knobs()
        self._validate()

    # ------------------------------------------------------------------------------------ validation
    def _validate(self) -> None:
        check_choice("sampling_mode", self.sampling_mode, SAMPLING_MODES)
        check_choice("trajectory_return", self.trajectory_return, TRAJECTORY_RETURNS)
        check_choice("loss_type", self.loss_type, LOSS_TYPES)
        check_choice("scale_rewards", self.scale_rewards, SCALE_REWARDS)
        self._validate_step_knobs()  # the inherited optimizer-step knobs, checked where they are declared
        for name in (
            "problems_per_step",
            "per_device_train_batch_size",
            "num_iterations",
            "max_steps",
            "logging_steps",
            "max_nonfinite_losses_in_a_row",
        ):
            check_int(name, getattr(self, name), 1, spell_out=True)
        for name in ("top_k", "save_steps", "seed"):
            check_int(name, getattr(self, name), 0, spell_out=True)
        check_int("save_total_limit", self.save_total_limit, 1, optional=True, spell_out=True)
        seeds = self.train_seed_range
        if not (
            isinstance(seeds, list)
            and len(seeds) == 2
            and all(isinstance(s, Integral) and not isinstance(s, bool) for s in seeds)
        ):
            raise ValueError(f"`train_seed_range` must be two integers [start, stop), got {seeds!r}")
        if seeds[0] < 0 or seeds[1] - seeds[0] < self.problems_per_step:
            raise ValueError(
                f"`train_seed_range` {seeds} must start at >= 0 and hold at least `problems_per_step` "
                f"({self.problems_per_step}) seeds"
            )
        check_float("learning_rate", self.learning_rate, gt=0.0, spell_out=True)
        check_float("weight_decay", self.weight_decay, ge=0.0, spell_out=True)
        check_float("adam_beta1", self.adam_beta1, ge=0.0, lt=1.0, spell_out=True)
        check_float("adam_beta2", self.adam_beta2, ge=0.0, lt=1.0, spell_out=True)
        check_float("adam_epsilon", self.adam_epsilon, gt=0.0, spell_out=True)
        check_float("beta", self.beta, ge=0.0, spell_out=True)
        check_float("epsilon", self.epsilon, gt=0.0, spell_out=True)
        check_float("epsilon_high", self.epsilon_high, gt=0.0, optional=True, spell_out=True)
        check_float("dual_clip", self.dual_clip, gt=1.0, optional=True, spell_out=True)
        if not isinstance(self.output_dir, str) or not self.output_dir:
            raise ValueError(f"`output_dir` must be a non-empty path, got {self.output_dir!r}")
        normalize_report_to(self.report_to)  # validates; the metrics logger resolves it (e.g. "all")
        if not (self.resume_from_checkpoint is None or isinstance(self.resume_from_checkpoint, (str, bool))):
            raise ValueError(
                "`resume_from_checkpoint` must be a checkpoint path, True (latest) or None, "
                f"got {self.resume_from_checkpoint!r}"
            )
        check_schedule_keywords(self)  # the schedule's keywords (OptimizerStepFields'), without building it

    # ------------------------------------------------------------------------------------ derived
    @property
    def num_warmup_steps(self) -> int:
        """Warm-up steps of the LR schedule over ``max_steps``: ``warmup_steps`` when > 0, else
        ``ceil(warmup_ratio * max_steps)``."""
        return warmup_steps_for(self, self.max_steps)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
