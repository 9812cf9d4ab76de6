"""The pool's side of the judge's warm server: one long-lived sandbox per worker slot that judges one
program after another (see ``judge_harness.py``, "the warm server", for what happens inside).

A launch costs ~100 ms (launcher, namespaces, read-only remounts, a fresh interpreter, the uid sweep); a
program through a warm server costs a fork, a new mount and IPC namespace with a fresh tmpfs, the
privilege drop and one fork per test. Each program still gets every limit and isolation of a launch:
its own scratch files and IPC objects, the rlimits and the slot's uid set afresh in a process forked
from a server that never ran model code, and no process of a previous program alive.

The exchange is blocking (``select`` on the server's pipes with the wall clock as the timeout), so that
it works from any event loop; the pool runs it in its own threads. Anything unexpected (the wall clock,
the output cap, a server that died or broke the protocol) stops the whole sandbox; the slot's next
program starts a fresh one.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import signal
import subprocess
import threading
import time

from pettingllms.sandbox.processes import kill_uid
from pettingllms.sandbox.result import SandboxError

#: Seconds a fresh server may take to announce itself (launch + interpreter + imports).
START_TIMEOUT_S = 60.0
READY_LINE = b'{"server_ready": true}\n'
#: The server's ``-c`` program: it reads the real one (the judge's harness bundle, too long for an argument)
#: from stdin, as ``<size>\n<source>``, and runs it as ``__main__``.
SERVER_BOOTSTRAP = (
    "import os\n"
    "def _read(size):\n"
    "    data = b''\n"
    "    while len(data) < size:\n"
    "        chunk = os.read(0, size - len(data))\n"
    "        if not chunk:\n"
    "            raise EOFError('stdin ended inside the judge server program')\n"
    "        data += chunk\n"
    "    return data\n"
    "header = b''\n"
    "while not header.endswith(b'\\n'):\n"
    "    header += _read(1)\n"
    "exec(compile(_read(int(header)), 'judge_harness.py', 'exec'), {'__name__': '__main__'})\n"
)


def _tail(data: bytes, size: int = 2000) -> str:
    return data[-size:].decode("utf-8", errors="replace")


class WarmServer:
    """One slot's server, started with ``argv`` (its ``-c`` program is :data:`SERVER_BOOTSTRAP`), then sent
    ``program`` and ``spec`` on stdin. ``call`` judges one payload; ``stop`` ends the sandbox (idempotent) and then
    calls ``on_stop`` when set (the pool removes the slot's memory cgroup there). ``cgroup``: that
    cgroup's folder, or None."""

    def __init__(self, argv: list[str], program: bytes, spec: dict, status_r: int, status_w: int, cwd: str,
                 env: dict[str, str], uid: int, read_status) -> None:
        self._stop_lock = threading.Lock()
        self.on_stop = None
        self.cgroup: str | None = None
        self._read_status = read_status
        self._status_r = status_r
        self.uid = uid
        self.stderr = bytearray()
        self.calls = 0
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, pass_fds=(status_w,),
                                         start_new_session=True, env=env, cwd=cwd)
        except OSError as exc:
            os.close(status_r)
            raise SandboxError(f"could not start the sandbox launcher for the judge server: {exc}") from exc
        finally:
            os.close(status_w)
        self._in, self._out, self._err = (self.proc.stdin.fileno(), self.proc.stdout.fileno(),
                                          self.proc.stderr.fileno())
        for fd in (self._in, self._out, self._err):
            os.set_blocking(fd, False)
        self._buffer = bytearray()
        try:
            start = b"%d\n" % len(program) + program + json.dumps(spec).encode() + b"\n"
            found, ended_by = self._send_and_wait(start, READY_LINE.rstrip(), START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        if ended_by is not None:
            self.stop()
            raise SandboxError(f"the judge server did not start within {START_TIMEOUT_S} s "
                               f"(stderr: {_tail(bytes(self.stderr))!r})")
        if found != 0 or not self._buffer.startswith(READY_LINE):
            self.stop()
            raise SandboxError(f"the judge server announced itself wrongly: {_tail(bytes(self._buffer))!r}")
        del self._buffer[:len(READY_LINE)]

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _failure(self, what: str) -> SandboxError:
        records = self._read_status(self._status_r) if self._status_r >= 0 else []
        setup = next((r for r in records if r.get("kind") == "setup_error"), None)
        detail = (f"set-up failed at {setup.get('stage')}: {setup.get('message')}" if setup is not None
                  else f"stderr: {_tail(bytes(self.stderr))!r}")
        return SandboxError(f"the judge server {what} ({detail})")

    def _send_and_wait(self, data: bytes, marker: bytes, timeout: float,
                       cap: int | None = None) -> tuple[int, str | None]:
        """Write ``data``, read stdout into the buffer until ``marker`` and the end of its line.

        Returns (index of the marker, None) or (-1, "wall_time" | "output"); raises SandboxError when
        the server's output ends first."""
        deadline = time.monotonic() + timeout
        view = memoryview(data)
        readers = [self._out, self._err]
        scanned = 0
        while True:
            start = max(0, scanned - len(marker))
            found = self._buffer.find(marker, start)
            if found >= 0:
                end = self._buffer.find(b"\n", found + len(marker))
                if end >= 0:
                    return found, None
            else:
                scanned = len(self._buffer)
            if cap is not None and len(self._buffer) > cap:
                return -1, "output"
            left = deadline - time.monotonic()
            if left <= 0:
                return -1, "wall_time"
            if self._out not in readers:
                raise self._failure("ended before it answered")
            ready_r, ready_w, _ = select.select(readers, [self._in] if view else [], [], left)
            if ready_w:
                try:
                    view = view[os.write(self._in, view[:1 << 16]):]
                except BlockingIOError:
                    pass
                except (BrokenPipeError, ConnectionResetError):
                    view = view[:0]  # it died: its stdout ends too, reported below
            for fd in ready_r:
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    readers.remove(fd)
                elif fd == self._out:
                    self._buffer += chunk
                else:
                    self.stderr = (self.stderr + chunk)[-8192:]

    def call(self, payload: bytes, wall: float, cap: int) -> tuple[bytes, dict | None, str | None]:
        """Judge one payload. Returns (the harness's stdout, the done record, None) or, when the wall
        clock or the output cap ended it (the sandbox is then stopped), (stdout so far, None, limit)."""
        nonce = secrets.token_hex(16)
        header = json.dumps({"nonce": nonce, "size": len(payload)}).encode() + b"\n"
        marker = b'\n{"done": "' + nonce.encode() + b'"'
        self.calls += 1
        # Room for the done record (a base64 stderr tail of at most 64 KiB) above the harness's cap.
        try:
            found, ended_by = self._send_and_wait(header + payload, marker, wall, cap + (1 << 17))
        except BaseException:
            self.stop()
            raise
        if ended_by is not None:
            out = bytes(self._buffer)
            self.stop()
            return out, None, ended_by
        end = self._buffer.find(b"\n", found + 1)
        out, line = bytes(self._buffer[:found]), bytes(self._buffer[found + 1:end])
        rest = bytes(self._buffer[end + 1:])
        self._buffer.clear()
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            self.stop()
            raise SandboxError(f"the judge server sent a broken done record: {line[:200]!r}") from None
        if rest:
            self.stop()  # nothing may follow the record: the stream is out of step
            raise SandboxError(f"the judge server sent output after its done record: {rest[:200]!r}")
        return out, record, None

    def stop(self) -> None:
        """End the sandbox: SIGTERM makes the launcher kill pid 1 of the namespace (the kernel then
        kills every process in it) and wait; the group kill and the uid sweep are the backstops."""
        with self._stop_lock:
            proc = self.proc
            if proc is None:
                return
            self.proc = None
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                pass
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                try:
                    stream.close()
                except OSError:
                    pass
            if self._status_r >= 0:
                os.close(self._status_r)
                self._status_r = -1
            try:
                kill_uid(self.uid)
            except TimeoutError as exc:
                raise SandboxError(str(exc)) from exc
            finally:
                if self.on_stop is not None:
                    self.on_stop()


__all__ = ["WarmServer"]
