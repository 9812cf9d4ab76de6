"""Preference learning for cooperative LLM agents: MADPO, MARLHF and their iterative variants, and the
data side they share (oracle, pairs, replay).

The trainers (and everything that needs transformers) load on first access, so importing a config or the
data helpers stays light.
"""

from comlrl.lazy_exports import lazy_getattr
from comlrl.trainers.core.oracle import Oracle, OracleError, OracleScores, batched_reward
from comlrl.trainers.preference.config import MADPOConfig, MADPOIterConfig, MARLHFConfig, MARLHFIterConfig
from comlrl.trainers.preference.pairs import (
    ITERATIVE_PAIR_SELECTIONS,
    PAIR_SELECTIONS,
    build_comparison_pairs,
    build_preference_pairs,
    validate_pair_selection,
)
from comlrl.trainers.preference.records import (
    PreferencePair,
    RoundFile,
    RoundFileError,
    ensure_token_ids,
    read_round,
    write_round,
)
from comlrl.trainers.preference.replay import (
    REPLAY_MODES,
    PreferenceReplayBuffer,
    replay_weights,
    validate_replay_options,
)

_LAZY = {
    "MADPOTrainer": "comlrl.trainers.preference.madpo",
    "MADPOIterTrainer": "comlrl.trainers.preference.madpo",
    "MARLHFTrainer": "comlrl.trainers.preference.marlhf",
    "MARLHFIterTrainer": "comlrl.trainers.preference.marlhf",
    "JointRewardModel": "comlrl.trainers.preference.reward_model",
    "PreferenceTrainerBase": "comlrl.trainers.preference.base",
    "CentralizedComparatorAdapter": "comlrl.trainers.core.centralized",
    "CentralizedComparatorParseError": "comlrl.trainers.core.centralized",
    "TaggedCentralizedComparatorAdapter": "comlrl.trainers.core.centralized",
}

__all__ = [
    "CentralizedComparatorAdapter",
    "CentralizedComparatorParseError",
    "TaggedCentralizedComparatorAdapter",
    "ITERATIVE_PAIR_SELECTIONS",
    "MADPOConfig",
    "MADPOIterConfig",
    "MADPOIterTrainer",
    "MADPOTrainer",
    "JointRewardModel",
    "MARLHFConfig",
    "MARLHFIterConfig",
    "MARLHFIterTrainer",
    "MARLHFTrainer",
    "PreferenceTrainerBase",
    "Oracle",
    "OracleError",
    "OracleScores",
    "PAIR_SELECTIONS",
    "PreferencePair",
    "PreferenceReplayBuffer",
    "REPLAY_MODES",
    "RoundFile",
    "RoundFileError",
    "batched_reward",
    "build_comparison_pairs",
    "build_preference_pairs",
    "ensure_token_ids",
    "read_round",
    "replay_weights",
    "validate_pair_selection",
    "validate_replay_options",
    "write_round",
]


__getattr__ = lazy_getattr(__name__, _LAZY)
