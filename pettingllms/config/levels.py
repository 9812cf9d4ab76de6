"""The policy levels of a run config and what they make of its roles: the workflow a level plays
(:func:`level_turn_order`), which policy acts for which role (:func:`level_policy_map`) and, of a resolved
config, its roles (:func:`run_workflow`) and policy names (:func:`policy_names`).

Declared with the config, below the engine (:mod:`pettingllms.execution.policies` builds the models from
them), so that checking a config needs neither the engine nor torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "POLICY_LEVELS",
    "SINGLE_ROLE",
    "level_policy_map",
    "level_turn_order",
    "policy_names",
    "run_workflow",
]

POLICY_LEVELS: tuple[str, ...] = ("L0", "L1", "L2", "L3")
SINGLE_ROLE = "single"


def level_turn_order(policy_level: str, turn_order: Sequence[str]) -> tuple[str, ...]:
    """The workflow a level plays: L0 is the ``single`` role alone; other levels keep ``turn_order``."""
    if policy_level not in POLICY_LEVELS:
        raise ValueError(f"`policy_level` must be one of {list(POLICY_LEVELS)}, got {policy_level!r}")
    if policy_level == "L0":
        return (SINGLE_ROLE,)
    order = tuple(turn_order)
    if not order:
        raise ValueError("`turn_order` must name at least one role")
    return order


def level_policy_map(
    policy_level: str, agent_policies: Mapping[str, str] | None, roles: Sequence[str]
) -> dict[str, str]:
    """``{role: policy}`` for ``roles`` (distinct, in first-appearance order) at ``policy_level``:
    ``agent_policies`` when given (it must map exactly those roles), else L1's ``shared`` for every role and
    one policy per role at the other levels."""
    roles = list(dict.fromkeys(roles))
    if agent_policies is None:
        if policy_level == "L1":
            return {role: "shared" for role in roles}
        return {role: role for role in roles}
    mapping = dict(agent_policies)
    missing = [r for r in roles if r not in mapping]
    stray = [r for r in mapping if r not in roles]
    if missing or stray:
        raise ValueError(
            f"`agent_policies` must map exactly the roles {roles}; missing {missing}, "
            f"not in the workflow {stray}"
        )
    mapping = {r: mapping[r] for r in roles}
    if policy_level in ("L0", "L1") and len(set(mapping.values())) != 1:
        raise ValueError(
            f"`agent_policies` maps roles to {sorted(set(mapping.values()))} but policy_level "
            f"{policy_level} has one policy; use L2 or L3 for several"
        )
    return mapping


def run_workflow(config: Mapping[str, Any]) -> list[str]:
    """The roles that act in a run, in turn order: ``env.turn_order`` at ``policy.level`` (L0: the
    environment's ``single`` role alone)."""
    return list(level_turn_order(config["policy"]["level"], config["env"]["turn_order"]))


def policy_names(config: Mapping[str, Any]) -> list[str]:
    """The run's policy names in turn order: what ``policy.agents`` maps the level's roles to (L1 default:
    ``shared``; L0 / L2 / L3 default: one per role), as :func:`pettingllms.execution.agent_policy_map`."""
    level = config["policy"]["level"]
    roles = level_turn_order(level, config["env"]["turn_order"])
    mapping = level_policy_map(level, dict(config["policy"]["agents"]) or None, roles)
    return list(dict.fromkeys(mapping.values()))
