"""Pipelines: an ordered list of stages over one set of policies, driven by a resolved run config.

>>> from pettingllms.config import load_config
>>> from pettingllms.pipeline import Pipeline
>>> config = load_config("plan_path/L1", ["model.name=test-tiny", "at_grpo.max_steps=1"])
>>> result = Pipeline(config).run()            # doctest: +SKIP
>>> result.success_before, result.success_after  # doctest: +SKIP

Stages (``pipeline: [...]`` in the config; each reads the config section of its name):

- ``sft``: oracle demonstrations, then supervised fine-tuning of every policy (the warm start);
- ``at_grpo``: :class:`~pettingllms.trainer.ATGRPOTrainer` (tree sampling, per (problem, turn, agent)
  groups); ``grpo``: the same trainer with independent sampling, the single-agent (L0) baseline;
- ``madpo`` / ``marlhf``: comlrl's iterative preference trainers with the environment as the oracle
  (:mod:`pettingllms.stages.preference`);
- ``eval``: success rate (mean over ``num_samples`` trajectories) on the held-out ``eval`` instances.
  With ``eval.before_training`` an extra ``eval_before`` runs right before the first RL stage, so a run
  prints its success before and after training.

Every stage is a function of one :class:`StageContext` (the resolved config, the shared
:class:`~comlrl.policy.MultiAgentPolicy`, the stage's folder, the env worker) returning summary metrics.

The run folder (``run.output_dir``)::

    config.yaml            the resolved config (every key, after overrides)
    pipeline_state.json    the stage plan and the stages done, with their summary metrics
    metrics.jsonl          one record per finished stage (keys ``<stage folder>/<metric>``)
    <stage>/               each stage's own output: metrics.jsonl, checkpoint-N/ (RL stages),
                           policies/ (after a training stage), eval.json (eval stages)
    policies/              the final policies, one folder per policy (LoRA adapters included)
    plots/                 PNG plots of success and reward per agent over steps

Resume (``run.resume``): the stages done are skipped, the policies are restored from the last finished
training stage, and an interrupted RL stage continues from its latest checkpoint exactly as the
uninterrupted run would have. A resumed run must use the same config (``run.*`` switches aside).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from comlrl.atomic_io import atomic_write_json
from pettingllms.config.loader import (
    RESOLVED_CONFIG_FILE,
    ConfigError,
    env_arguments,
    load_yaml_file,
    save_resolved_config,
    section_to_dataclass,
    validate_config,
)

__all__ = [
    "PIPELINE_STATE_FILE",
    "POLICIES_DIR",
    "RL_STAGES",
    "STAGE_RUNNERS",
    "Pipeline",
    "PipelineResult",
    "StageContext",
    "at_grpo_config",
    "build_run_policy",
    "check_pipeline",
    "config_differences",
    "eval_metrics",
    "evaluate_policy",
    "make_env_worker",
    "plan_stages",
    "success_summary",
]

PIPELINE_STATE_FILE = "pipeline_state.json"
POLICIES_DIR = "policies"
PLOTS_DIR = "plots"
STATE_FORMAT = "pettingllms-pipeline"
RL_STAGES = ("at_grpo", "grpo", "madpo", "marlhf")
TRAINING_STAGES = ("sft", *RL_STAGES)
# ``run`` keys that may differ between a run and its resumption.
RUN_SWITCHES = ("run.resume", "run.overwrite", "run.progress")
# ATGRPOConfig fields fed from the `rollout` section: field -> rollout key.
ROLLOUT_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_completion_length": "max_completion_length",
    "num_generations": "num_generations",
    "greedy_selection": "greedy_branch",
    "transcript_rate": "transcripts_rate",
}


# ================================================================================= plan and checks (pure)


def plan_stages(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``[(stage, folder), ...]`` in run order.

    A stage's folder is its name (``eval_2``, ``eval_3``, ... for repeats). With ``eval`` in the pipeline
    and ``eval.before_training``, ``("eval", "eval_before")`` runs right before the first RL stage unless
    an ``eval`` already does.
    """
    pipeline = list(config["pipeline"])
    seen: dict[str, int] = {}
    plan: list[tuple[str, str]] = []
    for stage in pipeline:
        seen[stage] = seen.get(stage, 0) + 1
        plan.append((stage, stage if seen[stage] == 1 else f"{stage}_{seen[stage]}"))
    if "eval" in pipeline and config["eval"].get("before_training", False):
        first_rl = next((i for i, (stage, _) in enumerate(plan) if stage in RL_STAGES), None)
        if first_rl is not None and (first_rl == 0 or plan[first_rl - 1][0] != "eval"):
            plan.insert(first_rl, ("eval", "eval_before"))
    return plan


