"""Which instances each stage plays, and the check that training never sees an evaluation instance. Declared
with the config (:mod:`pettingllms.config.instances`, run by :func:`~pettingllms.config.validate_config`); this
module keeps the stages' import path."""

from pettingllms.config.instances import (
    SEED_KEYS,
    SEEDED_TRAINING_STAGES,
    check_held_out_instances,
    clamp_to_instances,
    played_seeds,
    stage_env,
)

__all__ = [
    "SEEDED_TRAINING_STAGES",
    "SEED_KEYS",
    "check_held_out_instances",
    "clamp_to_instances",
    "played_seeds",
    "stage_env",
]
