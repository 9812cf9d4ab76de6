"""The ``eval`` stage and the one held-out evaluation every stage, script and benchmark uses.

Success is the mean over ``num_samples`` independent trajectories per held-out instance (seeds
``seed_start .. seed_start + num_instances - 1``) at ``temperature``; with ``greedy`` the success of one
trajectory per instance at temperature 0 is measured next to it (``greedy_success_rate``). Sampling seeds
come from the engine's ``"eval"`` stream of ``run.seed``, so an evaluation does not depend on what ran
before it.

Every evaluation (this stage's ``eval.json``, ``pettingllms eval``'s report) is one JSON report, made by
:func:`evaluate_policy`: ``metrics`` (:func:`eval_metrics`: ``success_rate``, ``num_problems``, and with
``num_samples`` > 1 the unbiased ``pass@<k>``), ``confidence_intervals`` (95 % Wilson intervals of
``pass@<k>`` over the problems, :func:`~pettingllms.execution.pass_at_k.pass_at_k_intervals`),
``per_problem`` (success rate per instance seed), and the
settings it ran with: ``seeds`` ([start, stop)), ``num_samples``, ``temperature``, ``run_seed``, and
where the caller knows them the ``policy`` evaluated and the ``config``. :func:`eval_summary` states all
of it in one line.

Several benchmarks (``eval.benchmarks``, :mod:`pettingllms.config.benchmarks`): :func:`eval_plan` gives each
benchmark's config and settings (``eval_before`` capped at ``eval.before_training_instances``), and
:func:`evaluate_benchmarks` evaluates them in turn into one report with a block per benchmark; without
``eval.benchmarks`` it is :func:`evaluate_policy`'s report of the run's own ``env.split``, unchanged.

Data-parallel runs (``accelerate launch`` / ``torchrun``): every rank plays every held-out instance (the
ranks hold the same weights, so they get the same result; an evaluation is small next to training), and
rank 0 alone writes ``eval.json`` and the stage's metrics and shows the progress bar.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from comlrl.atomic_io import atomic_write_json
from pettingllms.agents.failures import failure_counts
from pettingllms.config.benchmarks import Benchmark, benchmark_configs
from pettingllms.config.loader import RESOLVED_CONFIG_FILE, ConfigError, section_to_dataclass
from pettingllms.execution.pass_at_k import CONFIDENCE, mean_pass_at_k, pass_at_k_intervals, pass_at_k_sizes
from pettingllms.execution.router import Router
from pettingllms.stages.context import StageContext, run_workflow, workflow_env

__all__ = [
    "EVAL_BEFORE_FOLDER",
    "EvalSettings",
    "PlannedEval",
    "eval_plan",
    "evaluate_benchmarks",
    "eval_metrics",
    "success_counts",
    "eval_settings",
    "eval_summary",
    "evaluate_policy",
    "held_out_evaluations",
    "run_eval",
    "scripted_router",
]

# Written by the pipeline before each stage (pettingllms.pipeline.PIPELINE_STATE_FILE; the pipeline
# imports this module, so the name cannot be imported from there).
_PIPELINE_STATE_FILE = "pipeline_state.json"
# The folder of the evaluation the pipeline runs right before the first RL stage (eval.before_training).
EVAL_BEFORE_FOLDER = "eval_before"


@dataclass
class EvalSettings:
    """The ``eval`` section: which held-out instances, how many samples at which temperature, whether
    an ``eval_before`` runs ahead of the first RL stage (``before_training``) and greedy success is
    measured too (``greedy``), and the fraction of instances whose episodes are written as transcripts
    (``transcripts_rate``, 0 to 1; every trajectory of a drawn instance, with its states, for
    ``pettingllms show``). The run-wide keys: ``before_training_instances`` (the most instances
    ``eval_before`` and the evaluations inside training play, per benchmark; None: as many as ``eval``),
    ``allow_contamination`` (train although training and evaluation statements overlap,
    :mod:`pettingllms.stages.contamination`) and ``benchmarks`` (:mod:`pettingllms.config.benchmarks`)."""

    num_instances: int = 50
    seed_start: int = 1_000_000
    num_samples: int = 1
    temperature: float = 0.0
    before_training: bool = True
    greedy: bool = False
    transcripts_rate: float = 0.0
    before_training_instances: int | None = None
    allow_contamination: bool = False
    benchmarks: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key in ("num_instances", "num_samples"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`eval.{key}` must be an integer >= 1, got {value!r}")
        limit = self.before_training_instances
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"`eval.before_training_instances` must be an integer >= 1 or null, got {limit!r}")
        if self.temperature < 0:
            raise ValueError(f"`eval.temperature` must be >= 0 (0: greedy), got {self.temperature!r}")
        rate = self.transcripts_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
            raise ValueError(f"`eval.transcripts_rate` must be in [0, 1], got {rate!r}")

    @property
    def seeds(self) -> range:
        """The held-out instance seeds."""
        return range(self.seed_start, self.seed_start + self.num_instances)


def eval_settings(stage: str, config: Mapping[str, Any], stage_dir: Path | None = None, progress: bool = True) -> EvalSettings:
    """The checked ``eval`` section of a resolved run config; ``num_instances: null`` becomes the number of
    instances of the split evaluation plays from ``seed_start`` (a dataset environment's whole test split)."""
    section = dict(config["eval"])
    if section.get("num_instances") is None:
        from pettingllms.config.instances import check_held_out_instances

        section["num_instances"] = len(check_held_out_instances(config, ["eval"])["eval"])
    return section_to_dataclass(EvalSettings, section, "eval")


@dataclass(frozen=True)
class PlannedEval:
    """One benchmark of an evaluation and the settings it plays with."""

    benchmark: Benchmark
    settings: EvalSettings

    @property
    def name(self) -> str | None:
        return self.benchmark.name

    @property
    def config(self) -> Mapping[str, Any]:
        return self.benchmark.config


def eval_plan(stage: str, config: Mapping[str, Any], stage_dir: Path | None = None, progress: bool = True,
              *, limited: bool | None = None) -> list[PlannedEval]:
    """What an eval stage plays: each benchmark of ``eval.benchmarks`` (the run's own ``env.split`` without
    them) with its checked settings. ``limited`` (default: the stage folder is ``eval_before``) caps every
    benchmark's instances at ``eval.before_training_instances``. A bad entry or a dataset file that is
    missing is a ConfigError naming the key."""
    if limited is None:
        limited = stage_dir is not None and Path(stage_dir).name == EVAL_BEFORE_FOLDER
    plan = []
    for benchmark in benchmark_configs(config):
        where = f"eval.benchmarks.{benchmark.name}" if benchmark.name is not None else "eval"
        try:
            settings = eval_settings(stage, benchmark.config, stage_dir, progress)
        except ConfigError as error:
            if benchmark.name is None:
                raise
            raise ConfigError(f"`{where}`: {error}") from error
        limit = settings.before_training_instances
        if limited and limit is not None and settings.num_instances > limit:
            settings = replace(settings, num_instances=limit)
        plan.append(PlannedEval(benchmark, settings))
    return plan


def success_counts(result: Any) -> list[tuple[int, int]]:
    """``(trajectories kept, successes)`` per problem of an :class:`~pettingllms.execution.EvalResult`
    (dropped trajectories left out)."""
    counts: dict[int, list[int]] = {}
    for outcome in result.outcomes:
        if not outcome.dropped:
            entry = counts.setdefault(outcome.problem_id, [0, 0])
            entry[0] += 1
            entry[1] += bool(outcome.success)
    return [(n, c) for n, c in counts.values()]


def eval_metrics(result: Any) -> dict[str, float]:
    """Summary of an :class:`~pettingllms.execution.EvalResult`: ``success_rate``, ``num_problems`` (the
    instances scored), ``num_trajectories``, ``dropped``, per agent role ``agent/<role>/reward_mean`` and
    ``agent/<role>/parse_error_rate`` over its decisions, ``agent/<role>/failures/<label>`` (its samples per
    model failure that occurred, e.g. ``verify_timeout``), and, with several trajectories per instance,
    the unbiased ``pass@<k>`` (:mod:`pettingllms.execution.pass_at_k`) for ``k`` = 1, 2, 4, ... up to
    the number of trajectories, and that number itself."""
    metrics = {
        "success_rate": float(result.success_rate),
        "num_problems": float(len(result.per_problem)),
        "num_trajectories": float(result.num_trajectories),
        "dropped": float(result.dropped),
    }
    counts = success_counts(result)
    most = max((n for n, _ in counts), default=1)
    if most > 1:
        metrics.update(mean_pass_at_k(counts, pass_at_k_sizes(most)))
    by_role: dict[str, list[Any]] = {}
    for sample in result.samples:
        by_role.setdefault(sample.role, []).append(sample)
    for role, samples in sorted(by_role.items()):
        metrics[f"agent/{role}/reward_mean"] = sum(s.reward for s in samples) / len(samples)
        metrics[f"agent/{role}/parse_error_rate"] = sum(s.parse_error is not None for s in samples) / len(samples)
        metrics.update(failure_counts(samples, f"agent/{role}/"))
    return metrics


def scripted_router(config: Mapping[str, Any], name: str) -> Router:
    """A router that plays every role of the config's workflow with the environment's scripted policy
    ``name`` (one of its ``scripted_policies``, e.g. ``oracle``), no model involved; a name the
    environment does not declare is a ConfigError listing those it has, and so is a policy whose
    ``check_instances(env, seeds)`` refuses the eval instances (the code oracle without reference solutions)."""
    from pettingllms.execution import ScriptedBackend
    from pettingllms.registry import get_env_class
    from pettingllms.scripted import make_scripted_policy

    try:
        policy = make_scripted_policy(get_env_class(config["env"]["name"]), name)
    except ValueError as error:
        raise ConfigError(str(error)) from error
    check = getattr(policy, "check_instances", None)
    if check is not None:  # a policy that cannot play some instances says so before the first episode
        from pettingllms.config.instances import stage_env

        try:
            check(stage_env(config, "eval"), eval_settings("eval", config).seeds)
        except ValueError as error:
            raise ConfigError(f"scripted policy {name!r}: {error}") from error
    label = f"scripted:{name}"
    return Router({role: label for role in run_workflow(config)}, ScriptedBackend({label: policy}))


@contextmanager
def _progress(description: str, total: int, enabled: bool) -> Iterator[Any]:
    """A progress bar on stderr over ``total`` trajectories, as an ``on_progress`` hook (None: off)."""
    if not enabled:
        yield None
        return
    from tqdm.auto import tqdm

    with tqdm(total=total, desc=description, unit="traj", leave=False, dynamic_ncols=True) as bar:

        def update(finished: Sequence[Any], trajectories: int) -> None:
            bar.update(len(finished) - bar.n)  # called every decision point: the clock moves too
            if len(finished) == trajectories:
                bar.refresh()  # the final count, which the rate limit of update may have skipped

        yield update


def held_out_evaluations(
    policy: Any,
    config: Mapping[str, Any],
    env_worker: Any = None,
    settings: EvalSettings | None = None,
    progress: bool = False,
    transcripts_dir: str | Path | None = None,
) -> dict[str, Any]:
    """``{"sampled": EvalResult, "greedy": EvalResult}`` of ``policy`` (a
    :class:`~comlrl.policy.MultiAgentPolicy`, or a :class:`~pettingllms.execution.Router` such as
    :func:`scripted_router`'s) on the config's held-out instances (``greedy`` only with ``eval.greedy``),
    played by the run's workflow. ``progress`` shows a bar per evaluation on stderr. With
    ``transcripts_dir`` and ``eval.transcripts_rate`` > 0, the sampled evaluation's drawn episodes are
    written to ``transcripts_dir/rollouts.jsonl`` (replacing an earlier evaluation's), states cut to
    ``rollout.transcript_state_max_chars``."""
    from pettingllms.execution import EngineConfig, RolloutEngine, TranscriptWriter, build_router

    settings = settings if settings is not None else eval_settings("eval", config)
    name, fields, options = workflow_env(config)
    router = policy if isinstance(policy, Router) else build_router(policy)
    if router.roles != fields["turn_order"]:
        raise ConfigError(
            f"the policy's agents {router.roles} do not match the config's roles {fields['turn_order']} "
            f"(`env.turn_order` at `policy.level` {config['policy']['level']})"
        )
    rollout = config["rollout"]
    engine = RolloutEngine.from_registry(
        name,
        fields,
        router,
        EngineConfig(
            num_generations=1,
            sampling_mode="independent",
            top_p=rollout["top_p"],
            max_completion_length=rollout["max_completion_length"],
            seed=config["run"]["seed"],
        ),
        agent_options=options,
        env_worker=env_worker,
    )
    seeds = list(settings.seeds)
    writer = None
    if transcripts_dir is not None and settings.transcripts_rate > 0:
        writer = TranscriptWriter(
            transcripts_dir, settings.transcripts_rate, config["run"]["seed"],
            rollout.get("transcript_state_max_chars"),
        )
    with _progress("eval", len(seeds) * settings.num_samples, progress) as hook:
        results = {"sampled": engine.evaluate(
            seeds, settings.num_samples, float(settings.temperature), on_progress=hook, transcripts=writer
        )}
    if writer is not None:
        results["transcripts"] = writer.path
    if settings.greedy:
        with _progress("eval (greedy)", len(seeds), progress) as hook:
            results["greedy"] = engine.evaluate(seeds, 1, 0.0, on_progress=hook)
    return results


def evaluate_policy(
    policy: Any,
    config: Mapping[str, Any],
    env_worker: Any = None,
    settings: EvalSettings | None = None,
    *,
    progress: bool = False,
    policy_name: str | None = None,
    config_name: str | None = None,
    transcripts_dir: str | Path | None = None,
) -> tuple[dict[str, float], dict]:
    """Success of ``policy`` on the config's held-out ``eval`` instances: ``(metrics, report)``.

    ``metrics`` is :func:`eval_metrics` of the sampled evaluation, plus ``greedy_success_rate`` with
    ``eval.greedy``. ``report`` is JSON-ready (see the module docstring): the metrics, the success rate
    of each instance (and, with ``eval.greedy``, the greedy ones) and the settings; ``policy_name`` and
    ``config_name`` say what was evaluated on what (recorded when given). With ``transcripts_dir`` the
    episodes ``eval.transcripts_rate`` draws are written there (:func:`held_out_evaluations`) and the
    report names the file (``transcripts``).
    """
    settings = settings if settings is not None else eval_settings("eval", config)
    results = held_out_evaluations(policy, config, env_worker, settings, progress, transcripts_dir)
    metrics = eval_metrics(results["sampled"])
    counts = success_counts(results["sampled"])
    report: dict[str, Any] = {
        "format_version": 1,  # of this report's layout; bumped when a key changes meaning
        "metrics": metrics,
        "confidence_intervals": {
            "level": CONFIDENCE,
            "method": "wilson over problems",
            **pass_at_k_intervals(counts, pass_at_k_sizes(max((n for n, _ in counts), default=1))),
        },
        "per_problem": _per_problem(results["sampled"]),
        "seeds": [settings.seeds.start, settings.seeds.stop],
        "num_samples": settings.num_samples,
        "temperature": float(settings.temperature),
        "run_seed": config["run"]["seed"],
    }
    if policy_name is not None:
        report["policy"] = policy_name
    if config_name is not None:
        report["config"] = config_name
    if "transcripts" in results:
        report["transcripts"] = str(results["transcripts"])
    if "greedy" in results:
        metrics["greedy_success_rate"] = float(results["greedy"].success_rate)
        report["greedy"] = {"per_problem": _per_problem(results["greedy"])}
    return metrics, report


def evaluate_benchmarks(
    policy: Any,
    plan: Sequence[PlannedEval],
    env_worker: Any = None,
    *,
    progress: bool = False,
    policy_name: str | None = None,
    config_name: str | None = None,
    transcripts_dir: str | Path | None = None,
) -> tuple[dict[str, float], dict]:
    """:func:`evaluate_policy` over every benchmark of ``plan`` (:func:`eval_plan`): ``(metrics, report)``.

    A plan of the run's own evaluation alone (no ``eval.benchmarks``) gives :func:`evaluate_policy`'s
    metrics and report unchanged. With named benchmarks the report holds one block per benchmark under
    ``benchmarks`` (each an :func:`evaluate_policy` report, transcripts in ``transcripts_dir/<name>/``),
    ``headline`` (the first benchmark: its ``success_rate`` is the run's "success before / after"),
    ``metrics`` (every block's as ``<name>/<metric>``, and the headline's ``success_rate``), ``run_seed``
    and the policy and config evaluated.
    """
    if len(plan) == 1 and plan[0].name is None:
        only = plan[0]
        return evaluate_policy(
            policy, only.config, env_worker, only.settings, progress=progress, policy_name=policy_name,
            config_name=config_name, transcripts_dir=transcripts_dir,
        )
    blocks: dict[str, Any] = {}
    metrics: dict[str, float] = {}
    for planned in plan:
        folder = None if transcripts_dir is None else Path(transcripts_dir) / str(planned.name)
        block_metrics, block = evaluate_policy(
            policy, planned.config, env_worker, planned.settings, progress=progress, transcripts_dir=folder
        )
        block["env"] = _dataset_label(planned.config)
        blocks[str(planned.name)] = block
        metrics.update({f"{planned.name}/{key}": value for key, value in block_metrics.items()})
    headline = str(plan[0].name)
    metrics["success_rate"] = blocks[headline]["metrics"]["success_rate"]
    report: dict[str, Any] = {
        "format_version": 1,
        "headline": headline,
        "metrics": metrics,
        "benchmarks": blocks,
        "run_seed": plan[0].config["run"]["seed"],
    }
    if policy_name is not None:
        report["policy"] = policy_name
    if config_name is not None:
        report["config"] = config_name
    return metrics, report


def _dataset_label(config: Mapping[str, Any]) -> str:
    """``<env>/<dataset>:<split>`` (or the env name of a generated task) of a benchmark's config."""
    env = config["env"]
    if env.get("dataset") is None:
        return str(env["name"])
    return f"{env['name']}/{env['dataset']}:{env.get('split', '?')}"


def eval_summary(report: Mapping[str, Any]) -> str:
    """What an evaluation found, one line per benchmark (a report of :func:`evaluate_benchmarks`): e.g.
    ``success 0.440 on 50 held-out instances (seeds 1000000..1000049) x 4 samples at temperature 1.0 |
    pass@4 0.620 | policy runs/quickstart/policies``, each line of a several-benchmark report led by the
    benchmark's name and dataset."""
    if "benchmarks" in report:
        lines = [f"{name} ({block['env']}): {_one_summary(block)}" for name, block in report["benchmarks"].items()]
        if "policy" in report:
            lines[-1] += f" | policy {report['policy']}"
        return "\n".join(lines)
    return _one_summary(report)


def _one_summary(report: Mapping[str, Any]) -> str:
    metrics = report["metrics"]
    start, stop = report["seeds"]
    samples = report["num_samples"]
    how = ", greedy" if report["temperature"] == 0 else f" at temperature {report['temperature']}"
    parts = [
        f"success {metrics['success_rate']:.3f} on {stop - start} held-out instance{'s' * (stop - start != 1)} "
        f"(seeds {start}..{stop - 1}) x {samples} sample{'s' * (samples != 1)}{how}"
    ]
    intervals = report.get("confidence_intervals", {})
    if "pass@1" in intervals:
        low, high = intervals["pass@1"]
        parts.append(f"{intervals['level']:.0%} interval {low:.3f}..{high:.3f}")
    if f"pass@{samples}" in metrics and samples > 1:
        parts.append(f"pass@{samples} {metrics[f'pass@{samples}']:.3f}")
    if "greedy_success_rate" in metrics:
        parts.append(f"greedy success {metrics['greedy_success_rate']:.3f}")
    if metrics.get("dropped"):
        parts.append(f"{int(metrics['dropped'])} trajectories dropped (infrastructure failures)")
    if "policy" in report:
        parts.append(f"policy {report['policy']}")
    return " | ".join(parts)


def _per_problem(result: Any) -> dict[str, float]:
    return {str(k): v for k, v in result.per_problem.items()}


def _evaluated_policies(context: StageContext) -> str:
    """What the stage evaluates: the policies the last finished training stage saved (the pipeline's
    state says which), else the config's initial model."""
    state_path = context.run_dir / _PIPELINE_STATE_FILE
    saved = []
    if state_path.is_file():
        state = json.loads(state_path.read_text(encoding="utf-8"))
        saved = [entry["policies"] for entry in state.get("completed", []) if entry.get("policies")]
    if saved:
        return str(context.run_dir / saved[-1])
    return f"{context.config['model']['name']} (not trained by this run)"


def run_eval(context: StageContext) -> dict[str, float]:
    """Held-out success on every benchmark; writes ``eval.json`` (the report of :func:`evaluate_benchmarks`), the stage's
    metrics and, with ``eval.transcripts_rate`` > 0, the drawn episodes' transcripts
    (``rollouts.jsonl``, for ``pettingllms show``), all on rank 0 of a data-parallel run. A progress bar
    on stderr with ``run.progress``."""
    from comlrl import distributed as dist

    plan = context.settings_or(eval_plan)
    main = dist.is_main_process()
    metrics, report = evaluate_benchmarks(
        context.router(),
        plan,
        context.env_worker,
        progress=context.progress and main,
        policy_name=_evaluated_policies(context),
        config_name=str(context.run_dir / RESOLVED_CONFIG_FILE),
        transcripts_dir=context.stage_dir if main else None,
    )
    if main:
        atomic_write_json(context.stage_dir / "eval.json", report)
    logger = context.metrics_logger()
    try:
        logger.log({f"eval/{k}": v for k, v in metrics.items()}, step=0)
    finally:
        logger.close()
    return metrics
