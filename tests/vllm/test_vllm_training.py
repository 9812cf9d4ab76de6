"""Training through ``VLLMBackend``: AT-GRPO steps (pettingllms, L1 and L2), a MADPO round (comlrl,
``use_vllm=True``) and a pipeline with ``rollout.backend=vllm``, on the test-tiny model.

What must hold: the runs train (every trainable parameter moves, metrics finite), the engine took the new
weights before each later rollout (one sync per policy per update, versions stamped on the samples), and the
log-probs the update used for its ratios are the policy's own.
"""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch

from comlrl.rollout.vllm import VLLMBackend
from comlrl.scoring import completion_logprobs
from pettingllms.config.rollout_section import RolloutConfig
from pettingllms.execution import PolicyConfig, build_policy
from pettingllms.trainer.at_grpo import ATGRPOTrainer
from pettingllms.trainer.at_grpo_config import ATGRPOConfig
from tests.helpers.bonus_trainer import add_candidate_bonus
from tests.helpers.trainer_helpers import madpo_values, plan_items, varied_reward

pytestmark = pytest.mark.vllm

ENV = {"rows": 4, "cols": 4}


class BonusTrainer(ATGRPOTrainer):
    """A reward per candidate index (the untrained model never parses), and the samples of each step."""

    def generate_and_score(self, problem_ids, step):
        batch = add_candidate_bonus(super().generate_and_score(problem_ids, step))
        self.__dict__.setdefault("sampled", []).append(batch.samples)
        return batch


def weights(policy):
    return {(n, k): v.detach().clone() for n in policy.policies for k, v in policy.named_trainable_parameters(n)}


@pytest.mark.parametrize("level", ["L1", "L2"])
def test_at_grpo_steps_train_through_vllm_and_the_engine_follows_every_update(level, tiny_model_path, tmp_path):
    torch.set_num_threads(1)
    config = ATGRPOConfig(problems_per_step=2, max_steps=2, learning_rate=1e-2, per_device_train_batch_size=4,
                          output_dir=str(tmp_path / level), disable_tqdm=True, seed=1)
    rollout = RolloutConfig(num_generations=2, max_completion_length=8, transcripts_rate=0.0)
    model = PolicyConfig(policy_level=level, model=tiny_model_path)
    policy = build_policy(model, ["tool", "plan"])
    start, initial = weights(policy), copy.deepcopy(policy)
    with VLLMBackend(policy, max_length=1024) as backend:
        trainer = BonusTrainer(config, rollout=rollout, model=model, policy=policy, backend=backend,
                               env_config={**ENV, "max_turns": 2})
        trainer.train()
        syncs = backend.weight_syncs
    assert syncs == len(policy.policies)  # step 2's rollout took step 1's update of every policy
    for key, value in weights(policy).items():
        assert not torch.equal(value, start[key]), key  # every trainable parameter moved
    for record in trainer.log_history:
        assert all(math.isfinite(v) for v in record.values() if isinstance(v, float)), record
    first, second = trainer.sampled
    assert {s.policy_version for s in first} == {0}
    for sample in second:  # sampled by the weights after step 1's update of the sample's policy
        assert sample.policy_version == trainer.log_history[0][f"policy/{sample.policy}/optimizer_steps"]
    # the log-probs the update took as old ones are the sampling weights' own
    for sample in first[:6]:
        with initial.activate(sample.role) as handle:
            values, mask = completion_logprobs(handle.model, [sample.prompt_ids], [sample.completion_ids],
                                               pad_token_id=0, temperature=rollout.temperature)
        assert torch.allclose(torch.tensor(sample.logprobs), values[0][mask[0]], atol=2e-4)


def test_a_madpo_round_with_use_vllm_trains_every_agent(tiny_model_path, tmp_path):
    from comlrl.trainers.preference import MADPOIterConfig, MADPOIterTrainer

    torch.set_num_threads(1)
    args = MADPOIterConfig(**madpo_values(tmp_path / "madpo", num_iterations=1, use_vllm=True))
    trainer = MADPOIterTrainer(agent_model=tiny_model_path, num_agents=2, reward_func=varied_reward,
                               train_dataset=plan_items(4), eval_dataset=plan_items(2), args=args)
    assert isinstance(trainer.backend, VLLMBackend)
    before = weights(trainer.policy)
    try:
        trainer.train()
        after = weights(trainer.policy)
        assert all(not torch.equal(after[k], v) for k, v in before.items())
        # top_p 1: vLLM's log-probs were used, and the next generate takes the trained weights
        syncs = trainer.backend.weight_syncs
        trainer.evaluate(num_eval_samples=2)
        assert trainer.backend.weight_syncs == syncs + len(trainer.policy.policies)
    finally:
        trainer.backend.close()


def test_a_pipeline_with_rollout_backend_vllm_starts_one_engine_and_trains(tiny_model_path, tmp_path):
    from pettingllms.config import load_config
    from pettingllms.pipeline import Pipeline

    config = load_config("plan_path/L1", [
        f"model.name={tiny_model_path}", f"run.output_dir={tmp_path / 'run'}", "rollout.backend=vllm",
        "pipeline=[eval, at_grpo, eval]", "env.max_turns=1", "rollout.num_generations=2",
        "rollout.max_completion_length=8", "at_grpo.max_steps=2", "at_grpo.problems_per_step=2",
        "eval.num_instances=2", "run.progress=false",
    ])
    out = io.StringIO()
    result = Pipeline(config, out=out).run()
    printed = out.getvalue()
    assert printed.count("starting the vLLM engine(s)") == 1 and "vLLM colocate: engine for ['shared']" in printed
    assert result.stages["at_grpo"]["steps"] == 2.0
    assert any(line.startswith("success before") for line in printed.splitlines())