def config_differences(old: Mapping[str, Any], new: Mapping[str, Any], ignore: Sequence[str] = ()) -> list[str]:
    """Dotted keys whose values differ between two configs (keys only in one count), sorted."""
    flat_old, flat_new = _flatten(old), _flatten(new)
    keys = set(flat_old) | set(flat_new)
    return sorted(k for k in keys if k not in ignore and flat_old.get(k, _MISSING) != flat_new.get(k, _MISSING))


_MISSING = object()


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, dotted + "."))
        else:
            out[dotted] = list(value) if isinstance(value, tuple) else value
    return out


def at_grpo_config(stage: str, config: Mapping[str, Any], output_dir: str | Path, progress: bool = True):
    """The :class:`~pettingllms.trainer.ATGRPOConfig` of RL stage ``at_grpo`` or ``grpo``.

    The section holds the trainer's own fields; the policy level and agent map come from ``policy``, the
    sampling fields from ``rollout`` (:data:`ROLLOUT_FIELDS`), ``seed`` / ``report_to`` from ``run``;
    ``turn_order`` / ``max_turns`` / ``alpha`` stay the environment's (``env`` section). ``grpo`` samples
    independently.
    """
    from pettingllms.trainer.at_grpo_config import ATGRPOConfig

    if stage not in ("at_grpo", "grpo"):
        raise ValueError(f"`stage` must be 'at_grpo' or 'grpo', got {stage!r}")
    rollout, run, policy = config["rollout"], config["run"], config["policy"]
    values = dict(config[stage])
    values.update({name: rollout[key] for name, key in ROLLOUT_FIELDS.items()})
    values.update(
        policy_level=policy["level"],
        agent_policies=dict(policy["agents"]),
        seed=run["seed"],
        report_to=run["report_to"],
        output_dir=str(output_dir),
        disable_tqdm=not progress,
    )
    if stage == "grpo":
        values["sampling_mode"] = "independent"
    try:
        return section_to_dataclass(ATGRPOConfig, values, stage)
    except ConfigError as error:
        for name, key in ROLLOUT_FIELDS.items():
            if f"`{name}`" in str(error):
                raise ConfigError(f"{error} (set through `rollout.{key}`)") from error
        raise


def _check_eval_section(section: Mapping[str, Any]) -> None:
    for key in ("num_instances", "num_samples"):
        value = section[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"`eval.{key}` must be an integer >= 1, got {value!r}")
    if section["temperature"] < 0:
        raise ConfigError(f"`eval.temperature` must be >= 0 (0: greedy), got {section['temperature']!r}")


