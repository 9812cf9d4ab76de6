"""IACTrainer and MAACTrainer on the test-tiny model: updates of every agent and critic, the critic loss and
advantages against independent computations, critics persisting across runs, exact resume, errors."""

from __future__ import annotations

import pytest
import torch

from comlrl.trainers.actor_critic import IACConfig, IACTrainer, MAACConfig, MAACTrainer
from comlrl.trainers.online_rl.critics import ValueModel, agent_critic_text, joint_critic_text
from tests.helpers.trainer_helpers import plan_items
from tests.helpers.trainer_helpers import varied_reward as reward

ITEMS = plan_items(3)


def common(tmp_path, **overrides):
    values = dict(
        output_dir=str(tmp_path / "out"),
        num_turns=1,  # single-turn (the public default is 2, with an external_transition)
        num_agents=2,
        max_new_tokens=4,
        temperature=1.0,
        top_p=1.0,
        agent_learning_rate=1e-2,
        critic_learning_rate=1e-2,
        num_generations=2,
        num_train_epochs=1,
        rollout_buffer_size=2,
        eval_interval=0,
        disable_tqdm=True,
        seed=11,
    )
    values.update(overrides)
    return values


def snapshot(modules):
    return [{k: v.detach().clone() for k, v in m.state_dict().items()} for m in modules]


def changed(before, after):
    return [any(not torch.equal(b[k], a[k]) for k in b) for b, a in zip(before, after)]


CASES = [
    (IACTrainer, IACConfig, dict(critic_type="v")),
    (IACTrainer, IACConfig, dict(critic_type="q", use_separate_critic=False, value_head_hidden_dim=8)),
    (MAACTrainer, MAACConfig, dict(critic_type="v")),
    (MAACTrainer, MAACConfig, dict(critic_type="q", critic_value_head_hidden_dim=8)),
]


@pytest.mark.parametrize("cls, cfg, options", CASES, ids=["iac-v", "iac-shared-q", "maac-v", "maac-q"])
def test_actor_critic_updates_every_agent_and_critic(cls, cfg, options, tiny_model_path, tmp_path):
    trainer = cls(
        agent_model=tiny_model_path,
        reward_func=reward,
        train_dataset=ITEMS,
        args=cfg(**common(tmp_path), **options),
    )
    actors = [trainer.policy.handle(a).model for a in range(2)]
    before, critics_before = snapshot(actors), snapshot(trainer.critics)
    trainer.train()
    assert all(changed(before, snapshot(actors)))
    assert all(changed(critics_before, snapshot(trainer.critics)))
    assert len(trainer.critics) == (2 if cls is IACTrainer else 1)
    shared = options.get("use_separate_critic") is False
    assert all(c.shared == shared for c in trainer.critics)
    last = [r for r in trainer.metrics_logger.history if "value_loss" in r][-1]
    assert {"value_loss", "value_mean", "loss", "turn_1/reward_mean"} <= set(last)


def test_critic_loss_gradient_equals_an_independent_mse(tiny_model_path, tmp_path):
    """The critic's gradient in an update is value_loss_coef * d/dθ mean (V − R)² over the joint responses."""
    trainer = MAACTrainer(
        agent_model=tiny_model_path,
        reward_func=reward,
        train_dataset=ITEMS,
        args=MAACConfig(**common(tmp_path, value_loss_coef=0.6, value_clip_range=None)),
    )
    critic = trainer.critics[0]
    samples = trainer.sample_items(ITEMS[:2], [0, 1], n=2, stream="test", step=0)
    rewards = [trainer.score(s).processed for s in samples]
    recorded = {}
    optimizer = trainer.rl.critic_optimizers[0]
    original = optimizer.step

    def spy(*args, **kwargs):
        recorded["grads"] = [p.grad.clone() for p in critic.head.parameters()]
        recorded["weights"] = {k: v.detach().clone() for k, v in critic.state_dict().items()}
        return original(*args, **kwargs)

    optimizer.step = spy
    trainer.rl.training_step(samples, rewards)

    fresh = ValueModel(critic.backbone, critic.tokenizer, seed=0)
    fresh.load_state_dict(recorded["weights"])
    texts = [joint_critic_text(s.prompt_texts) for s in samples]
    values = fresh.values(texts).repeat_interleave(2)
    returns = torch.tensor([r for row in rewards for r in row])
    (0.6 * ((values - returns) ** 2).mean()).backward()
    for got, want in zip(recorded["grads"], [p.grad for p in fresh.head.parameters()]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)


