"""A real HTTP server on 127.0.0.1 that answers like the four API formats, with scriptable faults.

Use it from a test module with ``from tests.helpers.http_fixture import api_server as api_server`` (the
``as`` form tells ruff the name is re-exported, so a test parameter of that name is not a redefinition) and take the ``api_server``
fixture, or build an :class:`APIServer` directly (``with APIServer() as server: ...``).

Normal answers. Each format has a path (:data:`FORMAT_PATHS`, ``server.url("openai")``). The reply to a
prompt ``P`` (the text prompt, or the last user message's content) for candidate ``k`` is
``"re: P #k"``, cut to ``max_tokens`` / ``max_output_tokens`` / ``max_new_tokens`` words (finish reason
``length`` then). ``openai`` and ``generic`` answer ``n`` candidates ``k = 0..n-1`` in one response (capped by
``server.max_n``, to imitate servers that ignore ``n``); ``anthropic`` and ``openai_responses`` answer one,
numbering the answers to the same prompt ``#0, #1, ...`` in arrival order. The ``openai`` path applies
``stop`` strings like the real API does. With ``api_key`` set, requests without the right key header get
401 (``Authorization: Bearer`` for openai / responses / generic, ``x-api-key`` + ``anthropic-version``
for anthropic).

Faults. ``server.script(*actions, match=None)`` queues actions for the next requests (that satisfy
``match(recorded_request)``, if given); ``server.always(action, match=None)`` applies one to every such
request. Actions: :func:`http_error` (optionally with ``Retry-After``), :func:`slow` (answer after a
delay), :func:`malformed` (200 with a body that is not JSON), :func:`drop_field` (a normal answer with a
field removed), :func:`json_reply` (any JSON body). ``server.latency`` (a function of the recorded request)
delays normal answers, e.g. to make responses arrive out of order.

Everything received is recorded (``server.requests``: path, lower-cased headers, parsed body, arrival
time), with ``server.request_count`` and ``server.max_in_flight``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

FORMAT_PATHS = {
    "generic": "/generate",
    "openai": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "openai_responses": "/v1/responses",
}
_PATH_FORMATS = {path: fmt for fmt, path in FORMAT_PATHS.items()}
_ALIASES = {"responses": "openai_responses", "codex": "openai_responses"}


@dataclass(frozen=True)
class Action:
    """What the server does with one request instead of (or before) its normal answer."""

    kind: str  # "status" | "slow" | "malformed" | "json" | "drop_field"
    status: int = 200
    retry_after: str | None = None
    delay: float = 0.0
    payload: Any = None
    field: str | None = None


def http_error(status: int, retry_after: str | float | None = None, message: str = "scripted error") -> Action:
    """Answer ``status`` with a JSON error body (and a ``Retry-After`` header when given)."""
    return Action("status", status=status, retry_after=None if retry_after is None else str(retry_after),
                  payload={"error": {"message": message, "code": status}})


def slow(delay: float) -> Action:
    """Answer normally after ``delay`` seconds (past a short client timeout, the client has gone)."""
    return Action("slow", delay=delay)


def malformed(body: bytes = b'{"choices": [{"message": ') -> Action:
    """Answer 200 with ``body``, which is not valid JSON."""
    return Action("malformed", payload=body)


def json_reply(obj: Any, status: int = 200) -> Action:
    """Answer ``status`` with ``obj`` as the JSON body."""
    return Action("json", status=status, payload=obj)


def drop_field(field: str) -> Action:
    """Answer normally but without the top-level ``field`` (e.g. ``choices``, ``content``, ``output``)."""
    return Action("drop_field", field=field)


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes
    time: float


@dataclass
class _Rule:
    action: Action
    remaining: int | None  # None: forever
    match: Callable[[RecordedRequest], bool] | None


def prompt_text(fmt: str, body: Any) -> str:
    """The prompt the server answers: the text prompt, or the last user message's content."""
    if not isinstance(body, dict):
        return ""
    if fmt == "openai" or fmt == "anthropic":
        prompt = body.get("messages")
    elif fmt == "openai_responses":
        prompt = body.get("input")
    else:
        prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users:
            return str(users[-1])
    return ""


def reply_text(prompt: str, k: int, max_words: int | None) -> tuple[str, bool]:
    """``"re: {prompt} #{k}"`` cut to ``max_words`` words; returns the text and whether it was cut."""
    words = f"re: {prompt} #{k}".split(" ")
    if max_words is not None and len(words) > max_words:
        return " ".join(words[:max_words]), True
    return " ".join(words), False


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode("utf-8")


