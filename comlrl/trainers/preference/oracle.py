"""Re-export: the oracle lives in :mod:`comlrl.trainers.core.oracle` (every trainer scores with it)."""

from comlrl.trainers.core.oracle import Oracle, OracleError, OracleScores, batched_reward

__all__ = ["Oracle", "OracleError", "OracleScores", "batched_reward"]
