"""Rewards of the search workflow, as small pure functions over what the environment observed.

A step's training reward is ``alpha * global + local`` (:func:`pettingllms.envs.base.mix_reward`).

* **Global** (:func:`global_reward`): 1.0 when the episode's answer is an exact match (SQuAD normalisation,
  any golden answer), else 0.0. It is also the success of the episode. The episode ends at the first answer,
  so a search step's global part is 0 and an answer step's is its own exact match.
* **Search outcome** (:func:`search_outcome`), one of :data:`SEARCH_OUTCOMES`, in this order of precedence:
  ``unparseable`` (no ``<search>`` query), ``answer_found`` (a retrieved passage holds a golden answer as whole
  normalised tokens), ``new_evidence`` (no answer, but a supporting passage, by title, that no earlier search
  of the episode retrieved: the bridge passage of a multi-hop question; only where the problem lists its
  supporting titles), ``nothing_new`` (anything else, an empty result included).
* **Search agent local** (:func:`search_local_reward`): ``+1`` answer_found, ``+0.5`` new_evidence,
  ``0`` nothing_new, ``-1`` unparseable.
* **Reasoner local** (:func:`reasoner_local_reward`): the token F1 of its answer (``[0, 1]``; an exact match is
  1); ``0`` for a request of another search while turns are left, ``-0.5`` for one on the last turn (nothing
  can follow it: the episode ends unanswered), ``-1`` when nothing parses.

Contradictory inputs (an answer found by a query that did not parse) raise ValueError: they are bugs in the
caller, not outcomes.
"""

from __future__ import annotations

import math

__all__ = [
    "LATE_REQUEST_REWARD",
    "NO_ANSWER_REWARD",
    "REQUEST_REWARD",
    "SEARCH_OUTCOMES",
    "SEARCH_REWARDS",
    "global_reward",
    "reasoner_local_reward",
    "search_local_reward",
    "search_outcome",
]

#: Every search outcome, best first.
SEARCH_OUTCOMES: tuple[str, ...] = ("answer_found", "new_evidence", "nothing_new", "unparseable")
#: The search agent's local reward per outcome.
SEARCH_REWARDS: dict[str, float] = {"answer_found": 1.0, "new_evidence": 0.5, "nothing_new": 0.0, "unparseable": -1.0}
#: The reasoner's local reward for a request of another search (turns left / on the last turn), and for nothing.
REQUEST_REWARD = 0.0
LATE_REQUEST_REWARD = -0.5
NO_ANSWER_REWARD = -1.0


def _bool(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be a bool, got {value!r}")
    return value


def search_outcome(*, parsed: bool, answer_found: bool, new_evidence: bool) -> str:
    """The search agent's outcome this turn (see the module docstring)."""
    parsed, answer_found = _bool(parsed, "parsed"), _bool(answer_found, "answer_found")
    new_evidence = _bool(new_evidence, "new_evidence")
    if not parsed:
        if answer_found or new_evidence:
            raise ValueError(f"an unparsed query retrieved nothing (answer_found={answer_found}, new_evidence={new_evidence})")
        return "unparseable"
    if answer_found:
        return "answer_found"
    return "new_evidence" if new_evidence else "nothing_new"


def search_local_reward(outcome: str) -> float:
    """The search agent's local reward for ``outcome`` (one of :data:`SEARCH_OUTCOMES`)."""
    try:
        return SEARCH_REWARDS[outcome]
    except (KeyError, TypeError):
        raise ValueError(f"unknown search outcome {outcome!r}; expected one of {SEARCH_OUTCOMES}") from None


def reasoner_local_reward(kind: str | None, f1: float = 0.0, last_turn: bool = False) -> float:
    """The reasoner's local reward: ``kind`` ``"answer"`` scores its token F1, ``"search"`` (a request) 0, or
    -0.5 on the last turn, ``None`` (nothing parsed) -1."""
    if kind is None:
        return NO_ANSWER_REWARD
    if kind == "search":
        return LATE_REQUEST_REWARD if _bool(last_turn, "last_turn") else REQUEST_REWARD
    if kind != "answer":
        raise ValueError(f"`kind` must be 'answer', 'search' or None, got {kind!r}")
    if isinstance(f1, bool) or not isinstance(f1, (int, float)) or not math.isfinite(f1) or not 0.0 <= f1 <= 1.0:
        raise ValueError(f"`f1` must be a number in [0, 1], got {f1!r}")
    return float(f1)


def global_reward(exact_match: bool) -> float:
    """Task reward: 1.0 when the episode's answer is an exact match, else 0.0."""
    return 1.0 if _bool(exact_match, "exact_match") else 0.0
