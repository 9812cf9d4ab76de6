"""Test harness that the judge runs inside the sandbox, and the output comparison it shares with the judge.

The judge (``judge.py``) sends a JSON payload to it, either through the slot's warm server (this file
run as ``--serve``, see "the warm server" below) or, where the pool has none, as the program of one
:meth:`SandboxPool.run` with the payload on stdin: ``{"program": str, "tests": [{"stdin": str, "assertion": str | null}, ...],
"time_limit_s": float, "output_limit_bytes": int, "stderr_tail_bytes": int, "stop_on_failure": bool, "sweep": bool}`` (``sweep``: the run has its own pid
namespace, so the harness may kill every other process of it after each test).
Standard library only (it runs as ``python -I`` in the sandbox, before any site-packages matter), it

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
_FLOAT_MARK = re.compile(r"[.eE]")


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
    # Only an expected token written as a float (a point or an exponent) gets the tolerance: an integer
    # answer compares exactly ("3.0" is not "3", and print(a / b) for a // b is a real bug).
    if not (_NUMBER.match(actual) and _NUMBER.match(expected)) or not _FLOAT_MARK.search(expected):
        return False
    a, e = float(actual), float(expected)
    if not (math.isfinite(a) and math.isfinite(e)):
        return False
    return abs(a - e) <= tolerance or abs(a - e) <= tolerance * abs(e)


def compare_output(actual, expected, mode="float", tolerance=FLOAT_TOLERANCE):
    """Whether a program's stdout ``actual`` matches ``expected``.

    ``exact``: identical strings. ``whitespace``: the same tokens line by line, ignoring how much
    whitespace separates them, trailing whitespace and trailing blank lines. ``float``: as
    ``whitespace``, and a numeric token also matches an expected token written as a float (with a ``.``
    or an exponent) when they differ by at most ``tolerance`` absolutely or relatively to the expected
    value (as the APPS and CodeContests judges do for real answers); an expected integer token compares
    exactly, as text.
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


def _sweep_namespace(timeout=2.0):
    """In the run's own pid namespace: kill whatever the test left outside its process group (a
    setsid() daemon) and wait until pid 1 has reaped it, so that the next test cannot even see it as a
    zombie. Never without a pid namespace: -1 would then mean every process of this uid on the host."""
    me = os.getpid()
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        # Only pid 1 (init or the warm server, root) and this harness belong here between tests.
        others = [name for name in os.listdir("/proc") if name.isdigit() and int(name) not in (1, me)]
        if not others or time.monotonic() > deadline:
            return
        time.sleep(0.0005)


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
            _sweep_namespace()
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
    harness_file = _fresh_main.__code__.co_filename  # "<string>" when the server runs from `-c`

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


def _judge(payload):
    """Write the program, announce readiness, and serve the tests. Returns only in a forked test child,
    where it runs the program; never returns in the harness process."""
    path = os.path.abspath(PROGRAM_FILE)
    with open(path, "w", encoding="utf-8") as f:
        f.write(payload["program"])
    _non_dumpable(0)
    _emit({"ready": True})
    assertion = _serve(payload)
    # Only a forked test child gets here. Drop the payload: the program sees no other test.
    del payload
    with open(path, encoding="utf-8") as f:
        source = f.read()
    _finish(_run_program(_fresh_main(path), source, path, assertion))


def _warm_imports():
    # Warm the parent: each forked test finds these loaded (a solution imports them at no cost).
    import bisect  # noqa: F401
    import collections  # noqa: F401
    import functools  # noqa: F401
    import heapq  # noqa: F401
    import itertools  # noqa: F401
    import string  # noqa: F401
    import typing  # noqa: F401


# --------------------------------------------------------------------------- the warm server (pid 1)
# ``python -I judge_harness.py --serve [--cgroup-fd N]``, exec'd by the launcher's init as pid 1 of the
# sandbox's namespaces, still privileged, once per pool worker slot. Protocol on its stdin: one line with the
# launch spec (JSON, see launcher.py), then per program a header line ``{"nonce": str, "size": n}``
# followed by ``n`` bytes of the harness payload. On its stdout: ``{"server_ready": true}`` once, then
# per program the harness's own lines and, after a newline, ``{"done": nonce, "kind": "exit" |
# "signal", "code": n, "cpu": s, "stderr": base64 tail, "stderr_bytes": n}``.
#
# Per program it forks one process that joins the slot's memory cgroup (when the pool has one: fd N),
# reads the payload (the server never holds a program, so no program's text or tests can reach a later
# one through its memory), unshares a new mount and IPC
# namespace with a fresh tmpfs scratch (no file or SysV/POSIX IPC object outlives the program), applies
# the rlimits, drops to the slot's sandbox uid with no_new_privs, and runs the harness as above. When
# that process ends, the server kills every other process of the pid namespace (``kill(-1)`` from its
# pid 1) and reaps them all before it reports, so nothing of a program is alive when the next starts.

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
SERVER_STDERR_TAIL = 1 << 16