def check_pipeline(config: Mapping[str, Any]) -> None:
    """Everything that can be checked before a run starts: :func:`~pettingllms.config.validate_config`,
    then every stage's settings as its trainer's config (a bad value fails now, not after the warm
    start). ``grpo`` needs ``policy.level`` L0."""
    from pettingllms.stages.preference import preference_config
    from pettingllms.trainer.sft import SFTWarmStartConfig

    validate_config(config)
    roles = config["env"]["turn_order"]
    for stage, _ in plan_stages(config):
        if stage == "sft":
            section_to_dataclass(SFTWarmStartConfig, config["sft"], "sft")
        elif stage in ("at_grpo", "grpo"):
            if stage == "grpo" and config["policy"]["level"] != "L0":
                raise ConfigError(
                    f"stage `grpo` is the single-agent baseline and needs `policy.level` L0, got "
                    f"{config['policy']['level']!r} (use `at_grpo` with `at_grpo.sampling_mode=independent`)"
                )
            at_grpo_config(stage, config, "unused", progress=False)
        elif stage in ("madpo", "marlhf"):
            preference_config(stage, config, "unused", len(roles), progress=False)
        elif stage == "eval":
            _check_eval_section(config["eval"])


# ================================================================================= shared objects


def build_run_policy(config: Mapping[str, Any]):
    """The :class:`~comlrl.policy.MultiAgentPolicy` of a run config (``model`` and ``policy`` sections)."""
    from pettingllms.execution import PolicyConfig, build_policy

    model, policy, lora = config["model"], config["policy"], config["policy"]["lora"]
    try:
        policy_config = PolicyConfig(
            policy_level=policy["level"],
            agent_policies=dict(policy["agents"]) or None,
            model=model["name"],
            device=model["device"],
            dtype=None if model["dtype"] == "auto" else model["dtype"],
            seed=config["run"]["seed"],
            lora_r=lora["r"],
            lora_alpha=lora["alpha"],
            lora_dropout=lora["dropout"],
            lora_target_modules=list(lora["target_modules"]),
        )
    except ValueError as error:
        raise ConfigError(f"sections `model` / `policy`: {error}") from error
    return build_policy(policy_config, config["env"]["turn_order"])


def make_env_worker(config: Mapping[str, Any]):
    """A :class:`~pettingllms.sandbox.SandboxPool` when an agent of the config uses the ``python`` tool,
    else None (the environments' own tools run in-process)."""
    from pettingllms.registry import make_agents, make_worker

    name, fields, options = env_arguments(config)
    agents = make_agents(name, fields["turn_order"], options)
    if any("python" in tuple(getattr(agent, "tools", ()) or ()) for agent in agents):
        return make_worker("sandbox")
    return None


