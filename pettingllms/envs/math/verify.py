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
   nothing. Run in a **worker process**: math-verify's own timeout uses ``SIGALRM``, which only works in
   a main thread, so the worker disables it and the caller enforces ``timeout_s`` instead: a worker that
   has not answered in time is killed (and restarted on the next call), and the answer counts as
   ``False``. A worker that dies counts as an error and ``False`` too. The worker is one persistent
   ``python .../verify.py --worker`` process (started lazily; its start-up is not counted in
   ``timeout_s``) talking JSON lines over pipes; it never re-imports the caller's ``__main__`` and needs
   no ``fork`` of a threaded trainer. Requests are serialised by a lock, so any thread (or
   ``asyncio.to_thread``) may call in; a forked child process starts a worker of its own.

:func:`answers_agree` asks whether two candidate answers agree (both present, and either verifies against
the other, since math-verify's ``verify`` is not symmetric for equations such as ``x=2`` vs ``2``).
:class:`AnswerVerifier` holds one worker and counts what happened (``calls``, ``fast_path``, ``worker``,
``timeouts``, ``errors``); :func:`verify_answer` uses a module-level one, closed at interpreter exit.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from fractions import Fraction

__all__ = ["MAX_ANSWER_CHARS", "STARTUP_TIMEOUT_S", "AnswerVerifier", "answers_agree", "default_verifier", "fast_verdict", "verify_answer"]

#: Seconds a new worker may take to import math-verify (sympy) and say it is ready.
STARTUP_TIMEOUT_S = 120.0
#: Longest answer verified at all: a longer "final answer" is junk, and parsing it could only time out.
MAX_ANSWER_CHARS = 10_000
#: Longest text the fast path reads as a number (longer numbers go to math-verify).
_FAST_PATH_MAX_CHARS = 200
#: Fast-path pairs closer than this (with a decimal involved) are left to math-verify's rounding.
_FAST_PATH_TOLERANCE = Fraction(1, 10**5)

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


class AnswerVerifier:
    """One math-verify worker process plus counters; thread-safe. See the module docstring."""

    def __init__(self, *, timeout_s: float = 5.0, startup_timeout_s: float = STARTUP_TIMEOUT_S):
        if timeout_s <= 0:
            raise ValueError(f"`timeout_s` must be positive, got {timeout_s}")
        self.timeout_s = float(timeout_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self.counts: dict[str, int] = {"calls": 0, "fast_path": 0, "worker": 0, "timeouts": 0, "errors": 0}
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._next_id = 0
        self._owner_pid = os.getpid()

    # ---- public -----------------------------------------------------------------------------------

    def verify(self, candidate: str | None, reference: str, *, timeout_s: float | None = None) -> bool:
        """True iff ``candidate`` is equivalent to ``reference`` (False on a timeout or a worker failure)."""
        return self._decide(candidate, reference, symmetric=False, timeout_s=timeout_s)

    def agree(self, a: str | None, b: str | None, *, timeout_s: float | None = None) -> bool:
        """True iff both answers are present and either verifies against the other."""
        return self._decide(a, b, symmetric=True, timeout_s=timeout_s)

    def close(self) -> None:
        """Stop the worker; a later call starts a new one."""
        with self._lock:
            self._stop()

    def __enter__(self) -> AnswerVerifier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- internals ----------------------------------------------------------------------------------

    def _decide(
        self, candidate: str | None, reference: str | None, *, symmetric: bool, timeout_s: float | None
    ) -> bool:
        if reference is not None and not isinstance(reference, str):
            raise TypeError(f"`reference` must be a string, got {type(reference).__name__}")
        if candidate is not None and not isinstance(candidate, str):
            raise TypeError(f"`candidate` must be a string or None, got {type(candidate).__name__}")
        with self._lock:
            self.counts["calls"] += 1
        if candidate is None or reference is None or not candidate.strip() or not reference.strip():
            return False
        if len(candidate) > MAX_ANSWER_CHARS or len(reference) > MAX_ANSWER_CHARS:
            return False
        verdict = fast_verdict(candidate, reference)
        if verdict is not None:
            with self._lock:
                self.counts["fast_path"] += 1
            return verdict
        request = {"op": "verify", "candidate": candidate, "reference": reference, "symmetric": symmetric}
        answer = self.request(request, timeout_s=timeout_s)
        return bool(answer is not None and answer.get("result") is True)

    def request(self, payload: dict, *, timeout_s: float | None = None) -> dict | None:
        """Send one request to the worker; its reply, or None after a timeout or a worker failure.

        Besides ``{"op": "verify", ...}`` the worker knows ``{"op": "sleep", "seconds": s}`` and
        ``{"op": "exit"}``, which tests use to hang or crash it on purpose.
        """
        limit = self.timeout_s if timeout_s is None else float(timeout_s)
        with self._lock:
            self.counts["worker"] += 1
            try:
                self._ensure_started()
                self._next_id += 1
                payload = {**payload, "id": self._next_id}
                self._send(payload)
                reply = self._receive(time.monotonic() + limit)
            except _WorkerTimeout:
                self.counts["timeouts"] += 1
                self._stop()
                return None
            except (OSError, ValueError, _WorkerDied):
                self.counts["errors"] += 1
                self._stop()
                return None
            if reply.get("id") != payload["id"] or "error" in reply:
                self.counts["errors"] += 1
                if reply.get("id") != payload["id"]:
                    self._stop()  # out of step: a fresh worker is the only safe state
                return None
            return reply

    def _ensure_started(self) -> None:
        if self._owner_pid != os.getpid():
            # A forked child inherited the parent's worker and pipes: leave them to the parent.
            self._process, self._buffer, self._owner_pid = None, b"", os.getpid()
        if self._process is not None and self._process.poll() is None:
            return
        self._stop()
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        self._process = subprocess.Popen(
            # Run as a script, not ``-m``: the package's ``__init__`` (and whatever it imports) stays out.
            [sys.executable, os.path.abspath(__file__), "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # inherited: an import error or a crash in the worker stays visible
            env=env,
            close_fds=True,
        )
        self._buffer = b""
        try:
            ready = self._receive(time.monotonic() + self.startup_timeout_s)
        except _WorkerTimeout:
            raise _WorkerDied("the math-verify worker did not start in time") from None
        if ready.get("ready") is not True:
            raise _WorkerDied(f"the math-verify worker sent {ready!r} instead of its ready line")

    def _send(self, payload: dict) -> None:
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write(json.dumps(payload).encode() + b"\n")
        self._process.stdin.flush()

    def _receive(self, deadline: float) -> dict:
        assert self._process is not None and self._process.stdout is not None
        fd = self._process.stdout.fileno()
        poller = select.poll()  # not select.select: a trainer's descriptors may exceed FD_SETSIZE
        poller.register(fd, select.POLLIN)
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _WorkerTimeout
            if not poller.poll(max(1, int(left * 1000) + 1)):
                if time.monotonic() >= deadline:
                    raise _WorkerTimeout
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise _WorkerDied("the math-verify worker exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _stop(self) -> None:
        process, self._process = self._process, None
        self._buffer = b""
        if process is None:
            return
        if process.poll() is None:
            process.kill()  # it may be stuck in sympy: no polite shutdown
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
