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

One policy's optimizer, scheduler and step 4 live in :class:`~pettingllms.trainer.policy_update.PolicyUpdater`
(one per policy in :attr:`ATGRPOTrainer.updaters`; objects with its interface, e.g. remote update
workers, can be passed as ``updaters``), whose optimizer steps go through the update engine every trainer
shares (:class:`comlrl.trainers.core.optimization.GradientSteps`); the trainer replays each update's
non-finite events into its guard.

Data-parallel (launched with ``accelerate launch --multi_gpu --num_processes N`` or ``torchrun``; the collectives
of :mod:`comlrl.distributed`, details in :mod:`pettingllms.trainer.step_view`): step 1 stays global (same ids and seeds as one process) and rank r
rolls out its contiguous shard of them; step 3 is local (groups are per problem); in step 4 the token count
of each optimizer step and the gradients are summed over ranks and every rank makes the same number of
optimizer steps, so a step equals the one-process step over the same global rows. Metrics are computed on
the gathered samples (what one process logs, except ``generate_calls``: the sum of the ranks' calls); rank 0
alone writes ``metrics.jsonl``, transcripts, checkpoints and ``save_model`` (every rank calls them; the rank-0
path of :class:`~comlrl.trainers.core.trainer_core.TrainerCore`, which comlrl's trainers share); a
checkpoint records ``world_size`` and resuming it on another world size is an error. ``problems_per_step``
must be at least the world size. Every rank holds a whole copy of each policy for its rollouts; with FSDP
selected (accelerate's config, or ``ACCELERATE_USE_FSDP=true`` under torchrun; :mod:`pettingllms.trainer.fsdp`)
each policy's update, AdamW states and reference are sharded over the ranks and the checkpoints still hold
the one-process optimizer states.

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
  ``failures/<label>`` (samples of the rollout that reported a model failure: ``parse_error``,
  ``tool_timeout``, ``verify_timeout``, ...; labels that did not occur are left out),
  ``time/{rollout,generate,env,update,step}_s``; with credit across turns (``rollout.credit_depth > 0``,
  :mod:`pettingllms.execution.continuation`) ``reward`` / ``reward_std`` / ``frac_reward_zero_std`` are those of
  the returns the advantages compare, and ``reward_immediate`` / ``frac_reward_zero_std_immediate`` (the
  candidates' own step rewards: what ``reward`` / ``frac_reward_zero_std`` are without credit) and
  ``rollout/continuation_completions`` (completions the continuations sampled, no training samples) are added;
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

import dataclasses
import functools
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from comlrl import distributed as dist
from comlrl.rl import finite_group_mask, group_ids_from_keys
from comlrl.scoring import per_token_logps
from comlrl.trainers.core.nonfinite import NonFiniteGuard
from comlrl.trainers.core.reference import ReferencePolicy
from comlrl.trainers.core.trainer_core import TrainerCore
from pettingllms.config.rollout_section import RolloutConfig
from pettingllms.execution import (
    PolicyConfig,
    PolicyTensors,
    RolloutBatch,
    RolloutEngine,
    Sample,
    build_policy,
    build_router,
    tensorize,
)
from pettingllms.trainer import fsdp
from pettingllms.trainer.at_grpo_config import ATGRPOConfig
from pettingllms.trainer.at_grpo_setup import (
    engine_config_for,
    env_config_for,
    policy_config_for,
    split_flat_settings,
    workflow_order,
)
from pettingllms.trainer.grouping import MemberTable, at_grpo_group_key, member_table, sample_advantages
from pettingllms.trainer.losses import at_grpo_loss
from pettingllms.trainer.metrics import SUCCESS_NOTES, StepTable, credit_metrics, rollout_metrics
from pettingllms.trainer.micro_batches import micro_batch_groups
from pettingllms.trainer.policy_update import PolicyUpdater, UpdateResult
from pettingllms.trainer.problems import MAX_SEED_RANGE, draw_problem_ids, problem_order
from pettingllms.trainer.step_view import StepView, TranscriptSelector, gather_step

__all__ = [
    "ATGRPOTrainer",
    "MAX_SEED_RANGE",
    "MemberTable",
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

    The settings are separate objects, each declared and checked once (the pipeline's ``at_grpo`` / ``grpo``,
    ``rollout``, ``policy`` and ``env`` sections); nothing is copied between them. Scripts that hold one flat
    mapping of the older ``ATGRPOConfig`` names (``num_generations``, ``policy_level``, ``max_turns``, ...)
    build the trainer with :meth:`from_flat`.

    Args:
        config: an :class:`ATGRPOConfig`, the algorithm and optimisation knobs (None: defaults).
        rollout: the generation settings, a :class:`~pettingllms.config.rollout_section.RolloutConfig` (the
            ``rollout`` section; None: its defaults). Training scores at its ``temperature``. Not with
            ``engine``, whose own config is then used.
        model: the policy level, agent map and (base) model of every policy: a full
            :class:`~pettingllms.execution.PolicyConfig` (level, agents, device, dtype, LoRA, L3 models), or a
            preset name, local folder or hub id (policy level L1). With ``policy`` only its level is used
            (the turn order the level plays).
        policy: a prebuilt :class:`comlrl.policy.MultiAgentPolicy` instead of building one from ``model``.
        engine: a prebuilt :class:`~pettingllms.execution.RolloutEngine` (needs ``policy``); its config is
            the sampling the trainer scores.
        env_name, env_config: the registered environment and its config (mapping or dataclass), which holds
            the workflow (``turn_order``, ``max_turns``, ``alpha``); the policy level's turn order is applied.
        agent_options, env_worker: passed to the engine (per-role agent options; the tool sandbox).
        updaters: one object per policy with :class:`~pettingllms.trainer.policy_update.PolicyUpdater`'s
            interface (e.g. proxies of remote update workers) used instead of local ones; the trainer then
            builds no optimizer or reference model of its own.
        backend: the generation backend the engine samples from when no ``engine`` is given (e.g. a
            :class:`~comlrl.rollout.VLLMBackend` over ``policy``; None: an HFBackend on the live policy).
            A backend with ``sleep()`` is put to sleep before each update (vLLM's sleep mode frees the
            engine's device memory while the update runs; the next rollout wakes it).

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
        rollout: RolloutConfig | None = None,
        model: str | PolicyConfig = "small",
        policy: Any = None,
        engine: RolloutEngine | None = None,
        env_name: str = "plan_path",
        env_config: Any = None,
        agent_options: Mapping[str, Mapping[str, Any]] | None = None,
        env_worker: Any = None,
        updaters: Mapping[str, Any] | None = None,
        backend: Any = None,
    ) -> None:
        super().__init__()
        self.config = config = config if config is not None else ATGRPOConfig()
        if not isinstance(config, ATGRPOConfig):
            raise TypeError(f"`config` must be an ATGRPOConfig, got {type(config).__name__}")
        self.world_size = dist.init_distributed()
        self.fsdp = fsdp.fsdp_for_world(self.world_size)  # None: every rank trains whole models
        if self.fsdp is not None and updaters is not None:
            raise ValueError(f"`updaters` (remote update workers) cannot be sharded with FSDP (`{fsdp.ENV_SWITCH}`)")
        policy_config = policy_config_for(model, config.seed)
        if self.fsdp is not None and policy is None:
            fsdp.check_level(policy_config.policy_level)  # L2 refused before any model loads
        if config.problems_per_step < self.world_size:
            raise ValueError(
                f"`problems_per_step` ({config.problems_per_step}) must be >= the world size ({self.world_size}): "
                "every rank rolls out a shard of a step's problems"
            )
        if engine is not None and policy is None:
            raise ValueError("`engine` was given without `policy`: pass the MultiAgentPolicy it samples from")
        if engine is not None and rollout is not None:
            raise ValueError("give `engine` or `rollout`, not both: a prebuilt engine samples with its own config")
        if policy is None:
            policy = build_policy(policy_config, workflow_order(env_name, env_config))
        self.policy = policy
        if self.fsdp is not None:
            fsdp.check_policy(policy)
        if engine is None:
            engine = RolloutEngine.from_registry(
                env_name,
                env_config_for(policy_config.policy_level, env_name, env_config),
                build_router(policy, backend),
                engine_config_for(config, rollout if rollout is not None else RolloutConfig()),
                agent_options=agent_options,
                env_worker=env_worker,
            )
        else:
            if backend is not None:
                raise ValueError("give `engine` or `backend`, not both: a prebuilt engine already has its backends")
        self.engine = engine
        self.backend = backend
        served = {engine.router.policy_for(agent.role) for agent in engine.agents}
        unknown = sorted(served - set(policy.policies))
        if unknown:
            raise ValueError(f"the engine routes to policies {unknown} that `policy` does not hold: {policy.policies}")

        # AT-GRPO's reference: the initial weights, or a LoRA policy's base with its adapters disabled.
        self.reference = None
        if config.beta > 0 and updaters is None:
            sharded = self.fsdp is not None
            self.reference = fsdp.ShardedReference(policy, self.fsdp) if sharded else ReferencePolicy(policy, adapters="disabled")
        if updaters is None:
            updaters = {
                name: PolicyUpdater(config, policy, name, self.reference, self.fsdp, sampling=engine.config)
                for name in policy.policies
            }
            for name, updater in updaters.items():  # the trainer's method stays the seam tests wrap
                updater._accumulate_gradients = functools.partial(self._route_accumulate, name)
        missing = sorted(set(policy.policies) - set(updaters))
        if missing:
            raise ValueError(f"`updaters` lacks policies {missing}; it must hold one per policy: {policy.policies}")
        self.updaters: dict[str, Any] = {name: updaters[name] for name in policy.policies}
        # Views onto the updaters, so checkpoints keep their per-policy layout.
        self.optimizers = {name: u.optimizer for name, u in self.updaters.items()}
        if self.fsdp is not None:  # checkpoints hold the one-process (whole) optimizer states
            self.optimizers = {name: fsdp.WholeOptimizerState(o) for name, o in self.optimizers.items()}
            sharded = [u.sharded for u in self.updaters.values() if getattr(u, "sharded", None) is not None]
            self.add_part(fsdp.ShardedCheckpoint(self.optimizers.values(), sharded))
        self.schedulers = {name: u.scheduler for name, u in self.updaters.items()}
        self.pad_token_ids = {name: u.pad_token_id for name, u in self.updaters.items()}
        self._transcripts = None
        self._engine_states: list[dict[str, Any]] = []
        if self.world_size > 1 and engine.transcripts is not None:  # each rank selects, rank 0 writes all
            self._transcripts = engine.transcripts
            engine.transcripts = TranscriptSelector(engine.transcripts)

        self.global_step = 0
        self.nonfinite = NonFiniteGuard(config.max_nonfinite_losses_in_a_row)
        self.data_cursor: dict[str, int] = {"epoch": 0, "index": 0}
        self.log_history: list[dict[str, float]] = []
        self.last_eval = None
        self._table = StepTable(policy.policies, config.sampling_mode, engine.config.num_generations)

    @classmethod
    def from_flat(
        cls, values: Mapping[str, Any], *, model: str | PolicyConfig = "small", env_config: Any = None, **kwargs: Any
    ) -> ATGRPOTrainer:
        """The trainer of one flat mapping of the names older scripts passed to ``ATGRPOConfig``: the
        :class:`ATGRPOConfig` fields, and ``policy_level`` / ``agent_policies`` (into ``model``, a
        PolicyConfig), ``turn_order`` / ``max_turns`` / ``alpha`` (into ``env_config``), ``num_generations``,
        ``temperature``, ``top_p``, ``max_completion_length``, ``greedy_selection``, ``transcript_rate``,
        ``transcript_state_max_chars``, ``credit_depth``, ``credit_discount`` (into ``rollout``, a RolloutConfig with the ``rollout`` section's
        names and defaults); :func:`~pettingllms.trainer.at_grpo_setup.split_flat_settings`. ``kwargs`` are
        the constructor's other arguments."""
        config, rollout, model, env_config = split_flat_settings(values, model, env_config)
        return cls(config, rollout=rollout, model=model, env_config=env_config, **kwargs)

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
        return not self.config.disable_tqdm and dist.is_main_process()

    def new_metrics_logger(self):
        from comlrl.reporting import MetricsLogger

        if not dist.is_main_process():
            return dist.RankMetricsLogger()  # only rank 0 writes metrics.jsonl

        settings = {**self.config.to_dict(), "engine": dataclasses.asdict(self.engine.config)}
        return MetricsLogger(self.output_dir, self.config.report_to, config=settings)

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
        extra = {
            **super().state_extra(),
            "engine": self.engine.state_dict(),
            "config": self.config.to_dict(),
            "nonfinite": self.nonfinite.state_dict(),
        }
        if self.world_size > 1:  # each rank's engine counters (gathered by save_checkpoint), and the world
            extra["world_size"] = self.world_size
            extra["engine_ranks"] = self._engine_states
        return extra

    def check_checkpoint(self, path: Path, saved: Any) -> None:
        dist.check_world_size(saved.extra, path)

    def load_state_extra(self, extra: Mapping[str, Any]) -> None:
        super().load_state_extra(extra)
        self.nonfinite.load_state_dict(extra.get("nonfinite", {}))  # absent from older checkpoints
        self.data_cursor = {"epoch": int(self.data_cursor["epoch"]), "index": int(self.data_cursor["index"])}
        engine_ranks = extra.get("engine_ranks")
        self.engine.load_state_dict(engine_ranks[dist.rank()] if engine_ranks else extra["engine"])

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
        transcripts = self._transcripts if self.world_size > 1 else self.engine.transcripts
        if transcripts is not None and dist.is_main_process():
            transcripts.truncate_after(step)

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
        (every ``logging_steps``) and checkpoint (every ``save_steps``). Returns the step's metrics.

        Data-parallel (world size > 1): this rank rolls out its shard of the drawn problems, and the
        metrics are computed over every rank's gathered samples (:func:`~pettingllms.trainer.step_view.gather_step`).
        """
        config = self.config
        step = self.global_step + 1
        start = time.perf_counter()
        problem_ids, cursor = draw_problem_ids(
            self.data_cursor, config.problems_per_step, config.train_seed_range, config.seed
        )
        distributed = self.world_size > 1
        batch = self.generate_and_score(dist.shard(problem_ids) if distributed else problem_ids, step)
        rollout_s = time.perf_counter() - start
        if not batch.samples and not distributed:
            raise RuntimeError(f"step {step}: the rollout produced no samples (every one was dropped)")
        samples, dropped_groups, dropped_what = self._finite_reward_samples(batch.samples)
        advantages = self.compute_advantages(samples) if samples else []
        by_sample = {id(s): float(a) for s, a in zip(samples, advantages)}
        tensors = tensorize(samples, self.pad_token_ids) if samples else {}
        if distributed:
            writer = self._transcripts if dist.is_main_process() else None
            view = gather_step(batch, samples, tensors, dropped_groups, dropped_what, writer)
            if view.raw_samples == 0:
                raise RuntimeError(f"step {step}: the rollout produced no samples (every one was dropped)")
        else:
            view = StepView.local(batch, samples, tensors, dropped_groups, dropped_what)
        if view.dropped_groups:
            self.nonfinite.drop_rewards(view.dropped_groups, view.dropped_what, f"step {step}")

        metrics: dict[str, float] = {"success_rate": view.success_rate}
        metrics.update(rollout_metrics(view.samples) if view.samples else dict.fromkeys(NO_SAMPLE_METRICS, math.nan))
        metrics["num_samples"] = float(len(view.samples))
        if self.engine.config.credit_depth:  # credit across turns: `reward` is the return, these compare
            metrics.update(credit_metrics(view.samples, view.continuation_completions))
        update_start = time.perf_counter()
        if hasattr(self.backend, "sleep"):
            self.backend.sleep()  # vLLM's sleep mode: the engine's device memory goes to the update
        learning_rates = {name: updater.learning_rate() for name, updater in self.updaters.items()}
        for name in view.trained:  # this rank may hold no rows of a policy: it still joins the optimizer steps
            rows = tensors.get(name)
            if rows is not None:
                rows.advantages = torch.tensor([by_sample[id(s)] for s in rows.samples], dtype=torch.float32)
            if hasattr(self.updaters[name], "submit"):  # remote updaters: every policy's update runs at once
                self.updaters[name].submit(rows, step)
        for name in self.policy.policies:
            if name in view.trained:
                metrics.update(self._update_policy(name, tensors.get(name), step))
            elif name in view.sampled_policies:  # every group of this policy had a non-finite reward
                self.nonfinite.empty_step(f"step {step}", key=name)
            metrics[f"policy/{name}/learning_rate"] = learning_rates[name]
            self.updaters[name].scheduler_step()
        update_s = time.perf_counter() - update_start
        self.data_cursor = cursor
        self.global_step = step

        metrics.update(
            {
                "dropped_samples": float(view.dropped_samples),
                **self.nonfinite.metrics(),
                "generate_calls": float(view.generate_calls),
                "time/rollout_s": rollout_s,
                "time/generate_s": batch.timings.get("generate_s", 0.0),
                "time/env_s": batch.timings.get("env_s", 0.0),
                "time/update_s": update_s,
                "time/step_s": time.perf_counter() - start,
            }
        )
        if step % config.logging_steps == 0 or step == config.max_steps:
            self._log(metrics, step)
            if self.verbose:
                self._table.print_row(step, metrics)
        if config.save_steps and (step % config.save_steps == 0):
            self.save_checkpoint()
        return metrics

    def _update_policy(self, name: str, tensors: PolicyTensors | None, step: int) -> dict[str, float]:
        """One policy's update (:meth:`PolicyUpdater.update`), its non-finite events replayed into the
        run's guard; returns its ``policy/<name>/`` metrics."""
        result: UpdateResult = self.updaters[name].update(tensors, step)
        for event in result.events:
            if event[0] == "finite":
                self.nonfinite.finite_step(name)
            else:
                _, what, where = event
                self.nonfinite.skip_step(what, where, key=name)
        return result.metrics

    def _route_accumulate(self, name: str, *args: Any) -> str | None:
        # Looked up on the trainer at call time, so a wrapped `trainer._accumulate_gradients` sees every call.
        return self._accumulate_gradients(name, *args)

    def _accumulate_gradients(self, name: str, *args: Any) -> str | None:
        """One optimizer step's backward passes of policy ``name`` (:class:`PolicyUpdater`'s)."""
        return PolicyUpdater._accumulate_gradients(self.updaters[name], *args)

    def _finite_reward_samples(self, samples: Sequence[Sample]) -> tuple[list[Sample], int, str]:
        """The samples whose group holds only finite rewards, the number of groups dropped for a non-finite
        one, and what they held (problem, turn, roles, rewards)."""
        group_ids, keys = group_ids_from_keys([s.group_key for s in samples])
        keep, dropped = finite_group_mask([s.group_reward for s in samples], group_ids)
        what = ""
        if dropped:
            members: dict[int, list[Sample]] = {g: [] for g in dropped}
            for sample, g in zip(samples, group_ids.tolist()):
                members.get(g, []).append(sample)
            what = "; ".join(
                f"problem {keys[g].problem_id}, turn {keys[g].turn}, roles {sorted({s.role for s in group})}: "
                f"rewards {[s.group_reward for s in group]}"
                for g, group in members.items()
            )
        return [s for s, k in zip(samples, keep.tolist()) if k], len(dropped), what

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
        Data-parallel, every rank evaluates every problem (the same seeds, so the same result) and rank 0
        logs it.
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
    def save_model_files(self, directory: Path) -> None:
        """``save_model`` (:meth:`TrainerCore.save_model`: the policies, one folder per policy, LoRA adapters
        included; rank 0 writes) adds the trainer config."""
        from comlrl.atomic_io import atomic_write_json

        atomic_write_json(directory / "at_grpo_config.json", self.config.to_dict())

    def checkpoint_total_limit(self) -> int | None:
        return self.config.save_total_limit

    def prepare_checkpoint(self) -> None:
        """Every rank, before rank 0 writes a checkpoint: every rank's engine counters are gathered (and under
        FSDP the whole optimizer states, by the sharded-checkpoint part)."""
        if self.world_size > 1:
            self._engine_states = dist.gather_objects(self.engine.state_dict())
        super().prepare_checkpoint()

    def _log(self, metrics: Mapping[str, float], step: int) -> None:
        record = self.metrics_logger.log(metrics, step)
        self.log_history.append({"step": step, **record})


# The rollout metrics of a step whose every group was dropped for a non-finite reward (not logged: nan).
NO_SAMPLE_METRICS = ("reward", "reward_std", "frac_reward_zero_std", "parse_error_rate", "completions/mean_length")

