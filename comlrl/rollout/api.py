"""Rollout backend for remote models behind an HTTP API.

Four wire formats, chosen by name (lower-cased and stripped; ``responses`` and ``codex`` are aliases of
``openai_responses``):

- ``generic``: POST ``{prompt, n, num_return_sequences, max_new_tokens, temperature, top_p, top_k, stop,
  seed, model?}`` plus the request's ``metadata`` keys at the top level (pass ``{"agent_idx": i,
  "batch_item": item}`` to reproduce the public CoMLRL payload). Completions are read from the dotted
  ``response_field`` (default ``completions``; integer parts index lists), which may hold a list or a
  single completion; each completion is a string or a dict with ``text`` / ``content`` / ``completion`` /
  ``response`` / ``message.content`` (and optionally ``finish_reason``).
- ``openai``: chat completions ``{model, messages, n, temperature, top_p, max_tokens, stop, seed}``;
  text from ``choices[i].message.content``, finish from ``choices[i].finish_reason``.
- ``anthropic``: messages API with ``x-api-key`` and ``anthropic-version`` headers, system messages moved
  to ``system``; one request per candidate; text is the concatenation of the ``content[]`` text blocks;
  ``stop_reason == "max_tokens"`` means ``length``.
- ``openai_responses``: ``{model, input, max_output_tokens}``; one request per candidate; text from
  ``output[].content[]`` blocks of type ``output_text`` / ``text``, else the top-level ``output_text``;
  ``status == "incomplete"`` with reason ``max_output_tokens`` means ``length``. ``temperature`` /
  ``top_p`` are sent only when they differ from 1.0, because reasoning models reject them.

For ``generic`` and ``openai``, a response with fewer completions than asked is topped up by further
requests for the remainder (some OpenAI-compatible servers ignore ``n``); extra completions are dropped.
Stop strings are also applied to the returned text on the client, since not every format can send them.
``extra_body`` is merged over every request body; a ``None`` value there removes that key (e.g.
``{"max_tokens": None, "max_completion_tokens": 256}``).

Failures. 429, 408, 5xx, timeouts, connection errors and malformed JSON are retried with exponential
backoff and full jitter (a numeric ``Retry-After`` header is honoured, capped by ``backoff_max``); malformed
JSON counts as transient because it is what a proxy's error page or a truncated body looks like. Other
4xx fail at once. A call that still fails raises :class:`APIRequestError` (transport / status) or
:class:`APIResponseError` (bad JSON, missing field), both naming the endpoint and the attempts made.
:meth:`APIBackend.generate_or_errors` returns these errors in place of the failed requests so that a
caller can drop and count them; :meth:`APIBackend.generate` raises the first one.

Completions carry no token ids: ``prompt_token_ids`` / ``token_ids`` / ``logprobs`` are empty and
callers tokenize ``text`` once.
"""

from __future__ import annotations

import dataclasses
import http.client
import ipaddress
import json
import logging
import os
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from comlrl.rollout.types import (
    FINISH_LENGTH,
    FINISH_STOP,
    Completion,
    GenerationRequest,
    SamplingParams,
)
from comlrl.seeding import derive_seed

logger = logging.getLogger(__name__)

KNOWN_FORMATS = ("generic", "openai", "anthropic", "openai_responses")
FORMAT_ALIASES = {"responses": "openai_responses", "codex": "openai_responses"}
# Formats whose request carries ``n``; the others send one request per candidate.
_MULTI_N_FORMATS = ("generic", "openai")
ANTHROPIC_VERSION = "2023-06-01"
_RETRYABLE_STATUS = frozenset({408, 429})
_LENGTH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens", "max_new_tokens"})
_GENERIC_TEXT_KEYS = ("text", "content", "completion", "response")
_ERROR_BODY_CHARS = 300


class APIError(RuntimeError):
    """Base class of API backend failures; ``url`` is the endpoint and ``attempts`` the HTTP tries made."""

    def __init__(self, message: str, *, url: str, attempts: int) -> None:
        super().__init__(message)
        self.url = url
        self.attempts = attempts


