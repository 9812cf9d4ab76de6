"""WebShop's shop: the seeded catalogue and goals (held-out requests disjoint from training), the search
engine, the stateless site's HTML fetched over real HTTP on 127.0.0.1, and the server's lifetime."""

from __future__ import annotations

import http.client
import os
import pickle
import socket
import threading
from html.parser import HTMLParser

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pettingllms.envs.webshop import server, site
from pettingllms.envs.webshop.catalogue import (
    MAX_RESULTS,
    OPTION_VALUES,
    PRODUCT_TYPES,
    RESULTS_PER_PAGE,
    get_catalogue,
    search,
    tokens,
)
from pettingllms.envs.webshop.generator import HELD_OUT_SEED_START, goal_for, is_held_out_request, make_goal
from pettingllms.envs.webshop.page import parse_page
from pettingllms.envs.webshop.rewards import best_item_reward

CATALOGUE = get_catalogue(0, 300)
TRAIN_SEEDS = range(0, 3000)
HELD_OUT_SEEDS = range(HELD_OUT_SEED_START, HELD_OUT_SEED_START + 600)
VOID = {"meta", "input", "br", "hr", "img", "link"}


def server_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("webshop-server-")]


@pytest.fixture
def no_server():
    """Every test starts and ends without a server in this process."""
    server.shutdown()
    yield
    server.shutdown()
    assert not server_threads()


# ---- catalogue and goals --------------------------------------------------------------------------

def test_catalogue_is_seeded_and_well_formed():
    again = get_catalogue.__wrapped__(0, 300)
    assert again.products == CATALOGUE.products  # the same seed regenerates the same shop
    assert get_catalogue(1, 300).products != CATALOGUE.products
    assert len({p.pid for p in CATALOGUE.products}) == 300
    kinds = {t.name: t for t in PRODUCT_TYPES}
    assert {p.ptype for p in CATALOGUE.products} == set(kinds)  # every type is on sale
    for product in CATALOGUE.products:
        kind = kinds[product.ptype]
        assert product.category == kind.category and product.attributes[0] in kind.bases
        assert set(product.attributes[1:]) <= set(kind.features) and 2 <= len(product.attributes) <= 4
        assert kind.price[0] - 1 < product.price < kind.price[1] and product.pid.startswith("B0")
        assert [name for name, _ in product.options] == [name for name, _ in kind.options]
        values = [v for _, vs in product.options for v in vs]
        assert len(values) == len(set(values))  # an option value names one option of its product
        for (_, pool), (_, offered) in zip(kind.options, product.options):
            assert offered and set(offered) <= set(OPTION_VALUES[pool])
        assert product.title.startswith(product.brand)


def test_goals_are_seeded_and_satisfiable():
    for seed in (0, 7, 123, HELD_OUT_SEED_START + 5):
        goal = make_goal(CATALOGUE, seed)
        assert goal == goal_for(0, 300, seed) and goal.seed == seed
        target = CATALOGUE.product(goal.target)
        assert best_item_reward(target, goal) == 1.0  # the product it was drawn from satisfies it
        assert target.price <= goal.price_bound and goal.text.endswith(f"lower than {goal.price_bound:.2f} dollars")
        assert all(value in goal.text for _, value in goal.options)
        assert all(attribute in goal.text for attribute in goal.attributes)
    assert make_goal(CATALOGUE, 1) != make_goal(CATALOGUE, 2)
    with pytest.raises(ValueError, match="`seed` must be an integer >= 0"):
        make_goal(CATALOGUE, -1)


def test_held_out_seeds_ask_for_requests_no_training_seed_asks_for():
    train = [goal_for(0, 300, s) for s in TRAIN_SEEDS]
    held_out = [goal_for(0, 300, s) for s in HELD_OUT_SEEDS]
    assert not any(g.held_out for g in train) and all(g.held_out for g in held_out)
    assert all(is_held_out_request(0, g.request) for g in held_out)
    assert not any(is_held_out_request(0, g.request) for g in train)
    assert not {g.request for g in train} & {g.request for g in held_out}
    assert not {g.text for g in train} & {g.text for g in held_out}
    assert len({g.request for g in held_out}) > 400  # many distinct held-out requests, not a handful


