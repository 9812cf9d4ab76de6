"""MAGRPOTrainer on the test-tiny model: updates on the task reward, advantage modes against hand values,
zero gradient on padding through the trainer path, exact resume, and the public constructor / config."""

from __future__ import annotations

import pytest
import torch

from comlrl.rollout import Completion
from comlrl.trainers.core.sampling import ItemSample
from comlrl.trainers.preference import MARLHFConfig
from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer
from tests.helpers.trainer_helpers import CountingReward, plan_items, weights

ITEMS = plan_items(3)


def config(tmp_path, **overrides):
    values = dict(
        output_dir=str(tmp_path / "out"),
        num_turns=1,  # single-turn (the public default is 2, with an external_transition)
        max_new_tokens=5,
        temperature=1.0,
        top_p=1.0,
        agent_learning_rate=1e-2,
        num_generations=3,
        num_train_epochs=1,
        rollout_buffer_size=2,
        logging_steps=1,
        eval_interval=0,
        disable_tqdm=True,
        seed=3,
    )
    values.update(overrides)
    return MAGRPOConfig(**values)


def test_magrpo_updates_every_agent_on_the_task_reward(tiny_model_path, tmp_path):
    reward = CountingReward()
    trainer = MAGRPOTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=reward,
        train_dataset=ITEMS,
        args=config(tmp_path),
    )
    before = weights(trainer)
    trainer.train()
    after = weights(trainer)
    for agent in ("agent_0", "agent_1"):
        assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith(agent + "."))
    assert reward.calls == len(ITEMS) * 3  # every joint response scored once by the task reward
    assert trainer.env_step == len(ITEMS) * 3 and trainer.updates_seen == 2  # buffers of 2 + 1 items
    last = trainer.metrics_logger.history[-1]
    for name in (
        "loss",
        "turn_1/reward_mean",
        "turn_1/expected_return",
        "advantage_mean",
        "advantage_std",
        "reward_std",
        "frac_reward_zero_std",
        "completions/mean_length",
        "agent_0/loss",
    ):
        assert name in last, name
    assert trainer.critics == []


HAND = {  # rewards [1, 2, 6] and [3, 3, 0], groups of 3
    "mean": [-2, -1, 3, 1, 1, -2],
    "raw": [1, 2, 6, 3, 3, 0],
    "rloo": [-3, -1.5, 4.5, 1.5, 1.5, -3],
    "max": [-5, -4, 0, 0, 0, -3],
}


