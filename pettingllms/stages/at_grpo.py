"""The ``at_grpo`` and ``grpo`` stages: :class:`~pettingllms.trainer.ATGRPOTrainer` over the run's policy.

``at_grpo`` samples trees (groups per problem, turn and agent); ``grpo`` is the same trainer with independent
sampling, the single-agent (L0) baseline. The stage section holds the trainer's own fields plus three stage
keys (:class:`TrainingLimits`): stop once the sampled completions reach ``max_completions`` or training has
run ``max_minutes``, and measure held-out success (the ``eval`` section's evaluation, every benchmark capped at
``eval.before_training_instances``) each time another ``eval_every_completions`` completions were sampled,
logged as ``eval/*`` records (with ``eval/completions``) in the stage's ``metrics.jsonl``; with
``eval.transcripts_rate`` the episodes go to ``<stage>/eval-<step>/rollouts.jsonl``. A pipeline that repeats the stage (folders ``at_grpo``,
``at_grpo_2``, ...) gives the ``n``-th repeat what is left of ``n * max_completions`` after the repeats before
it (:func:`repeat_budget`), so the completions a repeat's last step sampled past its share come off the next
one and ``n`` repeats sample ``n * max_completions`` within one step. A step's completions
(:func:`step_completions`) are its training samples, kept and dropped, plus the completions of credit
continuations (``rollout/continuation_completions``, :mod:`pettingllms.execution.continuation`): sampled,
though not trained on, so a run with credit across turns spends the same budget on fewer steps.

A fourth stage key, ``update_policy`` (default true), set false makes an ``at_grpo`` stage sample its trees
and write their preference pairs for the ``madpo_from_trees`` stage right after it without updating the
policy (:class:`SampleOnlyUpdater`): the preference stage alone trains ("MADPO from trees"). The pipeline
refuses it where no ``madpo_from_trees`` stage follows.

Data-parallel runs (``accelerate launch`` / ``torchrun``, :mod:`pettingllms.trainer.step_view`): the trainer
shards each step's problems over the ranks and rank 0 writes; the limits are met on every rank at the
same step (the completion count comes from the gathered metrics, the clock of ``max_minutes`` is agreed
over ranks), and a held-out evaluation runs on every rank (same weights, same result), logged by rank 0.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from comlrl import distributed as dist
from comlrl.seeding import derive_seed
from comlrl.validation import check_float, check_int
from pettingllms.config.loader import ConfigError, section_to_dataclass
from pettingllms.stages.context import StageContext, workflow_env
from pettingllms.stages.eval import eval_plan, evaluate_benchmarks
from pettingllms.trainer.at_grpo import ATGRPOTrainer
from pettingllms.workers.stage import attach, stage_workers

__all__ = [
    "STAGE_KEYS",
    "ATGRPOStageSettings",
    "CompletionCounter",
    "SampleOnlyUpdater",
    "TrainingLimits",
    "at_grpo_config",
    "at_grpo_settings",
    "rollout_config",
    "repeat_budget",
    "repeat_number",
    "run_at_grpo",
    "step_completions",
]

# Section keys that are the stage's, not ATGRPOConfig fields: the limits (TrainingLimits) and update_policy.
LIMIT_KEYS = ("max_completions", "eval_every_completions", "max_minutes")
STAGE_KEYS = (*LIMIT_KEYS, "update_policy")


@dataclass
class TrainingLimits:
    """When the stage stops early and when it measures held-out success (0: never)."""

    max_completions: int = 0
    eval_every_completions: int = 0
    max_minutes: float = 0.0

    def __post_init__(self) -> None:
        check_int("max_completions", self.max_completions, 0, spell_out=True)
        check_int("eval_every_completions", self.eval_every_completions, 0, spell_out=True)
        check_float("max_minutes", self.max_minutes, ge=0)


@dataclass
class ATGRPOStageSettings:
    """The checked settings of an ``at_grpo`` / ``grpo`` stage: the trainer's config (the stage section), its
    generation settings (the ``rollout`` section), the stage's limits, and whether its steps update the policy
    (``update_policy``; false: sample trees for ``madpo_from_trees`` only)."""

    trainer: Any  # ATGRPOConfig
    limits: TrainingLimits
    update_policy: bool = True
    rollout: Any = None  # RolloutConfig (None: the rollout section's defaults)


def repeat_number(stage: str, folder: str) -> int:
    """Which repeat of ``stage`` the folder ``folder`` holds: ``at_grpo`` 1, ``at_grpo_2`` 2, ..."""
    if folder == stage:
        return 1
    head, _, number = folder.rpartition("_")
    if head != stage or not number.isdigit() or int(number) < 2:
        raise ValueError(f"folder {folder!r} is not a repeat of stage {stage!r} ({stage}, {stage}_2, ...)")
    return int(number)


def repeat_budget(max_completions: int, repeat: int, earlier: int) -> int:
    """The completion budget of the ``repeat``-th repeat of a stage whose repeats before it sampled
    ``earlier`` completions: what is left of ``repeat * max_completions``, at least 1 (a stage runs one step);
    0 (no budget) stays 0."""
    if max_completions < 0 or repeat < 1 or earlier < 0:
        raise ValueError(f"`max_completions`, `earlier` must be >= 0 and `repeat` >= 1, got {max_completions}, "
                         f"{earlier}, {repeat}")
    if not max_completions:
        return 0
    return max(1, repeat * max_completions - earlier)


def step_completions(metrics: Mapping[str, float]) -> int:
    """The completions one logged step sampled: its samples (kept and dropped) and the completions of its credit
    continuations (``rollout/continuation_completions``, absent without credit across turns)."""
    return int(metrics["num_samples"] + metrics["dropped_samples"] + metrics.get("rollout/continuation_completions", 0))


def earlier_repeat_completions(run_dir: Path, stage: str, repeat: int) -> int:
    """The completions (:func:`step_completions`) the repeats ``1 .. repeat - 1`` of ``stage`` logged in their
    ``metrics.jsonl`` under ``run_dir``."""
    from comlrl.reporting import read_metrics

    total = 0
    for number in range(1, repeat):
        path = run_dir / (stage if number == 1 else f"{stage}_{number}") / "metrics.jsonl"
        if not path.exists():
            raise RuntimeError(f"stage {stage!r}, repeat {repeat}: the metrics of repeat {number} ({path}) are missing")
        total += sum(step_completions(r) for r in read_metrics(path) if "num_samples" in r)
    return total


class SampleOnlyUpdater:
    """Stands in for a policy's updater when ``update_policy`` is false: the step's rows are sampled, scored
    and logged, but no optimizer step runs and the schedule does not move (no ``submit``: a remote updater is
    never sent the rows)."""

    def __init__(self, updater: Any) -> None:
        self.updater = updater
        self.optimizer, self.scheduler = updater.optimizer, updater.scheduler  # checkpoints keep their layout
        self.pad_token_id = updater.pad_token_id

    def learning_rate(self) -> float:
        return self.updater.learning_rate()

    def scheduler_step(self) -> None:
        pass

    def update(self, tensors: Any, step: int) -> Any:
        from pettingllms.trainer.policy_update import UpdateResult

        return UpdateResult(metrics={})


def at_grpo_config(stage: str, config: Mapping[str, Any], output_dir: str | Path, progress: bool = True):
    """The :class:`~pettingllms.trainer.ATGRPOConfig` of RL stage ``at_grpo`` or ``grpo``.

    The section holds the trainer's own fields (and the stage keys :data:`STAGE_KEYS`, left out here);
    ``seed`` / ``report_to`` come from ``run``, the output folder is the stage's. ``grpo`` samples
    independently. The generation settings (``rollout``), the policy (``policy``) and the workflow (``env``)
    are the trainer's other arguments, not fields of this config.
    """
    from pettingllms.trainer.at_grpo_config import ATGRPOConfig

    if stage not in ("at_grpo", "grpo"):
        raise ValueError(f"`stage` must be 'at_grpo' or 'grpo', got {stage!r}")
    run = config["run"]
    values = {k: v for k, v in config[stage].items() if k not in STAGE_KEYS}
    folder = Path(output_dir).name
    values.update(
        # A repeat of the stage (folder at_grpo_2, ...) draws other problems than the first: its own seed.
        seed=run["seed"] if folder == stage else derive_seed(run["seed"], "stage", folder) % 2**31,
        report_to=run["report_to"],
        output_dir=str(output_dir),
        disable_tqdm=not progress,
    )
    if stage == "grpo":
        values["sampling_mode"] = "independent"
    return section_to_dataclass(ATGRPOConfig, values, stage)


def rollout_config(config: Mapping[str, Any]):
    """The :class:`~pettingllms.config.rollout_section.RolloutConfig` of the ``rollout`` section."""
    from pettingllms.config.rollout_section import RolloutConfig

    names = {f.name for f in dataclasses.fields(RolloutConfig)}
    return section_to_dataclass(RolloutConfig, {k: v for k, v in config["rollout"].items() if k in names}, "rollout")


def at_grpo_settings(stage: str, config: Mapping[str, Any], stage_dir: str | Path, progress: bool = True) -> ATGRPOStageSettings:
    """The checked settings of stage ``at_grpo`` / ``grpo`` (``grpo`` needs ``policy.level`` L0)."""
    from pettingllms.config.instances import check_held_out_instances

    if stage == "grpo" and config["policy"]["level"] != "L0":
        raise ConfigError(
            f"stage `grpo` is the single-agent baseline and needs `policy.level` L0, got "
            f"{config['policy']['level']!r} (use `at_grpo` with `at_grpo.sampling_mode=independent`)"
        )
    trainer = at_grpo_config(stage, config, stage_dir, progress)
    rollout = rollout_config(config)
    limits = section_to_dataclass(TrainingLimits, {k: config[stage][k] for k in LIMIT_KEYS}, stage)
    update_policy = config[stage]["update_policy"]
    if not isinstance(update_policy, bool):
        raise ConfigError(f"`{stage}.update_policy` must be true or false, got {update_policy!r}")
    if (limits.max_completions or limits.eval_every_completions) and trainer.logging_steps != 1:
        raise ConfigError(
            f"`{stage}.max_completions` / `{stage}.eval_every_completions` count completions from every step's "
            f"logged metrics (a resumed run too): they need `{stage}.logging_steps` 1, got {trainer.logging_steps}"
        )
    # Seeds past a dataset's train split are cut off (the default range is far larger than a benchmark);
    # with held-out evaluations during training, no training instance may be an eval instance.
    try:
        seeds = check_held_out_instances(config, [stage, "eval"] if limits.eval_every_completions else [stage])[stage]
    except ConfigError as error:
        if limits.eval_every_completions:
            raise ConfigError(f"`{stage}.eval_every_completions`: {error}") from error
        raise
    if [seeds.start, seeds.stop] != list(trainer.train_seed_range):
        if progress and dist.is_main_process():
            print(f"{stage}: `{stage}.train_seed_range` {list(trainer.train_seed_range)} reaches past the split training "
                  f"plays; drawing from its {len(seeds)} instances, seeds [{seeds.start}, {seeds.stop})", file=sys.stderr)
        try:
            trainer = dataclasses.replace(trainer, train_seed_range=[seeds.start, seeds.stop])
        except ValueError as error:  # a split smaller than one step's problems
            raise ConfigError(f"`{stage}.train_seed_range` cut to the {len(seeds)} instances of the split training "
                              f"plays: {error}; lower `{stage}.problems_per_step`") from None
    return ATGRPOStageSettings(trainer, limits, update_policy, rollout)


class CompletionCounter:
    """The completions sampled so far against the limits; ``records`` (a resumed run's logged steps) are
    counted as if they had just run, so evaluations fall where the uninterrupted run's did."""

    def __init__(self, limits: TrainingLimits, records: Iterable[Mapping[str, float]] = ()) -> None:
        self.limits = limits
        self.completions = 0
        self.next_eval = limits.eval_every_completions or None
        for record in records:
            if "num_samples" in record:
                self.count(record)

    def count(self, metrics: Mapping[str, float]) -> bool:
        """Add one step's completions (:func:`step_completions`); whether a held-out evaluation is due now."""
        self.completions += step_completions(metrics)
        budget = self.limits.max_completions
        due = self.next_eval is not None and self.completions >= self.next_eval
        if due and (not budget or self.completions < budget):  # the stage's last point is the eval stage's
            self.next_eval += self.limits.eval_every_completions
            return True
        return False

    @property
    def budget_spent(self) -> bool:
        return bool(self.limits.max_completions) and self.completions >= self.limits.max_completions


class _LimitReached(Exception):
    """Ends :meth:`_LimitedTrainer.train` once a limit is reached."""


class _LimitedTrainer(ATGRPOTrainer):
    """The trainer, stopping at the stage's limits and evaluating held-out success along the way."""

    def __init__(
        self, config, *, limits: TrainingLimits, evaluate: Callable[[int], Mapping[str, float]],
        tree_pairs: tuple[Path, Mapping[str, Any]] | None = None, update_policy: bool = True, **kwargs,
    ) -> None:
        super().__init__(config, **kwargs)
        if not update_policy:  # sample the trees only: the madpo_from_trees stage after this one trains
            self.updaters = {name: SampleOnlyUpdater(u) for name, u in self.updaters.items()}
        self.limits = limits
        self.evaluate_held_out = evaluate
        self.counter: CompletionCounter | None = None
        self.started = time.perf_counter()
        self.tree_pairs = tree_pairs  # (folder, pair settings): write each step's pairs for madpo_from_trees

    def generate_and_score(self, problem_ids, step):
        batch = super().generate_and_score(problem_ids, step)
        if self.tree_pairs is not None:
            self._write_tree_pairs(batch.samples, step)
        return batch

    def _write_tree_pairs(self, samples, step: int) -> None:
        """Step ``step``'s preference pairs (:mod:`pettingllms.trainer.tree_pairs`) as its round file."""
        import random

        from comlrl.seeding import derive_seed
        from pettingllms.trainer.tree_pairs import tree_pairs, write_step_pairs

        folder, options = self.tree_pairs
        decode = lambda s: self.policy.handle(s.policy).tokenizer.decode(s.prompt_ids)  # noqa: E731
        rng = random.Random(derive_seed(self.config.seed, "tree_pairs", step))
        pairs = tree_pairs(samples, len(self.engine.agents), decode, rng=rng, **options)
        write_step_pairs(folder, step, pairs)

    def train(self, resume_from_checkpoint: str | bool | None = None) -> list[dict[str, float]]:
        self.started = time.perf_counter()
        try:
            return super().train(resume_from_checkpoint)
        except _LimitReached:
            return self.log_history

    def step(self) -> dict[str, float]:
        if self.counter is None:  # after a resume has restored the logged steps
            self.counter = CompletionCounter(self.limits, self.log_history)
        metrics = super().step()
        if self.counter.count(metrics):
            point = {f"eval/{k}": v for k, v in self.evaluate_held_out(self.global_step).items()}
            self.metrics_logger.log({**point, "eval/completions": float(self.counter.completions)}, self.global_step)
        minutes = (time.perf_counter() - self.started) / 60
        late = bool(self.limits.max_minutes) and minutes >= self.limits.max_minutes
        if self.world_size > 1 and self.limits.max_minutes:  # every rank stops at the same step, or the rest hang
            late = bool(dist.all_reduce_max(int(late)))
        if self.counter.budget_spent or late:  # the count is the gathered metrics': the same on every rank
            raise _LimitReached
        return metrics


def _evaluate_during_training(context: StageContext, step: int) -> dict[str, float]:
    """Held-out success at training step ``step``: every benchmark of the eval section, at most
    ``eval.before_training_instances`` instances each (like ``eval_before``); with ``eval.transcripts_rate``
    the drawn episodes go to ``<stage>/eval-<step>/`` (rank 0), where ``pettingllms show`` finds them."""
    plan = eval_plan("eval", context.config, limited=True)
    folder = context.stage_dir / f"eval-{step}" if dist.is_main_process() else None
    return evaluate_benchmarks(context.router(), plan, context.env_worker, transcripts_dir=folder)[0]


def run_at_grpo(context: StageContext) -> dict[str, float]:
    """AT-GRPO (or, for stage ``grpo``, the independent-sampling baseline) over the shared policy."""
    from comlrl.checkpoint import latest_checkpoint

    settings = context.settings_or(at_grpo_settings)
    config = context.config
    limits = settings.limits
    repeat = repeat_number(context.stage, context.folder)
    if repeat > 1 and limits.max_completions:  # the earlier repeats' overshoot comes off this one's share
        earlier = earlier_repeat_completions(context.run_dir, context.stage, repeat)
        limits = dataclasses.replace(limits, max_completions=repeat_budget(limits.max_completions, repeat, earlier))
    name, fields, options = workflow_env(config, purpose="train")
    tree_pairs = None
    if context.next_stage == "madpo_from_trees" and dist.is_main_process():
        from pettingllms.stages.madpo_from_trees import tree_pair_settings
        from pettingllms.trainer.tree_pairs import TREE_PAIRS_DIR

        tree_pairs = (context.stage_dir / TREE_PAIRS_DIR, tree_pair_settings(config))
    # `run.backend: ray`: rollouts on EnvWorkers / RolloutWorkers, updates on UpdateWorkers (same results).
    with stage_workers(config, context.policy, settings.trainer, name, fields, options) as system:
        trainer = _LimitedTrainer(
            settings.trainer,
            rollout=settings.rollout if system is None else None,  # the workers' engine has its own
            limits=limits,
            evaluate=lambda step: _evaluate_during_training(context, step),
            policy=context.policy,
            backend=context.generation if system is None else None,
            tree_pairs=tree_pairs,
            update_policy=settings.update_policy,
            env_name=name,
            env_config=fields,
            agent_options=options,
            env_worker=context.env_worker,
            **(system.trainer_kwargs() if system is not None else {}),
        )
        attach(trainer, system)
        resume = latest_checkpoint(context.stage_dir) if context.resume else None
        history = trainer.train(resume_from_checkpoint=str(resume) if resume is not None else None)
    metrics = {"steps": float(trainer.global_step)}
    last = history[-1] if history else {}
    for key in ("success_rate", "reward", "reward_std", "frac_reward_zero_std", "parse_error_rate"):
        if key in last:
            metrics[f"last/{key}"] = float(last[key])
    rates = [r["success_rate"] for r in history if "success_rate" in r]
    if rates:
        metrics["mean/success_rate"] = sum(rates) / len(rates)
    return metrics
