"""Is a candidate final answer equivalent to the reference? Exact for plain numbers, math-verify otherwise.

:func:`verify_answer` decides in this order:

1. No candidate (``None``), a blank candidate or reference, or one longer than :data:`MAX_ANSWER_CHARS`:
   ``False``.
2. **Same text**: identical after collapsing runs of blanks: ``True`` (math-verify can fail to parse
   a text answer such as ``\\text{Evelyn}`` against itself).
3. **Fast path** (no math-verify, no worker): both are plain rational numbers: an optional ``-``, then an
   integer (thousands may be grouped by commas, ``1,000``), a decimal (``0.5``, ``.5``, ``5.``) or
   ``p/q`` of integers. These compare exactly (``1/2 == 0.5 == 0.50``, ``-3 == -3.0``), with
   math-verify's one leniency: when a decimal is involved, math-verify compares after rounding to 6
   decimal places (``0.3333333`` matches ``1/3``, ``0.333`` does not). Pairs that differ by more than
   ``1e-5`` are rejected here; closer unequal pairs go to math-verify, so both paths agree. Anything else
   (LaTeX, ``$``, units, ``%``, sets, intervals, equations, expressions) skips the fast path.
4. **math-verify** (``math_verify.parse`` + ``math_verify.verify``, the reference as gold): each text is
   parsed as ``\\boxed{text}`` (math-verify's boxed extraction normalises units, ``\\text{}``, ``\\dfrac``,
   ``\\$``, thousands commas, ``%``), falling back to ``$text$`` and then the bare text when that finds
   nothing. Run in a **pool of worker processes** (:data:`DEFAULT_WORKERS`, each a persistent
   ``python .../verify.py --worker`` talking JSON lines over pipes, started on first use; it never
   re-imports the caller's ``__main__`` and needs no ``fork`` of a threaded trainer). math-verify's own
   timeout uses ``SIGALRM``, which only works in a main thread, so the workers disable it and the caller
   enforces ``timeout_s`` instead.

The pool. A call leases one idle worker (or starts one while fewer than ``workers`` run; with all of them
busy it waits for the first to come back), sends its request and waits for the reply until **its own
deadline**, ``timeout_s`` after the request was sent: waiting for a free worker and starting one are not
counted, so another caller's slow answer never makes this answer late or wrong. Past the deadline the worker
is killed, the answer counts as ``False``, and the call is counted (``timeouts``) and logged; a slow answer
(a power tower such as ``9^{9^{9^{9}}}``, thousands of nested parentheses) thus holds one worker for at most
``timeout_s`` while the others keep answering. A worker found dead (killed from outside, crashed) is replaced
by a fresh one on its next lease; one that dies during a request counts as an error and ``False``. Any
thread (or ``asyncio.to_thread``) may call in; no lock is held while a worker computes. A forked child
process leaves its parent's workers alone and starts its own.

:func:`answers_agree` asks whether two candidate answers agree (both present, and either verifies against
the other, since math-verify's ``verify`` is not symmetric for equations such as ``x=2`` vs ``2``).
:func:`check_answer` is either question with how it was decided (a :class:`Check`: the verdict, and
``timeout`` when the deadline passed), which the environment uses to label and count timed-out checks.
:class:`AnswerVerifier` holds one pool and counts what happened (``calls``, ``fast_path``, ``worker``,
``timeouts``, ``errors``, ``started`` workers); :func:`verify_answer` uses a module-level one
(:func:`default_verifier`), closed at interpreter exit.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import re
import select
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["CHECK_OUTCOMES", "DEFAULT_WORKERS", "MAX_ANSWER_CHARS", "STARTUP_TIMEOUT_S", "AnswerVerifier", "Check",
           "answers_agree", "check_answer", "default_verifier", "fast_verdict", "verify_answer"]

logger = logging.getLogger(__name__)

#: Seconds a new worker may take to import math-verify (sympy) and say it is ready.
STARTUP_TIMEOUT_S = 120.0
#: Worker processes of a verifier: a slow answer holds one, the others keep answering.
DEFAULT_WORKERS = 2
#: Longest answer verified at all: a longer "final answer" is junk, and parsing it could only time out.
MAX_ANSWER_CHARS = 10_000
#: How a check was decided (:attr:`Check.outcome`): not at all (no, blank or overlong text), without a
#: worker, by a worker, past its deadline, or a worker failure.
CHECK_OUTCOMES: tuple[str, ...] = ("skipped", "fast_path", "worker", "timeout", "error")
#: Longest text the fast path reads as a number (longer numbers go to math-verify).
_FAST_PATH_MAX_CHARS = 200
#: Fast-path pairs closer than this (with a decimal involved) are left to math-verify's rounding.
_FAST_PATH_TOLERANCE = Fraction(1, 10**5)
#: Characters of an answer a log line quotes.
_LOGGED_CHARS = 80

_INTEGER = r"(?:\d{1,3}(?:,\d{3})+|\d+)"
_NUMBER = re.compile(
    rf"(?P<sign>-?)(?:(?P<p>{_INTEGER})/(?P<q>\d+)|(?P<dec>{_INTEGER}\.\d*|\.\d+)|(?P<int>{_INTEGER}))"
)


def _plain_number(text: str) -> tuple[Fraction, bool] | None:
    """``(value, has a decimal point)`` when ``text`` is a plain rational number, else None."""
    if len(text) > _FAST_PATH_MAX_CHARS:
        return None
    match = _NUMBER.fullmatch(text)
    if match is None:
        return None
    sign = -1 if match.group("sign") else 1
    if match.group("p") is not None:
        denominator = int(match.group("q"))
        if denominator == 0:
            return None  # let math-verify say what 1/0 is
        return sign * Fraction(int(match.group("p").replace(",", "")), denominator), False
    if match.group("dec") is not None:
        return sign * Fraction(match.group("dec").replace(",", "")), True
    return sign * Fraction(int(match.group("int").replace(",", ""))), False


def _collapse(text: str) -> str:
    return " ".join(text.split())


def fast_verdict(candidate: str, reference: str) -> bool | None:
    """The verdict without math-verify (steps 2 and 3 of the module docstring), or None to ask math-verify."""
    candidate, reference = _collapse(candidate), _collapse(reference)
    if candidate == reference:
        return True
    a, b = _plain_number(candidate), _plain_number(reference)
    if a is None or b is None:
        return None
    (x, x_decimal), (y, y_decimal) = a, b
    if x == y:
        return True
    if not (x_decimal or y_decimal) or abs(x - y) > _FAST_PATH_TOLERANCE:
        return False
    return None  # unequal but within math-verify's rounding: its call


@dataclass(frozen=True)
class Check:
    """One answer check: the ``verdict`` and how it was reached (``outcome``, one of :data:`CHECK_OUTCOMES`;
    ``timeout`` and ``error`` always come with ``verdict=False``)."""

    verdict: bool
    outcome: str

    @property
    def timed_out(self) -> bool:
        return self.outcome == "timeout"


def _quoted(text: str) -> str:
    return repr(text if len(text) <= _LOGGED_CHARS else text[: _LOGGED_CHARS - 3] + "...")


class _Worker:
    """One math-verify worker process behind its pipes. Not thread-safe: the pool leases it to one caller at
    a time, and only that caller reads, writes or closes its pipes."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.buffer = b""
        self.next_id = 0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, startup_timeout_s: float) -> None:
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        self.process = subprocess.Popen(
            # Run as a script, not ``-m``: the package's ``__init__`` (and whatever it imports) stays out.
            [sys.executable, os.path.abspath(__file__), "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # inherited: an import error or a crash in the worker stays visible
            env=env,
            close_fds=True,
        )
        self.buffer = b""
        try:
            ready = self.receive(time.monotonic() + startup_timeout_s)
        except _WorkerTimeout:
            raise _WorkerDied(f"the math-verify worker did not start in {startup_timeout_s:g} s") from None
        if ready.get("ready") is not True:
            raise _WorkerDied(f"the math-verify worker sent {ready!r} instead of its ready line")

    def call(self, payload: dict, deadline: float) -> dict:
        """Send ``payload`` (numbered) and return the reply to it; :class:`_WorkerTimeout` past ``deadline``."""
        assert self.process is not None and self.process.stdin is not None
        self.next_id += 1
        self.process.stdin.write(json.dumps({**payload, "id": self.next_id}).encode() + b"\n")
        self.process.stdin.flush()
        reply = self.receive(deadline)
        if reply.get("id") != self.next_id:
            raise _WorkerDied(f"the math-verify worker answered request {reply.get('id')!r}, not {self.next_id}")
        return reply

    def receive(self, deadline: float) -> dict:
        assert self.process is not None and self.process.stdout is not None
        fd = self.process.stdout.fileno()
        poller = select.poll()  # not select.select: a trainer's descriptors may exceed FD_SETSIZE
        poller.register(fd, select.POLLIN)
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _WorkerTimeout
            if not poller.poll(max(1, int(left * 1000) + 1)):
                if time.monotonic() >= deadline:
                    raise _WorkerTimeout
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise _WorkerDied(f"the math-verify worker exited (code {self.process.poll()})")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def kill(self) -> None:
        """Kill the process only (safe while its leaseholder reads the pipes: it then reads end-of-file)."""
        process = self.process  # read once: the leaseholder may be stopping it right now
        if process is not None and process.poll() is None:
            process.kill()

    def stop(self) -> None:
        """Kill the process (it may be stuck in sympy: no polite shutdown), reap it and close the pipes."""
        process, self.process, self.buffer = self.process, None, b""
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


class _WorkerTimeout(Exception):
    pass


class _WorkerDied(Exception):
    pass


def _seconds(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"`{name}` must be a finite number of seconds > 0, got {value!r}")
    return float(value)


class AnswerVerifier:
    """A pool of math-verify worker processes plus counters; thread-safe. See the module docstring.

    ``timeout_s``: the default deadline of one check (a call may give its own); ``startup_timeout_s``: how
    long a new worker may take to get ready (not part of any deadline); ``workers``: the pool's size.
    """

    def __init__(self, *, timeout_s: float = 5.0, startup_timeout_s: float = STARTUP_TIMEOUT_S,
                 workers: int = DEFAULT_WORKERS):
        self.timeout_s = _seconds(timeout_s, "timeout_s")
        self.startup_timeout_s = _seconds(startup_timeout_s, "startup_timeout_s")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"`workers` must be an integer >= 1, got {workers!r}")
        self.workers = workers
        self.counts: dict[str, int] = dict.fromkeys(
            ("calls", "fast_path", "worker", "timeouts", "errors", "started"), 0)
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []  # started, not leased
        self._leased: set[_Worker] = set()  # leased to a caller (started or starting)
        self._owner_pid = os.getpid()
        _VERIFIERS.add(self)

    # ---- public -----------------------------------------------------------------------------------

    def verify(self, candidate: str | None, reference: str, *, timeout_s: float | None = None) -> bool:
        """True iff ``candidate`` is equivalent to ``reference`` (False on a timeout or a worker failure)."""
        return self.check(candidate, reference, timeout_s=timeout_s).verdict

    def agree(self, a: str | None, b: str | None, *, timeout_s: float | None = None) -> bool:
        """True iff both answers are present and either verifies against the other."""
        return self.check(a, b, symmetric=True, timeout_s=timeout_s).verdict

    def check(self, candidate: str | None, reference: str | None, *, symmetric: bool = False,
              timeout_s: float | None = None) -> Check:
        """:meth:`verify` (``symmetric``: :meth:`agree`) with how it was decided."""
        if reference is not None and not isinstance(reference, str):
            raise TypeError(f"`reference` must be a string, got {type(reference).__name__}")
        if candidate is not None and not isinstance(candidate, str):
            raise TypeError(f"`candidate` must be a string or None, got {type(candidate).__name__}")
        limit = self.timeout_s if timeout_s is None else _seconds(timeout_s, "timeout_s")
        self._count("calls")
        if candidate is None or reference is None or not candidate.strip() or not reference.strip():
            return Check(False, "skipped")
        if len(candidate) > MAX_ANSWER_CHARS or len(reference) > MAX_ANSWER_CHARS:
            return Check(False, "skipped")
        verdict = fast_verdict(candidate, reference)
        if verdict is not None:
            self._count("fast_path")
            return Check(verdict, "fast_path")
        request = {"op": "verify", "candidate": candidate, "reference": reference, "symmetric": symmetric}
        reply, outcome = self._call(request, limit, what=f"the answer {_quoted(candidate)}")
        return Check(bool(reply is not None and reply.get("result") is True), outcome)

    def request(self, payload: dict, *, timeout_s: float | None = None) -> dict | None:
        """Send one request to a worker of the pool; its reply, or None after a timeout or a worker failure.

        Besides ``{"op": "verify", ...}`` the worker knows ``{"op": "sleep", "seconds": s}`` and
        ``{"op": "exit"}``, which tests use to hang or crash it on purpose.
        """
        return self._call(payload, timeout_s, what=f"request {payload.get('op')!r}")[0]

    def start(self) -> None:
        """Start the pool's missing workers now (they otherwise start on first use), one after the other."""
        with self._cond:
            self._forget_if_forked()
            fresh = [_Worker() for _ in range(self.workers - len(self._idle) - len(self._leased))]
            self._leased.update(fresh)
        for worker in fresh:
            try:
                self._start(worker)
            except (OSError, ValueError, _WorkerDied) as exc:
                self._count("errors")
                logger.warning("a math-verify worker did not start: %s", exc)
                self._give_back(worker, keep=False)
                raise RuntimeError(f"a math-verify worker did not start: {exc}") from exc
            self._give_back(worker, keep=True)

    @property
    def pids(self) -> list[int]:
        """Process ids of the pool's live workers, sorted."""
        with self._cond:
            workers = [*self._idle, *self._leased]
        processes = [w.process for w in workers]
        return sorted(p.pid for p in processes if p is not None and p.poll() is None)

    def close(self) -> None:
        """Stop every worker; a later call starts new ones. A call in flight loses its worker (counted as an
        error, the answer ``False``)."""
        with self._cond:
            idle, leased = self._idle, list(self._leased)
            self._idle, self._leased = [], set()
            self._cond.notify_all()
        for worker in idle:
            worker.stop()
        for worker in leased:
            worker.kill()  # its caller reads end-of-file and closes the pipes itself

    def __enter__(self) -> AnswerVerifier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- internals ----------------------------------------------------------------------------------

    def _count(self, key: str) -> int:
        with self._cond:
            self.counts[key] += 1
            return self.counts[key]

    def _call(self, payload: dict, timeout_s: float | None, what: str) -> tuple[dict | None, str]:
        """One request on a leased worker: ``(reply, "worker")``, or ``(None, "timeout" | "error")``."""
        limit = self.timeout_s if timeout_s is None else _seconds(timeout_s, "timeout_s")
        self._count("worker")
        worker = self._lease()
        try:
            if not worker.alive:
                self._start(worker)
            reply = worker.call(payload, time.monotonic() + limit)
        except _WorkerTimeout:
            total = self._count("timeouts")
            logger.warning("math-verify: %s took over %g s; it counts as wrong and its worker (pid %s) is "
                           "replaced (%d timeouts so far)", what, limit, _pid(worker), total)
            self._give_back(worker, keep=False)
            return None, "timeout"
        except (OSError, ValueError, _WorkerDied) as exc:
            total = self._count("errors")
            logger.warning("math-verify: %s failed, it counts as wrong (%d errors so far): %s", what, total, exc)
            self._give_back(worker, keep=False)
            return None, "error"
        if "error" in reply:  # math-verify raised: a "no" for this request, the worker is fine
            self._count("errors")
            self._give_back(worker, keep=True)
            return None, "error"
        self._give_back(worker, keep=True)
        return reply, "worker"

    def _lease(self) -> _Worker:
        """An idle worker, else a new (unstarted) one while fewer than ``workers`` exist, else wait."""
        with self._cond:
            while True:
                self._forget_if_forked()
                if self._idle or len(self._leased) < self.workers:
                    break
                self._cond.wait()
            worker = self._idle.pop() if self._idle else _Worker()
            self._leased.add(worker)
            return worker

    def _give_back(self, worker: _Worker, *, keep: bool) -> None:
        with self._cond:
            returned = worker in self._leased  # False: closed (or forked) while it was out
            self._leased.discard(worker)
            if keep and returned and worker.alive:
                self._idle.append(worker)
                worker = None
            self._cond.notify()
        if worker is not None:
            worker.stop()

    def _start(self, worker: _Worker) -> None:
        if worker.process is not None:  # it died while idle: say so, then replace it
            logger.warning("math-verify worker pid %s exited (code %s); starting a new one",
                           worker.process.pid, worker.process.poll())
            worker.stop()
        self._count("started")
        worker.start(self.startup_timeout_s)

    def _forget_if_forked(self) -> None:
        # A forked child inherited the parent's workers and pipes: leave them to the parent (caller holds the lock).
        if self._owner_pid != os.getpid():
            self._idle, self._leased, self._owner_pid = [], set(), os.getpid()


