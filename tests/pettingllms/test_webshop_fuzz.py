"""Fuzzing WebShop's action grammar (nothing but ParseError escapes the parser: 500 hypothesis cases plus
10,000 seeded random ones, as hypothesis takes 4-10 ms a case here) and the agents on the live site (any
text: a finite reward, the state intact when it does not parse)."""

from __future__ import annotations

import asyncio
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pettingllms.agents import ParseError
from pettingllms.envs.webshop import BuyerAgent, SearcherAgent, WebShopSingleAgent, server
from pettingllms.envs.webshop.parsers import MAX_ARGUMENT_CHARS, VERBS, Action, format_actions, parse_actions
from pettingllms.registry import make_env

MANY = settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow], deadline=None)

_PIECES = ["search[", "click[", "Search[", "click [", "[", "]", "]]", "\n", "\r\n", " ", "\t", "buy now", "next >",
           "< prev", "back to search", "b0", "x" * 60, "red", "size m", "\u00e9", "\u2028", "\x00", "\x85", "#### ",
           "```", "search", "click", ":", ","]
TEXT = st.one_of(st.text(max_size=80), st.lists(st.sampled_from(_PIECES), max_size=16).map("".join))
VERB_SETS = st.sampled_from([("search",), ("click",), VERBS])


def check_parse(text, verbs, most):
    try:
        actions = parse_actions(text, verbs, most)
    except ParseError as exc:
        assert str(exc)
        return
    assert 1 <= len(actions) <= most
    for action in actions:
        assert action.verb in verbs and action.argument == action.argument.strip()
        assert 1 <= len(action.argument) <= MAX_ARGUMENT_CHARS and action.argument.isprintable()
        assert "[" not in action.argument and "]" not in action.argument
    assert parse_actions(format_actions(actions), verbs, most) == actions  # formatting reads back


@MANY
@given(TEXT, VERB_SETS, st.integers(1, 8))
def test_the_parser_raises_nothing_but_parse_error(text, verbs, most):
    check_parse(text, verbs, most)


def test_ten_thousand_seeded_random_responses_raise_nothing_but_parse_error():
    rng = random.Random(0)
    alphabet = "".join(map(chr, range(0, 0x250))) + "\u2028\u2603\U0001f600"
    for _ in range(10_000):
        if rng.random() < 0.5:
            text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 12)))
        else:
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        check_parse(text, rng.choice([("search",), ("click",), VERBS]), rng.randint(1, 8))


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.tuples(st.sampled_from(VERBS), st.text(min_size=1, max_size=MAX_ARGUMENT_CHARS)), min_size=1,
                max_size=4))
def test_well_formed_actions_round_trip(pairs):
    actions = []
    for verb, argument in pairs:
        argument = argument.strip()
        if not argument or not argument.isprintable() or "[" in argument or "]" in argument:
            return
        actions.append(Action(verb, argument))
    assert parse_actions(format_actions(actions), VERBS, 4) == tuple(actions)


# Responses shaped like real ones: action lines around labels that are often clickable.
_LABELS = st.sampled_from(["next >", "< prev", "back to search", "buy now", "m", "red", "pack of 2", "nothing here"])
_LINE = st.one_of(
    st.builds("click[{}]".format, _LABELS),
    st.builds("search[{}]".format, st.sampled_from(["cotton shirt", "tea", "zzz", "red", "\u00e9t\u00e9 \u2603"])),
    TEXT,
)
RESPONSE = st.one_of(TEXT, st.lists(_LINE, min_size=1, max_size=5).map("\n".join))


@pytest.fixture(scope="module")
def shop():
    """One environment on the search page of seed 3; every example plays on a clone of it."""
    env = make_env("webshop", {"turn_order": ["searcher", "buyer", "single"], "max_turns": 50})
    asyncio.run(env.reset(3))
    yield env
    asyncio.run(env.close())
    server.shutdown()


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(RESPONSE, st.sampled_from([SearcherAgent, BuyerAgent, WebShopSingleAgent]), st.booleans())
def test_agents_reward_any_text_and_leave_the_state_intact_when_it_does_not_parse(shop, text, agent_cls, on_results):
    env = shop.clone()
    if on_results:  # start from a results page (the searcher searched)
        searcher = SearcherAgent()
        searcher.update_from_env(0, env)
        searcher.update_from_model("search[cotton]")
        asyncio.run(env.step_agent(searcher))
    agent = agent_cls()
    order = {"searcher": 0, "buyer": 1, "single": 2}
    env.state.position = order[agent.role]
    before = env.snapshot()
    agent.update_from_env(env.state.turn, env)
    agent.update_from_model(text)
    assert (agent.action is None) == (agent.parse_error is not None)
    result = asyncio.run(env.step_agent(agent))
    assert math.isfinite(result.reward) and 0.0 <= result.global_reward <= 1.0
    assert -1.0 <= result.local_reward <= 1.0
    if agent.parse_error is not None:
        assert result.local_reward == -1.0 and result.failure == "parse_error"
        assert env.state.page == before.page and env.state.actions == before.actions
    asyncio.run(env.close())