def _level_env_fields(config: Mapping[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    from pettingllms.execution import level_turn_order

    name, fields, options = env_arguments(config)
    fields = {**fields, "turn_order": list(level_turn_order(config["policy"]["level"], fields["turn_order"]))}
    return name, fields, options


# ================================================================================= evaluation


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


def evaluate_policy(policy: Any, config: Mapping[str, Any], env_worker: Any = None) -> tuple[dict[str, float], dict]:
    """Success of ``policy`` on the config's held-out ``eval`` instances: ``(metrics, report)``.

    ``report`` is JSON-ready: the metrics, the instance seeds, ``num_samples``, ``temperature`` and the
    success rate of each instance.
    """
    from pettingllms.execution import EngineConfig, RolloutEngine, build_router

    section, rollout = config["eval"], config["rollout"]
    _check_eval_section(section)
    name, fields, options = _level_env_fields(config)
    if list(policy.agents) != fields["turn_order"]:
        raise ConfigError(
            f"the policy's agents {list(policy.agents)} do not match the config's roles {fields['turn_order']} "
            f"(`env.turn_order` at `policy.level` {config['policy']['level']})"
        )
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
    start, count = section["seed_start"], section["num_instances"]
    result = engine.evaluate(list(range(start, start + count)), section["num_samples"], float(section["temperature"]))
    metrics = eval_metrics(result)
    report = {
        "metrics": metrics,
        "seeds": [start, start + count],
        "num_samples": section["num_samples"],
        "temperature": float(section["temperature"]),
        "per_problem": {str(k): v for k, v in result.per_problem.items()},
    }
    return metrics, report


# ================================================================================= stages


@dataclass
class StageContext:
    """What a stage works with.

    ``stage`` is the config section (``sft``, ``at_grpo``, ...), ``folder`` its folder under the run
    (``stage_dir = run_dir / folder``); ``resume`` asks an RL stage to continue from its latest checkpoint.
    """

    stage: str
    folder: str
    config: Mapping[str, Any]
    policy: Any
    run_dir: Path
    env_worker: Any = None
    resume: bool = False
    progress: bool = True

    @property
    def stage_dir(self) -> Path:
        return self.run_dir / self.folder

    def metrics_logger(self):
        """A fresh :class:`~comlrl.reporting.MetricsLogger` writing ``stage_dir/metrics.jsonl`` (for stages
        that do not own a trainer's logger)."""
        from comlrl.reporting import MetricsLogger

        logger = MetricsLogger(self.stage_dir, self.config["run"]["report_to"])
        logger.truncate_after(0)
        return logger


def run_sft(context: StageContext) -> dict[str, float]:
    """The warm start (:func:`pettingllms.trainer.sft.sft_stage`); per-step losses in the stage's metrics."""
    from pettingllms.trainer.sft import sft_stage

    logger = context.metrics_logger()
    try:
        return sft_stage(
            context.policy, context.config, logger=logger, progress=context.progress, env_worker=context.env_worker
        )
    finally:
        logger.close()


def run_at_grpo(context: StageContext) -> dict[str, float]:
    """AT-GRPO (or, for stage ``grpo``, the independent-sampling baseline) over the shared policy."""
    from comlrl.checkpoint import latest_checkpoint
    from pettingllms.trainer.at_grpo import ATGRPOTrainer

    config = context.config
    name, fields, options = env_arguments(config)
    trainer = ATGRPOTrainer(
        at_grpo_config(context.stage, config, context.stage_dir, context.progress),
        policy=context.policy,
        env_name=name,
        env_config=fields,
        agent_options=options,
        env_worker=context.env_worker,
    )
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


def run_preference(context: StageContext) -> dict[str, float]:
    """``madpo`` / ``marlhf`` (:func:`pettingllms.stages.preference.run_preference_stage`)."""
    from pettingllms.stages.preference import run_preference_stage

    return run_preference_stage(context)


def run_eval(context: StageContext) -> dict[str, float]:
    """Held-out success; writes ``eval.json`` (with per-instance rates) and the stage's metrics."""
    metrics, report = evaluate_policy(context.policy, context.config, context.env_worker)
    atomic_write_json(context.stage_dir / "eval.json", report)
    logger = context.metrics_logger()
    try:
        logger.log({f"eval/{k}": v for k, v in metrics.items()}, step=0)
    finally:
        logger.close()
    return metrics


STAGE_RUNNERS: dict[str, Callable[[StageContext], dict[str, float]]] = {
    "sft": run_sft,
    "at_grpo": run_at_grpo,
    "grpo": run_at_grpo,
    "madpo": run_preference,
    "marlhf": run_preference,
    "eval": run_eval,
}


# ================================================================================= the pipeline


@dataclass
class PipelineResult:
    """What a run produced: its folder, each stage's summary metrics (``{folder: metrics}``, run order),
    the held-out success before the first and after the last RL stage (None where no eval ran there),
    and the plots written."""

    run_dir: Path
    stages: dict[str, dict[str, float]] = field(default_factory=dict)
    success_before: float | None = None
    success_after: float | None = None
    plots: list[Path] = field(default_factory=list)


def success_summary(plan: Sequence[tuple[str, str]], stages: Mapping[str, Mapping[str, float]]) -> tuple[float | None, float | None]:
    """``(before, after)``: success of the last eval before the first RL stage and of the last eval
    after the last RL stage (None where there is none; with no RL stage, the first and last eval)."""
    rl = [i for i, (stage, _) in enumerate(plan) if stage in RL_STAGES]
    evals = [(i, folder) for i, (stage, folder) in enumerate(plan) if stage == "eval" and folder in stages]
    if not evals:
        return None, None
    if not rl:
        return stages[evals[0][1]]["success_rate"], stages[evals[-1][1]]["success_rate"]
    before = [f for i, f in evals if i < rl[0]]
    after = [f for i, f in evals if i > rl[-1]]
    return (
        stages[before[-1]]["success_rate"] if before else None,
        stages[after[-1]]["success_rate"] if after else None,
    )


class Pipeline:
    """Runs the stages of a resolved config (see the module docstring).

    Args:
        config: a resolved run config (:func:`~pettingllms.config.load_config`).
        policy: a prebuilt :class:`~comlrl.policy.MultiAgentPolicy` (default: built from the config).
        out: where progress lines go (default stdout).
        plots: write PNG plots (matplotlib) at the end of each stage.

    ``run.resume``, ``run.overwrite`` and ``run.progress`` are read from the config.
    """

    def __init__(self, config: Mapping[str, Any], *, policy: Any = None, out: TextIO | None = None, plots: bool = True):
        check_pipeline(config)
        self.config = config
        self.plan = plan_stages(config)
        self.run_dir = Path(config["run"]["output_dir"])
        self.resume = bool(config["run"]["resume"])
        self.overwrite = bool(config["run"]["overwrite"])
        self.progress = bool(config["run"]["progress"])
        self._policy = policy
        self.out = out if out is not None else sys.stdout
        self.make_plots = plots

    # ---- helpers ---------------------------------------------------------------------------------
    def say(self, message: str) -> None:
        print(message, file=self.out, flush=True)

    @property
    def state_path(self) -> Path:
        return self.run_dir / PIPELINE_STATE_FILE

    def _write_state(self, completed: list[dict[str, Any]]) -> None:
        atomic_write_json(
            self.state_path,
            {"format": STATE_FORMAT, "version": 1, "plan": [list(p) for p in self.plan], "completed": completed},
        )

    def _prepare(self) -> list[dict[str, Any]]:
        """Check the run folder against resume / overwrite; returns the stages already done."""
        if self.resume:
            if not self.state_path.is_file():
                raise ConfigError(
                    f"`run.resume`: {self.run_dir} holds no pipeline run to resume (no {PIPELINE_STATE_FILE})"
                )
            saved = load_yaml_file(self.run_dir / RESOLVED_CONFIG_FILE)
            changed = config_differences(saved, self.config, ignore=RUN_SWITCHES)
            if changed:
                raise ConfigError(
                    f"`run.resume`: the config differs from the one {self.run_dir} was started with, at "
                    f"{changed[:8]}; resume with the same config"
                )
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
            completed = list(state["completed"])
            for entry, (stage, folder) in zip(completed, self.plan):
                if (entry["stage"], entry["folder"]) != (stage, folder):
                    raise ConfigError(f"{self.state_path}: stage {entry['folder']!r} does not match the plan {self.plan}")
            return completed
        if self.state_path.is_file():
            if not self.overwrite:
                raise ConfigError(
                    f"`run.output_dir` {self.run_dir} already holds a pipeline run; continue it with --resume "
                    "(run.resume=true) or start over with --overwrite (run.overwrite=true), or pick another "
                    "run.output_dir"
                )
            self._remove_previous_run()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        save_resolved_config(self.config, self.run_dir)
        self._write_state([])
        return []

    def _remove_previous_run(self) -> None:
        state = json.loads(self.state_path.read_text(encoding="utf-8"))
        folders = {folder for _, folder in state.get("plan", [])} | {POLICIES_DIR, PLOTS_DIR}
        for name in sorted(folders):
            path = self.run_dir / name
            if path.is_dir() and path.resolve().parent == self.run_dir.resolve():
                shutil.rmtree(path)
        for name in ("metrics.jsonl", RESOLVED_CONFIG_FILE, PIPELINE_STATE_FILE):
            (self.run_dir / name).unlink(missing_ok=True)

    # ---- run -------------------------------------------------------------------------------------
    def run(self) -> PipelineResult:
        """Run (or resume) every stage; returns the :class:`PipelineResult`."""
        from comlrl.reporting import MetricsLogger

        completed = self._prepare()
        policy = self._policy if self._policy is not None else build_run_policy(self.config)
        worker = make_env_worker(self.config)
        saved = [e["policies"] for e in completed if e.get("policies")]
        if saved:  # continue from the policies the last finished training stage left
            policy.load_weights_(self.run_dir / saved[-1])
        run_logger = MetricsLogger(self.run_dir, "none")
        run_logger.truncate_after(len(completed))
        result = PipelineResult(self.run_dir)
        for entry in completed:
            result.stages[entry["folder"]] = entry["metrics"]

        total = len(self.plan)
        self.say(f"pipeline {self.run_dir}: {' -> '.join(folder for _, folder in self.plan)}")
        for index, (stage, folder) in enumerate(self.plan, start=1):
            if index <= len(completed):
                self.say(f"[{index}/{total}] {folder}: done (resumed run)")
                continue
            self.say(f"[{index}/{total}] {folder} ...")
            context = StageContext(
                stage, folder, self.config, policy, self.run_dir, worker, resume=self.resume, progress=self.progress
            )
            context.stage_dir.mkdir(parents=True, exist_ok=True)
            metrics = {k: float(v) for k, v in STAGE_RUNNERS[stage](context).items()}
            entry: dict[str, Any] = {"stage": stage, "folder": folder, "metrics": metrics}
            if stage in TRAINING_STAGES:
                policy.save(context.stage_dir / POLICIES_DIR)
                entry["policies"] = f"{folder}/{POLICIES_DIR}"
            run_logger.log({f"{folder}/{k}": v for k, v in metrics.items()}, step=index)
            completed.append(entry)
            self._write_state(completed)
            result.stages[folder] = metrics
            self.say(f"[{index}/{total}] {folder}: {_describe(stage, metrics, self.config)}")
        run_logger.close()

        policy.save(self.run_dir / POLICIES_DIR)
        result.success_before, result.success_after = success_summary(self.plan, result.stages)
        if self.make_plots:
            from pettingllms.plots import plot_run

            result.plots = plot_run(self.run_dir)
        self.say(self.summary(result))
        return result

    def summary(self, result: PipelineResult) -> str:
        """The closing lines: success before / after, where the policies and plots are."""
        section = self.config["eval"]
        what = (
            f"{section['num_instances']} held-out instances x {section['num_samples']} sample(s), "
            f"{'greedy' if section['temperature'] == 0 else 'temperature ' + str(section['temperature'])}"
        )
        lines = []
        before, after = result.success_before, result.success_after
        if before is not None and after is not None:
            lines.append(f"success before {before:.3f} -> after {after:.3f} ({after - before:+.3f}) on {what}")
        elif after is not None or before is not None:
            lines.append(f"success {after if after is not None else before:.3f} on {what}")
        lines.append(f"policies: {self.run_dir / POLICIES_DIR}")
        if result.plots:
            lines.append(f"plots: {', '.join(str(p) for p in result.plots)}")
        return "\n".join(lines)


def _describe(stage: str, metrics: Mapping[str, float], config: Mapping[str, Any]) -> str:
    if stage == "eval":
        return f"success {metrics['success_rate']:.3f} on {config['eval']['num_instances']} held-out instances"
    if stage == "sft":
        if "sft/loss_first" in metrics:
            return f"loss {metrics['sft/loss_first']:.3f} -> {metrics['sft/loss_last']:.3f} ({int(metrics['sft/steps'])} steps)"
        return "no demonstrations"
    if stage in ("at_grpo", "grpo"):
        parts = [f"{int(metrics['steps'])} steps"]
        if "mean/success_rate" in metrics:
            parts.append(f"mean training success {metrics['mean/success_rate']:.3f}")
        return ", ".join(parts)
    return ", ".join(f"{k} {v:g}" for k, v in metrics.items() if k.startswith("pairs") or k == "iter/current_win_rate")
