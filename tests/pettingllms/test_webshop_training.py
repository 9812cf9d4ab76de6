"""A short AT-GRPO run on the webshop with the test-tiny model: the update reaches the parameters.

The untrained tiny model never writes a parseable action, so every candidate earns the parse-error reward;
as in tests/pettingllms/test_at_grpo_trainer.py a reward bonus through ``generate_and_score`` (0.5 per
candidate index) gives the groups non-zero advantages.
"""

from __future__ import annotations

import torch

from pettingllms.config.rollout_section import RolloutConfig
from pettingllms.envs.webshop import server
from pettingllms.trainer.at_grpo_config import ATGRPOConfig
from tests.helpers.bonus_trainer import BonusTrainer


def test_a_short_at_grpo_run_changes_the_shared_policy(tmp_path, tiny_model_path):
    config = ATGRPOConfig(problems_per_step=2, max_steps=1, learning_rate=1e-2, per_device_train_batch_size=4,
                          output_dir=str(tmp_path / "run"), disable_tqdm=True, seed=1)
    rollout = RolloutConfig(num_generations=2, max_completion_length=8, transcripts_rate=0.0)
    trainer = BonusTrainer(config, rollout=rollout, model=tiny_model_path, env_name="webshop",  # L1
                           env_config={"num_products": 60, "max_turns": 1})
    assert trainer.policy.policies == ["shared"]
    before = [p.detach().clone() for p in trainer.policy.trainable_parameters("shared")]
    (metrics,) = trainer.train()
    after = trainer.policy.trainable_parameters("shared")
    changed = [not torch.equal(a, b) for a, b in zip(before, after)]
    assert all(changed), f"{changed.count(False)} of {len(changed)} tensors did not change"
    assert metrics["frac_reward_zero_std"] < 1.0  # some group had a non-zero advantage
    for role in ("searcher", "buyer"):
        assert metrics[f"agent/{role}/turn_0/parse_error_rate"] == 1.0  # the untrained model writes no action
    assert metrics["policy/shared/optimizer_steps"] >= 1
    assert server.current_server() is None  # the rollout closed its environments (and dropped their copies)