def test_advantage_modes_match_hand_values_and_coincide_when_normalized(tiny_model_path, tmp_path):
    returns = torch.tensor([1.0, 2.0, 6.0, 3.0, 3.0, 0.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    kl = torch.zeros(6)
    normalized = []
    for mode, expected in HAND.items():
        raw_trainer = MAGRPOTrainer(
            agent_model=tiny_model_path,
            reward_func=CountingReward(),
            train_dataset=ITEMS,
            args=config(tmp_path, advantage_mode=mode, advantage_normalization=False),
        )
        assert raw_trainer.rl.advantages(returns, kl, groups).tolist() == pytest.approx(expected)
        whitened = MAGRPOTrainer(
            agent_model=tiny_model_path,
            reward_func=CountingReward(),
            train_dataset=ITEMS,
            args=config(tmp_path, advantage_mode=mode),
        ).rl.advantages(returns, kl, groups)
        normalized.append(whitened)
    # The same up to the eps added to the std (relative error ~ eps / std, std ~ 2 here).
    for other in normalized[1:]:
        torch.testing.assert_close(other, normalized[0], rtol=2e-4, atol=1e-6)
    # Whitened within each group: (A - mean) / (std + 1e-4) with the unbiased std.
    centred = torch.tensor(HAND["mean"], dtype=torch.float32)
    std = torch.tensor(
        [
            centred[:3].std(),
            centred[:3].std(),
            centred[:3].std(),
            centred[3:].std(),
            centred[3:].std(),
            centred[3:].std(),
        ]
    )
    torch.testing.assert_close(normalized[0], centred / (std + 1e-4), rtol=0, atol=1e-5)


def test_pad_tokens_carry_zero_gradient_through_the_trainer_path(tiny_model_path, tmp_path):
    """Completions of different lengths share one padded forward; the loss and every parameter gradient
    equal an independent computation that scores each completion alone (no padding), and the loss's
    gradient with respect to the padded log-prob positions is exactly zero."""
    trainer = MAGRPOTrainer(
        agent_model=tiny_model_path,
        reward_func=CountingReward(),
        train_dataset=ITEMS,
        args=config(tmp_path, advantage_mode="raw", advantage_normalization=False, loss_type="sequence_sum"),
    )
    tok = trainer.tokenizers[0]
    prompt = tok("Task 0: write a short plan.")["input_ids"]
    lengths = [2, 6, 4]
    completions = [[(7 * j + 3 * i) % 50 + 5 for i in range(n)] for j, n in enumerate(lengths)]
    candidates = [Completion(list(prompt), c, [0.0] * len(c), "", "length") for c in completions]
    sample = ItemSample(ITEMS[0], 0, ["p", "p"], ["p", "p"], [candidates, candidates])
    returns = torch.tensor([1.0, -2.0, 0.5])
    groups = torch.zeros(3, dtype=torch.long)
    model = trainer.policy.handle(0).model
    model.eval()

    out = trainer.rl.agent_loss(0, [sample], returns, groups)
    out.logprobs.retain_grad()
    out.total.backward()
    assert out.mask.sum(-1).tolist() == lengths
    assert torch.all(out.logprobs.grad[~out.mask] == 0)
    trainer_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)

    independent = 0.0
    for completion, r in zip(completions, returns):
        ids = torch.tensor([prompt + completion])
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None]).sum()
        independent = independent - r * logp / len(completions)
    independent.backward()
    torch.testing.assert_close(out.loss.detach(), independent.detach(), rtol=1e-5, atol=1e-5)
    for got, want in zip(trainer_grads, [p.grad for p in model.parameters()]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_magrpo_resumes_exactly_after_an_epoch(tiny_model_path, tmp_path):
    def trainer(out):
        return MAGRPOTrainer(
            agent_model=tiny_model_path,
            reward_func=CountingReward(),
            train_dataset=ITEMS,
            eval_dataset=ITEMS,
            args=config(out, num_train_epochs=2, eval_interval=2, eval_num_samples=2),
        )

    done = trainer(tmp_path / "a")
    done.train(checkpoint_dir=tmp_path / "a" / "ck")
    resumed = trainer(tmp_path / "b")
    resumed.train(
        resume_from_checkpoint=tmp_path / "a" / "ck" / "checkpoint-1", checkpoint_dir=tmp_path / "b" / "ck"
    )
    a, b = weights(done), weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert done.metrics_logger.history == resumed.metrics_logger.history
    assert (done.env_step, done.updates_seen, done.eval_count) == (
        resumed.env_step,
        resumed.updates_seen,
        resumed.eval_count,
    )


def test_public_constructor_order_and_config_rules(tiny_model_path, tmp_path):
    # The public positional order: agent_model, agents, num_agents, tokenizer, model_config, train_dataset,
    # eval_dataset, dataset_type, reward_func, ...
    trainer = MAGRPOTrainer(
        tiny_model_path, None, 2, None, None, ITEMS, None, "plans", CountingReward(), args=config(tmp_path)
    )
    assert trainer.dataset_type == "plans" and trainer.num_agents == 2 and trainer.advantage_mode == "mean"
    assert config(tmp_path, advantage_mode="rloo").rl_algorithm == "marloo"
    with pytest.raises(ValueError, match="num_generations"):
        MAGRPOConfig(num_generations=1)
    with pytest.raises(ValueError, match=r"`num_turns` must be >= 1, got 0"):
        MAGRPOConfig(num_turns=0)
    with pytest.raises(ValueError, match="agent_devices"):
        MAGRPOConfig(parallel_training="mp")
    with pytest.raises(ValueError, match="advantage_mode"):
        MAGRPOConfig(advantage_mode="median")
    with pytest.raises(ValueError, match=r"Multi-turn MAGRPO requires an external_transition: `num_turns` is 2"):
        MAGRPOTrainer(agent_model=tiny_model_path, reward_func=CountingReward(), args=config(tmp_path, num_turns=2))
    with pytest.raises(ValueError, match=r"`external_transition` must be a callable or None, got int"):
        MAGRPOTrainer(agent_model=tiny_model_path, reward_func=CountingReward(), external_transition=3,
                      args=config(tmp_path))
    with pytest.raises(TypeError, match="args"):
        MAGRPOTrainer(agent_model=tiny_model_path, reward_func=CountingReward(), args=MARLHFConfig())
    with pytest.raises(ValueError, match="critic_model"):
        MAGRPOTrainer(
            agent_model=tiny_model_path,
            reward_func=CountingReward(),
            critic_model=tiny_model_path,
            args=config(tmp_path),
        )
