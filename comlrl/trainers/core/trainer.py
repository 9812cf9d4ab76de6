"""What every multi-agent trainer of comlrl shares: the team, the oracle, sampling, evaluation, logging and
the ``train()`` entry.

:class:`MultiAgentTrainerBase` takes the public CoMLRL constructor keywords and builds

- the team (:func:`~comlrl.trainers.core.team.build_team`): a :class:`~comlrl.policy.MultiAgentPolicy` (one model
  per agent, one LoRA adapter per agent on one base, or a prebuilt ``policy=``) served by one
  :class:`~comlrl.rollout.HFBackend` (:class:`~comlrl.rollout.VLLMBackend` with ``use_vllm``);
- the oracle (``reward_func`` after ``reward_processor``), behind a
  :class:`~comlrl.trainers.core.centralized.CentralizedCollaboration` when one actor writes every role;
- one AdamW per policy stepped by :class:`~comlrl.trainers.core.optimization.GradientSteps` (accumulation, LR
  schedule, clipping, autocast, ``save_steps``), metrics through :class:`~comlrl.reporting.MetricsLogger`;
- its place in a data-parallel launch (:mod:`.data_parallel`), FSDP when asked (:mod:`.sharded_training`).

Checkpoints, resume and ``save_model`` (rank 0 writes) come from :class:`.trainer_core.TrainerCore`. Subclasses
implement :meth:`MultiAgentTrainerBase._run` (the training loop of one ``train()`` call, with commit points for
checkpoints), register their pieces with ``add_part`` and add their own state through ``state_extra``,
``checkpoint_payloads`` and ``restore_payloads``. The preference, MAGRPO and actor-critic trainers build on it.

Sampling seeds: a request for (item, agent) draws candidate j with ``derive_seed(derive_seed(seed, stream, step,
item_index, agent), j)``; evaluation uses the stream ``"eval"`` with the evaluation count as its step, so a
resumed run draws exactly what an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from comlrl.atomic_io import atomic_write_text
from comlrl.checkpoint import TrainerState
from comlrl.distributed import RankMetricsLogger, check_world_size
from comlrl.policy import MultiAgentPolicy
from comlrl.rollout import SamplingParams
from comlrl.trainers.core.centralized import CentralizedCollaboration, check_adapter
from comlrl.trainers.core.data_parallel import DataParallel
from comlrl.trainers.core.models import disable_dropout
from comlrl.trainers.core.nonfinite import NonFiniteGuard
from comlrl.trainers.core.optimization import GradientSteps, build_optimizer
from comlrl.trainers.core.oracle import NonFiniteRewardError, Oracle, OracleScores
from comlrl.trainers.core.reference import ReferencePolicy
from comlrl.trainers.core.sampling import (
    ItemSample,
    PromptedItem,
    generation_overrides,
    model_top_k,
    prompt_text,
    sample_prompted,
)
from comlrl.trainers.core.sharded_training import ShardedTraining, fsdp_for_trainer
from comlrl.trainers.core.team import (
    agent_count,
    as_items,
    build_team,
    check_team_keywords,
    resolve_formatters,
    save_agent_folders,
)
from comlrl.trainers.core.team_keywords import infer_model_name
from comlrl.trainers.core.train_options import (
    UNSET,
    CheckpointPlan,
    check_config_matches,
    json_config,
    plan_checkpoints,
)
from comlrl.trainers.core.trainer_core import TrainerCore
from comlrl.trainers.core.vllm_fields import generation_backend
from comlrl.trainers.core.wandb_config import apply_wandb_config, wandb_init_kwargs, wandb_run_config
from comlrl.validation import public_wording

logger = logging.getLogger(__name__)

__all__ = ["ItemSample", "MultiAgentTrainerBase"]


class MultiAgentTrainerBase(TrainerCore):
    """Shared constructor, sampling, evaluation and logging of comlrl's multi-agent trainers.

    Args (the public CoMLRL keywords, same meanings):
        agent_model: one model source (preset name, local path or model object) for every agent.
        agents: one source per agent (names or model objects).
        num_agents: agent count when ``agents`` is not given (the role count in centralized mode).
        tokenizer: one tokenizer or one per agent; needed for model objects not loaded from a folder.
        model_config: ``dtype``/``torch_dtype``, ``attn_implementation``, nested ``model_kwargs`` and
            ``special_tokens`` (added to the tokenizers; embeddings are resized).
        train_dataset, eval_dataset: an HF ``Dataset``/``IterableDataset`` or a sequence of dicts, visited
            in order.
        reward_func, reward_processor: the oracle (see :mod:`.oracle` for the calling conventions).
        formatters: None (``item["prompt"]``), one callable for every agent, or one per agent; each
            returns the agent's prompt as text or as chat messages (rendered with the chat template).
        external_transition: the online RL trainers' multi-turn transition (see
            :mod:`comlrl.trainers.online_rl.multi_turn`); the preference trainers take None.
        wandb_config: a dict adds ``"wandb"`` to ``args.report_to`` and goes to ``wandb.init``.
        eval_logger, eval_aggregator: per-item evaluation metrics and their aggregation (under ``eval/``).
        args: the trainer's config; None uses its defaults.
        centralized_comparator_adapter: parse adapter of centralized collaboration / comparator generation.

    Attributes beyond the team: ``actor_names`` holds, per agent, the name the actor was given by (None for
    a model object that was not loaded from a local folder); reward-model and critic sources fall back to it.

    Ours:
        policy: a prebuilt :class:`~comlrl.policy.MultiAgentPolicy` instead of ``agent_model``/``agents``.
        lora_config: a peft ``LoraConfig``; every agent gets its own adapter on one shared base model.
    """

    config_class: type = type(None)  # set by each trainer
    # Configs that are subclasses of one another but belong to different trainers (MARLHFConfig is a
    # MADPOConfig): a trainer accepts exactly its own class among them, and any subclass of its own otherwise.
    exact_config_types: tuple[type, ...] = ()
    # Items whose candidates are sampled in one backend.generate call (the backend cuts micro-batches
    # by token budget, so this only bounds how many completions are held at once).
    generation_batch_items = 64

    def __init__(
        self,
        agent_model: Any = None,
        agents: Sequence[Any] | None = None,
        num_agents: int = 2,
        tokenizer: Any = None,
        model_config: Mapping[str, Any] | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        reward_func: Callable[..., Any] | None = None,
        reward_processor: Callable[[float], Any] | None = None,
        formatters: Callable[[Any], Any] | Sequence[Callable[[Any], Any]] | None = None,
        external_transition: Any = None,
        wandb_config: Mapping[str, Any] | None = None,
        eval_logger: Callable[..., Any] | None = None,
        eval_aggregator: Callable[..., Any] | None = None,
        args: Any = None,
        *,
        centralized_comparator_adapter: Any = None,
        policy: MultiAgentPolicy | None = None,
        lora_config: Any = None,
    ) -> None:
        super().__init__()
        args = self._check_args(args)
        # Under accelerate launch / torchrun: join the launch, or refuse it before any model loads.
        self.data_parallel = DataParallel(type(self).__name__, self.data_parallel_refusal(args))
        fsdp = fsdp_for_trainer(type(self).__name__, self.data_parallel.size, args, lora_config)  # None: none
        centralized = bool(getattr(args, "is_centralized", False))
        joint = centralized or getattr(args, "comparator_generation_mode", None) == "centralized"
        adapter = centralized_comparator_adapter  # None gives the tagged adapter where one is needed
        self.centralized_adapter = check_adapter(adapter) if joint or adapter is not None else None
        # The public order: adapter, team sources, reward, role count, formatters; then the multi-turn rule.
        if policy is None:
            check_team_keywords(agent_model, agents, num_agents, tokenizer, args, centralized=centralized)
        if reward_func is None or not callable(reward_func):
            message = f"`reward_func` must be a callable, got {type(reward_func).__name__}"
            raise ValueError(public_wording(message, "reward_func must be a callable."))
        for name, value in (
            ("reward_processor", reward_processor), ("eval_logger", eval_logger), ("eval_aggregator", eval_aggregator)
        ):
            if value is not None and not callable(value):
                raise ValueError(f"`{name}` must be a callable or None, got {type(value).__name__}")
        if isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 1:
            raise ValueError(f"`num_agents` must be an integer >= 1, got {num_agents!r}")
        args = apply_wandb_config(args, wandb_config)
        self.wandb_config = dict(wandb_config) if wandb_config is not None else None
        self.num_roles: int | None = None
        if centralized:
            if num_agents != args.num_agents:
                message = (
                    f"`num_agents` ({num_agents}) must match `args.num_agents` ({args.num_agents}), the role "
                    "count, with collaboration_mode='centralized'"
                )
                raise ValueError(public_wording(message, "num_agents must match args.num_agents (the role count)."))
            self.num_roles = args.num_agents
        # The formatters are checked against the agent (role) count the keywords ask for, before any model loads.
        resolve_formatters(formatters, agent_count(agents, num_agents, policy, args, centralized=centralized))
        self.external_transition = self._accept_external_transition(external_transition, args)
        self.policy, self.actor_names = build_team(
            agent_model, agents, num_agents, tokenizer, model_config, lora_config, policy, args, centralized=centralized
        )
        actor_count = self.policy.num_agents
        if not centralized and actor_count != args.num_agents:
            # The public library never reconciles the constructor's count with the config's; the config
            # validates device lists against its own count, so bring it in line (and say so).
            logger.warning(
                "`args.num_agents` (%d) differs from the trainer's agent count (%d, from `agents` or "
                "`num_agents`); using %d", args.num_agents, actor_count, actor_count,
            )
            args = dataclasses.replace(args, num_agents=actor_count)
        self.args = args
        self.num_agents = actor_count
        self.agent_names = self.policy.agents
        if args.disable_dropout:
            for model in self.policy.models():
                disable_dropout(model)
        self.sharded = fsdp and self.add_part(  # FSDP: the policies' sharded modules (a part: checkpoints)
            ShardedTraining(self.policy, fsdp, self.data_parallel, lambda: self.optimizers_by_policy))

        role_formatters = resolve_formatters(formatters, self.num_roles or self.num_agents)
        base_oracle = Oracle(reward_func, reward_processor)
        if centralized:
            self.collaboration = CentralizedCollaboration(self.centralized_adapter, role_formatters)
            self.formatters = [self.collaboration.joint_prompt]
            self.oracle = self.collaboration.wrap_oracle(base_oracle)
        else:
            self.collaboration = None
            self.formatters = role_formatters
            self.oracle = base_oracle
        self.task_oracle = self.oracle  # evaluation always scores with the task reward
        self.reward_func = reward_func
        self.reward_processor = reward_processor
        self.eval_logger = eval_logger
        self.eval_aggregator = eval_aggregator
        self.train_dataset = as_items(train_dataset, "train_dataset")
        self.eval_dataset = as_items(eval_dataset, "eval_dataset")

        self.backend = generation_backend(self.policy, args)  # HF, or vLLM with use_vllm
        trainable = (self.sharded or self.policy).trainable_parameters  # FSDP: the sharded modules'
        self.optimizers_by_policy = {
            name: build_optimizer(trainable(name), learning_rate=args.agent_learning_rate, foreach=True)
            for name in self.policy.policies
        }
        # Micro-batches into optimizer steps: accumulation, clipping, LR schedule, autocast, save_steps.
        self.gradient_steps = self.add_part(
            GradientSteps(
                args,
                self.optimizers_by_policy,
                device_type=self.policy.device(0).type,
                apply_step=lambda: self.step_optimizers(),  # a finished group of micro-batches steps
                sharded=self.sharded is not None,
            )
        )
        self.data_parallel.attach(self.gradient_steps)
        self._sampling_overrides: dict[str, Any] = {}
        self._verbose = not args.disable_tqdm
        self._plan: CheckpointPlan | None = None
        self.reset_counters()

    # ------------------------------------------------------------------------------------ public state
    @property
    def agents(self) -> list[nn.Module]:
        """Each agent's model (agents sharing a model, or LoRA adapters on one base, list it repeatedly)."""
        return [self.policy.handle(a).model for a in self.agent_names]

    @property
    def tokenizers(self) -> list[Any]:
        return [self.policy.handle(a).tokenizer for a in self.agent_names]

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """One AdamW per policy, in policy order."""
        return list(self.optimizers_by_policy.values())

    @property
    def model_name(self) -> str | None:
        """The first actor's model name (public attribute): as given, else from its config or class (never loaded)."""
        return self.actor_names[0] if self.actor_names[0] is not None else infer_model_name(self.agents[0])

    reference_policy: ReferencePolicy | None = None  # set by the trainers that keep a frozen reference

    @property
    def reference_models(self) -> list[nn.Module]:
        """Each agent's frozen reference model (the public attribute; [] for a trainer without one)."""
        ref = self.reference_policy
        return [] if ref is None else [ref.policy.handle(a).model for a in ref.policy.agents]

    @property
    def verbose(self) -> bool:
        """Progress bars and notices on (the public library's ``trainer.verbose``)."""
        return self._verbose

    @verbose.setter
    def verbose(self, value: bool) -> None:
        self._verbose = bool(value)

    output_dir = property(lambda self: Path(self.args.output_dir), doc="``args.output_dir`` as a Path.")

    def reset_counters(self) -> None:
        """Zero the run's counters (a fresh ``train()``)."""
        self.env_step = 0
        self.updates_seen = 0
        self.eval_count = 0
        self.nonfinite = NonFiniteGuard(self.args.max_nonfinite_losses_in_a_row, on_count=self._log)
        self._last_log_x = 0
        self._window: dict[str, list[float]] = defaultdict(list)
        self.data_cursor = {}

    def _check_args(self, args: Any) -> Any:
        cls = self.config_class
        if args is None:
            return cls()
        wrong = not isinstance(args, cls) or (type(args) in self.exact_config_types and type(args) is not cls)
        if wrong:
            raise TypeError(
                f"`args` must be a {cls.__name__} for {type(self).__name__}, got {type(args).__name__}"
            )
        return args

    def data_parallel_refusal(self, args: Any) -> str | None:
        """Why this trainer cannot train data-parallel with ``args`` (None: it can; :mod:`.data_parallel`)."""
        return "use_vllm" if getattr(args, "use_vllm", False) else None

    def _accept_external_transition(self, transition: Any, args: Any) -> Any:
        """The transition the trainer keeps (the online RL trainers' multi-turn episodes override this); the
        preference trainers are single-turn, so theirs must be None."""
        if transition is not None:
            raise ValueError(
                f"`external_transition` must be None: it drives multi-turn episodes, and {type(self).__name__} "
                "requires num_turns=1"
            )
        return None

    # ------------------------------------------------------------------------------------ sampling
    def sampling_params(self, n: int) -> SamplingParams:
        """The config's sampling parameters (with ``train()``'s overrides) for ``n`` candidates."""
        args = self.args
        values = {
            "temperature": float(args.temperature),
            "top_p": float(args.top_p),
            "top_k": int(args.resolved_top_k(model_top_k(self.agents[0]))),
            "max_new_tokens": int(args.max_new_tokens),
        }
        values.update(self._sampling_overrides)
        return SamplingParams(n=n, **values)

    def agent_prompts(self, item: Any) -> list[Any]:
        """Every agent's prompt for ``item`` (text or chat messages), from the formatters."""
        prompts = []
        for a, formatter in enumerate(self.formatters):
            prompt = formatter(item)
            if not isinstance(prompt, (str, list)):
                raise TypeError(
                    f"`formatters[{a}]` must return a string or a list of chat messages, "
                    f"got {type(prompt).__name__}"
                )
            prompts.append(prompt)
        return prompts

    def agent_prompt_texts(self, item: Any) -> list[str]:
        """Every agent's prompt for ``item`` as text (chat messages rendered with the agent's template)."""
        return [prompt_text(p, None, self.tokenizers[a]) for a, p in enumerate(self.agent_prompts(item))]

    def sample_items(
        self, items: Sequence[Any], item_indices: Sequence[int], *, n: int, stream: str, step: int
    ) -> list[ItemSample]:
        """``n`` candidates of every agent for every item, in one ``backend.generate`` call."""
        entries = [PromptedItem(item, int(index), self.agent_prompts(item)) for item, index in zip(items, item_indices)]
        return sample_prompted(self, entries, n=n, stream=stream, step=step)

    def sample_batches(
        self, items: Sequence[Any], batch_size: int, *, n: int, stream: str, step: int, desc: str, start: int = 0
    ) -> Iterator[tuple[list[Any], list[int], list[ItemSample]]]:
        """:meth:`sample_items` over consecutive batches of ``batch_size`` items from item ``start`` (a progress
        bar advances when the caller is done with a batch): yields ``(batch, its item indices, samples)``."""
        with self.progress_bar(total=len(items), initial=start, desc=desc, unit="item") as bar:
            for first in range(start, len(items), batch_size):
                batch = list(items[first : first + batch_size])
                indices = list(range(first, first + len(batch)))
                yield batch, indices, self.sample_items(batch, indices, n=n, stream=stream, step=step)
                bar.update(len(batch))

    def score(self, sample: ItemSample, candidates: Sequence[Sequence[Any]] | None = None) -> OracleScores:
        """The oracle's scores of an item's joint candidates (``sample.candidates`` by default)."""
        return self.oracle.score(
            sample.candidates if candidates is None else candidates,
            prompts=sample.prompt_texts,
            item=sample.item,
            item_index=sample.item_index,
        )

    def score_finite(self, sample: ItemSample, where: str, candidates: Any = None) -> OracleScores | None:
        """:meth:`score`, or None (the item dropped, counted, logged) when a score is non-finite."""
        try:
            scores = self.score(sample, candidates)
        except NonFiniteRewardError as error:
            self.nonfinite.drop_rewards(1, str(error), where)
            return self.nonfinite.empty_step(where)  # None: this item's pairs are the collection's step
        return scores  # a finite item does not reset the in-a-row count: only an update that goes through does

    def _require_train_items(self) -> list[Any]:
        if self.train_dataset is None:
            raise ValueError("`train_dataset` is required to train")
        if not self.train_dataset:
            raise ValueError("`train_dataset` is empty")
        return self.train_dataset

    # ------------------------------------------------------------------------------------ train()
    def train(
        self,
        resume_from_checkpoint: str | os.PathLike | bool | None = None,
        checkpoint_dir: str | os.PathLike | None = None,
        checkpoint_interval: int = UNSET,
        checkpoint_total_limit: int | None = UNSET,
        **generation_kwargs: Any,
    ) -> None:
        """Train; returns None.

        Giving any checkpoint keyword turns checkpoints on: ``checkpoint_dir`` (default ``args.output_dir``)
        receives ``checkpoint-{n}/`` every ``checkpoint_interval`` commit points (epochs of the base
        trainers, ``n`` = epochs done, 0 right after pair collection; rounds of the iterative ones) and at
        the end, keeping ``checkpoint_total_limit`` (default ``args.save_total_limit``).
        ``resume_from_checkpoint`` is a ``checkpoint-{n}`` folder, a folder holding them (the latest is
        used) or True (the latest in ``checkpoint_dir``). ``generation_kwargs`` override ``temperature``,
        ``top_p``, ``top_k``, ``max_new_tokens`` or ``stop`` for this call (``do_sample`` is accepted and
        ignored: candidates are always sampled); any other keyword is an error.
        """
        plan = plan_checkpoints(
            resume_from_checkpoint,
            checkpoint_dir,
            checkpoint_interval,
            checkpoint_total_limit,
            output_dir=self.args.output_dir,
            save_total_limit=self.args.save_total_limit,
            save_steps=self.args.save_steps,
        )
        self._sampling_overrides = generation_overrides(generation_kwargs)
        self._plan = plan
        try:
            if plan.resume_from is not None:
                self.load_checkpoint(plan.resume_from)
            else:
                self.reset_counters()
                self.on_fresh_run()
            self._run(plan)
            self._flush_window()
        finally:
            self._sampling_overrides = {}
            self._plan = None

    def _run(self, plan: CheckpointPlan) -> None:
        """The training loop of one ``train()`` call; call :meth:`_commit` at each commit point."""
        raise NotImplementedError

    def step_optimizers(self) -> bool:
        """One step of every optimizer on the accumulated gradients (:meth:`GradientSteps.step`: averaged over
        the group's rows, clipped, scheduled), bumping every policy's version; False when nothing trained."""
        getattr(self.backend, "sleep", lambda: None)()  # vLLM's sleep mode frees its GPU memory for the step
        stepped = self.gradient_steps.step()
        if stepped:
            if self.sharded is not None:  # FSDP: the whole models get the new weights (every rank)
                self.sharded.push()
            for name in self.optimizers_by_policy:
                self.policy.bump_version(name)
        return stepped

    def _commit(self, plan: CheckpointPlan, boundary: int, *, last: bool, force: bool = False) -> None:
        """A commit point (``boundary``: epochs or rounds done): the ``checkpoint_interval`` checkpoint, named
        ``boundary`` (by the optimizer steps with ``save_steps``); else a due ``save_steps`` one."""
        if plan.directory is not None and (force or last or boundary % plan.interval == 0):
            self.gradient_steps.save_due = False
            step = self.gradient_steps.global_step if self.args.save_steps else boundary
            self.save_checkpoint(plan.directory, step=step, total_limit=plan.total_limit)
        else:
            self.save_due_checkpoint()

    def save_due_checkpoint(self) -> None:
        """Called where a run can resume from (the data cursor says where; no micro-batch waits for its step):
        write ``checkpoint-{optimizer steps}`` when ``save_steps`` made one due."""
        steps, plan = self.gradient_steps, self._plan
        if not steps.save_due or steps.pending or plan is None or plan.save_directory is None:
            return
        steps.save_due = False
        self.save_checkpoint(plan.save_directory, step=steps.global_step, total_limit=plan.total_limit)

    # ------------------------------------------------------------------------------------ evaluation
    def evaluate(self, num_eval_samples: int | None = None) -> dict[str, float]:
        """Play one joint response per evaluation item (one path of ``num_turns`` turns for a multi-turn
        trainer) with the current policies, scored with the task reward; returns (and logs) the metrics of
        :func:`comlrl.trainers.core.evaluation.evaluate` (``{}``, with a warning, without an ``eval_dataset``)."""
        from comlrl.trainers.core.evaluation import evaluate

        return evaluate(self, num_eval_samples)

    def _maybe_evaluate(self) -> None:
        interval = self.args.eval_interval
        if interval > 0 and self.eval_dataset is not None and self.updates_seen % interval == 0:
            if self.data_parallel.main:  # rank 0 evaluates and logs
                self.evaluate()

    # ------------------------------------------------------------------------------------ logging
    def new_metrics_logger(self):
        """A :class:`~comlrl.reporting.MetricsLogger` on the config's reporters with a fresh
        ``output_dir/metrics.jsonl`` (a resume then rewrites it from the checkpoint's history)."""
        from comlrl.reporting import MetricsLogger

        if not self.data_parallel.main:
            return RankMetricsLogger()  # rank 0 writes the metrics
        metrics_logger = MetricsLogger(
            self.args.output_dir,
            self.args.report_to,
            run_name=self.args.run_name,
            config=wandb_run_config(self.args.to_dict(), self.wandb_config),
            wandb_kwargs=wandb_init_kwargs(self.wandb_config),
            tensorboard_dir=self.args.resolved_logging_dir,
        )
        # One trainer, one log: lines left by an earlier run in the same output_dir are dropped.
        atomic_write_text(metrics_logger.path, "")
        return metrics_logger

    @property
    def x_step(self) -> int:
        """The logging x-axis: ``env_step`` (``use_environment_step``) or the update count."""
        return self.env_step if self.args.use_environment_step else self.updates_seen

    def _log(self, metrics: Mapping[str, Any]) -> None:
        self.metrics_logger.log(dict(metrics), step=self.x_step)

    def record_step(self, env_steps: int, metrics: Mapping[str, float]) -> None:
        """Account one optimizer update that consumed ``env_steps`` environment steps and log when
        ``logging_steps`` have passed."""
        self.updates_seen += 1
        self.env_step += int(self.data_parallel.total(env_steps))  # every rank's joint responses
        for key, value in {**metrics, **self.gradient_steps.step_metrics()}.items():
            self._window[key].append(float(value))
        if self.x_step - self._last_log_x >= self.args.logging_steps:
            self._flush_window()

    nonfinite_losses_skipped = property(lambda self: self.nonfinite.losses_skipped, doc="Updates skipped (run).")

    def record_nonfinite(self, where: str, what: str = "loss") -> None:
        """Count an update skipped for a non-finite ``what`` (see :mod:`.nonfinite`; may stop the run)."""
        self.nonfinite.skip_step(what, where)

    def idle_update(self) -> None:
        """Under data parallel, this rank's part of a batch is empty: it still joins the micro-batch (zero rows)."""
        self.gradient_steps.start_micro_batch()
        if self.sharded is not None:  # FSDP: the filler's forward and backward calls
            self.sharded.fill()
        if self.gradient_steps.end_micro_batch(0):
            self.record_step(0, {})

    def _flush_window(self) -> None:
        if not self._window:
            return
        metrics = {key: sum(values) / len(values) for key, values in self._window.items()}
        metrics.update(self._window_counters())
        self._log(metrics)
        self._window = defaultdict(list)
        self._last_log_x = self.x_step

    def _window_counters(self) -> dict[str, float]:
        """Run counters logged with every flushed window (subclasses add theirs first)."""
        return {**self.nonfinite.metrics(), "updates": self.updates_seen}

    # ------------------------------------------------------------------------------------ save_model
    def save_model(self, output_dir: str | os.PathLike) -> Path:
        """Write ``output_dir/agent_i/`` for every agent (model and tokenizer ``save_pretrained``; a LoRA
        agent's folder holds its adapter and tokenizer, the base goes to ``output_dir/base/``), plus the
        policy layout (``MultiAgentPolicy.load(output_dir)`` rebuilds the team). Data parallel: rank 0 writes."""
        directory = super().save_model(output_dir)
        if self._metrics_logger is not None and "wandb" in self.args.report_to:
            self._log({"final_model_saved": 1})
        return directory

    def save_model_files(self, directory: Path) -> None:
        save_agent_folders(self.policy, self.agent_names, directory)

    # ------------------------------------------------------------------------------------ checkpoints
    def checkpoint_step(self) -> int:
        """The last commit point: epochs done (the iterative trainers: rounds done)."""
        return int(self.data_cursor.get("epochs_done", 0))

    def checkpoint_optimizers(self) -> Mapping[str, torch.optim.Optimizer]:
        return self.optimizers_by_policy if self.sharded is None else self.sharded.whole_optimizers()  # FSDP: whole

    def check_checkpoint(self, path: Path, saved: TrainerState) -> None:
        """The checkpoint must come from this trainer class with a config that differs only in portable
        fields (devices, logging, output folders, round and epoch counts)."""
        trainer = saved.extra.get("trainer")
        if trainer != type(self).__name__:
            raise ValueError(f"checkpoint {path} was written by {trainer}, not {type(self).__name__}")
        check_world_size(saved.extra, path, self.data_parallel.size)
        check_config_matches(saved.extra.get("config", {}), self.args, path)

    def state_extra(self) -> dict[str, Any]:
        """The trainer's name, its config and the run's counters (subclasses add theirs and call super)."""
        return {
            "trainer": type(self).__name__,
            "config": json_config(self.args),
            "env_step": self.env_step,
            "updates_seen": self.updates_seen,
            "eval_count": self.eval_count,
            **self.nonfinite.state_dict(),
            "last_log_x": self._last_log_x,
            "window": {key: list(values) for key, values in self._window.items()},
            "world_size": self.data_parallel.size,
        }

    def load_state_extra(self, extra: Mapping[str, Any]) -> None:
        self.env_step = int(extra["env_step"])
        self.updates_seen = int(extra["updates_seen"])
        self.eval_count = int(extra["eval_count"])
        self.nonfinite.load_state_dict(extra)
        self._last_log_x = int(extra["last_log_x"])
        self._window = defaultdict(list, {k: list(v) for k, v in extra.get("window", {}).items()})
