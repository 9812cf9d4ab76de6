"""Masked reductions, loss aggregation, REINFORCE and PPO-clip token losses, entropy (comlrl.rl.losses)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from comlrl.rl import (
    aggregate_token_loss,
    masked_entropy,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    policy_gradient_loss,
    ppo_clip_loss,
)

NAN = float("nan")
INF = float("inf")


def _assert_values(actual: torch.Tensor, expected: list) -> None:
    torch.testing.assert_close(
        actual.detach(), torch.tensor(expected, dtype=actual.dtype), atol=1e-9, rtol=1e-6
    )


# ------------------------------------------------------------------------------------ masking helpers


def test_masked_sum_and_mean_ignore_whatever_padding_holds():
    values = torch.tensor([[1.0, 2.0, NAN], [4.0, INF, -INF]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert float(masked_sum(values, mask)) == 7.0
    assert float(masked_mean(values, mask)) == pytest.approx(7 / 3)
    assert masked_sum(values, mask, dim=-1).tolist() == [3.0, 4.0]
    assert masked_mean(values, mask, dim=-1).tolist() == [1.5, 4.0]


def test_masked_mean_of_empty_row_is_zero():
    values = torch.tensor([[5.0, 5.0], [1.0, 3.0]])
    mask = torch.tensor([[False, False], [True, True]])
    assert masked_mean(values, mask, dim=-1).tolist() == [0.0, 2.0]


def test_masked_var_hand_values():
    values = torch.tensor([1.0, 2.0, 3.0, 100.0])
    mask = torch.tensor([True, True, True, False])
    assert float(masked_var(values, mask)) == pytest.approx(1.0)  # Σ(x−2)² / (3 − 1)
    assert float(masked_var(values, mask, unbiased=False)) == pytest.approx(2 / 3)


def test_masked_whiten_hand_values():
    values = torch.tensor([1.0, 2.0, 3.0, 100.0])
    mask = torch.tensor([1, 1, 1, 0])
    scale = 1 / math.sqrt(1.0 + 1e-8)
    torch.testing.assert_close(masked_whiten(values, mask), torch.tensor([-scale, 0.0, scale, 0.0]))
    torch.testing.assert_close(
        masked_whiten(values, mask, shift_mean=False), torch.tensor([2 - scale, 2.0, 2 + scale, 0.0])
    )
    torch.testing.assert_close(masked_whiten(values[:3]), torch.tensor([-scale, 0.0, scale]))


def test_mask_must_be_binary_and_shaped_like_the_values():
    values = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="`mask` must hold only 0 and 1"):
        masked_mean(values, torch.full((2, 3), 0.5))
    with pytest.raises(ValueError, match=r"`mask` must have shape \(2, 3\)"):
        masked_mean(values, torch.ones(3, 2))


# ------------------------------------------------------------------------------------ aggregation

PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0], [4.0, NAN, 100.0]])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])


@pytest.mark.parametrize(
    "loss_type, kwargs, expected",
    [
        ("grpo", {}, (6 / 3 + 4 / 1) / 2),
        ("bnpo", {}, 10 / 4),
        ("token", {}, 10 / 4),
        ("dr_grpo", {"max_completion_length": 5}, 10 / (2 * 5)),
        ("dapo", {"num_items_in_batch": 20}, 10 / 20),
        ("dapo", {"num_items_in_batch": torch.tensor(8)}, 10 / 8),
        ("sequence_sum", {}, (6 + 4) / 2),
    ],
)
def test_aggregation_hand_values(loss_type, kwargs, expected):
    assert float(aggregate_token_loss(PER_TOKEN, MASK, loss_type, **kwargs)) == pytest.approx(expected)


def _naive_aggregate(per_token, mask, loss_type, max_len, total):
    rows = [[v for v, m in zip(row, mrow) if m] for row, mrow in zip(per_token, mask)]
    if loss_type == "grpo":
        return sum(sum(r) / max(len(r), 1) for r in rows) / len(rows)
    if loss_type == "bnpo":
        return sum(map(sum, rows)) / max(sum(map(len, rows)), 1)
    if loss_type == "dr_grpo":
        return sum(map(sum, rows)) / (len(rows) * max_len)
    if loss_type == "dapo":
        return sum(map(sum, rows)) / total
    return sum(map(sum, rows)) / len(rows)


token_batches = st.tuples(st.integers(1, 4), st.integers(1, 6)).flatmap(
    lambda shape: st.tuples(
        st.lists(
            st.lists(st.floats(-10, 10), min_size=shape[1], max_size=shape[1]),
            min_size=shape[0],
            max_size=shape[0],
        ),
        st.lists(
            st.lists(st.booleans(), min_size=shape[1], max_size=shape[1]),
            min_size=shape[0],
            max_size=shape[0],
        ),
    )
)


@given(token_batches, st.sampled_from(["grpo", "bnpo", "dr_grpo", "dapo", "sequence_sum"]))
def test_aggregation_matches_naive_loop(batch, loss_type):
    per_token, mask = batch
    width = len(per_token[0])
    actual = aggregate_token_loss(
        torch.tensor(per_token, dtype=torch.float64),
        torch.tensor(mask),
        loss_type,
        max_completion_length=width + 2,
        num_items_in_batch=7,
    )
    assert float(actual) == pytest.approx(
        _naive_aggregate(per_token, mask, loss_type, width + 2, 7), abs=1e-9
    )


@pytest.mark.parametrize(
    "loss_type, kwargs, match",
    [
        ("dr_grpo", {}, "`max_completion_length` is required"),
        ("dr_grpo", {"max_completion_length": 2}, r"`max_completion_length` \(2\) must be >="),
        ("dapo", {}, "`num_items_in_batch`"),
        ("dapo", {"num_items_in_batch": 0}, "`num_items_in_batch` must be > 0"),
        ("seq_mean", {}, "`loss_type` must be one of"),
    ],
)
def test_aggregation_errors(loss_type, kwargs, match):
    with pytest.raises(ValueError, match=match):
        aggregate_token_loss(PER_TOKEN, MASK, loss_type, **kwargs)


# ------------------------------------------------------------------------------------ REINFORCE loss


def test_policy_gradient_loss_value_and_gradient_with_padding():
    # Padding holds -inf log-probs, as an unmasked log_softmax of a pad token could.
    logprobs = torch.tensor([[-1.0, -2.0], [-0.5, -INF]], requires_grad=True)
    advantages = torch.tensor([2.0, -1.0], requires_grad=True)
    mask = torch.tensor([[1, 1], [1, 0]])
    loss = policy_gradient_loss(logprobs, advantages, mask, "bnpo")
    # per token −A·logp: 2, 4, −0.5 over 3 tokens
    assert loss.item() == pytest.approx(5.5 / 3)
    loss.backward()
    _assert_values(logprobs.grad, [[-2 / 3, -2 / 3], [1 / 3, 0.0]])
    assert logprobs.grad[1, 1].item() == 0.0  # exactly zero, not just small
    assert advantages.grad is None  # advantages are constants


def test_nan_advantages_on_padding_do_not_reach_the_gradient():
    logprobs = torch.tensor([[-1.0, NAN]], requires_grad=True)
    advantages = torch.tensor([[2.0, NAN]])
    mask = torch.tensor([[True, False]])
    policy_gradient_loss(logprobs, advantages, mask, "bnpo").backward()
    assert logprobs.grad.tolist() == [[-2.0, 0.0]]
    logprobs.grad = None
    ppo_clip_loss(logprobs, torch.tensor([[-1.0, NAN]]), advantages, mask).loss.backward()
    assert logprobs.grad.tolist() == [[-2.0, 0.0]]


def test_policy_gradient_loss_accepts_per_token_advantages():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0]])
    advantages = torch.tensor([[1.0, 0.0, -1.0]])
    loss = policy_gradient_loss(logprobs, advantages, torch.ones(1, 3), "grpo")
    assert loss.item() == pytest.approx((1.0 + 0.0 - 3.0) / 3)


@given(token_batches, st.sampled_from(["grpo", "bnpo", "dr_grpo", "dapo", "sequence_sum"]))
def test_pad_tokens_get_exactly_zero_gradient(batch, loss_type):
    values, mask = batch
    logprobs = torch.tensor(values, dtype=torch.float64).neg().abs().neg().requires_grad_(True)
    mask = torch.tensor(mask)
    advantages = torch.linspace(-1, 1, logprobs.shape[0], dtype=torch.float64)
    kwargs = {"max_completion_length": logprobs.shape[1], "num_items_in_batch": 3}
    policy_gradient_loss(logprobs, advantages, mask, loss_type, **kwargs).backward()
    assert bool((logprobs.grad[~mask] == 0).all())
    old = logprobs.detach() + 0.3
    logprobs.grad = None
    ppo_clip_loss(logprobs, old, advantages, mask, loss_type=loss_type, **kwargs).loss.backward()
    assert bool((logprobs.grad[~mask] == 0).all())


# ------------------------------------------------------------------------------------ PPO-clip loss


def _ppo_case():
    ratios = torch.tensor([[1.5, 0.5, 1.1, 1.0], [1.5, 0.5, 0.9, 1.0]], dtype=torch.float64)
    old = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-1.5, -0.7, -3.0, 0.0]], dtype=torch.float64)
    logprobs = (old + ratios.log()).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]])
    advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
    return logprobs, old, advantages, mask


def test_ppo_clip_hand_values_gradients_and_diagnostics():
    logprobs, old, advantages, mask = _ppo_case()
    out = ppo_clip_loss(logprobs, old, advantages, mask, epsilon=0.2, loss_type="bnpo")
    # A=+1: ρ 1.5 -> clipped to 1.2; ρ 0.5 -> 0.5; ρ 1.1 -> 1.1.
    # A=−1: ρ 1.5 -> 1.5; ρ 0.5 -> clipped to 0.8; ρ 0.9 -> 0.9
    expected_tokens = [[-1.2, -0.5, -1.1, 0.0], [1.5, 0.8, 0.9, 0.0]]
    _assert_values(out.per_token_loss, expected_tokens)
    assert out.loss.item() == pytest.approx(0.4 / 6)
    out.loss.backward()
    # d/dlogp of −ρ·A is −ρ·A where unclipped, 0 where the clip is active; /6 tokens
    expected_grad = [[0.0, -0.5 / 6, -1.1 / 6, 0.0], [1.5 / 6, 0.0, 0.9 / 6, 0.0]]
    _assert_values(logprobs.grad, expected_grad)
    assert float(out.clip_ratio_low) == pytest.approx(1 / 6)
    assert float(out.clip_ratio_high) == pytest.approx(1 / 6)
    assert float(out.clip_ratio_region) == pytest.approx(2 / 6)
    assert float(out.ratio_mean) == pytest.approx(1.0)
    kl_terms = [(r - 1) - math.log(r) for r in (1.5, 0.5, 1.1, 1.5, 0.5, 0.9)]
    assert float(out.approx_kl) == pytest.approx(sum(kl_terms) / 6)
    assert out.kl is None
    metrics = out.as_metrics("policy_0/")
    assert metrics["policy_0/clip_ratio/region_mean"] == pytest.approx(1 / 3)
    assert set(metrics) == {
        "policy_0/loss",
        "policy_0/clip_ratio/low_mean",
        "policy_0/clip_ratio/high_mean",
        "policy_0/clip_ratio/region_mean",
        "policy_0/approx_kl",
        "policy_0/ratio_mean",
    }


def test_ppo_epsilon_high_widens_the_upper_clip_only():
    logprobs, old, advantages, mask = _ppo_case()
    out = ppo_clip_loss(logprobs, old, advantages, mask, epsilon=0.2, epsilon_high=0.6)
    _assert_values(out.per_token_loss, [[-1.5, -0.5, -1.1, 0.0], [1.5, 0.8, 0.9, 0.0]])
    assert float(out.clip_ratio_high) == 0.0
    assert float(out.clip_ratio_low) == pytest.approx(1 / 6)


def test_ppo_on_policy_gradient_equals_reinforce_gradient():
    generator = torch.Generator().manual_seed(0)
    logprobs = -torch.rand(3, 5, generator=generator, dtype=torch.float64)
    mask = torch.rand(3, 5, generator=generator) > 0.3
    advantages = torch.randn(3, generator=generator, dtype=torch.float64)
    grads = []
    for use_ppo in (True, False):
        leaf = logprobs.clone().requires_grad_(True)
        if use_ppo:
            loss = ppo_clip_loss(leaf, logprobs, advantages, mask, loss_type="grpo").loss
        else:
            loss = policy_gradient_loss(leaf, advantages, mask, "grpo")
        loss.backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[0], grads[1])


@given(
    st.lists(st.tuples(st.floats(-2.0, 2.0), st.floats(-3.0, 3.0)), min_size=1, max_size=12),
    st.floats(0.05, 0.5),
    st.floats(0.05, 0.5),
)
def test_ppo_gradient_is_zero_exactly_outside_the_trust_region(tokens, epsilon, epsilon_high):
    log_ratio = torch.tensor([[t[0] for t in tokens]], dtype=torch.float64)
    advantages = torch.tensor([[t[1] for t in tokens]], dtype=torch.float64)
    logprobs = (log_ratio - 1.0).requires_grad_(True)
    old = torch.full_like(log_ratio, -1.0)
    mask = torch.ones_like(log_ratio, dtype=torch.bool)
    ppo_clip_loss(
        logprobs, old, advantages, mask, epsilon, epsilon_high, loss_type="sequence_sum"
    ).loss.backward()
    ratio = log_ratio.exp()
    clipped = ((advantages > 0) & (ratio > 1 + epsilon_high)) | ((advantages < 0) & (ratio < 1 - epsilon))
    # Outside the trust region, in the direction the advantage pushes: no gradient at all.
    assert bool((logprobs.grad[clipped] == 0).all())
    # Elsewhere: REINFORCE's gradient weighted by the ratio, d(−ρA)/dlog π = −ρA.
    torch.testing.assert_close(logprobs.grad[~clipped], (-ratio * advantages)[~clipped])


def test_ppo_dual_clip_caps_negative_advantage_tokens():
    old = torch.zeros(1, 2, dtype=torch.float64)
    logprobs = torch.tensor([[math.log(5.0), math.log(2.0)]], dtype=torch.float64, requires_grad=True)
    advantages = torch.tensor([[-1.0, -1.0]], dtype=torch.float64)
    mask = torch.ones(1, 2)
    plain = ppo_clip_loss(logprobs, old, advantages, mask, loss_type="sequence_sum")
    _assert_values(plain.per_token_loss, [[5.0, 2.0]])
    dual = ppo_clip_loss(logprobs, old, advantages, mask, loss_type="sequence_sum", dual_clip=3.0)
    _assert_values(dual.per_token_loss, [[3.0, 2.0]])  # min(ρ·|A|, c·|A|)
    dual.loss.backward()
    _assert_values(logprobs.grad, [[0.0, 2.0]])


def test_ppo_reference_kl_term():
    logprobs, old, advantages, mask = _ppo_case()
    ref = logprobs.detach() + torch.tensor(
        [[0.5, -0.5, 0.0, 7.0], [1.0, 0.0, -1.0, 7.0]], dtype=torch.float64
    )
    without = ppo_clip_loss(logprobs, old, advantages, mask)
    with_kl = ppo_clip_loss(logprobs, old, advantages, mask, ref_logprobs=ref, beta=0.1)
    deltas = [0.5, -0.5, 0.0, 1.0, 0.0, -1.0]  # ref − logp on completion tokens
    k3_mean = sum(math.exp(d) - d - 1 for d in deltas) / 6
    assert (with_kl.loss - without.loss).item() == pytest.approx(0.1 * k3_mean)
    assert float(with_kl.kl) == pytest.approx(k3_mean)
    # beta = 0 with a reference: the KL is reported but not added.
    metric_only = ppo_clip_loss(logprobs, old, advantages, mask, ref_logprobs=ref)
    assert metric_only.loss.item() == pytest.approx(without.loss.item())
    assert metric_only.as_metrics()["kl"] == pytest.approx(k3_mean)


def test_ppo_is_finite_when_padding_holds_infinities():
    logprobs = torch.tensor([[-1.0, -INF]], requires_grad=True)
    old = torch.tensor([[-1.2, INF]])
    ref = torch.tensor([[-0.9, NAN]])
    out = ppo_clip_loss(
        logprobs, old, torch.tensor([1.0]), torch.tensor([[1, 0]]), ref_logprobs=ref, beta=0.5
    )
    assert math.isfinite(out.loss.item())
    out.loss.backward()
    assert math.isfinite(logprobs.grad[0, 0].item())
    assert logprobs.grad[0, 1].item() == 0.0


@given(token_batches, st.sampled_from(["grpo", "bnpo", "dr_grpo", "dapo", "sequence_sum"]))
def test_ppo_loss_matches_naive_loop(batch, loss_type):
    values, mask = batch
    rows, width = len(values), len(values[0])
    log_ratio = [[v / 10 for v in row] for row in values]  # ratios in [e^-1, e]
    advantages = [(-1) ** b * (b + 0.5) for b in range(rows)]
    eps, eps_high = 0.2, 0.28
    per_token = [
        [
            -min(math.exp(lr) * advantages[b], min(max(math.exp(lr), 1 - eps), 1 + eps_high) * advantages[b])
            for lr in log_ratio[b]
        ]
        for b in range(rows)
    ]
    expected = _naive_aggregate(per_token, mask, loss_type, width, 5)
    old = torch.full((rows, width), -2.0, dtype=torch.float64)
    out = ppo_clip_loss(
        old + torch.tensor(log_ratio, dtype=torch.float64),
        old,
        torch.tensor(advantages, dtype=torch.float64),
        torch.tensor(mask),
        eps,
        eps_high,
        loss_type,
        max_completion_length=width,
        num_items_in_batch=5,
    )
    assert out.loss.item() == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"epsilon": 0.0}, "`epsilon` must be > 0"),
        ({"epsilon_high": -0.1}, "`epsilon_high` must be > 0"),
        ({"dual_clip": 1.0}, "`dual_clip` must be > 1"),
        ({"beta": 0.1}, "`ref_logprobs` is required"),
        ({"beta": -0.1}, "`beta` must be >= 0"),
        ({"old_logprobs": torch.zeros(2, 2)}, "`old_logprobs` must have shape"),
        ({"advantages": torch.zeros(3)}, "`advantages` must have shape"),
        ({"loss_type": "mean"}, "`loss_type` must be one of"),
    ],
)
def test_ppo_errors(kwargs, match):
    arguments = {
        "logprobs": torch.zeros(2, 3),
        "old_logprobs": torch.zeros(2, 3),
        "advantages": torch.zeros(2),
        "mask": torch.ones(2, 3),
    } | kwargs
    with pytest.raises(ValueError, match=match):
        ppo_clip_loss(**arguments)


# ------------------------------------------------------------------------------------ entropy


def test_masked_entropy_hand_values():
    vocab = 4
    logits = torch.zeros(1, 3, vocab)
    logits[0, 1] = torch.tensor([2.0, 0.0, 0.0, -1.0])
    logits[0, 2] = torch.tensor([NAN, NAN, NAN, NAN])  # padding
    probs = [math.exp(v) for v in (2.0, 0.0, 0.0, -1.0)]
    probs = [p / sum(probs) for p in probs]
    second = -sum(p * math.log(p) for p in probs)
    entropy = masked_entropy(logits, torch.tensor([[1, 1, 0]]))
    assert float(entropy) == pytest.approx((math.log(vocab) + second) / 2, rel=1e-5)


def test_masked_entropy_keeps_gradient_and_checks_shape():
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(1), requires_grad=True)
    masked_entropy(logits, torch.ones(2, 3)).backward()
    assert logits.grad is not None and bool(logits.grad.abs().sum() > 0)
    with pytest.raises(ValueError, match="`logits` must be 3-D"):
        masked_entropy(torch.zeros(2, 5), torch.ones(2))
