"""Scripted policies of the web shop, played through the agents' formatters (``pettingllms eval --policy ...``,
the ``sft`` stage's demonstrations).

* :class:`WebShopOraclePolicy`: the searcher (and the single agent) searches well: of a few queries built
  from the goal (its attributes and type; with its option values; the target product's title; with its
  option values) the first whose first results page lists a product that satisfies the goal, else the one
  that lists one earliest. The buyer (and the single agent after its search) goes to the nearest listed
  product that satisfies the goal (``next >`` / ``< prev`` as needed), chooses the goal's options and
  buys: reward 1.0 on every instance (tested). It knows the catalogue and the site's ranking, as WebShop's
  human demonstrations know the shop.
* :class:`WrongWebShopPolicy`: searches for a product of another category and buys the first result with no
  option chosen (reward below 1 on every instance: every goal asks for at least one option).
* :class:`RandomWebShopPolicy`: well-formed random actions (:mod:`~pettingllms.envs.webshop.random_play`): random words from the
  instruction and the shop's product types as queries, random clickable labels as clicks.
"""

from __future__ import annotations

import random
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from pettingllms.envs.webshop.catalogue import PRODUCT_TYPES, RESULTS_PER_PAGE, Product
from pettingllms.envs.webshop.env import BUYER_ROLE, SEARCHER_ROLE, WebShopEnv
from pettingllms.envs.webshop.parsers import Action, format_actions
from pettingllms.envs.webshop.random_play import click as _click
from pettingllms.envs.webshop.random_play import fits as _fits
from pettingllms.envs.webshop.random_play import random_actions
from pettingllms.envs.webshop.rewards import best_item_reward
from pettingllms.envs.webshop.site import OPTION_PREFIX

__all__ = [
    "RandomWebShopPolicy",
    "WebShopOraclePolicy",
    "WrongWebShopPolicy",
    "oracle_actions",
    "oracle_query",
    "wrong_actions",
]


def _perfect(env: WebShopEnv, product: Product | None) -> bool:
    return product is not None and best_item_reward(product, env.state.goal) == 1.0


def _perfect_ranks(env: WebShopEnv, query: str) -> list[int]:
    return [i for i, pid in enumerate(env.search_results(query)) if _perfect(env, env.product(pid))]


def oracle_query(env: WebShopEnv) -> str:
    """The query the oracle searches with (see the module docstring)."""
    goal = env.state.goal
    target = env.product(goal.target)
    values = " ".join(value for _, value in goal.options)
    plain = " ".join([*goal.attributes, goal.ptype])
    title = target.title.lower() if target is not None else plain
    candidates = [_fits(q) for q in (plain, f"{plain} {values}", title, f"{title} {values}")]
    best, best_rank = candidates[0], None
    for query in candidates:
        ranks = _perfect_ranks(env, query)
        if ranks and ranks[0] < RESULTS_PER_PAGE:
            return query
        if ranks and (best_rank is None or ranks[0] < best_rank):
            best, best_rank = query, ranks[0]
    return best


def _params(url: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


def _buy(env: WebShopEnv, product: Product, chosen: dict[str, str]) -> list[Action]:
    clicks = [_click(value) for name, value in env.state.goal.options
              if chosen.get(name) != value and value in product.option_values(name)]
    return [*clicks, _click("buy now")]


def _from_results(env: WebShopEnv, query: str, page: int) -> list[Action] | None:
    """From page ``page`` of ``query``'s results: to the nearest product that satisfies the goal and buy it."""
    ranks = _perfect_ranks(env, query)
    if not ranks:
        return None
    rank = min(ranks, key=lambda r: (abs(r // RESULTS_PER_PAGE + 1 - page), r))
    target_page = rank // RESULTS_PER_PAGE + 1
    moves = [_click("next >")] * (target_page - page) + [_click("< prev")] * (page - target_page)
    pid = env.search_results(query)[rank]
    return [*moves, _click(pid.lower()), *_buy(env, env.product(pid), {})]  # type: ignore[arg-type]


def _from_here(env: WebShopEnv) -> list[Action] | None:
    """The buyer's way from the current page to a purchase that satisfies the goal (None: none from here)."""
    page = env.state.page
    if page is None:
        return None
    query, number = env.current_query()
    if page.kind == "item":
        params = _params(page.url)
        product = env.product(page.meta_value("webshop-pid") or "")
        if _perfect(env, product):
            chosen = {k[len(OPTION_PREFIX):]: v for k, v in params.items() if k.startswith(OPTION_PREFIX)}
            return _buy(env, product, chosen)  # type: ignore[arg-type]
        rest = _from_results(env, query, number) if query is not None else None
        return None if rest is None else [_click("< prev"), *rest]
    if page.kind == "results" and query is not None:
        return _from_results(env, query, number)
    return None


def oracle_actions(env: WebShopEnv, role: str) -> list[Action]:
    """The oracle's actions for ``role`` in the current state, at most the role's action budget."""
    if role == SEARCHER_ROLE:
        return [Action("search", oracle_query(env))]
    plan = _from_here(env)
    if role == BUYER_ROLE:
        plan = plan or [_click("back to search")]  # nothing to buy from here: a harmless (invalid) click
    elif plan is None:
        query = oracle_query(env)
        plan = [Action("search", query), *(_from_results(env, query, 1) or [])]
    return plan[: env.config.max_actions]


def wrong_actions(env: WebShopEnv, role: str) -> list[Action]:
    """The wrong policy's actions: another category's product type as the query, the first result bought
    with no option chosen."""
    goal = env.state.goal
    other = next(t.name for t in PRODUCT_TYPES if t.category != goal.category)
    page = env.state.page
    buy: list[Action] = []
    if page is not None and page.kind == "item":
        buy = [_click("buy now")]
    elif page is not None and page.items:
        buy = [_click(page.items[0]), _click("buy now")]
    if role == SEARCHER_ROLE:
        return [Action("search", other)]
    if role == BUYER_ROLE:
        return buy or [_click("back to search")]
    if page is not None and page.kind == "search":
        return [Action("search", other), _click("buy now")]  # the click is invalid: no item chosen yet
    return (buy or [Action("search", other)])[: env.config.max_actions]


class WebShopOraclePolicy:
    """Searches well and buys a product that satisfies the goal with its options (see the module docstring)."""

    def respond(self, agent: Any, env: Any) -> str:
        return format_actions(oracle_actions(env, agent.kind))


class WrongWebShopPolicy:
    """Searches for the wrong thing and buys it with no options (see the module docstring)."""

    def respond(self, agent: Any, env: Any) -> str:
        return format_actions(wrong_actions(env, agent.kind))


class RandomWebShopPolicy:
    """Random well-formed actions (:func:`~pettingllms.envs.webshop.random_play.random_actions`) from a generator this policy owns (seeded by ``seed``)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def respond(self, agent: Any, env: Any) -> str:
        return format_actions(random_actions(env.state, agent.kind, env.config.max_actions, self.rng))
