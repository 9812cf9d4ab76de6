"""The public CoMLRL library's ``DeviceScheduler``: device specs (``None`` / ``"auto"``, one device, or a
list of 1 or n) turned into one ``torch.device`` per model, with its rules and sentences.

comlrl's configs check the same specs when they are built (:func:`comlrl.validation.check_devices`,
:func:`~comlrl.validation.check_device_count`, whose messages hold these sentences) and the
trainers place agents with :func:`comlrl.trainers.core.team.resolve_devices`; this class is for users'
scripts and for the public reference-KL helpers (:mod:`comlrl.trainers.core.reference_kl`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["DeviceScheduler", "DeviceSpec"]

DeviceSpec = str | Sequence[str]


class DeviceScheduler:
    """Static device placement: agents, critics and single models."""

    @staticmethod
    def assign_devices(
        num_agents: int,
        agent_devices: DeviceSpec | None,
        critic_devices: DeviceSpec | None,
        *,
        use_separate_critic: bool,
    ) -> tuple[list[torch.device], list[torch.device]]:
        """``(agent devices, critic devices)``, one per agent; separate critics default to the agents'
        spec, critics on the actors share their devices."""
        agents = DeviceScheduler.resolve_devices(agent_devices, num_agents, kind="agent_devices")
        if not use_separate_critic:
            return agents, list(agents)
        spec = critic_devices if critic_devices is not None else agent_devices
        return agents, DeviceScheduler.resolve_devices(spec, num_agents, kind="critic_devices")

    @staticmethod
    def assign_shared_critic_device(
        agent_devices: Sequence[torch.device], critic_devices: DeviceSpec | None
    ) -> torch.device:
        """The one critic's device: the first agent's unless ``critic_devices`` names one."""
        if critic_devices is None:
            return agent_devices[0]
        return DeviceScheduler.resolve_devices(critic_devices, 1, kind="critic_devices")[0]

    @staticmethod
    def resolve_devices(
        spec: DeviceSpec | None, num_devices: int, *, kind: str = "devices"
    ) -> list[torch.device]:
        """``num_devices`` devices from ``spec``: None / ``"auto"`` picks (:meth:`auto_devices`), a string
        or a list of one repeats, a list of ``num_devices`` maps one to one; ``kind`` names the spec in
        errors."""
        if num_devices < 1:
            raise ValueError(f"{kind} count must be >= 1.")
        if spec is None or (isinstance(spec, str) and spec.lower() == "auto"):
            return DeviceScheduler.auto_devices(num_devices)
        if isinstance(spec, str):
            return [torch.device(spec)] * num_devices
        if isinstance(spec, Sequence):
            if len(spec) == 0:
                raise ValueError(f"{kind} must be a non-empty list or 'auto'.")
            if len(spec) == 1:
                return [torch.device(spec[0])] * num_devices
            if len(spec) != num_devices:
                raise ValueError(f"{kind} length ({len(spec)}) must be 1 or {num_devices}.")
            return [torch.device(s) for s in spec]
        raise ValueError(f"Unsupported {kind} spec: {spec!r}.")

    @staticmethod
    def resolve_single_device(*specs: DeviceSpec | None) -> torch.device:
        """The device of the first spec that is not None (a list's first entry); auto when none is."""
        for spec in specs:
            if spec is None:
                continue
            if isinstance(spec, str):
                return DeviceScheduler.auto_devices(1)[0] if spec.lower() == "auto" else torch.device(spec)
            if isinstance(spec, Sequence):
                if len(spec) == 0:
                    raise ValueError("Device spec list must be non-empty.")
                first = spec[0]
                if isinstance(first, str) and first.lower() == "auto":
                    return DeviceScheduler.auto_devices(1)[0]
                return torch.device(first)
            raise ValueError(f"Unsupported device spec: {spec!r}.")
        return DeviceScheduler.auto_devices(1)[0]

    @staticmethod
    def auto_devices(num_devices: int) -> list[torch.device]:
        """One GPU each while there are enough (``cuda:0``, ``cuda:1``, ...), all on ``cuda:0`` when there
        are fewer, the CPU without CUDA."""
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count < 1:
            return [torch.device("cpu")] * num_devices
        if count < num_devices:
            return [torch.device("cuda:0")] * num_devices
        return [torch.device(f"cuda:{i}") for i in range(num_devices)]
