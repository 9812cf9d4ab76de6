"""Test harness that the judge runs inside the sandbox (standard library only: it runs as ``python -I``).

The judge (``judge.py``) sends it one payload per program, either through the slot's warm server (this
file run as ``--serve``, see "the warm server" below) or, where the pool has none, as the program of one
:meth:`SandboxPool.run` with the payload on stdin. The program is this file behind a bundle of the modules
it uses (``plain_data``, ``function_calls``, ``judge_keeper``: see ``judge.harness_source``), which it
finds as globals: inside the sandbox none of them is importable by name.

The payload is two frames, each a header line ``T <n>`` / ``C <n>`` and ``n`` bytes of JSON:

* ``T``, the **trusted part**: what function-style tests run on the trusted side, ``{"tests": [{"index": i,
  "entry_point", "setup", "solution_class", "assertion" | "args" + "expected"}, ...]}`` (empty, ``T 0``,
  when every test is stdin/stdout). It is read by the **keeper**, a process forked from the harness
  before the harness reads anything else, so that no process a candidate runs in ever held a test's code
  or expected values in its memory;
* ``C``, the **candidate part**: ``{"program": str, "tests": [{"kind": "stdio", "stdin": str} | {"kind":
  "function"}], "time_limit_s", "output_limit_bytes", "stderr_tail_bytes", "stop_on_failure", "sweep"}``
  (``sweep``: the run has its own pid namespace, so the harness may kill what a test left behind).

Then it

1. writes the program to ``solution.py``, makes itself non-dumpable (no process of the same uid can read
   its memory or open its file descriptors through ``/proc``) and prints ``{"ready": true}``;
2. for each test forks a **candidate** child from itself (fresh ``sys.std*``, ``__main__`` and
   ``sys.argv``; the program runs at the top level, so ``sys.exit``, uncaught exceptions, ``atexit`` and
   output flushing are the interpreter's own, as in ``python solution.py``). A stdin/stdout test feeds
   the input on fd 0 and captures fd 1 and 2. A function-style test gives the candidate a socket on fd 3
   as well: after its program ran it only answers calls there (``function_calls.serve_calls``). The
   keeper forks a fresh **trusted evaluator** for that test, hands it the other end of the socket and
   reports its verdict (``function_calls.evaluate``); the candidate's exit status plays no part in it.
   The harness kills the candidate's process group (and has the keeper kill the evaluator) at the time
   limit or when its output passes the cap;
3. prints one JSON line per test that ran: ``{"i": index, "kind": "exit" | "signal" | "timeout" |
   "output_limit" | "verdict" | "lost", "code": int | null, "verdict": {...} | null, "stdout": base64,
   "stderr": base64 (tail), "seconds": float}`` (``verdict``: the trusted evaluator's, for function tests;
   ``lost``: the keeper is gone, which only the candidate can have caused).

Nothing expected by a stdin/stdout test is sent here: the judge compares outputs outside the sandbox.
The candidate, the keeper and the evaluators share the sandbox uid: a candidate can kill or stop them
(its test then fails), but cannot read or write their memory or descriptors (they are non-dumpable and
it never holds their sockets), and it never sees a test's code, a call's expected value or a verdict.
"""

import base64
import json
import os
import select
import signal
import socket
import sys
import time
import types

if "judge_keeper" not in globals():  # inside the sandbox the harness bundle provides them (judge.harness_source)
    from pettingllms.sandbox import function_calls, judge_keeper, plain_data

PROGRAM_FILE = "solution.py"
#: The candidate's end of a function test's call socket.
CHANNEL_FD = 3


# --------------------------------------------------------------------------- reading the payload
def _read_line(fd, limit=1 << 16):
    """One line from a raw fd, byte by byte (nothing past the newline is consumed); b"" at end."""
    data = bytearray()
    while len(data) < limit:
        byte = os.read(fd, 1)
        if not byte or byte == b"\n":
            return bytes(data)
        data += byte
    raise ValueError("header line too long")


def _frame_size(fd, tag):
    line = _read_line(fd)
    name, _, size = line.partition(b" ")
    if name != tag or not size.isdigit():
        raise ValueError(f"expected a {tag.decode()} frame header, got {line[:40]!r}")
    return int(size)