def test_search_ranks_products_holding_the_query_words():
    goal = goal_for(0, 300, 11)
    query = " ".join([*goal.attributes, goal.ptype])
    found = search(CATALOGUE, query)
    assert 0 < len(found) <= MAX_RESULTS and len(set(found)) == len(found)
    wanted = set(tokens(query))
    best = CATALOGUE.product(found[0])
    assert wanted <= set(tokens(best.search_text()))  # the top result holds every query word
    assert search(CATALOGUE, "the and of dollars") == ()  # filler words find nothing
    assert search(CATALOGUE, "") == () and search(CATALOGUE, "zzzz qqqq") == ()
    assert tokens("Shirts, T-Shirts & BOOTS for i") == ["shirt", "t", "shirt", "boot"]


# ---- the site over HTTP -----------------------------------------------------------------------------

class StrictHTML(HTMLParser):
    """Checks that every element is closed, in order (the site's pages are well formed)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def get(port: int, target: str) -> tuple[int, str, str]:
    connection = http.client.HTTPConnection(server.HOST, port, timeout=5)
    try:
        connection.request("GET", target)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type"), response.read().decode("utf-8")
    finally:
        connection.close()


def well_formed(html: str) -> None:
    checker = StrictHTML()
    checker.feed(html)
    checker.close()
    assert not checker.errors and checker.stack == [], (checker.errors, checker.stack)


def test_pages_fetched_over_http_parse_into_observations_with_their_clickables(no_server):
    lease = server.lease()
    assert lease.port > 0 and lease.server.httpd.server_address == (server.HOST, lease.port)
    goal = goal_for(0, 300, 4)
    status, kind, html = get(lease.port, site.search_url(CATALOGUE, 4))
    assert status == 200 and kind == "text/html; charset=utf-8"
    well_formed(html)
    start = parse_page(html, site.search_url(CATALOGUE, 4))
    assert start.kind == "search" and start.lines[0] == f"Instruction: {goal.text}"
    assert start.form is not None and start.form.field == "q" and not start.links
    assert dict(start.form.hidden) == {"shop": "0-300", "iid": "4"}

    query = " ".join([*goal.attributes, goal.ptype])
    target = start.form.submit_url(query)  # a browser's GET submission of the search form
    status, _, html = get(lease.port, target)
    well_formed(html)
    results = parse_page(html, target)
    found = search(CATALOGUE, query)
    assert status == 200 and results.kind == "results"
    assert results.items == tuple(pid.lower() for pid in found[:RESULTS_PER_PAGE])
    assert results.clickables[:2] == ("back to search", "next >")
    assert any(line.startswith(f"Page 1 of {-(-len(found) // RESULTS_PER_PAGE)}: results 1-5 of {len(found)}")
               for line in results.lines)
    observation = results.observation()
    assert observation.splitlines()[-1] == "Clickable: " + ", ".join(f"[{c}]" for c in results.clickables)
    first = CATALOGUE.product(found[0])
    assert f"[{first.pid.lower()}] {first.title} | ${first.price:.2f}" in observation

    item_link = results.link(first.pid)  # labels compare case-insensitively
    status, _, html = get(lease.port, item_link.href)
    well_formed(html)
    item = parse_page(html, item_link.href)
    assert status == 200 and item.kind == "item" and item.meta_value("webshop-pid") == first.pid
    name, values = first.options[0]
    assert f"{name}: " + " ".join(f"[{v}]" for v in values) + " (not chosen)" in item.lines
    chosen = parse_page(get(lease.port, item.link(values[-1]).href)[2], "")
    assert f"{name}: " + " ".join(f"[{v}]" for v in values) + f" (chosen: {values[-1]})" in chosen.lines
    assert chosen.link("< prev").href == site.results_url(CATALOGUE, 4, query, 1)
    status, _, html = get(lease.port, chosen.link("buy now").href)
    well_formed(html)
    done = parse_page(html, "")
    assert done.kind == "done" and done.form is None and not done.links
    assert done.meta_value("webshop-purchase") == f"pid={first.pid}&o.{name}={values[-1].replace(' ', '+')}"
    assert "Thank you for shopping with us!" in done.lines
    lease.release()


def test_pagination_walks_every_result_and_back(no_server):
    lease = server.lease()
    query = "cotton"
    found = search(CATALOGUE, query)
    pages = -(-len(found) // RESULTS_PER_PAGE)
    assert pages >= 3
    page = parse_page(get(lease.port, site.results_url(CATALOGUE, 0, query))[2], "")
    seen = list(page.items)
    for _ in range(pages - 1):
        page = parse_page(get(lease.port, page.link("next >").href)[2], "")
        seen += page.items
    assert page.link("next >") is None and seen == [pid.lower() for pid in found]
    back = parse_page(get(lease.port, page.link("< prev").href)[2], "")
    assert back.items == tuple(pid.lower() for pid in found[(pages - 2) * 5: (pages - 1) * 5])
    assert get(lease.port, site.results_url(CATALOGUE, 0, query, pages + 1))[0] == 400
    lease.release()


@pytest.mark.parametrize(
    ("target", "status", "says"),
    [
        ("/nowhere?shop=0-300&iid=1", 404, "no page at"),
        ("/results?iid=1&q=x", 400, "missing parameter 'shop'"),
        ("/results?shop=zero&iid=1&q=x", 400, "bad shop"),
        ("/results?shop=0-300&iid=-1&q=x", 400, "bad iid"),
        ("/results?shop=0-300&iid=1", 400, "missing parameter 'q'"),
        ("/results?shop=0-300&iid=1&q=x&page=0", 400, "bad page"),
        ("/item?shop=0-300&iid=1&q=x&page=1&pid=B0NOPE", 400, "unknown product"),
        ("/results?shop=0-300&iid=1&q=x&q=y", 400, "given twice"),
        ("/results?shop=0-5&iid=1&q=x", 200, "Instruction"),
    ],
)
def test_bad_requests_get_error_pages(target, status, says):
    code, html = site.render(target)
    assert code == status and says in " ".join(parse_page(html, target).lines)
    if status != 200:
        assert parse_page(html, target).kind == "error"


def test_an_option_the_product_lacks_is_a_bad_request():
    product = CATALOGUE.products[0]
    name, values = product.options[0]
    other = next(v for v in OPTION_VALUES["colors"] + OPTION_VALUES["packs"] if v not in values)
    url = site.item_url(CATALOGUE, 1, "x", 1, product.pid, {name: other})
    assert site.render(url)[0] == 400
    assert site.render(site.item_url(CATALOGUE, 1, "x", 1, product.pid, {name: values[0]}))[0] == 200


@given(st.text(max_size=120), st.sampled_from(["/", "/results", "/item", "/buy", "/x"]))
def test_the_site_answers_any_request_with_a_page(query, path):
    for target in (f"{path}?{query}", f"{path}?shop=0-300&iid=3&q={query}&pid={query}&o.size={query}"):
        status, html = site.render(target)
        assert status in (200, 400, 404) and html.startswith("<!DOCTYPE html>")


# ---- the server's lifetime ------------------------------------------------------------------------------

def refused(port: int) -> bool:
    try:
        socket.create_connection((server.HOST, port), timeout=1).close()
    except OSError:
        return True
    return False


def test_one_server_per_process_stops_with_its_last_lease(no_server):
    first, second = server.lease(), server.lease()
    assert first.server is second.server and server.current_server() is first.server
    assert [t.name for t in server_threads()] == [f"webshop-server-{first.port}"]
    first.release()
    first.release()  # idempotent
    assert first.server.running and get(second.port, "/x?")[0] == 404
    port, httpd = second.port, second.server.httpd
    second.release()
    assert server.current_server() is None and not server_threads()
    assert httpd.socket.fileno() == -1 and refused(port)  # the socket is closed


def test_a_dropped_lease_is_released_by_garbage_collection(no_server):
    holder = [server.lease()]
    port = holder[0].port
    holder.clear()  # the last reference: CPython collects the lease at once
    assert server.current_server() is None and not server_threads() and refused(port)


def test_leases_are_never_pickled_or_copied(no_server):
    import copy

    lease = server.lease()
    with pytest.raises(TypeError, match="never pickled"):
        pickle.dumps(lease)
    with pytest.raises(TypeError, match="never copied"):
        copy.deepcopy(lease)
    lease.release()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_process_runs_a_server_of_its_own(no_server):
    lease = server.lease()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's lease is dead here, a new lease starts another server
        code = 1
        try:
            mine = server.lease()
            ok = not lease.alive and mine.port != lease.port and get(mine.port, "/x?")[0] == 404
            mine.release()
            code = 0 if ok and not server_threads() else 1
        finally:
            os.write(write, bytes([code]))
            os._exit(code)
    os.close(write)
    result = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert result == b"\x00"
    assert lease.alive and lease.server.running  # the parent's server is untouched
    lease.release()
