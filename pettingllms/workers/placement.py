"""Where a run's workers go under ``run.backend: ray``: the placement model, its Ray bundles and the fit check.

A *device* is one GPU (``model.device`` cuda) or one CPU *slot* of ``run.cpu_slot`` CPUs (``model.device``
cpu). Per policy (the run's policy names: ``shared`` at L1, one per role at L2/L3 unless ``policy.agents``
groups them), ``placement.<policy>`` gives ``rollout_devices`` (RolloutWorker replicas), ``update_devices``
(UpdateWorker ranks) and ``colocate`` (the update ranks sit on the rollout devices instead of devices of
their own). Each EnvWorker asks for ``run.env_worker_cpus`` CPUs.

:meth:`Placement.bundles` is the list of Ray placement-group bundles, in a fixed order: per policy its
rollout bundles, then (unless colocated) its update bundles; then one bundle per EnvWorker. A GPU device is
``{"GPU": 1, "CPU": 1}``, a CPU device ``{"CPU": cpu_slot}``, an EnvWorker ``{"CPU": env_worker_cpus}``.
:meth:`Placement.worker_bundles` / :meth:`Placement.env_bundles` give the indices to pin actors with
``PlacementGroupSchedulingStrategy(placement_group_bundle_index=i)``, and :meth:`Placement.worker_resources`
what each actor asks of its bundle (half of a bundle that holds a rollout and an update actor).

:func:`check_fits` compares :meth:`Placement.demand` with the resources at hand (:func:`available_resources`
on this machine; ``ray.cluster_resources()`` on a cluster) and raises :class:`PlacementError` naming what is
short before anything starts. Nothing here imports Ray.

:func:`check_backend_config` is the config validation of ``run.backend`` and its keys and of the
``placement`` section (called by :func:`pettingllms.config.validate_config`); it, the section's entries
(:class:`PolicyPlacement`) and :func:`policy_names` are declared with the config
(:mod:`pettingllms.config.placement_section`, :mod:`pettingllms.config.levels`) and imported here.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pettingllms.config.levels import policy_names
from pettingllms.config.placement_section import (
    BACKENDS,
    PLACEMENT_DEFAULTS,
    RAY_CONNECT_TIMEOUT_S,
    PolicyPlacement,
    check_backend_config,
    check_ray_address,
)

__all__ = [
    "BACKENDS",
    "DEVICE_KINDS",
    "PLACEMENT_DEFAULTS",
    "RAY_CONNECT_TIMEOUT_S",
    "Placement",
    "PlacementError",
    "PolicyPlacement",
    "available_resources",
    "check_backend_config",
    "check_fits",
    "check_ray_address",
    "placement_from_config",
    "policy_names",
]

DEVICE_KINDS: tuple[str, ...] = ("gpu", "cpu")
# Ray keeps resource amounts to 1e-4; sums of fractional requests are compared with that slack.
_SLACK = 1e-4


class PlacementError(ValueError):
    """A placement that cannot be satisfied by the resources at hand (raised before any worker starts)."""


def _count(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class Placement:
    """The whole run's placement: device kind, CPU sizes, EnvWorkers and each policy's devices."""

    device_kind: str = field(metadata={"help": "gpu | cpu"})
    cpu_slot: float = field(metadata={"help": "CPUs one CPU device stands for (run.cpu_slot)"})
    env_worker_cpus: float = field(metadata={"help": "CPUs each EnvWorker asks for (run.env_worker_cpus)"})
    num_env_workers: int = field(metadata={"help": "EnvWorker actors (run.num_env_workers)"})
    policies: Mapping[str, PolicyPlacement] = field(metadata={"help": "policy name -> its placement, run order"})

    def __post_init__(self) -> None:
        if self.device_kind not in DEVICE_KINDS:
            raise ValueError(f"`device_kind` must be one of {list(DEVICE_KINDS)}, got {self.device_kind!r}")
        for key in ("cpu_slot", "env_worker_cpus"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"`{key}` must be a number > 0, got {value!r}")
        if isinstance(self.num_env_workers, bool) or not isinstance(self.num_env_workers, int) or self.num_env_workers < 1:
            raise ValueError(f"`num_env_workers` must be an integer >= 1, got {self.num_env_workers!r}")
        if not self.policies:
            raise ValueError("`policies` must hold at least one policy")

    def device_bundle(self) -> dict[str, float]:
        """The bundle of one device: a GPU with one CPU to drive it, or one CPU slot."""
        return {"GPU": 1.0, "CPU": 1.0} if self.device_kind == "gpu" else {"CPU": float(self.cpu_slot)}

    def bundles(self) -> list[dict[str, float]]:
        """Ray placement-group bundles: per policy its device bundles, then one per EnvWorker."""
        out = [self.device_bundle() for p in self.policies.values() for _ in range(p.num_devices)]
        return out + [{"CPU": float(self.env_worker_cpus)} for _ in range(self.num_env_workers)]

    def worker_bundles(self, policy: str) -> dict[str, list[int]]:
        """``{"rollout": [bundle indices], "update": [bundle indices]}`` of one policy's workers, rank order."""
        if policy not in self.policies:
            raise KeyError(f"unknown policy {policy!r}; the placement holds {list(self.policies)}")
        start = 0
        for name, p in self.policies.items():
            if name == policy:
                rollout = list(range(start, start + p.rollout_devices))
                first_update = start if p.colocate else start + p.rollout_devices
                return {"rollout": rollout, "update": list(range(first_update, first_update + p.update_devices))}
            start += p.num_devices
        raise AssertionError("unreachable")

    def env_bundles(self) -> list[int]:
        """Bundle indices of the EnvWorkers, worker order."""
        first = sum(p.num_devices for p in self.policies.values())
        return list(range(first, first + self.num_env_workers))

    def worker_resources(self, policy: str, role: str) -> list[dict[str, float]]:
        """What each ``role`` ("rollout" / "update") actor of ``policy`` asks of its bundle, rank order: the
        whole bundle, or half of it where a rollout and an update actor share it (colocated)."""
        indices = self.worker_bundles(policy)
        if role not in indices:
            raise KeyError(f"`role` must be 'rollout' or 'update', got {role!r}")
        shared = set(indices["rollout"]) & set(indices["update"])
        bundle = self.device_bundle()
        return [{k: v / 2 if i in shared else v for k, v in bundle.items()} for i in indices[role]]

    def demand(self) -> dict[str, float]:
        """Total resources of all bundles (``GPU`` only for a GPU placement)."""
        total: dict[str, float] = {}
        for bundle in self.bundles():
            for key, value in bundle.items():
                total[key] = total.get(key, 0.0) + value
        return total

    def describe(self) -> str:
        """One line per policy and one for the EnvWorkers, as ``pettingllms plan`` prints them."""
        unit = "GPU" if self.device_kind == "gpu" else f"CPU slot of {_count(self.cpu_slot)} CPUs"
        lines = [f"placement ({self.device_kind}; a device is one {unit}):"]
        for name, p in self.policies.items():
            where = self.worker_bundles(name)
            lines.append(f"  policy {name}: {p.describe()} (bundles rollout {where['rollout']}, update {where['update']})")
        lines.append(
            f"  EnvWorkers: {self.num_env_workers} x {_count(self.env_worker_cpus)} CPU (bundles {self.env_bundles()})"
        )
        demand = ", ".join(f"{_count(v)} {k}" for k, v in sorted(self.demand().items(), reverse=True))
        lines.append(f"  total: {len(self.bundles())} bundles, {demand}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "device_kind": self.device_kind,
            "cpu_slot": self.cpu_slot,
            "env_worker_cpus": self.env_worker_cpus,
            "num_env_workers": self.num_env_workers,
            "policies": {
                name: {"rollout_devices": p.rollout_devices, "update_devices": p.update_devices,
                       "colocate": p.colocate, "bundles": self.worker_bundles(name)}
                for name, p in self.policies.items()
            },
            "env_bundles": self.env_bundles(),
            "bundles": self.bundles(),
            "demand": self.demand(),
        }


