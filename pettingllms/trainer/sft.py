"""The ``sft`` warm start: supervised fine-tuning of every policy on oracle demonstrations.

Each demonstration is an agent's prompt and the oracle's response
(:mod:`pettingllms.trainer.demonstrations`). A training example is tokenized as the rollout engine
would see a perfect sample of it: the prompt rendered by :func:`comlrl.rollout.prompts.render_prompt`
(chat messages through the tokenizer's chat template with the generation prompt), then the response
tokens and the tokenizer's EOS, so the model learns to stop. The loss is the mean negative log-likelihood
of the response tokens (EOS included); prompt tokens are context only, never targets.

Policies (:class:`comlrl.policy.MultiAgentPolicy`): each policy gets its own optimizer over
``policy.trainable_parameters(policy_name)`` and trains on the demonstrations of the agents it serves:
the L1 shared model on every role's, an L2 adapter (inside ``policy.activate``) and an L3 model on
its own agent's. Every optimizer step bumps the policy's weights version.

The ``sft`` pipeline stage, which builds the demonstrations and these settings from a run config, is
:mod:`pettingllms.stages.sft`.

Why not TRL's ``SFTTrainer``: it trains one model with one optimizer per trainer, so L2 (several adapters
on one peft model, switched per batch) and L3 would need one trainer per policy, each re-tokenizing
with its own chat-template handling; this loop is short, reuses the engine's prompt rendering and
``comlrl.scoring.completion_logprobs``, and keeps every policy's data in one place.

The optimizer steps go through comlrl's update engine (:class:`~comlrl.trainers.core.optimization.GradientSteps`:
its AdamW; ``gradient_accumulation_steps`` consecutive batches per optimizer step, each batch's summed NLL
divided by the step's tokens before it is back-propagated, so a step is that of one batch of all its
demonstrations (their token mean); the LR schedule over each policy's optimizer steps
(:meth:`~comlrl.trainers.core.optimization.GradientSteps.begin_phase`); the gradient norm measured and
clipped; :func:`~comlrl.trainers.core.data_parallel.attach_engine` under data parallelism).

Data-parallel (under ``accelerate launch`` / ``torchrun``, see :mod:`pettingllms.trainer.step_view`):
every rank draws the same shuffled global batches of ``per_device_train_batch_size`` demonstrations and scores its
contiguous shard of each; the NLL is divided by the step's global token count (every rank knows it: the
batches are the same everywhere) and the gradients are summed over ranks before clipping, so each optimizer step is the one-process step over the same
batch (a rank with an empty shard contributes zero gradients). Only rank 0 logs and shows progress. With
FSDP selected (:mod:`pettingllms.trainer.fsdp`) each policy trains as a sharded module (AdamW states
sharded too; a rank with an empty shard runs a zero-weight filler forward and backward, FSDP sums the
gradients, clipping uses the whole gradient's norm) and its whole model receives the new weights at the end.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from comlrl import distributed as dist
from comlrl.rollout.hf import eos_token_ids, pad_token_id
from comlrl.rollout.prompts import render_prompt
from comlrl.scoring import completion_logprobs
from comlrl.seeding import derive_seed
from comlrl.trainers.core.data_parallel import attach_engine
from comlrl.trainers.core.optimization import GradientSteps, accumulated_steps, build_optimizer
from comlrl.trainers.core.training_knobs import OptimizerStepFields, check_schedule_keywords
from comlrl.validation import check_float, check_int, help_field
from pettingllms.trainer import fsdp

__all__ = [
    "SFTWarmStartConfig",
    "TokenizedExample",
    "sft_loss",
    "sft_warm_start",
    "tokenize_demonstration",
    "tokenize_demonstrations",
]

log = logging.getLogger(__name__)


@dataclass
class SFTWarmStartConfig(OptimizerStepFields):
    """Settings of the ``sft`` pipeline stage (the ``sft`` section of a run config).

    > Parameters that control the demonstrations

    - ``num_problems``: instances the oracle plays; seeds ``seed_start .. seed_start + num_problems - 1``,
      disjoint from the held-out eval seeds (checked).
    - ``seed_start``: first demonstration instance seed.
    - ``tool_candidates``: most tool calls in a tool-agent demonstration (the oracle's answer among random
      candidates; see :class:`~pettingllms.scripted.OraclePolicy`); 1: the oracle's answer alone.
    - ``accept_proposals``: plan-agent demonstrations answer ``#### proposal`` when the tool agent's
      proposal solves the state (instead of spelling the answer out).
    - ``late_turn_fraction``: share of demonstration episodes that first play 1 .. max_turns - 1 random
      turns (not recorded) before the oracle takes over, so the warm start also sees later-turn prompts
      (:func:`~pettingllms.trainer.demonstrations.detour_turns`); 0: every episode from the reset state.
    - ``workflows``: the turn orders the oracle plays, each on every demonstration seed, e.g.
      ``[[single], [tool, plan]]`` to warm-start one shared model on every role; a role the run's policy
      does not play trains the run's one policy (L0 / L1). Empty: the run's own workflow.

    > Parameters that control training

    - ``num_train_epochs``: passes over each policy's demonstrations.
    - ``learning_rate``: AdamW (peak) learning rate.
    - ``per_device_train_batch_size``: demonstrations per micro-batch (TRL's name; in one process TRL's
      meaning, while data-parallel ranks share each such batch, each scoring its shard).
    - ``max_length``: longest prompt + response (tokens) kept; longer examples are dropped and counted.

    > Parameters that control the optimizer steps: comlrl's
    :class:`~comlrl.trainers.core.training_knobs.OptimizerStepFields` (declared and checked there, as for
    ``at_grpo``), with ``max_grad_norm`` defaulting to ``1.0`` here (``0`` / ``None`` disables clipping)

    - ``gradient_accumulation_steps``: consecutive batches per optimizer step (an epoch's last step may hold
      fewer); the step is that of one batch of all their demonstrations (the token mean of their NLL).
    - ``lr_scheduler_type`` / ``lr_scheduler_kwargs`` / ``warmup_steps`` / ``warmup_ratio``: transformers'
      schedule over each policy's optimizer steps (all its epochs); default ``constant``.
    - ``max_grad_norm``: gradient clipping norm.
    """

    num_problems: int = field(default=200, metadata={"help": "Instances the oracle plays for demonstrations."})
    seed_start: int = field(default=0, metadata={"help": "First demonstration instance seed."})
    tool_candidates: int = field(
        default=1, metadata={"help": "Most tool calls per tool-agent demonstration (oracle among random ones)."}
    )
    accept_proposals: bool = field(
        default=False, metadata={"help": "Plan-agent demonstrations answer `#### proposal` when it solves."}
    )
    late_turn_fraction: float = field(
        default=0.0, metadata={"help": "Share of demonstration episodes that start with random turns."}
    )
    workflows: tuple[tuple[str, ...], ...] = field(
        default=(), metadata={"help": "Turn orders the oracle plays (empty: the run's workflow)."}
    )
    num_train_epochs: int = field(default=3, metadata={"help": "Passes over each policy's demonstrations."})
    learning_rate: float = field(default=2e-3, metadata={"help": "AdamW (peak) learning rate."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Demonstrations per micro-batch."})
    max_length: int = field(default=1024, metadata={"help": "Longest prompt + response kept, in tokens."})
    # The optimizer-step knobs are OptimizerStepFields'; only the default that differs is restated.
    max_grad_norm: float | None = help_field("Gradient clipping norm; 0 or None disables it.", 1.0)

    def __post_init__(self) -> None:
        for name in ("num_problems", "num_train_epochs", "per_device_train_batch_size", "max_length", "tool_candidates"):
            check_int(name, getattr(self, name), 1, spell_out=True)
        check_int("seed_start", self.seed_start, 0, spell_out=True)
        check_float("learning_rate", self.learning_rate, gt=0, spell_out=True)
        self._normalize_training_knobs()
        self._validate_step_knobs()  # the inherited optimizer-step knobs, checked where they are declared
        check_float("late_turn_fraction", self.late_turn_fraction, ge=0, le=1, spell_out=True)
        if isinstance(self.workflows, (str, bytes)) or not all(
            isinstance(w, (list, tuple)) and w and all(isinstance(r, str) and r for r in w) for w in self.workflows
        ):
            raise ValueError(f"`workflows` must be a list of turn orders (lists of role names), got {self.workflows!r}")
        self.workflows = tuple(tuple(w) for w in self.workflows)
        check_schedule_keywords(self)
        self._warn_ineffective_training_knobs()

    @property
    def seeds(self) -> range:
        """The demonstration instance seeds."""
        return range(self.seed_start, self.seed_start + self.num_problems)


# ---- tokenization and the loss (pure) ----------------------------------------------------------------

@dataclass(frozen=True)
class TokenizedExample:
    """One demonstration as token ids: the rendered prompt and the response followed by EOS."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)


