"""The public library's import path ``comlrl.schedulers.device_scheduler``: ``DeviceScheduler``, defined in
:mod:`comlrl.trainers.core.device_scheduler`. For users' scripts only: no comlrl module imports from here.
"""

from comlrl.trainers.core.device_scheduler import DeviceScheduler

__all__ = ["DeviceScheduler"]
