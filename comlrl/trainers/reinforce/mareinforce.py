"""MAREINFORCE: multi-agent REINFORCE without a baseline, the public CoMLRL ``MAREINFORCEConfig`` /
``MAREINFORCETrainer`` as a thin layer over :class:`~comlrl.trainers.reinforce.magrpo.MAGRPOTrainer`.

The one difference from MAGRPO is the default ``advantage_mode="raw"``: joint response k of an item is
weighted by its return ``R_k`` itself (no group mean, leave-one-out or maximum), and that weight applies to
every agent's log-probs. As in the public library ``advantage_normalization`` defaults to True, which
whitens the advantages within each item's group and so removes any baseline (MAGRPO and MAREINFORCE then
give the same advantages); set it to False to train on the raw returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from comlrl.trainers.core.config import TrainerConfig
from comlrl.trainers.reinforce.config import MAGRPOConfig
from comlrl.trainers.reinforce.magrpo import MAGRPOTrainer
from comlrl.validation import override_field

__all__ = ["MAREINFORCEConfig", "MAREINFORCETrainer"]


@dataclass
class MAREINFORCEConfig(MAGRPOConfig):
    r"""
    Configuration class for [`MAREINFORCETrainer`]: every [`MAGRPOConfig`] parameter, with
    `advantage_mode="raw"` (advantage `A_k = R_k`, no baseline) and `output_dir="outputs/mareinforce"`.
    """

    advantage_mode: str = override_field(MAGRPOConfig, "advantage_mode", "raw", "(MAREINFORCE: raw)")
    output_dir: str = override_field(
        TrainerConfig, "output_dir", "outputs/mareinforce", "(MAREINFORCE: outputs/mareinforce)"
    )


class MAREINFORCETrainer(MAGRPOTrainer):
    """Multi-Agent REINFORCE (no baseline): :class:`MAGRPOTrainer` with a :class:`MAREINFORCEConfig` by
    default. As in the public library any MAGRPO-family config is accepted, and its ``advantage_mode``
    decides the baseline."""

    config_class = MAREINFORCEConfig
    algorithm_name = "MAREINFORCE"

    def _check_args(self, args: Any) -> Any:
        return magrpo_family_args(self, args)


def magrpo_family_args(trainer: MAGRPOTrainer, args: Any) -> Any:
    """``args`` for a decentralized MAGRPO-family trainer: None gives the trainer's own config; any
    decentralized :class:`MAGRPOConfig` is taken as it is (its ``advantage_mode`` decides the baseline)."""
    if args is None:
        return trainer.config_class()
    if isinstance(args, MAGRPOConfig) and not getattr(args, "is_centralized", False):
        return args
    raise TypeError(
        f"`args` must be a MAGRPOConfig (by default a {trainer.config_class.__name__}) for "
        f"{type(trainer).__name__}, got {type(args).__name__}"
    )