def tokenize_demonstration(prompt: Any, response: str, tokenizer, eos_token_id: int) -> TokenizedExample:
    """Prompt ids exactly as the rollout engine renders ``prompt``; response ids + ``eos_token_id``."""
    if not isinstance(response, str):
        raise TypeError(f"`response` must be a str, got {type(response).__name__}")
    prompt_ids = render_prompt(prompt, tokenizer)
    response_ids = list(tokenizer(response, add_special_tokens=False)["input_ids"])
    return TokenizedExample(tuple(prompt_ids), tuple(int(t) for t in response_ids) + (int(eos_token_id),))


def tokenize_demonstrations(
    demos: Sequence[tuple[Any, str]], tokenizer, eos_token_id: int, max_length: int
) -> tuple[list[TokenizedExample], int]:
    """``(examples no longer than max_length tokens, how many were dropped for length)``."""
    kept: list[TokenizedExample] = []
    dropped = 0
    for prompt, response in demos:
        example = tokenize_demonstration(prompt, response, tokenizer, eos_token_id)
        if len(example) > max_length:
            dropped += 1
        else:
            kept.append(example)
    return kept, dropped


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood over the real completion tokens of a batch (token-level mean)."""
    if logprobs.shape != mask.shape:
        raise ValueError(f"`logprobs` {tuple(logprobs.shape)} and `mask` {tuple(mask.shape)} must match")
    count = mask.sum()
    if int(count) == 0:
        raise ValueError("`mask` selects no tokens: every completion in the batch is empty")
    return -(logprobs * mask).sum() / count


def shuffled_batches(num_examples: int, batch_size: int, generator: torch.Generator) -> list[list[int]]:
    """One epoch's example indices: a permutation drawn from ``generator``, cut into batches."""
    order = torch.randperm(num_examples, generator=generator).tolist()
    return [order[i : i + batch_size] for i in range(0, num_examples, batch_size)]


