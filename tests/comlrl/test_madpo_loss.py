"""MADPO loss math and its gradient, checked against independent computations.

The pure functions are checked with hypothesis against closed forms; the trainer's batched margins and
per-agent gradients are checked against autograd on a naive loop that scores one unpadded sequence at a
time, for one model per agent, one model shared by both agents, and one LoRA adapter per agent.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from comlrl.trainers.preference import MADPOConfig, MADPOTrainer, PreferencePair
from comlrl.trainers.preference.losses import (
    joint_margin,
    madpo_agent_losses,
    madpo_loss,
    pair_margins,
    preference_accuracy,
    sequence_logprob_sums,
)

margin_values = st.floats(min_value=-30, max_value=30, allow_nan=False)


@st.composite
def margin_matrices(draw):
    agents = draw(st.integers(1, 4))
    pairs = draw(st.integers(1, 6))
    values = draw(st.lists(margin_values, min_size=agents * pairs, max_size=agents * pairs))
    return torch.tensor(values, dtype=torch.float64).reshape(agents, pairs)


@given(margin_matrices(), st.floats(min_value=0.01, max_value=3.0))
def test_every_agent_loss_has_the_joint_loss_value(margins, beta):
    expected = sum(math.log1p(math.exp(-beta * float(m))) for m in margins.sum(0)) / margins.shape[1]
    torch.testing.assert_close(madpo_loss(margins, beta), torch.tensor(expected, dtype=torch.float64))
    losses = madpo_agent_losses(margins, beta)
    assert losses.shape == (margins.shape[0],)
    torch.testing.assert_close(losses, torch.full_like(losses, expected))


@given(margin_matrices(), st.floats(min_value=0.01, max_value=3.0))
def test_gradient_flows_only_through_each_agents_own_margin(margins, beta):
    """d(sum_i L_i)/d m_ib = -beta * sigmoid(-beta * M_b) / B: agent i's loss reaches only m_i."""
    leaf = margins.clone().requires_grad_(True)
    madpo_agent_losses(leaf, beta).sum().backward()
    joint = margins.sum(0)
    coefficient = -beta * torch.sigmoid(-beta * joint) / margins.shape[1]
    torch.testing.assert_close(leaf.grad, coefficient.expand_as(margins))
    # Agent i's own loss alone: a gradient in row i only.
    for i in range(margins.shape[0]):
        leaf.grad = None
        madpo_agent_losses(leaf, beta)[i].backward()
        expected = torch.zeros_like(margins)
        expected[i] = coefficient
        torch.testing.assert_close(leaf.grad, expected)


def test_small_helpers():
    logprobs = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -7.0, -7.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    torch.testing.assert_close(sequence_logprob_sums(logprobs, mask), torch.tensor([-3.0, -0.5]))
    torch.testing.assert_close(pair_margins(torch.tensor([1.0, 2.0, 0.5, 4.0]), 2), torch.tensor([0.5, -2.0]))
    margins = torch.tensor([[1.0, -3.0, 0.5], [0.5, 1.0, -0.5]])
    torch.testing.assert_close(joint_margin(margins), torch.tensor([1.5, -2.0, 0.0]))
    assert float(preference_accuracy(margins)) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="dpo_beta"):
        madpo_loss(margins, 0.0)
    with pytest.raises(ValueError, match="winners then losers"):
        pair_margins(torch.zeros(3), 2)


def test_loss_is_stable_for_large_margins():
    margins = torch.tensor([[5000.0], [-8000.0]])
    assert torch.isfinite(madpo_agent_losses(margins, 0.1)).all()
    assert float(madpo_loss(-margins, 0.1)) == pytest.approx(0.0, abs=1e-6)


# --------------------------------------------------------------------------------------------------
# The trainer's batched margins and gradients vs. a naive per-sequence loop
# --------------------------------------------------------------------------------------------------


def _pairs(num_pairs: int, num_agents: int, seed: int) -> list[PreferencePair]:
    g = torch.Generator().manual_seed(seed)

    def ids(low, high):
        return torch.randint(
            5, 400, (int(torch.randint(low, high, (1,), generator=g)),), generator=g
        ).tolist()

    return [
        PreferencePair(
            prompts=["p"] * num_agents,
            winner_completions=["w"] * num_agents,
            loser_completions=["l"] * num_agents,
            winner_reward=1.0,
            loser_reward=0.0,
            candidate_reward_mean=0.5,
            prompt_token_ids=[ids(2, 7) for _ in range(num_agents)],
            winner_token_ids=[ids(1, 6) for _ in range(num_agents)],
            loser_token_ids=[ids(1, 6) for _ in range(num_agents)],
        )
        for _ in range(num_pairs)
    ]


