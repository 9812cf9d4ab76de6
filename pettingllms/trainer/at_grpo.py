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
   over :func:`comlrl.rl.ppo_clip_loss`), ``num_iterations`` passes of shuffled micro-batches
   (:func:`micro_batch_groups`) with gradient accumulation and clipping, one AdamW per policy
   (``share_prompts``: a micro-batch keeps the rows of one prompt together and encodes that prompt once);
   an L2 adapter is scored inside ``policy.activate`` so only it takes gradients, and an L1 shared model
   trains on every role's rows. Each optimizer step bumps the policy's weights version. With ``beta > 0``
   the KL is to :class:`comlrl.trainers.core.reference.ReferencePolicy` (the initial weights; a LoRA
   policy's base with its adapters disabled), scored like the policy (:func:`comlrl.scoring.per_token_logps`).

Groups whose rewards are all equal are kept (advantage 0) and counted as ``frac_reward_zero_std``.

Non-finite numbers (:mod:`comlrl.trainers.core.nonfinite`, the rule every comlrl trainer follows): a group
holding a NaN / inf ``group_reward`` is dropped before the advantages (counted in
``nonfinite_rewards_dropped`` and ``dropped_samples``, logged naming problem, turn and role); a policy
left with no group in a step has a skipped step. An optimizer step whose loss, log-probs (those of the
update, or the rollout's), advantages or gradient norm are non-finite is skipped: no parameter changes,
counted in ``nonfinite_losses_skipped`` and ``policy/<name>/skipped_steps``, logged naming what, the policy,
the roles of its rows and the step. ``max_nonfinite_losses_in_a_row`` skipped steps of one policy in a row
stop the run. (The built-in environments reject a non-finite reward where it is made, in
:func:`pettingllms.envs.base.mix_reward`; the drop covers rewards reaching the trainer otherwise, e.g. from an
overridden :meth:`ATGRPOTrainer.generate_and_score`.)

Output folder, metrics logger, checkpoints (the layout of :mod:`comlrl.checkpoint`), resume lookup,
``save_model`` and the progress bar come from :class:`comlrl.trainers.core.trainer_core.TrainerCore`, as for
comlrl's trainers.

The pieces are pure functions in their own modules (those listed in ``__all__`` re-exported here):
:mod:`pettingllms.trainer.grouping`, :mod:`pettingllms.trainer.problems`,
:mod:`pettingllms.trainer.micro_batches`, :mod:`pettingllms.trainer.losses`,
:mod:`pettingllms.trainer.metrics`, and :mod:`pettingllms.trainer.at_grpo_setup` (the config against the
policy, environment and engine the trainer is given).

Metric names (logged every ``logging_steps`` to ``output_dir/metrics.jsonl`` and ``report_to``):

- run: ``success_rate``, ``reward`` (mean member reward), ``reward_std`` (mean group std),
  ``frac_reward_zero_std``, ``parse_error_rate``, ``completions/mean_length``, ``num_samples``,
  ``dropped_samples`` (infrastructure failures and non-finite rewards), ``generate_calls``,
  ``nonfinite_losses_skipped`` and ``nonfinite_rewards_dropped`` (run totals),
  ``time/{rollout,generate,env,update,step}_s``;
- ``agent/<role>/...`` and ``agent/<role>/turn_<t>/...``: ``reward_mean``/``reward_std`` (mixed),
  ``global_reward_*``, ``local_reward_*``, ``frac_reward_zero_std``, ``parse_error_rate``, ``success_rate``
  (the team's success on the episodes that agent acted in), ``completions/mean_length``, ``num_samples``;
- ``policy/<name>/...``: the same sample metrics plus the group ones (``reward``, ``reward_std``) of its
  samples' groups, and ``loss``, ``clip_ratio/{low,high,region}_mean``,
  ``approx_kl``, ``ratio_mean``, ``entropy``, ``kl`` (``beta > 0``), ``grad_norm``, ``learning_rate``,
  ``staleness_mean`` / ``staleness_max`` (weight versions between the sampling policy and the policy
  scoring each micro-batch), ``optimizer_steps``, ``skipped_steps`` (non-finite loss or gradient).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from comlrl.rl import finite_group_mask, group_ids_from_keys, is_finite, nonfinite_names
from comlrl.scoring import per_token_logps
from comlrl.seeding import derive_seed
from comlrl.trainers.core.models import scoring_mode
from comlrl.trainers.core.nonfinite import NonFiniteGuard
from comlrl.trainers.core.reference import ReferencePolicy
from comlrl.trainers.core.trainer_core import TrainerCore
from pettingllms.execution import (
    EngineConfig,
    PolicyConfig,
    PolicyTensors,
    RolloutBatch,
    RolloutEngine,
    Sample,
    build_policy,
    build_router,
    tensorize,
)
from pettingllms.trainer.at_grpo_config import ATGRPOConfig
from pettingllms.trainer.at_grpo_setup import check_engine, env_config_for, policy_config_for, workflow_order
from pettingllms.trainer.grouping import MemberTable, at_grpo_group_key, member_table, sample_advantages
from pettingllms.trainer.losses import accumulation_scale, at_grpo_loss
from pettingllms.trainer.metrics import SUCCESS_NOTES, StepTable, UpdateStats, rollout_metrics
from pettingllms.trainer.micro_batches import micro_batch_groups, policy_rows
from pettingllms.trainer.problems import MAX_SEED_RANGE, draw_problem_ids, problem_order

__all__ = [
    "ATGRPOTrainer",
    "MAX_SEED_RANGE",
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


class ATGRPOTrainer(TrainerCore):
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

    Checkpoints (:meth:`save_checkpoint`, :meth:`load_checkpoint`) hold the per-policy AdamW optimizers and
    schedulers, the data cursor ``{"epoch", "index"}``, ``extra`` ``{"engine", "config"}`` (the engine's
    counters and the config) and :attr:`log_history`: the records this trainer logged, not those logged
    straight through :attr:`metrics_logger`.
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
        super().__init__()
        self.config = config = config if config is not None else ATGRPOConfig()
        if not isinstance(config, ATGRPOConfig):
            raise TypeError(f"`config` must be an ATGRPOConfig, got {type(config).__name__}")
        if engine is not None and policy is None:
            raise ValueError("`engine` was given without `policy`: pass the MultiAgentPolicy it samples from")
        if policy is None:
            policy = build_policy(policy_config_for(config, model), workflow_order(config, env_name, env_config))
        self.policy = policy
        if engine is None:
            engine = RolloutEngine.from_registry(
                env_name,
                env_config_for(config, env_name, env_config),
                build_router(policy),
                EngineConfig(**config.engine_kwargs()),
                agent_options=agent_options,
                env_worker=env_worker,
            )
        else:
            check_engine(config, engine)
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
        # AT-GRPO's reference: the initial weights, or a LoRA policy's base with its adapters disabled.
        self.reference = ReferencePolicy(policy, adapters="disabled") if config.beta > 0 else None

        self.global_step = 0
        self.nonfinite = NonFiniteGuard(config.max_nonfinite_losses_in_a_row)
        self.data_cursor: dict[str, int] = {"epoch": 0, "index": 0}
        self.log_history: list[dict[str, float]] = []
        self.last_eval = None
        self._table = StepTable(policy.policies, config.sampling_mode, config.num_generations)

    # ------------------------------------------------------------------------------------ override points
    def generate_and_score(self, problem_ids: Sequence[int], step: int) -> RolloutBatch:
        """Samples of one training step with their rewards (``group_reward``): the engine's rollout."""
        return self.engine.rollout(list(problem_ids), step)

    def compute_advantages(self, samples: Sequence[Sample]) -> torch.Tensor:
        """One advantage per sample (see :func:`sample_advantages`)."""
        return sample_advantages(samples, self.config.scale_rewards)

    # ------------------------------------------------------------------------------------ the core's hooks
    @property
    def output_dir(self) -> Path:
        return Path(self.config.output_dir)

    @property
    def verbose(self) -> bool:
        return not self.config.disable_tqdm

    def new_metrics_logger(self):
        from comlrl.reporting import MetricsLogger

        return MetricsLogger(self.output_dir, self.config.report_to, config=self.config.to_dict())

    def run_seed(self) -> int:
        return self.config.seed  # a fresh run seeds the global random streams with it (TrainerCore)

    def checkpoint_step(self) -> int:
        return self.global_step

    def restore_checkpoint_step(self, step: int) -> None:
        self.global_step = step

    def checkpoint_optimizers(self) -> Mapping[str, torch.optim.Optimizer]:
        return self.optimizers

    def checkpoint_schedulers(self) -> Mapping[str, Any]:
        return self.schedulers

    def state_extra(self) -> dict[str, Any]:
        return {
            **super().state_extra(),
            "engine": self.engine.state_dict(),
            "config": self.config.to_dict(),
            "nonfinite": self.nonfinite.state_dict(),
        }

    def load_state_extra(self, extra: Mapping[str, Any]) -> None:
        super().load_state_extra(extra)
        self.nonfinite.load_state_dict(extra.get("nonfinite", {}))  # absent from older checkpoints
        self.data_cursor = {"epoch": int(self.data_cursor["epoch"]), "index": int(self.data_cursor["index"])}
        self.engine.load_state_dict(extra["engine"])

    def checkpoint_log_history(self) -> list[dict]:
        return self.log_history

    def restore_log_history(self, history: list[dict]) -> None:
        """The checkpoint's records; on disk, the metrics and transcripts logged after its step are dropped."""
        self.log_history = list(history)
        self._truncate_logs(self.global_step)

    def on_fresh_run(self) -> None:
        """A fresh run replaces the metrics and transcripts an earlier one left in ``output_dir``."""
        super().on_fresh_run()
        self._truncate_logs(0)

    def _truncate_logs(self, step: int) -> None:
        """Drop the metrics and transcripts on disk logged after ``step``."""
        self.metrics_logger.truncate_after(step)
        if self.engine.transcripts is not None:
            self.engine.transcripts.truncate_after(step)

    # ------------------------------------------------------------------------------------ training
    def train(self, resume_from_checkpoint: str | bool | None = None) -> list[dict[str, float]]:
        """Run until ``max_steps`` training steps are done; returns the logged metrics history.

        ``resume_from_checkpoint`` (default: the config's) is a checkpoint folder, a folder holding
        ``checkpoint-N`` folders (the latest), or True for the latest in ``output_dir``
        (:func:`comlrl.checkpoint.find_checkpoint`); the run then continues exactly as the uninterrupted one
        would.
        """
        resume = resume_from_checkpoint if resume_from_checkpoint is not None else self.config.resume_from_checkpoint
        if resume:
            self.load_checkpoint(resume)
        elif self.global_step == 0:  # a trainer already stepped by hand continues its own run
            self.on_fresh_run()
        desc = "AT-GRPO" if self.config.sampling_mode == "tree" else "GRPO"
        with self.progress_bar(self.config.max_steps, desc, unit="step", initial=self.global_step) as bar:
            while self.global_step < self.config.max_steps:
                metrics = self.step()
                bar.update(1)
                success = SUCCESS_NOTES[self.config.sampling_mode][0]  # best-of-K in tree mode, not held-out success
                bar.set_postfix({success: f"{metrics['success_rate']:.2f}", "reward": f"{metrics['reward']:.3f}"})
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
        samples = self._finite_reward_samples(batch.samples, step)
        advantages = self.compute_advantages(samples) if samples else []
        by_sample = {id(s): float(a) for s, a in zip(samples, advantages)}
        tensors = tensorize(samples, self.pad_token_ids) if samples else {}

        metrics: dict[str, float] = {"success_rate": batch.success_rate}
        metrics.update(rollout_metrics(samples) if samples else dict.fromkeys(NO_SAMPLE_METRICS, math.nan))
        metrics["num_samples"] = float(len(samples))
        sampled_policies = {s.policy for s in batch.samples}
        update_start = time.perf_counter()
        for name in self.policy.policies:
            learning_rate = self.schedulers[name].get_last_lr()[0]
            if name in tensors:
                rows = tensors[name]
                rows.advantages = torch.tensor([by_sample[id(s)] for s in rows.samples], dtype=torch.float32)
                metrics.update(self._update_policy(name, rows, step))
            elif name in sampled_policies:  # every group of this policy had a non-finite reward
                self.nonfinite.empty_step(f"step {step}", key=name)
            metrics[f"policy/{name}/learning_rate"] = learning_rate
            self.schedulers[name].step()
        update_s = time.perf_counter() - update_start
        self.data_cursor = cursor
        self.global_step = step

        metrics.update(
            {
                "dropped_samples": float(batch.dropped_samples + len(batch.samples) - len(samples)),
                **self.nonfinite.metrics(),
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
            if not config.disable_tqdm:
                self._table.print_row(step, metrics)
        if config.save_steps and (step % config.save_steps == 0):
            self.save_checkpoint()
        return metrics

    def _update_policy(self, name: str, tensors: PolicyTensors, step: int) -> dict[str, float]:
        """``num_iterations`` PPO passes of one policy over its rows; returns its ``policy/<name>/`` metrics."""
        config, policy, optimizer = self.config, self.policy, self.optimizers[name]
        extra = {"ref_per_token_logps": self._reference_logps(name, tensors)} if config.beta > 0 else {}
        prompt_keys = [tuple(s.prompt_ids) for s in tensors.samples] if config.share_prompts else None
        stats = UpdateStats()
        with scoring_mode(policy.handle(name).model, config.disable_dropout), policy.activate(name):
            for iteration in range(config.num_iterations):
                groups = micro_batch_groups(
                    len(tensors.samples),
                    config.per_device_train_batch_size,
                    config.gradient_accumulation_steps,
                    derive_seed(config.seed, "micro_batches", step, name, iteration),
                    row_keys=prompt_keys,
                )
                for number, group in enumerate(groups, 1):
                    bad = self._accumulate_gradients(name, tensors, group, extra, stats)
                    if bad is None:
                        optimizer.step()
                        optimizer.zero_grad(set_to_none=True)
                        policy.bump_version(name)
                        stats.optimizer_steps += 1
                        self.nonfinite.finite_step(name)
                    else:  # drop this optimizer step (no parameter changes), count it, log it
                        optimizer.zero_grad(set_to_none=True)
                        stats.skipped_steps += 1
                        where = f"step {step}, policy {name!r}, iteration {iteration + 1}, optimizer step {number}"
                        self.nonfinite.skip_step(bad, where, key=name)
        return stats.as_metrics(f"policy/{name}/", float(tensors.completion_mask.sum()))

    def _finite_reward_samples(self, samples: Sequence[Sample], step: int) -> list[Sample]:
        """The samples whose group holds only finite rewards; the other groups are dropped (counted, logged)."""
        group_ids, keys = group_ids_from_keys([s.group_key for s in samples])
        keep, dropped = finite_group_mask([s.group_reward for s in samples], group_ids)
        if dropped:
            members: dict[int, list[Sample]] = {g: [] for g in dropped}
            for sample, g in zip(samples, group_ids.tolist()):
                members.get(g, []).append(sample)
            what = "; ".join(
                f"problem {keys[g].problem_id}, turn {keys[g].turn}, roles {sorted({s.role for s in group})}: "
                f"rewards {[s.group_reward for s in group]}"
                for g, group in members.items()
            )
            self.nonfinite.drop_rewards(len(dropped), what, f"step {step}")
        return [s for s, k in zip(samples, keep.tolist()) if k]

    def _accumulate_gradients(
        self,
        name: str,
        tensors: PolicyTensors,
        group: Sequence[torch.Tensor],
        extra: Mapping[str, torch.Tensor],
        stats: UpdateStats,
    ) -> str | None:
        """Backpropagate the micro-batches of one optimizer step and clip the gradient; None when all went
        through, else what was non-finite (the first micro-batch's loss parts, or the gradient norm)."""
        config, policy, optimizer = self.config, self.policy, self.optimizers[name]
        model = policy.handle(name).model
        num_items = int(sum(int(tensors.completion_mask[index].sum()) for index in group))
        optimizer.zero_grad(set_to_none=True)
        for index in group:
            rows = policy_rows(tensors, index, extra)
            sampled_by = torch.tensor([tensors.samples[i].policy_version for i in index.tolist()], dtype=torch.float64)
            stats.add_staleness(policy.version(name) - sampled_by)
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
            if not is_finite(loss):
                return _nonfinite_loss_parts(logps, rows, loss, [tensors.samples[i] for i in index.tolist()])
            loss.backward()
            stats.add_micro_batch(out, entropy)
        params = [p for param_group in optimizer.param_groups for p in param_group["params"]]
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm or float("inf")))
        if not math.isfinite(grad_norm):
            return f"gradient norm ({grad_norm})"
        stats.grad_norms.append(grad_norm)
        return None

    def _reference_logps(self, name: str, tensors: PolicyTensors) -> torch.Tensor:
        """Reference log-probs of every row (``[B, C]`` on CPU), scored once per rollout."""
        out = torch.zeros_like(tensors.old_per_token_logps)
        size, share = self.config.per_device_train_batch_size, self.config.share_prompts
        with torch.no_grad(), self.reference.model(name) as reference:
            for index in torch.arange(len(tensors.samples)).split(size):
                rows = policy_rows(tensors, index)
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

    # ------------------------------------------------------------------------------------ saving, logging
    def save_model(self, output_dir: str | os.PathLike | None = None) -> Path:
        """The policies (one folder per policy, LoRA adapters included) and the trainer config."""
        from comlrl.atomic_io import atomic_write_json

        directory = super().save_model(output_dir)
        atomic_write_json(directory / "at_grpo_config.json", self.config.to_dict())
        return directory

    def save_checkpoint(
        self,
        output_dir: str | os.PathLike | None = None,
        *,
        step: int | None = None,
        total_limit: int | None = None,
    ) -> Path:
        """``output_dir/checkpoint-{global_step}/`` (see :meth:`TrainerCore.save_checkpoint`), keeping
        ``total_limit`` checkpoints (default: the config's ``save_total_limit``)."""
        limit = self.config.save_total_limit if total_limit is None else total_limit
        return super().save_checkpoint(output_dir, step=step, total_limit=limit)

    def _log(self, metrics: Mapping[str, float], step: int) -> None:
        record = self.metrics_logger.log(metrics, step)
        self.log_history.append({"step": step, **record})


# The rollout metrics of a step whose every group was dropped for a non-finite reward (not logged: nan).
NO_SAMPLE_METRICS = ("reward", "reward_std", "frac_reward_zero_std", "parse_error_rate", "completions/mean_length")


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

