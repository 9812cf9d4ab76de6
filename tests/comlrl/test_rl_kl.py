"""KL estimators and reference-KL reward shaping (comlrl.rl.kl)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from comlrl.rl import KL_ESTIMATORS, kl_penalized_rewards, per_token_kl, sequence_kl

LOGPROBS = torch.tensor([-1.0, -2.0], dtype=torch.float64)
REF = torch.tensor([-1.5, -1.0], dtype=torch.float64)  # δ = ref − logp = [−0.5, 1.0]
NAN = float("nan")
INF = float("inf")


@pytest.mark.parametrize(
    "estimator, expected",
    [
        ("k1", [0.5, -1.0]),
        ("k2", [0.125, 0.5]),
        ("k3", [math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 1.0 - 1]),
    ],
)
def test_per_token_hand_values(estimator, expected):
    torch.testing.assert_close(
        per_token_kl(LOGPROBS, REF, estimator), torch.tensor(expected, dtype=torch.float64)
    )


@given(
    st.lists(st.tuples(st.floats(-30, 0), st.floats(-30, 0)), min_size=1, max_size=16),
    st.sampled_from(["k2", "k3"]),
)
def test_k2_and_k3_are_non_negative_and_zero_only_at_equality(pairs, estimator):
    logprobs = torch.tensor([p[0] for p in pairs], dtype=torch.float64)
    ref = torch.tensor([p[1] for p in pairs], dtype=torch.float64)
    kl = per_token_kl(logprobs, ref, estimator)
    assert bool((kl >= 0).all())
    assert bool((per_token_kl(logprobs, logprobs, estimator) == 0).all())


@given(
    st.lists(st.floats(-1e-6, 1e-6), min_size=1, max_size=16),
    st.floats(-20, 0),
    st.sampled_from([torch.float32, torch.float64]),
)
def test_k3_stays_non_negative_for_nearly_equal_log_probs(deltas, base, dtype):
    logprobs = torch.full((len(deltas),), base, dtype=torch.float64)
    ref = logprobs + torch.tensor(deltas, dtype=torch.float64)
    assert bool((per_token_kl(logprobs.to(dtype), ref.to(dtype), "k3") >= 0).all())


def test_k1_and_k3_are_unbiased_for_the_exact_kl():
    # Exact expectations under π (no sampling): Σ_x π(x)·k(x) against KL(π ‖ π_ref) = Σ π log(π/π_ref).
    policy = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    reference = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    true_kl = sum(p * math.log(p / q) for p, q in zip(policy.tolist(), reference.tolist()))
    for estimator in ("k1", "k3"):
        expectation = float((policy * per_token_kl(policy.log(), reference.log(), estimator)).sum())
        assert expectation == pytest.approx(true_kl, rel=1e-12)
    k2 = float((policy * per_token_kl(policy.log(), reference.log(), "k2")).sum())
    assert k2 != pytest.approx(true_kl, rel=1e-3)  # k2 is biased


def test_sequence_kl_masked_sum_and_padding():
    logprobs = torch.tensor([[-1.0, -2.0, -INF], [-0.5, -0.5, -0.5]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, NAN], [-0.5, -1.5, 3.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    out = sequence_kl(logprobs, ref, mask, "k1")
    # row 0: 0.5 + (−1.0); row 1: 0 + 1.0
    torch.testing.assert_close(out, torch.tensor([-0.5, 1.0], dtype=torch.float64))
    k3 = sequence_kl(logprobs, ref, mask, "k3")
    torch.testing.assert_close(
        k3, torch.tensor([math.exp(-0.5) - 0.5 + math.exp(1) - 2, math.exp(-1) + 1 - 1], dtype=torch.float64)
    )
    k3.sum().backward()
    assert logprobs.grad[0, 2].item() == 0.0 and logprobs.grad[1, 2].item() == 0.0
    assert bool(torch.isfinite(logprobs.grad).all())


def test_kl_penalized_rewards_arithmetic():
    rewards = torch.tensor([1.0, 0.5, -0.2])
    kl = torch.tensor([2.0, 0.0, 0.5], requires_grad=True)
    shaped = kl_penalized_rewards(rewards, kl, coef=0.1)
    torch.testing.assert_close(shaped, torch.tensor([0.8, 0.5, -0.25]))
    assert not shaped.requires_grad  # the KL term is a constant in the shaped reward


def test_reference_kl_shaping_end_to_end():
    # Two completions of one agent, one padded: summed k3 per completion times coef is taken off the reward.
    logprobs = torch.tensor([[-1.0, -1.0], [-2.0, 0.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.0, -2.0], [-1.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1], [1, 0]])
    kl = sequence_kl(logprobs, ref, mask)
    expected_kl = [0.0 + (math.exp(-1) + 1 - 1), math.exp(1) - 1 - 1]
    shaped = kl_penalized_rewards(torch.tensor([1.0, 2.0], dtype=torch.float64), kl, coef=0.5)
    torch.testing.assert_close(
        shaped, torch.tensor([1.0 - 0.5 * expected_kl[0], 2.0 - 0.5 * expected_kl[1]], dtype=torch.float64)
    )


@pytest.mark.parametrize("coef", [-0.1, float("nan"), float("inf")])
def test_kl_penalized_rewards_rejects_bad_coef(coef):
    with pytest.raises(ValueError, match="`coef`"):
        kl_penalized_rewards(torch.zeros(2), torch.zeros(2), coef)


def test_shape_and_name_errors():
    with pytest.raises(ValueError, match="`per_sequence_kl` must have the shape"):
        kl_penalized_rewards(torch.zeros(2), torch.zeros(3), 0.1)
    with pytest.raises(ValueError, match="`ref_logprobs` must have shape"):
        per_token_kl(torch.zeros(2, 3), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="`estimator` must be one of"):
        per_token_kl(torch.zeros(2), torch.zeros(2), "k4")
    with pytest.raises(ValueError, match="`logprobs` must be 2-D"):
        sequence_kl(torch.zeros(3), torch.zeros(3), torch.ones(3))
    assert KL_ESTIMATORS == ("k1", "k2", "k3")
