"""The names the RL math accepts, without torch: the configs of both packages validate against these, so
reading and checking a config never imports torch. The modules that implement them import them from here
(and :mod:`comlrl.rl` re-exports them)."""

from __future__ import annotations

__all__ = [
    "CRITIC_TYPES",
    "ESTIMATORS",
    "JOINT_MODES",
    "KL_ESTIMATORS",
    "LOSS_TYPES",
    "RL_ALGORITHM_ESTIMATORS",
    "SCALE_REWARDS",
]

# Group baselines of :func:`comlrl.rl.advantages.compute_advantages`.
ESTIMATORS = ("mean", "raw", "rloo", "max")
# CoMLRL's ``rl_algorithm`` names for the same estimators (MARLHF's MAGRPO-family backends).
RL_ALGORITHM_ESTIMATORS = {"magrpo": "mean", "mareinforce": "raw", "marloo": "rloo", "maremax": "max"}
SCALE_REWARDS = ("group", "batch", "none")
# Estimators of KL(pi || pi_ref) (:mod:`comlrl.rl.kl`).
KL_ESTIMATORS = ("k1", "k2", "k3")
# TRL's ``loss_type`` names of :func:`comlrl.rl.losses.aggregate_token_loss`.
LOSS_TYPES = ("grpo", "bnpo", "token", "dr_grpo", "dapo", "sequence_sum")
# Critics of :mod:`comlrl.rl.values`: state values or joint-action values.
CRITIC_TYPES = ("v", "q")
# How agents' candidates form joint actions (:mod:`comlrl.rl.returns`).
JOINT_MODES = ("aligned", "cross")
