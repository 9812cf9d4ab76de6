"""Reference KL: the frozen copy of the initial agents, its snapshot, device resolution, the KL reward
shaping through the trainer checked against an independent per-sequence computation, and the reference
with adapters disabled (AT-GRPO's): one copy per distinct plain model, a LoRA policy's live base."""

from __future__ import annotations

import pytest
import torch

from comlrl.policy import MultiAgentPolicy
from comlrl.rollout import Completion
from comlrl.scoring import completion_logprobs
from comlrl.trainers.core import reference as core_reference
from comlrl.trainers.core.sampling import ItemSample
from comlrl.trainers.reference_kl import ReferencePolicy, reference_devices, shaped_rewards
from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer
from tests.helpers.trainer_helpers import plan_items
from tests.helpers.trainer_helpers import varied_reward as reward

ITEMS = plan_items(2)


def trainer_with_reference(tmp_path, tiny_model_path, **overrides):
    values = dict(
        output_dir=str(tmp_path / "out"),
        max_new_tokens=4,
        temperature=1.0,
        top_p=1.0,
        num_generations=2,
        num_train_epochs=1,
        num_turns=1,
        reference_kl_enabled=True,
        reference_kl_coef=0.5,
        advantage_mode="raw",
        advantage_normalization=False,
        eval_interval=0,
        disable_tqdm=True,
    )
    values.update(overrides)
    return MAGRPOTrainer(
        agent_model=tiny_model_path, reward_func=reward, train_dataset=ITEMS, args=MAGRPOConfig(**values)
    )


def test_reference_devices_and_shaping_arithmetic():
    assert reference_devices(None, ["cpu", "meta"]) == ["cpu", "meta"]
    assert reference_devices("cpu", ["a", "b", "c"]) == ["cpu"] * 3
    assert reference_devices(["cpu"], ["a", "b"]) == ["cpu", "cpu"]
    with pytest.raises(ValueError, match="reference_devices"):
        reference_devices(["cpu", "cpu", "cpu"], ["a", "b"])
    shaped = shaped_rewards(torch.tensor([1.0, 0.0]), torch.tensor([0.2, 3.0]), 0.5)
    torch.testing.assert_close(shaped, torch.tensor([0.9, -1.5]))


def test_reference_is_a_frozen_copy_of_the_initial_agents(tiny_model_path, tmp_path):
    trainer = trainer_with_reference(tmp_path, tiny_model_path)
    reference = trainer.rl.reference
    live = trainer.policy.handle(0).model
    ref = reference.policy.handle(0).model
    assert ref is not live and not any(p.requires_grad for p in ref.parameters()) and not ref.training
    initial = {k: v.clone() for k, v in ref.state_dict().items()}
    with torch.no_grad():
        for p in live.parameters():
            p.add_(0.05)
    assert all(torch.equal(initial[k], v) for k, v in ref.state_dict().items())

    # Identical weights give exactly zero k3 KL.
    copy = ReferencePolicy(trainer.policy)
    prompts, completions = [[1, 2, 3], [4, 5]], [[6, 7], [8, 9, 10]]
    logprobs, mask = completion_logprobs(live, prompts, completions, pad_token_id=0)
    assert copy.sequence_kl(0, logprobs, mask, prompts, completions, pad_token_id=0).tolist() == [0.0, 0.0]

    # The snapshot written when a fresh run starts brings back the initial weights.
    trainer.rl.on_fresh_run(tmp_path / "snap")
    saved = {k: v.clone() for k, v in ref.state_dict().items()}
    with torch.no_grad():
        for p in ref.parameters():
            p.mul_(0.0)
    reference.load_weights_(tmp_path / "snap" / "reference_policy")
    assert all(torch.equal(saved[k], v) for k, v in ref.state_dict().items())
    assert not any(p.requires_grad for p in ref.parameters())


