"""The public library's import path ``comlrl.utils.reward_processor`` (its docs import ``RewardProcessors``
from here), defined in :mod:`comlrl.trainers.core.reward_functions`. For users' scripts only: no comlrl
module imports from here.
"""

from comlrl.trainers.core.reward_functions import RewardProcessors

__all__ = ["RewardProcessors"]
