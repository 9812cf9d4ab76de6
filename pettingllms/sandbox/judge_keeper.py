"""The keeper: the trusted half of the judge's harness (``judge_harness.py``), and the process helpers both
halves use.

For a program with function-style tests, the harness forks the keeper before it reads anything of the
payload. The keeper reads the trusted frame (every test's code and expected values) from the payload stream
itself, so no process a candidate ever runs in held them, not even in memory it was forked from. Then, per
test, the harness hands it one end of the test's call socket (``SCM_RIGHTS`` over a private socket pair)
and the keeper forks a fresh **trusted evaluator** that runs the test against the candidate on that socket
(``function_calls.evaluate``) and writes its verdict to the keeper, which passes it on. The keeper kills an
evaluator when the harness stops the test (time limit, output cap) or when it runs past the time limit.

The keeper and its evaluators are non-dumpable and never run candidate code; a candidate of the same uid
can kill or stop them, which only fails its own tests (the harness gives up on a keeper that is gone or
silent).

Standard library only: bundled into the harness program inside the sandbox (``judge.harness_source``).
"""

import json
import math
import os
import select
import signal
import socket
import time

if "function_calls" not in globals():  # inside the sandbox the harness bundle provides both
    from pettingllms.sandbox import function_calls, plain_data

#: Seconds the keeper and an evaluator may take beyond a test's time limit before they count as gone.
KEEPER_SLACK_S = 5.0
_CONTROL_BYTES = 1 << 16


# --------------------------------------------------------------------------- process helpers (both halves)
def read_exact(fd, size):
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError(f"the input ended {left} bytes before the end of the payload")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def set_dumpable(value):
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, value, 0, 0, 0)  # PR_SET_DUMPABLE
    except Exception:  # noqa: BLE001 - hardening only; the pid namespace still bounds the run
        pass


def cpu_limit(time_limit):
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    want = int(math.ceil(time_limit)) + 1
    if soft == resource.RLIM_INFINITY or soft > want:
        resource.setrlimit(resource.RLIMIT_CPU, (want, hard))


# --------------------------------------------------------------------------- the keeper
class Keeper:
    """The harness's handle on the keeper: the process that holds the trusted part and forks one trusted
    evaluator per function-style test (see :func:`_keeper_main`)."""

    def __init__(self, sock, pid):
        self.sock, self.pid, self.alive = sock, pid, True

    def _receive(self, timeout):
        if not select.select([self.sock], [], [], timeout)[0]:
            return None
        try:
            data = self.sock.recv(_CONTROL_BYTES)
        except OSError:
            data = b""
        if not data:
            self.alive = False
            return None
        return json.loads(data)

    def wait_ready(self):
        message = self._receive(60.0)
        if not (message or {}).get("ready"):
            raise RuntimeError(f"the keeper did not start: {message!r}")

    def run(self, index, channel, time_limit):
        try:
            socket.send_fds(self.sock, [json.dumps({"run": index, "time_limit_s": time_limit}).encode()],
                            [channel])
        except OSError:
            self.alive = False

    def verdict(self, index):
        """The verdict of test ``index`` (the keeper's next message), or None when the keeper is gone."""
        message = self._receive(0) if self.alive else None
        if message is None or message.get("verdict") != index:
            self._lose()
            return None
        return message["result"]

    def abort(self, index):
        """Have the keeper kill the evaluator of test ``index`` and wait for it to say so."""
        if not self.alive:
            return
        try:
            self.sock.send(json.dumps({"abort": index}).encode())
        except OSError:
            self._lose()
            return
        message = self._receive(KEEPER_SLACK_S)
        if message is None or message.get("verdict") != index:
            self._lose()

    def _lose(self):
        """The keeper died, stalled or spoke out of turn: only a candidate can have caused that. It is
        killed; every later function test fails."""
        self.alive = False
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass


def start_keeper(fd, size, setup):
    """Fork the keeper; it reads the trusted frame (``size`` bytes) from ``fd``. Returns once it has read
    it (the candidate frame follows in the stream)."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        mine.close()
        try:
            _keeper_main(theirs, fd, size, setup)
        finally:
            os._exit(70)
    theirs.close()
    keeper = Keeper(mine, pid)
    message = keeper._receive(60.0)
    if not (message or {}).get("read"):
        raise RuntimeError(f"the keeper did not read the trusted part: {message!r}")
    return keeper


def _keeper_main(sock, fd, size, setup):
    """The keeper's life: read the trusted part, set up like a program process, then fork one trusted
    evaluator per test the harness asks for and pass its verdict on. Never returns."""
    trusted = {test["index"]: test for test in json.loads(read_exact(fd, size))["tests"]}
    sock.send(b'{"read": true}')
    null = os.open(os.devnull, os.O_RDWR)
    for target in (fd, 1):  # the payload stream and the harness's record stream are never ours
        os.dup2(null, target)
    os.close(null)
    setup()
    set_dumpable(0)
    names = set()
    for test in trusted.values():
        names.update(function_calls.stdlib_names(test.get("setup", "") + "\n" + test.get("assertion", "")))
    for name in names:  # once here, not once per evaluator
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - the evaluator's NameError says what is missing
            pass
    sock.send(json.dumps({"ready": True}).encode())
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, _CONTROL_BYTES, 1)
        except OSError:
            os._exit(0)
        if not data:
            os._exit(0)  # the harness is done
        request = json.loads(data)
        if "run" not in request or len(fds) != 1:
            for extra in fds:
                os.close(extra)
            continue  # an abort that crossed a verdict already sent
        index = request["run"]
        result = _run_evaluator(trusted[index], fds[0], sock, float(request["time_limit_s"]))
        sock.send(json.dumps({"verdict": index, "result": result}).encode())


def _run_evaluator(test, channel, sock, time_limit):
    """Fork a fresh trusted evaluator for ``test`` on ``channel`` and wait for its verdict, until the
    harness aborts the test or the time limit (with slack) passes."""
    verdict_r, verdict_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            sock.close()
            os.close(verdict_r)
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 2)  # the test's own prints and tracebacks go nowhere
            os.close(null)
            cpu_limit(time_limit)
            set_dumpable(0)
            result = function_calls.evaluate(test, channel)
            plain_data.write_all(verdict_w, json.dumps(result).encode())
        finally:
            os._exit(0)
    os.close(verdict_w)
    os.close(channel)
    deadline = time.monotonic() + time_limit + KEEPER_SLACK_S
    data, result = bytearray(), None
    while result is None:
        left = deadline - time.monotonic()
        ready = select.select([verdict_r, sock], [], [], max(left, 0))[0] if left > 0 else []
        if not ready:
            result = {"status": "timeout", "message": "the trusted evaluator ran past the time limit"}
        elif sock in ready:
            message = sock.recv(_CONTROL_BYTES)
            if not message:
                os._exit(0)
            result = {"status": "aborted", "message": "the test was stopped"}
        else:
            chunk = os.read(verdict_r, 1 << 16)
            if chunk:
                data += chunk
                continue
            try:
                result = json.loads(data)
            except ValueError:
                result = {"status": "runtime_error", "message": "the trusted evaluator ended without a verdict "
                          "(it was killed)"}
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    os.waitpid(pid, 0)
    os.close(verdict_r)
    return result
