"""A short AT-GRPO run on the search environment (the test-tiny model, the synthetic task, L1): the rollout plays
both roles through the engine with tree sampling, and the update changes every trainable tensor.

The untrained tiny model never writes a ``<search>`` or ``<answer>`` block, so every candidate earns the same
parse-error reward and every group's advantage would be 0; as in the trainer's own tests a reward bonus through the
``generate_and_score`` override point (0.5 per candidate index) gives every group a spread."""

from __future__ import annotations

import torch

from pettingllms.config.rollout_section import RolloutConfig
from pettingllms.trainer.at_grpo_config import ATGRPOConfig
from tests.helpers.bonus_trainer import BonusTrainer


class RecordingTrainer(BonusTrainer):
    def generate_and_score(self, problem_ids, step):
        batch = super().generate_and_score(problem_ids, step)
        self.samples = list(batch.samples)
        return batch


def test_a_short_at_grpo_run_on_search_changes_the_shared_policy(tmp_path, tiny_model_path):
    config = ATGRPOConfig(problems_per_step=2, max_steps=1, learning_rate=1e-2, per_device_train_batch_size=8,
                          output_dir=str(tmp_path / "run"), disable_tqdm=True, seed=1)
    rollout = RolloutConfig(num_generations=2, max_completion_length=8, transcripts_rate=0.0)
    trainer = RecordingTrainer(config, rollout=rollout, model=tiny_model_path, env_name="search",  # L1
                               env_config={"synthetic_hops": 1, "topk": 1, "max_passage_chars": 60, "max_turns": 1})
    assert trainer.policy.policies == ["shared"]
    before = [p.detach().clone() for p in trainer.policy.trainable_parameters("shared")]
    (metrics,) = trainer.train()
    samples = trainer.samples
    assert {s.role for s in samples} == {"web_search_agent", "search_reasoning_agent"} and len(samples) == 8
    assert all(s.local_reward == -1.0 and s.failure == "parse_error" for s in samples)  # the environment's own reward
    assert metrics["frac_reward_zero_std"] == 0.0  # every group has a non-zero advantage
    after = trainer.policy.trainable_parameters("shared")
    unchanged = [i for i, (a, b) in enumerate(zip(before, after)) if torch.equal(a, b)]
    assert not unchanged, f"tensors {unchanged} did not change"
    assert metrics["policy/shared/optimizer_steps"] >= 1
    assert "agent/web_search_agent/turn_0/reward_mean" in metrics and "agent/search_reasoning_agent/turn_0/reward_mean" in metrics
