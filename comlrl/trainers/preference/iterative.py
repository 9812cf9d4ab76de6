"""Re-export for code written against the old layout, and the public library's import path
``comlrl.trainers.preference.iterative`` (``MADPOIterConfig``, ``MADPOIterTrainer``, ``MARLHFIterConfig``,
``MARLHFIterTrainer``): the configs live in :mod:`.config`, the round loop in :mod:`.rounds`
(:class:`~.rounds.PreferenceRounds`, owned by the iterative trainers as ``self.rounds``), the reward
histograms in :mod:`.distribution`, and the trainers next to MADPO and MARLHF in :mod:`.madpo` and
:mod:`.marlhf`."""

from comlrl.trainers.preference.config import MADPOIterConfig, MARLHFIterConfig
from comlrl.trainers.preference.distribution import reward_histogram
from comlrl.trainers.preference.madpo import MADPOIterTrainer
from comlrl.trainers.preference.marlhf import MARLHFIterTrainer
from comlrl.trainers.preference.rounds import PreferenceRounds, RoundStats

__all__ = [
    "MADPOIterConfig",
    "MADPOIterTrainer",
    "MARLHFIterConfig",
    "MARLHFIterTrainer",
    "PreferenceRounds",
    "RoundStats",
    "reward_histogram",
]