# ---- training --------------------------------------------------------------------------------------

def _policy_examples(
    policy, demos_by_role: Mapping[str, Sequence[tuple[Any, str]]], roles: Sequence[str], policy_name: str,
    max_length: int,
) -> tuple[list[TokenizedExample], int, int]:
    handle = policy.handle(policy_name)
    eos = eos_token_ids(handle.model, handle.tokenizer)
    if not eos:
        raise ValueError(f"policy {policy_name!r}: the tokenizer and model define no EOS token to end responses")
    demos = [d for role in roles for d in demos_by_role.get(role, ())]
    examples, dropped = tokenize_demonstrations(demos, handle.tokenizer, eos[0], max_length)
    return examples, dropped, pad_token_id(handle.tokenizer, eos)


def sft_warm_start(
    policy,
    demos_by_agent: Mapping[str, Sequence[tuple[Any, str]]],
    *,
    num_train_epochs: int,
    learning_rate: float,
    per_device_train_batch_size: int,
    seed: int,
    max_length: int,
    max_grad_norm: float | None = 1.0,
    gradient_accumulation_steps: int = 1,
    lr_scheduler_type: str = "constant",
    lr_scheduler_kwargs: Mapping[str, Any] | None = None,
    warmup_steps: int = 0,
    warmup_ratio: float = 0.0,
    logger=None,
    progress: bool = True,
    role_policies: Mapping[str, str] | None = None,
) -> dict[str, float]:
    """Fine-tune every policy of ``policy`` on its agents' demonstrations; returns summary metrics.

    ``demos_by_agent`` maps agent names to ``(prompt, response)`` pairs. ``role_policies`` (default: the
    policy's own agent -> policy map) says which policy learns each role's demonstrations, in the order a
    policy sees them; it may name roles the policy does not play (e.g. a shared model that also learns the
    single agent's role). ``logger`` (a
    :class:`comlrl.reporting.MetricsLogger`) receives ``sft/<policy>/loss`` and ``sft/<policy>/grad_norm``
    every optimizer step. ``gradient_accumulation_steps`` consecutive batches make one optimizer step (the
    step of one batch of all their demonstrations); the LR schedule (``lr_scheduler_type``, ...) runs over
    each policy's optimizer steps. The summary holds per policy ``examples``, ``dropped_too_long``, ``steps``
    (optimizer steps), ``loss_first_step`` (the untrained policy's loss on its first step), ``loss_epoch<i>`` (mean loss
    of epoch i, from 1) and ``loss_first`` / ``loss_last`` (first / last epoch's mean). Shuffling draws
    from a generator seeded by ``(seed, policy)``; dropout, if any, from torch's generator seeded by
    ``seed`` inside a forked RNG state, so the caller's random streams are left as they were.
    """
    config = SFTWarmStartConfig(
        num_train_epochs=num_train_epochs, learning_rate=learning_rate,
        per_device_train_batch_size=per_device_train_batch_size, max_length=max_length,
        max_grad_norm=max_grad_norm, gradient_accumulation_steps=gradient_accumulation_steps,
        lr_scheduler_type=lr_scheduler_type,
        lr_scheduler_kwargs=None if lr_scheduler_kwargs is None else dict(lr_scheduler_kwargs),
        warmup_steps=warmup_steps, warmup_ratio=warmup_ratio,
    )
    sharding = fsdp.fsdp_for_world(dist.init_distributed())
    if sharding is not None:
        fsdp.check_policy(policy)
    progress = progress and dist.is_main_process()
    if role_policies is None:
        role_policies = {agent: policy.policy_name(agent) for agent in policy.agents}
    unknown = sorted(set(demos_by_agent) - set(role_policies))
    if unknown:
        raise ValueError(f"`demos_by_agent` names agent(s) {unknown} that the policy lacks; agents: {list(role_policies)}")
    strays = sorted(set(role_policies.values()) - set(policy.policies))
    if strays:
        raise ValueError(f"`role_policies` names policies {strays}; the policy holds {policy.policies}")

    plans = []
    metrics: dict[str, float] = {}
    for name in policy.policies:
        roles = [role for role, owner in role_policies.items() if owner == name]
        examples, dropped, pad_id = _policy_examples(policy, demos_by_agent, roles, name, config.max_length)
        metrics[f"sft/{name}/examples"] = float(len(examples))
        metrics[f"sft/{name}/dropped_too_long"] = float(dropped)
        if dropped:
            log.warning("sft: policy %r dropped %d demonstration(s) longer than max_length=%d",
                        name, dropped, config.max_length)
        if not examples:
            log.warning("sft: policy %r has no demonstrations (roles %s); it is not trained", name, roles)
            continue
        plans.append((name, examples, pad_id))
    total_steps = sum(_optimizer_steps(len(ex), config) for _, ex, _ in plans)

    from tqdm.auto import tqdm

    bar = tqdm(total=total_steps, desc="sft", disable=not progress, dynamic_ncols=True)
    step = 0
    with torch.random.fork_rng(devices=_cuda_devices(policy)):
        torch.manual_seed(derive_seed(seed, "sft", "dropout"))
        for name, examples, pad_id in plans:
            step = _train_policy(policy, name, examples, pad_id, config, seed, logger, bar, step, metrics, sharding)
    bar.close()
    firsts = [metrics[f"sft/{n}/loss_first"] for n, _, _ in plans]
    lasts = [metrics[f"sft/{n}/loss_last"] for n, _, _ in plans]
    if plans:
        metrics["sft/loss_first"] = sum(firsts) / len(firsts)
        metrics["sft/loss_last"] = sum(lasts) / len(lasts)
    metrics["sft/steps"] = float(step)
    return metrics


