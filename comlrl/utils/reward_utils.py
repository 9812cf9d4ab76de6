"""The public library's import path ``comlrl.utils.reward_utils``: its reward-function helpers, defined in
:mod:`comlrl.trainers.core.reward_functions` with the public meanings (docs/compatibility.md, section 8).
For users' scripts only: no comlrl module imports from here.
"""

from comlrl.trainers.core.reward_functions import (
    RewardCallable,
    call_reward_function,
    normalize_reward_lengths,
    resolve_reward_range,
    set_reward_range,
)

__all__ = [
    "RewardCallable",
    "resolve_reward_range",
    "set_reward_range",
    "call_reward_function",
    "normalize_reward_lengths",
]
