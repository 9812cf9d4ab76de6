"""One policy's AT-GRPO / GRPO update as its own object: :class:`PolicyUpdater` holds the policy's AdamW and
learning-rate scheduler and runs ``num_iterations`` PPO-clip passes over the rows one step gave it.

:class:`~pettingllms.trainer.at_grpo.ATGRPOTrainer` holds one per policy (Ray's UpdateWorkers hold one
each, with the same interface). The updater does not count non-finite steps itself: it returns, in
order, an event per optimizer step (``("finite",)`` or ``("skip", what, where)``) in an
:class:`UpdateResult`, which the trainer replays into its
:class:`~comlrl.trainers.core.nonfinite.NonFiniteGuard`.

The optimizer steps go through comlrl's update engine (:class:`~comlrl.trainers.core.optimization.GradientSteps`,
with its AdamW, :func:`~comlrl.trainers.core.optimization.build_optimizer`, and LR schedule,
:func:`~comlrl.trainers.core.optimization.build_lr_scheduler` over ``max_steps``, advanced once per training
step by the trainer). Per optimizer step (a group of ``gradient_accumulation_steps`` shuffled micro-batches,
:func:`~pettingllms.trainer.micro_batches.micro_batch_groups`): backpropagate each micro-batch's
:func:`~pettingllms.trainer.losses.at_grpo_loss` times its weight, the rule comlrl's trainers use for
the same ``loss_type`` (:func:`~comlrl.trainers.core.optimization.micro_batch_weights`): ``dapo`` weighs 1
(its normaliser ``num_items_in_batch`` is the step's tokens); the row-mean types (``grpo``, ``bnpo`` /
``token``, ``dr_grpo``, ``sequence_sum``) weigh their rows and the engine divides by the step's rows, so a
short last micro-batch counts by its rows (with equal micro-batches: the old ``1/k`` up to float
rounding). Then clip (the norm is measured even without clipping), step, bump the policy's weights
version. A non-finite loss part or gradient norm skips the step (no parameter change; the engine's
``nonfinite="step"``). Under data parallelism (:mod:`comlrl.distributed`) the step's token count is summed
over ranks before the first backward, the gradients and rows before the division (the engine's hooks,
:func:`~comlrl.trainers.core.data_parallel.attach_engine`), and every rank makes the same number of
optimizer steps.

Under FSDP (``sharding``, :mod:`pettingllms.trainer.fsdp`) the update runs on the policy's
:class:`~pettingllms.trainer.fsdp.ShardedModel` inside its ``training()`` bracket (the AdamW holds the sharded
parameters): every rank makes the same number of micro-batch forward / backward calls (zero-weight filler
micro-batches, of 0 rows, where it has fewer rows, or none), FSDP's reduce-scatter sums the gradients
instead of the flat all-reduce, and the clipping norm is that of the whole gradient. The reference (``beta > 0``) is
scored in the same number of chunks on every rank.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch

from comlrl import distributed as dist
from comlrl.rl import is_finite, nonfinite_names
from comlrl.scoring import per_token_logps
from comlrl.seeding import derive_seed
from comlrl.trainers.core.data_parallel import attach_engine
from comlrl.trainers.core.models import scoring_mode
from comlrl.trainers.core.optimization import (
    GradientSteps,
    build_lr_scheduler,
    build_optimizer,
    micro_batch_weights,
)
from pettingllms.execution import PolicyTensors, Sample
from pettingllms.trainer import fsdp
from pettingllms.trainer.at_grpo_config import ATGRPOConfig
from pettingllms.trainer.losses import at_grpo_loss
from pettingllms.trainer.metrics import UpdateStats
from pettingllms.trainer.micro_batches import micro_batch_groups, policy_rows

__all__ = ["PolicyUpdater", "UpdateResult"]


@dataclass
class UpdateResult:
    """What one :meth:`PolicyUpdater.update` did: its ``policy/<name>/`` metrics, and per optimizer step, in
    order, ``("finite",)`` or ``("skip", what, where)`` for the trainer's non-finite guard."""

    metrics: dict[str, float]
    events: list[tuple] = field(default_factory=list)


