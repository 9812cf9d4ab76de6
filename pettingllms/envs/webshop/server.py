"""The shop's HTTP server: one per process, on 127.0.0.1 at an ephemeral port, started on first use.

:class:`ShopServer` is a stdlib :class:`http.server.HTTPServer` whose GET handler returns
:func:`pettingllms.envs.webshop.site.render` of the request target; it serves from one daemon thread named
``webshop-server-<port>``. The site is stateless, so one server serves every environment of the process
(and their tree copies) and a fresh server on another port serves them just as well: the environment keeps
URLs as path and query only, never the port.

Leases. :func:`lease` returns a :class:`Lease` on the process's server, starting it when none runs; the
server stops (its thread ends, its socket closes) when the last lease is released, by
:meth:`Lease.release` (``env.close()``) or when the lease is garbage-collected (a tree copy that is
dropped). A process that forked gets a server of its own: leases and servers are per process id, and a
lease inherited from the parent is dead in the child. Nothing here is ever pickled: an environment drops
its lease when it is copied or pickled and takes a new one where it next fetches a page (so under Ray the
server runs in the EnvWorker's process). :func:`shutdown` stops the server whatever its leases (it runs at
interpreter exit).

:func:`fetch` requests a page with :class:`http.client.HTTPConnection` (no proxy applies: the connection
goes straight to 127.0.0.1).
"""

from __future__ import annotations

import atexit
import http.client
import os
import socket
import threading
import weakref
from http.server import BaseHTTPRequestHandler, HTTPServer

from pettingllms.envs.webshop.site import render

__all__ = ["HOST", "Lease", "ShopServer", "current_server", "fetch", "lease", "shutdown"]

HOST = "127.0.0.1"
_POLL_S = 0.5  # the serving loop checks for a stop this often even without a wake-up connection


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server_version = "WebShop/1.0"
    timeout = 10.0  # a stalled client cannot hold the server

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        try:
            status, body = render(self.path)
        except Exception as exc:  # a bug in a page: a 500 page, the server goes on
            status, body = 500, f"<html><body><h1>Error</h1><p>{type(exc).__name__}</p></body></html>"
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the stdlib's signature
        pass


class _HTTPServer(HTTPServer):
    allow_reuse_address = False
    request_queue_size = 128  # connections wait in the backlog while one request is served
    timeout = _POLL_S

    def handle_error(self, request, client_address) -> None:  # a broken connection: drop it quietly
        pass


class ShopServer:
    """One HTTP server of the shop and the thread serving it (see the module docstring)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.httpd = _HTTPServer((HOST, 0), _Handler)
        self.port: int = self.httpd.server_address[1]
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, name=f"webshop-server-{self.port}", daemon=True)

    def start(self) -> ShopServer:
        self.thread.start()
        return self

    def _serve(self) -> None:
        try:
            while not self._stop.is_set():
                self.httpd.handle_request()
        finally:
            self.httpd.server_close()

    @property
    def running(self) -> bool:
        return self.thread.is_alive() and not self._stop.is_set()

    def stop(self, wait: bool = True) -> None:
        """Stop serving and close the socket; ``wait``: until the thread has ended (never from the thread itself)."""
        if self._stop.is_set() and not wait:
            return
        self._stop.set()
        if not self.thread.is_alive():
            if self.thread.ident is None:  # never started
                self.httpd.server_close()
            return
        if threading.current_thread() is self.thread:
            return  # the loop ends after the request it is serving
        try:  # wake the loop at once rather than at its next poll
            socket.create_connection((HOST, self.port), timeout=1.0).close()
        except OSError:
            pass
        if wait:
            self.thread.join(timeout=5.0)


# ---- the process's server and its leases --------------------------------------------------------------

_LOCK = threading.RLock()
_STATE: dict = {"server": None, "leases": 0, "pid": None}


def _reset_after_fork() -> None:
    # In a forked child the parent's server thread does not exist: forget it (closing only the child's copy
    # of its socket) and the parent's lease count.
    server = _STATE["server"]
    if server is not None:
        try:
            server.httpd.socket.close()
        except OSError:
            pass
    _STATE.update(server=None, leases=0, pid=os.getpid())


def _release(pid: int, server: ShopServer) -> None:
    if pid != os.getpid():
        return
    with _LOCK:
        if _STATE["pid"] != pid or _STATE["server"] is not server:
            return
        _STATE["leases"] -= 1
        if _STATE["leases"] > 0:
            return
        _STATE.update(server=None, leases=0)
    server.stop(wait=threading.current_thread() is not server.thread)


class Lease:
    """A hold on the process's server: ``port`` stays served until :meth:`release` (or garbage collection)."""

    def __init__(self) -> None:
        with _LOCK:
            if _STATE["pid"] != os.getpid():
                _reset_after_fork()
            _STATE["leases"] += 1
            if _STATE["server"] is None:
                try:
                    _STATE["server"] = ShopServer().start()
                except BaseException:
                    _STATE["leases"] -= 1
                    raise
            self.server: ShopServer = _STATE["server"]
        self.pid = os.getpid()
        self.port = self.server.port
        self._finalizer = weakref.finalize(self, _release, self.pid, self.server)

    @property
    def alive(self) -> bool:
        """Held in this process (a lease inherited through a fork is not)."""
        return self._finalizer.alive and self.pid == os.getpid()

    def release(self) -> None:
        """Give the hold back (idempotent); the last one stops the server."""
        self._finalizer()

    def __reduce__(self):
        raise TypeError("a webshop server lease holds a socket of this process and is never pickled")

    def __deepcopy__(self, memo):
        raise TypeError("a webshop server lease is never copied; take a new one with lease()")


def lease() -> Lease:
    """A :class:`Lease` on the process's server (started when none runs)."""
    return Lease()


def current_server() -> ShopServer | None:
    """The server this process runs now, or None."""
    with _LOCK:
        if _STATE["pid"] != os.getpid():
            return None
        return _STATE["server"]


def shutdown() -> None:
    """Stop this process's server now, whatever its leases (their holders take a new server when they next
    fetch a page)."""
    with _LOCK:
        server = _STATE["server"] if _STATE["pid"] == os.getpid() else None
        _STATE.update(server=None, leases=0, pid=os.getpid())
    if server is not None:
        server.stop(wait=True)


atexit.register(shutdown)


def fetch(port: int, target: str, timeout: float) -> tuple[int, str]:
    """``(status, HTML)`` of ``GET target`` (path and query) from the server on ``port``; OSError or
    http.client.HTTPException when the request fails."""
    connection = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        connection.request("GET", target, headers={"Accept": "text/html"})
        response = connection.getresponse()
        body = response.read().decode("utf-8", errors="replace")
        return response.status, body
    finally:
        connection.close()
