"""Answer verification: equivalent forms accepted, near misses rejected, timeouts, crashes, threads, and the
worker pool: a slow check holds one worker while the others answer, each call has its own deadline (waiting
for a worker is not part of it), a killed worker is replaced.

One pool of two workers serves most of the module (``verifier`` fixture, plus the module-level default that
:func:`verify_answer` uses); the timeout and crash tests replace workers, the pool tests make their own.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pettingllms.envs.math import verify as verify_module
from pettingllms.envs.math.verify import AnswerVerifier, Check, answers_agree, fast_verdict, verify_answer

#: An answer math-verify takes seconds to parse (measured: over 3 s), whatever the reference.
NESTED = "(" * 3000 + "1" + ")" * 3000


@pytest.fixture(scope="module")
def verifier():
    with AnswerVerifier(timeout_s=10.0, workers=2) as shared:
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
        assert fresh.counts == {"calls": 6, "fast_path": 5, "worker": 0, "timeouts": 0, "errors": 0, "started": 0}
        assert fresh.pids == []  # never started


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


def test_timeout_kills_and_replaces_the_worker(verifier):
    verifier.start()  # both workers up: only the request is timed
    first = verifier.pids
    before = dict(verifier.counts)
    start = time.perf_counter()
    assert verifier.request({"op": "sleep", "seconds": 30}, timeout_s=0.3) is None  # a hanging worker
    assert time.perf_counter() - start < 3.0
    assert verifier.counts["timeouts"] == before["timeouts"] + 1
    assert len(verifier.pids) == 1 and set(verifier.pids) < set(first)  # the hanging one was killed
    verifier.start()
    assert verifier.verify("\\sqrt{9}", "3") is True  # a new worker answers
    assert len(verifier.pids) == 2 and len(set(verifier.pids) - set(first)) == 1
    assert verifier.counts["errors"] == before["errors"]
    assert verifier.counts["started"] == before["started"] + 1


def test_a_slow_answer_times_out_counts_and_returns_false(verifier, caplog):
    verifier.start()
    before = dict(verifier.counts)
    start = time.perf_counter()
    with caplog.at_level("WARNING", logger=verify_module.__name__):
        assert verifier.check(NESTED, "1", timeout_s=0.5) == Check(False, "timeout")
    assert time.perf_counter() - start < 3.0
    assert verifier.counts["timeouts"] == before["timeouts"] + 1
    assert verifier.counts["worker"] == before["worker"] + 1 and verifier.counts["errors"] == before["errors"]
    assert "took over 0.5 s" in caplog.text and "counts as wrong" in caplog.text
    assert f"{before['timeouts'] + 1} timeouts so far" in caplog.text
    assert verifier.verify("\\sqrt{9}", "3") is True  # the pool still answers


def test_a_worker_crash_counts_as_an_error(verifier):
    before = dict(verifier.counts)
    assert verifier.request({"op": "exit"}) is None
    assert verifier.counts["errors"] == before["errors"] + 1
    assert verifier.verify("\\frac{6}{4}", "\\frac{3}{2}") is True  # replaced
    verifier.start()
    pids = verifier.pids
    assert verifier.request({"op": "nonsense"}) is None  # an error reply is not a crash
    assert verifier.counts["errors"] == before["errors"] + 2
    assert verifier.verify("\\pi", "\\pi + 0") is True
    assert verifier.pids == pids  # no worker was replaced


def test_a_forked_child_starts_its_own_workers(verifier):
    verifier.start()
    inherited = [w.process for w in verifier._idle]
    assert len(inherited) == 2
    verifier._owner_pid = -1  # as seen from a child forked after the workers started
    try:
        assert verifier.verify("\\sqrt{9}", "3") is True
        assert verifier.pids and not set(verifier.pids) & {p.pid for p in inherited}
        assert all(p.poll() is None for p in inherited)  # the parent's workers are left alone
    finally:
        for process in inherited:
            process.kill()
            process.wait()
            process.stdin.close()
            process.stdout.close()


def test_overlong_answers_are_rejected_without_the_worker():
    with AnswerVerifier() as fresh:
        assert fresh.check("1" * (verify_module.MAX_ANSWER_CHARS + 1), "1") == Check(False, "skipped")
        assert fresh.verify("1", "\\sqrt{1}" * 2000) is False
        assert fresh.pids == []


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


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="`reference` must be a string, got int"):
        verify_answer("1", 1)
    with pytest.raises(TypeError, match="`candidate` must be a string or None, got float"):
        verify_answer(0.5, "1/2")
    with pytest.raises(ValueError, match="`timeout_s` must be a finite number of seconds > 0, got 0"):
        AnswerVerifier(timeout_s=0)
    with pytest.raises(ValueError, match="`timeout_s` must be a finite number of seconds > 0, got -1"):
        verify_answer("1", "1", timeout_s=-1)  # checked before the fast path could answer
    with pytest.raises(ValueError, match="`workers` must be an integer >= 1, got 0"):
        AnswerVerifier(workers=0)


# ---- the pool ---------------------------------------------------------------------------------------


def _wait_until_leased(pool, count, limit_s=10.0):
    """Wait until ``count`` workers of ``pool`` are leased (a request is on its way)."""
    end = time.monotonic() + limit_s
    while len(pool._leased) < count:
        assert time.monotonic() < end, "the slow request never took a worker"
        time.sleep(0.01)


def _hang(pool, allowed_s, out):
    """A request that hangs its worker (it sleeps 30 s) under a deadline of ``allowed_s``."""
    start = time.perf_counter()
    out["reply"] = pool.request({"op": "sleep", "seconds": 30}, timeout_s=allowed_s)
    out["elapsed"] = time.perf_counter() - start


def test_a_slow_check_does_not_delay_a_concurrent_fast_one():
    with AnswerVerifier(workers=2) as pool:
        pool.start()
        slow: dict = {}
        thread = threading.Thread(target=_hang, args=(pool, 2.0, slow))
        thread.start()
        _wait_until_leased(pool, 1)
        start = time.perf_counter()
        # math-verify checks (no fast path), milliseconds each on a warm worker
        results = [pool.verify("\\sqrt{9}", "3"), pool.verify("[0,1)", "[0,1]"), pool.agree("x=2", "2")]
        fast_s = time.perf_counter() - start
        slow_still_running = thread.is_alive()
        thread.join(10)
    assert results == [True, False, True]
    assert fast_s < 1.0 and slow_still_running  # one worker served them while the other hung
    assert slow["reply"] is None and 2.0 <= slow["elapsed"] < 4.0
    assert pool.counts["timeouts"] == 1 and pool.counts["errors"] == 0 and pool.counts["worker"] == 4


def test_waiting_for_a_worker_is_not_part_of_a_calls_deadline():
    with AnswerVerifier(workers=1) as pool:
        pool.start()
        slow: dict = {}
        thread = threading.Thread(target=_hang, args=(pool, 1.5, slow))
        thread.start()
        _wait_until_leased(pool, 1)
        start = time.perf_counter()
        check = pool.check("\\sqrt{9}", "3", timeout_s=0.5)  # queued behind the hanging request
        waited_s = time.perf_counter() - start
        thread.join(10)
    # It waited past its own 0.5 s for the only worker, then got a fresh one and its right verdict.
    assert check == Check(True, "worker") and waited_s >= 1.0
    assert slow["reply"] is None and pool.counts["timeouts"] == 1 and pool.counts["started"] == 2


def test_a_killed_worker_is_replaced_and_the_next_call_succeeds(caplog):
    with AnswerVerifier(workers=2) as pool:
        pool.start()
        killed = pool.pids
        assert len(killed) == 2
        for worker in pool._idle:  # killed from outside (the OOM killer, an operator)
            os.kill(worker.process.pid, signal.SIGKILL)
            worker.process.wait(timeout=10)
        assert pool.pids == []
        with caplog.at_level("WARNING", logger=verify_module.__name__):
            assert pool.verify("\\sqrt{9}", "3") is True
            assert pool.verify("\\frac{6}{4}", "\\frac{3}{2}") is True
        assert len(pool.pids) == 1 and not set(pool.pids) & set(killed)
        assert pool.counts["errors"] == 0 and pool.counts["started"] == 3
        # the dead worker leased first was replaced and said so; the other still waits, idle and dead
        assert sum(f"pid {pid} exited (code -9)" in caplog.text for pid in killed) == 1


def test_many_threads_and_asyncio_share_the_pool():
    cases = [("\\frac{1}{2}", "0.5", True), ("[0,1)", "[0,1]", False), ("\\{1,2\\}", "\\{2,1\\}", True),
             ("x=2", "3", False)] * 3
    expected = [verdict for _, _, verdict in cases]
    with AnswerVerifier(workers=2) as pool:
        with ThreadPoolExecutor(max_workers=6) as threads:
            from_threads = list(threads.map(lambda case: pool.verify(case[0], case[1]), cases))

        async def gathered():
            return await asyncio.gather(*(asyncio.to_thread(pool.verify, c, r) for c, r, _ in cases))

        from_asyncio = asyncio.run(gathered())
        assert from_threads == expected and from_asyncio == expected
        assert pool.counts["started"] == 2 and len(pool.pids) == 2  # never more workers than the pool's size
        assert pool.counts["worker"] == 2 * len(cases) and pool.counts["errors"] == pool.counts["timeouts"] == 0
