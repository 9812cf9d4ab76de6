"""The web shop environment: a searcher and a buyer shop on a real (loopback) web site for an instruction.

Episode. The seed picks the instruction (:func:`~pettingllms.envs.webshop.generator.make_goal`); ``reset``
fetches the site's search page. Each turn the agents of ``turn_order`` act in order, WebShop's actions
played on the live site, each a real HTTP request whose HTML page becomes the state's current page:

- ``searcher``: one ``search[query]`` (it submits the page's search form: the first results page);
- ``buyer``: 1 to ``max_actions`` ``click[label]`` lines, played in order (an item, ``next >``, option
  values, ``buy now``);
- ``single`` (L0): 1 to ``max_actions`` lines of either.

A click that names nothing clickable on the current page, or a search where the page has no search box, is
*invalid*: it and the rest of the response are not played (penalty ``invalid_action_penalty``). Clicking
``buy now`` ends the episode; the purchase reward (:mod:`pettingllms.envs.webshop.rewards`) is the global
reward and success means it is 1. The turn budget also ends the episode.

Shared state (:class:`WebShopState`): the goal (hidden from the agents but for its text, which every page
shows), the current page (URL, text, links, search form), every action played, the last query and its
results score, the purchase and its reward terms.

Server and copies. The environment holds no session on the server: the session is the state's URL. It
fetches through a lease on the process's server (:mod:`pettingllms.envs.webshop.server`), taken on the first
fetch and released by :meth:`WebShopEnv.close` (or when the environment is garbage-collected). Copies
(``snapshot`` / ``restore`` / ``clone``) copy the state and never the lease: a clone takes its own where it
next fetches, so tree sampling's copies step independently on the same stateless site.
"""

from __future__ import annotations

import copy
import http.client
import math
import random
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit

from pettingllms.agents.failures import InfrastructureError
from pettingllms.envs.base import BaseEnv, EnvConfig, EnvState
from pettingllms.envs.webshop import rewards, server
from pettingllms.envs.webshop.catalogue import Catalogue, Product, get_catalogue, search
from pettingllms.envs.webshop.generator import Goal, goal_for
from pettingllms.envs.webshop.page import Page, parse_page
from pettingllms.envs.webshop.parsers import Action
from pettingllms.envs.webshop.random_play import BUYER_ROLE as _BUYER
from pettingllms.envs.webshop.random_play import SEARCHER_ROLE as _SEARCHER
from pettingllms.envs.webshop.random_play import random_actions
from pettingllms.envs.webshop.rewards import RewardParts
from pettingllms.envs.webshop.site import OPTION_PREFIX, search_url

__all__ = [
    "BUYER_ROLE",
    "SEARCHER_ROLE",
    "SINGLE_ROLE",
    "PlayOutcome",
    "Purchase",
    "WebShopConfig",
    "WebShopEnv",
    "WebShopState",
]

SEARCHER_ROLE, BUYER_ROLE, SINGLE_ROLE = _SEARCHER, _BUYER, "single"
#: The verbs each role may use.
ROLE_VERBS: dict[str, tuple[str, ...]] = {SEARCHER_ROLE: ("search",), BUYER_ROLE: ("click",),
                                         SINGLE_ROLE: ("search", "click")}


@dataclass(frozen=True)
class WebShopConfig(EnvConfig):
    """Web shop settings (see :class:`~pettingllms.envs.base.EnvConfig` for the shared ones).

    > The shop

    - ``catalogue_seed``: the seed of the generated catalogue.
    - ``num_products``: products in the catalogue.

    > Actions

    - ``max_actions``: the most action lines of one buyer or single response (a searcher writes one).
    - ``fetch_timeout_s``: seconds one HTTP request may take (past it: an infrastructure failure).

    > Rewards

    - ``parse_error_reward``: local reward of a response that does not parse.
    - ``invalid_action_penalty``: subtracted from the local reward of a step with an invalid action.
    """

    turn_order: tuple[str, ...] = (SEARCHER_ROLE, BUYER_ROLE)
    max_turns: int = 3
    catalogue_seed: int = 0
    num_products: int = 300
    max_actions: int = 8
    fetch_timeout_s: float = 10.0
    parse_error_reward: float = -1.0
    invalid_action_penalty: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, low, high in (("catalogue_seed", 0, 10**12), ("num_products", 20, 10_000), ("max_actions", 1, 32)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"`{name}` must be an integer in [{low}, {high}], got {value!r}")
        for name in ("fetch_timeout_s", "parse_error_reward", "invalid_action_penalty"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"`{name}` must be a finite number, got {value!r}")
        if self.fetch_timeout_s <= 0:
            raise ValueError(f"`fetch_timeout_s` must be > 0 seconds, got {self.fetch_timeout_s!r}")
        if self.invalid_action_penalty < 0:
            raise ValueError(f"`invalid_action_penalty` must be >= 0, got {self.invalid_action_penalty!r}")


