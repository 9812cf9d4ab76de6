"""The Ray training system of one RL stage: placement, the workers, and the engine and updaters they serve.

:class:`RaySystem` starts (or joins, ``run.ray_address``) a Ray cluster, checks the placement against
what the cluster has (before any worker starts: :func:`~pettingllms.workers.placement.check_fits`),
reserves it as one placement group and starts, per policy, its RolloutWorkers (one per rollout device)
and its UpdateWorker, then ``run.num_env_workers`` EnvWorkers. The trainer gets

- :attr:`RaySystem.engine`, a :class:`~pettingllms.workers.engine.WorkerEngine` (rollouts sharded over the
  EnvWorkers), and
- :attr:`RaySystem.updaters`, one :class:`~pettingllms.workers.update_worker.RemoteUpdater` per policy.

The Router stays in the driver: the agent -> policy mapping decides which RolloutWorker a role's requests
go to (in each EnvWorker) and which UpdateWorker a sample trains (in the trainer, per policy). Every
worker starts from a copy of the driver's policy as it is when the stage starts; the driver's copy is
kept current after every update. Ray is an optional extra: :func:`require_ray` names what to install.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = ["RaySystem", "require_ray"]

logger = logging.getLogger("pettingllms.workers")

# Seconds to wait for the cluster to reserve a placement that fits its total resources (others may hold some).
PLACEMENT_TIMEOUT_S = 120


# Where Ray logs "Token authentication is enabled for this Ray cluster ..." when it starts a local cluster.
TOKEN_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"


def _drop_token_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


def require_ray():
    """The ``ray`` module, or an ImportError saying how to install it."""
    try:
        import ray
    except ImportError as error:
        raise ImportError(
            "`run.backend: ray` needs Ray: install the extra with `pip install -e \".[ray]\"` "
            "(or `pip install ray`)"
        ) from error
    return ray


class RaySystem:
    """Workers for one AT-GRPO / GRPO stage over ``policy``.

    Args:
        policy: the driver's :class:`~comlrl.policy.MultiAgentPolicy` (copied into every worker).
        trainer_config: the stage's :class:`~pettingllms.trainer.ATGRPOConfig` (the UpdateWorkers' updates,
            the EnvWorkers' sampling structure).
        rollout: the stage's generation settings, a :class:`~pettingllms.config.rollout_section.RolloutConfig`
            (None: its defaults); with ``trainer_config`` they make the engine's config
            (:func:`~pettingllms.trainer.at_grpo_setup.engine_config_for`), the EnvWorkers' and UpdateWorkers'.
        env_name, env_config, agent_options: the environment as the one-process trainer gets them
            (``env_config`` already carries the turn order the policy level plays).
        placement: a :class:`~pettingllms.workers.placement.Placement`.
        ray_address: None starts a local cluster (when none runs in this process yet); else joined.
        sandbox: a zero-argument callable building one EnvWorker's code runner, or None.
        torch_threads: torch threads of every worker (default: the driver's).
        vllm: :class:`~comlrl.rollout.VLLMSettings` for RolloutWorkers that generate with vLLM
            (``rollout.backend: vllm``); None: HF.
        imports: the user's modules (:class:`~pettingllms.config.imports.ModuleImports`, the config's
            ``imports``), which every worker imports before it builds anything.
    """

    def __init__(
        self,
        policy: Any,
        trainer_config: Any,
        *,
        rollout: Any = None,
        env_name: str,
        env_config: Any,
        placement: Any,
        agent_options: Mapping[str, Mapping[str, Any]] | None = None,
        ray_address: str | None = None,
        sandbox: Callable[[], Any] | None = None,
        torch_threads: int | None = None,
        vllm: Any = None,
        imports: Any = None,
    ) -> None:
        from comlrl.rollout.hf import eos_token_ids, pad_token_id
        from pettingllms.config.rollout_section import RolloutConfig
        from pettingllms.execution.router import Router
        from pettingllms.trainer.at_grpo_setup import engine_config_for
        from pettingllms.workers.engine import WorkerEngine
        from pettingllms.workers.env_worker import EnvWorker
        from pettingllms.workers.placement import check_fits
        from pettingllms.workers.rollout_worker import RemoteBackend, RolloutWorker
        from pettingllms.workers.update_worker import RemoteUpdater, UpdateWorker

        engine_config = engine_config_for(trainer_config, rollout if rollout is not None else RolloutConfig())
        ray = require_ray()
        self.ray = ray
        self.started_ray = not ray.is_initialized()
        if self.started_ray:
            # A local cluster takes Ray's token authentication (its default); the notice Ray logs about it on
            # every start says nothing about this run, so it is kept off the screen (docs/scaling.md).
            notices = logging.getLogger(TOKEN_NOTICE_LOGGER)
            notices.addFilter(_drop_token_notice)
            try:
                ray.init(address=ray_address, include_dashboard=False, log_to_driver=False, configure_logging=False)
            finally:
                notices.removeFilter(_drop_token_notice)
        self.actors: list[Any] = []
        self.placement_group = None
        try:
            check_fits(placement, ray.cluster_resources())
            self._reserve(placement)
            threads = int(torch_threads or torch.get_num_threads())
            policy_ref = ray.put(policy)
            device = "cuda" if placement.device_kind == "gpu" else None
            self.rollout_actors: dict[str, list[Any]] = {}
            self.rollout_names: dict[str, list[str]] = {}
            self.update_actors: dict[str, list[Any]] = {}
            self.updaters: dict[str, RemoteUpdater] = {}
            prefix = f"pettingllms-{uuid.uuid4().hex[:12]}"
            for name in policy.policies:
                bundles = placement.worker_bundles(name)
                resources = placement.worker_resources(name, "rollout")
                self.rollout_names[name] = [f"{prefix}-rollout-{name}-{i}" for i in range(len(resources))]
                self.rollout_actors[name] = [
                    self._start(RolloutWorker, bundle, needs, policy_ref, name, torch_threads=threads, device=device,
                                vllm=vllm, imports=imports, actor_name=actor_name)
                    for bundle, needs, actor_name in zip(bundles["rollout"], resources, self.rollout_names[name])
                ]
                self.update_actors[name] = [
                    self._start(UpdateWorker, bundle, resources, trainer_config, policy_ref, name,
                                sampling=engine_config, torch_threads=threads, device=device, imports=imports)
                    for bundle, resources in zip(bundles["update"], placement.worker_resources(name, "update"))
                ]
                if len(self.update_actors[name]) > 1:
                    self._join_update_group(self.update_actors[name])
                handle = policy.handle(name)
                self.updaters[name] = RemoteUpdater(
                    name, policy, self.update_actors[name], self.rollout_actors[name],
                    pad_token_id(handle.tokenizer, eos_token_ids(handle.model, handle.tokenizer)),
                )
            agent_to_policy = {agent: policy.policy_name(agent) for agent in policy.agents}
            engine_settings = dataclasses.asdict(engine_config)
            self.env_actors = [
                self._start(
                    EnvWorker, bundle, {"CPU": placement.env_worker_cpus}, index, env_name, env_config, engine_settings,
                    agent_to_policy,
                    # By name: an actor handle among the arguments of an actor that Ray may restart makes Ray's core
                    # log an error on every start (its arguments would live in the object store).
                    self.rollout_names,
                    agent_options=agent_options, sandbox=sandbox, torch_threads=threads, restarts=1, imports=imports,
                )
                for index, bundle in enumerate(placement.env_bundles())
            ]
            backends = {name: RemoteBackend(actors, name) for name, actors in self.rollout_actors.items()}
            self.engine = WorkerEngine.from_registry(
                env_name, env_config, Router(agent_to_policy, backends), engine_config,
                agent_options=agent_options, env_workers=self.env_actors,
            )
            ray.get([actor.pid.remote() for actor in self.actors])  # every worker is up before training starts
        except BaseException:
            self.close()
            raise

    def _reserve(self, placement: Any) -> None:
        from ray.util.placement_group import placement_group

        self.placement = placement
        self.placement_group = placement_group(placement.bundles(), strategy="PACK")
        try:
            self.ray.get(self.placement_group.ready(), timeout=PLACEMENT_TIMEOUT_S)
        except self.ray.exceptions.GetTimeoutError:
            raise RuntimeError(
                f"the cluster did not reserve the placement ({placement.describe()}) within {PLACEMENT_TIMEOUT_S} s: "
                f"it has {self.ray.available_resources()} free (other jobs may hold the rest)"
            ) from None

    def _start(
        self, cls: type, bundle: int, resources: dict[str, float], *args: Any, restarts: int = 0,
        actor_name: str | None = None, **kwargs: Any,
    ):
        """An actor of ``cls`` on placement bundle ``bundle``, asking ``resources`` of it (named ``actor_name``,
        so other actors find it with ``ray.get_actor``)."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        actor = self.ray.remote(cls).options(
            name=actor_name,
            num_cpus=resources.get("CPU", 0.0),
            num_gpus=resources.get("GPU", 0.0),
            max_restarts=restarts,
            max_task_retries=restarts,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=self.placement_group, placement_group_bundle_index=bundle
            ),
        ).remote(*args, **kwargs)
        self.actors.append(actor)
        return actor

    def _join_update_group(self, actors: list[Any]) -> None:
        """One torch.distributed process group over a policy's UpdateWorkers (rank = list order)."""
        address, port = self.ray.get(actors[0].group_address.remote())
        ranks = self.ray.get([actor.join_group.remote(address, port, rank, len(actors)) for rank, actor in enumerate(actors)])
        if ranks != list(range(len(actors))):
            raise RuntimeError(f"an update group came up with ranks {ranks}, expected 0..{len(actors) - 1}")

    def trainer_kwargs(self) -> dict[str, Any]:
        """What puts an :class:`~pettingllms.trainer.ATGRPOTrainer` on these workers."""
        return {"engine": self.engine, "updaters": self.updaters}

    def push_policy(self) -> None:
        """Send the driver's weights to every worker (after a resume restored them in the driver)."""
        for updater in self.updaters.values():
            updater.push_policy()

    def close(self) -> None:
        """End the workers (each EnvWorker's sandbox first), free the placement and, when this system started
        Ray, stop it."""
        ray = self.ray
        for actor in getattr(self, "env_actors", []):
            try:
                ray.get(actor.close.remote(), timeout=30)
            except Exception as error:  # a dead worker has nothing left to close
                logger.warning("EnvWorker close failed: %s", error)
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []
        if self.placement_group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.placement_group)
            self.placement_group = None
        if self.started_ray and ray.is_initialized():
            ray.shutdown()
