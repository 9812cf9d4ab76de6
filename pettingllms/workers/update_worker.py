"""UpdateWorkers: one policy's optimisation in its own process, and the driver's handle on it.

An :class:`UpdateWorker` (the body of a Ray actor, see :mod:`pettingllms.workers.system`) holds a copy of
the run's policy and one :class:`~pettingllms.trainer.policy_update.PolicyUpdater` (AdamW, LR schedule,
reference model, the PPO passes of AT-GRPO / GRPO): the same code the one-process trainer runs, so a step
on a worker computes what it computes in process.

:class:`RemoteUpdater` is the driver's side, with the ``PolicyUpdater`` interface the trainer uses
(``update``, ``learning_rate``, ``scheduler_step``, ``optimizer``, ``scheduler``, ``pad_token_id``).
After every update it installs the new weights and version in the driver's policy (so evaluation,
``save_model`` and checkpoints read current weights) and pushes them to the policy's RolloutWorkers
before the next rollout. Its ``optimizer`` / ``scheduler`` are :class:`RemoteState` proxies: a checkpoint
reads and restores their state dicts on the worker, in the checkpoint layout of the one-process run.

A policy with ``placement.<policy>.update_devices`` N > 1 gets a group of N UpdateWorkers joined in one
torch.distributed process group (gloo on CPUs, NCCL on GPUs; :meth:`UpdateWorker.join_group`): the
driver cuts the policy's rows of a step into N shards of whole problems (:func:`shard_rows`), each rank
updates on its shard and the updater's data-parallel path
(:func:`comlrl.trainers.core.data_parallel.attach_engine`) sums token counts and gradients over the ranks, so
every rank ends the step with the same weights.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from pettingllms.workers.rollout_worker import install_weights, trainable_state

__all__ = ["RemoteState", "RemoteUpdater", "UpdateWorker", "shard_rows"]


class UpdateWorker:
    """AT-GRPO / GRPO updates of policy ``name`` on the worker's copy of ``policy`` (``sampling``: the engine's
    config the rows were sampled with; ``imports``: the user's modules,
    :class:`~pettingllms.config.imports.ModuleImports`, imported first)."""

    def __init__(
        self, config: Any, policy: Any, name: str, *, sampling: Any, torch_threads: int, device: str | None = None,
        imports: Any = None,
    ) -> None:
        if imports is not None:
            imports.load()
        from comlrl.trainers.core.reference import ReferencePolicy
        from pettingllms.trainer.policy_update import PolicyUpdater

        torch.set_num_threads(int(torch_threads))
        if name not in policy.policies:
            raise ValueError(f"UpdateWorker: unknown policy {name!r}; the policy holds {policy.policies}")
        if device is not None:
            for model in policy.models():
                model.to(device)
        self.policy = policy
        self.name = name
        # The reference is the weights the worker starts from: the driver's at the stage's start.
        reference = ReferencePolicy(policy, adapters="disabled") if config.beta > 0 else None
        self.updater = PolicyUpdater(config, policy, name, reference, sampling=sampling)

    def update(self, tensors: Any, step: int) -> tuple[Any, dict[str, torch.Tensor], int, float]:
        """One step's update; returns the result, the new trainable weights, their version and the seconds
        the update computed (the rest of the call's time is transfer)."""
        started = time.perf_counter()
        result = self.updater.update(tensors, step)
        seconds = time.perf_counter() - started
        return result, trainable_state(self.policy, self.name), self.policy.version(self.name), seconds

    def group_address(self) -> tuple[str, int]:
        """Where rank 0 of an update group listens: this node's address and a free port on it."""
        import socket

        import ray

        address = ray.util.get_node_ip_address()
        with socket.socket() as sock:
            sock.bind((address, 0))
            return address, sock.getsockname()[1]

    def join_group(self, address: str, port: int, rank: int, world_size: int) -> int:
        """Join the update group of this policy (every rank calls it at the same time); returns the rank."""
        from datetime import timedelta

        import torch.distributed as torch_dist

        if address.startswith("127."):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one machine: keep gloo on the loopback device
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        torch_dist.init_process_group(
            backend, init_method=f"tcp://{address}:{port}", rank=rank, world_size=world_size,
            timeout=timedelta(minutes=10),
        )
        return torch_dist.get_rank()

    def learning_rate(self) -> float:
        return self.updater.learning_rate()

    def scheduler_step(self) -> None:
        self.updater.scheduler_step()

    def load_weights(self, weights: Mapping[str, torch.Tensor], version: int) -> None:
        install_weights(self.policy, self.name, weights, version)

    def state_dict(self, what: str) -> dict[str, Any]:
        return _part(self.updater, what).state_dict()

    def load_state_dict(self, what: str, state: Mapping[str, Any]) -> None:
        _part(self.updater, what).load_state_dict(state)

    def pid(self) -> int:
        return os.getpid()


def _check_what(what: str) -> str:
    if what not in ("optimizer", "scheduler"):
        raise ValueError(f"`what` must be 'optimizer' or 'scheduler', got {what!r}")
    return what


def _part(updater: Any, what: str) -> Any:
    return getattr(updater, _check_what(what))


class RemoteState:
    """The driver's stand-in for the optimizer or scheduler of a policy's UpdateWorkers (what checkpoints
    call): ``state_dict`` reads rank 0's (every rank holds the same), ``load_state_dict`` sets every rank's."""

    def __init__(self, actors: Sequence[Any], what: str) -> None:
        self.actors = list(actors)
        self.what = _check_what(what)

    def state_dict(self) -> dict[str, Any]:
        import ray

        return ray.get(self.actors[0].state_dict.remote(self.what))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        import ray

        ray.get([actor.load_state_dict.remote(self.what, state) for actor in self.actors])


def shard_rows(tensors: Any, num_shards: int, pad_token_id: int) -> list[Any]:
    """``tensors`` (one policy's :class:`~pettingllms.execution.PolicyTensors`, advantages filled) cut into
    ``num_shards`` row sets of whole problems, contiguous and in order (a problem's rows share prompts);
    None for a shard that gets no problem (its rank joins the step with zero gradients)."""
    from pettingllms.execution import tensorize
    from pettingllms.workers.engine import shard_problem_ids

    problems = list(dict.fromkeys(s.problem_id for s in tensors.samples))
    parts = [set(ids) for _, ids in shard_problem_ids(problems, num_shards)]
    shards: list[Any] = [None] * num_shards
    for index, chosen in enumerate(parts):
        rows = [i for i, s in enumerate(tensors.samples) if s.problem_id in chosen]
        shard = tensorize([tensors.samples[i] for i in rows], pad_token_id)[tensors.policy]
        shard.advantages = tensors.advantages[rows].clone()
        shards[index] = shard
    return shards


class RemoteUpdater:
    """Policy ``name``'s updates on its UpdateWorkers ``actors`` (one, or a data-parallel group in rank
    order), with weight sync to ``rollout_actors`` and the driver's ``policy``."""

    def __init__(self, name: str, policy: Any, actors: Sequence[Any], rollout_actors: Sequence[Any], pad_token_id: int) -> None:
        if not actors:
            raise ValueError(f"RemoteUpdater of policy {name!r} needs at least one UpdateWorker actor")
        self.name = name
        self.policy = policy
        self.actors = list(actors)
        self.actor = self.actors[0]  # rank 0: its states are the checkpoint's, its weights the ones synced
        self.rollout_actors = list(rollout_actors)
        self.pad_token_id = pad_token_id
        self.optimizer = RemoteState(self.actors, "optimizer")
        self.scheduler = RemoteState(self.actors, "scheduler")
        # Totals for benchmarks: weight bytes sent to RolloutWorkers, seconds the workers spent computing updates.
        self.sync_bytes = 0
        self.compute_seconds = 0.0
        self._pending: tuple[int, list[Any]] | None = None  # (step, the workers' futures) of a submitted update

    def learning_rate(self) -> float:
        import ray

        return ray.get(self.actor.learning_rate.remote())

    def submit(self, tensors: Any, step: int) -> None:
        """Start step ``step``'s update on the workers and return at once; the next :meth:`update` of that
        step collects it. The trainer submits every policy's update before it collects the first, so the
        policies' UpdateWorkers (on their own devices) compute at the same time."""
        shards = [tensors] if len(self.actors) == 1 else shard_rows(tensors, len(self.actors), self.pad_token_id)
        self._pending = (step, [actor.update.remote(shard, step) for actor, shard in zip(self.actors, shards)])

    def update(self, tensors: Any, step: int) -> Any:
        """Step ``step``'s update (the one :meth:`submit` started, else started now): the result; the new
        weights are installed in the driver's policy and pushed to the RolloutWorkers."""
        import ray

        if self._pending is None or self._pending[0] != step:
            self.submit(tensors, step)
        _, futures = self._pending
        self._pending = None
        outputs = ray.get(futures)
        result, weights, version, _ = outputs[0]
        self.compute_seconds += max(output[3] for output in outputs)
        install_weights(self.policy, self.name, weights, version)
        self._push(weights, version, to_update_workers=False)
        return result

    def scheduler_step(self) -> None:
        import ray

        ray.get([actor.scheduler_step.remote() for actor in self.actors])

    def push_policy(self) -> None:
        """Send the driver's weights and version of this policy to its workers (after a resume restored them)."""
        self._push(trainable_state(self.policy, self.name), self.policy.version(self.name), to_update_workers=True)

    def _push(self, weights: Mapping[str, torch.Tensor], version: int, *, to_update_workers: bool) -> None:
        import ray

        ref = ray.put(dict(weights))  # one copy in the object store, read by every worker
        actors = [*self.rollout_actors, *(self.actors if to_update_workers else [])]
        ray.get([actor.load_weights.remote(ref, int(version)) for actor in actors])
        self.sync_bytes += len(self.rollout_actors) * sum(t.numel() * t.element_size() for t in weights.values())
