"""EnvWorkers: environment instances, their tree copies and their sandbox, in a process of their own.

An :class:`EnvWorker` (the body of a Ray actor, see :mod:`pettingllms.workers.system`) owns a
:class:`~pettingllms.execution.RolloutEngine` over the run's environment and, when the workflow runs code,
its own :class:`~pettingllms.sandbox.SandboxPool` (the ``env_worker`` argument of ``Agent.step`` inside it).
The driver gives each EnvWorker a shard of a step's problems; the worker runs the decision-point loop for
them (prompts, one generate call per policy per decision point through the RolloutWorkers, parsing,
stepping, rewards, tree branch selection), so environment states and their copies never leave it: only
prompts go out and completions come back. Seeds derive from (run seed, step, problem, turn, agent), never
from the shard, so a problem plays the same on any worker.

The worker's engine writes no transcripts and never stops the run itself (its failure budget is
unlimited): it returns its counters with each batch and the driver's engine keeps the run's budget
(:mod:`pettingllms.workers.engine`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["EnvWorker", "WorkerBatch"]


@dataclasses.dataclass
class WorkerBatch:
    """One EnvWorker call's result: the engine's batch and what its failure budget counted for it."""

    batch: Any  # RolloutBatch
    attempted: int
    infra_failed: int
    model_failures: dict[str, int]


def _actor(actor: Any) -> Any:
    """An actor handle, looked up by name where ``actor`` is one."""
    if isinstance(actor, str):
        import ray

        return ray.get_actor(actor)
    return actor


class EnvWorker:
    """Environment stepping for shards of problems.

    ``engine_config`` is the run's :class:`~pettingllms.execution.EngineConfig` (as a mapping);
    ``rollout_actors`` maps each policy to its RolloutWorker actors (handles, or the actors' names, which the
    worker looks up: how :class:`~pettingllms.workers.system.RaySystem` passes them); ``sandbox`` builds the worker's own
    code runner (a zero-argument callable returning a SandboxPool, or None when the workflow runs no code);
    ``imports`` (a :class:`~pettingllms.config.imports.ModuleImports`) are the user's modules, imported first.
    """

    def __init__(
        self,
        index: int,
        env_name: str,
        env_config: Any,
        engine_config: Mapping[str, Any],
        agent_to_policy: Mapping[str, str],
        rollout_actors: Mapping[str, Any],
        *,
        agent_options: Mapping[str, Mapping[str, Any]] | None = None,
        sandbox: Any = None,
        torch_threads: int = 1,
        imports: Any = None,
    ) -> None:
        if imports is not None:  # first: the environment and its agents may be the user's
            imports.load()
        from pettingllms.execution import EngineConfig, RolloutEngine
        from pettingllms.execution.router import Router
        from pettingllms.workers.rollout_worker import RemoteBackend

        torch.set_num_threads(int(torch_threads))
        self.index = index
        self.code_runner = sandbox() if sandbox is not None else None
        backends = {policy: RemoteBackend([_actor(a) for a in actors], policy) for policy, actors in rollout_actors.items()}
        # Snapshots of the transcribed episodes are taken here (the states live here); the driver writes.
        settings = {**engine_config, "write_transcripts": False, "max_infra_failure_rate": 1.0}
        self.engine = RolloutEngine.from_registry(
            env_name,
            env_config,
            Router(agent_to_policy, backends),
            EngineConfig(**settings),
            agent_options=agent_options,
            env_worker=self.code_runner,
        )

    def rollout(self, problem_ids: Sequence[int], step: int) -> WorkerBatch:
        before = self.engine.state_dict()
        batch = asyncio.run(self.engine.arollout(list(problem_ids), step))
        return self._counted(batch, before)

    def evaluate(self, problem_ids: Sequence[int], num_samples: int, temperature: float, step: int) -> WorkerBatch:
        before = self.engine.state_dict()
        batch = asyncio.run(self.engine.aevaluate_batch(list(problem_ids), num_samples, temperature, step))
        return self._counted(batch, before)

    def _counted(self, batch: Any, before: Mapping[str, Any]) -> WorkerBatch:
        after = self.engine.state_dict()
        failures = {
            label: count - before["model_failures"].get(label, 0)
            for label, count in after["model_failures"].items()
            if count != before["model_failures"].get(label, 0)
        }
        return WorkerBatch(
            batch,
            after["attempted"] - before["attempted"],
            after["infra_failed"] - before["infra_failed"],
            failures,
        )

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        """Shut the worker's sandbox down (its processes end with it)."""
        runner, self.code_runner = self.code_runner, None
        if runner is not None and hasattr(runner, "close"):
            result = runner.close()
            if asyncio.iscoroutine(result):
                asyncio.run(result)
