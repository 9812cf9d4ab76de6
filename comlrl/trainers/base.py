"""What every multi-agent trainer of comlrl shares: the team, the oracle, sampling, evaluation, logging and
checkpoints.

:class:`MultiAgentTrainerBase` takes the public CoMLRL constructor keywords and builds

- the team: a :class:`~comlrl.policy.MultiAgentPolicy` (one model per agent, one LoRA adapter per agent on
  one base, or a prebuilt ``policy=``) served by one :class:`~comlrl.rollout.HFBackend`;
- the oracle (``reward_func`` after ``reward_processor``) and the prompt formatters;
- one AdamW per policy, metrics through :class:`~comlrl.reporting.MetricsLogger`, progress bars.

Subclasses implement :meth:`MultiAgentTrainerBase._run` (the training loop of one ``train()`` call, with
commit points for checkpoints) and add their state through :meth:`state_extra`,
:meth:`checkpoint_payloads` and :meth:`restore_payloads`. The preference trainers
(:class:`~comlrl.trainers.preference.base.PreferenceTrainerBase`), the MAGRPO family and the actor-critic
trainers are built on it.

Sampling seeds: a request for (item, agent) draws candidate j with
``derive_seed(derive_seed(seed, stream, step, item_index, agent), j)``; evaluation uses the stream
``"eval"`` with the evaluation count as its step, so a resumed run draws exactly what an uninterrupted one
would.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
import shutil
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from comlrl.atomic_io import atomic_write_json, atomic_write_text
from comlrl.checkpoint import (
    TrainerState,
    latest_checkpoint,
    load_checkpoint,
    read_trainer_state,
    save_checkpoint,
)
from comlrl.policy import MultiAgentPolicy
from comlrl.rollout import Completion, GenerationRequest, HFBackend, SamplingParams
from comlrl.seeding import derive_seed
from comlrl.trainers.preference.oracle import Oracle, OracleScores

logger = logging.getLogger(__name__)

__all__ = ["CheckpointPlan", "ItemSample", "MultiAgentTrainerBase", "CentralizedCollaboration"]

_UNSET: Any = object()  # tells "not given" from the public defaults of train()'s checkpoint keywords
_GENERATION_KEYWORDS = ("temperature", "top_p", "top_k", "max_new_tokens", "stop")
# Config fields that may differ between a checkpoint and the run resuming from it.
_PORTABLE_FIELDS = frozenset(
    {
        "num_iterations",
        "num_train_epochs",
        "output_dir",
        "logging_dir",
        "logging_steps",
        "report_to",
        "run_name",
        "disable_tqdm",
        "save_total_limit",
        "agent_devices",
        "comparator_devices",
        "reference_devices",
        "reward_model_device",
        "critic_devices",
        "parallel_training",
        "preference_replay_dir",
        "policy_checkpoint_dir",
        "eval_interval",
        "eval_num_samples",
        "eval_batch_size",
        "comparator_api_key",
        "comparator_api_key_env",
        "comparator_api_timeout",
        "comparator_api_headers",
    }
)


@dataclasses.dataclass
class ItemSample:
    """One task item's sampled joint candidates: every agent's prompt (as sent and as text) and, per
    agent, its candidates in candidate order."""

    item: Any
    item_index: int
    prompts: list[Any]
    prompt_texts: list[str]
    candidates: list[list[Completion]]


@dataclasses.dataclass
class CheckpointPlan:
    """How one ``train()`` call checkpoints: ``directory`` None means no checkpoints."""

    directory: Path | None
    interval: int = 1
    total_limit: int | None = None
    resume_from: Path | None = None


class MultiAgentTrainerBase:
    """Shared constructor, sampling, evaluation, logging and checkpointing of comlrl's multi-agent trainers.

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
        external_transition: multi-turn only; must be None (out of scope).
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
    iterative = False
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
        args = self._check_args(args)
        if external_transition is not None:
            raise ValueError(
                f"`external_transition` must be None: it drives multi-turn episodes, and "
                f"{type(self).__name__} "
                "currently requires num_turns=1 (multi-turn is out of scope)"
            )
        if reward_func is None or not callable(reward_func):
            raise ValueError(f"`reward_func` must be a callable, got {type(reward_func).__name__}")
        if reward_processor is not None and not callable(reward_processor):
            raise ValueError(
                f"`reward_processor` must be a callable or None, got {type(reward_processor).__name__}"
            )
        for name, value in (("eval_logger", eval_logger), ("eval_aggregator", eval_aggregator)):
            if value is not None and not callable(value):
                raise ValueError(f"`{name}` must be a callable or None, got {type(value).__name__}")
        if isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 1:
            raise ValueError(f"`num_agents` must be an integer >= 1, got {num_agents!r}")
        args = _apply_wandb_config(args, wandb_config)
        self.wandb_config = dict(wandb_config) if wandb_config is not None else None

        self.centralized_adapter = None
        centralized = bool(getattr(args, "is_centralized", False))
        if centralized or getattr(args, "comparator_generation_mode", None) == "centralized":
            self.centralized_adapter = _check_adapter(centralized_comparator_adapter)
        elif centralized_comparator_adapter is not None:
            _check_adapter(centralized_comparator_adapter)
            self.centralized_adapter = centralized_comparator_adapter

        self.num_roles: int | None = None
        if centralized:
            if num_agents != args.num_agents:
                raise ValueError(
                    f"`num_agents` ({num_agents}) must match `args.num_agents` ({args.num_agents}), the role "
                    "count, with collaboration_mode='centralized'"
                )
            self.num_roles = args.num_agents
        self.policy = self._build_team(
            agent_model,
            agents,
            num_agents,
            tokenizer,
            model_config,
            lora_config,
            policy,
            args,
            centralized=centralized,
        )
        actor_count = self.policy.num_agents
        if not centralized and actor_count != args.num_agents:
            # The public library never reconciles the constructor's count with the config's; the config
            # validates device lists against its own count, so bring it in line (and say so).
            logger.warning(
                "`args.num_agents` (%d) differs from the trainer's agent count (%d, from `agents` or "
                "`num_agents`); using %d",
                args.num_agents,
                actor_count,
                actor_count,
            )
            args = dataclasses.replace(args, num_agents=actor_count)
        self.args = args
        self.num_agents = actor_count
        self.agent_names = self.policy.agents
        if args.disable_dropout:
            for model in self.policy.models():
                _disable_dropout(model)

        role_formatters = _resolve_formatters(formatters, self.num_roles or self.num_agents)
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
        self.train_dataset = _as_items(train_dataset, "train_dataset")
        self.eval_dataset = _as_items(eval_dataset, "eval_dataset")

        self.backend = HFBackend(self.policy.handles)
        self.optimizers_by_policy = {
            name: torch.optim.AdamW(
                self.policy.trainable_parameters(name), lr=args.agent_learning_rate, foreach=True
            )
            for name in self.policy.policies
        }
        self._metrics_logger = None
        self._sampling_overrides: dict[str, Any] = {}
        self._verbose = not args.disable_tqdm
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
    def verbose(self) -> bool:
        """Progress bars and notices on (the public library's ``trainer.verbose``)."""
        return self._verbose

    @verbose.setter
    def verbose(self, value: bool) -> None:
        self._verbose = bool(value)

    def reset_counters(self) -> None:
        """Zero the run's counters (a fresh ``train()``)."""
        self.env_step = 0
        self.updates_seen = 0
        self.eval_count = 0
        self.nonfinite_losses_skipped = 0
        self.nonfinite_in_a_row = 0
        self._last_log_x = 0
        self._window: dict[str, list[float]] = defaultdict(list)
        self._cursor: dict[str, Any] = {}

    # ------------------------------------------------------------------------------------ construction
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

    def _build_team(
        self,
        agent_model: Any,
        agents: Sequence[Any] | None,
        num_agents: int,
        tokenizer: Any,
        model_config: Mapping[str, Any] | None,
        lora_config: Any,
        policy: MultiAgentPolicy | None,
        args: Any,
        *,
        centralized: bool,
    ) -> MultiAgentPolicy:
        if policy is not None:
            if agent_model is not None or agents is not None:
                raise ValueError("give either `policy` or `agent_model`/`agents`, not both")
            if not isinstance(policy, MultiAgentPolicy):
                raise TypeError(f"`policy` must be a MultiAgentPolicy, got {type(policy).__name__}")
            if lora_config is not None:
                raise ValueError(
                    "`lora_config` applies only when the trainer builds the team; `policy` is built"
                )
            if centralized and policy.num_agents != 1:
                raise ValueError(
                    "Centralized collaboration requires exactly one actor model: "
                    "`policy` must have one agent, "
                    f"got {policy.num_agents}"
                )
            self.actor_names = [None] * policy.num_agents
            return policy
        sources = _agent_sources(agent_model, agents, 1 if centralized else num_agents)
        self.actor_names = [_source_name(s) for s in sources]
        if centralized and len(sources) != 1:
            raise ValueError(
                "Centralized collaboration requires exactly one actor model: `agents` must hold one model, "
                f"got {len(sources)}"
            )
        count = len(sources)
        names = [f"agent_{i}" for i in range(count)]
        model_config = dict(model_config or {})
        load_kwargs, special_tokens = _model_loading_options(model_config)
        tokenizers = _tokenizer_list(tokenizer, count)
        devices = _resolve_devices(args.agent_devices, count, args.parallel_training)

        if lora_config is not None:
            if len({_source_key(s) for s in sources}) != 1:
                raise ValueError(
                    "`lora_config` puts every agent on one base model; `agents` name different models"
                )
            model, tok = _load_one(sources[0], tokenizers[0], devices[0], load_kwargs, args, "agent_model")
            _add_special_tokens(model, tok, special_tokens)
            return MultiAgentPolicy.from_mapping(
                {n: n for n in names},
                base_model=model,
                lora_config=lora_config,
                tokenizer=tok,
                arrangement="lora",
            )
        models, toks = {}, {}
        for i, (name, source) in enumerate(zip(names, sources)):
            if isinstance(source, nn.Module) and any(source is m for m in models.values()):
                source = copy.deepcopy(source)  # one object for every agent: independent copies
            field = "agent_model" if agents is None else f"agents[{i}]"
            model, tok = _load_one(source, tokenizers[i], devices[i], load_kwargs, args, field)
            _add_special_tokens(model, tok, special_tokens)
            models[name], toks[name] = model, tok
        return MultiAgentPolicy.from_mapping(
            {n: n for n in names}, models, tokenizer=toks, arrangement="single" if count == 1 else "per_agent"
        )

    # ------------------------------------------------------------------------------------ sampling
    def sampling_params(self, n: int) -> SamplingParams:
        """The config's sampling parameters (with ``train()``'s overrides) for ``n`` candidates."""
        args = self.args
        values = {
            "temperature": float(args.temperature),
            "top_p": float(args.top_p),
            "top_k": int(args.resolved_top_k(_model_top_k(self.agents[0]))),
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
        return [_prompt_text(p, None, self.tokenizers[a]) for a, p in enumerate(self.agent_prompts(item))]

    def sample_items(
        self, items: Sequence[Any], item_indices: Sequence[int], *, n: int, stream: str, step: int
    ) -> list[ItemSample]:
        """``n`` candidates of every agent for every item, in one ``backend.generate`` call."""
        prompts = [self.agent_prompts(item) for item in items]
        requests = [
            GenerationRequest(
                prompt=prompts[i][a],
                policy=self.policy.policy_name(a),
                seed=derive_seed(self.args.seed, stream, step, int(index), a),
            )
            for i, index in enumerate(item_indices)
            for a in range(self.num_agents)
        ]
        results = self.backend.generate(requests, self.sampling_params(n)) if requests else []
        out = []
        for i, (item, index) in enumerate(zip(items, item_indices)):
            row = results[i * self.num_agents : (i + 1) * self.num_agents]
            texts = [
                _prompt_text(p, row[a][0] if row[a] else None, self.tokenizers[a])
                for a, p in enumerate(prompts[i])
            ]
            out.append(ItemSample(item, int(index), prompts[i], texts, [list(c) for c in row]))
        return out

    def score(self, sample: ItemSample, candidates: Sequence[Sequence[Any]] | None = None) -> OracleScores:
        """The oracle's scores of an item's joint candidates (``sample.candidates`` by default)."""
        return self.oracle.score(
            sample.candidates if candidates is None else candidates,
            prompts=sample.prompt_texts,
            item=sample.item,
            item_index=sample.item_index,
        )

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
        checkpoint_interval: int = _UNSET,
        checkpoint_total_limit: int | None = _UNSET,
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
        plan = self._checkpoint_plan(
            resume_from_checkpoint, checkpoint_dir, checkpoint_interval, checkpoint_total_limit
        )
        self._sampling_overrides = _generation_overrides(generation_kwargs)
        try:
            if plan.resume_from is not None:
                self.load_checkpoint(plan.resume_from)
            else:
                self.reset_counters()
                self._start_run()
            self._run(plan)
            self._flush_window()
        finally:
            self._sampling_overrides = {}

    def _run(self, plan: CheckpointPlan) -> None:
        """The training loop of one ``train()`` call; call :meth:`_commit` at each commit point."""
        raise NotImplementedError

    def _start_run(self) -> None:
        """Hook: a fresh (not resumed) ``train()`` is about to start."""

    # ------------------------------------------------------------------------------------ evaluation
    def evaluate(self, num_eval_samples: int | None = None) -> dict[str, float]:
        """Sample one joint response per evaluation item from the current policies and score it with the
        task reward; returns (and logs) ``eval/turn_1/reward_mean``, ``eval/turn_1/expected_return`` and
        ``eval/<key>`` for the ``eval_aggregator``'s keys. ``{}`` without an ``eval_dataset``."""
        if self.eval_dataset is None:
            return {}
        count = self.args.eval_num_samples if num_eval_samples is None else num_eval_samples
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"`num_eval_samples` must be an integer >= 0, got {count!r}")
        items = self.eval_dataset[:count]
        if not items:
            return {}
        rewards: list[float] = []
        texts: list[list[str]] = [[] for _ in range(self.num_roles or self.num_agents)]
        prompts: list[str] = []
        size = self.args.eval_batch_size
        for start in range(0, len(items), size):
            chunk = items[start : start + size]
            for sample in self.sample_items(
                chunk, list(range(start, start + len(chunk))), n=1, stream="eval", step=self.eval_count
            ):
                rewards += self.task_oracle.score(
                    sample.candidates,
                    prompts=sample.prompt_texts,
                    item=sample.item,
                    item_index=sample.item_index,
                ).processed
                if self.collaboration is not None:
                    roles, role_prompts = self.collaboration.split(sample.candidates[0][0].text, sample.item)
                    for r, text in enumerate(roles):
                        texts[r].append(text)
                    prompts.append(role_prompts[0])
                else:
                    for a in range(self.num_agents):
                        texts[a].append(sample.candidates[a][0].text)
                    prompts.append(sample.prompt_texts[0])
        self.eval_count += 1
        mean = sum(rewards) / len(rewards)
        metrics = {"eval/turn_1/reward_mean": mean, "eval/turn_1/expected_return": mean}
        if self.eval_logger is not None:
            details = self.eval_logger(
                agent_completions_turns=[[[t] for t in agent] for agent in texts],
                batch_items=list(items),
                prompts=prompts,
            )
            if self.eval_aggregator is not None:
                aggregated = self.eval_aggregator(details, num_turns=1)
            else:
                aggregated = _mean_metrics(details)
            for key, value in (aggregated or {}).items():
                metrics[f"eval/{key}"] = value
        self._log(metrics)
        return metrics

    def _maybe_evaluate(self) -> None:
        interval = self.args.eval_interval
        if interval > 0 and self.eval_dataset is not None and self.updates_seen % interval == 0:
            self.evaluate()

    # ------------------------------------------------------------------------------------ logging
    @property
    def metrics_logger(self):
        """The trainer's :class:`~comlrl.reporting.MetricsLogger`, created on first use with a fresh
        ``output_dir/metrics.jsonl`` (a resume then rewrites it from the checkpoint's history)."""
        if self._metrics_logger is None:
            from comlrl.reporting import MetricsLogger

            wandb_kwargs = _wandb_init_kwargs(self.wandb_config)
            self._metrics_logger = MetricsLogger(
                self.args.output_dir,
                self.args.report_to,
                run_name=self.args.run_name,
                config=wandb_run_config(self.args.to_dict(), self.wandb_config),
                wandb_kwargs=wandb_kwargs,
                tensorboard_dir=self.args.resolved_logging_dir,
            )
            # One trainer, one log: lines left by an earlier run in the same output_dir are dropped.
            atomic_write_text(self._metrics_logger.path, "")
        return self._metrics_logger

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
        self.env_step += int(env_steps)
        for key, value in metrics.items():
            self._window[key].append(float(value))
        if self.x_step - self._last_log_x >= self.args.logging_steps:
            self._flush_window()

    def record_nonfinite(self, where: str) -> None:
        """Count a skipped non-finite loss; too many in a row stop the run."""
        self.nonfinite_losses_skipped += 1
        self.nonfinite_in_a_row += 1
        logger.warning("non-finite loss at %s skipped (%d so far)", where, self.nonfinite_losses_skipped)
        self._log({"nonfinite_losses_skipped": self.nonfinite_losses_skipped})
        limit = self.args.max_nonfinite_losses_in_a_row
        if self.nonfinite_in_a_row >= limit:
            raise RuntimeError(
                f"{self.nonfinite_in_a_row} non-finite losses in a row (limit "
                f"`max_nonfinite_losses_in_a_row`={limit}), the last at {where}; check the learning rate, "
                "the dtype and the models' outputs"
            )

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
        return {"nonfinite_losses_skipped": self.nonfinite_losses_skipped, "updates": self.updates_seen}

    @contextmanager
    def _progress(self, total: int | None = None, desc: str = "", unit: str = "it"):
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc=desc, unit=unit, leave=False, disable=not self.verbose)
        try:
            yield bar
        finally:
            bar.close()

    # ------------------------------------------------------------------------------------ save_model
    def save_model(self, output_dir: str | os.PathLike) -> Path:
        """Write ``output_dir/agent_i/`` for every agent (model and tokenizer ``save_pretrained``; a LoRA
        agent's folder holds its adapter and tokenizer, the base goes to ``output_dir/base/``), plus the
        policy layout (``MultiAgentPolicy.load(output_dir)`` rebuilds the team)."""
        from comlrl.policy.lora import save_adapter, save_base

        output_dir = Path(output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        self.policy.save(output_dir)
        written_base = False
        for i, agent in enumerate(self.agent_names):
            target = output_dir / f"agent_{i}"
            handle = self.policy.handle(agent)
            if handle.adapter is None and handle.name == target.name:
                continue  # the policy's own folder already is agent_i
            if target.exists():
                shutil.rmtree(target)
            if handle.adapter is not None:
                save_adapter(handle.model, handle.adapter, target)
                if not written_base:
                    save_base(handle.model, output_dir / "base")
                    handle.tokenizer.save_pretrained(output_dir / "base")
                    written_base = True
            else:
                handle.model.save_pretrained(target)
            handle.tokenizer.save_pretrained(target)
        if self._metrics_logger is not None and "wandb" in self.args.report_to:
            self._log({"final_model_saved": 1})
        return output_dir

    # ------------------------------------------------------------------------------------ checkpoints
    def _checkpoint_plan(self, resume, directory, interval, total_limit) -> CheckpointPlan:
        given = (
            resume not in (None, False)
            or directory is not None
            or interval is not _UNSET
            or total_limit is not _UNSET
        )
        interval = 1 if interval is _UNSET else interval
        total_limit = (
            self.args.save_total_limit if total_limit is _UNSET or total_limit is None else total_limit
        )
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ValueError(f"`checkpoint_interval` must be a positive integer, got {interval!r}")
        if total_limit is not None and (
            isinstance(total_limit, bool) or not isinstance(total_limit, int) or total_limit < 1
        ):
            raise ValueError(
                f"`checkpoint_total_limit` must be a positive integer or None, got {total_limit!r}"
            )
        if not given:
            return CheckpointPlan(directory=None)
        base = Path(directory if directory is not None else self.args.output_dir)
        resume_from = None
        if resume not in (None, False):
            resume_from = _find_checkpoint(base if resume is True else Path(resume), resume)
        return CheckpointPlan(base, interval, total_limit, resume_from)

    def _commit(self, plan: CheckpointPlan, boundary: int, *, last: bool, force: bool = False) -> None:
        if plan.directory is None:
            return
        if force or last or boundary % plan.interval == 0:
            self.save_checkpoint(plan.directory, step=boundary, total_limit=plan.total_limit)

    def save_checkpoint(
        self,
        output_dir: str | os.PathLike | None = None,
        *,
        step: int | None = None,
        total_limit: int | None = None,
    ) -> Path:
        """Write ``checkpoint-{step}/`` (default: the last commit point) with everything needed to continue
        exactly: weights or adapters, optimizer states, every random stream, the data cursor, counters,
        the metrics so far and the trainer's payloads (collected pairs, replay rounds, comparator state)."""
        directory = Path(output_dir if output_dir is not None else self.args.output_dir)
        step = self._cursor_step() if step is None else step
        state = TrainerState(
            step=int(step),
            data_cursor=dict(self._cursor),
            log_history=list(self.metrics_logger.history),
            extra={"trainer": type(self).__name__, "config": _json_config(self.args), **self.state_extra()},
        )
        return save_checkpoint(
            directory,
            state,
            policy=self.policy,
            optimizers=self.optimizers_by_policy,
            extra=self.checkpoint_payloads(),
            save_total_limit=total_limit,
        )

    def _cursor_step(self) -> int:
        return int(self._cursor.get("epochs_done", 0))

    def load_checkpoint(self, path: str | os.PathLike) -> TrainerState:
        """Restore a checkpoint written by :meth:`save_checkpoint` into this trainer."""
        path = _find_checkpoint(Path(path), path)
        saved = read_trainer_state(path)
        trainer = saved.extra.get("trainer")
        if trainer != type(self).__name__:
            raise ValueError(f"checkpoint {path} was written by {trainer}, not {type(self).__name__}")
        _check_config_matches(saved.extra.get("config", {}), self.args, path)
        state = load_checkpoint(path, policy=self.policy, optimizers=self.optimizers_by_policy)
        self._cursor = dict(state.data_cursor or {})
        self.load_state_extra(state.extra)
        self.restore_payloads(path)
        self.metrics_logger.history = [dict(r) for r in state.log_history]
        atomic_write_text(self.metrics_logger.path, "".join(json.dumps(r) + "\n" for r in state.log_history))
        return state

    def state_extra(self) -> dict[str, Any]:
        """JSON counters kept in ``trainer_state.json`` (subclasses add theirs and call super)."""
        return {
            "env_step": self.env_step,
            "updates_seen": self.updates_seen,
            "eval_count": self.eval_count,
            "nonfinite_losses_skipped": self.nonfinite_losses_skipped,
            "nonfinite_in_a_row": self.nonfinite_in_a_row,
            "last_log_x": self._last_log_x,
        }

    def load_state_extra(self, extra: Mapping[str, Any]) -> None:
        self.env_step = int(extra["env_step"])
        self.updates_seen = int(extra["updates_seen"])
        self.eval_count = int(extra["eval_count"])
        self.nonfinite_losses_skipped = int(extra["nonfinite_losses_skipped"])
        self.nonfinite_in_a_row = int(extra["nonfinite_in_a_row"])
        self._last_log_x = int(extra["last_log_x"])
        self._window = defaultdict(list)

    def checkpoint_payloads(self) -> dict[str, Callable[[Path], None]]:
        """``{name: writer(folder)}`` payloads of a checkpoint (``extra/<name>/``); none here."""
        return {}

    def restore_payloads(self, checkpoint: Path) -> None:
        """Read back what :meth:`checkpoint_payloads` wrote (called after weights and counters)."""


# ---------------------------------------------------------------------------------------- centralized


class CentralizedCollaboration:
    """``collaboration_mode="centralized"``: one actor writes every role's response in one joint completion.

    The actor's prompt is ``adapter.build_prompt(item, [role formatter(item) for each role])``; each joint
    completion is split into role responses with ``adapter.parse_completion(text, item, num_roles)`` before
    the task reward sees it (with ``prompts=[role 0's prompt]``). A completion that cannot be parsed
    (the adapter raises a ``ValueError``, e.g. ``CentralizedComparatorParseError``) gives every role an
    empty response and is counted in :attr:`parse_failures`; it never stops the run.
    """

    def __init__(self, adapter: Any, role_formatters: Sequence[Callable[[Any], Any]]) -> None:
        self.adapter = adapter
        self.role_formatters = list(role_formatters)
        self.num_roles = len(self.role_formatters)
        self.parse_failures = 0

    def role_prompts(self, item: Any) -> list[Any]:
        return [f(item) for f in self.role_formatters]

    def joint_prompt(self, item: Any) -> str:
        prompt = self.adapter.build_prompt(item, self.role_prompts(item))
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(
                "`centralized_comparator_adapter.build_prompt` must return a non-empty string, "
                f"got {prompt!r}"
            )
        return prompt

    def split(self, text: str, item: Any) -> tuple[list[str], list[Any]]:
        """(role responses, role prompts) of one joint completion."""
        try:
            roles = self.adapter.parse_completion(text, item, self.num_roles)
        except ValueError:
            self.parse_failures += 1
            return [""] * self.num_roles, self.role_prompts(item)
        if isinstance(roles, str) or not isinstance(roles, Sequence) or len(roles) != self.num_roles:
            raise ValueError(
                f"`centralized_comparator_adapter.parse_completion` must return exactly {self.num_roles} "
                f"outputs; got {roles!r}"
            )
        return [str(r) for r in roles], self.role_prompts(item)

    def wrap_oracle(self, oracle: Oracle) -> _CentralizedOracle:
        return _CentralizedOracle(self, oracle)


class _CentralizedOracle:
    """Scores joint completions of the one actor by splitting them into roles first."""

    def __init__(self, collaboration: CentralizedCollaboration, oracle: Oracle) -> None:
        self.collaboration = collaboration
        self.oracle = oracle

    def score(self, completions, *, prompts=None, item=None, item_index=None) -> OracleScores:
        (joint,) = completions
        roles: list[list[str]] = [[] for _ in range(self.collaboration.num_roles)]
        role_prompts: list[Any] = []
        for completion in joint:
            text = completion if isinstance(completion, str) else completion.text
            parts, role_prompts = self.collaboration.split(text, item)
            for r, part in enumerate(parts):
                roles[r].append(part)
        if not joint:
            return OracleScores(raw=[], processed=[])
        texts = [p if isinstance(p, str) else json.dumps(p) for p in role_prompts]
        return self.oracle.score(roles, prompts=texts, item=item, item_index=item_index)


# ---------------------------------------------------------------------------------------- helpers


def _apply_wandb_config(args: Any, wandb_config: Mapping[str, Any] | None) -> Any:
    """``wandb_config`` (a dict) turns on ``report_to="wandb"``; its name fills ``run_name`` when unset and
    ``config_sections.output.verbose=False`` hides progress bars."""
    if wandb_config is None:
        return args
    if not isinstance(wandb_config, Mapping):
        raise ValueError(f"`wandb_config` must be a dict or None, got {type(wandb_config).__name__}")
    changes: dict[str, Any] = {}
    if "wandb" not in args.report_to:
        changes["report_to"] = [*args.report_to, "wandb"]
    name = wandb_config.get("name") or wandb_config.get("run_name")
    if name and args.run_name is None:
        changes["run_name"] = str(name)
    wandb_run_config(args.to_dict(), wandb_config)  # checks `config_sections` now, not at the first log
    sections = wandb_config.get("config_sections") or {}
    verbose = (sections.get("output") or {}).get("verbose", True)
    if verbose is False:
        changes["disable_tqdm"] = True
    return dataclasses.replace(args, **changes) if changes else args


def wandb_run_config(args: Mapping[str, Any], wandb_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The W&B run config: the trainer's arguments with ``wandb_config["config_sections"]`` merged in
    (each section a top-level key, as the public CoMLRL does, so runs record e.g. the dataset section)."""
    sections = (wandb_config or {}).get("config_sections") or {}
    if not isinstance(sections, Mapping):
        raise ValueError(f"`wandb_config['config_sections']` must be a dict, got {type(sections).__name__}")
    clashes = sorted(set(sections) & set(args))
    if clashes:
        raise ValueError(f"`wandb_config['config_sections']` keys {clashes} clash with trainer arguments")
    return {**dict(args), **{str(k): v for k, v in sections.items()}}


def _wandb_init_kwargs(wandb_config: Mapping[str, Any] | None) -> dict[str, Any]:
    if not wandb_config:
        return {}
    out = {
        k: wandb_config[k] for k in ("project", "entity", "dir", "tags", "id", "resume") if k in wandb_config
    }
    name = wandb_config.get("name") or wandb_config.get("run_name")
    if name:
        out["name"] = name
    return out


def _check_adapter(adapter: Any) -> Any:
    """The adapter (TypeError naming a missing method); None gives the tagged adapter."""
    from comlrl.trainers.preference.comparators.centralized import check_adapter

    return check_adapter(adapter)


def _agent_sources(agent_model: Any, agents: Sequence[Any] | None, num_agents: int) -> list[Any]:
    """One model source per agent from the public ``agent_model`` / ``agents`` keywords."""
    if agent_model is None and agents is None:
        raise ValueError("Either `agent_model` or `agents` must be provided")
    if agents is None:
        if not isinstance(agent_model, (str, os.PathLike, nn.Module)):
            raise ValueError(
                "`agent_model` must be a model name, a local path or a model object to create homogeneous "
                f"agents, got {type(agent_model).__name__}"
            )
        return [agent_model] * num_agents
    if isinstance(agents, (str, os.PathLike, nn.Module)) or not isinstance(agents, Sequence):
        raise ValueError(
            f"`agents` must be a list of model names or model objects, got {type(agents).__name__}"
        )
    agents = list(agents)
    if not agents:
        raise ValueError("`agents` must name at least one model")
    if agent_model is None:
        return agents
    if not isinstance(agent_model, (str, os.PathLike)) or any(
        not isinstance(a, (str, os.PathLike)) or str(a) != str(agent_model) for a in agents
    ):
        raise ValueError(
            "`agent_model` and `agents` conflict: give one of them, or the same model name in both"
        )
    return [agent_model] * num_agents


def _source_name(source: Any) -> str | None:
    """The name an actor was given by (preset, path or hub id); for a model object, its ``name_or_path``
    only when that is a local folder (never a ``model_type`` or class name); else None."""
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    folder = getattr(source, "name_or_path", "") or ""
    return str(folder) if folder and Path(folder).is_dir() else None


def _source_key(source: Any) -> Any:
    return id(source) if isinstance(source, nn.Module) else str(source)


def _model_loading_options(model_config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    nested = dict(model_config.get("model_kwargs") or {})
    kwargs: dict[str, Any] = {}
    for key in ("dtype", "torch_dtype"):
        value = model_config.get(key, nested.get(key))
        if value is not None:
            if isinstance(value, str) and value != "auto":
                if not isinstance(getattr(torch, value, None), torch.dtype):
                    raise ValueError(f"`model_config[{key!r}]` names no torch dtype: {value!r}")
                value = getattr(torch, value)
            kwargs["dtype"] = value
    attn = model_config.get("attn_implementation", nested.get("attn_implementation"))
    if attn is not None:
        kwargs["attn_implementation"] = attn
    special = model_config.get("special_tokens") or []
    if isinstance(special, Mapping):
        special = list(special.get("additional_special_tokens", [])) + [
            v for k, v in special.items() if k != "additional_special_tokens" and isinstance(v, str)
        ]
    if isinstance(special, str) or not all(isinstance(t, str) for t in special):
        raise ValueError(f"`model_config['special_tokens']` must be a list of strings, got {special!r}")
    return kwargs, list(special)


def _tokenizer_list(tokenizer: Any, count: int) -> list[Any]:
    if isinstance(tokenizer, (list, tuple)):
        if len(tokenizer) == 1:
            return list(tokenizer) * count
        if len(tokenizer) != count:
            raise ValueError(
                f"`tokenizer` must be one tokenizer or a list of {count} (one per agent), "
                f"got {len(tokenizer)}"
            )
        return list(tokenizer)
    return [tokenizer] * count


def _resolve_devices(spec: Any, count: int, parallel_training: str) -> list[str]:
    """One device per agent from ``agent_devices`` (the public rules)."""
    if spec is None or spec == "auto":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        devices = (
            [f"cuda:{i}" for i in range(count)]
            if gpus >= count
            else (["cuda:0"] * count if gpus else ["cpu"] * count)
        )
    elif isinstance(spec, str):
        devices = [spec] * count
    elif len(spec) == 1:
        devices = list(spec) * count
    elif len(spec) == count:
        devices = list(spec)
    else:
        raise ValueError(f"`agent_devices` must have 1 or {count} entries, got {len(spec)}")
    if parallel_training == "none":
        devices = [devices[0]] * count
    return [str(d) for d in devices]


def _load_one(source: Any, tokenizer: Any, device: str, load_kwargs: dict, args: Any, field: str):
    from transformers import AutoModelForCausalLM

    from comlrl.models import load_tokenizer, resolve_model_path
    from comlrl.models.loading import default_dtype

    if isinstance(source, nn.Module):
        model = source
        if args.agent_devices is not None:
            model = model.to(device)
        if "dtype" in load_kwargs and load_kwargs["dtype"] != "auto":
            model = model.to(load_kwargs["dtype"])
        if tokenizer is None:
            folder = getattr(model, "name_or_path", "") or ""
            if not folder or not Path(folder).is_dir():
                raise ValueError(
                    f"`tokenizer` must be provided when agents are model objects (`{field}` was not loaded "
                    "from a local folder)"
                )
            tokenizer = load_tokenizer(folder)
    elif isinstance(source, (str, os.PathLike)):
        path = resolve_model_path(source, seed=args.seed)
        kwargs = {"dtype": default_dtype(device), **load_kwargs}
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs).to(device)
        if tokenizer is None:
            tokenizer = load_tokenizer(path, seed=args.seed)
    else:
        raise ValueError(
            f"`{field}` must be a model name, a local path or a model object, got {type(source).__name__}"
        )
    if isinstance(tokenizer, (str, os.PathLike)):
        tokenizer = load_tokenizer(tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def _add_special_tokens(model: nn.Module, tokenizer: Any, tokens: list[str]) -> None:
    if not tokens:
        return
    tokenizer.add_special_tokens(
        {"additional_special_tokens": tokens}, replace_extra_special_tokens=False
    ) if _accepts_replace_kw(tokenizer) else tokenizer.add_special_tokens(
        {"additional_special_tokens": tokens}
    )
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer))


def _accepts_replace_kw(tokenizer: Any) -> bool:
    import inspect

    try:
        return "replace_extra_special_tokens" in inspect.signature(tokenizer.add_special_tokens).parameters
    except (TypeError, ValueError):
        return False


def _disable_dropout(model: nn.Module) -> None:
    # TRL's disable_dropout_in_model, without importing trl's trainer stack for three lines.
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    config = getattr(model, "config", None)
    for name in ("attention_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop", "hidden_dropout"):
        if config is not None and isinstance(getattr(config, name, None), float):
            setattr(config, name, 0.0)


@contextmanager
def scoring_mode(model: nn.Module, disable_dropout: bool) -> Iterator[None]:
    """Eval mode while scoring the sampled tokens when ``disable_dropout`` (deterministic log-probs), else
    train mode; the model's mode is restored afterwards."""
    was_training = model.training
    wanted = not disable_dropout
    if was_training == wanted:  # model.train() walks every module: skip it when nothing changes
        yield
        return
    model.train(wanted)
    try:
        yield
    finally:
        model.train(was_training)


def pad_token_id(tokenizer: Any) -> int:
    """The tokenizer's pad id, else its EOS id (padding is masked out of every score)."""
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else tokenizer.eos_token_id)


def _resolve_formatters(formatters: Any, count: int) -> list[Callable[[Any], Any]]:
    if formatters is None:
        return [_default_formatter] * count
    if callable(formatters):
        return [formatters] * count
    if isinstance(formatters, (list, tuple)):
        if len(formatters) != count:
            raise ValueError(
                f"`formatters` must hold one formatter per agent ({count}), got {len(formatters)}"
            )
        for i, f in enumerate(formatters):
            if not callable(f):
                raise ValueError(f"`formatters[{i}]` must be callable, got {type(f).__name__}")
        return list(formatters)
    raise ValueError(
        f"`formatters` must be None, a callable or a list of callables, got {type(formatters).__name__}"
    )


def _default_formatter(item: Any) -> Any:
    try:
        return item["prompt"]
    except (KeyError, TypeError):
        raise ValueError(
            "items need a 'prompt' field when no `formatters` are given "
            f"(got {type(item).__name__} with keys {list(item) if isinstance(item, Mapping) else '-'})"
        ) from None


def _as_items(dataset: Any, name: str) -> list[Any] | None:
    """Dataset items in order: an HF Dataset / IterableDataset or any sequence of dicts."""
    if dataset is None:
        return None
    if isinstance(dataset, (str, bytes, Mapping)):
        raise ValueError(
            f"`{name}` must be a datasets.Dataset or a sequence of dicts, got {type(dataset).__name__}"
        )
    if hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
        items = [dataset[i] for i in range(len(dataset))]
    elif isinstance(dataset, Iterable):
        items = list(dataset)
    else:
        raise ValueError(
            f"`{name}` must be a datasets.Dataset or a sequence of dicts, got {type(dataset).__name__}"
        )
    return items


def _prompt_text(prompt: Any, completion: Completion | None, tokenizer: Any) -> str:
    """A prompt as text for the pair records: text as given; chat messages and ids as rendered."""
    if isinstance(prompt, str):
        return prompt
    if prompt and all(isinstance(m, Mapping) for m in prompt):
        return tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    ids = completion.prompt_token_ids if completion is not None else prompt
    return tokenizer.decode(ids)


def _model_top_k(model: nn.Module) -> int | None:
    config = getattr(model, "generation_config", None)
    value = getattr(config, "top_k", None)
    return int(value) if isinstance(value, int) else None


def _generation_overrides(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key == "do_sample":
            if value is False:
                raise ValueError(
                    "`do_sample=False` is not supported: candidates are always sampled"
                )
            continue
        if key not in _GENERATION_KEYWORDS:
            raise TypeError(
                f"train() got an unexpected keyword argument {key!r}; generation keywords are "
                f"{', '.join(_GENERATION_KEYWORDS)} (and do_sample)"
            )
        if key == "top_k" and value is None:
            continue
        out[key] = tuple(value) if key == "stop" and not isinstance(value, str) else value
    try:
        SamplingParams(**out)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid generation keyword for train(): {exc}") from None
    if out.get("temperature", 1.0) <= 0:
        raise ValueError(f"`temperature` must be > 0 (candidates are sampled), got {out['temperature']}")
    return out


def _find_checkpoint(path: Path, given: Any) -> Path:
    if (path / "trainer_state.json").is_file():
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        raise FileNotFoundError(
            f"`resume_from_checkpoint` {given!r}: no checkpoint at {path} "
            "(expected a checkpoint-N folder or a "
            "folder holding them)"
        )
    return latest


def _json_config(args: Any) -> dict[str, Any]:
    out = {}
    for key, value in args.to_dict().items():
        try:
            json.dumps(value)
        except TypeError:
            value = repr(value)
        out[key] = value
    return out


def _check_config_matches(saved: Mapping[str, Any], args: Any, path: Path) -> None:
    mine = _json_config(args)
    differing = sorted(k for k in saved if k not in _PORTABLE_FIELDS and k in mine and saved[k] != mine[k])
    if differing:
        detail = ", ".join(f"{k}: {saved[k]!r} -> {mine[k]!r}" for k in differing)
        raise ValueError(f"cannot resume from {path}: the config differs in {detail}")


def _mean_metrics(details: Any) -> dict[str, float]:
    if isinstance(details, Mapping):
        return dict(details)
    sums: dict[str, list[float]] = defaultdict(list)
    for row in details or []:
        for key, value in (row or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                sums[key].append(float(value))
    return {key: sum(v) / len(v) for key, v in sums.items()}


def write_json(path: Path, payload: Any) -> None:
    """Atomic JSON write (checkpoint payload helper)."""
    atomic_write_json(path, payload)