def _parts(placement: Placement, resource: str) -> str:
    """What makes up the demand for ``resource``, e.g. "policy tool: 1 rollout + 1 update; 2 EnvWorkers x 0.25"."""
    per_device = placement.device_bundle().get(resource, 0.0)
    parts = []
    if per_device:
        for name, p in placement.policies.items():
            size = "" if per_device == 1 else f" x {_count(per_device)}"
            parts.append(f"policy {name}: {p.describe()}{size}")
    if resource == "CPU":
        parts.append(f"{placement.num_env_workers} EnvWorkers x {_count(placement.env_worker_cpus)}")
    return "; ".join(parts)


def check_fits(placement: Placement, available: Mapping[str, float]) -> None:
    """Raise :class:`PlacementError` when ``available`` (``{"CPU": n, "GPU": m}``) lacks what the placement
    needs, naming each short resource, what makes up its demand and what the cluster has."""
    short = []
    for resource, needed in sorted(placement.demand().items(), reverse=True):  # GPU before CPU
        have = float(available.get(resource, 0.0) or 0.0)
        if needed > have + _SLACK:
            plural = "s" if needed != 1 else ""
            short.append(
                f"placement needs {_count(needed)} {resource}{plural} ({_parts(placement, resource)}), "
                f"the cluster has {_count(have)}"
            )
    if short:
        raise PlacementError("; and ".join(short))


def available_resources(ray_address: str | None = None) -> dict[str, float] | None:
    """The resources to check a placement against before Ray starts: this machine's CPUs and GPUs when Ray
    would start a local cluster (``ray_address`` None); None for a cluster to join, whose resources are
    known once joined (then check against ``ray.cluster_resources()``)."""
    if ray_address is not None:
        return None
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {"CPU": float(os.cpu_count() or 1), "GPU": float(gpus)}


# ---- from a run config ---------------------------------------------------------------------------------

def placement_from_config(config: Mapping[str, Any]) -> Placement:
    """The :class:`Placement` of a resolved (and validated) run config; the device kind is ``gpu`` when
    ``model.device`` is a CUDA device, else ``cpu``."""
    names = policy_names(config)
    check_backend_config(config, names)
    run, section = config["run"], config.get("placement") or {}
    policies = {name: PolicyPlacement(name, **{**PLACEMENT_DEFAULTS, **section.get(name, {})}) for name in names}
    kind = "gpu" if str(config["model"]["device"]).startswith("cuda") else "cpu"
    return Placement(kind, float(run["cpu_slot"]), float(run["env_worker_cpus"]), run["num_env_workers"], policies)
