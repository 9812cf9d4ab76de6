"""Training stages of pettingllms: the oracle-demonstration warm start (:mod:`pettingllms.trainer.sft`,
:mod:`pettingllms.trainer.demonstrations`) and the AT-GRPO trainer (:mod:`pettingllms.trainer.at_grpo`, its
pure pieces in :mod:`~pettingllms.trainer.grouping`, :mod:`~pettingllms.trainer.problems`,
:mod:`~pettingllms.trainer.micro_batches`, :mod:`~pettingllms.trainer.losses`,
:mod:`~pettingllms.trainer.metrics` and :mod:`~pettingllms.trainer.at_grpo_setup`), one policy's update
(:mod:`pettingllms.trainer.policy_update`) and data-parallel runs under ``accelerate launch`` / ``torchrun``
(the collectives are :mod:`comlrl.distributed`'s, the update engine's gradient sums
:func:`comlrl.trainers.core.data_parallel.attach_engine`, a step's gathered view
:mod:`pettingllms.trainer.step_view`), with FSDP sharding of the updates (:mod:`pettingllms.trainer.fsdp`, on
:mod:`comlrl.trainers.core.fsdp`).

Names load on first access, so ``import pettingllms.trainer`` stays light (no torch until used).
"""

from comlrl.lazy_exports import lazy_getattr

_LAZY = {
    "ATGRPOConfig": "pettingllms.trainer.at_grpo_config",
    "ATGRPOTrainer": "pettingllms.trainer.at_grpo",
    "at_grpo_group_key": "pettingllms.trainer.grouping",
    "at_grpo_loss": "pettingllms.trainer.losses",
    "draw_problem_ids": "pettingllms.trainer.problems",
    "member_table": "pettingllms.trainer.grouping",
    "PolicyUpdater": "pettingllms.trainer.policy_update",
    "UpdateResult": "pettingllms.trainer.policy_update",
    "init_distributed": "comlrl.distributed",
    "rollout_metrics": "pettingllms.trainer.metrics",
    "sample_advantages": "pettingllms.trainer.grouping",
    "SFTWarmStartConfig": "pettingllms.trainer.sft",
    "sft_stage": "pettingllms.stages.sft",
    "sft_warm_start": "pettingllms.trainer.sft",
    "make_demonstrations": "pettingllms.trainer.demonstrations",
}

__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