class APIServer:
    """A threaded HTTP server speaking the generic, OpenAI chat, Anthropic and OpenAI Responses formats."""

    def __init__(self, api_key: str | None = None, generic_field: str = "completions", max_n: int | None = None):
        self.api_key = api_key
        self.generic_field = generic_field
        self.max_n = max_n
        self.latency: Callable[[RecordedRequest], float] | None = None
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self._requests: list[RecordedRequest] = []
        self._seen: Counter[tuple[str, str]] = Counter()
        self._in_flight = 0
        self.max_in_flight = 0
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> APIServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                owner._handle(self)

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name="api-test-server")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes slow handlers
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> APIServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- addresses and records -------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the API test server is not running; call start() first")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def url(self, format_or_path: str = "openai") -> str:
        """The endpoint URL of a format (``openai``, ``anthropic``, ...) or of a literal ``/path``."""
        if format_or_path.startswith("/"):
            path = format_or_path
        else:
            path = FORMAT_PATHS[_ALIASES.get(format_or_path, format_or_path)]
        return self.base_url + path

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self._requests)

    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    # -- scripting -------------------------------------------------------------------------------------

    def script(self, *actions: Action, match: Callable[[RecordedRequest], bool] | None = None) -> None:
        """The next requests (matching ``match``) get ``actions``, one each, in order."""
        with self._lock:
            self._rules.extend(_Rule(a, 1, match) for a in actions)

    def always(self, action: Action, match: Callable[[RecordedRequest], bool] | None = None) -> None:
        """Every request (matching ``match``) gets ``action``, after any scripted one-off actions."""
        with self._lock:
            self._rules.append(_Rule(action, None, match))

    def reset(self) -> None:
        """Forget scripted actions, records and counters."""
        with self._lock:
            self._rules.clear()
            self._requests.clear()
            self._seen.clear()
            self.max_in_flight = 0
        self.latency = None

    def _next_action(self, record: RecordedRequest) -> Action | None:
        with self._lock:
            for rule in self._rules:
                if rule.match is not None and not rule.match(record):
                    continue
                if rule.remaining is None:
                    return rule.action
                rule.remaining -= 1
                self._rules.remove(rule)
                return rule.action
        return None

    # -- serving ---------------------------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = None
        record = RecordedRequest(
            path=handler.path,
            headers={k.lower(): v for k, v in handler.headers.items()},
            body=body,
            raw=raw,
            time=time.monotonic(),
        )
        with self._lock:
            self._requests.append(record)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            reply = self._respond(record)
        finally:
            # Leave the in-flight count before writing: once the client has the answer it may send its
            # next request, which must not overlap this one in the count.
            with self._lock:
                self._in_flight -= 1
        if reply is None:
            return  # the server is stopping
        status, data, headers = reply
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (e.g. after its timeout)

    def _respond(self, record: RecordedRequest) -> tuple[int, bytes, dict[str, str]] | None:
        """The (status, body, headers) to send, or None when the server stopped during a delay."""
        action = self._next_action(record)
        if action is not None and action.kind == "status":
            headers = {"Retry-After": action.retry_after} if action.retry_after is not None else {}
            return action.status, _dumps(action.payload), headers
        if action is not None and action.kind == "malformed":
            return 200, action.payload, {}
        if action is not None and action.kind == "json":
            return action.status, _dumps(action.payload), {}
        if action is not None and action.kind == "slow":
            if self._stop.wait(action.delay):
                return None
        elif self.latency is not None:
            if self._stop.wait(self.latency(record)):
                return None

        fmt = _PATH_FORMATS.get(record.path)
        if fmt is None:
            return 404, _dumps({"error": {"message": f"no route {record.path}"}}), {}
        if not isinstance(record.body, dict):
            return 400, _dumps({"error": {"message": "request body is not a JSON object"}}), {}
        denied = self._check_auth(fmt, record.headers)
        if denied:
            return 401, _dumps({"error": {"message": denied}}), {}
        answer = self._answer(fmt, record.body)
        if action is not None and action.kind == "drop_field":
            answer.pop(action.field, None)
        return 200, _dumps(answer), {}

    def _check_auth(self, fmt: str, headers: dict[str, str]) -> str | None:
        if self.api_key is None:
            return None
        if fmt == "anthropic":
            if headers.get("x-api-key") != self.api_key:
                return "invalid x-api-key"
            if not headers.get("anthropic-version"):
                return "anthropic-version header is required"
            return None
        if headers.get("authorization") != f"Bearer {self.api_key}":
            return "invalid bearer token"
        return None

    def _answer(self, fmt: str, body: dict) -> dict:
        prompt = prompt_text(fmt, body)
        if fmt in ("openai", "generic"):
            n = int(body.get("n", 1))
            if self.max_n is not None:
                n = min(n, self.max_n)
            with self._lock:
                first = self._seen[(fmt, prompt)]
                self._seen[(fmt, prompt)] += n
            limit = body.get("max_tokens") if fmt == "openai" else body.get("max_new_tokens")
            replies = [reply_text(prompt, first + k, limit) for k in range(n)]
            if fmt == "generic":
                texts = [text for text, _ in replies]
                answer: dict = {}
                node = answer
                parts = self.generic_field.split(".")
                for part in parts[:-1]:
                    node = node.setdefault(part, {})
                node[parts[-1]] = texts
                return answer
            choices = []
            for k, (text, cut) in enumerate(replies):
                finish = "length" if cut else "stop"
                for stop in body.get("stop") or []:
                    if stop and stop in text:
                        text, finish = text[: text.index(stop)], "stop"
                choices.append({"index": k, "message": {"role": "assistant", "content": text},
                                "finish_reason": finish})
            return {"id": "chatcmpl-test", "object": "chat.completion", "model": body.get("model"),
                    "choices": choices}
        with self._lock:
            k = self._seen[(fmt, prompt)]
            self._seen[(fmt, prompt)] += 1
        if fmt == "anthropic":
            text, cut = reply_text(prompt, k, body.get("max_tokens"))
            return {"id": "msg_test", "type": "message", "role": "assistant", "model": body.get("model"),
                    "content": [{"type": "text", "text": text}],
                    "stop_reason": "max_tokens" if cut else "end_turn"}
        text, cut = reply_text(prompt, k, body.get("max_output_tokens"))
        answer = {"id": "resp_test", "object": "response", "model": body.get("model"),
                  "status": "incomplete" if cut else "completed",
                  "output": [{"type": "reasoning", "summary": []},
                             {"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": text, "annotations": []}]}]}
        if cut:
            answer["incomplete_details"] = {"reason": "max_output_tokens"}
        return answer


@pytest.fixture
def api_server():
    """A running :class:`APIServer` (no key required), stopped after the test."""
    with APIServer() as server:
        yield server