# --------------------------------------------------------------------------- the harness (in the sandbox)
def _emit(record):
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _stdin_fd(data):
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("stdin", 0)
    else:
        fd = os.open(".", os.O_TMPFILE | os.O_RDWR, 0o600)
    plain_data.write_all(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _child_setup(stdin_fd, out_w, err_w, channel_fd, time_limit):
    """In the forked candidate: its own process group, the test's fds, a CPU limit near the time limit."""
    import resource

    os.setpgid(0, 0)
    os.dup2(stdin_fd, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    keep = 3
    if channel_fd is not None:
        os.dup2(channel_fd, CHANNEL_FD)
        keep = CHANNEL_FD + 1
    os.closerange(keep, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    judge_keeper.cpu_limit(time_limit)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # Python's own default at start-up


class _Output:
    """A test's captured output: stdout up to the cap, the tail of stderr, and whether either passed the cap."""

    def __init__(self, out_r, err_r, cap, tail):
        self.out_r, self.err_r, self.cap, self.tail = out_r, err_r, cap, tail
        self.open = [out_r, err_r]
        self.out, self.err, self.err_total = bytearray(), bytearray(), 0

    def read(self, ready):
        for fd in ready:
            if fd not in self.open:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                self.open.remove(fd)
            elif fd == self.out_r:
                self.out += chunk
            else:
                self.err_total += len(chunk)
                self.err = (self.err + chunk)[-self.tail:]

    @property
    def over_cap(self):
        return len(self.out) > self.cap or self.err_total > self.cap

    def record(self, kind, code, seconds, **extra):
        return {"kind": kind, "code": code, "stdout": base64.b64encode(bytes(self.out[:self.cap])).decode(),
                "stderr": base64.b64encode(bytes(self.err)).decode(), "seconds": round(seconds, 6), **extra}


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)  # the test's process group: the candidate and what it started
    except OSError:
        pass


def _supervise(pid, output, start, time_limit):
    """A stdin/stdout test: read the candidate's output until it ends, the time limit passes or the output
    passes the cap."""
    ended, exited_at, wstatus = None, None, None
    while output.open:
        now = time.monotonic()
        if exited_at is None and now >= start + time_limit:
            ended = "timeout"
            break
        if exited_at is not None and now > exited_at + 0.05:
            break  # something the program started still holds its pipes
        output.read(select.select(output.open, [], [], 0.05)[0])
        if output.over_cap:
            ended = "output_limit"
            break
        if exited_at is None and output.open:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                exited_at, wstatus = time.monotonic(), status
    seconds = time.monotonic() - start
    _kill_group(pid)
    if wstatus is None:
        _, wstatus = os.waitpid(pid, 0)
    if ended is not None:
        return output.record(ended, None, seconds)
    if os.WIFSIGNALED(wstatus):
        sig = os.WTERMSIG(wstatus)
        return output.record("timeout" if sig == signal.SIGXCPU else "signal", sig, seconds)
    return output.record("exit", os.WEXITSTATUS(wstatus), seconds)


def _supervise_call_test(pid, output, start, time_limit, keeper, index):
    """A function-style test: it ends with the trusted evaluator's verdict (via the keeper), at the time
    limit or when the candidate's output passes the cap; the candidate's exit decides nothing."""
    ended, verdict, wstatus = None, None, None
    deadline = start + time_limit
    while True:
        now = time.monotonic()
        if now >= deadline:
            ended = "timeout"
            break
        watch = [*output.open, keeper.sock.fileno()]
        ready = select.select(watch, [], [], min(0.05, deadline - now))[0]
        if keeper.sock.fileno() in ready:
            verdict = keeper.verdict(index)
            if verdict is None:
                ended = "lost"
                break
        output.read(ready)
        if output.over_cap:
            ended = "output_limit"
            break
        if verdict is not None:
            break
        if wstatus is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                wstatus = status
    seconds = time.monotonic() - start
    _kill_group(pid)
    if verdict is None and ended != "lost":
        keeper.abort(index)
    while output.open and not output.over_cap:  # what it wrote before it was killed
        ready = select.select(output.open, [], [], 0)[0]
        if not ready:
            break
        output.read(ready)
    if wstatus is None:
        _, wstatus = os.waitpid(pid, 0)
    code = os.WEXITSTATUS(wstatus) if os.WIFEXITED(wstatus) else -os.WTERMSIG(wstatus)
    if ended is None and os.WIFSIGNALED(wstatus) and os.WTERMSIG(wstatus) == signal.SIGXCPU \
            and verdict.get("status") != "passed":
        ended = "timeout"  # the CPU limit ended the program mid-call
    if ended is not None:
        return output.record(ended, code, seconds, verdict=None)
    return output.record("verdict", code, seconds, verdict=verdict)


def _sweep_namespace(keep=(), timeout=2.0):
    """In the run's own pid namespace: kill whatever the test left (a setsid() daemon, a stray fork) and
    wait until it is reaped, so that the next test cannot even see it as a zombie. Spares pid 1, this
    harness and ``keep`` (the keeper). Never without a pid namespace: there /proc shows the host."""
    spared = {1, os.getpid(), *keep}
    deadline = time.monotonic() + timeout
    while True:
        others = [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) not in spared]
        if not others or time.monotonic() > deadline:
            return
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.0005)