def _optimizer_steps(num_examples: int, config: SFTWarmStartConfig) -> int:
    """A policy's optimizer steps over all its epochs (an epoch's batches grouped by the accumulation)."""
    batches = math.ceil(num_examples / config.per_device_train_batch_size)
    return config.num_train_epochs * accumulated_steps(batches, config.gradient_accumulation_steps)


def _step_tokens(examples: Sequence[TokenizedExample], group: Sequence[Sequence[int]]) -> float:
    """The response tokens (EOS included) of an optimizer step's batches: the divisor of its NLL."""
    return float(sum(len(examples[i].completion_ids) for batch in group for i in batch))


def _backward_batch(
    model, rows: Sequence[TokenizedExample], pad_id: int, steps: GradientSteps, step_tokens: float, alone: bool
) -> float:
    """One process: backpropagate (through ``steps``) a batch's NLL divided by the step's tokens and return
    that part of the step's loss. ``alone`` (the step's only batch): its token-mean NLL (:func:`sft_loss`)."""
    prompts, completions = [r.prompt_ids for r in rows], [r.completion_ids for r in rows]
    logprobs, mask = completion_logprobs(model, prompts, completions, pad_token_id=pad_id, requires_grad=True)
    part = sft_loss(logprobs, mask) if alone else -(logprobs * mask).sum() / step_tokens
    if torch.isfinite(part):  # a non-finite loss raises in the caller
        steps.backward(part)
    return part.item()


