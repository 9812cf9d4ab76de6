"""The contamination check (:mod:`pettingllms.envs.contamination`): statements equal after normalisation are
exact matches whatever their ids, a shared 13-gram makes a near-duplicate and 12 shared words do not, every
evaluation problem counts once, and the report reads back from its JSON."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pettingllms.envs.contamination import (
    DEFAULT_N,
    NORMALISATION_VERSION,
    ContaminationReport,
    TrainingIndex,
    find_overlaps,
    normalise_statement,
)

LIS = ("Given an array of n integers, find the length of the longest strictly increasing subsequence and print "
       "it on a single line.")
# Shares 16 consecutive words with LIS ("find ... line"): a 13-gram.
LIS_REWORDED = ("You are given n integers. Find the length of the longest strictly increasing subsequence and print "
                "it on a single line, please.")
# Shares only 12 consecutive words with LIS ("find ... it"), and no other run as long.
LIS_TWELVE = ("For a list of numbers you must find the length of the longest strictly increasing subsequence and "
              "print it then stop without writing anything else.")
GRAPH = ("Count the connected components of an undirected graph with n vertices and m edges given as pairs of "
         "vertex numbers on the following lines.")
SUM = "Add two numbers."


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Sum Two Numbers", "sum two numbers"),
        ("sum  two\n\tnumbers ", " sum two numbers"),
        ("Sum, two; numbers!", "sum two numbers"),
        ("$x\\,+\\,y$", "x + y"),
        ("$a\\;b\\:c\\!d\\>e\\ f$", "a b c d e f"),
        ("Let $x\\quad y \\qquad z$", "let x y z"),
        ("$\\left( a \\right]$", "(a]"),
        ("a~b", "a b"),
        ("ｆｕｌｌ　ｗｉｄｔｈ １２", "full width 12"),  # NFKC: full-width letters, digits and space
        ("zero\u200bwidth soft\u00adhyphen", "zerowidth softhyphen"),  # format characters are deleted
        ("10\\,000 apples", "10,000 apples"),
        ("\\frac{1}{2}", "frac 1 2"),
    ],
)
def test_statements_equal_after_normalisation(a, b):
    assert normalise_statement(a) == normalise_statement(b)


def test_normalisation_keeps_words_and_whole_command_names():
    assert normalise_statement("  Hello,   World!  ") == "hello world"
    assert normalise_statement("$p \\leftarrow q \\rightarrow r$") == "p leftarrow q rightarrow r"
    assert normalise_statement("$\\quadrilateral$") == "quadrilateral"
    assert normalise_statement("x^2 + y_1") == "x 2 y 1"
    assert normalise_statement("naïve café") == "naïve café"
    assert normalise_statement("") == normalise_statement(" ?! ") == ""
    assert normalise_statement("ab") != normalise_statement("a b")


def test_an_exact_copy_matches_across_different_ids_and_counts_once():
    report = find_overlaps({"apps/train/3": LIS, "apps/train/4": GRAPH},
                           {"humaneval": {"humaneval/0": LIS.upper(), "humaneval/1": SUM}})
    (s,) = report.sets
    assert (s.exact, s.near, s.overlapping) == (1, 0, 1)
    assert s.exact_examples == (("apps/train/3", "humaneval/0"),) and s.near_examples == ()
    assert (s.eval_problems, s.train_problems, s.n, s.normalisation_version) == (2, 2, DEFAULT_N, NORMALISATION_VERSION)
    assert report.total_overlapping == 1


def test_a_shared_13_gram_is_a_near_duplicate_and_12_shared_words_are_not():
    report = find_overlaps({"t/lis": LIS, "t/graph": GRAPH},
                           {"eval": {"e/reworded": LIS_REWORDED, "e/twelve": LIS_TWELVE}})
    (s,) = report.sets
    assert (s.exact, s.near) == (0, 1) and s.near_examples == (("t/lis", "e/reworded"),)
    assert 0 < s.max_shared_fraction < 1
    (s12,) = find_overlaps({"t/lis": LIS}, {"eval": {"e/twelve": LIS_TWELVE}}, n=12).sets
    assert s12.near == 1  # the same 12 words make a 12-gram


def test_an_ngram_never_spans_two_training_statements():
    end_of_one, start_of_next = LIS.split()[-7:], GRAPH.split()[:6]
    (s,) = find_overlaps({"t/1": LIS, "t/2": GRAPH}, {"e": {"e/1": " ".join(end_of_one + start_of_next)}}).sets
    assert s.overlapping == 0


def test_short_statements_compare_by_their_whole_token_sequence():
    long_train = f"{LIS} Then add two numbers and stop."
    (s,) = find_overlaps({"t/sum": SUM, "t/long": long_train},
                         {"e": {"e/same": "ADD two numbers", "e/longer": "Please add two numbers.",
                                "e/inside": "then add two numbers and stop"}}).sets
    assert (s.exact, s.near) == (1, 0) and s.exact_examples == (("t/sum", "e/same"),)


def test_empty_statements_match_nothing():
    (s,) = find_overlaps({"t/1": "", "t/2": "?!"}, {"e": {"e/1": "", "e/2": " . "}}).sets
    assert s.overlapping == 0 and s.eval_problems == 2


def test_disjoint_sets_report_zero():
    report = find_overlaps({"t/1": LIS, "t/2": SUM}, {"a": {"a/1": GRAPH}, "b": {"b/1": "Reverse a string."}})
    assert report.total_overlapping == 0
    assert [(s.name, s.exact, s.near, s.max_shared_fraction) for s in report.sets] == [("a", 0, 0, 0.0), ("b", 0, 0, 0.0)]


def test_examples_are_capped_and_near_ones_come_most_shared_first():
    train = {f"t/{i}": f"problem {i}: {LIS}" for i in range(10)}
    evals = {f"e/{i}": f"PROBLEM {i} {LIS}" for i in range(10)}
    evals |= {"e/far": LIS_REWORDED, "e/close": f"{LIS} Answer modulo a prime."}
    (s,) = find_overlaps(train, {"e": evals}, max_examples=3).sets
    assert (s.exact, s.near) == (10, 2)
    assert len(s.exact_examples) == 3 and s.exact_examples[0] == ("t/0", "e/0")
    assert [e for _, e in s.near_examples] == ["e/close", "e/far"]
    (none,) = find_overlaps(train, {"e": evals}, max_examples=0).sets
    assert none.exact_examples == none.near_examples == () and none.overlapping == 12


def test_a_near_example_names_the_training_problem_that_shares_the_most():
    words = LIS.split()
    train = {"t/a": " ".join(words[:14]) + " alpha beta", "t/b": LIS + " gamma"}
    (s,) = find_overlaps(train, {"e": {"e/1": LIS + " delta"}}).sets
    assert s.near_examples == (("t/b", "e/1"),)


def test_summary_line_names_the_sets_with_overlap_and_a_few_ids():
    train = {"apps/train/3": LIS, "apps/train/9": GRAPH}
    report = find_overlaps(train, {
        "humaneval": {"humaneval/HumanEval/0": LIS, "humaneval/HumanEval/1": SUM},
        "mbpp": {"mbpp/1": "Reverse a string."},
        "livecodebench": {"livecodebench/x": GRAPH + " Print the answer.", "livecodebench/y": SUM},
    })
    assert report.summary_line() == (
        "1 of 2 humaneval problems and 1 of 2 livecodebench problems overlap the 2 training problems "
        "(exact: apps/train/3 = humaneval/HumanEval/0; 13-gram: apps/train/9 ~ livecodebench/x)"
    )
    clean = find_overlaps(train, {"humaneval": {"h/1": SUM}, "mbpp": {"m/1": "x", "m/2": "y"}})
    assert clean.summary_line() == ("none of the 1 humaneval and 2 mbpp problems overlap the 2 training problems "
                                    "(exact or 13-gram match, normalisation v1)")
    many = find_overlaps({f"t/{i}": f"{i} {SUM}" for i in range(5)}, {"e": {f"e/{i}": f"{i} {SUM}" for i in range(5)}})
    assert many.summary_line(max_ids=2) == (
        "5 of 5 e problems overlap the 5 training problems (exact: t/0 = e/0, t/1 = e/1, ...)"
    )


def test_the_report_round_trips_through_json():
    report = find_overlaps({"t/1": LIS, "t/2": SUM}, {"a": {"a/1": LIS_REWORDED, "a/2": SUM}, "b": {"b/1": GRAPH}})
    text = json.dumps(report.to_json())
    back = ContaminationReport.from_json(json.loads(text))
    assert back == report and back.to_json() == report.to_json()
    assert ContaminationReport.from_json({**json.loads(text), "checked": True}) == report  # extra keys are left
    obj = json.loads(text)
    assert obj["total_overlapping"] == 2 and obj["sets"]["a"]["near_examples"] == [["t/1", "a/1"]]
    assert list(obj["sets"]) == ["a", "b"]


def test_bad_arguments_name_the_field_and_value():
    with pytest.raises(ValueError, match=r"`n` must be an integer >= 1, got 0"):
        find_overlaps({}, {}, n=0)
    with pytest.raises(ValueError, match=r"`max_examples` must be an integer >= 0, got -1"):
        find_overlaps({}, {"e": {}}, max_examples=-1)
    with pytest.raises(TypeError, match=r"training problem 't/1': the statement must be a string, got int"):
        find_overlaps({"t/1": 3}, {})
    with pytest.raises(TypeError, match=r"evaluation \(e\) problem 'e/1'"):
        find_overlaps({}, {"e": {"e/1": None}})


def test_one_index_checks_several_sets():
    index = TrainingIndex({"t/1": LIS, "t/2": GRAPH}, n=13)
    assert index.train_problems == 2 and index.distinct_ngrams == len(LIS.split()) + len(GRAPH.split()) - 24
    assert index.check("a", {"a/1": LIS}).exact == 1 and index.check("b", {"b/1": LIS_REWORDED}).near == 1


# ------------------------------------------------------------------------------------------- properties

WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789éñü", min_size=1, max_size=8)
STATEMENTS = st.lists(WORDS, min_size=1, max_size=30).map(" ".join)
SEPARATORS = st.sampled_from([" ", "  ", "\n", "\t ", ", ", " - ", ". ", "; ", " (", ") ", "! "])


def brute_force(train: list[str], statements: list[str], n: int) -> tuple[int, int]:
    """(exact, near) by the module docstring's rules, on word tuples instead of hashes."""
    words = [normalise_statement(t).split() for t in train]
    texts = {" ".join(w) for w in words if w}
    grams = {tuple(w[i:i + n]) for w in words for i in range(len(w) - n + 1)}
    exact = near = 0
    for statement in statements:
        w = normalise_statement(statement).split()
        if w and " ".join(w) in texts:
            exact += 1
        elif any(tuple(w[i:i + n]) in grams for i in range(len(w) - n + 1)):
            near += 1
    return exact, near


