"""The public library's import path ``comlrl.utils.reward_utils``. Its helpers have no counterpart here that
means the same thing, so none is provided: the reward calling conventions live in
:class:`comlrl.trainers.core.oracle.Oracle` (a class, not ``call_reward_function``), a reward range is the
attribute ``reward_func.reward_range = (low, high)`` that ``log_reward_distribution`` reads, and the
trainers never reshape reward lists. docs/compatibility.md (section 8) lists each public name.
"""

__all__ = []
