"""Training stages of pettingllms: the oracle-demonstration warm start (:mod:`pettingllms.trainer.sft`,
:mod:`pettingllms.trainer.demonstrations`) and the AT-GRPO trainer (:mod:`pettingllms.trainer.at_grpo`).

Names load on first access, so ``import pettingllms.trainer`` stays light (no torch until used).
"""

import importlib
from typing import Any

_LAZY = {
    "ATGRPOConfig": "pettingllms.trainer.at_grpo_config",
    "ATGRPOTrainer": "pettingllms.trainer.at_grpo",
    "at_grpo_group_key": "pettingllms.trainer.at_grpo",
    "at_grpo_loss": "pettingllms.trainer.at_grpo",
    "draw_problem_ids": "pettingllms.trainer.at_grpo",
    "member_table": "pettingllms.trainer.at_grpo",
    "rollout_metrics": "pettingllms.trainer.at_grpo",
    "sample_advantages": "pettingllms.trainer.at_grpo",
    "SFTWarmStartConfig": "pettingllms.trainer.sft",
    "sft_stage": "pettingllms.trainer.sft",
    "sft_warm_start": "pettingllms.trainer.sft",
    "make_demonstrations": "pettingllms.trainer.demonstrations",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pettingllms.trainer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
