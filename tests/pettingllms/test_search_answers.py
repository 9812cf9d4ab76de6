"""The search workflow's parsers (queries, answers, the reasoner's choice, the single agent's pair) and the answer
metrics (SQuAD normalisation, exact match, token F1), with hypothesis fuzzing: parsers raise nothing but
ParseError on any text, and every formatted response parses back."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pettingllms.agents import ParseError
from pettingllms.envs.search.answers import (
    MAX_ANSWER_CHARS,
    MAX_QUERY_CHARS,
    answer_in_text,
    exact_match,
    f1_score,
    format_answer,
    format_query,
    normalize_answer,
    parse_answer,
    parse_query,
    parse_reasoner,
    parse_single,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("<search>founder of Velmora</search>", "founder of Velmora"),
    ("think first\n<search> a\n  b </search> then wait", "a b"),  # blanks collapsed, stripped
    ("<search>one</search> <search>two</search>", "two"),  # the last block wins
    ("<SEARCH >Upper</Search>", "Upper"),  # any case, blanks before >
    ("<search>first</search><search>cut off", "first"),  # an unclosed block does not count
    ("<search><search>inner</search>", "inner"),  # the last opening before the closing
])
def test_parse_query(text, expected):
    assert parse_query(text) == expected


@pytest.mark.parametrize("text", ["", "no tags", "<search></search>", "<search>   </search>", "<search>open",
                                  "</search>x<search>", "<answer>Paris</answer>"])
def test_parse_query_errors(text):
    with pytest.raises(ParseError, match="<search>"):
        parse_query(text)


def test_parse_answer_and_limits():
    assert parse_answer("So: <answer> Port  Ellery </answer>.") == "Port Ellery"
    assert len(parse_query(f"<search>{'x' * 999}</search>")) == MAX_QUERY_CHARS
    assert len(parse_answer(f"<answer>{'y ' * 500}</answer>")) <= MAX_ANSWER_CHARS
    with pytest.raises(ParseError, match="<answer>"):
        parse_answer("<answer></answer>")


@pytest.mark.parametrize(("text", "expected"), [
    ("<answer>Brevik</answer>", ("answer", "Brevik")),
    ("<search>who founded X</search>", ("search", "who founded X")),
    ("<search>q</search> no wait <answer>a</answer>", ("answer", "a")),  # the block that closes last decides
    ("<answer>a</answer> hmm, <search>q</search>", ("search", "q")),
    ("<answer></answer><search>q</search>", ("search", "q")),
])
def test_parse_reasoner(text, expected):
    assert parse_reasoner(text) == expected


def test_parse_single():
    assert parse_single("<search>q</search>") == ("q", None)
    assert parse_single("<answer>a</answer>") == (None, "a")
    assert parse_single("<search>q</search><answer>a</answer>") == ("q", "a")
    with pytest.raises(ParseError):
        parse_single("nothing here")


@pytest.mark.parametrize(("text", "expected"), [
    ("The Eiffel Tower!", "eiffel tower"),
    ("  A  cat, an   apple; THE end. ", "cat apple end"),
    ("Port-Ellery", "portellery"),  # SQuAD removes punctuation without a blank
    ("theatre", "theatre"),  # articles are whole words only
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match_and_f1():
    assert exact_match("the Lumen Bridge", ["Lumen Bridge"]) and exact_match("1931", ["June 1931", "1931"])
    assert not exact_match("Lumen", ["Lumen Bridge"]) and not exact_match(None, ["x"]) and not exact_match("the", ["a"])
    assert f1_score("Lumen Bridge", "Lumen Bridge") == 1.0
    assert f1_score("Lumen", ["Lumen Bridge"]) == pytest.approx(2 / 3)  # precision 1, recall 1/2
    assert f1_score("the old Lumen Bridge", ["Kestrel Tunnel", "Lumen Bridge"]) == pytest.approx(0.8)
    assert f1_score("no", ["no"]) == 1.0 and f1_score("yes", ["yes it is"]) == 0.0  # FlashRAG's yes/no rule
    assert f1_score(None, ["x"]) == 0.0 and f1_score("Brevik", ["Tosk"]) == 0.0


def test_answer_in_text_matches_whole_normalised_tokens():
    text = "Ardent Quill was born in Brevik in 1952."
    assert answer_in_text(["brevik"], text) and answer_in_text("Ardent Quill", text)
    assert not answer_in_text(["Brev"], text) and not answer_in_text(["the"], text)


PIECES = ["<search>", "</search>", "<answer>", "</answer>", "<SEARCH >", "</Answer >", "<", ">", "/", " ", "\n",
          "q", "Brevik", "the", "\x00", "\u00e9", "\u0130"]
TEXT = st.one_of(st.text(max_size=300), st.lists(st.sampled_from(PIECES), max_size=60).map("".join))


@pytest.mark.slow
@settings(max_examples=400)
@given(TEXT)
def test_parsers_raise_nothing_but_parse_error(text):
    for parser in (parse_query, parse_answer, parse_reasoner, parse_single):
        try:
            value = parser(text)
        except ParseError as error:
            assert str(error)
            continue
        parts = value if isinstance(value, tuple) else (value,)
        assert any(parts) and all(p is None or (p == p.strip() and "\n" not in p) for p in parts)
    assert 0.0 <= f1_score(text, [text or "x"]) <= 1.0
    normalize_answer(text)


BODY = st.text(alphabet=st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)), min_size=1,
               max_size=80).filter(lambda s: s.strip())


@given(BODY)
def test_formatted_responses_parse_back(body):
    clean = " ".join(body.split())
    assert parse_query(format_query(body)) == clean[:MAX_QUERY_CHARS].strip()
    assert parse_answer(format_answer(body)) == clean[:MAX_ANSWER_CHARS].strip()
    assert parse_reasoner(format_query("q") + format_answer(body)) == ("answer", clean[:MAX_ANSWER_CHARS].strip())


def test_parsers_are_linear_on_adversarial_input():
    text = "<search>" * 20_000 + "</search>" * 2 + "<answer>" * 20_000
    start = time.perf_counter()
    parse_reasoner(text)
    assert time.perf_counter() - start < 1.0
