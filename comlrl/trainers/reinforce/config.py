"""Configuration of the MAGRPO family of online multi-agent RL trainers: :class:`MAGRPOConfig`.

The fields it shares with the actor-critic configs are those of
:class:`~comlrl.trainers.online_rl.config.OnlineRLConfig` (re-exported here with ``SINGLE_TURN_NOTE``).
"""

from __future__ import annotations

from dataclasses import dataclass

from comlrl.rl import ESTIMATORS
from comlrl.trainers.core.config import TrainerConfig
from comlrl.trainers.online_rl.config import SINGLE_TURN_NOTE, OnlineRLConfig
from comlrl.validation import canonical_choice, help_field, override_field, public_wording

__all__ = ["MAGRPOConfig", "OnlineRLConfig", "SINGLE_TURN_NOTE"]

# The algorithm names of the MAGRPO family by advantage_mode (the inverse of comlrl.rl's table).
ALGORITHM_BY_ESTIMATOR = {"mean": "magrpo", "raw": "mareinforce", "rloo": "marloo", "max": "maremax"}


@dataclass
class MAGRPOConfig(OnlineRLConfig):
    r"""
    Configuration class for [`MAGRPOTrainer`]: the MAGRPO family of multi-agent REINFORCE trainers.

    Every agent samples `num_generations` responses per item; candidate k of each agent forms joint response
    k, the task reward scores it, and agent i is updated with `−A_k · Σ_t log π_i(a_{i,k,t} | x_i)` where
    `A_k` is the joint return minus a group baseline ([GRPO](https://huggingface.co/papers/2402.03300)
    extended to teams as in CoMLRL's MAGRPO). Takes every [`OnlineRLConfig`] field (`num_generations` >= 2:
    a group baseline needs two; `output_dir="outputs/magrpo"`) plus:

    Parameters:
        advantage_mode (`str`, *optional*, defaults to `"mean"`):
            Baseline over the item's group: `mean` (MAGRPO), `raw` (no baseline, MAREINFORCE), `rloo`
            (leave-one-out, MARLOO) or `max` (group maximum, MAReMax). All four are affine in the return, so
            with `advantage_normalization=True` (the default) they give the same advantages; set it to
            `False` for the baseline to matter.
    """

    advantage_mode: str = help_field("Baseline: mean (MAGRPO), raw, rloo or max.", "mean")
    output_dir: str = override_field(TrainerConfig, "output_dir", "outputs/magrpo", "(MAGRPO: outputs/magrpo)")

    _min_generations = 2

    def _normalize(self) -> None:
        super()._normalize()
        self.advantage_mode = canonical_choice(
            "advantage_mode",
            self.advantage_mode,
            ESTIMATORS,
            public="advantage_mode must be one of: mean, raw, max, rloo.",
        )

    def _validate_num_generations(self) -> None:
        try:
            super()._validate_num_generations()
        except ValueError as error:
            public = "num_generations must be >= 2 (group baseline requires multiple samples)."
            raise ValueError(public_wording(str(error), public)) from None

    @property
    def rl_algorithm(self) -> str:
        """The public algorithm name of ``advantage_mode`` (magrpo, mareinforce, marloo, maremax)."""
        return ALGORITHM_BY_ESTIMATOR[self.advantage_mode]