def _naive_margin(model, pair: PreferencePair, agent: int, exclude_last: bool) -> torch.Tensor:
    """Agent ``agent``'s margin scored one unpadded sequence at a time."""
    total = []
    for completion in (pair.winner_token_ids[agent], pair.loser_token_ids[agent]):
        prompt = pair.prompt_token_ids[agent]
        ids = torch.tensor([prompt + completion])
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
        token_lp = F.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(completion)[:, None])[:, 0]
        total.append(token_lp[:-1].sum() if exclude_last else token_lp.sum())
    return total[0] - total[1]


def _make_trainer(kind: str, tiny_model_path: str, tmp_path, **config) -> MADPOTrainer:
    args = MADPOConfig(output_dir=str(tmp_path / "out"), disable_tqdm=True, **config)
    reward = lambda a, b: 0.0  # noqa: E731 - unused: these tests build their own pairs
    if kind == "per_agent":
        return MADPOTrainer(agent_model=tiny_model_path, num_agents=2, reward_func=reward, args=args)
    if kind == "shared":
        from comlrl.policy import MultiAgentPolicy

        policy = MultiAgentPolicy.shared(tiny_model_path, ["agent_0", "agent_1"])
        return MADPOTrainer(policy=policy, reward_func=reward, args=args)
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    trainer = MADPOTrainer(
        agent_model=tiny_model_path, num_agents=2, reward_func=reward, args=args, lora_config=lora
    )
    with torch.no_grad():  # B starts at 0, which would leave A without gradient
        g = torch.Generator().manual_seed(3)
        for name in trainer.policy.policies:
            for p in trainer.policy.trainable_parameters(name):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return trainer


@pytest.mark.parametrize("kind", ["per_agent", "shared", "lora"])
@pytest.mark.parametrize("exclude_last", [False, True])
def test_batched_margins_and_agent_gradients_match_a_naive_loop(
    kind, exclude_last, tiny_model_path, tmp_path
):
    beta = 0.7
    trainer = _make_trainer(
        kind, tiny_model_path, tmp_path, dpo_beta=beta, exclude_last_completion_token=exclude_last
    )
    batch = _pairs(3, 2, seed=11)
    policy = trainer.policy

    # What the trainer backpropagates in one update (training_step without the optimizer step).
    for opt in trainer.optimizers:
        opt.zero_grad(set_to_none=True)
    forwards = []
    hooks = [m.register_forward_hook(lambda *_: forwards.append(1)) for m in policy.models()]
    margins = trainer.compute_margins(batch)
    for hook in hooks:
        hook.remove()
    assert len(forwards) == 2  # one padded forward per agent, winners and losers together
    with trainer._all_adapters_trainable():
        madpo_agent_losses(margins, beta).sum().backward()
    got = {
        name: [
            p.grad.clone() if p.grad is not None else torch.zeros_like(p)
            for p in policy.trainable_parameters(name)
        ]
        for name in policy.policies
    }
    for opt in trainer.optimizers:
        opt.zero_grad(set_to_none=True)

    # Independent: naive margins, then autograd of  sum_i sum_b c_b * m_ib
    # with c_b = -beta*sigmoid(-beta*M_b)/B,
    # agent i's margin taken under agent i's weights (its adapter).
    naive = torch.zeros(2, len(batch))
    graph_terms = []
    for a, agent in enumerate(trainer.agent_names):
        model = policy.handle(agent).model
        with policy.activate(agent):
            model.eval()
            for b, pair in enumerate(batch):
                m = _naive_margin(model, pair, a, exclude_last)
                naive[a, b] = m.detach()
                graph_terms.append((a, b, m))
    torch.testing.assert_close(margins.detach(), naive, atol=2e-4, rtol=2e-4)
    coefficient = -beta * torch.sigmoid(-beta * naive.sum(0)) / len(batch)
    surrogate = sum(coefficient[b] * m for a, b, m in graph_terms)
    with trainer._all_adapters_trainable():
        for name in policy.policies:
            params = policy.trainable_parameters(name)
            expected = torch.autograd.grad(surrogate, params, retain_graph=True, allow_unused=True)
            for g_got, g_exp, p in zip(got[name], expected, params):
                g_exp = torch.zeros_like(p) if g_exp is None else g_exp
                torch.testing.assert_close(g_got, g_exp, atol=2e-4, rtol=2e-3)
    if kind != "shared":
        # Each agent's gradient is its own: a nonzero gradient on both, from different margins.
        assert all(any(float(g.abs().sum()) > 0 for g in got[name]) for name in policy.policies)