@dataclass(frozen=True)
class Purchase:
    """What was bought: the product id and the chosen options ``((name, value), ...)``."""

    pid: str
    options: tuple[tuple[str, str], ...]


@dataclass(kw_only=True)
class WebShopState(EnvState):
    """The blackboard of one shopping episode.

    - ``goal``: the instruction's goal (agents see its text only, on the pages).
    - ``page``: the current page (None before ``reset`` fetched the search page).
    - ``actions``: every action played on the site, oldest first (``search[...]`` / ``click[...]``).
    - ``last_query``: the latest search's query; ``results_score``: its first page's score (the best
      purchase reward a product on it can give, :func:`~pettingllms.envs.webshop.rewards.best_item_reward`).
    - ``purchase`` / ``reward``: what was bought and its reward terms (None before buying).
    - ``invalid_actions``: actions that named nothing on their page.
    - ``last_report``: what the latest step did, one line.
    """

    goal: Goal
    page: Page | None = None
    actions: list[str] = field(default_factory=list)
    last_query: str | None = None
    results_score: float | None = None
    purchase: Purchase | None = None
    reward: RewardParts | None = None
    invalid_actions: int = 0
    last_report: str = ""


@dataclass
class PlayOutcome:
    """What playing one response did: actions played, the invalid one (None: none), the results score of its
    last search (None: it did not search), and the purchase reward when it bought."""

    played: int = 0
    invalid: str | None = None
    results_score: float | None = None
    bought: float | None = None


