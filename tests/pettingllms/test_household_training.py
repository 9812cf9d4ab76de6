"""A short AT-GRPO run on the household environment with the test-tiny model (1 problem, K = 2, 2 turns).

The untrained tiny model never writes a ``####`` line, so every candidate earns the parse-error reward; as in
``test_at_grpo_trainer.py`` a reward bonus through ``generate_and_score`` (0.5 per candidate index) gives each
group's members different rewards, so the update has non-zero advantages to follow.
"""

from __future__ import annotations

import pytest
import torch

from pettingllms.config.rollout_section import RolloutConfig
from pettingllms.envs.household.generator import HouseholdSettings, compiled_game
from pettingllms.trainer.at_grpo_config import ATGRPOConfig
from tests.helpers.bonus_trainer import BonusTrainer


@pytest.fixture(scope="session")
def household_cache(tmp_path_factory) -> str:
    """The compiled game of seed 0 (default settings), shared with ``test_household_env.py``'s fixture."""
    folder = tmp_path_factory.getbasetemp() / "household-games"
    compiled_game(0, HouseholdSettings(), folder)
    return str(folder)



@pytest.mark.slow
def test_at_grpo_on_household_moves_every_parameter_with_nonzero_advantages(tmp_path, tiny_model_path, household_cache):
    config = ATGRPOConfig(
        problems_per_step=1, train_seed_range=(0, 1), max_steps=1, learning_rate=1e-2, per_device_train_batch_size=8,
        output_dir=str(tmp_path / "run"), disable_tqdm=True, seed=1,
    )
    rollout = RolloutConfig(num_generations=2, max_completion_length=8, transcripts_rate=0.0)
    trainer = BonusTrainer(config, rollout=rollout, model=tiny_model_path, env_name="household",  # L1
                           env_config={"cache_dir": household_cache, "turn_order": ["planner", "actor"], "max_turns": 2})
    before = [p.detach().clone() for p in trainer.policy.trainable_parameters("shared")]
    (metrics,) = trainer.train()
    after = trainer.policy.trainable_parameters("shared")
    assert all(not torch.equal(a, b) for a, b in zip(before, after))
    assert metrics["frac_reward_zero_std"] < 1.0  # some group has members with different rewards
    assert metrics["policy/shared/num_samples"] == 8.0  # 1 problem x 2 turns x 2 roles x K = 2, all kept
    for role in ("planner", "actor"):
        assert metrics[f"agent/{role}/turn_0/parse_error_rate"] == 1.0  # the untrained model never answers
        assert metrics[f"agent/{role}/turn_0/local_reward_mean"] == -1.0
