"""The shop's web site: URLs and HTML pages, as pure functions of the request (the server only wraps them).

The site is stateless: every page is a function of its URL alone. The session lives in the query string
(and in the environment's state, which holds the current URL):

====================  =====================================================================================
URL                   page
====================  =====================================================================================
``/``                 the search page: the instruction and the search box (``shop``, ``iid``)
``/results``          a results page: ``q`` (the search terms) and ``page`` (1-based), 5 results a page, with
                      ``< prev`` / ``next >`` links; every result's id is a link to its item page
``/item``             an item page: ``pid``, the chosen options as ``o.<name>=<value>`` (each option value is
                      a link that sets it), ``q`` and ``page`` (for ``< prev``), and the ``buy now`` link
``/buy``              the done page: the purchase (``pid`` and the chosen options); no links
====================  =====================================================================================

Every URL carries ``shop`` (the catalogue, ``<catalogue_seed>-<num_products>``) and ``iid`` (the instruction
id: the episode seed; each page shows that instruction). Every page but the done page has the search form
(``GET /results`` with ``shop`` and ``iid`` as hidden fields and the text field ``q``) and a
``back to search`` link. A page declares what it is in ``<meta name="webshop-page">`` (``search``,
``results``, ``item``, ``done``, ``error``); the done page declares the purchase in
``<meta name="webshop-purchase">`` (a query string: ``pid`` and the ``o.<name>`` options).

A malformed request (a missing or bad parameter, an unknown product or option value, a page past the last)
is a 400 page, an unknown path a 404 page; nothing raises.
"""

from __future__ import annotations

from html import escape
from urllib.parse import parse_qsl, urlencode, urlsplit

from pettingllms.envs.webshop.catalogue import RESULTS_PER_PAGE, Catalogue, Product, get_catalogue, search
from pettingllms.envs.webshop.generator import Goal, goal_for

__all__ = [
    "MAX_QUERY_CHARS",
    "OPTION_PREFIX",
    "SiteError",
    "item_url",
    "parse_shop",
    "render",
    "results_url",
    "search_url",
    "shop_key",
]

#: The longest search query the site takes (characters).
MAX_QUERY_CHARS = 200
#: The query-string prefix of a chosen option: ``o.size=m``.
OPTION_PREFIX = "o."
_MAX_PARAMS = 32


class SiteError(ValueError):
    """A request the site cannot serve (its message is the 400 page's)."""


class _NotFound(Exception):
    """A path the site has no page at (the 404 page)."""


_PATHS = ("/", "/search", "/results", "/item", "/buy")


def shop_key(catalogue_seed: int, num_products: int) -> str:
    """The ``shop`` parameter naming a catalogue."""
    return f"{catalogue_seed}-{num_products}"


def _digits(text: str, most: int) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= most


def parse_shop(value: str) -> tuple[int, int]:
    """``(catalogue_seed, num_products)`` of a ``shop`` parameter; SiteError when malformed."""
    seed, sep, count = value.partition("-")
    if not sep or not _digits(seed, 12) or not _digits(count, 6):
        raise SiteError(f"bad shop {value!r}: expected <catalogue_seed>-<num_products>")
    return int(seed), int(count)


def _url(path: str, params: list[tuple[str, str]]) -> str:
    return f"{path}?{urlencode(params)}"


def _session(catalogue: Catalogue, iid: int) -> list[tuple[str, str]]:
    return [("shop", catalogue.key), ("iid", str(iid))]


def search_url(catalogue: Catalogue, iid: int) -> str:
    """The search page of instruction ``iid`` (where every episode starts)."""
    return _url("/", _session(catalogue, iid))


def results_url(catalogue: Catalogue, iid: int, query: str, page: int = 1) -> str:
    return _url("/results", [*_session(catalogue, iid), ("q", query), ("page", str(page))])


def item_url(catalogue: Catalogue, iid: int, query: str, page: int, pid: str, options: dict[str, str],
             path: str = "/item") -> str:
    params = [*_session(catalogue, iid), ("q", query), ("page", str(page)), ("pid", pid)]
    params += [(OPTION_PREFIX + name, value) for name, value in options.items()]
    return _url(path, params)


# ---- pages ------------------------------------------------------------------------------------------