def _backward_shard(
    model, rows: Sequence[TokenizedExample], pad_id: int, steps: GradientSteps, step_tokens: float,
    sharded: bool = False,
) -> float:
    """Data-parallel: backpropagate (through ``steps``) this rank's shard of a batch with its NLL divided by
    the step's global token count, and return the global batch's part of the step's loss (the same on every
    rank; the engine's step sums the gradients over ranks). ``sharded`` (FSDP): every rank makes one forward
    and one backward call (a filler row where its shard is empty, zero-weighted like a non-finite loss), and
    FSDP sums the gradients."""
    numerator = None
    count = 0.0
    if rows or sharded:
        prompts, completions = ([r.prompt_ids for r in rows], [r.completion_ids for r in rows]) if rows else ([[pad_id]], [[pad_id]])
        logprobs, mask = completion_logprobs(model, prompts, completions, pad_token_id=pad_id, requires_grad=True)
        numerator, count = -(logprobs * mask).sum(), float(mask.sum()) if rows else 0.0
    total, global_count = dist.all_reduce_sum([float(numerator.detach()) if count else 0.0, count])
    if global_count == 0:
        raise ValueError("`mask` selects no tokens: every completion in the batch is empty")
    part = torch.tensor(total / step_tokens)
    if count and torch.isfinite(part):  # a non-finite loss raises on every rank alike
        steps.backward(numerator / step_tokens)
    elif sharded:
        steps.backward(fsdp.zero_weight(numerator))
    return part.item()


