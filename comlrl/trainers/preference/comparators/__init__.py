"""Comparator sources of the iterative preference trainers (see ``base.py`` for the protocol).

>>> comparator = build_comparator(args, ComparatorContext(policy, backend, args, args.output_dir, args.seed))
>>> comparator.begin_round(1)
>>> outputs = comparator.sample(items, agent_prompts, params, round_index=1, item_indices=[0, 1])
>>> comparator.end_round(1)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from comlrl.trainers.core.centralized import (
    CentralizedComparatorAdapter,
    CentralizedComparatorParseError,
    JointSplit,
    TaggedCentralizedComparatorAdapter,
    build_joint_prompt,
    check_adapter,
    split_joint_completions,
)
from comlrl.trainers.preference.comparators.api import APIComparator, api_key_headers, build_api_backend
from comlrl.trainers.preference.comparators.base import Comparator, ComparatorContext, ComparatorItemOutput
from comlrl.trainers.preference.comparators.copy import (
    CurrentCopyComparator,
    PolicyShadow,
    resolve_comparator_devices,
)
from comlrl.trainers.preference.comparators.current import (
    BackendComparator,
    CurrentComparator,
    comparator_seed,
    tokenizers_match,
)
from comlrl.trainers.preference.comparators.history import (
    HistoryComparator,
    capture_trainable,
    history_source_round,
    snapshots_to_keep,
)
from comlrl.trainers.preference.comparators.model import ModelComparator, comparator_sources
from comlrl.trainers.preference.config import COMPARATOR_POLICIES, COMPARATOR_POLICY_ALIASES, canonical_choice

COMPARATOR_CLASSES: dict[str, type] = {
    "current": CurrentComparator,
    "current_copy": CurrentCopyComparator,
    "model": ModelComparator,
    "history": HistoryComparator,
    "api": APIComparator,
}

__all__ = [
    "COMPARATOR_CLASSES",
    "APIComparator",
    "BackendComparator",
    "CentralizedComparatorAdapter",
    "CentralizedComparatorParseError",
    "Comparator",
    "ComparatorContext",
    "ComparatorItemOutput",
    "CurrentComparator",
    "CurrentCopyComparator",
    "HistoryComparator",
    "JointSplit",
    "ModelComparator",
    "PolicyShadow",
    "TaggedCentralizedComparatorAdapter",
    "api_key_headers",
    "build_api_backend",
    "build_comparator",
    "build_joint_prompt",
    "capture_trainable",
    "check_adapter",
    "comparator_seed",
    "comparator_sources",
    "history_source_round",
    "resolve_comparator_devices",
    "snapshots_to_keep",
    "split_joint_completions",
    "tokenizers_match",
]


def build_comparator(args: Any, context: ComparatorContext, **options: Any) -> Comparator:
    """The comparator source ``args.comparator_policy`` names (aliases accepted), built on ``context``.

    ``options`` go to that source's constructor (``copy_on_same_device`` for ``current_copy``,
    ``backend_options`` for ``api``).
    """
    policy = canonical_choice(
        "comparator_policy", args.comparator_policy, COMPARATOR_POLICIES, COMPARATOR_POLICY_ALIASES
    )
    if context.args is not args:
        context = dataclasses.replace(context, args=args)
    return COMPARATOR_CLASSES[policy](context, **options)
