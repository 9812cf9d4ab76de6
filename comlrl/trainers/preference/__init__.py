"""Preference learning for cooperative LLM agents: the data side (oracle, pairs, replay).

The MADPO and MARLHF trainers build on these.
"""

from comlrl.trainers.preference.oracle import Oracle, OracleError, OracleScores, batched_reward
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

__all__ = [
    "ITERATIVE_PAIR_SELECTIONS",
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