def _pid(worker: _Worker) -> int | None:
    return None if worker.process is None else worker.process.pid


# A child forked while another thread held a verifier's lock would wait on it forever: give every verifier a
# fresh lock (and no workers: they are the parent's) in the child.
_VERIFIERS: weakref.WeakSet[AnswerVerifier] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for verifier in list(_VERIFIERS):
        verifier._cond = threading.Condition()
        verifier._idle, verifier._leased, verifier._owner_pid = [], set(), os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_default: AnswerVerifier | None = None
_default_lock = threading.Lock()


def default_verifier() -> AnswerVerifier:
    """The module-level verifier behind :func:`verify_answer` (created on first use, closed at exit)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = AnswerVerifier()
            atexit.register(_default.close)
        return _default


def verify_answer(candidate: str | None, reference: str, *, timeout_s: float = 5.0) -> bool:
    """True iff ``candidate`` is equivalent to ``reference`` (see the module docstring)."""
    return default_verifier().verify(candidate, reference, timeout_s=timeout_s)


def answers_agree(a: str | None, b: str | None, *, timeout_s: float = 5.0) -> bool:
    """True iff both answers are present and equivalent (either verifies against the other)."""
    return default_verifier().agree(a, b, timeout_s=timeout_s)


def check_answer(candidate: str | None, reference: str | None, *, symmetric: bool = False,
                 timeout_s: float = 5.0) -> Check:
    """:func:`verify_answer` (``symmetric``: :func:`answers_agree`) with how it was decided (a :class:`Check`)."""
    return default_verifier().check(candidate, reference, symmetric=symmetric, timeout_s=timeout_s)


# ---- the worker process -------------------------------------------------------------------------------


# Runs in the worker process; the tests drive it through its pipes.
def _worker_main() -> None:
    import functools
    import logging

    # Keep the protocol channel private: anything a library prints goes to stderr, not into the pipe.
    channel = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    logging.disable(logging.WARNING)  # math-verify warns once that its own timeout is off: intended

    from math_verify import parse, verify

    @functools.lru_cache(maxsize=4096)
    def parsed(text: str) -> tuple:
        wrappings = [f"\\boxed{{{text}}}"]
        wrappings.append(text if "$" in text else f"${text}$")
        wrappings.append(text)
        for wrapped in wrappings:
            result = parse(wrapped, parsing_timeout=None)
            if result:
                return tuple(result)
        return ()

    def equivalent(gold: str, target: str) -> bool:
        g, t = parsed(gold), parsed(target)
        return bool(g and t and verify(list(g), list(t), timeout_seconds=None))

    # Warm up (the LaTeX grammar loads on first use, ~1 s) before saying ready: start-up is not timed.
    equivalent("\\frac{1}{2}", "0.5")
    channel.write(b'{"ready": true}\n')
    for raw in sys.stdin.buffer:
        request = json.loads(raw)
        reply: dict = {"id": request.get("id")}
        try:
            op = request.get("op")
            if op == "verify":
                candidate, reference = request["candidate"], request["reference"]
                result = equivalent(reference, candidate)
                if not result and request.get("symmetric"):
                    result = equivalent(candidate, reference)
                reply["result"] = result
            elif op == "sleep":
                time.sleep(float(request["seconds"]))
                reply["result"] = True
            elif op == "exit":
                os._exit(3)
            else:
                reply["error"] = f"unknown op {op!r}"
        except Exception as exc:  # a math-verify failure is a "no" for this request, not the worker's end
            reply["error"] = f"{type(exc).__name__}: {exc}"[:500]
        channel.write(json.dumps(reply).encode() + b"\n")


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    # Python put this file's folder first on sys.path: its sibling modules must not shadow real ones.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != _here]
    _worker_main()
