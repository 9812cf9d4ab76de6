"""Turning scored joint candidates into preference pairs.

Joint candidate k of an item is the k-th response of every agent. Of two joint responses with different
scores the higher is the winner; ties are dropped.

- Base trainers compare the item's own candidates: every ordered pair (i, j) with ``r_i > r_j``.
- Iterative trainers compare the current agents' candidate k with the comparator's candidate k, for
  the indices present on both sides; either side may win.

``pair_selection`` orders the comparisons and ``preference_pairs_per_sample`` keeps the first N:
``reward_gap`` (largest gap first), ``all`` (enumeration order, nothing dropped), ``random`` (a shuffle
by the caller's seeded generator) and, iterative only, ``comparator_reward`` (comparator's processed
score, then gap, both descending; it does not filter on which side won). Sorts are stable.

Pairs keep each agent's sampled prompt and completion ids (token in, token out); a candidate without
ids (a remote comparator, split centralized text) leaves them None, to be tokenized once later.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from numbers import Integral
from typing import Any

import numpy as np

from comlrl.trainers.core.oracle import OracleScores
from comlrl.trainers.preference.records import PreferencePair

PAIR_SELECTIONS = ("reward_gap", "all", "random")
ITERATIVE_PAIR_SELECTIONS = (*PAIR_SELECTIONS, "comparator_reward")


def validate_pair_selection(
    pair_selection: str, pairs_per_sample: int | None, *, iterative: bool = False
) -> str:
    """Check ``pair_selection`` / ``preference_pairs_per_sample``; returns the normalised selection."""
    allowed = ITERATIVE_PAIR_SELECTIONS if iterative else PAIR_SELECTIONS
    if not isinstance(pair_selection, str) or pair_selection.strip().lower() not in allowed:
        extra = "" if iterative else " ('comparator_reward' needs an iterative trainer)"
        raise ValueError(
            f"`pair_selection` must be one of {', '.join(allowed)}{extra}, got {pair_selection!r}"
        )
    selection = pair_selection.strip().lower()
    if pairs_per_sample is not None:
        if isinstance(pairs_per_sample, bool) or not isinstance(pairs_per_sample, Integral):
            raise ValueError(
                f"`preference_pairs_per_sample` must be an integer or None, got {pairs_per_sample!r}"
            )
        if pairs_per_sample < 1:
            raise ValueError(f"`preference_pairs_per_sample` must be >= 1 or None, got {pairs_per_sample}")
        if selection == "all":
            raise ValueError(
                "`preference_pairs_per_sample` must be None when `pair_selection` is 'all', "
                f"got {pairs_per_sample}"
            )
    return selection


# --------------------------------------------------------------------------------------------------
# Selection math (pure)
# --------------------------------------------------------------------------------------------------


def shuffled(items: Sequence[Any], rng: Any) -> list[Any]:
    """``items`` in a random order drawn from ``rng`` (a ``random.Random`` or a numpy Generator)."""
    if isinstance(rng, np.random.Generator):
        return [items[i] for i in rng.permutation(len(items))]
    if isinstance(rng, random.Random):
        out = list(items)
        rng.shuffle(out)
        return out
    raise TypeError(
        "`rng` must be a seeded random.Random or numpy.random.Generator for pair_selection='random', "
        f"got {type(rng).__name__}"
    )


def rank_candidate_pairs(
    rewards: Sequence[float], pair_selection: str, rng: Any = None
) -> list[tuple[int, int]]:
    """Ordered (winner, loser) index pairs among one item's candidates; ties dropped.

    Candidates are enumerated as (i, j) for i, then j, with ``rewards[i] > rewards[j]``.
    """
    found = [(i, j) for i, ri in enumerate(rewards) for j, rj in enumerate(rewards) if ri - rj > 0]
    if pair_selection == "reward_gap":
        return sorted(found, key=lambda ij: -(rewards[ij[0]] - rewards[ij[1]]))
    if pair_selection == "all":
        return found
    if pair_selection == "random":
        return shuffled(found, rng)
    raise ValueError(f"`pair_selection` must be one of {', '.join(PAIR_SELECTIONS)}, got {pair_selection!r}")


def rank_comparisons(
    current_rewards: Sequence[float],
    comparator_rewards: Sequence[float],
    pair_selection: str,
    rng: Any = None,
) -> list[int]:
    """Ordered candidate indices k at which the current and comparator scores differ.

    Only indices present on both sides, ``k < min(len(current), len(comparator))``, are compared.
    """
    shared = min(len(current_rewards), len(comparator_rewards))
    found = [k for k in range(shared) if current_rewards[k] - comparator_rewards[k] != 0]

    def gap(k: int) -> float:
        return abs(current_rewards[k] - comparator_rewards[k])

    if pair_selection == "reward_gap":
        return sorted(found, key=lambda k: -gap(k))
    if pair_selection == "comparator_reward":
        return sorted(found, key=lambda k: (-comparator_rewards[k], -gap(k)))
    if pair_selection == "all":
        return found
    if pair_selection == "random":
        return shuffled(found, rng)
    raise ValueError(
        f"`pair_selection` must be one of {', '.join(ITERATIVE_PAIR_SELECTIONS)}, got {pair_selection!r}"
    )


def keep_first(ranked: Sequence[Any], pairs_per_sample: int | None) -> list[Any]:
    """The first ``pairs_per_sample`` entries (all when None)."""
    return list(ranked) if pairs_per_sample is None else list(ranked[:pairs_per_sample])


# --------------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------------


def build_preference_pairs(
    prompts: Sequence[str],
    candidates: Sequence[Sequence[Any]],
    scores: OracleScores | Sequence[float],
    *,
    pair_selection: str = "reward_gap",
    pairs_per_sample: int | None = None,
    rng: Any = None,
) -> list[PreferencePair]:
    """Pairs among one item's own candidates (base trainers).

    Args:
        prompts: each agent's prompt text.
        candidates: per agent, its K candidates (``Completion`` objects, or anything with ``.text``,
            ``.token_ids`` and ``.prompt_token_ids``; plain strings carry no ids).
        scores: the oracle's scores of the K joint candidates (processed scores decide).
        rng: seeded generator, needed for ``pair_selection="random"``.
    """
    selection = validate_pair_selection(pair_selection, pairs_per_sample)
    _, processed = _split_scores(scores)
    num_candidates = _check_side(prompts, candidates, processed, "candidates")
    if num_candidates == 0:
        return []
    mean = sum(processed) / len(processed)
    pairs = []
    for w, lo in keep_first(rank_candidate_pairs(processed, selection, rng), pairs_per_sample):
        winner = [agent[w] for agent in candidates]
        loser = [agent[lo] for agent in candidates]
        pairs.append(
            PreferencePair(
                prompts=list(prompts),
                winner_completions=[_text(c) for c in winner],
                loser_completions=[_text(c) for c in loser],
                winner_reward=processed[w],
                loser_reward=processed[lo],
                candidate_reward_mean=mean,
                prompt_token_ids=_prompt_ids(winner, loser),
                winner_token_ids=_completion_ids(winner),
                loser_token_ids=_completion_ids(loser),
            )
        )
    return pairs


def build_comparison_pairs(
    prompts: Sequence[str],
    current: Sequence[Sequence[Any]],
    current_scores: OracleScores | Sequence[float],
    comparator: Sequence[Sequence[Any]],
    comparator_scores: OracleScores | Sequence[float],
    *,
    pair_selection: str = "comparator_reward",
    pairs_per_sample: int | None = None,
    rng: Any = None,
    comparator_token_ids: bool = True,
) -> list[PreferencePair]:
    """Pairs of the current agents' candidate k against the comparator's candidate k (iterative).

    ``current`` and ``comparator`` are per agent, per candidate (the two sides may hold different
    counts; only shared indices are compared). The prompt ids come from the current side, the agents'
    own prompts. Set ``comparator_token_ids=False`` when the comparator's ids are not in the agents'
    vocabulary (another tokenizer): its completions are then tokenized from text later.
    """
    selection = validate_pair_selection(pair_selection, pairs_per_sample, iterative=True)
    cur_raw, cur = _split_scores(current_scores)
    cmp_raw, cmp = _split_scores(comparator_scores)
    num_current = _check_side(prompts, current, cur, "current")
    num_comparator = _check_side(prompts, comparator, cmp, "comparator")
    if num_current + num_comparator == 0:
        return []
    mean = (sum(cur) + sum(cmp)) / (num_current + num_comparator)
    pairs = []
    for k in keep_first(rank_comparisons(cur, cmp, selection, rng), pairs_per_sample):
        mine = [agent[k] for agent in current]
        theirs = [agent[k] for agent in comparator]
        theirs_ids = _completion_ids(theirs) if comparator_token_ids else None
        current_wins = cur[k] > cmp[k]
        if current_wins:
            winner, loser, w_ids, l_ids = mine, theirs, _completion_ids(mine), theirs_ids
            w_score, l_score, w_raw, l_raw = cur[k], cmp[k], cur_raw[k], cmp_raw[k]
        else:
            winner, loser, w_ids, l_ids = theirs, mine, theirs_ids, _completion_ids(mine)
            w_score, l_score, w_raw, l_raw = cmp[k], cur[k], cmp_raw[k], cur_raw[k]
        pairs.append(
            PreferencePair(
                prompts=list(prompts),
                winner_completions=[_text(c) for c in winner],
                loser_completions=[_text(c) for c in loser],
                winner_reward=w_score,
                loser_reward=l_score,
                candidate_reward_mean=mean,
                raw_rewards=[w_raw, l_raw],
                target_raw_reward=cur_raw[k],
                comparator_raw_reward=cmp_raw[k],
                prompt_token_ids=_prompt_ids(mine),
                winner_token_ids=w_ids,
                loser_token_ids=l_ids,
            )
        )
    return pairs


def _split_scores(scores: OracleScores | Sequence[float]) -> tuple[list[float], list[float]]:
    if isinstance(scores, OracleScores):
        return list(scores.raw), list(scores.processed)
    values = [float(s) for s in scores]
    return values, values


def _check_side(prompts: Sequence[str], side: Sequence[Sequence[Any]], scores: list[float], name: str) -> int:
    if len(side) != len(prompts):
        raise ValueError(f"`{name}` must hold one candidate list per agent ({len(prompts)}), got {len(side)}")
    counts = {len(agent) for agent in side}
    if len(counts) > 1:
        raise ValueError(f"every agent of `{name}` needs the same number of candidates, got {sorted(counts)}")
    count = counts.pop() if counts else 0
    if len(scores) != count:
        raise ValueError(f"`{name}` has {count} joint candidates but {len(scores)} scores")
    return count


def _text(candidate: Any) -> str:
    return candidate if isinstance(candidate, str) else candidate.text


def _ids(candidate: Any, attr: str) -> list[int] | None:
    # Backends that cannot see ids (remote APIs) return empty lists: unknown, not empty.
    ids = None if isinstance(candidate, str) else getattr(candidate, attr, None)
    return list(ids) if ids is not None and len(ids) > 0 else None


def _completion_ids(side: Sequence[Any]) -> list[list[int] | None] | None:
    ids = [_ids(c, "token_ids") for c in side]
    return None if all(x is None for x in ids) else ids


def _prompt_ids(*sides: Sequence[Any]) -> list[list[int] | None] | None:
    ids: list[list[int] | None] = []
    for agent in range(len(sides[0])):
        known = (_ids(side[agent], "prompt_token_ids") for side in sides)
        ids.append(next((x for x in known if x is not None), None))
    return None if all(x is None for x in ids) else ids
