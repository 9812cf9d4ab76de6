"""The ``run.backend`` keys and the ``placement`` section of a run config, and their check
(:func:`check_backend_config`, run by :func:`~pettingllms.config.validate_config`).

Declared with the config, below the Ray workers that use them (:mod:`pettingllms.workers.placement` turns a
checked config into a :class:`~pettingllms.workers.placement.Placement` and imports these back), so that a
config is checked without the workers, Ray or torch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pettingllms.config.errors import ConfigError
from pettingllms.config.levels import policy_names

__all__ = [
    "BACKENDS",
    "PLACEMENT_DEFAULTS",
    "RAY_CONNECT_TIMEOUT_S",
    "PolicyPlacement",
    "check_backend_config",
    "check_ray_address",
]

BACKENDS: tuple[str, ...] = ("local", "ray")
#: Seconds a run waits to reach the cluster at ``run.ray_address`` before it refuses to start (docs/scaling.md).
RAY_CONNECT_TIMEOUT_S = 10.0
#: The keys of one ``placement.<policy>`` entry with their defaults (a policy not listed takes them all).
PLACEMENT_DEFAULTS: dict[str, Any] = {"rollout_devices": 1, "update_devices": 1, "colocate": False}


@dataclass(frozen=True)
class PolicyPlacement:
    """The devices of one policy: ``rollout_devices`` RolloutWorker replicas, ``update_devices`` UpdateWorker
    ranks, and whether the update ranks share the rollout devices (``colocate``)."""

    policy: str = field(metadata={"help": "policy name (a value of policy.agents)"})
    rollout_devices: int = field(default=1, metadata={"help": "devices (and RolloutWorker replicas), >= 1"})
    update_devices: int = field(default=1, metadata={"help": "devices (and data-parallel UpdateWorker ranks), >= 1"})
    colocate: bool = field(default=False, metadata={"help": "update ranks on the rollout devices"})

    def __post_init__(self) -> None:
        for key in ("rollout_devices", "update_devices"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"`placement.{self.policy}.{key}` must be an integer >= 1, got {value!r}")
        if not isinstance(self.colocate, bool):
            raise ConfigError(f"`placement.{self.policy}.colocate` must be true or false, got {self.colocate!r}")

    @property
    def num_devices(self) -> int:
        """Devices the policy takes: colocated, the larger side holds both; else rollout + update."""
        if self.colocate:
            return max(self.rollout_devices, self.update_devices)
        return self.rollout_devices + self.update_devices

    def describe(self) -> str:
        if self.colocate:
            return f"{self.rollout_devices} rollout + {self.update_devices} update colocated on {self.num_devices}"
        return f"{self.rollout_devices} rollout + {self.update_devices} update"


def _check_number(key: str, value: Any, minimum: float, integer: bool) -> None:
    ok = not isinstance(value, bool) and isinstance(value, int if integer else (int, float))
    if not ok or not (value >= minimum if integer else minimum < value < math.inf):
        what = f"an integer >= {minimum}" if integer else f"a number > {minimum:g}"
        raise ConfigError(f"`run.{key}` must be {what}, got {value!r}")


def check_backend_config(config: Mapping[str, Any], names: Sequence[str] | None = None) -> None:
    """Validate ``run.backend``, ``run.ray_address``, ``run.num_env_workers``, ``run.env_worker_cpus``,
    ``run.cpu_slot`` and the ``placement`` section against the run's policy ``names`` (default:
    :func:`policy_names`). Checked under either backend, so a typo does not wait for the first Ray run."""
    run = config["run"]
    if run["backend"] not in BACKENDS:
        raise ConfigError(f"`run.backend` must be one of {list(BACKENDS)}, got {run['backend']!r}")
    address = run["ray_address"]
    if address is not None and (not isinstance(address, str) or not address.strip()):
        raise ConfigError(f"`run.ray_address` must be null (start a local cluster), `auto` or host:port, got {address!r}")
    if run["backend"] == "ray":
        check_ray_address(address)
    _check_number("num_env_workers", run["num_env_workers"], 1, integer=True)
    _check_number("env_worker_cpus", run["env_worker_cpus"], 0, integer=False)
    _check_number("cpu_slot", run["cpu_slot"], 0, integer=False)
    names = list(policy_names(config) if names is None else names)
    section = config.get("placement") or {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"`placement` must map policy names {names} to their devices, got {section!r}")
    for policy, entry in section.items():
        if policy not in names:
            raise ConfigError(f"`placement.{policy}`: unknown policy {policy!r}; the run's policies are {names}")
        if not isinstance(entry, Mapping):
            raise ConfigError(
                f"`placement.{policy}` must be a mapping with keys {sorted(PLACEMENT_DEFAULTS)}, got {entry!r}"
            )
        unknown = sorted(set(entry) - set(PLACEMENT_DEFAULTS))
        if unknown:
            raise ConfigError(
                f"unknown key `placement.{policy}.{unknown[0]}`; known keys: {sorted(PLACEMENT_DEFAULTS)}"
            )
        PolicyPlacement(policy, **{**PLACEMENT_DEFAULTS, **entry})  # its own checks name the key


def check_ray_address(address: str | None, timeout: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """That something listens at the cluster address ``address`` (``host:port``, ``ray://host:port``, or
    ``auto`` with ``RAY_ADDRESS`` set): a TCP connection within ``timeout`` seconds, else a ConfigError naming
    the address, before anything is written. Ray itself would wait minutes, logging from its core.
    None (a local cluster) and ``auto`` without ``RAY_ADDRESS`` (Ray looks for a local one and says at once
    when there is none) are left to Ray."""
    import socket

    if address is None or (address == "auto" and not os.environ.get("RAY_ADDRESS")):
        return
    target = os.environ["RAY_ADDRESS"] if address == "auto" else address
    where = target.split("://", 1)[-1]
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"`run.ray_address` must be null, `auto` or host:port, got {target!r}")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return
    except OSError as error:
        reason = "nothing answered" if isinstance(error, TimeoutError) else (error.strerror or str(error)).lower()
        raise ConfigError(
            f"`run.ray_address` {target}: no Ray cluster reachable there ({reason}; the check waits at most "
            f"{timeout:g} s); start "
            f"one there (`ray start --head --port {port}`) or set run.ray_address=null to start a local one"
        ) from None
