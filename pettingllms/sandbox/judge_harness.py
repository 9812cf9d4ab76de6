"""Test harness that the judge runs inside the sandbox, and the output comparison it shares with the judge.

The judge (``judge.py``) sends this file's text to :meth:`SandboxPool.run` as the program and a JSON
payload on stdin: ``{"program": str, "tests": [{"stdin": str, "assertion": str | null}, ...],
"time_limit_s": float, "output_limit_bytes": int, "stderr_tail_bytes": int, "stop_on_failure": bool, "sweep": bool}`` (``sweep``: the run has its own pid
namespace, so the harness may kill every other process of it after each test).
Run as a script (standard library only: it runs as ``python -I main.py`` in the sandbox), it

1. writes the program to ``solution.py``, pre-imports modules solutions often use, makes itself
   non-dumpable (a test's process cannot open its file descriptors through ``/proc`` to forge results),
   and prints ``{"ready": true}``;
2. for each test forks a child from this warm process. The child gets the test's input as fd 0 and
   pipes as fd 1 and 2, fresh ``sys.std*`` objects, a fresh ``__main__`` module and ``sys.argv``,
   and runs the program (then the test's assertion code, if any) at the top level of this script, so
   that ``sys.exit``, uncaught exceptions, ``atexit`` and the flushing of ``print`` output are the
   interpreter's own, as in a normal run. The parent kills the child's process group at the time limit
   or when its output passes the cap;
3. prints one JSON line per test that ran: ``{"i": index, "kind": "exit" | "signal" | "timeout" |
   "output_limit", "code": int | null, "stdout": base64, "stderr": base64 (tail), "seconds": float}``.

Nothing expected by a stdin/stdout test is sent here: the trusted side compares outputs with
:func:`compare_output`. Assertion code must run next to the program, so a hostile program could read
or defeat it; the judge guards against accidents, not against a program built to fake an assertion.
"""

import base64
import json
import math
import os
import re
import select
import signal
import sys
import time

PROGRAM_FILE = "solution.py"
COMPARE_MODES = ("exact", "whitespace", "float")
FLOAT_TOLERANCE = 1e-6
# Only plain decimal numbers count as floats ("nan", "inf", "1_000" compare as text).
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\Z")


# --------------------------------------------------------------------------- output comparison (pure)
def _lines_of_tokens(text):
    """Whitespace-split tokens per line; trailing whitespace and trailing blank lines do not count."""
    lines = [line.split() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _tokens_match(actual, expected, tolerance):
    if actual == expected:
        return True
    if not (_NUMBER.match(actual) and _NUMBER.match(expected)):
        return False
    a, e = float(actual), float(expected)
    if not (math.isfinite(a) and math.isfinite(e)):
        return False
    return abs(a - e) <= tolerance or abs(a - e) <= tolerance * abs(e)


def compare_output(actual, expected, mode="float", tolerance=FLOAT_TOLERANCE):
    """Whether a program's stdout ``actual`` matches ``expected``.

    ``exact``: identical strings. ``whitespace``: the same tokens line by line, ignoring how much
    whitespace separates them, trailing whitespace and trailing blank lines. ``float``: as
    ``whitespace``, and two numeric tokens also match when they differ by at most ``tolerance``
    absolutely or relatively to the expected value (as the APPS and CodeContests judges do).
    """
    if mode not in COMPARE_MODES:
        raise ValueError(f"`mode` must be one of {list(COMPARE_MODES)}, got {mode!r}")
    if mode == "exact":
        return actual == expected
    got, want = _lines_of_tokens(actual), _lines_of_tokens(expected)
    if len(got) != len(want):
        return False
    for got_line, want_line in zip(got, want):
        if len(got_line) != len(want_line):
            return False
        if mode == "whitespace":
            if got_line != want_line:
                return False
        elif not all(_tokens_match(a, e, tolerance) for a, e in zip(got_line, want_line)):
            return False
    return True


# --------------------------------------------------------------------------- the harness (in the sandbox)
def _emit(record):
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _non_dumpable(value):
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, value, 0, 0, 0)  # PR_SET_DUMPABLE
    except Exception:  # noqa: BLE001 - hardening only; the pid namespace still bounds the run
        pass


