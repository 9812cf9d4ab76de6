"""Well-formed random actions in the web shop (the random scripted policy and ``WebShopEnv.random_answer``), and
the two action builders the scripted policies share. It imports no environment module, so the environment can
call it without an import cycle."""

from __future__ import annotations

import random
from typing import Any

from pettingllms.envs.webshop.catalogue import PRODUCT_TYPES, STOPWORDS
from pettingllms.envs.webshop.parsers import MAX_ARGUMENT_CHARS, Action

__all__ = ["click", "fits", "random_actions"]

SEARCHER_ROLE, BUYER_ROLE = "searcher", "buyer"  # the environment's role names (pettingllms.envs.webshop.env)


def click(label: str) -> Action:
    return Action("click", label)


def fits(text: str) -> str:
    """``text`` cut at a word boundary to the longest argument the parser takes."""
    if len(text) <= MAX_ARGUMENT_CHARS:
        return text
    return text[:MAX_ARGUMENT_CHARS].rsplit(" ", 1)[0]


def random_actions(state: Any, role: str, max_actions: int, rng: random.Random) -> tuple[Action, ...]:
    """Well-formed random actions for ``role`` in ``state`` (a ``WebShopState``), at most ``max_actions``
    clicks, drawn from ``rng``: random words of the instruction and product types as a query, random
    clickable labels as clicks."""
    page = state.page
    clickables = list(page.clickables) if page is not None else []
    if page is not None and page.kind == "item" and rng.random() < 0.5:
        clickables.append("buy now")
    words = [w for w in state.goal.text.split() if w.isalnum() and w not in STOPWORDS] + [t.name for t in PRODUCT_TYPES]
    query = Action("search", fits(" ".join(rng.sample(words, rng.randint(1, min(4, len(words)))))))
    searchable = page is not None and page.form is not None
    if role == SEARCHER_ROLE or (role != BUYER_ROLE and searchable and (not clickables or rng.random() < 0.4)):
        return (query,)
    if not clickables:
        return (click("back to search"),)
    count = rng.randint(1, min(3, max_actions))
    return tuple(click(rng.choice(clickables)) for _ in range(count))
