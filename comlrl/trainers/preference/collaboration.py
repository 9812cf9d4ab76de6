"""The public library's import path ``comlrl.trainers.preference.collaboration``: its
``CentralizedCollaboration`` (one actor model writes every role) is
:class:`comlrl.trainers.core.centralized.CentralizedCollaboration`, which every comlrl trainer uses for
``collaboration_mode="centralized"``. Ours is built from an adapter and the role formatters and hands the
trainer the joint prompt, the role split and a wrapped oracle; the public one also takes the reward function
and is itself called as one. The public ``joint_sequence_log_prob`` and ``joint_policy_gradient_loss`` are
not provided (docs/compatibility.md, section 8). For users' scripts only: no comlrl module imports from here.
"""

from comlrl.trainers.core.centralized import CentralizedCollaboration

__all__ = ["CentralizedCollaboration"]