@given(STATEMENTS, st.data())
def test_any_statement_is_an_exact_match_of_itself_after_case_whitespace_and_punctuation_changes(statement, data):
    words = statement.split()
    separators = data.draw(st.lists(SEPARATORS, min_size=len(words) + 1, max_size=len(words) + 1))
    cases = data.draw(st.lists(st.sampled_from([str.lower, str.upper, str.title]), min_size=len(words),
                               max_size=len(words)))
    perturbed = separators[0] + "".join(case(w) + sep for w, case, sep in zip(words, cases, separators[1:]))
    (s,) = find_overlaps({"train/1": statement}, {"e": {"eval/1": perturbed}}).sets
    assert (s.exact, s.near) == (1, 0) and s.exact_examples == (("train/1", "eval/1"),)


SMALL = st.lists(st.sampled_from("a b c d".split()), min_size=0, max_size=9).map(" ".join)


@given(st.lists(SMALL, max_size=6), st.lists(SMALL, max_size=6), st.lists(SMALL, max_size=4), st.integers(1, 4))
def test_the_index_agrees_with_a_brute_force_and_more_training_never_removes_an_overlap(train, evals, extra, n):
    (s,) = find_overlaps({f"t/{i}": t for i, t in enumerate(train)},
                         {"e": {f"e/{i}": t for i, t in enumerate(evals)}}, n=n).sets
    assert (s.exact, s.near) == brute_force(train, evals, n)
    more = {f"t/{i}": t for i, t in enumerate(train + extra)}
    (s2,) = find_overlaps(more, {"e": {f"e/{i}": t for i, t in enumerate(evals)}}, n=n).sets
    assert s2.exact >= s.exact and s2.overlapping >= s.overlapping


@given(st.lists(STATEMENTS, max_size=5), st.integers(1, 20))
def test_an_empty_training_set_reports_zero(evals, n):
    report = find_overlaps({}, {"e": {f"e/{i}": t for i, t in enumerate(evals)}, "f": {}}, n=n)
    assert report.total_overlapping == 0 and report.train_problems == 0
    assert re.match(r"none of the \d+ e and 0 f problems overlap the 0 training problems", report.summary_line())
