"""Re-export: the centralized adapter pieces live in :mod:`comlrl.trainers.core.centralized`, shared with
the centralized actor (``collaboration_mode="centralized"``)."""

from comlrl.trainers.core.centralized import (
    AdapterContractError,
    CentralizedComparatorAdapter,
    CentralizedComparatorParseError,
    JointSplit,
    TaggedCentralizedComparatorAdapter,
    build_joint_prompt,
    check_adapter,
    check_role_outputs,
    prompt_as_text,
    split_joint_completions,
)

__all__ = [
    "AdapterContractError",
    "CentralizedComparatorAdapter",
    "CentralizedComparatorParseError",
    "JointSplit",
    "TaggedCentralizedComparatorAdapter",
    "build_joint_prompt",
    "check_adapter",
    "check_role_outputs",
    "prompt_as_text",
    "split_joint_completions",
]
