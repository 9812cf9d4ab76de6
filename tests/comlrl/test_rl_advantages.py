"""Group baselines, advantage scaling, reward mixing and group statistics (comlrl.rl.advantages)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from comlrl.rl import (
    ESTIMATORS,
    compute_advantages,
    group_ids_from_keys,
    group_max_baseline,
    group_mean_baseline,
    group_stats,
    leave_one_out_baseline,
    mix_rewards,
    raw_returns,
)

# Groups 7 (three members), 2 (two, tied) and 5 (a singleton); ids deliberately unsorted and sparse.
REWARDS = torch.tensor([1.0, 2.0, 3.0, 10.0, 10.0, 4.0], dtype=torch.float64)
GROUPS = torch.tensor([7, 7, 7, 2, 2, 5])


def _close(actual: torch.Tensor, expected: list[float], atol: float = 1e-9) -> None:
    assert actual.shape == (len(expected),)
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


# ------------------------------------------------------------------------------------ hand-computed values


def test_group_mean_baseline_hand_values():
    _close(group_mean_baseline(REWARDS, GROUPS), [-1.0, 0.0, 1.0, 0.0, 0.0, 0.0])


def test_raw_returns_is_an_independent_copy():
    out = raw_returns(REWARDS, GROUPS)
    _close(out, REWARDS.tolist())
    out[0] = 99.0
    assert REWARDS[0] == 1.0


def test_leave_one_out_hand_values_and_singleton_gets_zero():
    # group 7: 1 - (2+3)/2, 2 - (1+3)/2, 3 - (1+2)/2 ; tied pair -> 0 ; singleton -> 0 by definition
    _close(leave_one_out_baseline(REWARDS, GROUPS), [-1.5, 0.0, 1.5, 0.0, 0.0, 0.0])


def test_leave_one_out_equals_scaled_mean_baseline():
    rewards = torch.tensor([0.0, 1.0, 5.0, 2.0], dtype=torch.float64)
    groups = torch.tensor([0, 0, 0, 0])
    # n/(n-1) * (r - mean): mean 2, n 4
    _close(leave_one_out_baseline(rewards, groups), [4 / 3 * v for v in (-2.0, -1.0, 3.0, 0.0)])


def test_group_max_baseline_hand_values():
    _close(group_max_baseline(REWARDS, GROUPS), [-2.0, -1.0, 0.0, 0.0, 0.0, 0.0])


def test_group_max_baseline_with_negative_rewards():
    rewards = torch.tensor([-3.0, -1.0, -2.0], dtype=torch.float64)
    _close(group_max_baseline(rewards, [4, 4, 4]), [-2.0, 0.0, -1.0])


def test_unscaled_estimators_differ():
    results = {name: compute_advantages(REWARDS, GROUPS, name, scale_rewards="none") for name in ESTIMATORS}
    _close(results["mean"], [-1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    _close(results["raw"], REWARDS.tolist())
    _close(results["rloo"], [-1.5, 0.0, 1.5, 0.0, 0.0, 0.0])
    _close(results["max"], [-2.0, -1.0, 0.0, 0.0, 0.0, 0.0])


def test_group_scaling_hand_values():
    eps = 1e-4
    # group 7 has unbiased std 1; the other groups have std 0 and centred values 0.
    expected = [-1 / (1 + eps), 0.0, 1 / (1 + eps), 0.0, 0.0, 0.0]
    _close(compute_advantages(REWARDS, GROUPS, "mean", scale_rewards="group", eps=eps), expected)
    _close(compute_advantages(REWARDS, GROUPS, "mean", scale_rewards=True, eps=eps), expected)


def test_batch_scaling_hand_values():
    eps = 1e-4
    # centred = [-1, 0, 1, 0, 0, 0]; unbiased batch std = sqrt(2 / 5)
    scale = math.sqrt(2 / 5) + eps
    expected = [-1 / scale, 0.0, 1 / scale, 0.0, 0.0, 0.0]
    _close(compute_advantages(REWARDS, GROUPS, "mean", scale_rewards="batch", eps=eps), expected)


def test_scale_false_is_none():
    torch.testing.assert_close(
        compute_advantages(REWARDS, GROUPS, "max", scale_rewards=False),
        compute_advantages(REWARDS, GROUPS, "max", scale_rewards="none"),
    )


def test_group_scaling_matches_trls_grpo_formula_on_equal_groups():
    generator = torch.Generator().manual_seed(0)
    rewards = torch.rand(12, generator=generator, dtype=torch.float64)
    grouped = rewards.view(3, 4)  # TRL's layout: num_generations consecutive completions per prompt
    expected = (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)
    actual = compute_advantages(rewards, torch.arange(3).repeat_interleave(4), "mean", "group", eps=1e-4)
    torch.testing.assert_close(actual, expected.flatten())


def test_rl_algorithm_names_map_to_estimators():
    for algorithm, estimator in [
        ("magrpo", "mean"),
        ("mareinforce", "raw"),
        ("marloo", "rloo"),
        ("maremax", "max"),
    ]:
        torch.testing.assert_close(
            compute_advantages(REWARDS, GROUPS, algorithm, "none"),
            compute_advantages(REWARDS, GROUPS, estimator, "none"),
        )


def test_accepts_python_lists_and_int_rewards():
    out = compute_advantages([1, 3], [0, 0], "mean", "none")
    assert out.is_floating_point()
    _close(out, [-1.0, 1.0], atol=1e-6)


# ------------------------------------------------------------------------------------ naive reference


def _naive_advantages(
    rewards: list[float], groups: list[int], estimator: str, scale: str, eps: float
) -> list[float]:
    members: dict[int, list[int]] = {}
    for index, group in enumerate(groups):
        members.setdefault(group, []).append(index)
    adv = [0.0] * len(rewards)
    for indices in members.values():
        values = [rewards[i] for i in indices]
        n = len(values)
        for i in indices:
            if estimator == "mean":
                adv[i] = rewards[i] - sum(values) / n
            elif estimator == "raw":
                adv[i] = rewards[i]
            elif estimator == "rloo":
                adv[i] = 0.0 if n == 1 else rewards[i] - (sum(values) - rewards[i]) / (n - 1)
            else:
                adv[i] = rewards[i] - max(values)
    if scale == "none":
        return adv
    centred = [0.0] * len(adv)
    group_std = {}
    for group, indices in members.items():
        values = [adv[i] for i in indices]
        mean = sum(values) / len(values)
        for i in indices:
            centred[i] = adv[i] - mean
        var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
        group_std[group] = math.sqrt(var)
    if scale == "group":
        return [centred[i] / (group_std[groups[i]] + eps) for i in range(len(adv))]
    n = len(centred)
    mean = sum(centred) / n
    var = sum((v - mean) ** 2 for v in centred) / (n - 1) if n > 1 else 0.0
    return [v / (math.sqrt(var) + eps) for v in centred]


rewards_and_groups = st.integers(min_value=1, max_value=24).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(-100, 100, allow_nan=False), min_size=n, max_size=n),
        st.lists(st.integers(-3, 5), min_size=n, max_size=n),
    )
)


@given(rewards_and_groups, st.sampled_from(ESTIMATORS), st.sampled_from(["none", "group", "batch"]))
def test_matches_naive_loop(data, estimator, scale):
    rewards, groups = data
    expected = _naive_advantages(rewards, groups, estimator, scale, eps=1e-4)
    actual = compute_advantages(
        torch.tensor(rewards, dtype=torch.float64), groups, estimator, scale, eps=1e-4
    )
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=torch.float64), atol=1e-7, rtol=1e-7)


# Integer-valued rewards keep every std either exactly 0 or >= ~0.3, far above eps, where the documented
# equality is exact up to rounding.
integer_rewards_and_groups = st.integers(min_value=1, max_value=24).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(-5, 5), min_size=n, max_size=n),
        st.lists(st.integers(0, 5), min_size=n, max_size=n),
    )
)


@given(integer_rewards_and_groups)
def test_all_estimators_coincide_under_group_scaling(data):
    rewards, groups = data
    rewards = torch.tensor(rewards, dtype=torch.float64) * 0.5
    results = [compute_advantages(rewards, groups, name, "group", eps=1e-12) for name in ESTIMATORS]
    for other in results[1:]:
        torch.testing.assert_close(other, results[0], atol=1e-9, rtol=1e-9)


@given(
    st.integers(1, 6).flatmap(
        lambda size: st.integers(1, 5).flatmap(
            lambda count: st.lists(st.integers(-5, 5), min_size=size * count, max_size=size * count).map(
                lambda values: (values, [i // size for i in range(size * count)])
            )
        )
    )
)
def test_all_estimators_coincide_under_batch_scaling_with_equal_groups(data):
    rewards, groups = data
    rewards = torch.tensor(rewards, dtype=torch.float64)
    results = [compute_advantages(rewards, groups, name, "batch", eps=1e-12) for name in ESTIMATORS]
    for other in results[1:]:
        torch.testing.assert_close(other, results[0], atol=1e-9, rtol=1e-9)


@given(integer_rewards_and_groups, st.sampled_from(ESTIMATORS))
def test_scaled_advantages_have_zero_group_mean(data, estimator):
    rewards, groups = data
    adv = compute_advantages(torch.tensor(rewards, dtype=torch.float64), groups, estimator, "group")
    for group in set(groups):
        selected = adv[torch.tensor(groups) == group]
        assert abs(float(selected.sum())) < 1e-9


def test_zero_std_group_gets_zero_advantage_when_scaled():
    adv = compute_advantages([3.0, 3.0, 3.0], [1, 1, 1], "raw", "group")
    _close(adv, [0.0, 0.0, 0.0], atol=0)


# ------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"estimator": "median"}, "`estimator`"),
        ({"scale_rewards": "item"}, "`scale_rewards`"),
        ({"eps": 0.0}, "`eps`"),
        ({"group_ids": [0, 0]}, "`group_ids` must have shape"),
        ({"group_ids": [0.0, 0.0, 1.0]}, "`group_ids` must hold integers"),
        ({"rewards": [1.0, float("nan"), 2.0]}, "`rewards` must be finite"),
        ({"rewards": [[1.0, 2.0, 3.0]]}, "`rewards` must be 1-D"),
    ],
)
def test_errors_name_the_input(kwargs, match):
    arguments = {"rewards": [1.0, 2.0, 3.0], "group_ids": [0, 0, 1]} | kwargs
    with pytest.raises((ValueError, TypeError), match=match):
        compute_advantages(**arguments)


# ------------------------------------------------------------------------------------ keys, mixing, stats


def test_group_ids_from_keys_first_appearance_order():
    keys = [(3, 0, "plan"), (3, 0, "tool"), (3, 0, "plan"), (0, 1, "plan")]
    ids, unique = group_ids_from_keys(keys)
    assert ids.tolist() == [0, 1, 0, 2]
    assert unique == [(3, 0, "plan"), (3, 0, "tool"), (0, 1, "plan")]
    assert [unique[i] for i in ids] == keys


def test_mix_rewards_arithmetic():
    mixed = mix_rewards(torch.tensor([1.0, 2.0]), torch.tensor([0.1, -1.0]), alpha=0.5)
    _close(mixed, [0.6, 0.0], atol=1e-6)
    assert float(mix_rewards(2, 1, alpha=0.0)) == 1.0
    assert float(mix_rewards(1.0, 1.0, alpha=1)) == 2.0


@pytest.mark.parametrize("alpha", [-0.1, float("nan"), float("inf")])
def test_mix_rewards_rejects_bad_alpha(alpha):
    with pytest.raises(ValueError, match="`alpha`"):
        mix_rewards(1.0, 1.0, alpha)


def test_group_stats_hand_values():
    stats = group_stats(REWARDS, GROUPS)
    assert stats.group_ids.tolist() == [2, 5, 7]
    assert stats.count.tolist() == [2, 1, 3]
    _close(stats.mean, [10.0, 4.0, 2.0])
    _close(stats.std, [0.0, 0.0, 1.0])
    assert stats.frac_zero_std == pytest.approx(2 / 3)
    metrics = stats.as_metrics("turn_1/")
    assert metrics == pytest.approx(
        {"turn_1/reward": 5.0, "turn_1/reward_std": 1 / 3, "turn_1/frac_reward_zero_std": 2 / 3}
    )


def test_group_stats_rejects_empty():
    with pytest.raises(ValueError, match="`rewards` must not be empty"):
        group_stats([], [])