def _document(kind: str, body: list[str], meta: dict[str, str] | None = None) -> str:
    metas = "".join(f'<meta name="{escape(k)}" content="{escape(v)}">' for k, v in {"webshop-page": kind,
                                                                                       **(meta or {})}.items())
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>WebShop</title>" + metas
            + "</head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")


def _link(href: str, label: str, css: str | None = None) -> str:
    klass = f' class="{css}"' if css else ""
    return f'<a{klass} href="{escape(href)}">{escape(label)}</a>'


def _header(catalogue: Catalogue, goal: Goal, query: str = "") -> list[str]:
    hidden = "".join(f'<input type="hidden" name="{k}" value="{escape(v)}">' for k, v in _session(catalogue, goal.seed))
    return [
        f'<div id="instruction">Instruction: {escape(goal.text)}</div>',
        f'<form id="search" action="/results" method="get">{hidden}'
        f'<input type="text" name="q" value="{escape(query)}" placeholder="search"><button type="submit">Search</button>'
        "</form>",
    ]


def _price(product: Product) -> str:
    return f"${product.price:.2f}"


def _search_page(catalogue: Catalogue, goal: Goal) -> str:
    body = _header(catalogue, goal) + ["<p>Search the shop for what the instruction asks.</p>"]
    return _document("search", body)