class PolicyUpdater:
    """The optimizer, scheduler and PPO-clip update of policy ``name`` of ``policy`` (a
    :class:`comlrl.policy.MultiAgentPolicy`).

    Args:
        config: the :class:`ATGRPOConfig` (optimizer, schedule, loss and micro-batch settings).
        policy: the multi-agent policy holding ``name``.
        name: the policy to update; its trainable parameters (``policy.trainable_parameters(name)``) go
            to one AdamW.
        reference: a :class:`comlrl.trainers.core.reference.ReferencePolicy` for the KL (needed when
            ``config.beta > 0``; under FSDP a :class:`~pettingllms.trainer.fsdp.ShardedReference`).
        sharding: :class:`~pettingllms.trainer.fsdp.FSDPSettings` to train the policy's model as an FSDP
            :class:`~pettingllms.trainer.fsdp.ShardedModel` (:attr:`sharded`; None: the model itself).
        sampling: how the rows were sampled (the engine's :class:`~pettingllms.execution.EngineConfig`):
            the update scores at its ``temperature``, and ``dr_grpo`` normalises by its
            ``max_completion_length``.
    """

    def __init__(
        self, config: ATGRPOConfig, policy: Any, name: str, reference: Any = None, sharding: Any = None, *,
        sampling: Any,
    ) -> None:
        from comlrl.rollout.hf import eos_token_ids, pad_token_id

        if config.beta > 0 and reference is None:
            raise ValueError(f"policy {name!r}: `beta` is {config.beta} > 0, so a `reference` policy is needed")
        params = policy.trainable_parameters(name)
        if not params:
            raise ValueError(f"policy {name!r} has no trainable parameters")
        self.config, self.policy, self.name, self.reference = config, policy, name, reference
        self.temperature, self.max_completion_length = sampling.temperature, sampling.max_completion_length
        self.sharded = None if sharding is None else fsdp.ShardedModel(policy.handle(name).model, sharding, params)
        if self.sharded is not None:
            params = self.sharded.parameters()
        self.optimizer = build_optimizer(
            params,
            learning_rate=config.learning_rate,
            betas=(config.adam_beta1, config.adam_beta2),
            eps=config.adam_epsilon,
            weight_decay=config.weight_decay,
        )
        knobs = engine_settings(config)
        self.scheduler = build_lr_scheduler(knobs, self.optimizer, horizon=config.max_steps)
        handle = policy.handle(name)
        # The update engine: caller-grouped micro-batches, a non-finite one skips the step, the norm measured;
        # the row-mean loss types divide by the step's rows, dapo's loss is already divided by its tokens.
        divisors = () if config.loss_type == "dapo" else ("rows",)
        self.steps = GradientSteps(
            knobs, {name: self.optimizer}, divisors=divisors, nonfinite="step", measure_grad_norm=True,
            sharded=self.sharded is not None, auto_step=False,
        )  # fmt: skip
        self._data_parallel = False  # whether the engine's data-parallel hooks are attached
        self._attach_data_parallel()
        self.pad_token_id: int = pad_token_id(handle.tokenizer, eos_token_ids(handle.model, handle.tokenizer))

    def _attach_data_parallel(self) -> None:
        """Attach the engine's data-parallel hooks (:func:`~comlrl.trainers.core.data_parallel.attach_engine`)
        once a process group of more than one rank exists. A launcher's group exists before the updater is
        built; a Ray update group (:meth:`~pettingllms.workers.update_worker.UpdateWorker.join_group`) is
        joined after the UpdateWorker built its updater, so :meth:`update` attaches them then."""
        if not self._data_parallel and dist.world_size() > 1:
            attach_engine(self.steps, sharded=self.sharded is not None)
            self._data_parallel = True

    def learning_rate(self) -> float:
        """The learning rate the next optimizer step uses."""
        return self.scheduler.get_last_lr()[0]

    def scheduler_step(self) -> None:
        """Advance the schedule by one training step."""
        self.scheduler.step()

    def update(self, tensors: PolicyTensors | None, step: int) -> UpdateResult:
        """``num_iterations`` PPO passes over this policy's rows of training step ``step``.

        ``tensors`` None (no rows on this rank) is allowed only under data parallelism, where the rank
        still joins every optimizer step with zero gradients.
        """
        config, policy, name = self.config, self.policy, self.name
        world = dist.world_size()
        self._attach_data_parallel()
        if tensors is None and world == 1:
            raise ValueError(f"policy {name!r}, step {step}: `tensors` is None; a single process needs rows")
        num_rows = len(tensors.samples) if tensors is not None else 0
        prompt_keys = [tuple(s.prompt_ids) for s in tensors.samples] if config.share_prompts and num_rows else None
        stats, events = UpdateStats(), []
        scored = config.beta > 0 and (num_rows or self.sharded is not None)  # sharded: every rank scores
        reference = self._reference_logps(tensors) if scored else None
        extra = {"ref_per_token_logps": reference} if reference is not None else {}
        with self.training_model() as model, scoring_mode(model, config.disable_dropout), policy.activate(name):
            for iteration in range(config.num_iterations):
                groups = []
                if num_rows:
                    groups = micro_batch_groups(
                        num_rows,
                        config.per_device_train_batch_size,
                        config.gradient_accumulation_steps,
                        derive_seed(config.seed, "micro_batches", step, name, iteration),
                        row_keys=prompt_keys,
                    )
                # Every rank makes the same number of optimizer steps; one with fewer groups adds zeros.
                num_steps = dist.all_reduce_max(len(groups)) if world > 1 else len(groups)
                for number in range(1, num_steps + 1):
                    group = groups[number - 1] if number <= len(groups) else []
                    bad = self._accumulate_gradients(tensors, group, extra, stats)
                    if bad is None:
                        self.steps.take()
                        policy.bump_version(name)
                        stats.optimizer_steps += 1
                        events.append(("finite",))
                    else:  # drop this optimizer step (no parameter changes), count it, log it
                        self.optimizer.zero_grad(set_to_none=True)
                        stats.skipped_steps += 1
                        where = f"step {step}, policy {name!r}, iteration {iteration + 1}, optimizer step {number}"
                        events.append(("skip", bad, where))
        num_tokens = float(tensors.completion_mask.sum()) if num_rows else 0.0
        if world > 1:
            stats, num_tokens = _gathered_stats(stats, num_tokens)
        return UpdateResult(stats.as_metrics(f"policy/{name}/", num_tokens), events)

    @contextmanager
    def training_model(self) -> Iterator[torch.nn.Module]:
        """The module the update scores and trains: the policy's model, or under FSDP its sharded module
        (inside :meth:`~pettingllms.trainer.fsdp.ShardedModel.training`)."""
        if self.sharded is None:
            yield self.policy.handle(self.name).model
        else:
            with self.sharded.training() as module:
                yield module

    def _accumulate_gradients(
        self,
        tensors: PolicyTensors | None,
        group: Sequence[torch.Tensor],
        extra: Mapping[str, torch.Tensor],
        stats: UpdateStats,
    ) -> str | None:
        """Backpropagate the micro-batches of one optimizer step, sum (data parallel) and clip the gradient
        (:meth:`GradientSteps.prepare`); None when all went through, else what was non-finite (the first
        micro-batch's loss parts, or the gradient norm; every rank's under data parallelism)."""
        config = self.config
        world, sharded = dist.world_size(), self.sharded is not None
        num_items = int(sum(int(tensors.completion_mask[index].sum()) for index in group))
        if world > 1:  # the global batch: dapo divides by all ranks' tokens (the engine sums the rows)
            num_items = int(dist.all_reduce_sum([num_items])[0])
        # FSDP: every rank makes the same forward / backward calls, one per micro-batch of the longest group
        calls = dist.all_reduce_max(len(group)) if sharded else len(group)
        filler = micro_batch_weights(config.loss_type, rows=0, num_items_in_batch=num_items)  # counts nothing
        self.optimizer.zero_grad(set_to_none=True)
        with self.training_model() as model:
            self._backward(model, tensors, group, extra, stats, num_items, filler)
            for _ in range(calls - len(group)):
                logps, _ = per_token_logps(model, fsdp.filler_rows(self.pad_token_id), self.temperature,
                                           share_prompts=config.share_prompts)
                self.steps.backward(fsdp.zero_weight(logps), weight=filler)
        # A non-finite part on any rank skips the step on every rank; else the gradients are summed over the
        # ranks (FSDP's reduce-scatter has summed them) and clipped.
        if not self.steps.prepare():
            return self.steps.last_skip
        stats.grad_norms.append(self.steps.last_grad_norm)
        return None

    def _backward(self, model, tensors, group, extra, stats, num_items, filler) -> None:
        """Backpropagate each micro-batch of ``group`` through the engine, weighted by
        :func:`micro_batch_weights` (its rows; ``dapo``: 1); the first non-finite one's loss parts discard the
        step. Under FSDP every micro-batch backpropagates (a non-finite one and those after it zero-weighted,
        as ``filler``: no rows), so all ranks make the same calls."""
        config, policy, steps, sharded = self.config, self.policy, self.steps, self.sharded is not None
        min_width = 2 if sharded and config.share_prompts else 1  # the shared-prompt forward: always two calls
        bad = None
        for index in group:
            steps.start_micro_batch()
            rows = policy_rows(tensors, index, extra, min_width=min_width)
            sampled_by = torch.tensor([tensors.samples[i].policy_version for i in index.tolist()], dtype=torch.float64)
            stats.add_staleness(policy.version(self.name) - sampled_by)
            logps, entropy = per_token_logps(
                model, rows, self.temperature, with_entropy=True, share_prompts=config.share_prompts
            )
            device = logps.device
            loss, out = at_grpo_loss(
                logps,
                rows["old_per_token_logps"].to(device),
                rows["advantages"].to(device),
                rows["completion_mask"].to(device),
                config=config,
                max_completion_length=self.max_completion_length,
                num_items_in_batch=num_items,
                ref_logps=rows["ref_per_token_logps"].to(device) if config.beta > 0 else None,
            )
            if bad is not None or not is_finite(loss):
                if bad is None:
                    bad = _nonfinite_loss_parts(logps, rows, loss, [tensors.samples[i] for i in index.tolist()])
                    steps.discard_micro_batch(bad)
                if not sharded:
                    break
                steps.backward(fsdp.zero_weight(loss), weight=filler)
                continue
            num_rows = len(index)
            weight = micro_batch_weights(config.loss_type, rows=num_rows, num_items_in_batch=num_items)
            steps.backward(loss, weight=weight)
            steps.end_micro_batch(num_rows)
            stats.add_micro_batch(out, entropy)

    def _reference_logps(self, tensors: PolicyTensors | None) -> torch.Tensor | None:
        """Reference log-probs of every row (``[B, C]`` on CPU), scored once per rollout (under FSDP in the
        same number of chunks on every rank, fillers where a rank has fewer; None for a rank without rows)."""
        size, share = self.config.per_device_train_batch_size, self.config.share_prompts
        chunks = list(torch.arange(len(tensors.samples)).split(size)) if tensors is not None else []
        out = torch.zeros_like(tensors.old_per_token_logps) if tensors is not None else None
        min_width = 2 if self.sharded is not None and share else 1
        calls = dist.all_reduce_max(len(chunks)) if self.sharded is not None else len(chunks)
        with torch.no_grad(), self.reference.model(self.name) as reference:
            for index in chunks:
                rows = policy_rows(tensors, index, min_width=min_width)
                logps, _ = per_token_logps(reference, rows, self.temperature, share_prompts=share)
                width = min(logps.shape[1], out.shape[1])
                out[index, :width] = logps[:, :width].cpu()
            for _ in range(calls - len(chunks)):
                per_token_logps(reference, fsdp.filler_rows(self.pad_token_id), self.temperature,
                                share_prompts=share)
        return out