def test_kl_shaping_through_the_trainer_matches_an_independent_computation(tiny_model_path, tmp_path):
    """advantage_mode='raw' without normalization: agent a's advantages are exactly R − coef · Σ_t k3_t, with
    k3 computed here sequence by sequence (no padding) from the live and the frozen initial model."""
    trainer = trainer_with_reference(tmp_path, tiny_model_path, reference_kl_coef=0.5)
    live = trainer.policy.handle(1).model
    with torch.no_grad():  # move the policy away from the reference so that the KL is not zero
        generator = torch.Generator().manual_seed(0)
        for p in live.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    tok = trainer.tokenizers[1]
    prompt = tok("Task 1: write a short plan.")["input_ids"]
    completions = [[11, 12], [13, 14, 15, 16], [17]]
    candidates = [Completion(list(prompt), c, [0.0] * len(c), "", "length") for c in completions]
    sample = ItemSample(ITEMS[1], 1, ["p", "p"], ["p", "p"], [candidates, candidates])
    returns = torch.tensor([1.0, 0.0, 2.0])
    live.eval()
    out = trainer.rl.agent_loss(1, [sample], returns, torch.zeros(3, dtype=torch.long))

    ref = trainer.rl.reference.policy.handle(1).model
    expected_kl = []
    with torch.no_grad():
        for completion in completions:
            ids = torch.tensor([prompt + completion])
            target = torch.tensor(completion)[:, None]
            lp = torch.log_softmax(live(ids).logits[0, len(prompt) - 1 : -1].float(), -1).gather(-1, target)
            lr = torch.log_softmax(ref(ids).logits[0, len(prompt) - 1 : -1].float(), -1).gather(-1, target)
            delta = lr - lp
            expected_kl.append(float((torch.exp(delta) - delta - 1).sum()))
    expected_kl = torch.tensor(expected_kl)
    assert bool((expected_kl > 0).all())
    torch.testing.assert_close(out.kl.cpu(), expected_kl, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(out.advantages.cpu(), returns - 0.5 * expected_kl, rtol=1e-4, atol=1e-6)


def test_training_logs_the_reference_kl_metrics(tiny_model_path, tmp_path):
    trainer = trainer_with_reference(
        tmp_path,
        tiny_model_path,
        reference_kl_coef=0.25,
        logging_steps=1,
        agent_learning_rate=1e-2,
        num_train_epochs=2,
        rollout_buffer_size=1,
    )
    trainer.train()
    rows = [r for r in trainer.metrics_logger.history if "turn_1/reference_kl_mean" in r]
    assert rows and all(r["turn_1/reference_kl_mean"] >= 0 for r in rows)
    for r in rows:
        assert r["turn_1/reference_kl_penalty_mean"] == pytest.approx(0.25 * r["turn_1/reference_kl_mean"])
    assert rows[-1]["turn_1/reference_kl_mean"] > 0  # the policy moved away from the frozen reference
    assert (tmp_path / "out" / "reference_policy" / "policy_layout.json").is_file()


PROMPTS, COMPLETIONS = [[1, 2, 3], [4, 5]], [[6, 7], [8, 9, 10]]


def scores(model):
    with torch.no_grad():
        return completion_logprobs(model, PROMPTS, COMPLETIONS, pad_token_id=0)[0]


def test_the_old_module_re_exports_the_core_reference():
    from comlrl.trainers import reference_kl

    for name in reference_kl.__all__:
        assert getattr(reference_kl, name) is getattr(core_reference, name)


@pytest.mark.parametrize("adapters", ["copy", "disabled"])
def test_policies_sharing_a_model_share_one_frozen_copy(adapters, tiny_model_path):
    from comlrl.models import load_model

    shared = MultiAgentPolicy.shared(load_model(tiny_model_path), ["tool", "plan"])
    reference = ReferencePolicy(shared, adapters=adapters)
    live = shared.handle("shared").model
    with reference.model("tool") as tool, reference.model("plan") as plan:
        assert tool is plan and tool is not live
        assert not tool.training and not any(p.requires_grad for p in tool.parameters())
        assert torch.equal(scores(tool), scores(live))
    per_agent = MultiAgentPolicy.per_agent([load_model(tiny_model_path), load_model(tiny_model_path)])
    reference = ReferencePolicy(per_agent, adapters=adapters)
    with reference.model(0) as first, reference.model(1) as second:
        assert first is not second
        assert {id(first), id(second)}.isdisjoint(id(m) for m in per_agent.models())


def test_a_lora_reference_with_adapters_disabled_is_the_live_base(tiny_model_path, tmp_path):
    from peft import LoraConfig

    from comlrl.models import load_model

    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    team = MultiAgentPolicy.lora(load_model(tiny_model_path), ["tool", "plan"], config)
    with torch.no_grad():  # adapters away from their zero start, so that they change the scores
        generator = torch.Generator().manual_seed(0)
        for name in team.policies:
            for parameter in team.trainable_parameters(name):
                parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    live = team.handle("tool").model
    live.train()
    base = scores(load_model(tiny_model_path))
    with team.activate("tool"):
        adapted = scores(live)
    assert not torch.equal(adapted, base)

    disabled = ReferencePolicy(team, adapters="disabled")
    with disabled.model("tool") as model:
        assert model is live and not model.training  # no copy; eval mode inside the block
        assert torch.equal(scores(model), base)
    assert live.training and any(p.requires_grad for p in team.trainable_parameters("tool"))
    logprobs, _ = disabled.token_logprobs("plan", PROMPTS, COMPLETIONS, pad_token_id=0)
    assert torch.equal(logprobs, base)
    with pytest.raises(ValueError, match="adapters='disabled'"):
        disabled.save(tmp_path / "snapshot")

    copied = ReferencePolicy(team)  # comlrl's default: a frozen copy with the adapter as it is now
    with copied.model("tool") as model:
        assert model is not live
        assert torch.equal(scores(model), adapted)
    with pytest.raises(ValueError, match="`adapters` must be one of"):
        ReferencePolicy(team, adapters="base")