def _serve(payload, keeper):
    """The harness's loop (never returns there). Returns in a forked candidate child: its test's kind."""
    time_limit = float(payload["time_limit_s"])
    out_cap, tail = int(payload["output_limit_bytes"]), int(payload["stderr_tail_bytes"])
    keep = (keeper.pid,) if keeper is not None else ()
    for index, test in enumerate(payload["tests"]):
        function = test["kind"] == "function"
        stdin_fd = _stdin_fd(test.get("stdin", "").encode("utf-8"))
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        candidate_end = evaluator_end = None
        if function:
            candidate_end, evaluator_end = socket.socketpair()
        sys.stdout.flush()
        sys.stderr.flush()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                # Detached, not closed: a socket object's finalizer would close its fd number, which
                # may be the call channel's by then.
                channel = candidate_end.detach() if candidate_end is not None else None
                for sock in (evaluator_end, None if keeper is None else keeper.sock):
                    if sock is not None:
                        sock.detach()
                _child_setup(stdin_fd, out_w, err_w, channel, time_limit)
            except BaseException:  # noqa: BLE001 - never return into the parent's loop
                os._exit(121)
            judge_keeper.set_dumpable(1)
            return test["kind"]
        try:
            os.setpgid(pid, pid)  # also here: no race with the kill below
        except OSError:
            pass
        for fd in (stdin_fd, out_w, err_w):
            os.close(fd)
        output = _Output(out_r, err_r, out_cap, tail)
        if function:
            candidate_end.close()
            if keeper is not None and keeper.alive:
                keeper.run(index, evaluator_end.fileno(), time_limit)
            evaluator_end.close()
            if keeper is not None and keeper.alive:
                record = _supervise_call_test(pid, output, start, time_limit, keeper, index)
            else:  # the keeper is gone (or there never was a trusted part): nothing can judge this test
                _kill_group(pid)
                os.waitpid(pid, 0)
                record = output.record("lost", None, time.monotonic() - start, verdict=None)
        else:
            record = _supervise(pid, output, start, time_limit)
        os.close(out_r)
        os.close(err_r)
        if payload.get("sweep"):
            _sweep_namespace(keep)
        record["i"] = index
        _emit(record)
        passed = (record["kind"] == "verdict" and record["verdict"].get("status") == "passed") if function \
            else (record["kind"] == "exit" and record["code"] == 0)
        if payload["stop_on_failure"] and not passed:
            break
    sys.stdout.flush()
    if keeper is not None:
        keeper.sock.close()
    os._exit(0)


def _fresh_main(path):
    """Fresh stdio objects, ``sys.argv`` and ``__main__`` module, as the interpreter makes them."""
    import builtins

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


def _exit_status(exc):
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _run_candidate(namespace, source, path, kind):
    """Run the program as ``python path`` would and, for a function test, then answer calls on
    :data:`CHANNEL_FD` until the evaluator is done; returns the exit status."""
    try:
        exec(compile(source, path, "exec"), namespace)
        if kind == "function":
            function_calls.serve_calls(CHANNEL_FD, namespace)
    except SystemExit as exc:
        return _exit_status(exc)
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


def _no_setup():
    pass


def _judge(fd, setup=_no_setup):
    """Read the payload from ``fd`` (the trusted frame into the keeper, the candidate frame here), run
    ``setup`` (the warm server's per-program isolation), announce readiness and serve the tests. Returns
    only in a forked candidate child, where it runs the program; never returns in the harness process."""
    if sys.flags.optimize:  # assertions would be compiled away: never judge under -O
        sys.stderr.write("the judge harness refuses to run with -O\n")
        os._exit(2)
    judge_keeper.set_dumpable(0)
    trusted_size = _frame_size(fd, b"T")
    keeper = judge_keeper.start_keeper(fd, trusted_size, setup) if trusted_size else None
    payload = json.loads(judge_keeper.read_exact(fd, _frame_size(fd, b"C")))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, fd)  # the payload stream is never the program's to read
    os.close(null)
    setup()
    judge_keeper.set_dumpable(0)  # again: a change of uid resets it
    if keeper is not None:
        keeper.wait_ready()
    path = os.path.abspath(PROGRAM_FILE)
    with open(path, "w", encoding="utf-8") as f:
        f.write(payload["program"])
    _emit({"ready": True})
    kind = _serve(payload, keeper)
    # Only a forked candidate child gets here. Drop the payload: the program sees no other test.
    del payload, keeper
    with open(path, encoding="utf-8") as f:
        source = f.read()
    _finish(_run_candidate(_fresh_main(path), source, path, kind))


