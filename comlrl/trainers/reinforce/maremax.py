"""MAReMax: multi-agent REINFORCE with the group maximum as baseline, the public CoMLRL ``MAReMaxConfig`` /
``MAReMaxTrainer`` as a thin layer over :class:`~comlrl.trainers.reinforce.magrpo.MAGRPOTrainer`.

The one difference from MAGRPO is the default ``advantage_mode="max"``: joint response k of an item gets
``A_k = R_k − max_j R_j`` over the item's ``num_generations`` responses (the best gets 0, the others less;
cf. ReMax), applied to every agent's log-probs. ``advantage_normalization`` defaults to True as in the public
library, and whitening within the group removes the baseline (MAGRPO and MAReMax then coincide); set it to
False for the max baseline to matter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from comlrl.trainers.core.config import TrainerConfig
from comlrl.trainers.reinforce.config import MAGRPOConfig
from comlrl.trainers.reinforce.magrpo import MAGRPOTrainer
from comlrl.trainers.reinforce.mareinforce import magrpo_family_args
from comlrl.validation import override_field

__all__ = ["MAReMaxConfig", "MAReMaxTrainer"]


@dataclass
class MAReMaxConfig(MAGRPOConfig):
    r"""
    Configuration class for [`MAReMaxTrainer`]: every [`MAGRPOConfig`] parameter, with
    `advantage_mode="max"` (advantage `A_k = R_k − max_j R_j`) and `output_dir="outputs/maremax"`.
    """

    advantage_mode: str = override_field(MAGRPOConfig, "advantage_mode", "max", "(MAReMax: max)")
    output_dir: str = override_field(
        TrainerConfig, "output_dir", "outputs/maremax", "(MAReMax: outputs/maremax)"
    )


class MAReMaxTrainer(MAGRPOTrainer):
    """Multi-Agent ReMax (group-maximum baseline): :class:`MAGRPOTrainer` with a :class:`MAReMaxConfig` by
    default; any MAGRPO-family config is accepted, as in the public library."""

    config_class = MAReMaxConfig
    algorithm_name = "MAReMax"

    def _check_args(self, args: Any) -> Any:
        return magrpo_family_args(self, args)
