"""An AT-GRPO trainer for tests on untrained models: their answers never parse, so every group would tie at
one reward and no update would move anything; ``0.5 * candidate`` added to each sample's group reward gives
every group a spread."""

from __future__ import annotations

from pettingllms.trainer.at_grpo import ATGRPOTrainer

__all__ = ["BonusTrainer", "add_candidate_bonus"]


def add_candidate_bonus(batch):
    """``batch`` with ``0.5 * candidate`` added to each sample's group reward (in place, returned)."""
    for sample in batch.samples:
        sample.group_reward += 0.5 * sample.candidate
    return batch


class BonusTrainer(ATGRPOTrainer):
    """:class:`ATGRPOTrainer` whose scored batches carry :func:`add_candidate_bonus`."""

    def generate_and_score(self, problem_ids, step):
        return add_candidate_bonus(super().generate_and_score(problem_ids, step))
