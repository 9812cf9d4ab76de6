"""Scripted policies of the search environment: play it without a model (``pettingllms eval --policy oracle``,
``--policy scripted:wrong``, the ``sft`` stage's demonstrations).

* :class:`SearchOraclePolicy`: the search agent looks up the next supporting passage not found yet (by its title,
  in hop order), and once every one is found and a passage holds a golden answer (or where the data lists no
  supporting passages) the question with a golden answer; the reasoner asks for that same search until the
  evidence is complete, then answers the first golden answer (on the last turn it answers whatever it has); the
  single agent searches while a turn is left to answer in, then answers.
* :class:`WrongSearchPolicy`: searches the question itself and answers wrongly (:func:`wrong_answer`) at once.
* :class:`RandomSearchPolicy`: each response is the oracle's or the wrong policy's, drawn from its own generator.

All answer with text through the agents' formatters, so parsing, retrieval and rewards run as they do for a model.
"""

from __future__ import annotations

import random
from typing import Any

from pettingllms.envs.search.answers import (
    answer_in_text,
    exact_match,
    format_answer,
    format_query,
    normalize_answer,
)

__all__ = ["RandomSearchPolicy", "SearchOraclePolicy", "WrongSearchPolicy", "evidence_complete", "oracle_query",
           "wrong_answer"]


def _missing_titles(state: Any) -> list[str]:
    found = {normalize_answer(p.title) for p in state.passages}
    return [t for t in state.problem.supporting_titles if normalize_answer(t) not in found]


def evidence_complete(state: Any) -> bool:
    """Every supporting passage was retrieved and a retrieved passage holds a golden answer."""
    golden = state.problem.answers
    return not _missing_titles(state) and any(answer_in_text(golden, f"{p.title} {p.text}") for p in state.passages)


def oracle_query(state: Any) -> str:
    """The oracle's next query: the title of the next supporting passage not found yet, else the question with
    its first golden answer (which finds the passage holding it)."""
    missing = _missing_titles(state)
    return missing[0] if missing else f"{state.problem.question} {state.problem.answers[0]}"


def wrong_answer(state: Any) -> str:
    """An answer that is no exact match: the title of a retrieved passage that is not a golden answer, else
    ``unknown`` (``nothing`` where ``unknown`` would be right)."""
    golden = state.problem.answers
    for passage in state.passages:
        if passage.title and not exact_match(passage.title, golden):
            return passage.title
    return "nothing" if exact_match("unknown", golden) else "unknown"


class SearchOraclePolicy:
    """The right searches, then a golden answer (see the module docstring)."""

    def respond(self, agent: Any, env: Any) -> str:
        state = env.state
        last_turn = state.turn >= env.config.max_turns - 1
        # The reasoner's request of another search and the single agent's search are the search agent's query.
        if agent.role == "web_search_agent" or not (evidence_complete(state) or last_turn):
            return format_query(oracle_query(state))
        return format_answer(state.problem.answers[0])


class WrongSearchPolicy:
    """Searches the question, answers wrongly at once."""

    def respond(self, agent: Any, env: Any) -> str:
        state = env.state
        if agent.role == "web_search_agent":
            return format_query(state.problem.question)
        return format_answer(wrong_answer(state))


class RandomSearchPolicy:
    """Each response is the oracle's or the wrong policy's, the oracle's with probability ``oracle_prob``, drawn
    from a generator this policy owns (seeded by ``seed``)."""

    def __init__(self, seed: int = 0, oracle_prob: float = 0.5) -> None:
        if not 0.0 <= oracle_prob <= 1.0:
            raise ValueError(f"`oracle_prob` must be in [0, 1], got {oracle_prob}")
        self.rng = random.Random(seed)
        self.oracle_prob = oracle_prob
        self._oracle, self._wrong = SearchOraclePolicy(), WrongSearchPolicy()

    def respond(self, agent: Any, env: Any) -> str:
        policy = self._oracle if self.rng.random() < self.oracle_prob else self._wrong
        return policy.respond(agent, env)
