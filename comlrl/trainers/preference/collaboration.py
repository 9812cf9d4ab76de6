"""The public library's import path ``comlrl.trainers.preference.collaboration``: its
``CentralizedCollaboration(adapter, formatters, reward_func, num_roles)`` (one actor model writes every role;
the object builds the joint prompt, splits joint completions into roles and, called as a reward function,
scores them with the task reward) is :class:`comlrl.trainers.core.centralized.CentralizedRewardCollaboration`.
comlrl's trainers use :class:`comlrl.trainers.core.centralized.CentralizedCollaboration` for
``collaboration_mode="centralized"``, with its own constructor. The public ``joint_sequence_log_prob`` and
``joint_policy_gradient_loss`` are internals of the public trainers and are not provided
(docs/compatibility.md, section 8). For users' scripts only: no comlrl module imports from here.
"""

from comlrl.trainers.core.centralized import CentralizedRewardCollaboration as CentralizedCollaboration

__all__ = ["CentralizedCollaboration"]