def _scrub_sys_path():
    # Nothing importable from where programs write (the working directory, the script's folder): the
    # keeper and its evaluators import standard modules lazily.
    here = {"", os.getcwd(), os.path.dirname(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else ""}
    sys.path[:] = [entry for entry in sys.path if entry not in here]


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
# ``python -I -c <this file> --serve [--cgroup-fd N]``, exec'd by the launcher's init as pid 1 of the
# sandbox's namespaces, still privileged, once per pool worker slot. Protocol on its stdin: one line with the
# launch spec (JSON, see launcher.py), then per program a header line ``{"nonce": str, "size": n}``
# followed by ``n`` bytes of the harness payload (its two frames). On its stdout: ``{"server_ready": true}``
# once, then per program the harness's own lines and, after a newline, ``{"done": nonce, "kind": "exit" |
# "signal", "code": n, "cpu": s, "stderr": base64 tail, "stderr_bytes": n}``.
#
# Per program it forks one process that joins the slot's memory cgroup (when the pool has one: fd N) and
# runs the harness on the server's stdin: the keeper (forked first) reads the trusted frame, the harness
# the candidate frame, each from the stream itself (the server never holds a program or a test, so none
# can reach a later one through its memory). Each then unshares a new mount and IPC namespace with a
# fresh tmpfs scratch (no file or SysV/POSIX IPC object outlives the program), applies the rlimits and
# drops to the slot's sandbox uid with no_new_privs. When the program process ends, the server kills every
# other process of the pid namespace (``kill(-1)`` from its pid 1) and reaps them all before it reports,
# so nothing of a program is alive when the next starts.

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
SERVER_STDERR_TAIL = 1 << 16


def _load_launcher(source):
    """The launcher module from its source (the pool sends it: inside the sandbox the checkout may be
    out of sight, e.g. under a /tmp that the sandbox replaces), not put in sys.modules: programs never
    see it by name."""
    module = types.ModuleType("_sandbox_launcher")
    exec(compile(source, "launcher.py", "exec"), module.__dict__)
    return module


def _isolate(spec, launcher):
    """In the program process and the keeper, after each read its frame: a fresh mount and IPC namespace
    with a scratch tmpfs, the limits and the sandbox uid, and the signal dispositions of a fresh
    interpreter (the server is pid 1 with the defaults)."""
    ret = launcher._libc.unshare(launcher.ctypes.c_int(CLONE_NEWNS | CLONE_NEWIPC))
    launcher._check(ret, "unshare", "unshare(CLONE_NEWNS | CLONE_NEWIPC)")
    launcher.mount_scratch(spec)
    launcher.drop_privileges(spec)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


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


def _program_process(spec, launcher, cgroup_fd):
    """In the per-program child: its memory cgroup; returns the isolation step the harness runs after
    the payload is read (a set-up failure there ends this program only, with status 70)."""
    if cgroup_fd is not None:  # first: everything this process and its tests allocate is charged to it
        launcher.join_cgroup(cgroup_fd)

    def setup():
        try:
            _isolate(spec, launcher)
        except BaseException as exc:  # noqa: BLE001 - reported on stderr, the pool raises SandboxError
            try:
                plain_data.write_all(2, f"sandbox set-up failed: {exc!r}\n".encode())
            finally:
                os._exit(70)

    return setup


def _server_main(cgroup_fd):
    """``cgroup_fd``: the slot's memory cgroup's ``cgroup.procs``, opened by the launcher (or None)."""
    spec = json.loads(_read_line(0, limit=1 << 24))  # it carries the launcher's and this file's text
    launcher = _load_launcher(spec.pop("launcher_source"))
    _warm_imports()
    plain_data.write_all(1, b'{"server_ready": true}\n')
    while True:
        header = _read_line(0)
        if not header:
            os._exit(0)  # the pool closed the stream
        request = json.loads(header)
        nonce = str(request["nonce"])
        err_fd = os.memfd_create("harness-stderr", 0)  # bounded by the program's RLIMIT_FSIZE
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(err_fd, 2)
                os.close(err_fd)
                setup = _program_process(spec, launcher, cgroup_fd)
            except BaseException as exc:  # noqa: BLE001 - a set-up failure ends this program only
                try:
                    plain_data.write_all(2, f"sandbox set-up failed: {exc!r}\n".encode())
                finally:
                    os._exit(70)
            del spec, launcher, request, header, nonce, cgroup_fd
            _judge(0, setup)  # never returns here: the harness and the test children exit themselves
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
        plain_data.write_all(1, b"\n" + json.dumps(record).encode() + b"\n")


if __name__ == "__main__":
    _scrub_sys_path()
    if sys.argv[1:2] == ["--serve"]:
        _server_main(int(sys.argv[3]) if sys.argv[2:3] == ["--cgroup-fd"] else None)
    _warm_imports()
    _judge(0)
