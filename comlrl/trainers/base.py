"""Re-export for code written against the old layout: the multi-agent trainer base and its helpers live in
:mod:`comlrl.trainers.core` (``trainer``, ``train_options``, ``team``, ``centralized``, ``models``,
``wandb_config``). No comlrl module imports from here."""

from comlrl.atomic_io import atomic_write_json as write_json
from comlrl.trainers.core.centralized import CentralizedCollaboration
from comlrl.trainers.core.models import pad_token_id, scoring_mode
from comlrl.trainers.core.sampling import ItemSample
from comlrl.trainers.core.train_options import CheckpointPlan
from comlrl.trainers.core.trainer import MultiAgentTrainerBase
from comlrl.trainers.core.wandb_config import wandb_run_config

__all__ = [
    "CentralizedCollaboration",
    "CheckpointPlan",
    "ItemSample",
    "MultiAgentTrainerBase",
    "pad_token_id",
    "scoring_mode",
    "wandb_run_config",
    "write_json",
]