def _pages(count: int) -> int:
    return max(1, -(-count // RESULTS_PER_PAGE))


def _results_page(catalogue: Catalogue, goal: Goal, query: str, page: int) -> str:
    found = search(catalogue, query)
    pages = _pages(len(found))
    if page > pages:
        raise SiteError(f"page {page} is past the last page ({pages}) of the results for {query!r}")
    nav = [_link(search_url(catalogue, goal.seed), "Back to Search")]
    if page > 1:
        nav.append(_link(results_url(catalogue, goal.seed, query, page - 1), "< Prev"))
    if page < pages:
        nav.append(_link(results_url(catalogue, goal.seed, query, page + 1), "Next >"))
    body = _header(catalogue, goal, query) + [f'<div id="nav">{" ".join(nav)}</div>']
    shown = found[(page - 1) * RESULTS_PER_PAGE: page * RESULTS_PER_PAGE]
    if not shown:
        body.append(f"<p>No products match &quot;{escape(query)}&quot;.</p>")
        return _document("results", body)
    first = (page - 1) * RESULTS_PER_PAGE + 1
    body.append(f"<h2>Page {page} of {pages}: results {first}-{first + len(shown) - 1} of {len(found)} for "
                f"&quot;{escape(query)}&quot;</h2>")
    body.append('<ul id="results">')
    for pid in shown:
        product = catalogue.by_id[pid]
        href = item_url(catalogue, goal.seed, query, page, pid, {})
        body.append(f"<li>{_link(href, pid, 'item')} <span class=\"title\">{escape(product.title)}</span> | "
                    f"<span class=\"price\">{_price(product)}</span></li>")
    body.append("</ul>")
    return _document("results", body)


def _product_lines(product: Product) -> list[str]:
    return [
        f'<h1 class="title">{escape(product.title)}</h1>',
        f'<p class="price">Price: {_price(product)}</p>',
        f"<p>Category: {escape(product.category)} / {escape(product.ptype)}</p>",
        f"<p>Attributes: {escape(', '.join(product.attributes))}</p>",
    ]


def _item_page(catalogue: Catalogue, goal: Goal, query: str, page: int, product: Product,
               chosen: dict[str, str]) -> str:
    nav = [_link(search_url(catalogue, goal.seed), "Back to Search"),
           _link(results_url(catalogue, goal.seed, query, page), "< Prev")]
    body = _header(catalogue, goal, query) + [f'<div id="nav">{" ".join(nav)}</div>'] + _product_lines(product)
    for name, values in product.options:
        links = " ".join(
            _link(item_url(catalogue, goal.seed, query, page, product.pid, {**chosen, name: value}), value, "option")
            for value in values
        )
        state = f"(chosen: {escape(chosen[name])})" if name in chosen else "(not chosen)"
        body.append(f'<div class="option" data-name="{escape(name)}">{escape(name)}: {links} '
                    f'<span class="chosen">{state}</span></div>')
    buy = item_url(catalogue, goal.seed, query, page, product.pid, chosen, path="/buy")
    body.append(f'<div id="buy">{_link(buy, "Buy Now", "buy")}</div>')
    return _document("item", body, {"webshop-pid": product.pid})


def _done_page(goal: Goal, product: Product, chosen: dict[str, str]) -> str:
    options = ", ".join(f"{name} {value}" for name, value in chosen.items()) or "none chosen"
    purchase = urlencode([("pid", product.pid), *((OPTION_PREFIX + k, v) for k, v in chosen.items())])
    body = [
        f'<div id="instruction">Instruction: {escape(goal.text)}</div>',
        "<h1>Thank you for shopping with us!</h1>",
        f"<p>You bought {escape(product.pid)}: {escape(product.title)} | {_price(product)}</p>",
        f"<p>Options: {escape(options)}</p>",
    ]
    return _document("done", body, {"webshop-purchase": purchase})


def _error_page(message: str) -> str:
    return _document("error", [f"<h1>Error</h1><p>{escape(message)}</p>"])


# ---- routing ----------------------------------------------------------------------------------------

def _params(query: str) -> tuple[dict[str, str], dict[str, str]]:
    try:
        pairs = parse_qsl(query, keep_blank_values=True, max_num_fields=_MAX_PARAMS, errors="strict")
    except (ValueError, UnicodeError) as exc:
        raise SiteError(f"bad query string: {exc}") from None
    plain: dict[str, str] = {}
    options: dict[str, str] = {}
    for key, value in pairs:
        target = options if key.startswith(OPTION_PREFIX) else plain
        name = key[len(OPTION_PREFIX):] if key.startswith(OPTION_PREFIX) else key
        if name in target:
            raise SiteError(f"parameter {key!r} is given twice")
        target[name] = value
    return plain, options


def _int(params: dict[str, str], name: str, default: int | None = None, low: int = 0) -> int:
    value = params.get(name)
    if value is None:
        if default is None:
            raise SiteError(f"missing parameter {name!r}")
        return default
    if not _digits(value, 12) or int(value) < low:
        raise SiteError(f"bad {name} {value!r}: expected an integer >= {low}")
    return int(value)


def _query(params: dict[str, str]) -> str:
    query = params.get("q")
    if query is None:
        raise SiteError("missing parameter 'q'")
    if len(query) > MAX_QUERY_CHARS:
        raise SiteError(f"the search query is longer than {MAX_QUERY_CHARS} characters")
    return query


def _product_and_options(catalogue: Catalogue, params: dict[str, str], options: dict[str, str]):
    pid = params.get("pid")
    product = catalogue.product(pid) if pid else None
    if product is None:
        raise SiteError(f"unknown product {pid!r}")
    for name, value in options.items():
        if value not in product.option_values(name):
            raise SiteError(f"product {product.pid} has no option {name} {value!r}")
    return product, {name: options[name] for name in product.option_names if name in options}


def _route(path: str, query: str) -> str:
    if path not in _PATHS:
        raise _NotFound(path)
    params, options = _params(query)
    if "shop" not in params:
        raise SiteError("missing parameter 'shop'")
    try:
        catalogue = get_catalogue(*parse_shop(params["shop"]))
    except ValueError as exc:
        raise SiteError(str(exc)) from None
    goal = goal_for(catalogue.seed, len(catalogue.products), _int(params, "iid"))
    if path in ("/", "/search"):
        return _search_page(catalogue, goal)
    if path == "/results":
        return _results_page(catalogue, goal, _query(params), _int(params, "page", 1, low=1))
    if path in ("/item", "/buy"):
        product, chosen = _product_and_options(catalogue, params, options)
        if path == "/buy":
            return _done_page(goal, product, chosen)
        return _item_page(catalogue, goal, _query(params), _int(params, "page", 1, low=1), product, chosen)
    raise _NotFound(path)  # pragma: no cover - _PATHS lists every path above


def render(target: str) -> tuple[int, str]:
    """``(HTTP status, HTML)`` of the request target ``target`` (path and query string): 200, 400 for a
    malformed request, 404 for an unknown path."""
    parts = urlsplit(target)
    try:
        return 200, _route(parts.path or "/", parts.query)
    except SiteError as exc:
        return 400, _error_page(str(exc))
    except _NotFound:
        return 404, _error_page(f"no page at {parts.path!r}")