class APIRequestError(APIError):
    """The endpoint could not be reached or answered with an error status (after retries if retryable).

    ``status`` is the last HTTP status (``None`` for timeouts and connection errors) and ``last_error``
    describes the last failure.
    """

    def __init__(
        self, message: str, *, url: str, attempts: int, status: int | None, last_error: str
    ) -> None:
        super().__init__(message, url=url, attempts=attempts)
        self.status = status
        self.last_error = last_error


class APIResponseError(APIError):
    """The endpoint answered 200 but the body was not JSON or lacked what the format needs (``detail``)."""

    def __init__(self, message: str, *, url: str, attempts: int, detail: str) -> None:
        super().__init__(message, url=url, attempts=attempts)
        self.detail = detail


class _ShapeError(ValueError):
    """A parser found the response body missing something; wrapped into :class:`APIResponseError`."""


# ---------------------------------------------------------------------------------------------------
# Pure helpers


def normalize_format(name: str) -> str:
    """Canonical format name: lower-cased, stripped, aliases resolved; unknown names are a ValueError."""
    if not isinstance(name, str):
        raise ValueError(f"`format` must be a string, got {type(name).__name__}")
    key = name.strip().lower()
    key = FORMAT_ALIASES.get(key, key)
    if key not in KNOWN_FORMATS:
        aliases = ", ".join(f"{a} -> {t}" for a, t in FORMAT_ALIASES.items())
        raise ValueError(
            f"`format` must be one of {', '.join(KNOWN_FORMATS)} (aliases: {aliases}), got {name!r}"
        )
    return key


def backoff_delay(retry: int, base: float, cap: float, rng: random.Random) -> float:
    """Full-jitter backoff: uniform in ``[0, min(cap, base * 2**retry)]`` for the ``retry``-th retry (0-based)."""
    if retry < 0:
        raise ValueError(f"`retry` must be >= 0, got {retry}")
    # min() before the power would overflow for large retry counts, so clamp the exponent.
    ceiling = min(cap, base * 2.0 ** min(retry, 60))
    return rng.uniform(0.0, ceiling)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a numeric ``Retry-After`` header; ``None`` when absent, negative or not a number."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None  # HTTP-date form: fall back to the jittered backoff
    if seconds != seconds or seconds < 0 or seconds == float("inf"):
        return None
    return seconds


def map_finish_reason(reason: Any) -> str:
    """``length`` for the formats' token-limit reasons, ``stop`` for anything else (end of turn, stop string)."""
    return FINISH_LENGTH if isinstance(reason, str) and reason.lower() in _LENGTH_REASONS else FINISH_STOP


