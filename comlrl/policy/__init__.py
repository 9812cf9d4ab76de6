"""The multi-agent policy layer: which model (and LoRA adapter) acts for each agent.

>>> from comlrl.policy import MultiAgentPolicy
>>> team = MultiAgentPolicy.shared("test-tiny", ["writer", "critic"])   # L1: one model, two roles
>>> team.handle("critic").name
'shared'
"""

from comlrl.policy.multi_agent import (
    ARRANGEMENTS,
    LAYOUT_FILE,
    SHARED_POLICY,
    MultiAgentPolicy,
    PolicyHandle,
    read_layout,
)

__all__ = ["ARRANGEMENTS", "LAYOUT_FILE", "SHARED_POLICY", "MultiAgentPolicy", "PolicyHandle", "read_layout"]
