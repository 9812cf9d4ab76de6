"""MARLOO: multi-agent REINFORCE with a leave-one-out baseline, the public CoMLRL ``MARLOOConfig`` /
``MARLOOTrainer`` as a thin layer over :class:`~comlrl.trainers.reinforce.magrpo.MAGRPOTrainer`.

The one difference from MAGRPO is the default ``advantage_mode="rloo"``: joint response k of an item gets
``A_k = R_k − mean_{j≠k} R_j``, the mean of the item's *other* responses as baseline (cf. RLOO), applied to
every agent's log-probs. ``advantage_normalization`` defaults to True as in the public library, and
whitening within the group removes the baseline (MAGRPO and MARLOO then coincide); set it to False for the
leave-one-out baseline to matter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from comlrl.trainers.core.config import TrainerConfig
from comlrl.trainers.reinforce.config import MAGRPOConfig
from comlrl.trainers.reinforce.magrpo import MAGRPOTrainer
from comlrl.trainers.reinforce.mareinforce import magrpo_family_args
from comlrl.validation import override_field

__all__ = ["MARLOOConfig", "MARLOOTrainer"]


@dataclass
class MARLOOConfig(MAGRPOConfig):
    r"""
    Configuration class for [`MARLOOTrainer`]: every [`MAGRPOConfig`] parameter, with
    `advantage_mode="rloo"` (advantage `A_k = R_k − mean_{j≠k} R_j`) and `output_dir="outputs/marloo"`.
    """

    advantage_mode: str = override_field(MAGRPOConfig, "advantage_mode", "rloo", "(MARLOO: rloo)")
    output_dir: str = override_field(
        TrainerConfig, "output_dir", "outputs/marloo", "(MARLOO: outputs/marloo)"
    )


class MARLOOTrainer(MAGRPOTrainer):
    """Multi-Agent REINFORCE leave-one-out: :class:`MAGRPOTrainer` with a :class:`MARLOOConfig` by default;
    any MAGRPO-family config is accepted, as in the public library."""

    config_class = MARLOOConfig
    algorithm_name = "MARLOO"

    def _check_args(self, args: Any) -> Any:
        return magrpo_family_args(self, args)
