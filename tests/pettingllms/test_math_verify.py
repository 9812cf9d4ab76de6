"""Answer verification: equivalent forms accepted, near misses rejected, timeouts, crashes, threads.

One worker process serves the whole module (``verifier`` fixture, plus the module-level default that
:func:`verify_answer` uses); only the timeout and crash tests restart it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pettingllms.envs.math import verify as verify_module
from pettingllms.envs.math.verify import AnswerVerifier, answers_agree, fast_verdict, verify_answer


@pytest.fixture(scope="module")
def verifier():
    with AnswerVerifier(timeout_s=10.0) as shared:
        yield shared


EQUIVALENT = [
    ("0.5", "1/2"),
    ("\\frac{1}{2}", "0.5"),
    ("\\dfrac12", "1/2"),
    ("\\dfrac{1}{2}", "\\frac{1}{2}"),
    ("1,000", "1000"),
    ("1000", "1,000"),
    ("12,345,678", "12345678"),
    ("\\{2, 1\\}", "\\{1,2\\}"),  # sets: order does not matter
    ("[0,1)", "[0, 1)"),  # intervals
    ("5\\text{ cm}", "5"),  # units stripped
    ("5", "5\\text{ cm}"),
    ("50\\%", "50"),  # math-verify: 50% and 50 agree (and 50% and 0.5 too)
    ("50", "50\\%"),
    ("0.5", "50\\%"),
    ("-3", "-3.0"),
    ("-3.0", "-3"),
    ("\\$5", "5"),
    ("x=2", "2"),
    ("2", "x=2"),
    ("\\sqrt{8}", "2\\sqrt{2}"),
    ("\\frac{\\sqrt{3}}{2}", "\\sqrt{3}/2"),
    ("0.3333333", "1/3"),  # math-verify rounds to 6 places when a decimal is involved
    ("\\text{Evelyn}", "\\text{Evelyn}"),  # identical text
    ("\\boxed{7}", "7"),
]

NOT_EQUIVALENT = [
    ("0.333", "1/3"),
    ("12", "21"),
    ("3", "x=2"),
    ("[0,1]", "[0,1)"),
    ("(0,1)", "[0,1)"),
    ("\\{1,2\\}", "\\{1,3\\}"),
    ("-3", "3"),
    ("1/3", "1/4"),
    ("\\sqrt{2}", "2"),
    ("5\\text{ cm}", "6"),
    ("", "5"),
    ("   ", "5"),
    (None, "5"),
    ("5", ""),
]


@pytest.mark.parametrize(("candidate", "reference"), EQUIVALENT)
def test_equivalent_forms_are_accepted(verifier, candidate, reference):
    assert verifier.verify(candidate, reference) is True


@pytest.mark.parametrize(("candidate", "reference"), NOT_EQUIVALENT)
def test_near_misses_are_rejected(verifier, candidate, reference):
    assert verifier.verify(candidate, reference) is False


def test_fast_path_skips_the_worker():
    with AnswerVerifier() as fresh:
        assert fresh.verify("1,000", "1000") is True
        assert fresh.verify("0.50", "1/2") is True
        assert fresh.verify("-3.0", "-3") is True
        assert fresh.verify("0.333", "1/3") is False  # off by more than the rounding: decided here
        assert fresh.verify("12", "21") is False
        assert fresh.verify(None, "21") is False
        assert fresh.counts == {"calls": 6, "fast_path": 5, "worker": 0, "timeouts": 0, "errors": 0}
        assert fresh._process is None  # never started


@pytest.mark.parametrize(
    ("candidate", "reference", "verdict"),
    [
        ("1/2", "0.5", True),
        ("2/4", "1/2", True),
        ("-7", "-7.000", True),
        (".5", "0.5", True),
        ("5.", "5", True),
        ("1,000.5", "1000.5", True),
        ("1", "2", False),
        ("1/3", "0.33", False),
        ("0.3333333", "1/3", None),  # unequal but within rounding: math-verify decides
        ("1,0000", "10000", None),  # not a thousands grouping
        ("50\\%", "50", None),
        ("5 cm", "5", None),
        ("$5", "5", None),
        ("1/0", "1", None),
        ("1" * 300, "1", None),  # too long to read as a number here
        ("\\text{x}", " \\text{x} ", True),  # the same text
    ],
)
def test_fast_verdict(candidate, reference, verdict):
    assert fast_verdict(candidate, reference) is verdict


@settings(max_examples=300)
@given(st.fractions(max_denominator=1000), st.fractions(max_denominator=1000))
def test_fast_path_matches_exact_fractions(a, b):
    text_a, text_b = f"{a.numerator}/{a.denominator}", f"{b.numerator}/{b.denominator}"
    assert fast_verdict(text_a, text_b) is (a == b)
    # The same value as a terminating decimal, when it has one, matches too.
    if 10**6 % a.denominator == 0:
        decimal = f"{'-' if a < 0 else ''}{abs(a.numerator) * (10**6 // a.denominator) // 10**6}." + (
            f"{abs(a.numerator) * (10**6 // a.denominator) % 10**6:06d}"
        )
        assert Fraction(decimal) == a
        assert fast_verdict(decimal, text_a) is True


def test_timeout_kills_and_restarts_the_worker(verifier):
    assert verifier.verify("\\sqrt{4}", "2") is True  # the shared worker is up
    first = verifier._process.pid
    before = dict(verifier.counts)
    start = time.perf_counter()
    assert verifier.request({"op": "sleep", "seconds": 30}, timeout_s=0.3) is None  # a hanging worker
    assert time.perf_counter() - start < 3.0
    assert verifier.counts["timeouts"] == before["timeouts"] + 1
    assert verifier._process is None  # killed
    assert verifier.verify("\\sqrt{9}", "3") is True  # a new worker answers
    assert verifier._process.pid != first
    assert verifier.counts["errors"] == before["errors"]


def test_a_hanging_verification_returns_false(verifier, monkeypatch):
    assert verifier.verify("\\sqrt{4}", "2") is True  # the worker is up: only the request is timed
    before = dict(verifier.counts)
    real_request = verifier.request

    def hang(payload, *, timeout_s=None):
        # The worker sleeps instead of verifying: as if sympy never came back.
        return real_request({"op": "sleep", "seconds": 30}, timeout_s=timeout_s)

    monkeypatch.setattr(verifier, "request", hang)
    start = time.perf_counter()
    assert verifier.verify("\\sqrt{9}", "3", timeout_s=0.3) is False
    assert time.perf_counter() - start < 3.0
    assert verifier.counts["timeouts"] == before["timeouts"] + 1
    monkeypatch.undo()
    assert verifier.verify("\\sqrt{9}", "3") is True


def test_a_worker_crash_counts_as_an_error(verifier):
    before = dict(verifier.counts)
    assert verifier.request({"op": "exit"}) is None
    assert verifier.counts["errors"] == before["errors"] + 1
    assert verifier.verify("\\frac{6}{4}", "\\frac{3}{2}") is True  # restarted
    pid = verifier._process.pid
    assert verifier.request({"op": "nonsense"}) is None  # an error reply is not a crash
    assert verifier.counts["errors"] == before["errors"] + 2
    assert verifier.verify("\\pi", "\\pi + 0") is True
    assert verifier._process.pid == pid


def test_a_forked_child_starts_its_own_worker(verifier):
    assert verifier.verify("\\sqrt{4}", "2") is True
    inherited = verifier._process
    verifier._owner_pid = -1  # as seen from a child forked after the worker started
    try:
        assert verifier.verify("\\sqrt{9}", "3") is True
        assert verifier._process.pid != inherited.pid
        assert inherited.poll() is None  # the parent's worker is left alone
    finally:
        inherited.kill()
        inherited.wait()
        inherited.stdin.close()
        inherited.stdout.close()


def test_overlong_answers_are_rejected_without_the_worker():
    with AnswerVerifier() as fresh:
        assert fresh.verify("1" * (verify_module.MAX_ANSWER_CHARS + 1), "1") is False
        assert fresh.verify("1", "\\sqrt{1}" * 2000) is False
        assert fresh._process is None


def test_answers_agree_is_symmetric_and_needs_both():
    assert answers_agree("x=2", "2") is True
    assert answers_agree("2", "x=2") is True
    assert answers_agree("\\frac{1}{2}", "0.5") is True
    assert answers_agree("3", "x=2") is False
    assert answers_agree(None, "2") is False
    assert answers_agree("2", None) is False
    assert answers_agree(None, None) is False


def test_default_verifier_counts():
    verifier = verify_module.default_verifier()
    before = dict(verifier.counts)
    assert verify_answer("\\dfrac{3}{4}", "0.75") is True
    assert verify_answer("0.75", "3/4") is True
    assert verifier.counts["calls"] == before["calls"] + 2
    assert verifier.counts["fast_path"] == before["fast_path"] + 1
    assert verifier.counts["worker"] == before["worker"] + 1


def test_callable_from_threads():
    results: dict[int, bool] = {}
    cases = [("\\frac{1}{2}", "0.5", True), ("[0,1)", "[0,1]", False), ("\\{1,2\\}", "\\{2,1\\}", True)] * 3

    def run(index, candidate, reference):
        results[index] = verify_answer(candidate, reference)

    threads = [threading.Thread(target=run, args=(i, c, r)) for i, (c, r, _) in enumerate(cases)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == {i: expected for i, (_, _, expected) in enumerate(cases)}


def test_callable_from_asyncio_to_thread():
    async def main():
        return await asyncio.gather(
            asyncio.to_thread(verify_answer, "\\dfrac12", "1/2"),
            asyncio.to_thread(verify_answer, "x=2", "3"),
            asyncio.to_thread(answers_agree, "2", "x=2"),
        )

    assert asyncio.run(main()) == [True, False, True]


def test_bad_argument_types_are_named():
    with pytest.raises(TypeError, match="`reference` must be a string, got int"):
        verify_answer("1", 1)
    with pytest.raises(TypeError, match="`candidate` must be a string or None, got float"):
        verify_answer(0.5, "1/2")
    with pytest.raises(ValueError, match="`timeout_s` must be positive"):
        AnswerVerifier(timeout_s=0)