def _stdin_fd(data):
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("stdin", 0)
    else:
        fd = os.open(".", os.O_TMPFILE | os.O_RDWR, 0o600)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _child_setup(stdin_fd, out_w, err_w, time_limit):
    """In the forked child: its own process group, the test's fds, a CPU limit near the time limit."""
    import resource

    os.setpgid(0, 0)
    os.dup2(stdin_fd, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    want = int(math.ceil(time_limit)) + 1
    if soft == resource.RLIM_INFINITY or soft > want:
        resource.setrlimit(resource.RLIMIT_CPU, (want, hard))
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # Python's own default at start-up


def _supervise(pid, out_r, err_r, start, time_limit, out_cap, tail):
    """Read the child's output until it ends, the time limit passes or the output passes the cap."""
    out, err, err_total = bytearray(), bytearray(), 0
    open_fds = [out_r, err_r]
    ended, exited_at, wstatus = None, None, None
    while open_fds:
        now = time.monotonic()
        if exited_at is None and now >= start + time_limit:
            ended = "timeout"
            break
        if exited_at is not None and now > exited_at + 0.05:
            break  # something the program started still holds its pipes
        ready, _, _ = select.select(open_fds, [], [], 0.05)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.remove(fd)
            elif fd == out_r:
                out += chunk
            else:
                err_total += len(chunk)
                err = (err + chunk)[-tail:]
        if len(out) > out_cap or err_total > out_cap:
            ended = "output_limit"
            break
        if exited_at is None and open_fds:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                exited_at, wstatus = time.monotonic(), status
    seconds = time.monotonic() - start
    try:
        os.killpg(pid, signal.SIGKILL)  # the test's process group: the child and what it started
    except OSError:
        pass
    if wstatus is None:
        _, wstatus = os.waitpid(pid, 0)
    if ended is None:
        if os.WIFSIGNALED(wstatus):
            sig = os.WTERMSIG(wstatus)
            ended = "timeout" if sig == signal.SIGXCPU else "signal"
            code = sig
        else:
            ended, code = "exit", os.WEXITSTATUS(wstatus)
    else:
        code = None
    return {"kind": ended, "code": code, "stdout": base64.b64encode(bytes(out[:out_cap])).decode(),
            "stderr": base64.b64encode(bytes(err)).decode(), "seconds": round(seconds, 6)}


def _serve(payload):
    """The parent's loop (never returns there). Returns in a forked child: the assertion to run or None."""
    time_limit = float(payload["time_limit_s"])
    out_cap, tail = int(payload["output_limit_bytes"]), int(payload["stderr_tail_bytes"])
    for index, test in enumerate(payload["tests"]):
        stdin_fd = _stdin_fd(test["stdin"].encode("utf-8"))
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                _child_setup(stdin_fd, out_w, err_w, time_limit)
            except BaseException:  # noqa: BLE001 - never return into the parent's loop
                os._exit(121)
            _non_dumpable(1)
            return test.get("assertion")
        try:
            os.setpgid(pid, pid)  # also here: no race with the kill below
        except OSError:
            pass
        for fd in (stdin_fd, out_w, err_w):
            os.close(fd)
        record = _supervise(pid, out_r, err_r, start, time_limit, out_cap, tail)
        os.close(out_r)
        os.close(err_r)
        if payload.get("sweep"):
            # In the run's own pid namespace: kill whatever the test left outside its process group
            # (a setsid() daemon) so that it cannot reach the next test. Never without one: -1 would
            # then mean every process of this uid on the host.
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
        record["i"] = index
        _emit(record)
        if payload["stop_on_failure"] and not (record["kind"] == "exit" and record["code"] == 0):
            break
    sys.stdout.flush()
    os._exit(0)


def _fresh_main(path):
    """Fresh stdio objects, ``sys.argv`` and ``__main__`` module, as the interpreter makes them."""
    import builtins
    import types

    old = sys.stdout
    sys.stdin = sys.__stdin__ = open(0, encoding=old.encoding, newline="\n", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding=old.encoding, errors=old.errors, newline="\n",
                                       closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, encoding=old.encoding,
                                       errors="backslashreplace", newline="\n", closefd=False)
    sys.argv = [path]
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__builtins__ = builtins
    module.__cached__ = None
    sys.modules["__main__"] = module
    harness_file = __file__

    def excepthook(kind, value, tb):  # hide the harness's frames: the traceback starts in the program
        while tb is not None and tb.tb_frame.f_code.co_filename == harness_file:
            tb = tb.tb_next
        sys.__excepthook__(kind, value.with_traceback(tb), tb)  # 3.12 prints value.__traceback__

    sys.excepthook = excepthook
    return module.__dict__


def _run_program(namespace, source, path, assertion):
    """Run the program (and the assertion) as ``python path`` would; returns the exit status."""
    try:
        exec(compile(source, path, "exec"), namespace)
        if assertion is not None:
            exec(compile(assertion, "<test>", "exec"), namespace)
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code & 0xFF
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - an uncaught exception: traceback, status 1
        sys.excepthook(*sys.exc_info())
        return 1
    return 0


def _finish(status):
    """The interpreter's exit (non-daemon threads, atexit, flush) without its slow module teardown."""
    threading = sys.modules.get("threading")
    if threading is not None and hasattr(threading, "_shutdown"):
        threading._shutdown()
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - as CPython: a failed flush at exit is status 120
            status = 120
    os._exit(status)


if __name__ == "__main__":
    # Warm the parent: each forked test finds these loaded (a solution imports them at no cost).
    import bisect  # noqa: F401
    import collections  # noqa: F401
    import functools  # noqa: F401
    import heapq  # noqa: F401
    import itertools  # noqa: F401
    import string  # noqa: F401
    import typing  # noqa: F401

    _payload = json.loads(sys.stdin.buffer.read())
    _path = os.path.abspath(PROGRAM_FILE)
    with open(_path, "w", encoding="utf-8") as _f:
        _f.write(_payload["program"])
    _non_dumpable(0)
    _emit({"ready": True})
    _assertion = _serve(_payload)
    # Only a forked test child gets here. Drop the payload: the program sees no other test.
    del _payload, _f
    with open(_path, encoding="utf-8") as _f:
        _source = _f.read()
    _finish(_run_program(_fresh_main(_path), _source, _path, _assertion))
