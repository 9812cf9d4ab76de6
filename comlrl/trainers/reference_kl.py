"""Moved to :mod:`comlrl.trainers.core.reference`; this module re-exports its public names."""

from comlrl.trainers.core.reference import ReferencePolicy, reference_devices, shaped_rewards

__all__ = ["ReferencePolicy", "reference_devices", "shaped_rewards"]