def _cuda_devices(policy) -> list[int]:
    """CUDA device indices holding the policy's models (whose RNG state the warm start forks)."""
    devices = {next(m.parameters()).device for m in policy.models()}
    return sorted(d.index or 0 for d in devices if d.type == "cuda")


def _train_policy(policy, name, examples, pad_id, config, seed, logger, bar, step, metrics, sharding=None) -> int:
    handle = policy.handle(name)
    params = policy.trainable_parameters(name)
    if not params:
        raise ValueError(f"policy {name!r} has no trainable parameters")
    sharded = None if sharding is None else fsdp.ShardedModel(handle.model, sharding, params)
    if sharded is not None:
        params = sharded.parameters()
    optimizer = build_optimizer(params, learning_rate=config.learning_rate, weight_decay=0.0)
    # Each batch's NLL arrives divided by its step's tokens (every batch's and rank's): the engine sums the
    # gradients over ranks (data parallel), measures the norm (max_grad_norm 0: no clipping), clips and
    # steps; the LR schedule runs over this policy's optimizer steps.
    steps = GradientSteps(config, {name: optimizer}, divisors=(), measure_grad_norm=True,
                          sharded=sharded is not None, auto_step=False)  # fmt: skip
    attach_engine(steps, sharded=sharded is not None, skips=False)
    steps.begin_phase(_optimizer_steps(len(examples), config))
    k = config.gradient_accumulation_steps
    generator = torch.Generator().manual_seed(derive_seed(seed, "sft", "shuffle", name))
    was_training = handle.model.training
    handle.model.train()
    epoch_means: list[float] = []
    first_step, first_step_loss = step, math.nan
    try:
        with policy.activate(name), (nullcontext(handle.model) if sharded is None else sharded.training()) as model:
            for epoch in range(config.num_train_epochs):
                losses: list[float] = []
                batches = shuffled_batches(len(examples), config.per_device_train_batch_size, generator)
                for start in range(0, len(batches), k):
                    group = batches[start : start + k]
                    step_tokens = _step_tokens(examples, group)
                    loss = 0.0
                    for batch in group:
                        steps.start_micro_batch()
                        if dist.world_size() > 1:
                            rows = [examples[i] for i in dist.shard(batch)]
                            part = _backward_shard(model, rows, pad_id, steps, step_tokens, sharded is not None)
                        else:
                            rows = [examples[i] for i in batch]
                            part = _backward_batch(model, rows, pad_id, steps, step_tokens, alone=len(group) == 1)
                        if not math.isfinite(part):
                            raise FloatingPointError(
                                f"sft: non-finite loss {part} for policy {name!r} at epoch {epoch + 1}; "
                                f"lower `learning_rate` (got {config.learning_rate})"
                            )
                        steps.end_micro_batch()
                        loss += part
                    steps.step()  # sum over ranks (data parallel), measure and clip the norm, step
                    grad_norm = steps.last_grad_norm
                    policy.bump_version(name)
                    step += 1
                    losses.append(loss)
                    if step == first_step + 1:
                        first_step_loss = losses[-1]  # the untrained policy's loss on its first step
                    if logger is not None and dist.is_main_process():
                        logger.log({f"sft/{name}/loss": losses[-1], f"sft/{name}/grad_norm": grad_norm}, step=step)
                    bar.update(1)
                    bar.set_postfix(policy=name, epoch=epoch + 1, loss=f"{losses[-1]:.3f}")
                epoch_means.append(sum(losses) / len(losses))
                metrics[f"sft/{name}/loss_epoch{epoch + 1}"] = epoch_means[-1]
    finally:
        optimizer.zero_grad(set_to_none=True)
        handle.model.train(was_training)
    metrics[f"sft/{name}/steps"] = float(_optimizer_steps(len(examples), config))
    metrics[f"sft/{name}/loss_first_step"] = first_step_loss
    metrics[f"sft/{name}/loss_first"] = epoch_means[0]
    metrics[f"sft/{name}/loss_last"] = epoch_means[-1]
    return step
