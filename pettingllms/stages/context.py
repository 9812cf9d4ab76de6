"""What every stage works with: the :class:`StageContext`, the roles a run plays, its policy and env worker.

A stage is two functions of its module (:mod:`pettingllms.stages.sft`, ``at_grpo``, ``madpo``, ``marlhf``,
``eval``): ``<stage>_settings(stage, config, stage_dir, progress)`` builds and checks the stage's settings
from a resolved run config (the pipeline calls it once for every stage before the first one starts), and
``run_<stage>(context)`` runs the stage on a :class:`StageContext` and returns its summary metrics.

The roles a run plays (:func:`run_workflow`), the environment arguments of its workflow (:func:`workflow_env`)
and its env worker (:func:`make_env_worker`) are the config's (:mod:`pettingllms.config.levels`,
:mod:`pettingllms.config.env_section`), imported here for the stages.

Data-parallel runs (``accelerate launch`` / ``torchrun``, :mod:`comlrl.distributed`): every rank
runs every stage; only rank 0 writes (a rank > 0 gets a :meth:`StageContext.metrics_logger` that writes
nothing). Stages without a data-parallel mode refuse a world size above 1 in their settings
(:func:`check_one_process`), so the run stops before it starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pettingllms.config.env_section import make_env_worker, workflow_env
from pettingllms.config.errors import ConfigError
from pettingllms.config.levels import run_workflow

__all__ = [
    "RL_STAGES",
    "TRAINING_STAGES",
    "SettingsBuilder",
    "StageContext",
    "build_run_policy",
    "check_one_process",
    "check_run_inputs",
    "make_env_worker",
    "run_policy_config",
    "run_workflow",
    "workflow_env",
]

RL_STAGES = ("at_grpo", "grpo", "madpo", "marlhf", "madpo_from_trees")
TRAINING_STAGES = ("sft", *RL_STAGES)

# (stage, resolved config, stage folder, progress) -> the stage's checked settings.
SettingsBuilder = Callable[[str, Mapping[str, Any], Path, bool], Any]


@dataclass
class StageContext:
    """What a stage works with.

    ``stage`` is the config section (``sft``, ``at_grpo``, ...), ``folder`` its folder under the run
    (``stage_dir = run_dir / folder``); ``resume`` asks an RL stage to continue from its latest checkpoint;
    ``settings`` are the stage's settings as the pipeline checked them before the run (None: built by the
    stage from ``config``). ``generation`` is the run's shared generation backend (``rollout.backend:
    vllm``, :mod:`pettingllms.execution.generation`), None for HF on the live policy: stages that sample
    take :meth:`router`.
    """

    stage: str
    folder: str
    config: Mapping[str, Any]
    policy: Any
    run_dir: Path
    env_worker: Any = None
    resume: bool = False
    progress: bool = True
    settings: Any = None
    generation: Any = None
    previous_folder: str | None = None  # the folder of the stage run right before this one (None: first)
    next_stage: str | None = None  # the stage that runs right after this one (None: last)

    @property
    def stage_dir(self) -> Path:
        return self.run_dir / self.folder

    def router(self):
        """A :class:`~pettingllms.execution.Router` over the run's policy and its generation backend (under
        ``rollout.backend: api`` the hosted model plays every role)."""
        from pettingllms.execution import build_router
        from pettingllms.execution.generation import api_router

        if self.config["rollout"].get("backend", "hf") == "api":
            return api_router(self.config)
        return build_router(self.policy, self.generation)

    def settings_or(self, build: SettingsBuilder) -> Any:
        """The stage's settings: the pipeline's, else ``build``'s from the config."""
        if self.settings is None:
            self.settings = build(self.stage, self.config, self.stage_dir, self.progress)
        return self.settings

    def metrics_logger(self):
        """A fresh :class:`~comlrl.reporting.MetricsLogger` writing ``stage_dir/metrics.jsonl`` (for stages
        that do not own a trainer's logger); on a data-parallel rank > 0 one that writes nothing."""
        from comlrl import distributed as dist
        from comlrl.reporting import MetricsLogger

        if not dist.is_main_process():
            return dist.RankMetricsLogger()
        logger = MetricsLogger(self.stage_dir, self.config["run"]["report_to"])
        logger.truncate_after(0)
        return logger


def check_one_process(stage: str) -> None:
    """Refuse stage ``stage`` under a data-parallel launch (world size > 1): it has no data-parallel mode
    yet, and every rank running it whole would train the same policy twice over and race on its files."""
    from comlrl import distributed as dist

    size = dist.world_size()
    if size > 1:
        raise ConfigError(
            f"stage `{stage}` has no data-parallel mode yet, and this run has world size {size} "
            "(accelerate launch / torchrun): run a pipeline with it in one process, without the launcher"
        )


def run_policy_config(config: Mapping[str, Any]):
    """The checked :class:`~pettingllms.execution.PolicyConfig` of a run config (``model`` and ``policy``)."""
    from pettingllms.execution import PolicyConfig

    model, policy, lora = config["model"], config["policy"], config["policy"]["lora"]
    try:
        return PolicyConfig(
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


def build_run_policy(config: Mapping[str, Any]):
    """The :class:`~comlrl.policy.MultiAgentPolicy` of a run config (``model`` and ``policy`` sections)."""
    from pettingllms.execution import build_policy

    return build_policy(run_policy_config(config), config["env"]["turn_order"])


def check_run_inputs(config: Mapping[str, Any]) -> None:
    """What :func:`build_run_policy` would fail on, checked without loading a model: the ``model`` and
    ``policy`` sections, that ``model.name`` names a preset, a checkpoint folder or a reachable hub id, and
    that ``model.device`` exists on this machine. A ConfigError names the key."""
    import torch

    from comlrl.models.loading import ModelNotFoundError, check_model_name
    from comlrl.models.smollm2 import MissingOptionalModel

    policy_config = run_policy_config(config)
    try:
        check_model_name(policy_config.model)
    except (ModelNotFoundError, MissingOptionalModel) as error:
        raise ConfigError(f"`model.name`: {error}") from error
    device = policy_config.device
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(f"`model.device` must be cpu, cuda or cuda:N, got {device!r}") from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (parsed.index or 0) >= count:
            raise ConfigError(f"`model.device` is {device!r} but this machine has {count} CUDA device(s); use cpu")
    elif parsed.type != "cpu":
        raise ConfigError(f"`model.device` must be cpu, cuda or cuda:N, got {device!r}")
