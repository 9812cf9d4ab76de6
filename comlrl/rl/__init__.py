"""Shared RL math as small pure torch functions, used by comlrl's trainers and pettingllms' AT-GRPO.

The names they accept (:mod:`comlrl.rl.names`: ``LOSS_TYPES``, ``KL_ESTIMATORS``, ``CRITIC_TYPES``, ...) import
without torch, so a config checks its fields against them without it; the functions load on first access.

- :mod:`comlrl.rl.advantages`: group baselines (mean / raw / leave-one-out / max), ``compute_advantages``
  with TRL's ``scale_rewards``, ``mix_rewards``, ``group_stats``.
- :mod:`comlrl.rl.losses`: masked REINFORCE and PPO-clip token losses, ``aggregate_token_loss`` with TRL's
  ``loss_type`` names, ``masked_entropy``.
- :mod:`comlrl.rl.kl`: k1 / k2 / k3 estimators of KL(π ‖ π_ref) and reference-KL reward shaping.
- :mod:`comlrl.rl.values`: critic loss (with PPO value clipping), single-turn critic advantages,
  explained variance.
- :mod:`comlrl.rl.masking`: masked sum / mean / var / whiten.
- :mod:`comlrl.rl.returns`: multi-turn returns (rollout-tree returns, joint actions ``aligned`` / ``cross``,
  one-step TD targets, rewards-to-go).
- :mod:`comlrl.rl.finite`: which of a step's quantities are non-finite, and the groups a non-finite reward
  drops.
"""

from comlrl.lazy_exports import lazy_getattr
from comlrl.rl.names import (
    CRITIC_TYPES,
    ESTIMATORS,
    JOINT_MODES,
    KL_ESTIMATORS,
    LOSS_TYPES,
    RL_ALGORITHM_ESTIMATORS,
    SCALE_REWARDS,
)

# name -> the module that defines it (imported on first access: they need torch).
_LAZY = {
    **dict.fromkeys(
        ("GroupStats", "compute_advantages", "group_ids_from_keys", "group_max_baseline", "group_mean_baseline",
         "group_stats", "leave_one_out_baseline", "mix_rewards", "raw_returns"),
        "comlrl.rl.advantages",
    ),
    **dict.fromkeys(("finite_group_mask", "is_finite", "nonfinite_names"), "comlrl.rl.finite"),
    **dict.fromkeys(("kl_penalized_rewards", "per_token_kl", "sequence_kl"), "comlrl.rl.kl"),
    **dict.fromkeys(
        ("PPOLossOutput", "aggregate_token_loss", "masked_entropy", "policy_gradient_loss", "ppo_clip_loss"),
        "comlrl.rl.losses",
    ),
    **dict.fromkeys(("masked_mean", "masked_sum", "masked_var", "masked_whiten"), "comlrl.rl.masking"),
    **dict.fromkeys(
        ("agent_candidate_returns", "joint_indices", "rewards_to_go", "td_targets", "tree_returns"), "comlrl.rl.returns"
    ),
    **dict.fromkeys(("critic_advantages", "explained_variance", "value_loss"), "comlrl.rl.values"),
}

__all__ = [
    "CRITIC_TYPES",
    "JOINT_MODES",
    "ESTIMATORS",
    "KL_ESTIMATORS",
    "LOSS_TYPES",
    "RL_ALGORITHM_ESTIMATORS",
    "SCALE_REWARDS",
    "GroupStats",
    "PPOLossOutput",
    "agent_candidate_returns",
    "aggregate_token_loss",
    "compute_advantages",
    "critic_advantages",
    "explained_variance",
    "finite_group_mask",
    "group_ids_from_keys",
    "group_max_baseline",
    "group_mean_baseline",
    "group_stats",
    "is_finite",
    "joint_indices",
    "kl_penalized_rewards",
    "leave_one_out_baseline",
    "masked_entropy",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "mix_rewards",
    "nonfinite_names",
    "per_token_kl",
    "policy_gradient_loss",
    "ppo_clip_loss",
    "raw_returns",
    "rewards_to_go",
    "sequence_kl",
    "td_targets",
    "tree_returns",
    "value_loss",
]


__getattr__ = lazy_getattr(__name__, _LAZY)