def _read_exact(fd, size):
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError(f"stdin ended {left} bytes before the end of the payload")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_line(fd, limit=1 << 16):
    """One line from a raw fd, byte by byte (nothing past the newline is consumed); b"" at end."""
    data = bytearray()
    while len(data) < limit:
        byte = os.read(fd, 1)
        if not byte:
            return bytes(data)
        if byte == b"\n":
            return bytes(data)
        data += byte
    raise ValueError("header line too long")


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _load_launcher(source):
    """The launcher module from its source (the pool sends it: inside the sandbox the checkout may be
    out of sight, e.g. under a /tmp that the sandbox replaces), not put in sys.modules: programs never
    see it by name."""
    import types

    module = types.ModuleType("_sandbox_launcher")
    exec(compile(source, "launcher.py", "exec"), module.__dict__)
    return module


def _program_process(spec, launcher, size, cgroup_fd):
    """In the per-program child: memory cgroup, payload, fresh namespaces and scratch, limits, uid.
    Returns the payload."""
    if cgroup_fd is not None:  # first: everything this process and its tests allocate is charged to it
        launcher.join_cgroup(cgroup_fd)
    data = _read_exact(0, size)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the server's request stream is never the program's to read
    os.close(null)
    ret = launcher._libc.unshare(launcher.ctypes.c_int(CLONE_NEWNS | CLONE_NEWIPC))
    launcher._check(ret, "unshare", "unshare(CLONE_NEWNS | CLONE_NEWIPC)")
    launcher.mount_scratch(spec)
    launcher.drop_privileges(spec)
    # The dispositions a freshly started interpreter has (the server is pid 1 with the defaults).
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    payload = json.loads(data)
    del data
    return payload


def _reap_everything(program_pid):
    """Kill every process of the namespace but ourselves (pid 1) and reap them all; returns the
    program process's (wait status, rusage) if it was reaped here."""
    found = None
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            pid, wstatus, usage = os.wait4(-1, 0)
        except ChildProcessError:
            return found
        except InterruptedError:
            continue
        if pid == program_pid:
            found = (wstatus, usage)


def _await_program(pid, err_fd):
    """Wait for the program process, reaping orphans the moment they end (a killed daemon must not
    linger as a zombie that a later test still sees), then clear the namespace. Returns (wait status,
    rusage, stderr tail, stderr bytes); the stderr is a memfd, so no reader has to keep up with it."""
    result = None
    while result is None:
        try:
            done, wstatus, usage = os.wait4(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if done == pid:
            result = (wstatus, usage)
    _reap_everything(pid)
    total = os.fstat(err_fd).st_size
    os.lseek(err_fd, max(0, total - SERVER_STDERR_TAIL), os.SEEK_SET)
    tail = os.read(err_fd, SERVER_STDERR_TAIL)
    os.close(err_fd)
    wstatus, usage = result if result is not None else (0xFF00, None)
    return wstatus, usage, tail, total


def _server_main(cgroup_fd):
    """``cgroup_fd``: the slot's memory cgroup's ``cgroup.procs``, opened by the launcher (or None)."""
    spec = json.loads(_read_line(0))
    launcher = _load_launcher(spec.pop("launcher_source"))
    _warm_imports()
    _write_all(1, b'{"server_ready": true}\n')
    while True:
        header = _read_line(0)
        if not header:
            os._exit(0)  # the pool closed the stream
        request = json.loads(header)
        nonce, size = str(request["nonce"]), int(request["size"])
        err_fd = os.memfd_create("harness-stderr", 0)  # bounded by the program's RLIMIT_FSIZE
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(err_fd, 2)
                os.close(err_fd)
                box = [_program_process(spec, launcher, size, cgroup_fd)]
            except BaseException as exc:  # noqa: BLE001 - a set-up failure ends this program only
                try:
                    _write_all(2, f"sandbox set-up failed: {exc!r}\n".encode())
                finally:
                    os._exit(70)
            del spec, launcher, request, header, nonce, size, cgroup_fd
            # No reference to the payload stays in this frame, which the program could reach by
            # walking up its frames: _judge drops its own before the program runs.
            _judge(box.pop())  # never returns here: the harness and the test children exit themselves
            os._exit(0)
        wstatus, usage, err, err_total = _await_program(pid, err_fd)
        cpu = usage.ru_utime + usage.ru_stime if usage is not None else None
        record = {"done": nonce}  # first key: the pool finds the record by this prefix
        if os.WIFSIGNALED(wstatus):
            record.update(kind="signal", code=os.WTERMSIG(wstatus))
        else:
            record.update(kind="exit", code=os.WEXITSTATUS(wstatus))
        record.update(cpu=cpu, stderr=base64.b64encode(err).decode(), stderr_bytes=err_total)
        # A newline first: a harness killed mid-line must not glue its partial line to this record.
        _write_all(1, b"\n" + json.dumps(record).encode() + b"\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _server_main(int(sys.argv[3]) if sys.argv[2:3] == ["--cgroup-fd"] else None)
    _warm_imports()
    _judge(json.loads(sys.stdin.buffer.read()))
