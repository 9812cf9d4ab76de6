"""What each stage and command needs from an environment and its agents, and its check: the import path of
:mod:`pettingllms.config.contract` (the contract is checked with the config, before anything is written)."""

from pettingllms.config.contract import (
    GENERIC_NEEDS,
    NEEDS,
    ORACLE_POLICY,
    PROTOCOL,
    RANDOM_POLICY,
    Need,
    check_classes,
    check_command,
    check_contract,
    scripted_policy_needs,
)

__all__ = [
    "GENERIC_NEEDS",
    "NEEDS",
    "ORACLE_POLICY",
    "PROTOCOL",
    "RANDOM_POLICY",
    "Need",
    "check_classes",
    "check_command",
    "check_contract",
    "scripted_policy_needs",
]
