"""Prompt text of the search agents, built from the shared state (short: small models read it).

Each agent is asked for exactly what its parser reads: the search agent for one ``<search>query</search>``, the
reasoner for ``<answer>...</answer>`` or ``<search>what to look up</search>``, the single agent for either. The
instruction comes first and the state last: the question, the reasoner's latest request (for the search agent),
the queries so far, and the passages retrieved so far (each once, oldest first, the latest
``max_passages_shown``, each cut to ``max_passage_chars``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pettingllms.envs.search.corpus import Passage

__all__ = ["passage_lines", "queries_lines", "question_lines", "reasoner_system", "search_system", "single_system"]


def search_system() -> str:
    return ("You are the search agent in a team: you write a search query, the environment retrieves passages, and "
            "a reasoner reads them and answers the question.\nAnswer with one <search>query</search>.")


def reasoner_system() -> str:
    return ("You are the reasoner in a team: a search agent retrieves passages for you. Read them and give a short "
            "final answer as <answer>answer</answer>, or ask for another search with <search>what to look up</search>.")


def single_system() -> str:
    return ("You answer questions with a search engine. Write <search>query</search> to search (the passages are "
            "shown next turn), or give a short final answer as <answer>answer</answer>.")


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: max(limit - 3, 0)].rstrip() + "..."


def question_lines(question: str, turn_idx: int, max_turns: int) -> list[str]:
    return [f"Turn {turn_idx + 1} of {max_turns}.", f"Question: {question.strip()}"]


def queries_lines(queries: Sequence[str], owner: str) -> list[str]:
    """The queries so far (``owner``: "Your", "The search agent's")."""
    if not queries:
        return [f"{owner} searches: none yet."]
    return [f"{owner} searches: " + "; ".join(f'"{_clip(q, 80)}"' for q in queries)]


def passage_lines(passages: Sequence[Passage], max_shown: int, max_chars: int) -> list[str]:
    """The passages retrieved so far, numbered, the latest ``max_shown`` of them."""
    if not passages:
        return ["Passages: none yet."]
    shown = list(passages)[-max_shown:]
    first = len(passages) - len(shown) + 1
    lines = ["Passages:"]
    for number, passage in enumerate(shown, first):
        title = f"{passage.title}: " if passage.title else ""
        lines.append(f"[{number}] {_clip(title + passage.text, max_chars)}")
    return lines
