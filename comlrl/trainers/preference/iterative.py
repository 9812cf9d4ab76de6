"""Re-export for code written against the old layout: the round loop lives in :mod:`.rounds`
(:class:`~.rounds.PreferenceRounds`, owned by the iterative trainers as ``self.rounds``), the reward
histograms in :mod:`.distribution`, and :class:`MADPOIterTrainer` next to MADPO in :mod:`.madpo`."""

from comlrl.trainers.preference.distribution import reward_histogram
from comlrl.trainers.preference.madpo import MADPOIterTrainer
from comlrl.trainers.preference.rounds import PreferenceRounds, RoundStats

__all__ = ["MADPOIterTrainer", "PreferenceRounds", "RoundStats", "reward_histogram"]
