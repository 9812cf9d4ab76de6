"""Configuration of the AT-GRPO trainer (:class:`pettingllms.trainer.at_grpo.ATGRPOTrainer`).

A standalone dataclass in TRL's style (every field documented through ``metadata={"help": ...}``, so
:class:`transformers.HfArgumentParser` turns it into a command line), not a ``TrainingArguments`` subclass:
the trainer holds one optimizer per policy, which ``transformers.Trainer`` does not. Fields take TRL's
``GRPOConfig`` / ``TrainingArguments`` names wherever the meaning is the same.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Integral
from typing import Any

from comlrl.reporting import normalize_report_to
from comlrl.rl import LOSS_TYPES, SCALE_REWARDS
from comlrl.validation import StrictFromDict, check_choice, check_float, check_int, help_field
from pettingllms.execution import POLICY_LEVELS, SAMPLING_MODES, TRAJECTORY_RETURNS
from pettingllms.execution.transcripts import check_state_max_chars

__all__ = ["LR_SCHEDULER_TYPES", "ATGRPOConfig"]

# transformers.get_scheduler names that need no extra arguments.
LR_SCHEDULER_TYPES = (
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
)
# Sampling fields that must agree with an engine handed to the trainer (they change what is scored).
ENGINE_FIELDS = (
    "num_generations",
    "sampling_mode",
    "greedy_selection",
    "trajectory_return",
    "temperature",
    "top_p",
    "top_k",
    "max_completion_length",
    "seed",
)


@dataclass
class ATGRPOConfig(StrictFromDict):
    r"""Configuration of :class:`~pettingllms.trainer.at_grpo.ATGRPOTrainer`.

    AT-GRPO (agent- and turn-wise GRPO, Zhao et al. 2025, "Stronger Together: On-Policy Reinforcement
    Learning for Collaborative LLMs") samples K candidates per (problem, turn, agent) from one state
    (tree sampling), normalises each candidate's reward ``alpha * global + local`` within that group, and
    updates every policy with PPO-clip on its own agents' samples.

    > Parameters that control the policies

    policy_level (`str`, defaults to `"L1"`):
        `L0` single agent, `L1` one model shared by every role, `L2` one LoRA adapter per policy on a
        frozen base, `L3` one model per policy.
    agent_policies (`dict[str, str]` or `None`):
        Role -> policy name; `None`: L1 maps every role to `"shared"`, other levels name each policy after
        its role.
    disable_dropout (`bool`, defaults to `True`):
        Score training forwards with dropout off (TRL's default is `False`). The ratio against the
        rollout's log-probs is then exactly 1 on-policy, so the clip statistics measure policy change.
    share_prompts (`bool`, defaults to `True`):
        In the update, encode each distinct prompt of a micro-batch once and run its rows' completions
        on its keys and values (micro-batches keep rows with one prompt together). The K candidates of
        a tree group share their prompt, so the prompt work drops about K-fold; losses and gradients
        equal the plain forward's up to float rounding. Off: one forward over each prompt + completion.

    > Parameters that control the workflow (`None`: the environment's own setting)

    turn_order (`list[str]` or `None`):
        Roles acting in each turn, in order (L0 replaces it with the environment's `single` role).
    max_turns (`int` or `None`):
        Turn budget of an episode.
    alpha (`float` or `None`):
        Weight of the global (team) reward in each agent's reward `alpha * global + local`.

    > Parameters that control the data

    problems_per_step (`int`, defaults to `4`):
        Problem instances rolled out per training step.
    train_seed_range (`list[int]`, defaults to `[0, 100000]`):
        Half-open range `[start, stop)` of training instance seeds. Each epoch visits it in a seeded
        order; keep it disjoint from the evaluation seeds.

    > Parameters that control generation

    num_generations (`int`, defaults to `4`):
        K: tree width (candidates per decision) or, with independent sampling, trajectories per problem.
    sampling_mode (`str`, defaults to `"tree"`):
        `tree` (AT-GRPO) or `independent` (the GRPO baseline: K whole trajectories per problem, one group
        per problem, one return per trajectory).
    greedy_selection (`bool`, defaults to `True`):
        Continue each tree from its best-rewarded candidate (seeded tie-break); `False`: a random one.
    trajectory_return (`str`, defaults to `"final"`):
        Independent sampling's return: `final` (task reward of the final state) or `sum` of step rewards.
    temperature, top_p, top_k (defaults `1.0`, `1.0`, `0`):
        Sampling; training scores completions at the same `temperature` (it must be > 0).
    max_completion_length (`int`, defaults to `256`):
        New tokens per agent response.
    transcript_rate (`float`, defaults to `0.0`):
        Fraction of episodes written to `output_dir/rollouts.jsonl` (each step with the state it left,
        for `pettingllms show`).
    transcript_state_max_chars (`int` or `None`, defaults to `None`):
        Characters kept of each transcribed state snapshot (at least 100; `None`: the whole state). A cut
        snapshot is marked by its `truncated_chars` and counted in the log.

    > Parameters that control training

    learning_rate (`float`, defaults to `1e-6`), weight_decay (`0.0`), adam_beta1 / adam_beta2 /
    adam_epsilon (`0.9` / `0.999` / `1e-8`):
        AdamW, one optimizer per policy.
    lr_scheduler_type (`str`, defaults to `"constant"`, as every trainer), warmup_ratio (`float`, defaults to `0.0`):
        `transformers.get_scheduler` over `max_steps` training steps. The schedule advances once per
        training step (one rollout), because the number of optimizer steps a rollout yields varies with
        how long its episodes ran.
    max_grad_norm (`float`, defaults to `1.0`):
        Gradient clipping per policy (`0` disables clipping; the norm is still logged).
    per_device_train_batch_size (`int`, defaults to `8`):
        Rows (completions) per forward pass of a policy.
    gradient_accumulation_steps (`int`, defaults to `1`):
        Micro-batches per optimizer step.
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

    # Policies
    policy_level: str = help_field("L0 | L1 | L2 | L3", "L1")
    agent_policies: dict[str, str] | str | None = help_field(
        "role -> policy name (a mapping, or its JSON on a command line)", None
    )
    disable_dropout: bool = help_field("score training forwards without dropout", True)
    share_prompts: bool = help_field(
        "encode each distinct prompt once per micro-batch in the update", True
    )
    # Workflow
    turn_order: list[str] | None = help_field("roles per turn (None: env's)", None)
    max_turns: int | None = help_field("turn budget (None: env's)", None)
    alpha: float | None = help_field("global-reward weight (None: env's)", None)
    # Data
    problems_per_step: int = help_field("problem instances per training step", 4)
    train_seed_range: list[int] = help_field(
        "[start, stop) of training instance seeds", default_factory=lambda: [0, 100_000]
    )
    # Generation
    num_generations: int = help_field("K: tree width or trajectories per problem", 4)
    sampling_mode: str = help_field("tree (AT-GRPO) | independent (GRPO)", "tree")
    greedy_selection: bool = help_field("continue the best tree branch", True)
    trajectory_return: str = help_field("independent mode: final | sum", "final")
    temperature: float = help_field("sampling and scoring temperature", 1.0)
    top_p: float = help_field("nucleus sampling mass", 1.0)
    top_k: int = help_field("top-k truncation (0: off)", 0)
    max_completion_length: int = help_field("new tokens per response", 256)
    transcript_rate: float = help_field("fraction of episodes transcribed", 0.0)
    transcript_state_max_chars: int | None = help_field(
        "characters kept of each transcribed state snapshot (None: all)", None
    )
    # Training
    learning_rate: float = help_field("AdamW learning rate", 1e-6)
    weight_decay: float = help_field("AdamW weight decay", 0.0)
    adam_beta1: float = help_field("AdamW beta1", 0.9)
    adam_beta2: float = help_field("AdamW beta2", 0.999)
    adam_epsilon: float = help_field("AdamW epsilon", 1e-8)
    lr_scheduler_type: str = help_field("transformers.get_scheduler name", "constant")
    warmup_ratio: float = help_field("fraction of max_steps spent warming up", 0.0)
    max_grad_norm: float = help_field("gradient clipping norm (0: off)", 1.0)
    per_device_train_batch_size: int = help_field("rows per forward pass", 8)
    gradient_accumulation_steps: int = help_field("micro-batches per optimizer step", 1)
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
    save_steps: int = help_field("checkpoint every this many steps (0: never)", 0)
    save_total_limit: int | None = help_field("checkpoints kept (None: all)", None)
    resume_from_checkpoint: str | None = help_field(
        "checkpoint folder, or True for the latest in output_dir", None
    )
    disable_tqdm: bool = help_field("no progress bar or per-step table", False)

    def __post_init__(self) -> None:
        if isinstance(self.scale_rewards, bool):  # TRL accepts booleans
            self.scale_rewards = "group" if self.scale_rewards else "none"
        if isinstance(self.turn_order, str):
            raise ValueError(f"`turn_order` must be a list of role names, got the string {self.turn_order!r}")
        if self.turn_order is not None:
            self.turn_order = list(self.turn_order)
        if isinstance(self.train_seed_range, (list, tuple)):
            self.train_seed_range = list(self.train_seed_range)
        if isinstance(self.agent_policies, str):  # JSON from a command line
            try:
                self.agent_policies = json.loads(self.agent_policies)
            except json.JSONDecodeError as error:
                raise ValueError(f"`agent_policies` is not valid JSON: {self.agent_policies!r} ({error})") from None
        self._validate()

    # ------------------------------------------------------------------------------------ validation
    def _validate(self) -> None:
        check_choice("policy_level", self.policy_level, POLICY_LEVELS)
        check_choice("sampling_mode", self.sampling_mode, SAMPLING_MODES)
        check_choice("trajectory_return", self.trajectory_return, TRAJECTORY_RETURNS)
        check_choice("loss_type", self.loss_type, LOSS_TYPES)
        check_choice("scale_rewards", self.scale_rewards, SCALE_REWARDS)
        check_choice("lr_scheduler_type", self.lr_scheduler_type, LR_SCHEDULER_TYPES)
        if self.agent_policies is not None:
            if not isinstance(self.agent_policies, Mapping) or not self.agent_policies:
                raise ValueError(
                    f"`agent_policies` must be a non-empty mapping role -> policy, got {self.agent_policies!r}"
                )
            self.agent_policies = {str(k): str(v) for k, v in self.agent_policies.items()}
        if self.turn_order is not None and (
            not self.turn_order or not all(isinstance(r, str) and r for r in self.turn_order)
        ):
            raise ValueError(f"`turn_order` must be a non-empty list of role names, got {self.turn_order!r}")
        for name in (
            "problems_per_step",
            "num_generations",
            "max_completion_length",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "num_iterations",
            "max_steps",
            "logging_steps",
            "max_nonfinite_losses_in_a_row",
        ):
            check_int(name, getattr(self, name), 1, spell_out=True)
        for name in ("top_k", "save_steps", "seed"):
            check_int(name, getattr(self, name), 0, spell_out=True)
        check_int("max_turns", self.max_turns, 1, optional=True, spell_out=True)
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
        check_float("temperature", self.temperature, gt=0.0, spell_out=True)
        check_float("top_p", self.top_p, gt=0.0, le=1.0, spell_out=True)
        check_float("transcript_rate", self.transcript_rate, ge=0.0, le=1.0, spell_out=True)
        check_state_max_chars(self.transcript_state_max_chars)
        check_float("learning_rate", self.learning_rate, gt=0.0, spell_out=True)
        check_float("weight_decay", self.weight_decay, ge=0.0, spell_out=True)
        check_float("adam_beta1", self.adam_beta1, ge=0.0, lt=1.0, spell_out=True)
        check_float("adam_beta2", self.adam_beta2, ge=0.0, lt=1.0, spell_out=True)
        check_float("adam_epsilon", self.adam_epsilon, gt=0.0, spell_out=True)
        check_float("warmup_ratio", self.warmup_ratio, ge=0.0, le=1.0, spell_out=True)
        check_float("max_grad_norm", self.max_grad_norm, ge=0.0, spell_out=True)
        check_float("beta", self.beta, ge=0.0, spell_out=True)
        check_float("epsilon", self.epsilon, gt=0.0, spell_out=True)
        check_float("epsilon_high", self.epsilon_high, gt=0.0, optional=True, spell_out=True)
        check_float("dual_clip", self.dual_clip, gt=1.0, optional=True, spell_out=True)
        check_float("alpha", self.alpha, ge=0.0, optional=True, spell_out=True)
        if not isinstance(self.output_dir, str) or not self.output_dir:
            raise ValueError(f"`output_dir` must be a non-empty path, got {self.output_dir!r}")
        normalize_report_to(self.report_to)  # validates; the metrics logger resolves it (e.g. "all")
        if not (self.resume_from_checkpoint is None or isinstance(self.resume_from_checkpoint, (str, bool))):
            raise ValueError(
                "`resume_from_checkpoint` must be a checkpoint path, True (latest) or None, "
                f"got {self.resume_from_checkpoint!r}"
            )

    # ------------------------------------------------------------------------------------ derived
    @property
    def num_warmup_steps(self) -> int:
        """Warm-up steps of the LR schedule: ``ceil(warmup_ratio * max_steps)``."""
        return math.ceil(self.warmup_ratio * self.max_steps)

    def engine_kwargs(self) -> dict[str, Any]:
        """The :class:`~pettingllms.execution.EngineConfig` fields this config sets."""
        values = {name: getattr(self, name) for name in ENGINE_FIELDS}
        values["transcript_rate"] = self.transcript_rate
        values["transcript_state_max_chars"] = self.transcript_state_max_chars
        values["output_dir"] = self.output_dir
        return values

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
