"""Critic loss, single-turn critic advantages and explained variance (comlrl.rl.values)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from comlrl.rl import critic_advantages, explained_variance, value_loss


def test_value_loss_is_plain_mse():
    values = torch.tensor([1.0, 2.0], requires_grad=True)
    returns = torch.tensor([0.0, 4.0])
    loss = value_loss(values, returns)
    assert loss.item() == pytest.approx((1.0 + 4.0) / 2)
    loss.backward()
    torch.testing.assert_close(values.grad, torch.tensor([1.0, -2.0]))  # 2(V − R)/N


def test_value_loss_clipping_hand_values():
    old = torch.tensor([0.5, 2.0])
    values = torch.tensor([1.5, 2.1])
    returns = torch.tensor([0.0, 3.0])
    # V_clip = [0.7, 2.1]; unclipped² = [2.25, 0.81]; clipped² = [0.49, 0.81]; elementwise max
    loss = value_loss(values, returns, old_values=old, clip_range=0.2)
    assert loss.item() == pytest.approx((2.25 + 0.81) / 2)


def test_value_clipping_removes_the_gain_from_a_large_step():
    # The critic jumped from 0 to the target 1; clipped to 0.2 it is still 0.8 away, and that term wins.
    values = torch.tensor([1.0, 0.1], requires_grad=True)
    old = torch.tensor([0.0, 0.0])
    returns = torch.tensor([1.0, 1.0])
    loss = value_loss(values, returns, old_values=old, clip_range=0.2)
    assert loss.item() == pytest.approx((0.64 + 0.81) / 2)
    loss.backward()
    assert values.grad[0].item() == 0.0  # no gradient through the clipped branch
    assert values.grad[1].item() == pytest.approx(2 * (0.1 - 1.0) / 2)


def test_value_loss_masks_per_token_values():
    values = torch.tensor([[1.0, 3.0, 50.0], [2.0, float("nan"), 0.0]], requires_grad=True)
    returns = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, float("nan")]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss = value_loss(values, returns, mask=mask)
    assert loss.item() == pytest.approx((1.0 + 4.0 + 0.0) / 3)
    loss.backward()
    assert values.grad[0, 2].item() == 0.0 and values.grad[1, 1].item() == 0.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"clip_range": 0.2}, "`old_values` is required"),
        ({"clip_range": 0.0, "old_values": torch.zeros(2)}, "`clip_range` must be > 0"),
        ({"returns": torch.zeros(3)}, "`returns` must have shape"),
        ({"clip_range": 0.1, "old_values": torch.zeros(3)}, "`old_values` must have shape"),
    ],
)
def test_value_loss_errors(kwargs, match):
    arguments = {"values": torch.zeros(2), "returns": torch.zeros(2)} | kwargs
    with pytest.raises(ValueError, match=match):
        value_loss(**arguments)


def test_v_critic_advantage_is_return_minus_value():
    values = torch.tensor([0.5, 1.0, -1.0], requires_grad=True)
    adv = critic_advantages(torch.tensor([1.0, 1.0, 0.0]), values, "v")
    torch.testing.assert_close(adv, torch.tensor([0.5, 0.0, 1.0]))
    assert not adv.requires_grad


def test_q_critic_advantage_is_q_minus_group_mean_q():
    q = torch.tensor([1.0, 2.0, 6.0, 5.0, 3.0])
    groups = torch.tensor([0, 0, 0, 1, 1])
    adv = critic_advantages(torch.zeros(5), q, "q", group_ids=groups)
    torch.testing.assert_close(adv, torch.tensor([-2.0, -1.0, 3.0, 1.0, -1.0]))


def test_q_critic_with_one_completion_per_prompt_is_return_minus_q():
    # num_generations=1 (the public default): the public meaning, A = R - Q(h, a).
    adv = critic_advantages(torch.tensor([1.0, 3.0]), torch.tensor([0.5, 1.0]), "q", group_ids=[0, 1])
    torch.testing.assert_close(adv, torch.tensor([0.5, 2.0]))


def test_q_critic_errors():
    with pytest.raises(ValueError, match="`group_ids`"):
        critic_advantages(torch.zeros(2), torch.zeros(2), "q")
    with pytest.raises(ValueError, match="`critic_type` must be one of"):
        critic_advantages(torch.zeros(2), torch.zeros(2), "a")
    with pytest.raises(ValueError, match="`returns` must have shape"):
        critic_advantages(torch.zeros(3), torch.zeros(2), "v")


def test_explained_variance_hand_values():
    returns = torch.tensor([1.0, 2.0, 3.0])
    assert explained_variance(returns, returns).item() == pytest.approx(1.0)
    assert explained_variance(torch.full((3,), 2.0), returns).item() == pytest.approx(0.0)
    # residual [0, 0, 1]: var 1/3 (unbiased); var(R) = 1
    assert explained_variance(torch.tensor([1.0, 2.0, 2.0]), returns).item() == pytest.approx(2 / 3)
    assert math.isnan(explained_variance(torch.zeros(3), torch.ones(3)).item())
    masked = explained_variance(
        torch.tensor([1.0, 2.0, 2.0, 9.0]),
        torch.tensor([1.0, 2.0, 3.0, 0.0]),
        mask=torch.tensor([1, 1, 1, 0]),
    )
    assert masked.item() == pytest.approx(2 / 3)


@given(st.lists(st.tuples(st.floats(-5, 5), st.floats(-5, 5)), min_size=2, max_size=20))
def test_explained_variance_matches_naive_formula(pairs):
    values = [p[0] for p in pairs]
    returns = [p[1] for p in pairs]
    n = len(pairs)

    def var(xs):
        mean = sum(xs) / n
        return sum((x - mean) ** 2 for x in xs) / (n - 1)

    actual = explained_variance(
        torch.tensor(values, dtype=torch.float64), torch.tensor(returns, dtype=torch.float64)
    )
    if var(returns) <= 1e-12:
        return
    expected = 1 - var([r - v for r, v in zip(returns, values)]) / var(returns)
    assert actual.item() == pytest.approx(expected, rel=1e-6, abs=1e-9)
