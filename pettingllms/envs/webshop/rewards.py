"""Rewards of the web shop, as small pure functions (our version of WebShop's reward, Yao et al. 2022, §3.2).

**Purchase reward** (:func:`purchase_reward`) of buying product ``y`` with chosen options ``Y_opt`` for a
goal ``u`` asking for attributes ``U_att``, options ``U_opt`` (one value per option name), a price bound
and a product type::

    r = r_type * (|U_att ∩ Y_att| + |U_opt ∩ Y_opt| + 1[y_price <= u_price]) / (|U_att| + |U_opt| + 1)

- ``|U_att ∩ Y_att|``: the goal's attributes the product has (exact attribute names);
- ``|U_opt ∩ Y_opt|``: the goal's ``(name, value)`` options the buyer chose (an option left unchosen never
  matches);
- ``1[y_price <= u_price]``: 1 when the price is within the bound;
- ``r_type``: 1.0 for the product type asked for, 0.5 for another type of the same category (a t-shirt for
  a shirt), 0.0 for another category. WebShop scales by a text match of the product type and title
  (1, 0.5, 0.1 or 0); ours compares the catalogue's category and type, which the generator knows exactly.

``r`` lies in [0, 1]; the episode succeeds when ``r == 1`` (every attribute and option matched, the price
within the bound, the right type). Hand-computed: a goal of 2 attributes and 2 options met with 1 attribute,
1 option and the price is ``3 / 5 = 0.6``; the same purchase of a same-category type is ``0.3``.

**Global reward** (:func:`global_reward`): the purchase reward once something was bought, else 0.

**Local rewards** per role:

- searcher (:func:`searcher_local_reward`): the *results score* of its query, the best
  :func:`best_item_reward` (the purchase reward of a product bought with its best options) over the first
  results page it brought up; 0 when it found nothing. It says how good a page the buyer starts from.
- buyer (:func:`buyer_local_reward`): the purchase reward when it bought this step, else 0, minus
  ``invalid_action_penalty`` when one of its clicks named nothing clickable.
- single (:func:`single_local_reward`): the purchase reward when it bought this step; else half the results
  score of its last search this step (0 without one); minus the penalty for an invalid action.

A response that does not parse scores ``parse_error_reward`` (-1 by default) and changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "SINGLE_SEARCH_WEIGHT",
    "RewardParts",
    "best_item_reward",
    "buyer_local_reward",
    "global_reward",
    "purchase_for",
    "purchase_reward",
    "searcher_local_reward",
    "single_local_reward",
    "type_reward",
]

#: The share of its results score a single agent earns for a search (it also has to buy).
SINGLE_SEARCH_WEIGHT = 0.5


@dataclass(frozen=True)
class RewardParts:
    """The terms of one purchase reward (see the module docstring)."""

    attributes_matched: int
    attributes_asked: int
    options_matched: int
    options_asked: int
    price_ok: bool
    type_reward: float

    @property
    def reward(self) -> float:
        matched = self.attributes_matched + self.options_matched + int(self.price_ok)
        return self.type_reward * matched / (self.attributes_asked + self.options_asked + 1)

    @property
    def success(self) -> bool:
        return self.reward == 1.0


def type_reward(ptype: str, category: str, goal_ptype: str, goal_category: str) -> float:
    """``r_type``: 1.0 for the goal's product type, 0.5 for another type of its category, else 0.0."""
    if ptype == goal_ptype:
        return 1.0
    return 0.5 if category == goal_category else 0.0


def purchase_reward(
    *,
    attributes: Iterable[str],
    options: Mapping[str, str],
    price: float,
    ptype: str,
    category: str,
    goal_attributes: Iterable[str],
    goal_options: Mapping[str, str],
    price_bound: float,
    goal_ptype: str,
    goal_category: str,
) -> RewardParts:
    """The reward terms of buying a product (its ``attributes``, ``price``, ``ptype``, ``category``) with the
    chosen ``options`` (name -> value) for a goal. Prices must be finite numbers."""
    if not (math.isfinite(price) and math.isfinite(price_bound)):
        raise ValueError(f"prices must be finite, got price={price!r}, price_bound={price_bound!r}")
    have = set(attributes)
    asked = list(dict.fromkeys(goal_attributes))
    return RewardParts(
        attributes_matched=sum(a in have for a in asked),
        attributes_asked=len(asked),
        options_matched=sum(options.get(name) == value for name, value in goal_options.items()),
        options_asked=len(goal_options),
        price_ok=price <= price_bound,
        type_reward=type_reward(ptype, category, goal_ptype, goal_category),
    )


def best_item_reward(product, goal) -> float:
    """The purchase reward of ``product`` (a :class:`~pettingllms.envs.webshop.catalogue.Product`) bought with
    the goal's option values wherever it offers them: the most a buyer can get from it."""
    chosen = {name: value for name, value in goal.options if value in product.option_values(name)}
    return purchase_for(product, chosen, goal).reward


def purchase_for(product, options: Mapping[str, str], goal) -> RewardParts:
    """:func:`purchase_reward` of ``product`` bought with ``options`` for ``goal`` (a
    :class:`~pettingllms.envs.webshop.generator.Goal`)."""
    return purchase_reward(
        attributes=product.attributes,
        options=options,
        price=product.price,
        ptype=product.ptype,
        category=product.category,
        goal_attributes=goal.attributes,
        goal_options=dict(goal.options),
        price_bound=goal.price_bound,
        goal_ptype=goal.ptype,
        goal_category=goal.category,
    )


def global_reward(purchase: RewardParts | None) -> float:
    """The task reward: the purchase reward once something was bought, else 0.0."""
    return 0.0 if purchase is None else purchase.reward


def _penalty(invalid: bool, penalty: float) -> float:
    if not isinstance(invalid, bool):
        raise ValueError(f"`invalid` must be a bool, got {invalid!r}")
    if not (math.isfinite(penalty) and penalty >= 0):
        raise ValueError(f"`penalty` must be a finite number >= 0, got {penalty!r}")
    return penalty if invalid else 0.0


def _unit(value: float | None, name: str) -> float:
    if value is None:
        return 0.0
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"`{name}` must be in [0, 1] or None, got {value!r}")
    return float(value)


def searcher_local_reward(results_score: float | None, invalid: bool = False, penalty: float = 0.0) -> float:
    """The searcher's local reward: its query's results score (None: no search ran: 0), minus the penalty when
    its search could not be submitted."""
    return _unit(results_score, "results_score") - _penalty(invalid, penalty)


def buyer_local_reward(bought: float | None, invalid: bool, penalty: float) -> float:
    """The buyer's local reward: the purchase reward when it bought this step (``bought``; None: it did not),
    minus ``penalty`` for an invalid click."""
    return _unit(bought, "bought") - _penalty(invalid, penalty)


def single_local_reward(bought: float | None, results_score: float | None, invalid: bool, penalty: float) -> float:
    """The single agent's local reward: the purchase reward when it bought this step, else
    :data:`SINGLE_SEARCH_WEIGHT` times the results score of its last search this step; minus the penalty."""
    earned = _unit(bought, "bought") if bought is not None else SINGLE_SEARCH_WEIGHT * _unit(results_score, "results_score")
    return earned - _penalty(invalid, penalty)