def engine_settings(config: ATGRPOConfig) -> SimpleNamespace:
    """The update engine's knobs of an AT-GRPO / GRPO config (:class:`~comlrl.trainers.core.optimization.
    TrainingKnobFields` names): accumulation, clipping (0: measured only) and the LR schedule over
    ``max_steps``, whose warm-up is ``ceil(warmup_ratio · max_steps)`` (``num_warmup_steps``, the same rule)."""
    return SimpleNamespace(
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        max_grad_norm=config.max_grad_norm,
        lr_scheduler_type=config.lr_scheduler_type,
        lr_scheduler_kwargs=config.lr_scheduler_kwargs,
        warmup_steps=config.warmup_steps,
        warmup_ratio=config.warmup_ratio,
    )


def _gathered_stats(stats: UpdateStats, num_tokens: float) -> tuple[UpdateStats, float]:
    """Every rank's micro-batch statistics merged (diagnostics then average over all ranks' micro-batches;
    the gradient norms and step counts are the same on every rank) and the global token count."""
    parts = dist.gather_objects((stats.losses, stats.entropies, stats.diagnostics, stats.staleness,
                                 stats.staleness_max, num_tokens))
    merged = UpdateStats(
        grad_norms=stats.grad_norms, optimizer_steps=stats.optimizer_steps, skipped_steps=stats.skipped_steps
    )
    for losses, entropies, diagnostics, staleness, staleness_max, _ in parts:
        merged.losses += losses
        merged.entropies += entropies
        merged.diagnostics += diagnostics
        merged.staleness += staleness
        merged.staleness_max = max(merged.staleness_max, staleness_max)
    return merged, float(sum(part[-1] for part in parts))


def _nonfinite_loss_parts(
    logps: torch.Tensor, rows: Mapping[str, torch.Tensor], loss: torch.Tensor, samples: Sequence[Sample]
) -> str:
    """What made a micro-batch's loss non-finite, with the roles of the rows that hold it."""
    mask = rows["completion_mask"].to(logps.device).bool()
    parts = {
        "log-probs": logps,
        "rollout log-probs": rows["old_per_token_logps"].to(logps.device),
        "reference log-probs": rows.get("ref_per_token_logps"),
        "advantages": rows["advantages"],
        "loss": loss,
    }
    masks = {name: mask for name in ("log-probs", "rollout log-probs", "reference log-probs")}
    bad = nonfinite_names({k: v if v is None else v.to(logps.device) for k, v in parts.items()}, masks)
    rows_bad = ~(torch.isfinite(logps.detach()) | ~mask).all(dim=-1)
    roles = sorted({s.role for s, b in zip(samples, rows_bad.tolist()) if b})
    return f"{', '.join(bad)}" + (f" (rows of roles {roles})" if roles else "")
