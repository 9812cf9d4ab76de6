"""Shopping instructions: one goal per episode seed, drawn from the catalogue, with held-out goals for evaluation.

A goal (:class:`Goal`) is what WebShop's instructions ask for: a product type (and so its category), a few
attributes, one value for every option of the type, and a price bound. :func:`make_goal` draws it from a
target product of the catalogue, so at least one product satisfies it:

1. a target product, uniformly;
2. the attributes asked for: 1 or 2 of its attributes, uniformly;
3. for each of its options one of the values it is offered in;
4. the price bound: the target's price times a factor in [1.1, 1.6], rounded up to whole dollars;
5. the text, WebShop style: ``i am looking for a cotton shirt with long sleeve, in size m, in red color,
   and price lower than 31.00 dollars``.

Held-out goals. The *request* of a goal (type, attributes, options; the price aside) falls in the held-out
pool when a hash of it, taken with the catalogue seed, is 0 mod 5 (a fifth of all requests). Seeds from
:data:`HELD_OUT_SEED_START` (the default ``eval.seed_start``) on draw their goals from the held-out pool
only and every lower seed from the rest (redrawing steps 1 to 3 until the pool matches), so no instruction a
training seed asks for is ever asked by a held-out seed, on top of the seed ranges being disjoint.
"""

from __future__ import annotations

import functools
import hashlib
import math
import random
from dataclasses import dataclass

from pettingllms.envs.webshop.catalogue import Catalogue, Product, get_catalogue

__all__ = ["HELD_OUT_SEED_START", "OPTION_PHRASES", "Goal", "goal_for", "is_held_out_request", "make_goal"]

#: Seeds from here on ask for held-out requests only (see the module docstring).
HELD_OUT_SEED_START = 1_000_000
_HELD_OUT_MOD = 5
_MAX_DRAWS = 10_000

#: How the instruction says each option, by option name.
OPTION_PHRASES: dict[str, str] = {
    "color": "in {} color",
    "size": "in size {}",
    "pack": "in a {}",
    "flavor": "with {} flavor",
    "scent": "with {} scent",
    "model": "for {}",
    "wattage": "rated {}",
}
_LEADS = ("i am looking for", "i need", "i want", "find me", "i would like")


@dataclass(frozen=True)
class Goal:
    """One episode's shopping goal.

    - ``seed``: the episode seed (the site's instruction id ``iid``).
    - ``text``: the instruction the agents read.
    - ``category`` / ``ptype``: the product type asked for.
    - ``attributes``: the attributes asked for.
    - ``options``: ``((name, value), ...)``, one value for every option of the type.
    - ``price_bound``: the most the product may cost.
    - ``target``: the id of the product the goal was drawn from (one that satisfies it; others may too).
    - ``held_out``: whether the request lies in the held-out pool.
    """

    seed: int
    text: str
    category: str
    ptype: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, str], ...]
    price_bound: float
    target: str
    held_out: bool

    @property
    def request(self) -> tuple:
        """What the instruction asks for, the price aside: the held-out pools are drawn over it."""
        return (self.ptype, tuple(sorted(self.attributes)), tuple(sorted(self.options)))

    def option(self, name: str) -> str | None:
        return dict(self.options).get(name)


def is_held_out_request(catalogue_seed: int, request: tuple) -> bool:
    """Whether ``request`` (a :attr:`Goal.request`) lies in the held-out pool of catalogue ``catalogue_seed``."""
    digest = hashlib.blake2b(f"{catalogue_seed}|{request!r}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % _HELD_OUT_MOD == 0


def _with_article(head: str, ptype: str) -> str:
    if ptype.endswith("s"):  # sandals, headphones, snack bars: no article
        return head
    return ("an " if head[:1] in "aeiou" else "a ") + head


def _text(rng: random.Random, product: Product, attributes: tuple[str, ...], options: tuple[tuple[str, str], ...],
          bound: float) -> str:
    base = product.attributes[0]
    noun = product.ptype
    head = f"{base} {noun}" if base in attributes else noun
    features = [a for a in attributes if a != base]
    phrase = _with_article(head, noun) + (f" with {' and '.join(features)}" if features else "")
    parts = [f"{rng.choice(_LEADS)} {phrase}"]
    parts += [OPTION_PHRASES.get(name, "with {}").format(value) for name, value in options]
    parts.append(f"and price lower than {bound:.2f} dollars")
    return ", ".join(parts)


def make_goal(catalogue: Catalogue, seed: int) -> Goal:
    """The goal of episode ``seed`` (see the module docstring): the same for the same catalogue and seed."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"`seed` must be an integer >= 0, got {seed!r}")
    rng = random.Random(f"webshop-goal:{catalogue.key}:{seed}")
    want_held_out = seed >= HELD_OUT_SEED_START
    for _ in range(_MAX_DRAWS):
        product = catalogue.products[rng.randrange(len(catalogue.products))]
        picked = set(rng.sample(product.attributes, rng.randint(1, min(2, len(product.attributes)))))
        attributes = tuple(a for a in product.attributes if a in picked)
        options = tuple((name, rng.choice(values)) for name, values in product.options)
        request = (product.ptype, tuple(sorted(attributes)), tuple(sorted(options)))
        if is_held_out_request(catalogue.seed, request) == want_held_out:
            break
    else:  # pragma: no cover - a catalogue of a handful of products can have no request in one pool
        raise ValueError(
            f"catalogue {catalogue.key} has no {'held-out' if want_held_out else 'training'} request: use more products"
        )
    bound = float(math.ceil(product.price * rng.uniform(1.1, 1.6)))
    return Goal(
        seed=seed,
        text=_text(rng, product, attributes, options, bound),
        category=product.category,
        ptype=product.ptype,
        attributes=attributes,
        options=options,
        price_bound=bound,
        target=product.pid,
        held_out=want_held_out,
    )


@functools.lru_cache(maxsize=4096)
def goal_for(catalogue_seed: int, num_products: int, seed: int) -> Goal:
    """:func:`make_goal` of the catalogue ``(catalogue_seed, num_products)``, cached per process (the server
    renders the instruction of every page from its id)."""
    return make_goal(get_catalogue(catalogue_seed, num_products), seed)