def test_critic_advantages_against_hand_values(tiny_model_path, tmp_path):
    returns = torch.tensor([1.0, 3.0, 0.0, 2.0])
    values = torch.tensor([0.5, 1.0, -1.0, 2.0])
    groups = torch.tensor([0, 0, 1, 1])
    kl = torch.zeros(4)
    v = IACTrainer(
        agent_model=tiny_model_path,
        reward_func=reward,
        train_dataset=ITEMS,
        args=IACConfig(**common(tmp_path, advantage_normalization=False)),
    )
    assert v.rl.advantages(returns, kl, groups, values).tolist() == pytest.approx([0.5, 2.0, 1.0, 0.0])
    q = MAACTrainer(
        agent_model=tiny_model_path,
        reward_func=reward,
        train_dataset=ITEMS,
        args=MAACConfig(**common(tmp_path, critic_type="q", advantage_normalization=False)),
    )
    assert q.rl.advantages(returns, kl, groups, values).tolist() == pytest.approx([-0.25, 0.25, -1.5, 1.5])
    # With advantage_normalization the advantages (here with a KL term) are whitened over the update batch.
    normed = MAACTrainer(
        agent_model=tiny_model_path,
        reward_func=reward,
        train_dataset=ITEMS,
        args=MAACConfig(**common(tmp_path, critic_type="q")),
    )
    normed.rl.reference = object()  # only its presence matters to advantages(): the KL term applies
    base = torch.tensor([-0.25, 0.25, -1.5, 1.5]) - normed.args.reference_kl_coef * torch.tensor(
        [0.0, 1.0, 2.0, 0.0]
    )
    expected = (base - base.mean()) / torch.sqrt(base.var() + 1e-8)
    got = normed.rl.advantages(returns, torch.tensor([0.0, 1.0, 2.0, 0.0]), groups, values)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    texts = agent_critic_text("P", "R"), joint_critic_text(["a", "b"], ["x", "y"])
    assert texts == (
        "P\n\n[Response]\nR",
        "[Agent 0] a\n\n[Agent 1] b\n\n[Joint Action]\n[Agent 0] x\n\n[Agent 1] y",
    )


def test_critics_and_their_optimizers_persist_across_runs(tiny_model_path, tmp_path):
    trainer = IACTrainer(
        agent_model=tiny_model_path,
        reward_func=reward,
        train_dataset=ITEMS,
        args=IACConfig(**common(tmp_path)),
    )
    critics = list(trainer.critics)
    trainer.train()
    first = trainer.updates_seen
    trainer.train()  # a second run continues with the same critics and optimizer state (never rebuilt)
    assert all(a is b for a, b in zip(critics, trainer.critics))
    steps = {int(s["step"]) for o in trainer.rl.critic_optimizers for s in o.state_dict()["state"].values()}
    assert steps == {first + trainer.updates_seen}


def test_iac_resumes_exactly_with_its_critics(tiny_model_path, tmp_path):
    def make(out):
        return IACTrainer(
            agent_model=tiny_model_path,
            reward_func=reward,
            train_dataset=ITEMS,
            args=IACConfig(**common(out, num_train_epochs=2, reference_kl_enabled=True)),
        )

    done = make(tmp_path / "a")
    done.train(checkpoint_dir=tmp_path / "a" / "ck")
    resumed = make(tmp_path / "b")
    resumed.train(
        resume_from_checkpoint=tmp_path / "a" / "ck" / "checkpoint-1", checkpoint_dir=tmp_path / "b" / "ck"
    )
    for mine, theirs in zip(
        snapshot([*done.policy.models(), *done.critics]),
        snapshot([*resumed.policy.models(), *resumed.critics]),
    ):
        assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert done.metrics_logger.history == resumed.metrics_logger.history


def test_actor_critic_constructor_and_config_errors(tiny_model_path, tmp_path):
    from transformers import AutoModelForCausalLM

    from comlrl.models import load_tokenizer

    nameless = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    nameless.name_or_path = ""
    tok = load_tokenizer(tiny_model_path)
    with pytest.raises(ValueError, match="critic_model_name"):
        IACTrainer(
            agents=[nameless, nameless], tokenizer=tok, reward_func=reward, args=IACConfig(**common(tmp_path))
        )
    trainer = MAACTrainer(
        agents=[nameless, nameless],
        tokenizer=tok,
        reward_func=reward,
        critics=[tiny_model_path],
        args=MAACConfig(**common(tmp_path)),
    )
    assert len(trainer.critics) == 1
    with pytest.raises(ValueError, match="use_separate_critic"):
        IACTrainer(
            agent_model=tiny_model_path,
            critic_model=tiny_model_path,
            reward_func=reward,
            args=IACConfig(**common(tmp_path, use_separate_critic=False)),
        )
    with pytest.raises(ValueError, match="critics"):
        IACTrainer(
            agent_model=tiny_model_path,
            critics=[tiny_model_path] * 3,
            reward_func=reward,
            args=IACConfig(**common(tmp_path)),
        )
    alias = MAACTrainer(model=tiny_model_path, reward_func=reward, args=MAACConfig(**common(tmp_path)))
    assert alias.num_agents == 2
    # Accepted with one response per item, as in the public library (advantage R - Q(h, a)).
    assert MAACConfig(critic_type="q", num_generations=1, num_turns=1).critic_type == "q"
    with pytest.raises(ValueError, match="critic_type"):
        IACConfig(critic_type="x")
    with pytest.raises(ValueError, match="critic_devices"):
        IACConfig(parallel_training="mp", agent_devices="cpu")
    with pytest.raises(ValueError, match="value_loss_coef"):
        MAACConfig(value_loss_coef=0)
