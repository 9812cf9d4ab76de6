"""AT-GRPO: agent- and turn-wise grouped policy optimisation over the multi-agent rollout engine.

The algorithm, top to bottom (one training step):

1. draw ``problems_per_step`` instance seeds from the training range (:func:`draw_problem_ids`: a seeded
   order per epoch, the cursor is checkpointed);
2. roll them out (:class:`~pettingllms.execution.RolloutEngine`): tree sampling gives K candidates per
   (problem, turn, agent) from one state, each with reward ``alpha * global + local``; independent
   sampling (the GRPO baseline) gives K trajectories per problem, each with one return;
3. advantages per group (:func:`sample_advantages`): the group key is AT-GRPO's own
   (:func:`at_grpo_group_key`), each group *member* (tree candidate or trajectory) counts once, and the
   math is :func:`comlrl.rl.compute_advantages` (``r - mean``, scaled by the group std unless
   ``scale_rewards="none"``, Dr. GRPO);
4. per policy, PPO-clip on token log-prob ratios against the rollout's log-probs (:func:`at_grpo_loss`
   over :func:`comlrl.rl.ppo_clip_loss`), ``num_iterations`` passes of shuffled micro-batches with
   gradient accumulation and clipping, one AdamW per policy (``share_prompts``: a micro-batch keeps the
   rows of one prompt together and encodes that prompt once); an L2 adapter is scored inside
   ``policy.activate`` so only it takes gradients, and an L1 shared model trains on every role's rows.
   Each optimizer step bumps the policy's weights version.

Groups whose rewards are all equal are kept (advantage 0) and counted as ``frac_reward_zero_std``.

Metric names (logged every ``logging_steps`` to ``output_dir/metrics.jsonl`` and ``report_to``):

- run: ``success_rate``, ``reward`` (mean member reward), ``reward_std`` (mean group std),
  ``frac_reward_zero_std``, ``parse_error_rate``, ``completions/mean_length``, ``num_samples``,
  ``dropped_samples``, ``generate_calls``, ``time/{rollout,generate,env,update,step}_s``;
- ``agent/<role>/...`` and ``agent/<role>/turn_<t>/...``: ``reward_mean``/``reward_std`` (mixed),
  ``global_reward_*``, ``local_reward_*``, ``frac_reward_zero_std``, ``parse_error_rate``, ``success_rate``,
  ``completions/mean_length``, ``num_samples``;
- ``policy/<name>/...``: the same sample metrics plus the group ones (``reward``, ``reward_std``) of its
  samples' groups, and ``loss``, ``clip_ratio/{low,high,region}_mean``,
  ``approx_kl``, ``ratio_mean``, ``entropy``, ``kl`` (``beta > 0``), ``grad_norm``, ``learning_rate``,
  ``staleness_mean`` / ``staleness_max`` (weight versions between the sampling policy and the policy
  scoring each micro-batch), ``optimizer_steps``, ``skipped_steps`` (non-finite loss or gradient).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import time
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from comlrl.checkpoint import TrainerState, latest_checkpoint, load_checkpoint, save_checkpoint
from comlrl.rl import (
    PPOLossOutput,
    compute_advantages,
    group_ids_from_keys,
    group_stats,
    masked_entropy,
    ppo_clip_loss,
)
from comlrl.scoring import gather_token_logprobs, shared_prompt_completion_logits
from comlrl.seeding import derive_seed
from pettingllms.execution import (
    EngineConfig,
    GroupKey,
    PolicyConfig,
    PolicyTensors,
    RolloutBatch,
    RolloutEngine,
    Sample,
    build_policy,
    build_router,
    level_turn_order,
    member_rewards,
    tensorize,
)
from pettingllms.trainer.at_grpo_config import ENGINE_FIELDS, ATGRPOConfig

__all__ = [
    "ATGRPOTrainer",
    "MemberTable",
    "accumulation_scale",
    "at_grpo_group_key",
    "at_grpo_loss",
    "draw_problem_ids",
    "member_table",
    "micro_batch_groups",
    "per_token_logps",
    "problem_order",
    "rollout_metrics",
    "sample_advantages",
]

logger = logging.getLogger("pettingllms.trainer.at_grpo")

# Seeds per epoch order are materialised; a larger range is an error rather than a silent memory cost.
MAX_SEED_RANGE = 50_000_000


# ================================================================================= grouping (pure)


def at_grpo_group_key(sample: Sample) -> GroupKey:
    """The group a sample's advantage is normalised in.

    Tree sampling: ``(problem_id, turn, agent_index)``, the K candidates one agent drew from one state
    (the anchor divides the problem index by K here, merging K problems; we do not). Independent
    sampling: ``(problem_id, None, None)``, the K trajectories of one problem.
    """
    if sample.mode == "tree":
        return GroupKey(sample.problem_id, sample.turn, sample.agent_index)
    if sample.mode == "independent":
        return GroupKey(sample.problem_id, None, None)
    raise ValueError(f"sample `mode` must be 'tree' or 'independent', got {sample.mode!r}")


@dataclass(frozen=True)
class MemberTable:
    """One row per group member: ``members[i] = (group key, candidate)`` with reward ``rewards[i]`` and
    integer ``group_ids[i]`` (``group_keys[group_ids[i]]`` is its key)."""

    members: list[tuple[GroupKey, int]]
    rewards: torch.Tensor
    group_ids: torch.Tensor
    group_keys: list[Hashable]


def member_table(samples: Sequence[Sample]) -> MemberTable:
    """Group members and their rewards, one per tree candidate or independent trajectory.

    Every sample's ``group_key`` must equal :func:`at_grpo_group_key` (an error names the first that does
    not); a trajectory's samples must agree on their reward (:func:`~pettingllms.execution.member_rewards`),
    so a long trajectory counts once, like a short one.
    """
    if not samples:
        raise ValueError("`samples` must not be empty")
    for s in samples:
        expected = at_grpo_group_key(s)
        if s.group_key != expected:
            raise ValueError(
                f"sample (problem {s.problem_id}, turn {s.turn}, agent {s.agent_index}, candidate "
                f"{s.candidate}) has `group_key` {tuple(s.group_key)}, expected {tuple(expected)} for "
                f"{s.mode} sampling"
            )
    table = member_rewards(samples)
    members = [(key, candidate) for key, rewards in table.items() for candidate in rewards]
    rewards = torch.tensor([table[k][c] for k, c in members], dtype=torch.float64)
    group_ids, group_keys = group_ids_from_keys([k for k, _ in members])
    return MemberTable(members, rewards, group_ids, group_keys)


def sample_advantages(
    samples: Sequence[Sample], scale_rewards: str | bool = "group", eps: float = 1e-4
) -> torch.Tensor:
    """Advantage of each sample (float64, aligned with ``samples``): its member's group-relative reward.

    ``A = r - mean_g(r)`` over the group's members, divided by ``std_g + eps`` for ``"group"`` (GRPO),
    by the batch std for ``"batch"``, not at all for ``"none"`` (Dr. GRPO). Every sample of a member (all
    steps of an independent trajectory) gets that member's advantage.
    """
    table = member_table(samples)
    advantages = compute_advantages(table.rewards, table.group_ids, "mean", scale_rewards, eps)
    by_member = {member: float(a) for member, a in zip(table.members, advantages)}
    return torch.tensor([by_member[(s.group_key, s.candidate)] for s in samples], dtype=torch.float64)


# ================================================================================= data order (pure)


def problem_order(seed_range: Sequence[int], seed: int, epoch: int) -> list[int]:
    """The instance seeds of ``[start, stop)`` in the seeded order of ``epoch``."""
    start, stop = int(seed_range[0]), int(seed_range[1])
    if not 0 <= start < stop:
        raise ValueError(f"`train_seed_range` must be [start, stop) with 0 <= start < stop, got {list(seed_range)}")
    if stop - start > MAX_SEED_RANGE:
        raise ValueError(f"`train_seed_range` holds {stop - start} seeds; at most {MAX_SEED_RANGE} are supported")
    generator = torch.Generator().manual_seed(derive_seed(seed, "problems", epoch))
    return (torch.randperm(stop - start, generator=generator) + start).tolist()


def draw_problem_ids(
    cursor: Mapping[str, int], n: int, seed_range: Sequence[int], seed: int
) -> tuple[list[int], dict[str, int]]:
    """The next ``n`` distinct instance seeds after ``cursor`` (``{"epoch", "index"}``) and the new cursor.

    A step never straddles two epochs (an epoch's leftover seeds, fewer than ``n``, are skipped), so the
    ids of one step are distinct and each epoch visits a seed at most once.
    """
    size = int(seed_range[1]) - int(seed_range[0])
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= size:
        raise ValueError(f"`problems_per_step` must be an integer in [1, {size}], got {n!r}")
    epoch, index = int(cursor["epoch"]), int(cursor["index"])
    if index + n > size:
        epoch, index = epoch + 1, 0
    ids = problem_order(seed_range, seed, epoch)[index : index + n]
    return ids, {"epoch": epoch, "index": index + n}


def micro_batch_groups(
    num_rows: int,
    batch_size: int,
    accumulation_steps: int,
    seed: int,
    row_keys: Sequence[Hashable] | None = None,
) -> list[list[torch.Tensor]]:
    """Row indices in a seeded shuffle, cut into micro-batches of ``batch_size`` and grouped into
    optimizer steps of ``accumulation_steps`` micro-batches (the last step may hold fewer).

    With ``row_keys`` (one per row), rows with equal keys stay adjacent: keys come in the order the
    shuffle first meets them, each key's rows in shuffled order. Keyed by prompt, a micro-batch then
    holds few distinct prompts, which the shared-prompt forward encodes once each.
    """
    if num_rows < 1 or batch_size < 1 or accumulation_steps < 1:
        raise ValueError(
            f"`num_rows`, `batch_size`, `accumulation_steps` must be >= 1, got {num_rows}, {batch_size}, "
            f"{accumulation_steps}"
        )
    if row_keys is not None and len(row_keys) != num_rows:
        raise ValueError(f"`row_keys` must hold one key per row ({num_rows}), got {len(row_keys)}")
    order = torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed))
    if row_keys is not None:
        rank: dict[Hashable, int] = {}
        for index in order.tolist():
            rank.setdefault(row_keys[index], len(rank))
        order = torch.tensor(sorted(order.tolist(), key=lambda index: rank[row_keys[index]]), dtype=torch.long)
    micro = list(order.split(batch_size))
    return [micro[i : i + accumulation_steps] for i in range(0, len(micro), accumulation_steps)]


# ================================================================================= loss (pure)


def accumulation_scale(loss_type: str, num_micro_batches: int) -> float:
    """Factor on a micro-batch loss under gradient accumulation: ``1/k`` for the per-batch means
    (``grpo``, ``bnpo``/``token``, ``dr_grpo``, ``sequence_sum``), ``1`` for ``dapo``, whose normaliser is
    already the token count of all ``k`` micro-batches."""
    if num_micro_batches < 1:
        raise ValueError(f"`num_micro_batches` must be >= 1, got {num_micro_batches}")
    return 1.0 if loss_type == "dapo" else 1.0 / num_micro_batches


def at_grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    config: ATGRPOConfig,
    num_micro_batches: int = 1,
    num_items_in_batch: int | None = None,
    ref_logps: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PPOLossOutput]:
    """The loss to backpropagate for one micro-batch, and the PPO-clip diagnostics.

    :func:`comlrl.rl.ppo_clip_loss` with the config's ``epsilon``, ``epsilon_high``, ``dual_clip``,
    ``loss_type`` and ``beta`` (with ``ref_logps``), scaled by :func:`accumulation_scale`.
    ``num_items_in_batch`` is the completion-token count of the optimizer step (``dapo``).
    """
    out = ppo_clip_loss(
        logps,
        old_logps,
        advantages,
        mask,
        epsilon=config.epsilon,
        epsilon_high=config.epsilon_high,
        loss_type=config.loss_type,
        max_completion_length=config.max_completion_length,
        num_items_in_batch=num_items_in_batch,
        dual_clip=config.dual_clip,
        ref_logprobs=ref_logps,
        beta=config.beta,
    )
    return out.loss * accumulation_scale(config.loss_type, num_micro_batches), out


# ================================================================================= scoring


def per_token_logps(
    model: torch.nn.Module,
    rows: Mapping[str, torch.Tensor],
    temperature: float,
    with_entropy: bool = False,
    share_prompts: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One padded forward over TRL's layout (``prompt_ids`` left-, ``completion_ids`` right-padded).

    Returns ``log_softmax(logits / temperature)`` of each completion token (``[B, C]``, float32, 0 on
    padding), the same quantity the rollout sampler recorded, and optionally the mean entropy of the
    completion positions' distributions (detached). Only the last ``C + 1`` positions' logits are built.
    ``share_prompts`` encodes each distinct prompt once
    (:func:`comlrl.scoring.shared_prompt_completion_logits`): the same numbers up to float rounding, and
    about K times less prompt work when a batch holds the K candidates of a group.
    """
    completion_mask = rows["completion_mask"]
    device = next(model.parameters()).device
    prompt_ids, prompt_mask = rows["prompt_ids"].to(device), rows["prompt_mask"].to(device)
    completion_ids = rows["completion_ids"].to(device)
    width = completion_ids.shape[1]
    if share_prompts:
        logits = shared_prompt_completion_logits(model, prompt_ids, prompt_mask, completion_ids)
    else:
        attention_mask = torch.cat([prompt_mask, completion_mask.to(device)], dim=1)
        logits = model(
            input_ids=torch.cat([prompt_ids, completion_ids], dim=1),
            attention_mask=attention_mask,
            position_ids=(attention_mask.cumsum(dim=1) - 1).clamp(min=0),
            logits_to_keep=width + 1,
            use_cache=False,
        ).logits[:, :-1]  # position P - 1 + j predicts completion token j
    mask = completion_mask.to(device).bool()
    logps = gather_token_logprobs(logits, completion_ids, temperature).masked_fill(~mask, 0.0)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = masked_entropy(logits.detach().float() / temperature, mask)
    return logps, entropy


def _rows(tensors: PolicyTensors, index: torch.Tensor, extra: Mapping[str, torch.Tensor] | None = None) -> dict:
    """Rows ``index`` of a policy's tensors, trimmed to their own longest prompt and completion."""
    prompt_mask, completion_mask = tensors.prompt_mask[index], tensors.completion_mask[index]
    p = int(prompt_mask.sum(dim=1).max())
    c = max(1, int(completion_mask.sum(dim=1).max()))
    start = prompt_mask.shape[1] - p
    out = {
        "prompt_ids": tensors.prompt_ids[index, start:],
        "prompt_mask": prompt_mask[:, start:],
        "completion_ids": tensors.completion_ids[index, :c],
        "completion_mask": completion_mask[:, :c],
        "old_per_token_logps": tensors.old_per_token_logps[index, :c],
        "advantages": tensors.advantages[index],
    }
    for name, value in (extra or {}).items():
        out[name] = value[index, :c]
    return out


# ================================================================================= metrics (pure)


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    t = torch.tensor(values, dtype=torch.float64)
    return float(t.mean()), float(t.std()) if len(values) > 1 else 0.0


def _sample_metrics(
    samples: Sequence[Sample], zero_std: Mapping[Hashable, bool], prefix: str
) -> dict[str, float]:
    out: dict[str, float] = {f"{prefix}num_samples": float(len(samples))}
    for part, attribute in (("reward", "reward"), ("global_reward", "global_reward"), ("local_reward", "local_reward")):
        mean, std = _mean_std([getattr(s, attribute) for s in samples])
        out[f"{prefix}{part}_mean"] = mean
        out[f"{prefix}{part}_std"] = std
    keys = {s.group_key for s in samples}
    out[f"{prefix}frac_reward_zero_std"] = sum(zero_std[k] for k in keys) / len(keys)
    out[f"{prefix}parse_error_rate"] = sum(s.parse_error is not None for s in samples) / len(samples)
    out[f"{prefix}success_rate"] = sum(bool(s.success) for s in samples) / len(samples)
    out[f"{prefix}completions/mean_length"] = sum(len(s.completion_ids) for s in samples) / len(samples)
    return out


def rollout_metrics(samples: Sequence[Sample], zero_std_atol: float = 1e-8) -> dict[str, float]:
    """Reward metrics of one rollout: the run totals, per agent role, per (role, turn) and per policy.

    ``reward``/``reward_std``/``frac_reward_zero_std`` are TRL's (mean member reward, mean within-group std,
    fraction of groups with std ``<= zero_std_atol``); the ``<part>_mean`` / ``<part>_std`` of
    ``reward`` (mixed), ``global_reward`` and ``local_reward`` are over samples (unbiased std, 0 for one
    sample); ``frac_reward_zero_std`` of a subset is over the groups its samples belong to.
    """
    table = member_table(samples)
    stats = group_stats(table.rewards, table.group_ids, zero_std_atol)
    zero_std = {key: bool(std <= zero_std_atol) for key, std in zip(table.group_keys, stats.std.tolist())}
    out = stats.as_metrics()
    out["num_samples"] = float(len(samples))
    out["parse_error_rate"] = sum(s.parse_error is not None for s in samples) / len(samples)
    out["completions/mean_length"] = sum(len(s.completion_ids) for s in samples) / len(samples)
    subsets: dict[str, list[Sample]] = {}
    for s in samples:
        subsets.setdefault(f"agent/{s.role}/", []).append(s)
        subsets.setdefault(f"agent/{s.role}/turn_{s.turn}/", []).append(s)
        subsets.setdefault(f"policy/{s.policy}/", []).append(s)
    for prefix in sorted(subsets):
        out.update(_sample_metrics(subsets[prefix], zero_std, prefix))
    for name in sorted({s.policy for s in samples}):
        sub = member_table([s for s in samples if s.policy == name])
        out.update(group_stats(sub.rewards, sub.group_ids, zero_std_atol).as_metrics(f"policy/{name}/"))
    return out


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# ================================================================================= trainer


class ATGRPOTrainer:
    """AT-GRPO (and, with ``sampling_mode="independent"``, the GRPO baseline) over the rollout engine.

    Args:
        config: an :class:`ATGRPOConfig` (None: defaults).
        model: the (base) model of every policy: a preset name, local folder or hub id, or a full
            :class:`~pettingllms.execution.PolicyConfig` (device, dtype, LoRA, L3 models), whose
            ``policy_level`` / ``agent_policies`` must match the config's.
        policy: a prebuilt :class:`comlrl.policy.MultiAgentPolicy` instead of ``model``.
        engine: a prebuilt :class:`~pettingllms.execution.RolloutEngine` (needs ``policy``; its sampling
            settings must match the config's).
        env_name, env_config: the registered environment and its config (mapping or dataclass); the
            config's ``turn_order`` (after the policy level), ``max_turns`` and ``alpha`` are applied to it.
        agent_options, env_worker: passed to the engine (per-role agent options; the tool sandbox).

    Override points: :meth:`generate_and_score` (how a step's samples are produced and rewarded) and
    :meth:`compute_advantages`.
    """

    def __init__(
        self,
        config: ATGRPOConfig | None = None,
        *,
        model: str | PolicyConfig = "small",
        policy: Any = None,
        engine: RolloutEngine | None = None,
        env_name: str = "plan_path",
        env_config: Any = None,
        agent_options: Mapping[str, Mapping[str, Any]] | None = None,
        env_worker: Any = None,
    ) -> None:
        self.config = config = config if config is not None else ATGRPOConfig()
        if not isinstance(config, ATGRPOConfig):
            raise TypeError(f"`config` must be an ATGRPOConfig, got {type(config).__name__}")
        if engine is not None and policy is None:
            raise ValueError("`engine` was given without `policy`: pass the MultiAgentPolicy it samples from")
        if policy is None:
            policy = build_policy(self._policy_config(model), self._workflow_order(env_name, env_config))
        self.policy = policy
        if engine is None:
            engine = RolloutEngine.from_registry(
                env_name,
                self._env_config(env_name, env_config),
                build_router(policy),
                EngineConfig(**config.engine_kwargs()),
                agent_options=agent_options,
                env_worker=env_worker,
            )
        else:
            self._check_engine(engine)
        self.engine = engine
        served = {engine.router.policy_for(agent.role) for agent in engine.agents}
        unknown = sorted(served - set(policy.policies))
        if unknown:
            raise ValueError(f"the engine routes to policies {unknown} that `policy` does not hold: {policy.policies}")

        from transformers import get_scheduler

        from comlrl.rollout.hf import eos_token_ids, pad_token_id

        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self.schedulers: dict[str, Any] = {}
        self.pad_token_ids: dict[str, int] = {}
        for name in policy.policies:
            params = policy.trainable_parameters(name)
            if not params:
                raise ValueError(f"policy {name!r} has no trainable parameters")
            self.optimizers[name] = torch.optim.AdamW(
                params,
                lr=config.learning_rate,
                betas=(config.adam_beta1, config.adam_beta2),
                eps=config.adam_epsilon,
                weight_decay=config.weight_decay,
            )
            self.schedulers[name] = get_scheduler(
                config.lr_scheduler_type,
                self.optimizers[name],
                num_warmup_steps=config.num_warmup_steps,
                num_training_steps=config.max_steps,
            )
            handle = policy.handle(name)
            self.pad_token_ids[name] = pad_token_id(handle.tokenizer, eos_token_ids(handle.model, handle.tokenizer))
        self.reference_models = self._build_reference() if config.beta > 0 else {}

        self.global_step = 0
        self.data_cursor: dict[str, int] = {"epoch": 0, "index": 0}
        self.log_history: list[dict[str, float]] = []
        self.last_eval = None
        self._metrics_logger = None
        self._table_header_printed = False

    # ------------------------------------------------------------------------------------ construction
    def _policy_config(self, model: str | PolicyConfig) -> PolicyConfig:
        config = self.config
        if isinstance(model, PolicyConfig):
            for name, mine in (("policy_level", config.policy_level), ("agent_policies", config.agent_policies)):
                if getattr(model, name) != mine:
                    raise ValueError(
                        f"`model.{name}` ({getattr(model, name)!r}) differs from the config's `{name}` ({mine!r})"
                    )
            return model
        if not isinstance(model, str) or not model:
            raise TypeError(f"`model` must be a model name/path or a PolicyConfig, got {model!r}")
        return PolicyConfig(
            policy_level=config.policy_level, agent_policies=config.agent_policies, model=model, seed=config.seed
        )

    def _workflow_order(self, env_name: str, env_config: Any) -> list[str]:
        """The workflow's roles before the policy level applies (config, env_config, else the env's)."""
        if self.config.turn_order is not None:
            return list(self.config.turn_order)
        given = _env_value(env_config, "turn_order")
        if given is not None:
            return list(given)
        from pettingllms.registry import make_env

        return list(make_env(env_name, env_config).config.turn_order)

    def _env_config(self, env_name: str, env_config: Any) -> Any:
        """``env_config`` with the config's workflow knobs applied (a conflicting value is an error)."""
        config = self.config
        mine = {"turn_order": config.turn_order, "max_turns": config.max_turns, "alpha": config.alpha}
        for name, value in mine.items():
            given = _env_value(env_config, name)
            if name == "turn_order" and given is not None:
                given = list(given)
            if value is not None and given is not None and given != value:
                raise ValueError(f"`{name}` is {value!r} in the config but {given!r} in `env_config`; set it once")
        overrides = {name: value for name, value in mine.items() if value is not None}
        overrides["turn_order"] = list(
            level_turn_order(config.policy_level, self._workflow_order(env_name, env_config))
        )
        if env_config is None:
            return overrides
        if dataclasses.is_dataclass(env_config):
            return dataclasses.replace(env_config, **overrides)
        if not isinstance(env_config, Mapping):
            raise TypeError(f"`env_config` must be a mapping or a dataclass, got {type(env_config).__name__}")
        return {**dict(env_config), **overrides}

    def _check_engine(self, engine: RolloutEngine) -> None:
        for name in ENGINE_FIELDS:
            theirs, mine = getattr(engine.config, name), getattr(self.config, name)
            if theirs != mine:
                raise ValueError(f"`engine.config.{name}` ({theirs!r}) differs from the config's `{name}` ({mine!r})")

    def _build_reference(self) -> dict[str, torch.nn.Module | None]:
        """Frozen reference per policy: a copy of each plain model (shared by its policies), or ``None``
        for a LoRA policy, whose reference is the base with adapters disabled."""
        references: dict[str, torch.nn.Module | None] = {}
        copies: dict[int, torch.nn.Module] = {}
        for name in self.policy.policies:
            handle = self.policy.handle(name)
            if handle.adapter is not None:
                references[name] = None
                continue
            if id(handle.model) not in copies:
                reference = copy.deepcopy(handle.model).eval()
                reference.requires_grad_(False)
                copies[id(handle.model)] = reference
            references[name] = copies[id(handle.model)]
        return references

    # ------------------------------------------------------------------------------------ override points
    def generate_and_score(self, problem_ids: Sequence[int], step: int) -> RolloutBatch:
        """Samples of one training step with their rewards (``group_reward``): the engine's rollout."""
        return self.engine.rollout(list(problem_ids), step)

    def compute_advantages(self, samples: Sequence[Sample]) -> torch.Tensor:
        """One advantage per sample (see :func:`sample_advantages`)."""
        return sample_advantages(samples, self.config.scale_rewards)

    # ------------------------------------------------------------------------------------ training
    def train(self, resume_from_checkpoint: str | bool | None = None) -> list[dict[str, float]]:
        """Run until ``max_steps`` training steps are done; returns the logged metrics history.

        ``resume_from_checkpoint`` (default: the config's) is a checkpoint folder or True for the latest
        in ``output_dir``; the run then continues exactly as the uninterrupted one would.
        """
        resume = resume_from_checkpoint if resume_from_checkpoint is not None else self.config.resume_from_checkpoint
        if resume:
            self.load_checkpoint(self._find_checkpoint(resume))
        elif self.global_step == 0:  # a fresh run replaces what an earlier run left in output_dir
            self.metrics_logger.truncate_after(0)
            if self.engine.transcripts is not None:
                self.engine.transcripts.truncate_after(0)
        from tqdm.auto import tqdm

        bar = tqdm(
            total=self.config.max_steps,
            initial=self.global_step,
            desc="AT-GRPO" if self.config.sampling_mode == "tree" else "GRPO",
            unit="step",
            disable=self.config.disable_tqdm,
            leave=False,
        )
        try:
            while self.global_step < self.config.max_steps:
                metrics = self.step()
                bar.update(1)
                bar.set_postfix(success=f"{metrics['success_rate']:.2f}", reward=f"{metrics['reward']:.3f}")
        finally:
            bar.close()
        return self.log_history

    def step(self) -> dict[str, float]:
        """One training step: draw problems, roll out, compute advantages, update every policy; then log
        (every ``logging_steps``) and checkpoint (every ``save_steps``). Returns the step's metrics."""
        config = self.config
        step = self.global_step + 1
        start = time.perf_counter()
        problem_ids, cursor = draw_problem_ids(
            self.data_cursor, config.problems_per_step, config.train_seed_range, config.seed
        )
        batch = self.generate_and_score(problem_ids, step)
        rollout_s = time.perf_counter() - start
        if not batch.samples:
            raise RuntimeError(f"step {step}: the rollout produced no samples (every one was dropped)")
        advantages = self.compute_advantages(batch.samples)
        by_sample = {id(s): float(a) for s, a in zip(batch.samples, advantages)}
        tensors = tensorize(batch.samples, self.pad_token_ids)

        metrics: dict[str, float] = {"success_rate": batch.success_rate}
        metrics.update(rollout_metrics(batch.samples))
        update_start = time.perf_counter()
        for name in self.policy.policies:
            learning_rate = self.schedulers[name].get_last_lr()[0]
            if name in tensors:
                rows = tensors[name]
                rows.advantages = torch.tensor([by_sample[id(s)] for s in rows.samples], dtype=torch.float32)
                metrics.update(self._update_policy(name, rows, step))
            metrics[f"policy/{name}/learning_rate"] = learning_rate
            self.schedulers[name].step()
        update_s = time.perf_counter() - update_start
        self.data_cursor = cursor
        self.global_step = step

        metrics.update(
            {
                "dropped_samples": float(batch.dropped_samples),
                "generate_calls": float(batch.generate_calls),
                "time/rollout_s": rollout_s,
                "time/generate_s": batch.timings.get("generate_s", 0.0),
                "time/env_s": batch.timings.get("env_s", 0.0),
                "time/update_s": update_s,
                "time/step_s": time.perf_counter() - start,
            }
        )
        if step % config.logging_steps == 0 or step == config.max_steps:
            self._log(metrics, step)
            self._print_row(step, metrics)
        if config.save_steps and (step % config.save_steps == 0):
            self.save_checkpoint()
        return metrics

    def _update_policy(self, name: str, tensors: PolicyTensors, step: int) -> dict[str, float]:
        """``num_iterations`` PPO passes of one policy over its rows; returns its ``policy/<name>/`` metrics."""
        config, policy = self.config, self.policy
        model = policy.handle(name).model
        optimizer = self.optimizers[name]
        params = [p for group in optimizer.param_groups for p in group["params"]]
        versions = torch.tensor([s.policy_version for s in tensors.samples], dtype=torch.float64)
        extra = {}
        if config.beta > 0:
            extra["ref_per_token_logps"] = self._reference_logps(name, tensors)
        prompt_keys = [tuple(s.prompt_ids) for s in tensors.samples] if config.share_prompts else None
        losses, entropies, diagnostics, grad_norms, staleness = [], [], [], [], []
        stale_max, optimizer_steps, skipped = 0.0, 0, 0
        with _forward_mode(model, train=not config.disable_dropout), policy.activate(name):
            for iteration in range(config.num_iterations):
                groups = micro_batch_groups(
                    len(tensors.samples),
                    config.per_device_train_batch_size,
                    config.gradient_accumulation_steps,
                    derive_seed(config.seed, "micro_batches", step, name, iteration),
                    row_keys=prompt_keys,
                )
                for group in groups:
                    num_items = int(sum(int(tensors.completion_mask[index].sum()) for index in group))
                    optimizer.zero_grad(set_to_none=True)
                    finite = True
                    for index in group:
                        rows = _rows(tensors, index, extra)
                        behind = policy.version(name) - versions[index]
                        staleness.append(float(behind.mean()))
                        stale_max = max(stale_max, float(behind.max()))
                        logps, entropy = per_token_logps(
                            model, rows, config.temperature, with_entropy=True, share_prompts=config.share_prompts
                        )
                        device = logps.device
                        loss, out = at_grpo_loss(
                            logps,
                            rows["old_per_token_logps"].to(device),
                            rows["advantages"].to(device),
                            rows["completion_mask"].to(device),
                            config=config,
                            num_micro_batches=len(group),
                            num_items_in_batch=num_items,
                            ref_logps=rows["ref_per_token_logps"].to(device) if config.beta > 0 else None,
                        )
                        if not bool(torch.isfinite(loss)):
                            finite = False
                            break
                        loss.backward()
                        losses.append(float(out.loss.detach()))
                        entropies.append(float(entropy))
                        diagnostics.append(out.as_metrics())
                    grad_norm = None
                    if finite:
                        grad_norm = float(
                            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm or float("inf"))
                        )
                        finite = math.isfinite(grad_norm)
                    if not finite:  # an infrastructure-grade failure: drop this optimizer step, count it
                        optimizer.zero_grad(set_to_none=True)
                        skipped += 1
                        logger.warning("policy %r step %s: non-finite loss or gradient, optimizer step skipped", name, step)
                        continue
                    grad_norms.append(grad_norm)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    policy.bump_version(name)
                    optimizer_steps += 1
        if optimizer_steps == 0:
            raise FloatingPointError(
                f"policy {name!r} at step {step}: every optimizer step had a non-finite loss or gradient"
            )
        prefix = f"policy/{name}/"
        metrics = {
            f"{prefix}loss": _mean(losses),
            f"{prefix}entropy": _mean(entropies),
            f"{prefix}grad_norm": _mean(grad_norms),
            f"{prefix}staleness_mean": _mean(staleness),
            f"{prefix}staleness_max": stale_max,
            f"{prefix}optimizer_steps": float(optimizer_steps),
            f"{prefix}skipped_steps": float(skipped),
            f"{prefix}num_tokens": float(tensors.completion_mask.sum()),
        }
        for key in diagnostics[0] if diagnostics else ():
            if key != "loss":
                metrics[f"{prefix}{key}"] = _mean([d[key] for d in diagnostics])
        return metrics

    def _reference_logps(self, name: str, tensors: PolicyTensors) -> torch.Tensor:
        """Reference log-probs of every row (``[B, C]`` on CPU), scored once per rollout."""
        handle = self.policy.handle(name)
        reference = self.reference_models[name]
        out = torch.zeros_like(tensors.old_per_token_logps)
        size, share = self.config.per_device_train_batch_size, self.config.share_prompts
        with torch.no_grad(), _forward_mode(handle.model, train=False):
            for index in torch.arange(len(tensors.samples)).split(size):
                rows = _rows(tensors, index)
                if reference is None:
                    with self.policy.activate(name), handle.model.disable_adapter():
                        logps, _ = per_token_logps(handle.model, rows, self.config.temperature, share_prompts=share)
                else:
                    logps, _ = per_token_logps(reference, rows, self.config.temperature, share_prompts=share)
                out[index, : logps.shape[1]] = logps.cpu()
        return out

    # ------------------------------------------------------------------------------------ evaluation
    def evaluate(
        self,
        problem_ids: Sequence[int],
        num_samples: int = 1,
        temperature: float = 0.0,
        *,
        heldout: bool = True,
        log: bool = True,
    ) -> dict[str, float]:
        """Success rate over ``num_samples`` independent trajectories per problem (``engine.evaluate``).

        With ``heldout`` (default) an id inside ``train_seed_range`` is an error. Returns (and with
        ``log`` logs at the current step) ``eval/success_rate``, ``eval/num_trajectories``,
        ``eval/dropped``; the full :class:`~pettingllms.execution.EvalResult` is ``self.last_eval``.
        """
        ids = list(problem_ids)
        if heldout:
            start, stop = self.config.train_seed_range
            overlap = sorted(p for p in ids if isinstance(p, int) and start <= p < stop)
            if overlap:
                raise ValueError(
                    f"`problem_ids` {overlap[:5]}{'...' if len(overlap) > 5 else ''} lie in `train_seed_range` "
                    f"[{start}, {stop}); pass heldout=False to evaluate on training instances"
                )
        result = self.engine.evaluate(ids, num_samples=num_samples, temperature=temperature)
        self.last_eval = result
        metrics = {
            "eval/success_rate": result.success_rate,
            "eval/num_trajectories": float(result.num_trajectories),
            "eval/dropped": float(result.dropped),
        }
        if log:
            self._log(metrics, self.global_step)
        return metrics

    # ------------------------------------------------------------------------------------ saving
    def save_model(self, output_dir: str | Path | None = None) -> Path:
        """The policies (one folder per policy, LoRA adapters included) and the trainer config."""
        from comlrl.atomic_io import atomic_write_json

        directory = Path(output_dir if output_dir is not None else self.config.output_dir)
        self.policy.save(directory)
        atomic_write_json(directory / "at_grpo_config.json", self.config.to_dict())
        return directory

    def save_checkpoint(self) -> Path:
        """``output_dir/checkpoint-{global_step}/``: policies, optimizers, schedulers, random streams,
        data cursor, engine counters and the metrics so far (rotated by ``save_total_limit``)."""
        state = TrainerState(
            step=self.global_step,
            data_cursor=dict(self.data_cursor),
            log_history=list(self.log_history),
            extra={"engine": self.engine.state_dict(), "config": self.config.to_dict()},
        )
        return save_checkpoint(
            self.config.output_dir,
            state,
            policy=self.policy,
            optimizers=self.optimizers,
            schedulers=self.schedulers,
            save_total_limit=self.config.save_total_limit,
        )

    def load_checkpoint(self, path: str | Path) -> TrainerState:
        """Restore a checkpoint into this trainer; later metrics and transcripts are dropped from disk."""
        state = load_checkpoint(path, policy=self.policy, optimizers=self.optimizers, schedulers=self.schedulers)
        self.global_step = state.step
        self.data_cursor = {"epoch": int(state.data_cursor["epoch"]), "index": int(state.data_cursor["index"])}
        self.log_history = list(state.log_history)
        self.engine.load_state_dict(state.extra["engine"])
        self.metrics_logger.truncate_after(state.step)
        if self.engine.transcripts is not None:
            self.engine.transcripts.truncate_after(state.step)
        return state

    def _find_checkpoint(self, resume: str | bool) -> Path:
        if resume is True:
            found = latest_checkpoint(self.config.output_dir)
            if found is None:
                raise ValueError(
                    f"`resume_from_checkpoint` is True but {self.config.output_dir} holds no complete checkpoint"
                )
            return found
        path = Path(resume)
        if not path.is_dir():
            raise ValueError(f"`resume_from_checkpoint` {str(resume)!r} is not a checkpoint folder")
        return path

    # ------------------------------------------------------------------------------------ logging
    @property
    def metrics_logger(self):
        if self._metrics_logger is None:
            from comlrl.reporting import MetricsLogger

            self._metrics_logger = MetricsLogger(
                self.config.output_dir, self.config.report_to, config=self.config.to_dict()
            )
        return self._metrics_logger

    def _log(self, metrics: Mapping[str, float], step: int) -> None:
        record = self.metrics_logger.log(metrics, step)
        self.log_history.append({"step": step, **record})

    def _print_row(self, step: int, metrics: Mapping[str, float]) -> None:
        if self.config.disable_tqdm:
            return
        from tqdm.auto import tqdm

        names = self.policy.policies

        def across(key: str) -> float:
            return _mean([metrics[f"policy/{n}/{key}"] for n in names if f"policy/{n}/{key}" in metrics])

        columns = [
            ("step", f"{step}", 6),
            ("success", f"{metrics['success_rate']:.3f}", 8),
            ("reward", f"{metrics['reward']:.3f}", 8),
            ("zero_std", f"{metrics['frac_reward_zero_std']:.2f}", 8),
            ("loss", f"{across('loss'):.4f}", 9),
            ("clip", f"{across('clip_ratio/region_mean'):.3f}", 7),
            ("kl", f"{across('approx_kl'):.4f}", 8),
            ("entropy", f"{across('entropy'):.3f}", 8),
            ("len", f"{metrics['completions/mean_length']:.1f}", 6),
            ("secs", f"{metrics['time/step_s']:.1f}", 6),
        ]
        if not self._table_header_printed:
            tqdm.write(" ".join(name.rjust(width) for name, _, width in columns))
            self._table_header_printed = True
        tqdm.write(" ".join(value.rjust(width) for _, value, width in columns))


def _env_value(env_config: Any, name: str) -> Any:
    if env_config is None:
        return None
    if isinstance(env_config, Mapping):
        return env_config.get(name)
    return getattr(env_config, name, None)


@contextlib.contextmanager
def _forward_mode(model: torch.nn.Module, train: bool) -> Iterator[None]:
    """Train or eval mode for the update's forwards, restored afterwards."""
    was_training = model.training
    model.train(train)
    try:
        yield
    finally:
        model.train(was_training)
