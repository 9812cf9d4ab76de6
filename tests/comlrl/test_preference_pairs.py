"""Pair building: every pair_selection mode against an independent ordering, tie dropping, truncation,
iterative index alignment with unequal candidate counts, and sampled token ids carried into the pairs."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from comlrl.rollout.types import Completion
from comlrl.trainers.preference import (
    OracleScores,
    build_comparison_pairs,
    build_preference_pairs,
    validate_pair_selection,
)
from comlrl.trainers.preference.pairs import keep_first, rank_candidate_pairs, rank_comparisons

small_rewards = st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5, -1.0, 2.25]), min_size=0, max_size=7)


def comp(text: str, ids: list[int], prompt_ids: list[int]) -> Completion:
    return Completion(
        prompt_token_ids=prompt_ids, token_ids=ids, logprobs=[0.0] * len(ids), text=text, finish_reason="stop"
    )


def side(tag: str, k: int, num_agents: int = 2) -> list[list[Completion]]:
    """Per agent, k candidates whose text and ids encode (side, agent, candidate)."""
    return [[comp(f"{tag}{a}{j}", [100 * a + j, 2], [7, a]) for j in range(k)] for a in range(num_agents)]


# ---- selection math ---------------------------------------------------------------------------


@given(small_rewards)
def test_candidate_pairs_are_exactly_the_strict_wins(rewards):
    expected = {(i, j) for i, j in itertools.permutations(range(len(rewards)), 2) if rewards[i] > rewards[j]}
    for selection, rng in (("reward_gap", None), ("all", None), ("random", random.Random(0))):
        ranked = rank_candidate_pairs(rewards, selection, rng)
        assert len(ranked) == len(expected) and set(ranked) == expected  # ties dropped, no duplicates


@given(small_rewards)
def test_reward_gap_orders_by_gap_then_enumeration(rewards):
    ranked = rank_candidate_pairs(rewards, "reward_gap")
    # Independent ordering: a total key (negative gap, winner, loser) over the enumerated pairs.
    expected = sorted(
        ((i, j) for i in range(len(rewards)) for j in range(len(rewards)) if rewards[i] > rewards[j]),
        key=lambda ij: (rewards[ij[1]] - rewards[ij[0]], ij[0], ij[1]),
    )
    assert ranked == expected


def test_all_keeps_enumeration_order():
    assert rank_candidate_pairs([1.0, 3.0, 2.0], "all") == [(1, 0), (1, 2), (2, 0)]


def test_random_is_a_seeded_permutation_of_the_pairs():
    rewards = [0.1, 0.9, 0.4, 0.7, 0.2]
    a = rank_candidate_pairs(rewards, "random", np.random.default_rng(3))
    b = rank_candidate_pairs(rewards, "random", np.random.default_rng(3))
    c = rank_candidate_pairs(rewards, "random", random.Random(3))
    assert a == b and sorted(a) == sorted(rank_candidate_pairs(rewards, "all")) == sorted(c)
    random.seed(123)  # the global RNG plays no part
    assert rank_candidate_pairs(rewards, "random", random.Random(3)) == c
    with pytest.raises(TypeError, match="`rng` must be a seeded random.Random or numpy.random.Generator"):
        rank_candidate_pairs(rewards, "random", None)


@given(small_rewards, small_rewards)
def test_comparisons_use_only_shared_indices_and_drop_ties(cur, cmp):
    shared = min(len(cur), len(cmp))
    expected = [k for k in range(shared) if cur[k] != cmp[k]]
    assert rank_comparisons(cur, cmp, "all") == expected
    assert sorted(rank_comparisons(cur, cmp, "reward_gap")) == expected
    gaps = [abs(cur[k] - cmp[k]) for k in rank_comparisons(cur, cmp, "reward_gap")]
    assert gaps == sorted(gaps, reverse=True)
    keys = [(cmp[k], abs(cur[k] - cmp[k])) for k in rank_comparisons(cur, cmp, "comparator_reward")]
    assert keys == sorted(keys, reverse=True)


def test_comparator_reward_prefers_high_comparator_scores_whoever_wins():
    cur = [0.9, 0.0, 0.5, 0.2]
    cmp = [0.1, 0.8, 0.8, 0.7]
    # comparator scores 0.8 at k=1 (gap 0.8) and k=2 (gap 0.3), 0.7 at k=3, 0.1 at k=0 (current wins).
    assert rank_comparisons(cur, cmp, "comparator_reward") == [1, 2, 3, 0]
    assert rank_comparisons(cur, cmp, "reward_gap") == [0, 1, 3, 2]


def test_keep_first():
    assert keep_first([3, 1, 2], None) == [3, 1, 2]
    assert keep_first([3, 1, 2], 2) == [3, 1]


# ---- validation --------------------------------------------------------------------------------


def test_validate_pair_selection():
    assert validate_pair_selection(" Reward_Gap ", 4) == "reward_gap"
    assert validate_pair_selection("comparator_reward", 4, iterative=True) == "comparator_reward"
    with pytest.raises(
        ValueError, match=r"`pair_selection` must be one of reward_gap, all, random \('comparator"
    ):
        validate_pair_selection("comparator_reward", 4)
    with pytest.raises(ValueError, match="`pair_selection` must be one of .* got 'best'"):
        validate_pair_selection("best", None, iterative=True)
    with pytest.raises(
        ValueError, match=r"`preference_pairs_per_sample` must be None when `pair_selection` is 'all'"
    ):
        validate_pair_selection("all", 16)
    with pytest.raises(ValueError, match=r"`preference_pairs_per_sample` must be >= 1 or None, got 0"):
        validate_pair_selection("random", 0)
    with pytest.raises(
        ValueError, match=r"`preference_pairs_per_sample` must be an integer or None, got True"
    ):
        validate_pair_selection("random", True)


# ---- base builder ------------------------------------------------------------------------------


def test_base_pairs_carry_texts_scores_and_sampled_ids():
    cands = side("c", 3)
    scores = OracleScores(raw=[10.0, 30.0, 20.0], processed=[1.0, 3.0, 2.0])
    pairs = build_preference_pairs(
        ["pA", "pB"], cands, scores, pair_selection="reward_gap", pairs_per_sample=2
    )
    assert [(p.winner_completions, p.loser_completions) for p in pairs] == [
        (["c01", "c11"], ["c00", "c10"]),  # gap 2
        (["c01", "c11"], ["c02", "c12"]),  # gap 1 (enumeration order among equal gaps)
    ]
    p = pairs[0]
    assert (p.winner_reward, p.loser_reward, p.candidate_reward_mean) == (3.0, 1.0, 2.0)
    assert p.raw_rewards == [] and p.target_raw_reward is None and p.comparator_raw_reward is None
    assert p.prompts == ["pA", "pB"] and p.prompt_token_ids == [[7, 0], [7, 1]]
    assert p.winner_token_ids == [[1, 2], [101, 2]] and p.loser_token_ids == [[0, 2], [100, 2]]
    assert p.has_token_ids


def test_base_all_and_ties():
    cands = side("c", 4)
    pairs = build_preference_pairs(["p", "q"], cands, [1.0, 1.0, 0.0, 1.0], pair_selection="all")
    # Candidates 0, 1, 3 tie: the only pairs beat candidate 2.
    assert [p.loser_completions[0] for p in pairs] == ["c02"] * 3
    assert [p.winner_completions[0] for p in pairs] == ["c00", "c01", "c03"]
    assert build_preference_pairs(["p", "q"], cands, [0.5] * 4) == []


def test_base_random_is_seeded_and_truncated():
    cands = side("c", 5)
    rewards = [0.3, 0.1, 0.5, 0.4, 0.2]
    run = [
        build_preference_pairs(
            ["p", "q"],
            cands,
            rewards,
            pair_selection="random",
            pairs_per_sample=3,
            rng=np.random.default_rng(11),
        )
        for _ in range(2)
    ]
    assert len(run[0]) == 3 and [p.to_record() for p in run[0]] == [p.to_record() for p in run[1]]
    assert all(p.winner_reward > p.loser_reward for p in run[0])


def test_text_only_candidates_leave_ids_unknown():
    pairs = build_preference_pairs(["p"], [["short", "longer"]], [0.0, 1.0])
    assert pairs[0].winner_completions == ["longer"]
    assert pairs[0].prompt_token_ids is None and pairs[0].winner_token_ids is None


def test_builder_shape_errors():
    with pytest.raises(ValueError, match="`candidates` has 3 joint candidates but 2 scores"):
        build_preference_pairs(["p", "q"], side("c", 3), [1.0, 0.0])
    with pytest.raises(ValueError, match=r"`candidates` must hold one candidate list per agent \(2\), got 1"):
        build_preference_pairs(["p", "q"], side("c", 3, num_agents=1), [1.0, 0.0, 2.0])


# ---- iterative builder -------------------------------------------------------------------------


def test_iterative_alignment_with_unequal_candidate_counts():
    current, comparator = side("cur", 4), side("cmp", 2)
    cur = OracleScores(raw=[1.0, 0.0, 9.0, 9.0], processed=[0.5, 0.0, 4.5, 4.5])
    cmp = OracleScores(raw=[0.0, 2.0], processed=[0.0, 1.0])
    pairs = build_comparison_pairs(["pA", "pB"], current, cur, comparator, cmp, pair_selection="all")
    assert len(pairs) == 2  # only k = 0, 1 exist on both sides
    first, second = pairs
    # k = 0: the current agents win.
    assert first.winner_completions == ["cur00", "cur10"] and first.loser_completions == ["cmp00", "cmp10"]
    assert first.raw_rewards == [1.0, 0.0] and (first.target_raw_reward, first.comparator_raw_reward) == (
        1.0,
        0.0,
    )
    # k = 1: the comparator wins; raw_rewards is still [winner, loser].
    assert second.winner_completions == ["cmp01", "cmp11"] and second.loser_completions == ["cur01", "cur11"]
    assert second.raw_rewards == [2.0, 0.0] and (second.target_raw_reward, second.comparator_raw_reward) == (
        0.0,
        2.0,
    )
    assert (second.winner_reward, second.loser_reward) == (1.0, 0.0)
    # The mean covers every processed score on both sides (4 + 2 candidates).
    assert first.candidate_reward_mean == pytest.approx((0.5 + 0.0 + 4.5 + 4.5 + 0.0 + 1.0) / 6)
    # Prompt ids come from the current side; completion ids follow the winner / loser.
    assert second.prompt_token_ids == [[7, 0], [7, 1]]
    assert second.winner_token_ids == [[1, 2], [101, 2]] and second.loser_token_ids == [[1, 2], [101, 2]]


def test_iterative_tie_dropped_and_comparator_reward_order():
    current, comparator = side("cur", 4), side("cmp", 4)
    pairs = build_comparison_pairs(
        ["p", "q"], current, [0.9, 0.0, 0.5, 0.3], comparator, [0.1, 0.8, 0.8, 0.3], pairs_per_sample=2
    )
    # Default selection comparator_reward: k = 1 (0.8, gap 0.8) then k = 2 (0.8, gap 0.3); k = 3 ties.
    assert [p.winner_completions[0] for p in pairs] == ["cmp01", "cmp02"]


def test_iterative_random_and_reward_gap():
    current, comparator = side("cur", 5), side("cmp", 5)
    cur, cmp = [0.0, 1.0, 2.0, 3.0, 4.0], [4.0, 0.0, 0.0, 0.0, 5.0]
    by_gap = build_comparison_pairs(["p", "q"], current, cur, comparator, cmp, pair_selection="reward_gap")
    assert [abs(p.winner_reward - p.loser_reward) for p in by_gap] == [4.0, 3.0, 2.0, 1.0, 1.0]
    draws = [
        build_comparison_pairs(
            ["p", "q"], current, cur, comparator, cmp, pair_selection="random", rng=random.Random(5)
        )
        for _ in range(2)
    ]
    assert [p.to_record() for p in draws[0]] == [p.to_record() for p in draws[1]]
    assert sorted(p.target_raw_reward for p in draws[0]) == cur


def test_foreign_comparator_ids_are_dropped_and_api_completions_have_none():
    current = side("cur", 2)
    comparator = side("cmp", 2)
    pairs = build_comparison_pairs(
        ["p", "q"],
        current,
        [1.0, 0.0],
        comparator,
        [0.0, 1.0],
        pair_selection="all",
        comparator_token_ids=False,
    )
    assert pairs[0].winner_token_ids == [[0, 2], [100, 2]] and pairs[0].loser_token_ids is None
    assert pairs[1].winner_token_ids is None and pairs[1].loser_token_ids == [[1, 2], [101, 2]]
    # An API backend returns empty id lists: unknown, not empty sequences.
    api = [[comp(f"api{a}{j}", [], []) for j in range(2)] for a in range(2)]
    pairs = build_comparison_pairs(["p", "q"], current, [1.0, 0.0], api, [0.0, 1.0], pair_selection="all")
    assert pairs[0].loser_token_ids is None and pairs[0].winner_token_ids is not None
    assert not pairs[0].has_token_ids
