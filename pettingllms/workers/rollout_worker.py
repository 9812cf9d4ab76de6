"""RolloutWorkers: one policy's generation backend in its own process, refreshed after every update.

A :class:`RolloutWorker` (the body of a Ray actor, see :mod:`pettingllms.workers.system`) holds a copy of
the run's :class:`~comlrl.policy.MultiAgentPolicy` and serves one policy of it through
:class:`~comlrl.rollout.hf.HFBackend`, or with ``rollout.backend: vllm`` through a
:class:`~comlrl.rollout.VLLMBackend` on the worker's devices (its engine takes the installed weights before
the next generate, the version moving with them). Completions carry the
weights version they were sampled with; :meth:`RolloutWorker.load_weights` installs the trainable tensors
and the version an UpdateWorker produced, so the version on a completion always names the weights that
sampled it.

:class:`RemoteBackend` is the client side: a rollout backend (the ``generate`` protocol of
:class:`~pettingllms.execution.router.Router`) whose calls go to a RolloutWorker actor. EnvWorkers route
each policy's requests through one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["RemoteBackend", "RolloutWorker", "install_weights", "trainable_state"]


def trainable_state(policy: Any, name: str) -> dict[str, torch.Tensor]:
    """Policy ``name``'s trainable tensors (a LoRA policy: its adapter), detached CPU copies by name: what
    one weight sync moves."""
    return {key: value.detach().to("cpu", copy=True) for key, value in policy.named_trainable_parameters(name)}


def install_weights(policy: Any, name: str, weights: Mapping[str, torch.Tensor], version: int) -> None:
    """Copy ``weights`` (from :func:`trainable_state`) into policy ``name`` in place and set its version.

    The names must be exactly the policy's trainable ones: a missing or extra name is an error naming
    them (a sync between different layouts would otherwise train one model and sample from another)."""
    params = dict(policy.named_trainable_parameters(name))
    missing, extra = sorted(set(params) - set(weights)), sorted(set(weights) - set(params))
    if missing or extra:
        raise ValueError(
            f"weights for policy {name!r} do not match its trainable parameters: missing {missing[:5]}, "
            f"unexpected {extra[:5]}"
        )
    with torch.no_grad():
        for key, param in params.items():
            value = weights[key]
            if value.shape != param.shape:
                raise ValueError(f"weights for policy {name!r}: {key} has shape {tuple(value.shape)}, "
                                 f"the policy's is {tuple(param.shape)}")
            param.copy_(value.to(param.device, param.dtype))
    policy.handle(name).version = int(version)


class RolloutWorker:
    """Generation for policy ``name`` of ``policy`` (a copy the worker owns) on ``device``.

    ``torch_threads`` pins torch's intra-op threads (Ray sets ``OMP_NUM_THREADS=1`` in actors; the driver
    passes its own count so both paths compute alike). ``vllm`` (a :class:`~comlrl.rollout.VLLMSettings`)
    serves the policy with vLLM instead of HF. ``imports``: the user's modules
    (:class:`~pettingllms.config.imports.ModuleImports`), imported first."""

    def __init__(
        self, policy: Any, name: str, *, torch_threads: int, device: str | None = None, vllm: Any = None,
        imports: Any = None, **backend_kwargs,
    ):
        if imports is not None:
            imports.load()
        from comlrl.rollout.hf import HFBackend

        torch.set_num_threads(int(torch_threads))
        if name not in policy.policies:
            raise ValueError(f"RolloutWorker: unknown policy {name!r}; the policy holds {policy.policies}")
        if device is not None:
            for model in policy.models():
                model.to(device)
        self.policy = policy
        self.name = name
        if vllm is not None:
            from comlrl.rollout.vllm.backend import VLLMBackend

            self.backend = VLLMBackend({name: policy.handle(name)}, vllm)
        else:
            self.backend = HFBackend({name: policy.handle(name)}, **backend_kwargs)

    def generate(self, requests: Sequence[Any], params: Any = None) -> list[list[Any]]:
        return self.backend.generate(requests, params)

    def load_weights(self, weights: Mapping[str, torch.Tensor], version: int) -> int:
        """Install an update's weights; returns the version now served."""
        install_weights(self.policy, self.name, weights, version)
        return self.policy.version(self.name)

    def version(self) -> int:
        return self.policy.version(self.name)

    def pid(self) -> int:
        import os

        return os.getpid()


class RemoteBackend:
    """A rollout backend whose ``generate`` runs on the RolloutWorker actors of one policy.

    With several actors (``placement.<policy>.rollout_devices`` > 1) a call's requests are cut into
    contiguous chunks, one per actor, generated at the same time and put back in order (a completion
    depends on its request's seed, not on its batch partners)."""

    wants_env_context = False  # the worker samples from the prompt alone; scripted policies stay local

    def __init__(self, actors: Sequence[Any], policy: str) -> None:
        if not actors:
            raise ValueError(f"RemoteBackend of policy {policy!r} needs at least one RolloutWorker actor")
        self.actors = list(actors)
        self.name = policy
        self.generate_calls = 0

    def generate(self, requests: Sequence[Any], params: Any = None) -> list[list[Any]]:
        import ray

        wrong = sorted({r.policy for r in requests} - {self.name})
        if wrong:
            raise ValueError(f"RemoteBackend of policy {self.name!r} got requests for {wrong}")
        requests = list(requests)
        size = -(-len(requests) // len(self.actors))  # ceil: every actor but the last gets `size`
        chunks = [requests[i : i + size] for i in range(0, len(requests), size)]
        self.generate_calls += 1
        results = ray.get([actor.generate.remote(chunk, params) for actor, chunk in zip(self.actors, chunks)])
        return [group for chunk in results for group in chunk]

    def sync_weights(self, policy: str) -> None:
        """No-op: UpdateWorkers push weights to the RolloutWorkers after every update."""