def apply_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` before the earliest stop string; returns the text and whether a stop string was found."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    if cut < 0:
        return text, False
    return text[:cut], True


def dotted_get(data: Any, path: str) -> Any:
    """Follow a dotted path through dicts (keys) and lists (integer parts); ``_ShapeError`` names the gap."""
    node = data
    walked: list[str] = []
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.lstrip("-").isdigit() and -len(node) <= int(part) < len(node):
            node = node[int(part)]
        else:
            where = ".".join(walked) or "the top level"
            raise _ShapeError(f"field `{path}` is missing (no `{part}` under {where})")
        walked.append(part)
    return node


def json_safe(value: Any) -> Any:
    """A JSON-serialisable copy: tuples/sets become lists, numpy and torch values plain numbers or lists,
    dataclasses dicts, and anything else its ``str``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((json_safe(v) for v in value), key=repr)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_safe(dataclasses.asdict(value))
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars, torch tensors
    if callable(tolist):
        return json_safe(tolist())
    return str(value)


def prompt_messages(request: GenerationRequest, index: int) -> list[dict[str, Any]]:
    """Chat messages for a request: text becomes one user message, chat messages pass through."""
    kind = request.kind
    if kind == "token_ids":
        raise ValueError(
            f"request {index}: the API backend cannot send a token-id prompt; pass text or chat messages"
        )
    if kind == "text":
        return [{"role": "user", "content": request.prompt}]
    messages = []
    for m_idx, message in enumerate(request.prompt):
        if "role" not in message or "content" not in message:
            raise ValueError(
                f"request {index}: chat message {m_idx} must have 'role' and 'content', got keys {sorted(message)}"
            )
        messages.append(dict(message))
    return messages


def _drop_none(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


# ---------------------------------------------------------------------------------------------------
# Request bodies and response parsers, one pair per format. Parsers return (text, finish_reason) pairs.


def _openai_body(model: str, messages: list, n: int, params: SamplingParams, seed: int | None) -> dict:
    return {
        "model": model,
        "messages": messages,
        "n": n,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "max_tokens": params.max_new_tokens,
        "stop": list(params.stop) or None,
        "seed": seed,
    }


def _parse_openai(data: dict) -> list[tuple[str, str]]:
    choices = data.get("choices")
    if not isinstance(choices, list):
        raise _ShapeError("field `choices` is missing or not a list")
    out = []
    for i, choice in enumerate(choices):
        if not isinstance(choice, Mapping):
            raise _ShapeError(f"`choices[{i}]` is not an object")
        message = choice.get("message")
        if isinstance(message, Mapping) and "content" in message:
            text = message["content"]
        elif "text" in choice:  # legacy completions shape some compatible servers still use
            text = choice["text"]
        else:
            raise _ShapeError(f"field `choices[{i}].message.content` is missing")
        # A null content is a refusal or a tool call: an empty completion, not a transport failure.
        out.append(("" if text is None else str(text), map_finish_reason(choice.get("finish_reason"))))
    return out


def _anthropic_body(model: str, messages: list, params: SamplingParams) -> dict:
    system = [str(m["content"]) for m in messages if m["role"] == "system"]
    return {
        "model": model,
        "max_tokens": params.max_new_tokens,
        "system": "\n\n".join(system) if system else None,
        "messages": [m for m in messages if m["role"] != "system"],
        "temperature": params.temperature,
        # Newer Claude models refuse temperature and top_p together, so top_p goes only when it truncates.
        "top_p": params.top_p if params.top_p < 1.0 else None,
        "top_k": params.top_k or None,
        "stop_sequences": list(params.stop) or None,
    }


def _parse_anthropic(data: dict) -> list[tuple[str, str]]:
    content = data.get("content")
    if not isinstance(content, list):
        raise _ShapeError("field `content` is missing or not a list")
    texts = [b.get("text") for b in content if isinstance(b, Mapping) and b.get("type") == "text"]
    if not texts or any(not isinstance(t, str) for t in texts):
        raise _ShapeError("field `content[].text` is missing (no text block)")
    return [("".join(texts), map_finish_reason(data.get("stop_reason")))]


def _responses_body(model: str, messages: list, params: SamplingParams) -> dict:
    return {
        "model": model,
        "input": messages,
        "max_output_tokens": params.max_new_tokens,
        "temperature": params.temperature if params.temperature != 1.0 else None,
        "top_p": params.top_p if params.top_p != 1.0 else None,
    }


def _parse_responses(data: dict) -> list[tuple[str, str]]:
    texts: list[str] = []
    output = data.get("output")
    if isinstance(output, list):
        for item in output:
            if not isinstance(item, Mapping) or not isinstance(item.get("content"), list):
                continue  # reasoning and tool items carry no answer text
            for block in item["content"]:
                if (
                    isinstance(block, Mapping)
                    and block.get("type") in ("output_text", "text")
                    and isinstance(block.get("text"), str)
                ):
                    texts.append(block["text"])
    if not texts:
        if isinstance(data.get("output_text"), str):
            texts.append(data["output_text"])
        else:
            raise _ShapeError("field `output[].content[].text` (or `output_text`) is missing")
    details = data.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, Mapping) else None
    finish = FINISH_LENGTH if data.get("status") == "incomplete" and map_finish_reason(reason) == FINISH_LENGTH else FINISH_STOP
    return [("".join(texts), finish)]


def _generic_body(
    model: str | None, prompt: Any, n: int, params: SamplingParams, seed: int | None, metadata: dict
) -> dict:
    body = {
        "model": model or None,
        "prompt": prompt,
        "n": n,
        "num_return_sequences": n,
        "max_new_tokens": params.max_new_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,
        "stop": list(params.stop),
        "seed": seed,
    }
    clash = sorted(set(metadata) & set(body))
    if clash:
        raise ValueError(f"request metadata key(s) {clash} clash with the generic request body's own fields")
    body.update(json_safe(metadata))
    return body


def _parse_generic(data: Any, field: str) -> list[tuple[str, str]]:
    value = dotted_get(data, field)
    items = value if isinstance(value, list) else [value]
    out = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            out.append((item, FINISH_STOP))
            continue
        if isinstance(item, Mapping):
            text = next((item[k] for k in _GENERIC_TEXT_KEYS if isinstance(item.get(k), str)), None)
            if text is None and isinstance(item.get("message"), Mapping):
                text = item["message"].get("content")
            if isinstance(text, str):
                out.append((text, map_finish_reason(item.get("finish_reason"))))
                continue
        raise _ShapeError(
            f"`{field}[{i}]` is neither a string nor an object with one of "
            f"{', '.join(_GENERIC_TEXT_KEYS)}, message.content"
        )
    return out


# ---------------------------------------------------------------------------------------------------


def _is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class APIBackend:
    """A :class:`~comlrl.rollout.types.RolloutBackend` that samples from a remote model over HTTP.

    Args:
        format: ``generic``, ``openai``, ``anthropic`` or ``openai_responses`` (``responses``, ``codex``).
        url: the full endpoint URL (e.g. ``https://api.openai.com/v1/chat/completions``).
        model: the remote model name (optional for ``generic``).
        api_key_env: name of the environment variable holding the key; read once, here. ``None``
            sends no key (local servers). The key is never logged or shown in errors.
        timeout: socket timeout of one HTTP request in seconds.
        max_retries: retries after the first attempt for retryable failures.
        backoff_base, backoff_max: the ``k``-th retry waits ``uniform(0, min(backoff_max,
            backoff_base * 2**k))`` seconds, or ``min(Retry-After, backoff_max)`` when the server says.
        response_field: dotted path of the completions in a ``generic`` response.
        headers: extra headers, sent last (they override the defaults, e.g. ``anthropic-version``).
        seed: seeds the backend's own jitter generator.
        extra_body: merged over every request body (``None`` values delete keys).
        max_concurrency: HTTP requests in flight at once within one ``generate`` call.
        max_n_per_request: cap on ``n`` per request for ``generic`` / ``openai`` (``None``: no cap).
        retry_malformed_json: whether a 200 answer that is not JSON is retried (default True).

    ``stats`` counts ``requests`` (generation requests asked), ``completions`` returned, ``http_requests``
    sent, ``retries``, ``rate_limited`` (429), ``server_errors`` (5xx), ``timeouts``, ``connection_errors``,
    ``malformed`` (non-JSON answers), ``failed_calls`` (HTTP calls that failed for good) and
    ``failed_requests`` (generation requests lost to them).
    """

    def __init__(
        self,
        format: str,
        url: str,
        model: str | None = None,
        api_key_env: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        response_field: str = "completions",
        headers: Mapping[str, str] | None = None,
        seed: int = 0,
        extra_body: Mapping[str, Any] | None = None,
        max_concurrency: int = 8,
        max_n_per_request: int | None = None,
        retry_malformed_json: bool = True,
    ) -> None:
        self.format = normalize_format(format)
        if not isinstance(url, str) or urllib.parse.urlsplit(url.strip()).scheme not in ("http", "https"):
            raise ValueError(f"`url` must be an http(s) URL, got {url!r}")
        self.url = url.strip()
        if self.format != "generic" and not model:
            raise ValueError(f"`model` is required for the {self.format} format")
        self.model = model
        if timeout is None or timeout <= 0:
            raise ValueError(f"`timeout` must be > 0 seconds, got {timeout}")
        if max_retries < 0:
            raise ValueError(f"`max_retries` must be >= 0, got {max_retries}")
        if backoff_base < 0:
            raise ValueError(f"`backoff_base` must be >= 0, got {backoff_base}")
        if backoff_max < 0:
            raise ValueError(f"`backoff_max` must be >= 0, got {backoff_max}")
        if max_concurrency < 1:
            raise ValueError(f"`max_concurrency` must be >= 1, got {max_concurrency}")
        if max_n_per_request is not None and max_n_per_request < 1:
            raise ValueError(f"`max_n_per_request` must be >= 1 or None, got {max_n_per_request}")
        if not response_field or not isinstance(response_field, str):
            raise ValueError(f"`response_field` must be a non-empty dotted path, got {response_field!r}")
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.response_field = response_field
        self.extra_body = dict(extra_body or {})
        self.max_concurrency = int(max_concurrency)
        self.max_n_per_request = max_n_per_request
        self.retry_malformed_json = retry_malformed_json
        self.api_key_env = api_key_env
        self._api_key = self._read_key(api_key_env)
        self._headers = self._build_headers(headers)
        # A loopback endpoint is never reached through a proxy, whatever the environment says.
        handlers = [urllib.request.ProxyHandler({})] if _is_loopback(self.url) else []
        self._opener = urllib.request.build_opener(*handlers)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.stats: dict[str, int] = {}
        self.reset_stats()

    # -- setup ----------------------------------------------------------------------------------------

    @staticmethod
    def _read_key(env_name: str | None) -> str | None:
        if env_name is None:
            return None
        key = os.environ.get(env_name, "")
        if not key.strip():
            raise ValueError(
                f"`api_key_env` names the environment variable {env_name!r}, which is unset or empty; "
                f"export {env_name}=<your key> or pass api_key_env=None for an endpoint without a key"
            )
        return key.strip()

    def _build_headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.format == "anthropic":
            headers["anthropic-version"] = ANTHROPIC_VERSION
            if self._api_key:
                headers["x-api-key"] = self._api_key
        elif self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        # Header names are case-insensitive: a caller's header replaces a default of any spelling.
        for name, value in (extra or {}).items():
            for existing in [h for h in headers if h.lower() == name.lower()]:
                del headers[existing]
            headers[name] = value
        return headers

    def __repr__(self) -> str:
        return (
            f"APIBackend(format={self.format!r}, url={self._redact(self.url)!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r})"
        )

    def reset_stats(self) -> None:
        with self._lock:
            self.stats.clear()
            self.stats.update(
                requests=0, completions=0, http_requests=0, retries=0, rate_limited=0, server_errors=0,
                timeouts=0, connection_errors=0, malformed=0, failed_calls=0, failed_requests=0,
            )

    def _count(self, key: str, amount: int = 1) -> None:
        with self._lock:
            self.stats[key] += amount

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    # -- generation -----------------------------------------------------------------------------------

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        """``n`` completions per request in candidate order; raises the first failure (in request order)."""
        results = self.generate_or_errors(requests, params)
        for result in results:
            if isinstance(result, APIError):
                raise result
        return results  # type: ignore[return-value]

    def generate_or_errors(
        self, requests: Sequence[GenerationRequest], params: SamplingParams | None = None
    ) -> list[list[Completion] | APIError]:
        """Like :meth:`generate`, but a request whose call failed for good yields its :class:`APIError`.

        Bad input (a token-id prompt, a metadata key clash) still raises ``ValueError`` before any request
        is sent.
        """
        default = params or SamplingParams()
        plans = []  # (request index, candidate start, count, body builder)
        per_request: list[tuple[SamplingParams, int | None]] = []
        for idx, request in enumerate(requests):
            p = request.params or default
            base_seed = request.seed if request.seed is not None else p.seed
            per_request.append((p, base_seed))
            plans.extend(self._plan(idx, request, p, base_seed))
        self._count("requests", len(requests))

        outcomes: list[list[tuple[str, str]] | APIError]
        if len(plans) <= 1 or self.max_concurrency == 1:
            outcomes = [self._run_call(*plan) for plan in plans]
        else:
            with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(plans))) as pool:
                outcomes = list(pool.map(lambda plan: self._run_call(*plan), plans))

        pieces: list[dict[int, list[tuple[str, str]]]] = [{} for _ in requests]
        errors: list[APIError | None] = [None] * len(requests)
        for (idx, start, _count, _body), outcome in zip(plans, outcomes):
            if isinstance(outcome, APIError):
                errors[idx] = errors[idx] or outcome
            else:
                pieces[idx][start] = outcome

        results: list[list[Completion] | APIError] = []
        for idx, request in enumerate(requests):
            if errors[idx] is not None:
                self._count("failed_requests")
                results.append(errors[idx])
                continue
            p, base_seed = per_request[idx]
            texts = [pair for start in sorted(pieces[idx]) for pair in pieces[idx][start]]
            completions = []
            for j, (raw_text, reason) in enumerate(texts):
                text, stopped = apply_stop(raw_text, p.stop)
                completions.append(
                    Completion(
                        prompt_token_ids=[],
                        token_ids=[],
                        logprobs=[],
                        text=text,
                        finish_reason=FINISH_STOP if stopped else reason,
                        policy=request.policy,
                        policy_version=0,
                        seed=derive_seed(base_seed, j) if base_seed is not None else None,
                    )
                )
            self._count("completions", len(completions))
            results.append(completions)
        return results

    def _plan(self, idx: int, request: GenerationRequest, p: SamplingParams, base_seed: int | None) -> list:
        """The HTTP calls one request needs: (request index, first candidate, count, build), where
        ``build(first, k)`` is the body asking for candidates ``first .. first + k - 1``."""
        messages = prompt_messages(request, idx)  # also rejects token-id prompts, naming the request

        def seed_for(first: int) -> int | None:
            # Seeded by the first candidate asked for, so a top-up request never repeats an earlier seed.
            return derive_seed(base_seed, first) if base_seed is not None else None

        if self.format == "openai":
            def build(first: int, k: int) -> dict:
                return _openai_body(self.model, messages, k, p, seed_for(first))
        elif self.format == "generic":
            _generic_body(self.model, request.prompt, 1, p, None, request.metadata)  # fail early on clashes

            def build(first: int, k: int) -> dict:
                return _generic_body(self.model, request.prompt, k, p, seed_for(first), request.metadata)
        elif self.format == "anthropic":
            def build(first: int, k: int) -> dict:
                return _anthropic_body(self.model, messages, p)
        else:
            def build(first: int, k: int) -> dict:
                return _responses_body(self.model, messages, p)

        if self.format in _MULTI_N_FORMATS:
            chunk = self.max_n_per_request or p.n
            return [(idx, start, min(chunk, p.n - start), build) for start in range(0, p.n, chunk)]
        return [(idx, j, 1, build) for j in range(p.n)]

    def _run_call(self, idx: int, start: int, count: int, build) -> list[tuple[str, str]] | APIError:
        """Collect ``count`` completions, topping up when the server returns fewer than asked."""
        got: list[tuple[str, str]] = []
        try:
            while len(got) < count:
                body = dict(build(start + len(got), count - len(got)))
                body.update(self.extra_body)
                data, attempts = self._post_json(_drop_none(body))
                try:
                    parsed = self._parse(data)
                except _ShapeError as exc:
                    raise APIResponseError(
                        f"API response from {self._redact(self.url)} is missing what the {self.format} "
                        f"format needs: {exc}",
                        url=self.url, attempts=attempts, detail=str(exc),
                    ) from None
                if not parsed:
                    raise APIResponseError(
                        f"API response from {self._redact(self.url)} held no completions "
                        f"(asked for {count - len(got)})",
                        url=self.url, attempts=attempts, detail="no completions",
                    )
                got.extend(parsed)
        except APIError as exc:
            self._count("failed_calls")
            logger.warning("API call for request %d failed: %s", idx, exc)
            return exc
        return got[:count]

    def _parse(self, data: Any) -> list[tuple[str, str]]:
        if self.format == "generic":
            return _parse_generic(data, self.response_field)
        if not isinstance(data, Mapping):
            raise _ShapeError(f"the body is a JSON {type(data).__name__}, not an object")
        if self.format == "openai":
            return _parse_openai(data)
        if self.format == "anthropic":
            return _parse_anthropic(data)
        return _parse_responses(data)

    # -- transport ------------------------------------------------------------------------------------

    def _post_json(self, body: dict) -> tuple[Any, int]:
        """POST with retries; returns (parsed JSON, attempts used) or raises an :class:`APIError`."""
        payload = json.dumps(body).encode("utf-8")
        url = self._redact(self.url)
        attempts = 0
        while True:
            attempts += 1
            self._count("http_requests")
            retry_after: float | None = None
            status: int | None = None
            malformed = False
            try:
                request = urllib.request.Request(self.url, data=payload, headers=self._headers, method="POST")
                with self._opener.open(request, timeout=self.timeout) as response:
                    raw = response.read()
                try:
                    return json.loads(raw.decode("utf-8")), attempts
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    self._count("malformed")
                    malformed = True
                    error = f"malformed JSON ({exc}; body starts {raw[:80]!r})"
                    retryable = self.retry_malformed_json
            except urllib.error.HTTPError as exc:
                status = exc.code
                error = f"HTTP {status}{self._error_body(exc)}"
                retry_after = parse_retry_after(exc.headers.get("Retry-After") if exc.headers else None)
                retryable = status in _RETRYABLE_STATUS or 500 <= status < 600
                if status == 429:
                    self._count("rate_limited")
                elif status >= 500:
                    self._count("server_errors")
            except urllib.error.URLError as exc:
                if isinstance(exc.reason, TimeoutError):
                    self._count("timeouts")
                    error = f"timed out after {self.timeout:g}s"
                else:
                    self._count("connection_errors")
                    error = f"connection error ({exc.reason})"
                retryable = True
            except TimeoutError:
                self._count("timeouts")
                error = f"timed out after {self.timeout:g}s"
                retryable = True
            except (OSError, http.client.HTTPException) as exc:
                self._count("connection_errors")
                error = f"connection error ({type(exc).__name__}: {exc})"
                retryable = True

            error = self._redact(error)
            if not retryable or attempts > self.max_retries:
                why = "non-retryable" if not retryable else "retries exhausted"
                message = f"API request to {url} failed after {attempts} attempt(s) ({why}): {error}"
                if malformed:
                    raise APIResponseError(message, url=self.url, attempts=attempts, detail=error)
                raise APIRequestError(message, url=self.url, attempts=attempts, status=status, last_error=error)
            if retry_after is not None:
                delay = min(retry_after, self.backoff_max)
            else:
                with self._lock:
                    delay = backoff_delay(attempts - 1, self.backoff_base, self.backoff_max, self._rng)
            self._count("retries")
            logger.info(
                "API request to %s: %s; retry %d/%d in %.3fs", url, error, attempts, self.max_retries, delay
            )
            time.sleep(delay)

    def _error_body(self, exc: urllib.error.HTTPError) -> str:
        try:
            text = exc.read(_ERROR_BODY_CHARS).decode("utf-8", "replace").strip()
        except Exception:  # the status alone is still a useful message
            return ""
        finally:
            exc.close()
        return f" ({text})" if text else ""
