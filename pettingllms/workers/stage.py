"""What an RL stage needs from ``run.backend``: nothing for ``local``, the Ray workers for ``ray``.

:func:`stage_workers` is a context manager around a stage's trainer: under ``run.backend: ray`` it yields
a :class:`~pettingllms.workers.system.RaySystem` (whose :meth:`~RaySystem.trainer_kwargs` put the trainer
on it) and ends the workers when the stage ends; under ``local`` it yields None. :func:`attach` registers
:class:`WorkerSync` on the trainer: the part that sends the driver's weights to the workers after a resume
restored them from a checkpoint.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from comlrl.trainers.core.trainer_core import TrainerPart

__all__ = ["RAY_STAGES", "WorkerSync", "attach", "backend_of", "stage_workers"]

# Stages with a Ray version; the pipeline runs the others in the driver under `run.backend: ray`, saying so.
RAY_STAGES = ("at_grpo", "grpo")


class WorkerSync(TrainerPart):
    """After a checkpoint was restored in the driver, its weights and versions go to every worker (the
    optimizer and scheduler states already went, through the updaters' remote state)."""

    def __init__(self, system: Any) -> None:
        self.system = system

    def restore(self, checkpoint) -> None:
        self.system.push_policy()


def attach(trainer: Any, system: Any) -> Any:
    """Register :class:`WorkerSync` of ``system`` (None: nothing) on ``trainer``; returns the trainer."""
    if system is not None:
        trainer.add_part(WorkerSync(system))
    return trainer


def _rollout_vllm(config: Mapping[str, Any]) -> Any:
    """The RolloutWorkers' vLLM settings under ``rollout.backend: vllm``, else None (HF)."""
    if config["rollout"].get("backend", "hf") != "vllm":
        return None
    from pettingllms.execution.generation import vllm_settings

    return vllm_settings(config["rollout"])


def backend_of(config: Mapping[str, Any]) -> str:
    return str(config["run"].get("backend", "local"))


@contextmanager
def stage_workers(
    config: Mapping[str, Any],
    policy: Any,
    trainer_config: Any,
    env_name: str,
    env_fields: Mapping[str, Any],
    agent_options: Mapping[str, Mapping[str, Any]] | None,
) -> Iterator[Any]:
    """None under ``run.backend: local``; under ``ray``, a fresh
    :class:`~pettingllms.workers.system.RaySystem`, closed when the block ends."""
    if backend_of(config) != "ray":
        yield None
        return
    from pettingllms.config.env_section import make_env_worker
    from pettingllms.config.imports import ModuleImports
    from pettingllms.config.rollout_section import RolloutConfig
    from pettingllms.trainer.at_grpo_setup import env_config_for
    from pettingllms.workers.placement import placement_from_config
    from pettingllms.workers.system import RaySystem

    system = RaySystem(
        policy,
        trainer_config,
        rollout=RolloutConfig.from_section(config["rollout"]),
        env_name=env_name,
        env_config=env_config_for(config["policy"]["level"], env_name, dict(env_fields)),
        agent_options=agent_options,
        placement=placement_from_config(config),
        ray_address=config["run"].get("ray_address"),
        sandbox=functools.partial(make_env_worker, dict(config)),
        vllm=_rollout_vllm(config),
        imports=ModuleImports.of(config),
    )
    try:
        yield system
    finally:
        system.close()
