"""The ``eval`` stage and the one held-out evaluation every stage, script and benchmark uses.

Success is the mean over ``num_samples`` independent trajectories per held-out instance (seeds
``seed_start .. seed_start + num_instances - 1``) at ``temperature``; with ``greedy`` the success of one
trajectory per instance at temperature 0 is measured next to it (``greedy_success_rate``). Sampling seeds
come from the engine's ``"eval"`` stream of ``run.seed``, so an evaluation does not depend on what ran
before it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from comlrl.atomic_io import atomic_write_json
from pettingllms.config.loader import ConfigError, section_to_dataclass
from pettingllms.stages.context import StageContext, workflow_env

__all__ = ["EvalSettings", "eval_metrics", "eval_settings", "evaluate_policy", "held_out_evaluations", "run_eval"]


@dataclass
class EvalSettings:
    """The ``eval`` section: which held-out instances, how many samples at which temperature, and whether
    an ``eval_before`` runs ahead of the first RL stage (``before_training``) and greedy success is
    measured too (``greedy``)."""

    num_instances: int = 50
    seed_start: int = 1_000_000
    num_samples: int = 1
    temperature: float = 0.0
    before_training: bool = True
    greedy: bool = False

    def __post_init__(self) -> None:
        for key in ("num_instances", "num_samples"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`eval.{key}` must be an integer >= 1, got {value!r}")
        if self.temperature < 0:
            raise ValueError(f"`eval.temperature` must be >= 0 (0: greedy), got {self.temperature!r}")

    @property
    def seeds(self) -> range:
        """The held-out instance seeds."""
        return range(self.seed_start, self.seed_start + self.num_instances)


def eval_settings(stage: str, config: Mapping[str, Any], stage_dir: Path | None = None, progress: bool = True) -> EvalSettings:
    """The checked ``eval`` section of a resolved run config."""
    return section_to_dataclass(EvalSettings, config["eval"], "eval")


def eval_metrics(result: Any) -> dict[str, float]:
    """Summary of an :class:`~pettingllms.execution.EvalResult`: ``success_rate``, ``num_trajectories``,
    ``dropped``, and per agent role ``agent/<role>/reward_mean`` and ``agent/<role>/parse_error_rate``
    over its decisions."""
    metrics = {
        "success_rate": float(result.success_rate),
        "num_trajectories": float(result.num_trajectories),
        "dropped": float(result.dropped),
    }
    by_role: dict[str, list[Any]] = {}
    for sample in result.samples:
        by_role.setdefault(sample.role, []).append(sample)
    for role, samples in sorted(by_role.items()):
        metrics[f"agent/{role}/reward_mean"] = sum(s.reward for s in samples) / len(samples)
        metrics[f"agent/{role}/parse_error_rate"] = sum(s.parse_error is not None for s in samples) / len(samples)
    return metrics


def held_out_evaluations(
    policy: Any, config: Mapping[str, Any], env_worker: Any = None, settings: EvalSettings | None = None
) -> dict[str, Any]:
    """``{"sampled": EvalResult, "greedy": EvalResult}`` of ``policy`` on the config's held-out instances
    (``greedy`` only with ``eval.greedy``), played by the run's workflow."""
    from pettingllms.execution import EngineConfig, RolloutEngine, build_router

    settings = settings if settings is not None else eval_settings("eval", config)
    name, fields, options = workflow_env(config)
    if list(policy.agents) != fields["turn_order"]:
        raise ConfigError(
            f"the policy's agents {list(policy.agents)} do not match the config's roles {fields['turn_order']} "
            f"(`env.turn_order` at `policy.level` {config['policy']['level']})"
        )
    rollout = config["rollout"]
    engine = RolloutEngine.from_registry(
        name,
        fields,
        build_router(policy),
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
    results = {"sampled": engine.evaluate(seeds, settings.num_samples, float(settings.temperature))}
    if settings.greedy:
        results["greedy"] = engine.evaluate(seeds, 1, 0.0)
    return results


def evaluate_policy(
    policy: Any, config: Mapping[str, Any], env_worker: Any = None, settings: EvalSettings | None = None
) -> tuple[dict[str, float], dict]:
    """Success of ``policy`` on the config's held-out ``eval`` instances: ``(metrics, report)``.

    ``metrics`` is :func:`eval_metrics` of the sampled evaluation, plus ``greedy_success_rate`` with
    ``eval.greedy``. ``report`` is JSON-ready: the metrics, the instance seeds, ``num_samples``,
    ``temperature``, the success rate of each instance and, with ``eval.greedy``, the greedy ones.
    """
    settings = settings if settings is not None else eval_settings("eval", config)
    results = held_out_evaluations(policy, config, env_worker, settings)
    metrics = eval_metrics(results["sampled"])
    report: dict[str, Any] = {
        "metrics": metrics,
        "seeds": [settings.seeds.start, settings.seeds.stop],
        "num_samples": settings.num_samples,
        "temperature": float(settings.temperature),
        "per_problem": _per_problem(results["sampled"]),
    }
    if "greedy" in results:
        metrics["greedy_success_rate"] = float(results["greedy"].success_rate)
        report["greedy"] = {"per_problem": _per_problem(results["greedy"])}
    return metrics, report


def _per_problem(result: Any) -> dict[str, float]:
    return {str(k): v for k, v in result.per_problem.items()}


def run_eval(context: StageContext) -> dict[str, float]:
    """Held-out success; writes ``eval.json`` (with per-instance rates) and the stage's metrics."""
    settings = context.settings_or(eval_settings)
    metrics, report = evaluate_policy(context.policy, context.config, context.env_worker, settings)
    atomic_write_json(context.stage_dir / "eval.json", report)
    logger = context.metrics_logger()
    try:
        logger.log({f"eval/{k}": v for k, v in metrics.items()}, step=0)
    finally:
        logger.close()
    return metrics