class WebShopEnv(BaseEnv[WebShopState]):
    """The web shop (see the module docstring)."""

    name: ClassVar[str] = "webshop"
    config_class: ClassVar[type[EnvConfig]] = WebShopConfig
    roles: ClassVar[tuple[str, ...]] = (SEARCHER_ROLE, BUYER_ROLE, SINGLE_ROLE)
    scripted_policies = {
        "oracle": "pettingllms.envs.webshop.scripted:WebShopOraclePolicy",
        "random": "pettingllms.envs.webshop.scripted:RandomWebShopPolicy",
        "wrong": "pettingllms.envs.webshop.scripted:WrongWebShopPolicy",
    }
    config: WebShopConfig

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._lease: server.Lease | None = None

    # ---- copies and pickling: never the lease -------------------------------------------------------
    def __deepcopy__(self, memo: dict) -> WebShopEnv:
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            new.__dict__[key] = None if key == "_lease" else copy.deepcopy(value, memo)
        return new

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_lease": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    # ---- the shop -----------------------------------------------------------------------------------
    @property
    def catalogue(self) -> Catalogue:
        return get_catalogue(self.config.catalogue_seed, self.config.num_products)

    def goal(self, seed: int) -> Goal:
        return goal_for(self.config.catalogue_seed, self.config.num_products, seed)

    def product(self, label: str) -> Product | None:
        return self.catalogue.product(label)

    def initial_state(self, seed: int) -> WebShopState:
        return WebShopState(seed=seed, goal=self.goal(seed))

    async def reset(self, seed: int) -> WebShopState:
        state = await super().reset(seed)
        state.page = self.fetch(search_url(self.catalogue, seed))
        return state

    async def close(self) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()

    @property
    def server_port(self) -> int | None:
        """The port this environment's lease holds (None before its first fetch or after ``close``)."""
        return None if self._lease is None else self._lease.port

    def fetch(self, target: str) -> Page:
        """GET ``target`` (path and query) from the process's server and parse the page; an
        :class:`~pettingllms.agents.failures.InfrastructureError` when the request fails or is refused."""
        lease = self._lease
        if lease is None or not lease.alive or not lease.server.running:
            if lease is not None:
                lease.release()
            lease = self._lease = server.lease()
        try:
            status, html = server.fetch(lease.port, target, self.config.fetch_timeout_s)
        except (OSError, http.client.HTTPException) as exc:
            raise InfrastructureError(f"webshop: GET {target[:80]} failed: {exc!r}") from exc
        if status != 200:
            raise InfrastructureError(f"webshop: GET {target[:80]} answered {status}: {parse_page(html, target).lines}")
        return parse_page(html, target)

    # ---- playing actions ----------------------------------------------------------------------------
    def results_score(self, page: Page) -> float:
        """The best purchase reward a product listed on ``page`` can give (0 for none)."""
        goal = self.state.goal
        scores = [rewards.best_item_reward(p, goal) for p in map(self.product, page.items) if p is not None]
        return max(scores, default=0.0)

    def _target(self, action: Action) -> str | None:
        page = self.state.page
        if page is None or page.kind == "done":
            return None
        if action.verb == "search":
            return None if page.form is None else page.form.submit_url(action.argument)
        link = page.link(action.argument)
        return None if link is None else link.href

    def play(self, actions: tuple[Action, ...]) -> PlayOutcome:
        """Play ``actions`` in order on the site (stopping at an invalid one or the purchase) and record them;
        ``state.last_report`` says what happened in one line."""
        state = self.state
        outcome = PlayOutcome()
        played: list[str] = []
        end = ""
        for action in actions:
            if state.purchase is not None:
                break
            target = self._target(action)
            if target is None:
                outcome.invalid = str(action)
                state.invalid_actions += 1
                where = state.page.kind if state.page is not None else "no"
                end = f"{action} is not possible on the {where} page (the rest was not played)"
                break
            page = self.fetch(target)
            state.page = page
            state.actions.append(str(action))
            played.append(str(action))
            outcome.played += 1
            if action.verb == "search":
                state.last_query = action.argument
                state.results_score = outcome.results_score = self.results_score(page)
            elif page.kind == "done":
                self._record_purchase(page)
                outcome.bought = state.reward.reward  # type: ignore[union-attr]
        report = " ".join(played)
        if state.purchase is not None and outcome.bought is not None:
            report += f" -> bought {state.purchase.pid.lower()} (reward {outcome.bought:.2f})"
        elif played and state.page is not None:
            page = state.page
            report += f" -> {page.kind} page" + (f", {len(page.items)} results shown" if page.kind == "results" else "")
        state.last_report = "; ".join(part for part in (report, end) if part) or "nothing played"
        return outcome

    def _record_purchase(self, page: Page) -> None:
        state = self.state
        pairs = parse_qsl(page.meta_value("webshop-purchase") or "", keep_blank_values=True)
        values = dict(pairs)
        product = self.product(values.get("pid", ""))
        if product is None:
            raise InfrastructureError(f"webshop: the done page names no known product ({page.url[:80]})")
        options = tuple((k[len(OPTION_PREFIX):], v) for k, v in pairs if k.startswith(OPTION_PREFIX))
        state.purchase = Purchase(product.pid, options)
        state.reward = rewards.purchase_for(product, dict(options), state.goal)

    # ---- status and rewards -------------------------------------------------------------------------
    def task_reward_of(self, state: WebShopState) -> float:
        return rewards.global_reward(state.reward)

    def is_success(self, state: WebShopState) -> bool:
        return state.reward is not None and state.reward.success

    def is_failed(self, state: WebShopState) -> bool:
        return state.purchase is not None and not self.is_success(state)

    # ---- for scripted policies ----------------------------------------------------------------------
    def current_query(self) -> tuple[str | None, int]:
        """The search terms and results page the current page belongs to (from its URL)."""
        page = self.state.page
        if page is None:
            return None, 1
        params = dict(parse_qsl(urlsplit(page.url).query, keep_blank_values=True))
        page_number = params.get("page", "1")
        return params.get("q"), int(page_number) if page_number.isascii() and page_number.isdigit() else 1

    def search_results(self, query: str) -> tuple[str, ...]:
        """The product ids ``query`` finds on the site, best first (the server's own ranking)."""
        return search(self.catalogue, query)

    def random_answer(self, state: WebShopState, rng: random.Random) -> tuple[Action, ...]:
        """Well-formed random actions for the role due in ``state`` (random words, random clicks)."""
        return random_actions(state, self.config.turn_order[state.position], self.config.max_actions, rng)
